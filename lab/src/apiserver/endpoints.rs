//! The lab's EndpointSlice producer: what kube-controller-manager's EndpointSlice
//! controller does, for a lab without one.
//!
//! For every Service with a selector: the pods of its namespace whose labels match, that
//! are not finished and have an address (the controller's `k8s.ovn.org/pod-networks`),
//! become endpoints; `ready` (and `serving`) when the lab runtime reports the pod Ready.
//! Each Service port's target port is resolved per pod: a number as is, a name through the
//! pod's container ports of that name and protocol (a pod without it does not serve that
//! port). Pods with the same resolved ports share a slice, named `<service>-<n>` in a
//! stable order, labelled `kubernetes.io/service-name`. Services without a selector get no
//! slices (as in Kubernetes, their endpoints are managed by hand).

use std::collections::BTreeMap;
use std::net::IpAddr;

use control::annotation::{POD_NETWORKS, decode_pod_networks};
use control::services::convert::{SERVICE_NAME_LABEL, service_info};
use control::services::{EndpointInfo, EndpointPort, EndpointSliceInfo, TargetPort};
use k8s_openapi::api::core::v1::{Pod, Service};
use serde_json::{Value, json};

/// The slices of `svc` given the namespace's pods (with the controller's annotations) and
/// a readiness oracle (`namespace/name` → Ready).
pub fn slices_for(
    svc: &Service,
    pods: &[&Pod],
    ready: &dyn Fn(&str) -> bool,
) -> Vec<EndpointSliceInfo> {
    let Some(selector) = svc
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .filter(|s| !s.is_empty())
    else {
        return Vec::new();
    };
    let info = service_info(svc);
    if !info.balanced() {
        return Vec::new();
    }
    let mut groups: BTreeMap<Vec<(String, u16, control::services::Proto)>, Vec<EndpointInfo>> =
        BTreeMap::new();
    for pod in pods {
        let meta = &pod.metadata;
        if meta.namespace.as_deref() != Some(info.namespace.as_str()) {
            continue;
        }
        let labels = meta.labels.clone().unwrap_or_default();
        if !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            continue;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        if spec.host_network == Some(true) {
            continue;
        }
        let addresses: Vec<IpAddr> = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(POD_NETWORKS))
            .and_then(|v| decode_pod_networks(v).ok())
            .map(|n| {
                n.ip_addresses
                    .iter()
                    .filter_map(|a| a.split('/').next()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if addresses.is_empty() {
            continue;
        }
        let mut resolved = Vec::new();
        for port in &info.ports {
            let n = match &port.target_port {
                TargetPort::Number(n) => Some(*n),
                TargetPort::Name(name) => spec
                    .containers
                    .iter()
                    .flat_map(|c| c.ports.iter().flatten())
                    .find(|cp| {
                        cp.name.as_deref() == Some(name.as_str())
                            && cp.protocol.as_deref().unwrap_or("TCP") == port.protocol.k8s()
                    })
                    .and_then(|cp| u16::try_from(cp.container_port).ok()),
            };
            if let Some(n) = n {
                resolved.push((port.name.clone(), n, port.protocol));
            }
        }
        if resolved.is_empty() {
            continue;
        }
        let key = format!("{}/{}", info.namespace, meta.name.as_deref().unwrap_or(""));
        let r = ready(&key);
        groups.entry(resolved).or_default().push(EndpointInfo {
            addresses,
            ready: r,
            serving: r,
            terminating: false,
            node: spec.node_name.clone(),
        });
    }
    groups
        .into_iter()
        .enumerate()
        .map(|(i, (ports, mut endpoints))| {
            endpoints.sort_by(|a, b| a.addresses.cmp(&b.addresses));
            EndpointSliceInfo {
                namespace: info.namespace.clone(),
                name: format!("{}-{}", info.name, i + 1),
                service: info.name.clone(),
                endpoints,
                ports: ports
                    .into_iter()
                    .map(|(name, port, protocol)| EndpointPort {
                        name,
                        port,
                        protocol,
                    })
                    .collect(),
            }
        })
        .collect()
}

/// A slice as discovery.k8s.io/v1 JSON (for `zovn lab get endpointslices`).
pub fn to_json(s: &EndpointSliceInfo) -> Value {
    let family = match s.endpoints.first().and_then(|e| e.addresses.first()) {
        Some(IpAddr::V6(_)) => "IPv6",
        _ => "IPv4",
    };
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"namespace": s.namespace, "name": s.name,
            "labels": {SERVICE_NAME_LABEL: s.service}},
        "addressType": family,
        "endpoints": s.endpoints.iter().map(|e| json!({
            "addresses": e.addresses.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "conditions": {"ready": e.ready, "serving": e.serving, "terminating": e.terminating},
            "nodeName": e.node,
        })).collect::<Vec<_>>(),
        "ports": s.ports.iter().map(|p| json!({
            "name": p.name, "port": p.port, "protocol": p.protocol.k8s(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, labels: Value, ip: Option<&str>, ports: Value) -> Pod {
        let mut ann = serde_json::Map::new();
        if let Some(ip) = ip {
            ann.insert(
                POD_NETWORKS.into(),
                Value::String(format!(
                    r#"{{"default":{{"ip_addresses":["{ip}/16"],"mac_address":"0a:58:0a:10:00:05"}}}}"#
                )),
            );
        }
        serde_json::from_value(json!({
            "metadata": {"namespace": "d", "name": name, "labels": labels, "annotations": ann},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": ports}]}
        }))
        .expect("pod")
    }

    #[test]
    fn selects_resolves_named_ports_and_groups() {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"namespace": "d", "name": "web"},
            "spec": {"clusterIP": "10.96.0.10", "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": "http"},
                          {"name": "raw", "port": 81, "targetPort": 9000}]}
        }))
        .expect("svc");
        let a = pod(
            "a",
            json!({"app": "web"}),
            Some("10.16.0.5"),
            json!([{"name": "http", "containerPort": 8080}]),
        );
        let b = pod(
            "b",
            json!({"app": "web"}),
            Some("10.16.0.6"),
            json!([{"name": "http", "containerPort": 8081}]),
        );
        let c = pod("c", json!({"app": "web"}), None, json!([]));
        let other = pod("o", json!({"app": "db"}), Some("10.16.0.9"), json!([]));
        let slices = slices_for(&svc, &[&a, &b, &c, &other], &|k| k == "d/a");
        assert_eq!(slices.len(), 2, "two resolved port sets: {slices:?}");
        let all: Vec<(u16, bool)> = slices
            .iter()
            .map(|s| (s.ports[0].port, s.endpoints[0].ready))
            .collect();
        assert!(
            all.contains(&(8080, true)) && all.contains(&(8081, false)),
            "{all:?}"
        );
        assert!(
            slices
                .iter()
                .all(|s| s.ports.len() == 2 && s.ports[1].port == 9000)
        );
        assert_eq!(slices[0].service_key(), "d/web");
        assert_eq!(
            to_json(&slices[0])["metadata"]["labels"][SERVICE_NAME_LABEL],
            "web"
        );
    }
}
