//! A Subnet → its logical switch `subnet-<name>`, the cluster router's port with the
//! Subnet gateway, and for VLAN (underlay) Subnets a localnet port.
//!
//! In external mode a Subnet with `externalLogicalSwitch` reuses the platform's switch: it
//! appears as a foreign parent that only receives our pod ports; nothing else is created.

use ovsdb::nb::{LogicalRouterPort, LogicalSwitch, LogicalSwitchPort};

use super::{ClusterConfig, Mode};
use crate::desired::{DesiredNb, Parent};
use crate::model::ValidSubnet;
use crate::names::{self, CLUSTER_ROUTER};

/// Adds the switch of `subnet` (and its router link / localnet port).
pub fn add(cfg: &ClusterConfig, subnet: &ValidSubnet, nb: &mut DesiredNb) {
    if let Some(ext) = &subnet.external_logical_switch {
        let row = LogicalSwitch {
            name: ext.clone(),
            ..Default::default()
        };
        nb.switches
            .entry(ext.clone())
            .or_insert_with(|| Parent::foreign(row));
        return;
    }
    let switch = names::subnet_switch(&subnet.name);
    let mut row = LogicalSwitch {
        name: switch.clone(),
        external_ids: names::owned(
            &cfg.cluster_id,
            api::external_ids::kind::SUBNET,
            &subnet.name,
        ),
        ..Default::default()
    };
    let cidrs: Vec<String> = subnet.cidrs.iter().map(|c| c.to_string()).collect();
    row.external_ids
        .insert(api::external_ids::nb::CIDR.into(), cidrs.join(","));
    nb.switches.insert(switch.clone(), Parent::owned(row));

    if cfg.mode == Mode::Standalone {
        let networks: Vec<String> = subnet
            .cidrs
            .iter()
            .zip(&subnet.gateways)
            .map(|(c, g)| format!("{g}/{}", c.prefix_len()))
            .collect();
        router_link(cfg, nb, &switch, &networks, &subnet.name);
    }
    if let Some(vlan) = subnet.vlan_id {
        let port = names::localnet_port(&switch);
        let mut lsp = LogicalSwitchPort {
            name: port.clone(),
            type_: "localnet".into(),
            tag: Some(i64::from(vlan)),
            external_ids: names::owned(
                &cfg.cluster_id,
                api::external_ids::kind::SUBNET_LOCALNET,
                &subnet.name,
            ),
            ..Default::default()
        };
        lsp.addresses.insert("unknown".into());
        lsp.options.insert(
            "network_name".into(),
            subnet
                .provider
                .clone()
                .unwrap_or_else(|| names::PHYSNET.into()),
        );
        nb.add_switch_port(&switch, lsp);
    }
}

/// Links `switch` to the cluster router: a router port with `networks` (gateway/prefix per
/// family) and the switch-side `router` port peering with it.
pub(crate) fn router_link(
    cfg: &ClusterConfig,
    nb: &mut DesiredNb,
    switch: &str,
    networks: &[String],
    object: &str,
) {
    let rp = names::router_port(switch);
    let lrp = LogicalRouterPort {
        name: rp.clone(),
        mac: names::router_mac(&rp),
        networks: networks.iter().cloned().collect(),
        external_ids: names::owned(
            &cfg.cluster_id,
            api::external_ids::kind::ROUTER_PORT,
            object,
        ),
        ..Default::default()
    };
    if let Some(r) = nb.routers.get_mut(CLUSTER_ROUTER) {
        r.children.insert(rp.clone(), lrp);
    }
    let mut lsp = LogicalSwitchPort {
        name: names::switch_router_port(switch),
        type_: "router".into(),
        external_ids: names::owned(
            &cfg.cluster_id,
            api::external_ids::kind::ROUTER_PORT,
            object,
        ),
        ..Default::default()
    };
    lsp.addresses.insert("router".into());
    lsp.options.insert("router-port".into(), rp);
    nb.add_switch_port(switch, lsp);
}
