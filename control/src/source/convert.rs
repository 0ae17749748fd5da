//! Kubernetes objects → the controller's model types.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};

use crate::model::{NamespaceInfo, NodeInfo, PodInfo, PodPort};

/// A Pod as the controller sees it.
pub fn pod_info(pod: &Pod) -> PodInfo {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    PodInfo {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        node: spec.and_then(|s| s.node_name.clone()),
        host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        completed: matches!(phase, Some("Succeeded" | "Failed")),
        ports: pod_ports(pod),
    }
}

/// The pod's declared container ports (invalid numbers skipped).
pub fn pod_ports(pod: &Pod) -> Vec<PodPort> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            Some(PodPort {
                name: p.name.clone().filter(|n| !n.is_empty()),
                port: u16::try_from(p.container_port).ok().filter(|p| *p > 0)?,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            })
        })
        .collect()
}

/// A Namespace as the controller sees it: its name and labels.
pub fn namespace_info(ns: &Namespace) -> NamespaceInfo {
    NamespaceInfo {
        name: ns.metadata.name.clone().unwrap_or_default(),
        labels: ns.metadata.labels.clone().unwrap_or_default(),
    }
}

/// A Node as the controller sees it: its InternalIP addresses, labels and annotations.
pub fn node_info(node: &Node) -> NodeInfo {
    let addresses: Vec<IpAddr> = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .filter(|a| a.type_ == "InternalIP")
                .filter_map(|a| a.address.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    NodeInfo {
        name: node.metadata.name.clone().unwrap_or_default(),
        addresses,
        labels: node.metadata.labels.clone().unwrap_or_default(),
        annotations: node.metadata.annotations.clone().unwrap_or_default(),
    }
}
