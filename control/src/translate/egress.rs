//! Pods' traffic to addresses outside the cluster, `local` gateway mode: each pod leaves
//! through its own node.
//!
//! On the cluster router:
//! - a default route per family (`0.0.0.0/0` via the router's own join address), so the
//!   routing stage lets such traffic through to the policy stage (OVN drops a packet no
//!   route matches before any policy sees it); traffic no policy reroutes goes nowhere;
//! - a policy (priority [`CLUSTER_PRIORITY`]) that leaves traffic to the cluster's own
//!   networks (the Subnets routed here, the join network, the Service CIDRs) to normal
//!   routing;
//! - per node with a management port address, a reroute policy (priority
//!   [`NODE_PRIORITY`]): `ip4.src == $<node's pods>` → the node's management port
//!   (`ovn-k8s-mp0`, the join address). The node's kernel then forwards the packet to its
//!   uplink and, for Subnets with `natOutgoing`, masquerades it to the node's address
//!   (the node agent's `table inet zstack-ovn`, `dataplane/src/host_nat.rs`); replies come
//!   back through the management port, which routes every Subnet.
//!
//! The pods of a node are an address set per node and family (they change with every pod;
//! only the set's members travel). Pods of VLAN (underlay) Subnets are left out: their
//! traffic leaves through the underlay's own gateway. IPv4 only for now: the join network
//! (and so the management port) has no IPv6 address.
//!
//! External mode creates none of this (the platform's router carries egress); gateway mode
//! `off` neither.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ovsdb::nb::{AddressSet, LogicalRouterPolicy, LogicalRouterStaticRoute};

use super::{ClusterConfig, GatewayMode, Input, Mode};
use crate::desired::{DesiredNb, RouterRows};
use crate::names::{self, CLUSTER_ROUTER};
use crate::reconcile::router_rows::ROW_KEY;

/// Priority of the policy keeping cluster-internal traffic on normal routing.
pub const CLUSTER_PRIORITY: i64 = 31_000;
/// Priority of the per-node reroute policies.
pub const NODE_PRIORITY: i64 = 30_000;

fn ids(cfg: &ClusterConfig, kind: &str, object: &str, row: &str) -> BTreeMap<String, String> {
    let mut ids = names::owned(&cfg.cluster_id, kind, object);
    ids.insert(ROW_KEY.into(), row.into());
    ids
}

/// Adds the egress rows for `input` to `nb` (after the NetworkPolicy rows, whose address
/// sets these join).
pub fn add(cfg: &ClusterConfig, input: &Input<'_>, nb: &mut DesiredNb) {
    if cfg.mode == Mode::External || cfg.gateway == GatewayMode::Off {
        return;
    }
    let IpAddr::V4(join_gw) = cfg.join_gateway else {
        return; // an IPv6-only join network: no IPv4 egress through it
    };
    let routed: BTreeMap<&str, bool> = input
        .subnets
        .iter()
        .filter(|s| s.external_logical_switch.is_none())
        .map(|s| (s.name.as_str(), s.vlan_id.is_none()))
        .collect();
    let mut rows = RouterRows::default();
    rows.routes.insert(
        "egress-default-v4".into(),
        LogicalRouterStaticRoute {
            ip_prefix: "0.0.0.0/0".into(),
            nexthop: join_gw.to_string(),
            external_ids: ids(cfg, "egress", "default", "egress-default-v4"),
            ..Default::default()
        },
    );
    let internal: BTreeSet<String> = input
        .subnets
        .iter()
        .filter(|s| routed.contains_key(s.name.as_str()))
        .flat_map(|s| s.cidrs.iter())
        .chain(std::iter::once(&cfg.join_cidr))
        .chain(cfg.service_cidrs.iter())
        .filter(|c| c.addr().is_ipv4())
        .map(|c| c.trunc().to_string())
        .collect();
    rows.policies.insert(
        "egress-cluster-v4".into(),
        LogicalRouterPolicy {
            priority: CLUSTER_PRIORITY,
            match_: format!(
                "ip4.dst == {{{}}}",
                internal.into_iter().collect::<Vec<_>>().join(", ")
            ),
            action: "allow".into(),
            external_ids: ids(cfg, "egress", "cluster", "egress-cluster-v4"),
            ..Default::default()
        },
    );
    // each node's pods (of routed, non-VLAN Subnets), IPv4
    let mut pods_of: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (pod, addrs) in &input.pods {
        let (Some(node), Some(true)) = (&pod.node, routed.get(addrs.subnet.as_str())) else {
            continue;
        };
        let set = pods_of.entry(node.as_str()).or_default();
        set.extend(
            addrs
                .ips
                .iter()
                .filter(|ip| ip.addr().is_ipv4())
                .map(|ip| ip.addr().to_string()),
        );
    }
    for (node, join) in &input.nodes {
        let Some(mgmt) = join.ips.iter().map(|n| n.addr()).find(IpAddr::is_ipv4) else {
            continue;
        };
        let set = api::names::egress_address_set(&cfg.cluster_id, &node.name, true);
        nb.netpol.address_sets.insert(
            set.clone(),
            AddressSet {
                name: set.clone(),
                addresses: pods_of.remove(node.name.as_str()).unwrap_or_default(),
                external_ids: names::owned(&cfg.cluster_id, "egress-node", &node.name),
                ..Default::default()
            },
        );
        let key = format!("egress-node-{}-v4", node.name);
        rows.policies.insert(
            key.clone(),
            LogicalRouterPolicy {
                priority: NODE_PRIORITY,
                match_: format!("ip4.src == ${set}"),
                action: "reroute".into(),
                nexthops: BTreeSet::from([mgmt.to_string()]),
                external_ids: ids(cfg, "egress-node", &node.name, &key),
                ..Default::default()
            },
        );
    }
    nb.router_rows.insert(CLUSTER_ROUTER.into(), rows);
}

#[cfg(test)]
mod tests;
