//! Host ↔ pod in external mode: a node's management ports on the platform's switches.
//!
//! In external mode a Subnet's pods sit on a switch the platform owns
//! (`externalLogicalSwitch`), which no router of ours reaches. So that the node's host
//! (kubelet's probes, host-network clients) reaches the pods it hosts there, the
//! controller gives each node one port on each such switch where the node has pods: a
//! Logical_Switch_Port [`port_name`] with an address of the Subnet (reserved by IPAM, so
//! no pod or platform VM gets it) and writes them on the Node as
//! [`PLATFORM_MGMT_PORTS`]:
//!
//! ```json
//! [{"subnet":"platform","port":"mgmt.node1_platform","mac_address":"0a:58:0a:63:00:07",
//!   "ip_addresses":["10.99.0.7/24"]}]
//! ```
//!
//! The node agent makes each an OVS internal port named [`device_name`] bound to the
//! logical port (`iface-id`), with the address and the Subnet's prefix: the host then
//! reaches the Subnet on-link, and the pods answer on-link, without the platform's router.
//! Each entry also carries the Subnet's gateways and the Service CIDRs (`gateway_ips`,
//! `routes`): the host reaches Services (and NodePorts DNATed to them) through the node's
//! first port of each family, via the platform's router as the pods there do, so the
//! switch's load balancers serve it.

use serde::{Deserialize, Serialize};

pub use crate::keys::PLATFORM_MGMT_PORTS;

/// One management port of a node on a platform switch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlatformMgmtPort {
    /// The Subnet (with `externalLogicalSwitch`) the address comes from.
    pub subnet: String,
    /// The Logical_Switch_Port, [`port_name`] (the OVS interface's `iface-id`).
    pub port: String,
    pub mac_address: String,
    /// The addresses with the Subnet's prefix length, one per family.
    pub ip_addresses: Vec<String>,
    /// The Subnet's gateways (the platform's router), one per family.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateway_ips: Vec<String>,
    /// Destinations the host reaches through this port via its gateway: the Service
    /// CIDRs (the switch carries our load balancers; the node's first port of a family
    /// takes them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<String>,
}

/// A [`PLATFORM_MGMT_PORTS`] value that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("annotation {PLATFORM_MGMT_PORTS}: not a list of platform management ports: {0}")]
pub struct DecodeError(#[from] serde_json::Error);

/// Decodes [`PLATFORM_MGMT_PORTS`] (`""` is no port).
pub fn decode(raw: &str) -> Result<Vec<PlatformMgmtPort>, DecodeError> {
    if raw.trim().is_empty() {
        return Ok(Vec::new());
    }
    Ok(serde_json::from_str(raw)?)
}

/// Encodes [`PLATFORM_MGMT_PORTS`] (ports sorted by Subnet, so the value is stable).
pub fn encode(ports: &[PlatformMgmtPort]) -> String {
    let mut ports = ports.to_vec();
    ports.sort_by(|a, b| a.subnet.cmp(&b.subnet));
    serde_json::to_string(&ports).unwrap_or_default()
}

/// The logical port of `node` on the switch of `subnet`: `mgmt.<node>_<subnet>`. Node and
/// Subnet names hold no `_`, so the pair is unambiguous; a namespace holds no `.`, so it
/// is never a pod's `<namespace>_<pod>` port.
pub fn port_name(node: &str, subnet: &str) -> String {
    format!("mgmt.{node}_{subnet}")
}

/// The host device (OVS internal port) of the management port on `subnet`'s switch:
/// `zpm` + 10 hex digits of the Subnet's name (13 characters, under the kernel's 15).
pub fn device_name(subnet: &str) -> String {
    format!("zpm{}", &crate::hash::hex(subnet.as_bytes())[..10])
}

/// Whether `name` is a device [`device_name`] makes (the agent removes those it no
/// longer wants).
pub fn is_device_name(name: &str) -> bool {
    name.len() == 13 && name.starts_with("zpm") && name[3..].bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_sorted_and_empty() {
        let p = |s: &str| PlatformMgmtPort {
            subnet: s.into(),
            port: port_name("node1", s),
            mac_address: "0a:58:0a:63:00:07".into(),
            ip_addresses: vec!["10.99.0.7/24".into()],
            gateway_ips: vec!["10.99.0.1".into()],
            routes: vec!["10.96.0.0/16".into()],
        };
        let raw = encode(&[p("zeta"), p("alpha")]);
        let back = decode(&raw).expect("decodes");
        assert_eq!(back, [p("alpha"), p("zeta")]);
        // written by a controller before gateways and routes: still read
        let old = decode(
            r#"[{"subnet":"a","port":"p","mac_address":"0a:58:0a:63:00:07","ip_addresses":["10.99.0.7/24"]}]"#,
        )
        .expect("an older entry");
        assert!(old[0].gateway_ips.is_empty() && old[0].routes.is_empty());
        assert!(decode("").expect("empty").is_empty());
        let e = decode("{").expect_err("bad JSON").to_string();
        assert!(e.contains(PLATFORM_MGMT_PORTS), "{e}");
    }

    #[test]
    fn names() {
        assert_eq!(port_name("node1", "platform"), "mgmt.node1_platform");
        let d = device_name("platform");
        assert!(d.len() <= 15 && is_device_name(&d), "{d}");
        assert_ne!(d, device_name("platform2"));
        assert!(!is_device_name("ovn-k8s-mp0"));
        assert!(!is_device_name("zpm12"));
    }
}
