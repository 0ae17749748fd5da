//! `shared` gateway mode and `externalTrafficPolicy: Local`: the replies of a node's own
//! endpoints to clients outside the cluster go back through the node's management port.
//!
//! A client outside reaching such a Service on a node (NodePort, externalIP, LoadBalancer
//! ingress) is DNATed by that node's agent straight to one of the node's endpoints, with
//! the client's address kept (`dataplane/src/host/nat.rs`): the connection lives in the
//! node's kernel conntrack. In `shared` mode the cluster router would send the endpoint's
//! reply (to an address outside the cluster) to the node's gateway router instead, which
//! knows nothing of the connection. So, per node with a gateway router, a policy at
//! [`PRIORITY`] (above the node's reroute, below the cluster's own traffic) reroutes
//! `ip4.src == {the node's endpoints of the port} && <proto>.src == <target port>` to the
//! node's management port, where the kernel un-DNATs the reply (`ip6` likewise when the
//! router has an IPv6 side). One policy per node, protocol, target port and family.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use api::services::select::backends;
use api::services::{EndpointSliceInfo, ServiceInfo};
use ovsdb::nb::LogicalRouterPolicy;

use super::ClusterConfig;
use crate::desired::DesiredNb;
use crate::names::{self, CLUSTER_ROUTER};
use crate::reconcile::router_rows::ROW_KEY;

/// Priority of the return policies: above the per-node reroute
/// ([`super::egress::NODE_PRIORITY`]) and the node-address policy, below the cluster's own
/// traffic ([`super::egress::CLUSTER_PRIORITY`]).
pub const PRIORITY: i64 = 30_600;

/// Adds the return policies. `nodes`: each node with a gateway router and its management
/// port's address of each family that leaves through the router.
pub fn add<'a>(
    cfg: &ClusterConfig,
    services: impl Iterator<Item = &'a ServiceInfo>,
    slices: &BTreeMap<String, Vec<&EndpointSliceInfo>>,
    nodes: &BTreeMap<String, Vec<IpAddr>>,
    nb: &mut DesiredNb,
) {
    if nodes.is_empty() {
        return;
    }
    // (node, protocol, target port, IPv4?) → endpoint addresses
    let mut groups: BTreeMap<(&str, &str, u16, bool), BTreeSet<IpAddr>> = BTreeMap::new();
    for svc in services {
        let reached_from_outside =
            svc.node_ports || !svc.external_ips.is_empty() || !svc.ingress_ips.is_empty();
        if !svc.balanced() || !svc.external_local || !reached_from_outside {
            continue;
        }
        let svc_slices = slices
            .get(&svc.key())
            .map(Vec::as_slice)
            .unwrap_or_default();
        for port in &svc.ports {
            for (node, v4) in nodes.keys().flat_map(|n| [(n, true), (n, false)]) {
                for b in backends(port, svc_slices, v4, Some(node)) {
                    groups
                        .entry((
                            node.as_str(),
                            port.protocol.ovn(),
                            b.port(),
                            b.ip().is_ipv4(),
                        ))
                        .or_default()
                        .insert(b.ip());
                }
            }
        }
    }
    let Some(rows) = nb.router_rows.get_mut(CLUSTER_ROUTER) else {
        return;
    };
    for ((node, proto, port, v4), ips) in groups {
        // the management port of the endpoints' family, if that family uses the router
        let Some(mgmt) = nodes
            .get(node)
            .and_then(|m| m.iter().find(|a| a.is_ipv4() == v4))
        else {
            continue;
        };
        let (tag, ip) = if v4 { ("v4", "ip4") } else { ("v6", "ip6") };
        let key = format!("etp-local-{node}-{proto}-{port}-{tag}");
        let mut ids = names::owned(
            &cfg.cluster_id,
            api::external_ids::kind::EGRESS_SERVICE_RETURN,
            node,
        );
        ids.insert(ROW_KEY.into(), key.clone());
        let list: Vec<String> = ips.iter().map(ToString::to_string).collect();
        rows.policies.insert(
            key,
            LogicalRouterPolicy {
                priority: PRIORITY,
                match_: format!(
                    "{ip}.src == {{{}}} && {proto}.src == {port}",
                    list.join(", ")
                ),
                action: "reroute".into(),
                nexthops: BTreeSet::from([mgmt.to_string()]),
                external_ids: ids,
                ..Default::default()
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::services::{EndpointInfo, EndpointPort, Proto, ServicePort, TargetPort};

    fn svc(local: bool) -> ServiceInfo {
        ServiceInfo {
            namespace: "ns".into(),
            name: "web".into(),
            node_ports: true,
            external_local: local,
            ports: vec![ServicePort {
                name: String::new(),
                protocol: Proto::Tcp,
                port: 80,
                target_port: TargetPort::Number(8080),
                node_port: Some(30080),
            }],
            ..ServiceInfo::default()
        }
    }

    fn slice() -> EndpointSliceInfo {
        let ep = |ip: &str, node: &str| EndpointInfo {
            addresses: vec![ip.parse().unwrap()],
            ready: true,
            serving: true,
            terminating: false,
            node: Some(node.into()),
        };
        EndpointSliceInfo {
            namespace: "ns".into(),
            name: "web-1".into(),
            service: "web".into(),
            endpoints: vec![
                ep("10.1.0.5", "n1"),
                ep("10.1.0.6", "n2"),
                ep("10.1.0.7", "n1"),
                ep("fd01::7", "n1"),
            ],
            ports: vec![EndpointPort {
                name: String::new(),
                protocol: Proto::Tcp,
                port: 8080,
            }],
        }
    }

    fn run(local: bool) -> DesiredNb {
        let mut nb = DesiredNb::default();
        nb.router_rows
            .insert(CLUSTER_ROUTER.into(), Default::default());
        let s = slice();
        let slices = BTreeMap::from([("ns/web".to_string(), vec![&s])]);
        let nodes = BTreeMap::from([(
            "n1".to_string(),
            vec!["100.64.0.2".parse().unwrap(), "fd98::2".parse().unwrap()],
        )]);
        let services = [svc(local)];
        add(
            &ClusterConfig::default(),
            services.iter(),
            &slices,
            &nodes,
            &mut nb,
        );
        nb
    }

    #[test]
    fn a_local_services_endpoints_reply_through_their_nodes_management_port() {
        let nb = run(true);
        let p = &nb.router_rows[CLUSTER_ROUTER].policies;
        // only node n1 has a gateway router here; its endpoints, one policy per family
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(
            p["etp-local-n1-tcp-8080-v6"].match_,
            "ip6.src == {fd01::7} && tcp.src == 8080"
        );
        assert_eq!(
            p["etp-local-n1-tcp-8080-v6"].nexthops,
            BTreeSet::from(["fd98::2".to_string()])
        );
        let r = &p["etp-local-n1-tcp-8080-v4"];
        assert_eq!(
            r.match_,
            "ip4.src == {10.1.0.5, 10.1.0.7} && tcp.src == 8080"
        );
        assert_eq!(r.nexthops, BTreeSet::from(["100.64.0.2".to_string()]));
        assert!(r.priority > super::super::egress::NODE_PRIORITY);
        assert!(r.priority < super::super::egress::CLUSTER_PRIORITY);
        // externalTrafficPolicy: Cluster is masqueraded to the management port: no policy
        assert!(run(false).router_rows[CLUSTER_ROUTER].policies.is_empty());
    }
}
