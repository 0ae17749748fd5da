//! External mode, host ↔ pod: the node's management ports on the platform's switches
//! (`network.zstack.io/platform-mgmt-ports` on the Node, [`api::platform_mgmt`]).
//!
//! Each entry becomes an OVS internal port on `br-int` named
//! [`api::platform_mgmt::device_name`] (`zpm<hash of the Subnet>`), bound to the logical
//! port the controller made on the platform switch (`iface-id`), with its MAC, the pod MTU
//! and its address at the Subnet's prefix length: the kernel's on-link route for the
//! Subnet then takes the host's traffic to the pods there (kubelet's probes), and they
//! answer on-link, without the platform's router. A device of ours that the annotation no
//! longer names (the node's last pod of that Subnet gone) is removed from OVS.
//!
//! Services: the node's first port of each family (by Subnet name) also routes the
//! entry's `routes` (the Service CIDRs) and the agent's external-IP prefixes via the
//! Subnet's gateway, the platform's router, exactly as a pod there sends to a ClusterIP:
//! the platform switch carries our load balancers, which DNAT it on the way. So the host
//! reaches ClusterIPs, and NodePorts (DNATed to them by the host's Service NAT and
//! masqueraded to this port's address) serve clients from outside. Routes of ours via a
//! gateway on the other ports are removed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use api::Mac;
use api::platform_mgmt::{self, PLATFORM_MGMT_PORTS, PlatformMgmtPort};

use super::mgmt::{MgmtError, MgmtFamily, configure_link, set_address, set_routes};
use crate::attach::pod_iface::{self, PlumbError, netns};
use crate::ovs::{Ovs, PortSpec};

/// One port as the host sets it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub device: String,
    pub iface_id: String,
    pub mac: [u8; 6],
    pub addresses: Vec<IpNet>,
    /// The Subnet's gateways (the platform's router).
    pub gateways: Vec<IpAddr>,
    /// What the host reaches through this port via its gateway (the Service CIDRs).
    pub routes: Vec<IpNet>,
}

/// The ports of the node's annotations (none when the annotation is absent or empty).
pub fn from_annotations(
    node: &str,
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<HostPort>, MgmtError> {
    let bad = |detail: String| MgmtError::Annotation {
        node: node.to_string(),
        annotation: PLATFORM_MGMT_PORTS,
        detail,
    };
    let raw = annotations
        .get(PLATFORM_MGMT_PORTS)
        .map(String::as_str)
        .unwrap_or("");
    let ports = platform_mgmt::decode(raw).map_err(|e| bad(e.to_string()))?;
    ports.iter().map(|p| host_port(p).map_err(bad)).collect()
}

fn host_port(p: &PlatformMgmtPort) -> Result<HostPort, String> {
    let mac = p
        .mac_address
        .parse::<Mac>()
        .map_err(|e| format!("Subnet {}: {e}", p.subnet))?
        .octets();
    let addresses = p
        .ip_addresses
        .iter()
        .map(|a| {
            a.parse::<IpNet>()
                .map_err(|e| format!("Subnet {}: address {a:?}: {e}", p.subnet))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if addresses.is_empty() {
        return Err(format!("Subnet {}: no address", p.subnet));
    }
    let gateways = p
        .gateway_ips
        .iter()
        .map(|g| {
            g.parse::<IpAddr>()
                .map_err(|e| format!("Subnet {}: gateway {g:?}: {e}", p.subnet))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let routes = p
        .routes
        .iter()
        .map(|r| {
            r.parse::<IpNet>()
                .map_err(|e| format!("Subnet {}: route {r:?}: {e}", p.subnet))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(HostPort {
        device: platform_mgmt::device_name(&p.subnet),
        iface_id: p.port.clone(),
        mac,
        addresses,
        gateways,
        routes,
    })
}

fn port_spec(p: &HostPort) -> PortSpec {
    PortSpec {
        iface_type: "internal".into(),
        mac: Some(Mac(p.mac).to_string()),
        iface_external_ids: BTreeMap::from([("iface-id".to_string(), p.iface_id.clone())]),
        ..PortSpec::new(p.device.clone())
    }
}

/// The routes of each port, per family with a gateway: the first port of a family (in
/// `ports`' order) gets its `routes` and `extra` of that family, the others none (their
/// stale routes via the gateway go).
pub fn families(ports: &[HostPort], extra: &[IpNet]) -> Vec<Vec<MgmtFamily>> {
    let mut taken = BTreeSet::new();
    ports
        .iter()
        .map(|p| {
            p.addresses
                .iter()
                .filter_map(|a| {
                    let v4 = a.addr().is_ipv4();
                    let gateway = *p.gateways.iter().find(|g| g.is_ipv4() == v4)?;
                    let subnets = if taken.insert(v4) {
                        let mut s: Vec<IpNet> = p
                            .routes
                            .iter()
                            .chain(extra)
                            .filter(|r| r.addr().is_ipv4() == v4)
                            .copied()
                            .collect();
                        s.sort();
                        s.dedup();
                        s
                    } else {
                        Vec::new()
                    };
                    Some(MgmtFamily {
                        address: *a,
                        gateway,
                        subnets,
                    })
                })
                .collect()
        })
        .collect()
}

/// Makes the host's management ports on platform switches exactly `ports`: creates or
/// updates each (OVS port, then MAC, MTU, up state, addresses and routes in the host
/// netns, [`families`]) and removes our `zpm*` ports no longer wanted. `extra`: more
/// destinations for the Service routes (the external-IP prefixes). Returns the devices
/// removed.
pub async fn ensure(
    ovs: &Ovs,
    ports: &[HostPort],
    mtu: u32,
    extra: &[IpNet],
) -> Result<Vec<String>, MgmtError> {
    for (p, fams) in ports.iter().zip(families(ports, extra)) {
        ovs.ensure_port(&port_spec(p)).await?;
        let host = p.clone();
        let r = tokio::task::spawn_blocking(move || {
            netns::run_in_netns(None, move |h| async move {
                let idx = configure_link(&h, &host.device, host.mac, mtu).await?;
                for a in &host.addresses {
                    set_address(&h, idx, *a).await?;
                }
                for f in &fams {
                    set_routes(&h, idx, f).await?;
                }
                Ok::<(), PlumbError>(())
            })
        })
        .await
        .map_err(MgmtError::Worker)?;
        r.map_err(|e| MgmtError::Platform {
            device: p.device.clone(),
            source: e,
        })?;
        let dev = p.device.clone();
        // the host sends through OVS userspace: partial checksums would be dropped
        if let Ok(Err(e)) =
            tokio::task::spawn_blocking(move || pod_iface::set_tx_checksum(&dev, false)).await
        {
            tracing::warn!(device = %p.device, error = %e, "could not turn tx checksum offload off");
        }
    }
    let wanted: BTreeSet<&str> = ports.iter().map(|p| p.device.as_str()).collect();
    let mut removed = Vec::new();
    for stale in ovs
        .owned_ports()
        .into_iter()
        .filter(|p| platform_mgmt::is_device_name(&p.name) && !wanted.contains(p.name.as_str()))
    {
        ovs.delete_owned(&stale).await?;
        tracing::info!(device = %stale.name, "platform management port no longer wanted: removed");
        removed.push(stale.name);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotation_to_host_ports() {
        let ann = BTreeMap::from([(
            PLATFORM_MGMT_PORTS.to_string(),
            r#"[{"subnet":"platform","port":"mgmt.n1_platform","mac_address":"0a:58:0a:63:00:07","ip_addresses":["10.99.0.7/24"],"gateway_ips":["10.99.0.1"],"routes":["10.96.0.0/16"]}]"#.to_string(),
        )]);
        let ports = from_annotations("n1", &ann).expect("parses");
        assert_eq!(
            ports,
            [HostPort {
                device: platform_mgmt::device_name("platform"),
                iface_id: "mgmt.n1_platform".into(),
                mac: [0x0a, 0x58, 0x0a, 0x63, 0x00, 0x07],
                addresses: vec!["10.99.0.7/24".parse().expect("cidr")],
                gateways: vec!["10.99.0.1".parse().expect("ip")],
                routes: vec!["10.96.0.0/16".parse().expect("cidr")],
            }]
        );
        let spec = port_spec(&ports[0]);
        assert_eq!(spec.iface_external_ids["iface-id"], "mgmt.n1_platform");
        assert_eq!(spec.iface_type, "internal");
        // none: no ports (the node hosts no pod on a platform switch)
        assert!(
            from_annotations("n1", &BTreeMap::new())
                .expect("none")
                .is_empty()
        );
        // a bad address names the Subnet and the annotation
        let bad = BTreeMap::from([(
            PLATFORM_MGMT_PORTS.to_string(),
            r#"[{"subnet":"platform","port":"p","mac_address":"0a:58:0a:63:00:07","ip_addresses":["10.99.0.300/24"]}]"#.to_string(),
        )]);
        let e = from_annotations("n1", &bad)
            .expect_err("bad address")
            .to_string();
        assert!(
            e.contains(PLATFORM_MGMT_PORTS) && e.contains("Subnet platform"),
            "{e}"
        );
    }

    fn port(subnet: &str, address: &str, gateway: Option<&str>) -> HostPort {
        HostPort {
            device: platform_mgmt::device_name(subnet),
            iface_id: format!("mgmt.n1_{subnet}"),
            mac: [0x0a, 0x58, 0, 0, 0, 1],
            addresses: vec![address.parse().expect("cidr")],
            gateways: gateway
                .map(|g| g.parse().expect("ip"))
                .into_iter()
                .collect(),
            routes: vec![
                "10.96.0.0/16".parse().expect("cidr"),
                "fd00:96::/112".parse().expect("cidr"),
            ],
        }
    }

    #[test]
    fn the_first_port_of_a_family_with_a_gateway_takes_the_service_routes() {
        let extra = ["203.0.113.10/32".parse().expect("cidr")];
        // a: no gateway (nothing routed there); b: the first IPv4 port with one; c: later
        let ports = [
            port("a", "10.97.0.7/24", None),
            port("b", "10.98.0.7/24", Some("10.98.0.1")),
            port("c", "10.99.0.7/24", Some("10.99.0.1")),
        ];
        let f = families(&ports, &extra);
        assert!(f[0].is_empty(), "{f:?}");
        assert_eq!(f[1].len(), 1);
        assert_eq!(f[1][0].gateway.to_string(), "10.98.0.1");
        assert_eq!(
            f[1][0].subnets,
            [
                "10.96.0.0/16".parse::<IpNet>().expect("cidr"),
                "203.0.113.10/32".parse().expect("cidr"),
            ],
            "the IPv4 Service CIDR and the external IPs, not the IPv6 CIDR"
        );
        // the later port: no route wanted, so stale ones via its gateway go
        assert_eq!(f[2].len(), 1);
        assert!(f[2][0].subnets.is_empty(), "{f:?}");
    }
}
