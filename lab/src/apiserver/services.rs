//! Services in the lab's store: the checks `kube-apiserver` makes (through the control
//! plane's own reading of a Service, so the lab refuses what the controller could not
//! use), cluster IP and nodePort allocation, and the `zovn lab get` tables.
//!
//! Allocation follows the API server: an empty `clusterIP` gets the next free address of
//! the service CIDR (IPv4 10.96.0.0/16 from `ClusterConfig`, IPv6 [`SERVICE_CIDR_V6`] when
//! `ipFamilies` names IPv6 or `ipFamilyPolicy` asks for dual stack); NodePort and
//! LoadBalancer ports without `nodePort` get the next free one of 30000-32767. An update
//! keeps what was allocated. The lab has no cloud load-balancer controller: a LoadBalancer
//! Service's `status.loadBalancer.ingress` is taken from the manifest as given.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};

use control::services::convert::service_info;
use control::translate::ClusterConfig;
use k8s_openapi::api::core::v1::Service;
use serde_json::Value;

use super::protocol::ResourceKind;
use crate::object_names::{DEFAULT_NAMESPACE, NameError, check_label};

/// The lab's IPv6 service CIDR.
/// (`fd00:10:96::/108`: base address and prefix length)
pub const SERVICE_CIDR_V6: (Ipv6Addr, u8) = (Ipv6Addr::new(0xfd00, 0x10, 0x96, 0, 0, 0, 0, 0), 108);
/// The NodePort range.
pub const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

/// Why a Service is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Name(#[from] NameError),
    /// What the control plane could not use (its own reading of the Service) and what
    /// the lab's API server refuses besides.
    #[error("Service {namespace}/{name}: {}", problems.join("; "))]
    Unusable {
        namespace: String,
        name: String,
        problems: Vec<String>,
    },
}

/// Why a Service's cluster IP or nodePort cannot be allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    /// `family`: `IPv4` or `IPv6`.
    #[error("the {family} service CIDR is full")]
    CidrFull { family: &'static str },
    #[error("clusterIP {0} is already allocated to another Service")]
    ClusterIpTaken(String),
    #[error("nodePort {0} is already allocated to another Service")]
    NodePortTaken(i32),
    #[error("no free nodePort left")]
    NoNodePort,
}

/// Checks a Service (keeping `status.loadBalancer`, see the module docs).
pub fn normalized(mut svc: Box<Service>) -> Result<Box<Service>, ServiceError> {
    let ns = svc
        .metadata
        .namespace
        .get_or_insert_with(|| DEFAULT_NAMESPACE.to_string())
        .clone();
    check_label("Service namespace", &ns)?;
    let name = svc.metadata.name.clone().unwrap_or_default();
    check_label("Service", &name)?;
    let lb = svc.status.take().and_then(|s| s.load_balancer);
    svc.status = lb.map(|lb| k8s_openapi::api::core::v1::ServiceStatus {
        load_balancer: Some(lb),
        ..Default::default()
    });
    let info = service_info(&svc);
    let mut problems = info.problems.clone();
    for p in &info.ports {
        if let Some(np) = p.node_port
            && !NODE_PORTS.contains(&np)
        {
            problems.push(format!(
                "nodePort {np} is outside {}-{}",
                NODE_PORTS.start(),
                NODE_PORTS.end()
            ));
        }
    }
    if info.ports.is_empty() && !info.headless && !info.external_name {
        problems.push("spec.ports is empty".into());
    }
    if problems.is_empty() {
        Ok(svc)
    } else {
        Err(ServiceError::Unusable {
            namespace: ns,
            name,
            problems,
        })
    }
}

fn wants_v6(svc: &Service) -> (bool, bool) {
    let spec = svc.spec.as_ref();
    let fams: Vec<&str> = spec
        .and_then(|s| s.ip_families.as_ref())
        .map(|f| f.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let dual = matches!(
        spec.and_then(|s| s.ip_family_policy.as_deref()),
        Some("PreferDualStack" | "RequireDualStack")
    );
    let v6_first = fams.first() == Some(&"IPv6");
    let v4 = dual || !v6_first;
    let v6 = dual || fams.contains(&"IPv6");
    (v4, v6)
}

/// The first free address from base+10 (the first ones are left for the cluster's own
/// Services, as kube reserves .1 for `kubernetes.default`) up to the end of the CIDR.
fn next_free(base: IpAddr, prefix: u8, used: &BTreeSet<IpAddr>) -> Option<IpAddr> {
    let (start, bits): (u128, u32) = match base {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    };
    let size = 1u128.checked_shl(bits.saturating_sub(u32::from(prefix)))?;
    (10..size.saturating_sub(1))
        .filter_map(|i| match base {
            IpAddr::V4(_) => u32::try_from(start + i)
                .ok()
                .map(|a| IpAddr::from(std::net::Ipv4Addr::from(a))),
            IpAddr::V6(_) => Some(IpAddr::from(Ipv6Addr::from(start + i))),
        })
        .find(|ip| !used.contains(ip))
}

/// Fills `clusterIP(s)` and `nodePort`s (see the module docs). `old` is the stored
/// version, `others` every other stored Service.
pub fn allocate(
    svc: &mut Service,
    old: Option<&Service>,
    others: &[&Service],
) -> Result<(), AllocationError> {
    let used_ips: BTreeSet<IpAddr> = others
        .iter()
        .flat_map(|s| {
            s.spec
                .iter()
                .flat_map(|s| s.cluster_ips.iter().flatten().chain(s.cluster_ip.iter()))
        })
        .filter_map(|s| s.parse().ok())
        .collect();
    let used_ports: BTreeSet<i32> = others
        .iter()
        .flat_map(|s| s.spec.iter().flat_map(|s| s.ports.iter().flatten()))
        .filter_map(|p| p.node_port)
        .collect();
    let (v4, v6) = wants_v6(svc);
    let old_spec = old.and_then(|o| o.spec.clone()).unwrap_or_default();
    let spec = svc.spec.get_or_insert_with(Default::default);
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let external_name = spec.type_.as_deref() == Some("ExternalName");
    if !headless && !external_name {
        let mut ips: Vec<String> = spec.cluster_ips.clone().unwrap_or_default();
        if ips.is_empty()
            && let Some(ip) = spec.cluster_ip.clone().filter(|s| !s.is_empty())
        {
            ips.push(ip);
        }
        if ips.is_empty() {
            ips = old_spec.cluster_ips.clone().unwrap_or_default();
        }
        if ips.is_empty() {
            let v4net = ClusterConfig::default()
                .service_cidrs
                .into_iter()
                .find(|c| c.addr().is_ipv4());
            if v4 && let Some(net) = v4net {
                let ip = next_free(net.network(), net.prefix_len(), &used_ips)
                    .ok_or(AllocationError::CidrFull { family: "IPv4" })?;
                ips.push(ip.to_string());
            }
            if v6 {
                let (base, prefix) = SERVICE_CIDR_V6;
                let ip = next_free(IpAddr::V6(base), prefix, &used_ips)
                    .ok_or(AllocationError::CidrFull { family: "IPv6" })?;
                ips.push(ip.to_string());
            }
        }
        for ip in &ips {
            if let Ok(a) = ip.parse::<IpAddr>()
                && used_ips.contains(&a)
            {
                return Err(AllocationError::ClusterIpTaken(ip.clone()));
            }
        }
        spec.cluster_ip = ips.first().cloned();
        spec.cluster_ips = Some(ips);
    }
    let node_ports = matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"));
    let mut taken = used_ports;
    for p in spec.ports.iter_mut().flatten() {
        if !node_ports {
            p.node_port = None;
            continue;
        }
        if let Some(np) = p.node_port.filter(|n| *n != 0) {
            if taken.contains(&np) {
                return Err(AllocationError::NodePortTaken(np));
            }
            taken.insert(np);
            continue;
        }
        let kept = old_spec
            .ports
            .iter()
            .flatten()
            .find(|o| o.name == p.name && o.port == p.port && o.protocol == p.protocol)
            .and_then(|o| o.node_port)
            .filter(|n| !taken.contains(n));
        let np = match kept {
            Some(n) => n,
            None => NODE_PORTS
                .map(i32::from)
                .find(|n| !taken.contains(n))
                .ok_or(AllocationError::NoNodePort)?,
        };
        taken.insert(np);
        p.node_port = Some(np);
    }
    Ok(())
}

/// `zovn lab get` tables for Services and EndpointSlices.
pub fn table(kind: ResourceKind, items: &[Value]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let s = |v: &Value, p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    if kind == ResourceKind::EndpointSlice {
        let rows = items
            .iter()
            .map(|v| {
                let eps: Vec<String> = v["endpoints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| {
                        let ip = e
                            .pointer("/addresses/0")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        let ready =
                            e.pointer("/conditions/ready").and_then(Value::as_bool) == Some(true);
                        format!("{ip}{}", if ready { "" } else { "(not ready)" })
                    })
                    .collect();
                let ports: Vec<String> = v["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| format!("{}", p["port"]))
                    .collect();
                vec![
                    format!("{}/{}", s(v, "/metadata/namespace"), s(v, "/metadata/name")),
                    ports.join(","),
                    eps.join(","),
                ]
            })
            .collect();
        return (vec!["NAMESPACE/NAME", "PORTS", "ENDPOINTS"], rows);
    }
    let rows = items
        .iter()
        .map(|v| {
            let ports: Vec<String> = v
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|p| {
                    let np = p
                        .get("nodePort")
                        .map(|n| format!(":{n}"))
                        .unwrap_or_default();
                    format!(
                        "{}{np}/{}",
                        p["port"],
                        p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                    )
                })
                .collect();
            let ips: Vec<String> = v
                .pointer("/spec/clusterIPs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
            vec![
                format!("{}/{}", s(v, "/metadata/namespace"), s(v, "/metadata/name")),
                s(v, "/spec/type"),
                ips.join(","),
                ports.join(","),
            ]
        })
        .collect();
    (vec!["NAMESPACE/NAME", "TYPE", "CLUSTER-IP", "PORTS"], rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: Value) -> Service {
        serde_json::from_value(v).expect("service")
    }

    #[test]
    fn allocates_ips_and_node_ports_and_keeps_them() {
        let a = svc(json!({"metadata": {"name": "a", "namespace": "d"},
            "spec": {"clusterIP": "10.96.0.10", "type": "NodePort",
                "ports": [{"port": 80, "nodePort": 30000}]}}));
        let mut b = svc(json!({"metadata": {"name": "b", "namespace": "d"},
            "spec": {"type": "NodePort", "ipFamilyPolicy": "RequireDualStack",
                "ports": [{"port": 80}, {"port": 81, "name": "x"}]}}));
        allocate(&mut b, None, &[&a]).expect("allocate");
        let spec = b.spec.clone().expect("spec");
        let ips = spec.cluster_ips.clone().expect("ips");
        assert_eq!(ips, vec!["10.96.0.11", "fd00:10:96::a"]);
        let ports: Vec<i32> = spec
            .ports
            .iter()
            .flatten()
            .filter_map(|p| p.node_port)
            .collect();
        assert_eq!(ports, vec![30001, 30002]);
        // re-applied without allocations: keeps them
        let mut again = svc(json!({"metadata": {"name": "b", "namespace": "d"},
            "spec": {"type": "NodePort", "ipFamilyPolicy": "RequireDualStack",
                "ports": [{"port": 80}, {"port": 81, "name": "x"}]}}));
        allocate(&mut again, Some(&b), &[&a]).expect("again");
        assert_eq!(again.spec, b.spec);
        // a taken cluster IP is refused
        let mut c = svc(json!({"metadata": {"name": "c", "namespace": "d"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}}));
        let e = allocate(&mut c, None, &[&a]).expect_err("taken");
        assert_eq!(
            e.to_string(),
            "clusterIP 10.96.0.10 is already allocated to another Service"
        );
    }

    #[test]
    fn bad_services_are_refused_with_reasons() {
        let bad = svc(json!({"metadata": {"name": "a"},
            "spec": {"ports": [{"port": 80, "protocol": "ICMP"}, {"port": 81, "nodePort": 80}]}}));
        let e = normalized(Box::new(bad)).expect_err("bad").to_string();
        assert!(
            e.starts_with("Service default/a: ")
                && e.contains("ICMP")
                && e.contains("; nodePort 80 is outside 30000-32767"),
            "{e}"
        );
        let ok = svc(
            json!({"metadata": {"name": "a"}, "spec": {"ports": [{"port": 80}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}}),
        );
        let ok = normalized(Box::new(ok)).expect("ok");
        assert_eq!(ok.metadata.namespace.as_deref(), Some("default"));
        assert!(ok.status.is_some(), "load balancer status kept");
    }
}
