//! Which `spec.externalIPs` a Service may claim: the administrator's allowlist
//! (`services.externalIPs.allowedCIDRs` in the chart, `--service-external-ip-cidrs` on the
//! controller and the node agent).
//!
//! Any user who may create a Service in a namespace writes `spec.externalIPs`, and each one
//! becomes a load-balancer VIP for every pod and a host route and NAT rule on every node:
//! claimed freely, the API server's or another node's address would be captured (the
//! Kubernetes guidance for CVE-2020-8554: deny them unless an administrator allows them).
//! So an empty list, the default, refuses every externalIP; a refused one is dropped from
//! the Service and reported as a problem (a Warning event on the Service), the rest of the
//! Service is served.
//!
//! `status.loadBalancer.ingress` is not governed here: only a holder of `services/status`
//! (a load-balancer controller, not a namespace's users) writes it. The node agent's own
//! guard (no address of the host, of its routes' next hops or of a network the host is
//! attached to; see `dataplane::service_route_guard`) covers both.

use std::net::IpAddr;

use ipnet::IpNet;

use super::ServiceInfo;

/// The CIDRs `spec.externalIPs` must fall in; empty: none allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExternalIpPolicy {
    allowed: Vec<IpNet>,
}

/// A refused `--service-external-ip-cidrs` entry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("externalIPs allowlist entry {entry:?}: {reason}")]
pub struct PolicyError {
    pub entry: String,
    pub reason: String,
}

impl ExternalIpPolicy {
    /// From CIDRs (an address alone means that one host).
    pub fn new(allowed: Vec<IpNet>) -> ExternalIpPolicy {
        ExternalIpPolicy { allowed }
    }

    /// From a comma- or space-separated list such as the chart passes (`""`: none).
    pub fn parse(list: &str) -> Result<ExternalIpPolicy, PolicyError> {
        let mut allowed = Vec::new();
        for entry in list
            .split([',', ' ', '\n'])
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            let bad = |reason: String| PolicyError {
                entry: entry.to_string(),
                reason,
            };
            let net = match entry.parse::<IpNet>() {
                Ok(n) => n,
                Err(_) => entry
                    .parse::<IpAddr>()
                    .map(IpNet::from)
                    .map_err(|_| bad("not a CIDR or an address".into()))?,
            };
            if net.trunc() != net {
                return Err(bad(format!(
                    "host bits set (did you mean {}?)",
                    net.trunc()
                )));
            }
            allowed.push(net);
        }
        Ok(ExternalIpPolicy { allowed })
    }

    /// The allowed CIDRs.
    pub fn allowed(&self) -> &[IpNet] {
        &self.allowed
    }

    /// Whether `ip` may be claimed.
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.allowed.iter().any(|n| n.contains(&ip))
    }

    /// Drops the externalIPs outside the allowlist from `svc`, each with a problem that
    /// names it and what would allow it.
    pub fn apply(&self, svc: &mut ServiceInfo) {
        let (keep, refused): (Vec<IpAddr>, Vec<IpAddr>) =
            svc.external_ips.iter().partition(|ip| self.allows(**ip));
        for ip in refused {
            svc.problems.push(if self.allowed.is_empty() {
                format!(
                    "externalIP {ip} refused: externalIPs are not allowed in this cluster \
                     (an administrator allows ranges with services.externalIPs.allowedCIDRs)"
                )
            } else {
                format!(
                    "externalIP {ip} refused: outside services.externalIPs.allowedCIDRs ({})",
                    self.allowed
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            });
        }
        svc.external_ips = keep;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ips: &[&str]) -> ServiceInfo {
        ServiceInfo {
            namespace: "team-a".into(),
            name: "web".into(),
            cluster_ips: vec!["10.96.0.10".parse().unwrap()],
            headless: false,
            external_name: false,
            node_ports: false,
            ports: vec![],
            external_ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
            ingress_ips: vec!["198.51.100.7".parse().unwrap()],
            affinity_timeout: None,
            external_local: false,
            internal_local: false,
            problems: vec![],
        }
    }

    #[test]
    fn empty_allowlist_refuses_every_external_ip_and_says_how_to_allow() {
        let mut s = svc(&["192.0.2.10", "2001:db8::10"]);
        ExternalIpPolicy::default().apply(&mut s);
        assert!(s.external_ips.is_empty());
        assert_eq!(s.problems.len(), 2);
        assert!(s.problems[0].contains("externalIP 192.0.2.10 refused"));
        assert!(s.problems[0].contains("services.externalIPs.allowedCIDRs"));
        // the rest of the Service is untouched (ingress IPs are not user-written)
        assert_eq!(s.cluster_ips.len(), 1);
        assert_eq!(s.ingress_ips.len(), 1);
    }

    #[test]
    fn allowlist_keeps_what_it_covers_and_names_itself_in_refusals() {
        let p = ExternalIpPolicy::parse("192.0.2.0/28, 2001:db8::/64").unwrap();
        let mut s = svc(&["192.0.2.10", "192.0.2.200", "2001:db8::10"]);
        p.apply(&mut s);
        assert_eq!(
            s.external_ips,
            vec![
                "192.0.2.10".parse::<IpAddr>().unwrap(),
                "2001:db8::10".parse().unwrap()
            ]
        );
        assert_eq!(s.problems.len(), 1);
        assert!(
            s.problems[0].contains("192.0.2.200 refused: outside")
                && s.problems[0].contains("192.0.2.0/28, 2001:db8::/64"),
            "{:?}",
            s.problems
        );
    }

    #[test]
    fn parse_takes_addresses_and_refuses_garbage_and_host_bits() {
        let p = ExternalIpPolicy::parse("192.0.2.5 198.51.100.0/24").unwrap();
        assert!(p.allows("192.0.2.5".parse().unwrap()));
        assert!(!p.allows("192.0.2.6".parse().unwrap()));
        assert!(ExternalIpPolicy::parse("").unwrap().allowed().is_empty());
        let e = ExternalIpPolicy::parse("192.0.2.0/24,bogus").unwrap_err();
        assert_eq!(e.entry, "bogus");
        let e = ExternalIpPolicy::parse("192.0.2.1/24").unwrap_err();
        assert!(e.reason.contains("did you mean 192.0.2.0/24"), "{e}");
    }
}
