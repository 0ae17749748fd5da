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

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;

use api::Mac;
use api::platform_mgmt::{self, PLATFORM_MGMT_PORTS, PlatformMgmtPort};

use super::mgmt::{MgmtError, configure_link, set_address};
use crate::attach::pod_iface::{self, PlumbError, netns};
use crate::ovs::{Ovs, PortSpec};

/// One port as the host sets it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub device: String,
    pub iface_id: String,
    pub mac: [u8; 6],
    pub addresses: Vec<IpNet>,
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
    Ok(HostPort {
        device: platform_mgmt::device_name(&p.subnet),
        iface_id: p.port.clone(),
        mac,
        addresses,
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

/// Makes the host's management ports on platform switches exactly `ports`: creates or
/// updates each (OVS port, then MAC, MTU, up state and addresses in the host netns) and
/// removes our `zpm*` ports no longer wanted. Returns the devices removed.
pub async fn ensure(ovs: &Ovs, ports: &[HostPort], mtu: u32) -> Result<Vec<String>, MgmtError> {
    for p in ports {
        ovs.ensure_port(&port_spec(p)).await?;
        let host = p.clone();
        let r = tokio::task::spawn_blocking(move || {
            netns::run_in_netns(None, move |h| async move {
                let idx = configure_link(&h, &host.device, host.mac, mtu).await?;
                for a in &host.addresses {
                    set_address(&h, idx, *a).await?;
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
            r#"[{"subnet":"platform","port":"mgmt.n1_platform","mac_address":"0a:58:0a:63:00:07","ip_addresses":["10.99.0.7/24"]}]"#.to_string(),
        )]);
        let ports = from_annotations("n1", &ann).expect("parses");
        assert_eq!(
            ports,
            [HostPort {
                device: platform_mgmt::device_name("platform"),
                iface_id: "mgmt.n1_platform".into(),
                mac: [0x0a, 0x58, 0x0a, 0x63, 0x00, 0x07],
                addresses: vec!["10.99.0.7/24".parse().expect("cidr")],
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
}
