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
//!   (the node agent's `table inet zstack-ovn`, `dataplane/src/host/nat.rs`); replies come
//!   back through the management port, which routes every Subnet.
//!
//! The pods of a node are an address set per node and family (they change with every pod;
//! only the set's members travel). Pods of VLAN (underlay) Subnets are in them too: their
//! gateway is the cluster router's port on their switch. IPv6: the same rows per family when
//! the join network has an IPv6 part ([`super::JoinV6`], `--join-cidr-v6`: the management
//! ports then have an IPv6 address too); without it, pods' IPv6 traffic to the outside is
//! dropped by the cluster router (no route).
//!
//! `shared` gateway mode ([`super::gateway_router`]): a node whose agent reported a usable
//! gateway ([`api::gateway::NodeGateway`]) gets its gateway router, and its reroute policy
//! points at that router's join address instead; the router SNATs (`natOutgoing`) and
//! sends the traffic out of the node's gateway bridge without the host's kernel. Pods'
//! traffic to the nodes' own addresses still goes to their node's management port (a
//! policy at [`NODE_ADDRESS_PRIORITY`]: the router shares the node's address). A node
//! without a usable gateway report keeps the `local` path, and [`add`] says why. IPv6
//! takes the `local` path in `shared` mode too (the gateway routers are IPv4 for now).
//!
//! External mode creates none of this (the platform's router carries egress); gateway mode
//! `off` neither.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use ovsdb::nb::{AddressSet, LogicalRouterPolicy, LogicalRouterStaticRoute};

use super::gateway_router::{self, GatewayV6, NodeGateway};
use super::{ClusterConfig, GatewayMode, Input, Mode};
use crate::desired::{DesiredNb, RouterRows};
use crate::model::NodeInfo;
use crate::names::{self, CLUSTER_ROUTER};
use crate::reconcile::router_rows::ROW_KEY;

/// Priority of the policy keeping cluster-internal traffic on normal routing.
pub const CLUSTER_PRIORITY: i64 = 31_000;
/// Priority of the per-node reroute policies.
pub const NODE_PRIORITY: i64 = 30_000;
/// Priority of the per-node policies sending pods' traffic to the nodes' own addresses to
/// the management port (`shared` mode).
pub const NODE_ADDRESS_PRIORITY: i64 = 30_500;

fn ids(cfg: &ClusterConfig, kind: &str, object: &str, row: &str) -> BTreeMap<String, String> {
    let mut ids = names::owned(&cfg.cluster_id, kind, object);
    ids.insert(ROW_KEY.into(), row.into());
    ids
}

/// Why a node has no gateway router in `shared` mode (its pods use the `local` path).
pub type GatewayProblems = BTreeMap<String, NoGatewayRouter>;

/// The start of the reason of a node whose agent has not reported its gateway yet (a
/// state every node passes through, not a fault: [`NoGatewayRouter::NotReported`]).
pub const NOT_REPORTED_YET: &str = "the node agent has not reported a gateway interface";

/// Why a node gets no gateway router in `shared` mode; the text is the Node event's and
/// the log's reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoGatewayRouter {
    /// No gateway annotation on the Node yet.
    #[error("{NOT_REPORTED_YET} ({}) yet", api::keys::NODE_GATEWAY)]
    NotReported,
    /// The annotation is not a [`api::gateway::NodeGateway`] (`reason`: the JSON error).
    #[error("{}: not a gateway report: {reason}", api::keys::NODE_GATEWAY)]
    NotAReport { reason: String },
    /// The report offers no usable IPv4 gateway (or carries the agent's own verdict).
    #[error(transparent)]
    Unusable(#[from] api::gateway::GatewayUnusable),
    #[error("the node has no IPv4 management port address yet")]
    NoManagementV4,
    #[error(
        "management port address {management} is not in the lower half of the join network \
         {join}"
    )]
    OutsideJoin { management: IpAddr, join: IpNet },
}

/// What [`add`] decided about the nodes' gateways.
#[derive(Debug, Default)]
pub struct Egress {
    /// Nodes left without a gateway router in `shared` mode, with the reason.
    pub problems: GatewayProblems,
    /// Per node with a gateway router: its management port address of each family whose
    /// traffic leaves through that router (what [`super::gateway_return`] reroutes to).
    pub through_router: BTreeMap<String, Vec<IpAddr>>,
}

/// Adds the egress rows for `input` to `nb` (after the NetworkPolicy rows, whose address
/// sets these join, and after the Services, whose load balancers stay off the gateways'
/// external switches).
pub fn add(cfg: &ClusterConfig, input: &Input<'_>, nb: &mut DesiredNb) -> Egress {
    let mut problems = GatewayProblems::new();
    if cfg.mode == Mode::External || cfg.gateway == GatewayMode::Off {
        return Egress::default();
    }
    // every Subnet the cluster router routes (VLAN ones too: their pods' gateway is the
    // router's port on their switch)
    let routed: BTreeSet<&str> = input
        .subnets
        .iter()
        .filter(|s| s.external_logical_switch.is_none())
        .map(|s| s.name.as_str())
        .collect();
    // shared mode: each node's gateway router, or why it has none
    let mut gateways = BTreeMap::new();
    if cfg.gateway == GatewayMode::Shared {
        for (node, join) in &input.nodes {
            match usable_gateway(cfg, node, &join.ips) {
                Ok(gw) => {
                    gateways.insert(node.name.as_str(), gw);
                }
                Err(why) => {
                    problems.insert(node.name.clone(), why);
                }
            }
        }
    }
    let mut rows = RouterRows::default();
    let families = std::iter::once((cfg.join_cidr, cfg.join_gateway))
        .chain(cfg.join_v6.map(|v| (v.cidr, v.gateway)));
    for (join_cidr, join_gw) in families {
        let fam = Family::of(join_gw);
        add_family(
            cfg, input, &routed, fam, join_cidr, join_gw, &gateways, &mut rows, nb,
        );
    }
    nb.router_rows.insert(CLUSTER_ROUTER.into(), rows);
    let (routed_cidrs, snat) = gateway_cidrs(input, &routed);
    let mut through_router = BTreeMap::new();
    for (node, join) in &input.nodes {
        let Some(gw) = gateways.get(node.name.as_str()) else {
            continue;
        };
        gateway_router::add(cfg, gw, &routed_cidrs, &snat, nb);
        let mgmt: Vec<IpAddr> = join
            .ips
            .iter()
            .map(IpNet::addr)
            .filter(|a| a.is_ipv4() || gw.v6.is_some())
            .collect();
        through_router.insert(node.name.clone(), mgmt);
    }
    Egress {
        problems,
        through_router,
    }
}

/// One address family's names and match fields.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Family {
    v4: bool,
}

impl Family {
    fn of(ip: IpAddr) -> Family {
        Family { v4: ip.is_ipv4() }
    }
    /// `v4` / `v6`.
    fn tag(self) -> &'static str {
        if self.v4 { "v4" } else { "v6" }
    }
    /// `ip4` / `ip6`.
    fn ip(self) -> &'static str {
        if self.v4 { "ip4" } else { "ip6" }
    }
    fn default_route(self) -> &'static str {
        if self.v4 { "0.0.0.0/0" } else { "::/0" }
    }
    fn has(self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.v4
    }
}

/// One family's rows: the default route, the cluster policy, each node's address set and
/// reroute policy (in `shared` mode to the node's gateway router when it has this
/// family, with the policy keeping the nodes' own addresses on the management port).
#[allow(clippy::too_many_arguments)]
fn add_family(
    cfg: &ClusterConfig,
    input: &Input<'_>,
    routed: &BTreeSet<&str>,
    fam: Family,
    join_cidr: IpNet,
    join_gw: IpAddr,
    gateways: &BTreeMap<&str, NodeGateway<'_>>,
    rows: &mut RouterRows,
    nb: &mut DesiredNb,
) {
    let t = fam.tag();
    rows.routes.insert(
        format!("egress-default-{t}"),
        LogicalRouterStaticRoute {
            ip_prefix: fam.default_route().into(),
            nexthop: join_gw.to_string(),
            external_ids: ids(
                cfg,
                api::external_ids::kind::EGRESS,
                "default",
                &format!("egress-default-{t}"),
            ),
            ..Default::default()
        },
    );
    let internal: BTreeSet<String> = input
        .subnets
        .iter()
        .filter(|s| routed.contains(s.name.as_str()))
        .flat_map(|s| s.cidrs.iter())
        .chain(std::iter::once(&join_cidr))
        .chain(cfg.service_cidrs.iter())
        .filter(|c| fam.has(c.addr()))
        .map(|c| c.trunc().to_string())
        .collect();
    rows.policies.insert(
        format!("egress-cluster-{t}"),
        LogicalRouterPolicy {
            priority: CLUSTER_PRIORITY,
            match_: format!(
                "{}.dst == {{{}}}",
                fam.ip(),
                internal.into_iter().collect::<Vec<_>>().join(", ")
            ),
            action: "allow".into(),
            external_ids: ids(
                cfg,
                api::external_ids::kind::EGRESS,
                "cluster",
                &format!("egress-cluster-{t}"),
            ),
            ..Default::default()
        },
    );
    // each node's pods (of routed Subnets) of this family
    let mut pods_of: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (pod, addrs) in &input.pods {
        let Some(node) = pod
            .node
            .as_ref()
            .filter(|_| routed.contains(addrs.subnet.as_str()))
        else {
            continue;
        };
        let set = pods_of.entry(node.as_str()).or_default();
        set.extend(
            addrs
                .ips
                .iter()
                .filter(|ip| fam.has(ip.addr()))
                .map(|ip| ip.addr().to_string()),
        );
    }
    let nodes_set = node_addresses_set(cfg, input, fam, nb);
    for (node, join) in &input.nodes {
        let Some(mgmt) = join.ips.iter().map(|n| n.addr()).find(|a| fam.has(*a)) else {
            continue;
        };
        // the node's gateway router when it has this family, else its management port
        let nexthop = match gateways.get(node.name.as_str()) {
            Some(gw) if fam.v4 => IpAddr::V4(gw.join),
            Some(gw) => gw.v6.as_ref().map_or(mgmt, |v6| IpAddr::V6(v6.join)),
            None => mgmt,
        };
        let set = api::names::egress_address_set(&cfg.cluster_id, &node.name, fam.v4);
        nb.netpol.address_sets.insert(
            set.clone(),
            AddressSet {
                name: set.clone(),
                addresses: pods_of.remove(node.name.as_str()).unwrap_or_default(),
                external_ids: names::owned(
                    &cfg.cluster_id,
                    api::external_ids::kind::EGRESS_NODE,
                    &node.name,
                ),
                ..Default::default()
            },
        );
        let key = format!("egress-node-{}-{t}", node.name);
        rows.policies.insert(
            key.clone(),
            LogicalRouterPolicy {
                priority: NODE_PRIORITY,
                match_: format!("{}.src == ${set}", fam.ip()),
                action: "reroute".into(),
                nexthops: BTreeSet::from([nexthop.to_string()]),
                external_ids: ids(cfg, api::external_ids::kind::EGRESS_NODE, &node.name, &key),
                ..Default::default()
            },
        );
        if nexthop != mgmt {
            let key = format!("egress-node-{}-hosts-{t}", node.name);
            rows.policies.insert(
                key.clone(),
                LogicalRouterPolicy {
                    priority: NODE_ADDRESS_PRIORITY,
                    match_: format!(
                        "{ip}.src == ${set} && {ip}.dst == ${nodes_set}",
                        ip = fam.ip()
                    ),
                    action: "reroute".into(),
                    nexthops: BTreeSet::from([mgmt.to_string()]),
                    external_ids: ids(cfg, api::external_ids::kind::EGRESS_NODE, &node.name, &key),
                    ..Default::default()
                },
            );
        }
    }
}

/// The CIDRs the gateway routers route back in (the routed Subnets) and those of them
/// they SNAT (`natOutgoing`).
fn gateway_cidrs(input: &Input<'_>, routed: &BTreeSet<&str>) -> (Vec<IpNet>, Vec<IpNet>) {
    let (mut all, mut snat) = (Vec::new(), Vec::new());
    for s in &input.subnets {
        if !routed.contains(s.name.as_str()) {
            continue;
        }
        for c in &s.cidrs {
            all.push(c.trunc());
            if s.nat_outgoing {
                snat.push(c.trunc());
            }
        }
    }
    (all, snat)
}

/// The address set of every node's own addresses of `fam` (their Kubernetes addresses
/// and gateway addresses), which pods reach through their management port in `shared`
/// mode.
fn node_addresses_set(
    cfg: &ClusterConfig,
    input: &Input<'_>,
    fam: Family,
    nb: &mut DesiredNb,
) -> String {
    let name = api::names::egress_nodes_address_set(&cfg.cluster_id, fam.v4);
    if cfg.gateway != GatewayMode::Shared {
        return name;
    }
    let mut addresses = BTreeSet::new();
    for (node, _) in &input.nodes {
        addresses.extend(
            node.addresses
                .iter()
                .filter(|a| fam.has(**a))
                .map(ToString::to_string),
        );
        let gw = reported_gateway(node);
        let own: Option<IpAddr> = if fam.v4 {
            gw.and_then(|g| g.ipv4).map(|n| IpAddr::V4(n.addr()))
        } else {
            gw.and_then(|g| g.ipv6).map(|n| IpAddr::V6(n.addr()))
        };
        addresses.extend(own.map(|a| a.to_string()));
    }
    nb.netpol.address_sets.insert(
        name.clone(),
        AddressSet {
            name: name.clone(),
            addresses,
            external_ids: names::owned(
                &cfg.cluster_id,
                api::external_ids::kind::EGRESS_NODES,
                fam.tag(),
            ),
            ..Default::default()
        },
    );
    name
}

fn reported_gateway(node: &NodeInfo) -> Option<api::gateway::NodeGateway> {
    let raw = node.annotations.get(api::keys::NODE_GATEWAY)?;
    serde_json::from_str(raw).ok()
}

/// The node's gateway as the agent reported it, or why it cannot have a gateway router.
/// `mgmt` are the node's management port addresses (its join leases).
fn usable_gateway<'a>(
    cfg: &ClusterConfig,
    node: &'a NodeInfo,
    mgmt: &[IpNet],
) -> Result<NodeGateway<'a>, NoGatewayRouter> {
    let Some(raw) = node.annotations.get(api::keys::NODE_GATEWAY) else {
        return Err(NoGatewayRouter::NotReported);
    };
    let report: api::gateway::NodeGateway =
        serde_json::from_str(raw).map_err(|e| NoGatewayRouter::NotAReport {
            reason: e.to_string(),
        })?;
    let (address, mac, next_hop) = report.usable_v4()?;
    let Some(mgmt4) = mgmt.iter().map(IpNet::addr).find(IpAddr::is_ipv4) else {
        return Err(NoGatewayRouter::NoManagementV4);
    };
    let Some(IpAddr::V4(join)) = gateway_router::join_address(cfg.join_cidr, mgmt4) else {
        return Err(NoGatewayRouter::OutsideJoin {
            management: mgmt4,
            join: cfg.join_cidr,
        });
    };
    // the IPv6 side: an IPv6 join network, the node's IPv6 management address, and an
    // IPv6 address and next hop in the report
    let v6 = cfg.join_v6.and_then(|j| {
        let (address, next_hop) = report.usable_v6()?;
        let mgmt6 = mgmt.iter().map(IpNet::addr).find(IpAddr::is_ipv6)?;
        match gateway_router::join_address(j.cidr, mgmt6)? {
            IpAddr::V6(join) => Some(GatewayV6 {
                join,
                address,
                next_hop,
            }),
            IpAddr::V4(_) => None,
        }
    });
    Ok(NodeGateway {
        node,
        join,
        address,
        mac: mac.to_string(),
        next_hop,
        v6,
    })
}

#[cfg(test)]
mod tests;
