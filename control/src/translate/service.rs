//! Services and their EndpointSlices → OVN `Load_Balancer` rows.
//!
//! One row per Service and protocol, named `Service_<namespace>/<name>_<TCP|UDP|SCTP>`
//! ([`names::service_lb`]), `external_ids` = our owner marks (`zstack.io/kind=service`,
//! `zstack.io/object=<namespace>/<name>`). Its `vips`:
//!
//! - every cluster IP (IPv4 and IPv6: dual-stack Services get both), every `externalIPs`
//!   entry and every `status.loadBalancer.ingress` IP, at each Service port of the
//!   protocol → the ready endpoints of that port's family (else serving+terminating ones);
//! - NodePort/LoadBalancer Services: every node address at each `nodePort` → the same
//!   backends, or with `externalTrafficPolicy: Local` only the endpoints on that node
//!   (the node-local variant lives in the same row: its VIPs are the node's own addresses).
//!
//! A VIP without backends stays, with an empty backend list: `options:reject=true` makes
//! OVN answer with a TCP RST / ICMP unreachable instead of dropping. `sessionAffinity:
//! ClientIP` sets `options:affinity_timeout`. Headless and ExternalName Services get no row.
//! Hairpin (a backend reaching itself through the VIP) uses OVN's default: the reply is
//! SNATed to the VIP.
//!
//! Every row joins our Load_Balancer_Group ([`names::lb_group`]), attached to every switch
//! we own (the Subnet switches and the join switch, where the node management ports are):
//! the logical switch DNATs as traffic enters it, on the sending chassis, so pods and hosts
//! reach Services on every node. In external mode the group is attached to the platform's
//! switches our Subnets use as well (`externalLogicalSwitch`), the one column of a platform
//! row we write (docs/services.md, "External mode"). `internalTrafficPolicy: Local` Services have their
//! cluster IPs on template load balancers instead, expanded per chassis ([`local`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ovsdb::nb::LoadBalancer;

use super::ClusterConfig;
use crate::desired::DesiredNb;
use crate::model::NodeInfo;
use crate::names;
use crate::services::select::{backends, vip};
use crate::services::{EndpointSliceInfo, Proto, ServiceInfo};

/// `external_ids` kind of a Service load balancer.
pub use api::external_ids::kind::SERVICE as KIND_SERVICE;

/// Adds the load balancers of `services` and attaches the group to our switches.
pub fn add<'a>(
    cfg: &ClusterConfig,
    services: impl IntoIterator<Item = &'a ServiceInfo>,
    slices: impl IntoIterator<Item = &'a EndpointSliceInfo>,
    nodes: &[&NodeInfo],
    nb: &mut DesiredNb,
) {
    let mut by_service: BTreeMap<String, Vec<&EndpointSliceInfo>> = BTreeMap::new();
    for s in slices {
        by_service.entry(s.service_key()).or_default().push(s);
    }
    for svc in services {
        let slices = by_service
            .get(&svc.key())
            .map(Vec::as_slice)
            .unwrap_or_default();
        for lb in load_balancers(cfg, svc, slices, nodes) {
            nb.load_balancers.rows.insert(lb.name.clone(), lb);
        }
        local::add_variables(svc, slices, nodes, &mut nb.load_balancers.template_vars);
    }
    let (owned, platform): (Vec<_>, Vec<_>) = nb.switches.iter().partition(|(_, p)| p.owned);
    nb.load_balancers.switches = owned.into_iter().map(|(n, _)| n.clone()).collect();
    nb.load_balancers.platform_switches = platform.into_iter().map(|(n, _)| n.clone()).collect();
}

/// The rows of one Service (one per protocol with at least one VIP).
pub fn load_balancers(
    cfg: &ClusterConfig,
    svc: &ServiceInfo,
    slices: &[&EndpointSliceInfo],
    nodes: &[&NodeInfo],
) -> Vec<LoadBalancer> {
    if !svc.balanced() {
        return Vec::new();
    }
    let protos: BTreeSet<Proto> = svc.ports.iter().map(|p| p.protocol).collect();
    let mut out = local::template_rows(cfg, svc, slices);
    // with internalTrafficPolicy: Local the cluster IPs are on the template rows
    let cluster: &[IpAddr] = if local::applies(svc, slices) {
        &[]
    } else {
        &svc.cluster_ips
    };
    let front: Vec<IpAddr> = cluster
        .iter()
        .chain(&svc.external_ips)
        .chain(&svc.ingress_ips)
        .copied()
        .collect();
    for proto in protos {
        let mut vips: BTreeMap<String, String> = BTreeMap::new();
        for port in svc.ports.iter().filter(|p| p.protocol == proto) {
            for ip in &front {
                let b = backends(port, slices, ip.is_ipv4(), None);
                vips.insert(vip(*ip, port.port), join(&b));
            }
            let Some(np) = port.node_port.filter(|_| svc.node_ports) else {
                continue;
            };
            for node in nodes {
                let local = svc.external_local.then_some(node.name.as_str());
                for ip in &node.addresses {
                    let b = backends(port, slices, ip.is_ipv4(), local);
                    vips.insert(vip(*ip, np), join(&b));
                }
            }
        }
        if vips.is_empty() {
            continue;
        }
        let mut options = BTreeMap::from([("reject".to_string(), "true".to_string())]);
        if let Some(t) = svc.affinity_timeout {
            options.insert("affinity_timeout".into(), t.to_string());
        }
        out.push(LoadBalancer {
            name: names::service_lb(&svc.key(), proto.k8s()),
            protocol: Some(proto.ovn().to_string()),
            vips,
            options,
            external_ids: names::owned(&cfg.cluster_id, KIND_SERVICE, &svc.key()),
            ..Default::default()
        });
    }
    out
}

pub(crate) fn join(b: &[std::net::SocketAddr]) -> String {
    b.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

pub mod local;
#[cfg(test)]
mod tests;
