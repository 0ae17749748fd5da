//! Kubernetes objects → the Service model. Nothing here fails: what cannot be used is left
//! out and described in [`ServiceInfo::problems`] (logged by the controller).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::model::{
    EndpointInfo, EndpointPort, EndpointSliceInfo, Proto, ServiceInfo, ServicePort, TargetPort,
};

pub use crate::keys::SERVICE_NAME_LABEL;

/// Default `sessionAffinityConfig.clientIP.timeoutSeconds` (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;

fn port_u16(what: &str, v: i32, problems: &mut Vec<String>) -> Option<u16> {
    match u16::try_from(v) {
        Ok(p) if p > 0 => Some(p),
        _ => {
            problems.push(format!("{what} {v} is not a port number (1-65535)"));
            None
        }
    }
}

fn parse_ips(what: &str, list: &[String], problems: &mut Vec<String>) -> Vec<IpAddr> {
    list.iter()
        .filter(|s| !s.is_empty() && s.as_str() != "None")
        .filter_map(|s| match s.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                problems.push(format!("{what} {s:?} is not an IP address"));
                None
            }
        })
        .collect()
}

/// A Service as the control plane sees it.
pub fn service_info(svc: &Service) -> ServiceInfo {
    let meta = &svc.metadata;
    let mut problems = Vec::new();
    let spec = svc.spec.clone().unwrap_or_default();
    let type_ = spec.type_.as_deref().unwrap_or("ClusterIP");
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let mut ips_raw: Vec<String> = spec.cluster_ips.clone().unwrap_or_default();
    if ips_raw.is_empty()
        && let Some(ip) = &spec.cluster_ip
    {
        ips_raw.push(ip.clone());
    }
    let cluster_ips = if headless {
        Vec::new()
    } else {
        parse_ips("clusterIP", &ips_raw, &mut problems)
    };
    let mut ports = Vec::new();
    for (i, p) in spec.ports.iter().flatten().enumerate() {
        let label = if p.name.as_deref().unwrap_or("").is_empty() {
            format!("port #{i}")
        } else {
            format!("port {:?}", p.name.as_deref().unwrap_or(""))
        };
        let protocol = match Proto::parse(p.protocol.as_deref()) {
            Ok(pr) => pr,
            Err(e) => {
                problems.push(format!("{label}: {e}"));
                continue;
            }
        };
        let Some(port) = port_u16(&format!("{label}: port"), p.port, &mut problems) else {
            continue;
        };
        let target_port = match &p.target_port {
            None => TargetPort::Number(port),
            Some(IntOrString::Int(n)) => {
                match port_u16(&format!("{label}: targetPort"), *n, &mut problems) {
                    Some(t) => TargetPort::Number(t),
                    None => continue,
                }
            }
            Some(IntOrString::String(s)) => match s.parse::<u16>() {
                Ok(n) if n > 0 => TargetPort::Number(n),
                _ if s.is_empty() => TargetPort::Number(port),
                _ => TargetPort::Name(s.clone()),
            },
        };
        let node_port = match p.node_port {
            Some(n) if n != 0 => port_u16(&format!("{label}: nodePort"), n, &mut problems),
            _ => None,
        };
        ports.push(ServicePort {
            name: p.name.clone().unwrap_or_default(),
            protocol,
            port,
            target_port,
            node_port,
        });
    }
    let ingress: Vec<String> = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|i| i.iter().filter_map(|i| i.ip.clone()).collect())
        .unwrap_or_default();
    let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u32::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_AFFINITY_TIMEOUT)
    });
    let known = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
    if !known.contains(&type_) {
        problems.push(format!(
            "type {type_:?} is not one of {}; served as ClusterIP",
            known.join(", ")
        ));
    }
    ServiceInfo {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        cluster_ips,
        headless,
        external_name: type_ == "ExternalName",
        node_ports: matches!(type_, "NodePort" | "LoadBalancer"),
        ports,
        external_ips: parse_ips(
            "externalIP",
            spec.external_ips.as_deref().unwrap_or(&[]),
            &mut problems,
        ),
        ingress_ips: parse_ips("loadBalancer ingress IP", &ingress, &mut problems),
        affinity_timeout,
        external_local: spec.external_traffic_policy.as_deref() == Some("Local"),
        internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
        problems,
    }
}

/// A port of a slice or of an Endpoints subset; `None` when its number or protocol is
/// unusable (such a port cannot back any Service port).
fn endpoint_port(name: Option<&str>, port: i32, protocol: Option<&str>) -> Option<EndpointPort> {
    Some(EndpointPort {
        name: name.unwrap_or_default().to_string(),
        port: u16::try_from(port).ok().filter(|p| *p > 0)?,
        protocol: Proto::parse(protocol).ok()?,
    })
}

/// A discovery.k8s.io/v1 EndpointSlice; `None` when it names no Service.
pub fn slice_info(slice: &EndpointSlice) -> Option<EndpointSliceInfo> {
    let meta = &slice.metadata;
    let service = meta.labels.as_ref()?.get(SERVICE_NAME_LABEL)?.clone();
    let mut ignored = Vec::new();
    let endpoints = slice
        .endpoints
        .iter()
        .map(|e| {
            let c = e.conditions.clone().unwrap_or_default();
            let ready = c.ready.unwrap_or(true);
            EndpointInfo {
                addresses: parse_ips("endpoint address", &e.addresses, &mut ignored),
                ready,
                serving: c.serving.unwrap_or(ready),
                terminating: c.terminating.unwrap_or(false),
                node: e.node_name.clone(),
            }
        })
        .collect();
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| endpoint_port(p.name.as_deref(), p.port?, p.protocol.as_deref()))
        .collect();
    Some(EndpointSliceInfo {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        service,
        endpoints,
        ports,
    })
}

/// A core v1 Endpoints object (servers without discovery.k8s.io/v1): one slice named
/// after the Service. Each subset becomes endpoints with that subset's ports; since the
/// model keeps ports per slice, subsets with different ports become separate slices.
pub fn endpoints_info(ep: &Endpoints) -> Vec<EndpointSliceInfo> {
    let meta = &ep.metadata;
    let ns = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let mut ignored = Vec::new();
    ep.subsets
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, s)| {
            let mut endpoints = Vec::new();
            for (list, ready) in [(&s.addresses, true), (&s.not_ready_addresses, false)] {
                for a in list.iter().flatten() {
                    endpoints.push(EndpointInfo {
                        addresses: parse_ips(
                            "endpoint address",
                            std::slice::from_ref(&a.ip),
                            &mut ignored,
                        ),
                        ready,
                        serving: ready,
                        terminating: false,
                        node: a.node_name.clone(),
                    });
                }
            }
            let ports = s
                .ports
                .iter()
                .flatten()
                .filter_map(|p| endpoint_port(p.name.as_deref(), p.port, p.protocol.as_deref()))
                .collect();
            EndpointSliceInfo {
                namespace: ns.clone(),
                name: format!("{name}#{i}"),
                service: name.clone(),
                endpoints,
                ports,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> ServiceInfo {
        service_info(&serde_json::from_value(v).expect("service json"))
    }

    #[test]
    fn service_fields() {
        let s = svc(json!({
            "metadata": {"namespace": "demo", "name": "web"},
            "spec": {"type": "LoadBalancer", "clusterIPs": ["10.96.0.10", "fd00:96::10"],
                "ports": [
                    {"name": "http", "port": 80, "targetPort": "web", "nodePort": 30080},
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353},
                    {"name": "bad", "port": 7, "protocol": "ICMP"}],
                "externalIPs": ["192.0.2.7", "nonsense"],
                "sessionAffinity": "ClientIP",
                "externalTrafficPolicy": "Local"},
            "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.1"}]}}
        }));
        assert_eq!(s.key(), "demo/web");
        assert_eq!(s.cluster_ips.len(), 2);
        assert!(s.node_ports && s.external_local && !s.internal_local);
        assert_eq!(s.ports.len(), 2);
        assert_eq!(s.ports[0].target_port, TargetPort::Name("web".into()));
        assert_eq!(s.ports[0].node_port, Some(30080));
        assert_eq!(s.ports[1].protocol, Proto::Udp);
        assert_eq!(s.affinity_timeout, Some(DEFAULT_AFFINITY_TIMEOUT));
        assert_eq!(s.external_ips.len(), 1);
        assert_eq!(s.ingress_ips.len(), 1);
        assert_eq!(s.problems.len(), 2, "{:?}", s.problems);
        assert!(s.problems[0].contains("ICMP"), "{:?}", s.problems);
        assert!(s.problems[1].contains("nonsense"), "{:?}", s.problems);
    }

    #[test]
    fn headless_and_defaults() {
        let s = svc(json!({"metadata": {"namespace": "d", "name": "h"},
            "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}));
        assert!(s.headless && !s.balanced() && s.cluster_ips.is_empty());
        let s = svc(json!({"metadata": {"namespace": "d", "name": "p"},
            "spec": {"clusterIP": "10.96.0.3", "ports": [{"port": 80}]}}));
        assert_eq!(s.ports[0].target_port, TargetPort::Number(80));
        assert_eq!(s.ports[0].protocol, Proto::Tcp);
        assert_eq!(s.affinity_timeout, None);
    }

    #[test]
    fn slices_and_endpoints() {
        let es: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"namespace": "d", "name": "web-abc",
                "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.16.0.5"], "nodeName": "n1"},
                {"addresses": ["10.16.0.6"], "conditions": {"ready": false, "serving": true, "terminating": true}}],
            "ports": [{"name": "http", "port": 8080}, {"name": "zero", "port": 0},
                {"name": "icmp", "port": 7, "protocol": "ICMP"}, {"name": "none"}]
        }))
        .expect("slice");
        let s = slice_info(&es).expect("has a service");
        assert_eq!(s.service_key(), "d/web");
        assert!(s.endpoints[0].ready && s.endpoints[0].serving);
        assert!(!s.endpoints[1].ready && s.endpoints[1].serving && s.endpoints[1].terminating);
        assert_eq!(s.ports.len(), 1, "unusable ports left out: {:?}", s.ports);
        assert_eq!(
            (
                s.ports[0].name.as_str(),
                s.ports[0].port,
                s.ports[0].protocol
            ),
            ("http", 8080, Proto::Tcp)
        );
        let ep: Endpoints = serde_json::from_value(json!({
            "metadata": {"namespace": "d", "name": "web"},
            "subsets": [{"addresses": [{"ip": "10.16.0.5"}], "notReadyAddresses": [{"ip": "10.16.0.9"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                    {"port": 70000}, {"port": 53, "protocol": "UDP"}]}]
        }))
        .expect("endpoints");
        let v = endpoints_info(&ep);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].service, "web");
        assert_eq!(v[0].endpoints.len(), 2);
        assert!(v[0].endpoints[0].ready && !v[0].endpoints[1].ready);
        let ports: Vec<(&str, u16, Proto)> = v[0]
            .ports
            .iter()
            .map(|p| (p.name.as_str(), p.port, p.protocol))
            .collect();
        assert_eq!(ports, [("http", 8080, Proto::Tcp), ("", 53, Proto::Udp)]);
    }
}
