//! Which endpoints back a Service port, the way kube-proxy chooses them: the slice port
//! with the Service port's name and protocol gives the target port; ready endpoints serve;
//! when none is ready, serving endpoints that are terminating do (graceful termination);
//! endpoints are filtered by address family and, for traffic policy `Local`, by node.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use super::model::{EndpointSliceInfo, ServicePort};

/// Backends of `port` among `slices` (all of one Service), of the family of `v4`, on
/// `node` when given. Sorted and without duplicates.
pub fn backends(
    port: &ServicePort,
    slices: &[&EndpointSliceInfo],
    v4: bool,
    node: Option<&str>,
) -> Vec<SocketAddr> {
    let pick = |want: fn(&super::EndpointInfo) -> bool| -> BTreeSet<SocketAddr> {
        let mut out = BTreeSet::new();
        for s in slices {
            let Some(sp) = s
                .ports
                .iter()
                .find(|p| p.name == port.name && p.protocol == port.protocol)
            else {
                continue;
            };
            for e in s.endpoints.iter().filter(|e| want(e)) {
                if let Some(n) = node
                    && e.node.as_deref() != Some(n)
                {
                    continue;
                }
                for a in e.addresses.iter().filter(|a| a.is_ipv4() == v4) {
                    out.insert(SocketAddr::new(*a, sp.port));
                }
            }
        }
        out
    };
    let ready = pick(|e| e.ready);
    let chosen = if ready.is_empty() {
        pick(|e| e.serving && e.terminating)
    } else {
        ready
    };
    chosen.into_iter().collect()
}

/// `ip:port`, with brackets for IPv6 (OVN's `vips` spelling).
pub fn vip(ip: IpAddr, port: u16) -> String {
    SocketAddr::new(ip, port).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::{EndpointInfo, EndpointPort, Proto, TargetPort};

    fn ep(ip: &str, ready: bool, serving: bool, terminating: bool, node: &str) -> EndpointInfo {
        EndpointInfo {
            addresses: vec![ip.parse().expect("ip")],
            ready,
            serving,
            terminating,
            node: Some(node.into()),
        }
    }

    fn port(name: &str, proto: Proto) -> ServicePort {
        ServicePort {
            name: name.into(),
            protocol: proto,
            port: 80,
            target_port: TargetPort::Name("web".into()),
            node_port: None,
        }
    }

    fn slice(endpoints: Vec<EndpointInfo>) -> EndpointSliceInfo {
        let port = |name: &str, port, protocol| EndpointPort {
            name: name.into(),
            port,
            protocol,
        };
        EndpointSliceInfo {
            namespace: "d".into(),
            name: "web-1".into(),
            service: "web".into(),
            endpoints,
            ports: vec![
                port("http", 8080, Proto::Tcp),
                port("dns", 5353, Proto::Udp),
            ],
        }
    }

    #[test]
    fn ready_then_terminating_fallback() {
        let s = slice(vec![
            ep("10.0.0.1", true, true, false, "n1"),
            ep("10.0.0.2", false, true, true, "n2"),
            ep("10.0.0.3", false, false, false, "n2"),
            ep("fd00::1", true, true, false, "n1"),
        ]);
        let b = backends(&port("http", Proto::Tcp), &[&s], true, None);
        assert_eq!(b, vec!["10.0.0.1:8080".parse().expect("addr")]);
        let b = backends(&port("http", Proto::Tcp), &[&s], false, None);
        assert_eq!(b, vec!["[fd00::1]:8080".parse().expect("addr")]);
        let b = backends(&port("http", Proto::Tcp), &[&s], true, Some("n2"));
        assert_eq!(
            b,
            vec!["10.0.0.2:8080".parse().expect("addr")],
            "only serving+terminating on n2"
        );
        let b = backends(&port("dns", Proto::Udp), &[&s], true, None);
        assert_eq!(b, vec!["10.0.0.1:5353".parse().expect("addr")]);
        assert!(backends(&port("dns", Proto::Tcp), &[&s], true, None).is_empty());
        assert!(backends(&port("other", Proto::Tcp), &[&s], true, None).is_empty());
        assert_eq!(vip("fd00::1".parse().expect("ip"), 80), "[fd00::1]:80");
    }
}
