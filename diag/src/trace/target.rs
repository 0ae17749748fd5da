//! What the operator asked `zovn trace` for: `SRC` a pod (`ns/name`), `DST` a pod, a
//! Service (`svc/ns/name`) or an address, with `:PORT[/PROTO]` (TCP by default; no port:
//! an ICMP echo). IPv6 addresses take brackets with a port (`[fd00::1]:80/udp`).

use std::net::IpAddr;

use serde::Serialize;

use super::TraceError;

/// The destination as typed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Dst {
    Pod { key: String },
    Service { key: String },
    Address { ip: IpAddr },
}

/// The transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "proto", content = "port", rename_all = "lowercase")]
pub enum L4 {
    Tcp(u16),
    Udp(u16),
    Sctp(u16),
    Icmp,
}

impl L4 {
    pub fn describe(self) -> String {
        match self {
            L4::Tcp(p) => format!("tcp/{p}"),
            L4::Udp(p) => format!("udp/{p}"),
            L4::Sctp(p) => format!("sctp/{p}"),
            L4::Icmp => "icmp".into(),
        }
    }

    pub fn port(self) -> Option<u16> {
        match self {
            L4::Tcp(p) | L4::Udp(p) | L4::Sctp(p) => Some(p),
            L4::Icmp => None,
        }
    }
}

/// A whole request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceSpec {
    pub src: String,
    pub dst: Dst,
    /// `None`: ICMP for a pod or an address, the Service's first port for a Service.
    pub l4: Option<L4>,
}

fn pod_key(s: &str, what: &str) -> Result<String, TraceError> {
    let parts: Vec<&str> = s.split('/').collect();
    match parts.as_slice() {
        [ns, name] if !ns.is_empty() && !name.is_empty() => Ok(s.to_string()),
        _ => Err(TraceError::BadInput(format!(
            "{what} {s:?}: expected namespace/name"
        ))),
    }
}

fn l4(port: &str, proto: Option<&str>) -> Result<L4, TraceError> {
    let p: u16 =
        port.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
            TraceError::BadInput(format!("port {port:?} is not a number in 1-65535"))
        })?;
    match proto.unwrap_or("tcp").to_ascii_lowercase().as_str() {
        "tcp" => Ok(L4::Tcp(p)),
        "udp" => Ok(L4::Udp(p)),
        "sctp" => Ok(L4::Sctp(p)),
        other => Err(TraceError::BadInput(format!(
            "protocol {other:?} is not tcp, udp or sctp"
        ))),
    }
}

/// Parses `SRC` and `DST[:PORT[/PROTO]]`.
pub fn parse(src: &str, dst: &str) -> Result<TraceSpec, TraceError> {
    parse_in(src, dst, None)
}

/// `name` as `ns/name` when it has no namespace and a default namespace is given.
fn in_namespace(name: &str, ns: Option<&str>) -> String {
    match ns {
        Some(ns) if !name.contains('/') && !name.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// [`parse`], a pod named without its namespace taken from `default_ns` (kubectl's `-n`).
pub fn parse_in(src: &str, dst: &str, default_ns: Option<&str>) -> Result<TraceSpec, TraceError> {
    let src = pod_key(&in_namespace(src, default_ns), "source")?;
    let (target, portspec) = if let Some(rest) = dst.strip_prefix('[') {
        let (ip, after) = rest
            .split_once(']')
            .ok_or_else(|| TraceError::BadInput(format!("{dst:?}: missing ']'")))?;
        (ip, after.strip_prefix(':').filter(|s| !s.is_empty()))
    } else if dst.parse::<IpAddr>().is_ok() {
        (dst, None)
    } else {
        match dst.rsplit_once(':') {
            Some((t, p)) => (t, Some(p)),
            None => (dst, None),
        }
    };
    if dst.contains(':') && !dst.starts_with('[') && portspec.is_some_and(str::is_empty) {
        return Err(TraceError::BadInput(format!("{dst:?}: empty port")));
    }
    let l4 = match portspec {
        Some(ps) => {
            let (port, proto) = match ps.split_once('/') {
                Some((p, pr)) => (p, Some(pr)),
                None => (ps, None),
            };
            Some(l4(port, proto)?)
        }
        None => None,
    };
    let dst = if let Ok(ip) = target.parse::<IpAddr>() {
        Dst::Address { ip }
    } else if let Some(svc) = target
        .strip_prefix("svc/")
        .filter(|rest| rest.contains('/'))
    {
        // svc/ns/name; `svc/name` is the pod `name` of namespace `svc`
        Dst::Service {
            key: pod_key(svc, "Service")?,
        }
    } else if target.contains('/') || default_ns.is_some() {
        Dst::Pod {
            key: pod_key(&in_namespace(target, default_ns), "destination")?,
        }
    } else {
        return Err(TraceError::BadInput(format!(
            "destination {target:?}: expected namespace/name, svc/namespace/name or an address"
        )));
    };
    Ok(TraceSpec { src, dst, l4 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_services_and_addresses_with_ports() {
        let s = parse("default/a", "default/b:8080").expect("pod");
        assert_eq!(s.src, "default/a");
        assert_eq!(
            s.dst,
            Dst::Pod {
                key: "default/b".into()
            }
        );
        assert_eq!(s.l4, Some(L4::Tcp(8080)));
        let s = parse("default/a", "svc/svc/web:80/udp").expect("svc");
        assert_eq!(
            s.dst,
            Dst::Service {
                key: "svc/web".into()
            }
        );
        assert_eq!(s.l4, Some(L4::Udp(80)));
        let s = parse("default/a", "198.51.100.10").expect("address");
        assert_eq!(s.l4, None);
        let s = parse("default/a", "[fd00::1]:53/udp").expect("v6");
        assert_eq!(
            s.dst,
            Dst::Address {
                ip: "fd00::1".parse().unwrap()
            }
        );
        assert_eq!(s.l4, Some(L4::Udp(53)));
        assert_eq!(parse("default/a", "fd00::1").expect("bare v6").l4, None);
        // a pod of namespace `svc`
        assert_eq!(
            parse("default/a", "svc/web-2:8080").expect("pod").dst,
            Dst::Pod {
                key: "svc/web-2".into()
            }
        );
    }

    #[test]
    fn a_default_namespace_completes_bare_pod_names_only() {
        let s = parse_in("a", "b:80", Some("web")).expect("bare names");
        assert_eq!(s.src, "web/a");
        assert_eq!(
            s.dst,
            Dst::Pod {
                key: "web/b".into()
            }
        );
        let s = parse_in("other/a", "svc/ns/web", Some("web")).expect("qualified");
        assert_eq!(s.src, "other/a");
        assert_eq!(
            s.dst,
            Dst::Service {
                key: "ns/web".into()
            }
        );
        assert_eq!(
            parse_in("a", "10.0.0.1", Some("web")).expect("address").dst,
            Dst::Address {
                ip: "10.0.0.1".parse().unwrap()
            }
        );
    }

    #[test]
    fn malformed_input_is_named() {
        for (src, dst, want) in [
            ("a", "default/b", "source \"a\""),
            ("default/a", "default/b:http", "port \"http\""),
            ("default/a", "default/b:0", "port \"0\""),
            ("default/a", "default/b:80/icmp", "protocol \"icmp\""),
            ("default/a", "b", "destination \"b\""),
            ("default/a", "[fd00::1:80", "missing ']'"),
            ("default/a", "svc/ns/web/x:80", "Service \"ns/web/x\""),
        ] {
            let e = parse(src, dst).expect_err(dst).to_string();
            assert!(e.contains(want), "{dst}: {e}");
        }
    }
}
