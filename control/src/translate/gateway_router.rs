//! `shared` gateway mode: per node a gateway router `GR_<node>`, bound to the node's
//! chassis, between the join switch and an external switch whose `localnet` port leaves
//! through the node's gateway bridge (`ovn-bridge-mappings`, network [`PHYSNET`]).
//!
//! | row | what |
//! |---|---|
//! | `GR_<node>` | `options:chassis` = the node's chassis; ports `rtoj-GR_<node>` (join, [`join_address`]) and `rtoe-GR_<node>` (the node's gateway address and MAC, from the agent's [`api::gateway::NodeGateway`]) |
//! | join port `jtor-GR_<node>` | the join switch's side of `rtoj-` |
//! | `ext_<node>` | `etor-GR_<node>` (router side) and `lnet_<node>` (`localnet`, `network_name=physnet`) |
//! | routes on `GR_<node>` | `0.0.0.0/0` (and `::/0`) via the underlay's next hop; each routed Subnet CIDR via the cluster router's join address of its family |
//! | NAT on `GR_<node>` | `snat` of each `natOutgoing` Subnet CIDR to the node's address of its family |
//!
//! The router shares the node's address and MAC (the node keeps one address on the
//! underlay); the node agent splits the bridge's traffic between the host and the router
//! (`dataplane/src/host/gateway_flows.rs`). IPv6: when the join network has an IPv6 part
//! (`--join-cidr-v6`) and the node reported an IPv6 address and next hop, the router's
//! ports get an IPv6 address each (the join one the upper-half twin of the management
//! port's IPv6 address) and the IPv6 rows follow; otherwise its pods' IPv6 leaves through
//! the management port.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
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
pub use api::external_ids::kind::GATEWAY as KIND;

/// The gateway router's address on the join switch (either family): the node's
/// management port address with the join network's top host bit set (the join IPAM hands
/// out the lower half only, [`join_upper_half`]), so it needs no allocation of its own
/// and survives restarts.
pub fn join_address(join: IpNet, mgmt: IpAddr) -> Option<IpAddr> {
    if !join.contains(&mgmt) {
        return None;
    }
    let host_bits = u32::from(join.max_prefix_len() - join.prefix_len());
    if host_bits < 2 {
        return None;
    }
    let half = 1u128 << (host_bits - 1);
    let (net, ip) = (bits(join.network()), bits(mgmt));
    (ip - net < half).then(|| from_bits(mgmt, ip + half))
}

fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// `v` as an address of `like`'s family (`v` fits: it comes from that family).
fn from_bits(like: IpAddr, v: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(u32::try_from(v).unwrap_or(u32::MAX))),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(v)),
    }
}

/// The join network's upper half (first, last address), kept from the join IPAM for the
/// gateway routers' addresses.
pub fn join_upper_half(join: IpNet) -> Option<(IpAddr, IpAddr)> {
    let first = join_address(join, join.network())?;
    Some((first, join.broadcast()))
}

/// The IPv6 side of a node's gateway router.
#[derive(Clone, Debug)]
pub struct GatewayV6 {
    /// The router's join address (IPv6).
    pub join: Ipv6Addr,
    /// The node's gateway IPv6 address with its prefix.
    pub address: Ipv6Net,
    pub next_hop: Ipv6Addr,
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
    /// With an IPv6 join network and an IPv6 address and next hop in the node's report.
    pub v6: Option<GatewayV6>,
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
/// NAT rows. `routed` are the CIDRs of the Subnets the cluster router routes (the way
/// back in), `snat` those of them with `natOutgoing`; IPv6 ones count only when the
/// router has an IPv6 side.
pub fn add(
    cfg: &ClusterConfig,
    gw: &NodeGateway<'_>,
    routed: &[IpNet],
    snat: &[IpNet],
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
            networks: std::iter::once(format!("{}/{}", gw.join, cfg.join_cidr.prefix_len()))
                .chain(
                    gw.v6
                        .as_ref()
                        .zip(cfg.join_v6)
                        .map(|(v6, j)| format!("{}/{}", v6.join, j.cidr.prefix_len())),
                )
                .collect(),
            external_ids: ids(cfg, node),
            ..Default::default()
        },
    );
    parent.children.insert(
        rtoe.clone(),
        LogicalRouterPort {
            name: rtoe.clone(),
            mac: gw.mac.clone(),
            networks: std::iter::once(gw.address.to_string())
                .chain(gw.v6.as_ref().map(|v6| v6.address.to_string()))
                .collect(),
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
    let v6 = gw.v6.as_ref().zip(cfg.join_v6);
    if let Some((v6, _)) = v6 {
        rows.routes.insert(
            "gw-default-v6".into(),
            LogicalRouterStaticRoute {
                ip_prefix: "::/0".into(),
                nexthop: v6.next_hop.to_string(),
                external_ids: row_ids(cfg, node, "gw-default-v6"),
                ..Default::default()
            },
        );
    }
    // the way back in, and the SNAT, per family the router has
    let back = |c: &IpNet| match c {
        IpNet::V4(_) => Some(cfg.join_gateway),
        IpNet::V6(_) => v6.map(|(_, j)| j.gateway),
    };
    for cidr in routed {
        let Some(via) = back(cidr) else { continue };
        let key = format!("gw-in-{}", cidr.trunc());
        rows.routes.insert(
            key.clone(),
            LogicalRouterStaticRoute {
                ip_prefix: cidr.trunc().to_string(),
                nexthop: via.to_string(),
                external_ids: row_ids(cfg, node, &key),
                ..Default::default()
            },
        );
    }
    for cidr in snat {
        let external_ip = match cidr {
            IpNet::V4(_) => IpAddr::V4(gw.address.addr()),
            IpNet::V6(_) => match v6 {
                Some((v6, _)) => IpAddr::V6(v6.address.addr()),
                None => continue,
            },
        };
        let key = format!("gw-snat-{}", cidr.trunc());
        rows.nats.insert(
            key.clone(),
            Nat {
                type_: "snat".into(),
                external_ip: external_ip.to_string(),
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
        let v4 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            join_address(join, v4("100.64.0.2")),
            Some(v4("100.64.128.2"))
        );
        assert_eq!(
            join_address(join, v4("100.64.127.255")),
            Some(v4("100.64.255.255"))
        );
        // an address from the upper half (never handed out) or outside has no twin
        assert_eq!(join_address(join, v4("100.64.128.2")), None);
        assert_eq!(join_address(join, v4("10.0.0.2")), None);
        assert_eq!(
            join_upper_half(join),
            Some((v4("100.64.128.0"), v4("100.64.255.255")))
        );
    }

    #[test]
    fn the_ipv6_join_address_is_the_upper_half_twin_too() {
        let join: IpNet = "fd98::/64".parse().unwrap();
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            join_address(join, v6("fd98::2")),
            Some(v6("fd98::8000:0:0:2"))
        );
        assert_eq!(join_address(join, v6("fd98::8000:0:0:2")), None);
        assert_eq!(join_address(join, v6("100.64.0.2")), None);
        assert_eq!(
            join_upper_half(join),
            Some((v6("fd98::8000:0:0:0"), v6("fd98::ffff:ffff:ffff:ffff")))
        );
    }
}
