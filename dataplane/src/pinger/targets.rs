//! What the [pinger](super) probes: each peer chassis ovn-controller built a tunnel to
//! (its tunnel endpoint, over the underlay) and a sample of the running pods on that
//! peer's node (over OVN and the tunnel, from the host through the management port,
//! which NetworkPolicy always admits).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::Value;

use crate::ovs::TunnelPort;

/// What the pinger needs of the cluster: every Node with its chassis, and a sample of
/// running pods (see [`crate::source::PodSource::peer_view`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerView {
    /// Node name → its chassis (`network.zstack.io/chassis-id`, written by its agent).
    pub chassis_of: BTreeMap<String, String>,
    pub pods: Vec<SampledPod>,
}

/// A running pod the pinger may probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampledPod {
    pub node: String,
    /// `namespace/name`.
    pub key: String,
    pub ip: IpAddr,
}

/// The pods of `pods` (Kubernetes JSON) worth probing: running, on the pod network (not
/// `hostNetwork`), scheduled, with an address; at most `per_node` per node, by name.
pub fn sample_pods<'a>(
    pods: impl IntoIterator<Item = &'a Value>,
    per_node: usize,
) -> Vec<SampledPod> {
    let mut all: Vec<SampledPod> = pods
        .into_iter()
        .filter(|p| p["status"]["phase"] == "Running" && p["spec"]["hostNetwork"] != true)
        .filter_map(|p| {
            Some(SampledPod {
                node: p["spec"]["nodeName"]
                    .as_str()
                    .filter(|n| !n.is_empty())?
                    .to_string(),
                key: format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str()?,
                    p["metadata"]["name"].as_str()?
                ),
                ip: p["status"]["podIP"].as_str()?.parse().ok()?,
            })
        })
        .collect();
    all.sort_by(|a, b| (&a.node, &a.key).cmp(&(&b.node, &b.key)));
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    all.retain(|p| {
        let n = taken.entry(p.node.clone()).or_default();
        *n += 1;
        *n <= per_node
    });
    all
}

/// Node name → chassis from Nodes (Kubernetes JSON).
pub fn chassis_of<'a>(nodes: impl IntoIterator<Item = &'a Value>) -> BTreeMap<String, String> {
    nodes
        .into_iter()
        .filter_map(|n| {
            Some((
                n["metadata"]["name"].as_str()?.to_string(),
                n["metadata"]["annotations"][api::keys::CHASSIS_ID]
                    .as_str()?
                    .to_string(),
            ))
        })
        .collect()
}

/// One peer and what to probe there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its node's name, or its chassis name when no Node names it.
    pub name: String,
    /// `geneve` or `vxlan`.
    pub encap: String,
    pub endpoint: IpAddr,
    /// (`namespace/name`, address).
    pub pods: Vec<(String, IpAddr)>,
}

/// The peers to probe: one per remote chassis with a tunnel (the first tunnel when a
/// chassis has several), with the sampled pods of its node; never this node itself.
pub fn plan(tunnels: &[TunnelPort], view: &PeerView, own_node: &str) -> Vec<Peer> {
    let node_of: BTreeMap<&str, &str> = view
        .chassis_of
        .iter()
        .map(|(n, c)| (c.as_str(), n.as_str()))
        .collect();
    let mut peers: BTreeMap<String, Peer> = BTreeMap::new();
    for t in tunnels {
        let name = node_of
            .get(t.chassis.as_str())
            .copied()
            .unwrap_or(&t.chassis);
        if name == own_node || peers.contains_key(name) {
            continue;
        }
        let pods = view
            .pods
            .iter()
            .filter(|p| p.node == name)
            .map(|p| (p.key.clone(), p.ip))
            .collect();
        peers.insert(
            name.to_string(),
            Peer {
                name: name.to_string(),
                encap: t.kind.clone(),
                endpoint: t.remote_ip,
                pods,
            },
        );
    }
    peers.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, node: &str, phase: &str, ip: &str, host: bool) -> Value {
        json!({"metadata": {"namespace": ns, "name": name},
               "spec": {"nodeName": node, "hostNetwork": host},
               "status": {"phase": phase, "podIP": ip}})
    }

    #[test]
    fn pods_are_sampled_per_node_running_and_on_the_pod_network_only() {
        let pods = [
            pod("b", "z", "n2", "Running", "10.0.2.9", false),
            pod("a", "y", "n2", "Running", "10.0.2.8", false),
            pod("a", "x", "n2", "Running", "10.0.2.7", false),
            pod("a", "p", "n2", "Pending", "10.0.2.6", false),
            pod("kube-system", "agent", "n3", "Running", "172.16.0.3", true),
            pod("a", "w", "n3", "Running", "", false),
            pod("a", "v", "n3", "Running", "10.0.3.5", false),
        ];
        let s = sample_pods(&pods, 2);
        let keys: Vec<(&str, &str)> = s
            .iter()
            .map(|p| (p.node.as_str(), p.key.as_str()))
            .collect();
        assert_eq!(keys, [("n2", "a/x"), ("n2", "a/y"), ("n3", "a/v")]);
    }

    #[test]
    fn peers_are_named_by_their_node_and_exclude_this_one() {
        let t = |c: &str, ip: &str| TunnelPort {
            chassis: c.into(),
            remote_ip: ip.parse().unwrap(),
            kind: "geneve".into(),
        };
        let nodes = [
            json!({"metadata": {"name": "n1", "annotations": {api::keys::CHASSIS_ID: "c1"}}}),
            json!({"metadata": {"name": "n2", "annotations": {api::keys::CHASSIS_ID: "c2"}}}),
            json!({"metadata": {"name": "n4"}}),
        ];
        let view = PeerView {
            chassis_of: chassis_of(&nodes),
            pods: sample_pods(&[pod("a", "x", "n2", "Running", "10.0.2.7", false)], 1),
        };
        let peers = plan(
            &[
                t("c2", "172.16.0.2"),
                t("c1", "172.16.0.1"),
                t("c9", "172.16.0.9"),
                t("c2", "172.16.1.2"),
            ],
            &view,
            "n1",
        );
        assert_eq!(peers.len(), 2, "{peers:?}");
        assert_eq!(
            peers[0].name, "c9",
            "a chassis no Node names keeps its own name"
        );
        assert!(peers[0].pods.is_empty());
        assert_eq!(peers[1].name, "n2");
        assert_eq!(peers[1].endpoint, "172.16.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(
            peers[1].pods,
            [("a/x".to_string(), "10.0.2.7".parse().unwrap())]
        );
    }
}
