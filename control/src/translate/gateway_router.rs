//! `shared` gateway mode: per node a gateway router `GR_<node>`, bound to the node's
//! chassis, between the join switch and an external switch whose `localnet` port leaves
//! through the node's gateway bridge (`ovn-bridge-mappings`, network [`PHYSNET`]).
//!
//! | row | what |
//! |---|---|
//! | `GR_<node>` | `options:chassis` = the node's chassis; ports `rtoj-GR_<node>` (join, [`join_address`]) and `rtoe-GR_<node>` (the node's gateway address and MAC, from the agent's [`api::gateway::NodeGateway`]) |
//! | join port `jtor-GR_<node>` | the join switch's side of `rtoj-` |
//! | `ext_<node>` | `etor-GR_<node>` (router side) and `lnet_<node>` (`localnet`, `network_name=physnet`) |
//! | routes on `GR_<node>` | `0.0.0.0/0` via the underlay's next hop; each routed Subnet CIDR via the cluster router's join address |
//! | NAT on `GR_<node>` | `snat` of each `natOutgoing` Subnet CIDR to the node's address |
//!
//! The router shares the node's address and MAC (the node keeps one address on the
//! underlay); the node agent splits the bridge's traffic between the host and the router
//! (`dataplane/src/gateway_flows.rs`). IPv4 only, like the join network.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::{IpNet, Ipv4Net};
use ovsdb::nb::{
    LogicalRouter, LogicalRouterPort, LogicalRouterStaticRoute, LogicalSwitch, LogicalSwitchPort,
    Nat,
};

use super::ClusterConfig;
use crate::desired::{DesiredNb, Parent, RouterRows};
use crate::model::NodeInfo;
use crate::names::{self, JOIN_SWITCH, PHYSNET};
use crate::reconcile::router_rows::ROW_KEY;

/// `external_ids` kind of a node's gateway rows.
pub const KIND: &str = "gateway";

/// The gateway router's address on the join switch: the node's management port address
/// with the join network's top host bit set (the join IPAM hands out the lower half only,
/// [`join_upper_half`]), so it needs no allocation of its own and survives restarts.
pub fn join_address(join: IpNet, mgmt: Ipv4Addr) -> Option<Ipv4Addr> {
    let IpNet::V4(net) = join else { return None };
    let host_bits = 32 - u32::from(net.prefix_len());
    if host_bits < 2 || !net.contains(&mgmt) {
        return None;
    }
    let half = 1u32 << (host_bits - 1);
    let offset = u32::from(mgmt) - u32::from(net.network());
    (offset < half).then(|| Ipv4Addr::from(u32::from(mgmt) + half))
}

/// The join network's upper half (first, last address), kept from the join IPAM for the
/// gateway routers' addresses.
pub fn join_upper_half(join: IpNet) -> Option<(Ipv4Addr, Ipv4Addr)> {
    let IpNet::V4(net) = join else { return None };
    let first = join_address(join, net.network())?;
    Some((first, net.broadcast()))
}

/// A usable gateway of one node, as the translators need it.
#[derive(Clone, Debug)]
pub struct NodeGateway<'a> {
    pub node: &'a NodeInfo,
    /// The router's join address.
    pub join: Ipv4Addr,
    /// The node's gateway address with its prefix.
    pub address: Ipv4Net,
    pub mac: String,
    pub next_hop: IpAddr,
}

fn ids(cfg: &ClusterConfig, node: &str) -> BTreeMap<String, String> {
    names::owned(&cfg.cluster_id, KIND, node)
}

fn row_ids(cfg: &ClusterConfig, node: &str, row: &str) -> BTreeMap<String, String> {
    let mut ids = ids(cfg, node);
    ids.insert(ROW_KEY.into(), row.into());
    ids
}

fn router_port_lsp(cfg: &ClusterConfig, node: &str, name: String, peer: &str) -> LogicalSwitchPort {
    let mut lsp = LogicalSwitchPort {
        name,
        type_: "router".into(),
        external_ids: ids(cfg, node),
        ..Default::default()
    };
    lsp.addresses.insert("router".into());
    lsp.options.insert("router-port".into(), peer.into());
    lsp
}

/// Adds `gw`'s gateway router, its join port, its external switch and its routes and
/// NAT rows. `routed` are the IPv4 CIDRs of the Subnets the cluster router routes (the
/// way back in), `snat` those of them with `natOutgoing`.
pub fn add(
    cfg: &ClusterConfig,
    gw: &NodeGateway<'_>,
    routed: &[Ipv4Net],
    snat: &[Ipv4Net],
    nb: &mut DesiredNb,
) {
    let node = gw.node.name.as_str();
    let gr = api::gateway::gateway_router(node);
    let ext = api::gateway::external_switch(node);
    let mut router = LogicalRouter {
        name: gr.clone(),
        external_ids: ids(cfg, node),
        ..Default::default()
    };
    router.options.extend([
        (
            "chassis".to_string(),
            super::service::local::chassis_of(gw.node),
        ),
        ("always_learn_from_arp_request".into(), "false".into()),
        ("dynamic_neigh_routers".into(), "true".into()),
    ]);
    let mut parent = Parent::owned(router);
    let (rtoj, rtoe) = (format!("rtoj-{gr}"), format!("rtoe-{gr}"));
    parent.children.insert(
        rtoj.clone(),
        LogicalRouterPort {
            name: rtoj.clone(),
            mac: names::router_mac(&rtoj),
            networks: [format!("{}/{}", gw.join, cfg.join_cidr.prefix_len())].into(),
            external_ids: ids(cfg, node),
            ..Default::default()
        },
    );
    parent.children.insert(
        rtoe.clone(),
        LogicalRouterPort {
            name: rtoe.clone(),
            mac: gw.mac.clone(),
            networks: [gw.address.to_string()].into(),
            external_ids: ids(cfg, node),
            ..Default::default()
        },
    );
    nb.routers.insert(gr.clone(), parent);
    nb.add_switch_port(
        JOIN_SWITCH,
        router_port_lsp(cfg, node, format!("jtor-{gr}"), &rtoj),
    );

    let mut switch = Parent::owned(LogicalSwitch {
        name: ext.clone(),
        external_ids: ids(cfg, node),
        ..Default::default()
    });
    let etor = router_port_lsp(cfg, node, format!("etor-{gr}"), &rtoe);
    switch.children.insert(etor.name.clone(), etor);
    let lnet_name = api::gateway::external_localnet_port(node);
    let mut lnet = LogicalSwitchPort {
        name: lnet_name.clone(),
        type_: "localnet".into(),
        external_ids: ids(cfg, node),
        ..Default::default()
    };
    lnet.addresses.insert("unknown".into());
    lnet.options.insert("network_name".into(), PHYSNET.into());
    switch.children.insert(lnet_name, lnet);
    nb.switches.insert(ext, switch);

    let mut rows = RouterRows::default();
    rows.routes.insert(
        "gw-default-v4".into(),
        LogicalRouterStaticRoute {
            ip_prefix: "0.0.0.0/0".into(),
            nexthop: gw.next_hop.to_string(),
            external_ids: row_ids(cfg, node, "gw-default-v4"),
            ..Default::default()
        },
    );
    for cidr in routed {
        let key = format!("gw-in-{}", cidr.trunc());
        rows.routes.insert(
            key.clone(),
            LogicalRouterStaticRoute {
                ip_prefix: cidr.trunc().to_string(),
                nexthop: cfg.join_gateway.to_string(),
                external_ids: row_ids(cfg, node, &key),
                ..Default::default()
            },
        );
    }
    for cidr in snat {
        let key = format!("gw-snat-{}", cidr.trunc());
        rows.nats.insert(
            key.clone(),
            Nat {
                type_: "snat".into(),
                external_ip: gw.address.addr().to_string(),
                logical_ip: cidr.trunc().to_string(),
                external_ids: row_ids(cfg, node, &key),
                ..Default::default()
            },
        );
    }
    nb.router_rows.insert(gr, rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_address_is_the_upper_half_twin() {
        let join: IpNet = "100.64.0.0/16".parse().unwrap();
        assert_eq!(
            join_address(join, Ipv4Addr::new(100, 64, 0, 2)),
            Some(Ipv4Addr::new(100, 64, 128, 2))
        );
        assert_eq!(
            join_address(join, Ipv4Addr::new(100, 64, 127, 255)),
            Some(Ipv4Addr::new(100, 64, 255, 255))
        );
        // an address from the upper half (never handed out) or outside has no twin
        assert_eq!(join_address(join, Ipv4Addr::new(100, 64, 128, 2)), None);
        assert_eq!(join_address(join, Ipv4Addr::new(10, 0, 0, 2)), None);
        assert_eq!(
            join_upper_half(join),
            Some((
                Ipv4Addr::new(100, 64, 128, 0),
                Ipv4Addr::new(100, 64, 255, 255)
            ))
        );
        assert_eq!(join_upper_half("fd00::/64".parse().unwrap()), None);
    }
}
