//! The node's management port `ovn-k8s-mp0`: an OVS internal port on `br-int` bound to
//! the logical port `node-<NAME>` on the join switch, with the join address(es) in the host
//! netns and a route to every pod Subnet via the join gateway of its family (IPv4, and
//! IPv6 when the join network has an IPv6 part).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::address::AddressAttribute;
use netlink_packet_route::link::{LinkAttribute, LinkFlags};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteHeader, RouteProtocol};
use rtnetlink::{Handle, LinkUnspec, RouteMessageBuilder};

use api::Mac;
use api::pod_networks::{NODE_MGMT_PORT, PodNetwork};

use crate::attach::pod_iface::{self, PlumbError, StepExt, netns};
use crate::ovs::{Ovs, OvsError, PortSpec};

/// The management port's name (OVS port and host interface).
pub const MGMT_PORT: &str = "ovn-k8s-mp0";

/// What the management port should carry (from the node's `network.zstack.io/mgmt-port`
/// annotation and the Subnets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MgmtConfig {
    pub node: String,
    pub mac: [u8; 6],
    /// One entry per family the annotation gives an address and a gateway for.
    pub families: Vec<MgmtFamily>,
    pub mtu: u32,
}

/// The management port's address, gateway and routed Subnets of one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MgmtFamily {
    pub address: IpNet,
    pub gateway: IpAddr,
    pub subnets: Vec<IpNet>,
}

impl MgmtConfig {
    /// Every routed Subnet, both families.
    pub fn subnets(&self) -> Vec<IpNet> {
        self.families
            .iter()
            .flat_map(|f| f.subnets.iter().copied())
            .collect()
    }
}

/// Errors of the management port.
#[derive(Debug, thiserror::Error)]
pub enum MgmtError {
    #[error("node {node}: annotation {annotation}: {detail}")]
    Annotation {
        node: String,
        annotation: &'static str,
        detail: String,
    },
    #[error(transparent)]
    Ovs(#[from] OvsError),
    #[error("management port {MGMT_PORT}: worker: {0}")]
    Worker(#[source] tokio::task::JoinError),
    #[error("management port {MGMT_PORT}: {0}")]
    Plumb(#[from] PlumbError),
    /// A management port on a platform switch ([`super::platform_mgmt`]).
    #[error("platform management port {device}: {source}")]
    Platform {
        device: String,
        #[source]
        source: PlumbError,
    },
    /// Reading the Node or the Subnets ([`crate::agent::Agent::ensure_mgmt`]).
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error("Node {0} does not exist")]
    NoNode(String),
}

impl MgmtConfig {
    /// From the node's annotations (`network.zstack.io/mgmt-port`, a PodNetwork entry).
    pub fn from_annotations(
        node: &str,
        annotations: &BTreeMap<String, String>,
        subnets: Vec<IpNet>,
        mtu: u32,
    ) -> Result<MgmtConfig, MgmtError> {
        let bad = |detail: String| MgmtError::Annotation {
            node: node.to_string(),
            annotation: NODE_MGMT_PORT,
            detail,
        };
        let raw = annotations
            .get(NODE_MGMT_PORT)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| bad("not set (yet)".into()))?;
        let pn = PodNetwork::decode(NODE_MGMT_PORT, raw)
            .map_err(|e| bad(format!("not a pod network entry: {e}")))?;
        let addresses: Vec<IpNet> = pn
            .ip_addresses
            .iter()
            .filter_map(|a| a.parse::<IpNet>().ok())
            .collect();
        let gateways: Vec<IpAddr> = pn
            .gateway_ips
            .iter()
            .filter_map(|g| g.parse::<IpAddr>().ok())
            .collect();
        let mac = pn
            .mac_address
            .parse::<Mac>()
            .map_err(|e| bad(e.to_string()))?
            .octets();
        // the Subnets, and the annotation's routes (the Service CIDRs)
        let mut all: Vec<IpNet> = subnets
            .into_iter()
            .chain(
                pn.routes
                    .iter()
                    .filter_map(|r| r.dest.parse::<IpNet>().ok()),
            )
            .collect();
        all.sort();
        all.dedup();
        let families: Vec<MgmtFamily> = addresses
            .iter()
            .filter_map(|a| {
                let v4 = a.addr().is_ipv4();
                let gateway = *gateways.iter().find(|g| g.is_ipv4() == v4)?;
                Some(MgmtFamily {
                    address: *a,
                    gateway,
                    subnets: all
                        .iter()
                        .filter(|s| s.addr().is_ipv4() == v4)
                        .copied()
                        .collect(),
                })
            })
            .collect();
        if families.is_empty() {
            return Err(bad(format!(
                "no address with a gateway of its family in {:?} / {:?}",
                pn.ip_addresses, pn.gateway_ips
            )));
        }
        Ok(MgmtConfig {
            node: node.to_string(),
            mac,
            families,
            mtu,
        })
    }

    /// The OVS port.
    pub fn port_spec(&self) -> PortSpec {
        PortSpec {
            name: MGMT_PORT.into(),
            iface_type: "internal".into(),
            mac: Some(Mac(self.mac).to_string()),
            iface_external_ids: BTreeMap::from([(
                "iface-id".to_string(),
                api::names::node_port(&self.node),
            )]),
            ..PortSpec::new(MGMT_PORT)
        }
    }
}

/// Creates/updates the OVS port, waits for the device to appear in the host netns and
/// configures MAC, MTU, address, up state and routes there.
pub async fn ensure(ovs: &Ovs, cfg: &MgmtConfig) -> Result<(), MgmtError> {
    ovs.ensure_port(&cfg.port_spec()).await?;
    let cfg2 = cfg.clone();
    let r = tokio::task::spawn_blocking(move || {
        netns::run_in_netns(None, move |h| async move { configure(&h, &cfg2).await })
    })
    .await
    .map_err(MgmtError::Worker)?;
    r?;
    // the host sends through OVS userspace: partial checksums would be dropped on the way
    let off = tokio::task::spawn_blocking(|| pod_iface::set_tx_checksum(MGMT_PORT, false)).await;
    if let Ok(Err(e)) = off {
        tracing::warn!(error = %e, "could not turn tx checksum offload off on {MGMT_PORT}");
    }
    Ok(())
}

async fn configure(h: &Handle, cfg: &MgmtConfig) -> Result<(), PlumbError> {
    let idx = configure_link(h, MGMT_PORT, cfg.mac, cfg.mtu).await?;
    for fam in &cfg.families {
        configure_family(h, idx, fam).await?;
    }
    Ok(())
}

/// Waits (10 s at most: ovs-vswitchd creates the tap device asynchronously) for the
/// device `name` of an OVS internal port in the current netns, and sets its MAC, MTU and
/// up state where they differ; its index.
pub(crate) async fn configure_link(
    h: &Handle,
    name: &str,
    want_mac: [u8; 6],
    want_mtu: u32,
) -> Result<u32, PlumbError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let link = loop {
        let mut s = h.link().get().match_name(name.to_string()).execute();
        match s.try_next().await {
            Ok(Some(m)) => break m,
            Ok(None) | Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(None) => {
                return Err(PlumbError::Step {
                    step: "wait for the device".into(),
                    source: "it did not appear in the host netns within 10 s".into(),
                });
            }
            Err(e) => return Err(e).step(|| "look up the device".into()),
        }
    };
    let idx = link.header.index;
    let up = link.header.flags.contains(LinkFlags::Up);
    let mut mac = Vec::new();
    let mut mtu = 0;
    for a in &link.attributes {
        match a {
            LinkAttribute::Address(m) => mac = m.clone(),
            LinkAttribute::Mtu(m) => mtu = *m,
            _ => {}
        }
    }
    if mac != want_mac {
        h.link()
            .set(
                LinkUnspec::new_with_index(idx)
                    .address(want_mac.to_vec())
                    .build(),
            )
            .execute()
            .await
            .step(|| "set MAC".into())?;
    }
    if mtu != want_mtu {
        h.link()
            .set(LinkUnspec::new_with_index(idx).mtu(want_mtu).build())
            .execute()
            .await
            .step(|| "set MTU".into())?;
    }
    if !up {
        h.link()
            .set(LinkUnspec::new_with_index(idx).up().build())
            .execute()
            .await
            .step(|| "bring up".into())?;
    }
    Ok(idx)
}

/// One family's address (ours added, other static ones of the family dropped) and routes
/// (every Subnet of the family via its join gateway; stale ones of ours removed).
async fn configure_family(h: &Handle, idx: u32, fam: &MgmtFamily) -> Result<(), PlumbError> {
    set_address(h, idx, fam.address).await?;
    set_routes(h, idx, fam).await
}

/// Puts `address` on device `idx` and drops its other addresses of that family (link-local
/// IPv6 ones kept).
pub(crate) async fn set_address(h: &Handle, idx: u32, address: IpNet) -> Result<(), PlumbError> {
    let mut have = Vec::new();
    let mut s = h.address().get().set_link_index_filter(idx).execute();
    while let Some(m) = s.try_next().await.step(|| "list addresses".into())? {
        if m.header.index != idx {
            continue;
        }
        let mut ip = None;
        for a in &m.attributes {
            match a {
                AddressAttribute::Local(l) => ip = Some(*l),
                AddressAttribute::Address(l) if ip.is_none() => ip = Some(*l),
                _ => {}
            }
        }
        if let Some(ip) = ip
            && let Ok(net) = IpNet::new(ip, m.header.prefix_len)
        {
            have.push((net, m));
        }
    }
    if !have.iter().any(|(n, _)| *n == address) {
        h.address()
            .add(idx, address.addr(), address.prefix_len())
            .execute()
            .await
            .step(|| format!("add address {address}"))?;
        tracing::info!(%address, "management port address set");
    }
    for (net, m) in have {
        let link_local = matches!(net, IpNet::V6(n) if n.addr().is_unicast_link_local());
        if net != address && !link_local && net.addr().is_ipv4() == address.addr().is_ipv4() {
            h.address()
                .del(m)
                .execute()
                .await
                .step(|| format!("remove stale address {net}"))?;
        }
    }

    Ok(())
}

/// Routes to every Subnet of the family via the join gateway; stale ones of ours (static,
/// via the gateway, on this device) removed.
pub(super) async fn set_routes(h: &Handle, idx: u32, fam: &MgmtFamily) -> Result<(), PlumbError> {
    let v6 = fam.gateway.is_ipv6();
    let query = if v6 {
        RouteMessageBuilder::<Ipv6Addr>::new().build()
    } else {
        RouteMessageBuilder::<Ipv4Addr>::new().build()
    };
    let mut present = Vec::new();
    let mut s = h.route().get(query).execute();
    while let Some(m) = s.try_next().await.step(|| "list routes".into())? {
        let mut table = u32::from(m.header.table);
        let (mut dest, mut gw, mut oif) = (None, None, None);
        for a in &m.attributes {
            match a {
                RouteAttribute::Table(t) => table = *t,
                RouteAttribute::Destination(RouteAddress::Inet(d)) => dest = Some(IpAddr::V4(*d)),
                RouteAttribute::Destination(RouteAddress::Inet6(d)) => dest = Some(IpAddr::V6(*d)),
                RouteAttribute::Gateway(RouteAddress::Inet(g)) => gw = Some(IpAddr::V4(*g)),
                RouteAttribute::Gateway(RouteAddress::Inet6(g)) => gw = Some(IpAddr::V6(*g)),
                RouteAttribute::Oif(i) => oif = Some(*i),
                _ => {}
            }
        }
        if table != u32::from(RouteHeader::RT_TABLE_MAIN) || oif != Some(idx) {
            continue;
        }
        let Some(dest) = dest else { continue };
        if let Ok(net) = IpNet::new(dest, m.header.destination_prefix_length) {
            present.push((net, gw, m));
        }
    }
    for subnet in &fam.subnets {
        if present
            .iter()
            .any(|(d, g, _)| d == subnet && *g == Some(fam.gateway))
        {
            continue;
        }
        let msg = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(subnet.addr(), subnet.prefix_len())
            .and_then(|b| b.gateway(fam.gateway))
            .step(|| format!("route {subnet}"))?
            .output_interface(idx)
            .build();
        h.route()
            .add(msg)
            .replace()
            .execute()
            .await
            .step(|| format!("add route {subnet} via {}", fam.gateway))?;
        tracing::info!(%subnet, via = %fam.gateway, "management route set");
    }
    for (d, g, m) in present {
        if g == Some(fam.gateway)
            && m.header.protocol == RouteProtocol::Static
            && !fam.subnets.contains(&d)
        {
            h.route()
                .del(m)
                .execute()
                .await
                .step(|| format!("remove stale route {d}"))?;
            tracing::info!(subnet = %d, "stale management route removed");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_from_annotation() {
        let ann = BTreeMap::from([(
            NODE_MGMT_PORT.to_string(),
            r#"{"ip_addresses":["100.64.0.3/16"],"mac_address":"0a:58:64:40:00:03","gateway_ips":["100.64.0.1"],"routes":[]}"#.to_string(),
        )]);
        let c = MgmtConfig::from_annotations(
            "n1",
            &ann,
            vec![
                "10.16.0.0/16".parse().unwrap(),
                "fd00::/64".parse().unwrap(),
            ],
            1400,
        )
        .unwrap();
        assert_eq!(c.families.len(), 1);
        assert_eq!(c.families[0].address.to_string(), "100.64.0.3/16");
        assert_eq!(c.families[0].subnets, vec!["10.16.0.0/16".parse().unwrap()]);
        assert_eq!(c.port_spec().iface_external_ids["iface-id"], "node-n1");
        // dual-stack join: one family each, the Subnets split by family
        let ann = BTreeMap::from([(
            NODE_MGMT_PORT.to_string(),
            r#"{"ip_addresses":["100.64.0.3/16","fd98::3/64"],"mac_address":"0a:58:64:40:00:03","gateway_ips":["100.64.0.1","fd98::1"],"routes":[]}"#.to_string(),
        )]);
        let c = MgmtConfig::from_annotations(
            "n1",
            &ann,
            vec![
                "10.16.0.0/16".parse().unwrap(),
                "fd00::/64".parse().unwrap(),
            ],
            1400,
        )
        .unwrap();
        assert_eq!(c.families.len(), 2);
        assert_eq!(c.families[1].gateway.to_string(), "fd98::1");
        assert_eq!(c.families[1].subnets, vec!["fd00::/64".parse().unwrap()]);
        assert_eq!(c.subnets().len(), 2);
        let e = MgmtConfig::from_annotations("n1", &BTreeMap::new(), vec![], 1400).unwrap_err();
        assert!(e.to_string().contains("network.zstack.io/mgmt-port"), "{e}");
    }
}
