//! What validation needs to know beyond a Subnet's own spec: the other Subnets, the cluster
//! CIDRs and, in external mode, the platform's switches and the addresses its ports use.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use ovsdb::nb::{LogicalRouterPort, LogicalSwitch, LogicalSwitchPort, PortGroup};
use ovsdb::replica::View;
use ovsdb::typed::Table;

use super::default_subnet::is_managed;
use super::state::ClusterState;
use crate::model::IpRange;
use crate::names::OWNER;
use crate::translate::{ClusterConfig, Mode};
use crate::validate::{ExternalContext, OtherSubnet, ValidationContext};

/// The context for validating Subnet `name`.
pub fn validation_context(
    cfg: &ClusterConfig,
    state: &ClusterState,
    name: &str,
    external: Option<&ExternalContext>,
) -> ValidationContext {
    let me = state.subnets.get(name);
    let created = me.and_then(|s| s.metadata.creation_timestamp.clone());
    let others = state
        .subnets
        .iter()
        .filter(|(n, _)| n.as_str() != name)
        .map(|(n, s)| {
            let mut other = OtherSubnet::from_spec(&s.spec, s.metadata.creation_timestamp.clone());
            other.yields = is_managed(s);
            (n.clone(), other)
        })
        .collect();
    ValidationContext {
        created,
        others,
        service_cidrs: cfg.service_cidrs.clone(),
        join_cidrs: std::iter::once(cfg.join_cidr)
            .chain(cfg.join_v6.map(|v| v.cidr))
            .collect(),
        node_networks: Vec::new(),
        external: external.cloned(),
        yields: me.is_some_and(is_managed),
    }
}

/// External mode: the NB's switches and, per switch, the addresses of ports not ours.
pub fn external_context(cfg: &ClusterConfig, view: &View<'_>) -> Option<ExternalContext> {
    if cfg.mode != Mode::External {
        return None;
    }
    let ports: BTreeMap<_, _> = view
        .rows(LogicalSwitchPort::TABLE)
        .map(|r| (r.uuid(), r))
        .collect();
    let router_ports: BTreeMap<String, Vec<String>> = view
        .rows(LogicalRouterPort::TABLE)
        .map(|r| {
            let networks: Vec<String> = r.get_as("networks").unwrap_or_default();
            (r.str("name").to_string(), networks)
        })
        .collect();
    let mut switches = BTreeSet::new();
    let mut platform_excludes: BTreeMap<String, Vec<IpRange>> = BTreeMap::new();
    let mut switch_networks: BTreeMap<String, Vec<(IpNet, String)>> = BTreeMap::new();
    for ls in view.rows(LogicalSwitch::TABLE) {
        let name = ls.str("name").to_string();
        let port_uuids: Vec<ovsdb::Uuid> = ls.get_as("ports").unwrap_or_default();
        let mut used = Vec::new();
        let mut declared: Vec<(IpNet, String)> = ["subnet", "ipv6_prefix"]
            .into_iter()
            .filter_map(|k| {
                let v = ls.map_get("other_config", k)?;
                let net = v.parse::<IpNet>().ok().or_else(|| {
                    // ipv6_prefix is written without a length: a /64
                    v.parse::<std::net::Ipv6Addr>()
                        .ok()
                        .and_then(|a| IpNet::new(a.into(), 64).ok())
                })?;
                Some((net, format!("other_config:{k}={v}")))
            })
            .collect();
        for u in port_uuids {
            let Some(p) = ports.get(&u) else { continue };
            if p.map_get("external_ids", OWNER) == Some(cfg.cluster_id.as_str()) {
                continue;
            }
            if p.str("type") == "router"
                && let Some(lrp) = p.map_get("options", "router-port")
                && let Some(networks) = router_ports.get(lrp)
            {
                declared.extend(networks.iter().filter_map(|n| {
                    let net = n.parse::<IpNet>().ok()?;
                    Some((net, format!("router port {lrp} {n}")))
                }));
            }
            let addresses: Vec<String> = p.get_as("addresses").unwrap_or_default();
            used.extend(
                addresses
                    .iter()
                    .flat_map(|a| a.split_whitespace())
                    .filter_map(|w| w.parse::<IpAddr>().ok())
                    .map(IpRange::single),
            );
        }
        if !used.is_empty() {
            platform_excludes.insert(name.clone(), used);
        }
        if !declared.is_empty() {
            switch_networks.insert(name.clone(), declared);
        }
        switches.insert(name);
    }
    let port_groups = view
        .rows(PortGroup::TABLE)
        .filter(|r| r.map_get("external_ids", OWNER) != Some(cfg.cluster_id.as_str()))
        .map(|r| r.str("name").to_string())
        .collect();
    Some(ExternalContext {
        switches,
        platform_excludes,
        switch_networks,
        port_groups,
        security_groups: cfg.platform_security_groups,
    })
}
