//! What a Service may not take from the host: the addresses the agent refuses to route
//! through the management port and to NAT, whatever the Service says.
//!
//! Every `externalIPs` entry and LoadBalancer ingress IP becomes a host route through
//! `ovn-k8s-mp0` and a DNAT rule ([`crate::host::nat`]). A host route to a `/32` beats every
//! shorter one, so a Service claiming another node's underlay address would move this
//! host's traffic to that node (the Geneve tunnel included) into OVN; one claiming the API
//! server's address would cut kubelet off. The controller's allowlist
//! (`services.externalIPs.allowedCIDRs`, [`api::services::ExternalIpPolicy`]) refuses
//! externalIPs nobody allowed; this guard is the host's own line behind it, for allowed
//! ranges drawn too wide and for ingress IPs (written by a load-balancer controller). It
//! refuses an address that is
//! - on one of the host's interfaces;
//! - the next hop of one of the host's routes;
//! - inside a network the host routes elsewhere than through the management port (a
//!   connected underlay network: the other nodes, the API server), default routes aside.
//!
//! The refused address is dropped from the Service for this host (no route, no NAT rule);
//! the rest of the Service is served. Nothing of the host's routing is replaced.

use std::net::IpAddr;

use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::address::AddressAttribute;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteType};
use rtnetlink::{Handle, RouteMessageBuilder};

use api::services::ServiceInfo;

use crate::attach::pod_iface::{PlumbError, StepExt, netns};
use crate::host::mgmt::MGMT_PORT;

/// The host's addresses and routes, as far as the guard needs them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostAddresses {
    /// Addresses on the host's interfaces.
    pub local: Vec<IpAddr>,
    /// Networks the host routes (not default routes, not the management port's), with the
    /// device they go through.
    pub routed: Vec<(IpNet, String)>,
    /// Next hops of the host's routes.
    pub next_hops: Vec<IpAddr>,
}

impl HostAddresses {
    /// Why `ip` may not be taken by a Service on this host; `None`: it may.
    pub fn refusal(&self, ip: IpAddr) -> Option<String> {
        if self.local.contains(&ip) {
            return Some(format!("{ip} is an address of this host"));
        }
        if self.next_hops.contains(&ip) {
            return Some(format!("{ip} is the next hop of this host's routes"));
        }
        self.routed
            .iter()
            .filter(|(n, _)| n.contains(&ip))
            .max_by_key(|(n, _)| n.prefix_len())
            .map(|(n, dev)| format!("{ip} is in {n}, which this host routes through {dev}"))
    }

    /// Drops from `services` every externalIP and ingress IP this host refuses; returns
    /// one line per refusal (`<namespace>/<name>: <why>`), sorted.
    pub fn police(&self, services: &mut [ServiceInfo]) -> Vec<String> {
        let mut refused = Vec::new();
        for s in services.iter_mut() {
            let key = s.key();
            for ips in [&mut s.external_ips, &mut s.ingress_ips] {
                ips.retain(|ip| match self.refusal(*ip) {
                    Some(why) => {
                        refused.push(format!("{key}: {why}"));
                        false
                    }
                    None => true,
                });
            }
        }
        refused.sort();
        refused.dedup();
        refused
    }
}

/// Why the host's addresses and routes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HostReadError {
    #[error("read the host's addresses and routes: {0}")]
    Netlink(#[from] PlumbError),
    #[error("read the host's addresses and routes: worker: {0}")]
    Worker(#[source] tokio::task::JoinError),
}

/// Reads the host's addresses and routes (the agent's own netns: the host's).
pub async fn read() -> Result<HostAddresses, HostReadError> {
    let r = tokio::task::spawn_blocking(|| {
        netns::run_in_netns(None, |h| async move { read_with(&h).await })
    })
    .await
    .map_err(HostReadError::Worker)?;
    Ok(r?)
}

async fn read_with(h: &Handle) -> Result<HostAddresses, PlumbError> {
    let mut names = std::collections::BTreeMap::new();
    let mut links = h.link().get().execute();
    while let Some(m) = links.try_next().await.step(|| "list links".into())? {
        for a in &m.attributes {
            if let netlink_packet_route::link::LinkAttribute::IfName(n) = a {
                names.insert(m.header.index, n.clone());
            }
        }
    }
    let mgmt = names
        .iter()
        .find(|(_, n)| n.as_str() == MGMT_PORT)
        .map(|(i, _)| *i);
    let mut out = HostAddresses::default();
    let mut addrs = h.address().get().execute();
    while let Some(m) = addrs.try_next().await.step(|| "list addresses".into())? {
        for a in &m.attributes {
            if let AddressAttribute::Local(ip) | AddressAttribute::Address(ip) = a
                && !out.local.contains(ip)
            {
                out.local.push(*ip);
            }
        }
    }
    for query in [
        RouteMessageBuilder::<std::net::Ipv4Addr>::new().build(),
        RouteMessageBuilder::<std::net::Ipv6Addr>::new().build(),
    ] {
        let mut routes = h.route().get(query).execute();
        while let Some(m) = routes.try_next().await.step(|| "list routes".into())? {
            add_route(&mut out, &m, mgmt, &names);
        }
    }
    Ok(out)
}

/// Records one route: its next hop, and its destination unless it is a default route, a
/// route of the management port or not a unicast route.
fn add_route(
    out: &mut HostAddresses,
    m: &RouteMessage,
    mgmt: Option<u32>,
    names: &std::collections::BTreeMap<u32, String>,
) {
    let (mut dest, mut oif) = (None, None);
    for a in &m.attributes {
        match a {
            RouteAttribute::Destination(RouteAddress::Inet(d)) => dest = Some(IpAddr::V4(*d)),
            RouteAttribute::Destination(RouteAddress::Inet6(d)) => dest = Some(IpAddr::V6(*d)),
            RouteAttribute::Gateway(RouteAddress::Inet(g)) => push(&mut out.next_hops, (*g).into()),
            RouteAttribute::Gateway(RouteAddress::Inet6(g)) => {
                push(&mut out.next_hops, (*g).into())
            }
            RouteAttribute::Oif(i) => oif = Some(*i),
            _ => {}
        }
    }
    if m.header.kind != RouteType::Unicast || oif.is_some() && oif == mgmt {
        return;
    }
    let Some(dest) = dest else { return };
    if m.header.destination_prefix_length == 0 {
        return;
    }
    if let Ok(net) = IpNet::new(dest, m.header.destination_prefix_length) {
        let dev = oif
            .and_then(|i| names.get(&i).cloned())
            .unwrap_or_else(|| "another route".into());
        if !out.routed.iter().any(|(n, d)| *n == net && *d == dev) {
            out.routed.push((net, dev));
        }
    }
}

fn push(v: &mut Vec<IpAddr>, ip: IpAddr) {
    if !v.contains(&ip) {
        v.push(ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostAddresses {
        HostAddresses {
            local: vec![
                "172.16.0.11".parse().unwrap(),
                "10.244.1.2".parse().unwrap(),
            ],
            routed: vec![
                ("172.16.0.0/24".parse().unwrap(), "br-phy".into()),
                ("172.16.0.0/16".parse().unwrap(), "eth9".into()),
            ],
            next_hops: vec!["198.51.100.254".parse().unwrap()],
        }
    }

    fn svc(external: &[&str], ingress: &[&str]) -> ServiceInfo {
        ServiceInfo {
            namespace: "team-a".into(),
            name: "grab".into(),
            cluster_ips: vec![],
            headless: false,
            external_name: false,
            node_ports: false,
            ports: vec![],
            external_ips: external.iter().map(|i| i.parse().unwrap()).collect(),
            ingress_ips: ingress.iter().map(|i| i.parse().unwrap()).collect(),
            affinity_timeout: None,
            external_local: false,
            internal_local: false,
            problems: vec![],
        }
    }

    #[test]
    fn refuses_host_addresses_next_hops_and_attached_networks() {
        let h = host();
        let why = |ip: &str| h.refusal(ip.parse().unwrap());
        assert_eq!(
            why("172.16.0.11").as_deref(),
            Some("172.16.0.11 is an address of this host")
        );
        assert_eq!(
            why("198.51.100.254").as_deref(),
            Some("198.51.100.254 is the next hop of this host's routes")
        );
        // another node's underlay address: the most specific network names the device
        assert_eq!(
            why("172.16.0.12").as_deref(),
            Some("172.16.0.12 is in 172.16.0.0/24, which this host routes through br-phy")
        );
        assert_eq!(why("203.0.113.10"), None);
    }

    #[test]
    fn police_drops_only_the_refused_addresses_and_reports_each() {
        let h = host();
        let mut s = vec![
            svc(&["172.16.0.12", "203.0.113.10"], &["172.16.0.11"]),
            svc(&["192.0.2.10"], &[]),
        ];
        s[1].name = "fine".into();
        let refused = h.police(&mut s);
        assert_eq!(
            s[0].external_ips,
            vec!["203.0.113.10".parse::<IpAddr>().unwrap()]
        );
        assert!(s[0].ingress_ips.is_empty());
        assert_eq!(s[1].external_ips.len(), 1);
        assert_eq!(
            refused,
            vec![
                "team-a/grab: 172.16.0.11 is an address of this host".to_string(),
                "team-a/grab: 172.16.0.12 is in 172.16.0.0/24, which this host routes through br-phy"
                    .to_string(),
            ]
        );
    }

    #[test]
    fn default_and_management_port_routes_do_not_count() {
        use netlink_packet_route::route::RouteHeader;
        let names = std::collections::BTreeMap::from([
            (3, "br-phy".to_string()),
            (7, MGMT_PORT.to_string()),
        ]);
        let route = |dest: &str, len: u8, oif: u32, gw: Option<&str>| {
            let mut m = RouteMessage::default();
            m.header = RouteHeader {
                destination_prefix_length: len,
                kind: RouteType::Unicast,
                ..m.header
            };
            let d: std::net::Ipv4Addr = dest.parse().unwrap();
            m.attributes
                .push(RouteAttribute::Destination(RouteAddress::Inet(d)));
            m.attributes.push(RouteAttribute::Oif(oif));
            if let Some(g) = gw {
                m.attributes
                    .push(RouteAttribute::Gateway(RouteAddress::Inet(
                        g.parse().unwrap(),
                    )));
            }
            m
        };
        let mut h = HostAddresses::default();
        add_route(
            &mut h,
            &route("0.0.0.0", 0, 3, Some("172.16.0.254")),
            Some(7),
            &names,
        );
        add_route(
            &mut h,
            &route("10.244.0.0", 16, 7, Some("100.64.0.1")),
            Some(7),
            &names,
        );
        add_route(&mut h, &route("172.16.0.0", 24, 3, None), Some(7), &names);
        assert_eq!(
            h.routed,
            vec![("172.16.0.0/24".parse().unwrap(), "br-phy".to_string())]
        );
        // next hops count wherever they are
        assert_eq!(
            h.next_hops,
            vec![
                "172.16.0.254".parse::<IpAddr>().unwrap(),
                "100.64.0.1".parse().unwrap()
            ]
        );
        assert_eq!(h.refusal("10.244.3.4".parse().unwrap()), None);
    }
}
