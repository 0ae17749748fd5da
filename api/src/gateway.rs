//! The node gateway of `shared` gateway mode: what the node agent reports about the
//! interface its node's gateway router shares ([`NodeGateway`], the Node annotation
//! [`crate::keys::NODE_GATEWAY`]), and the OVN and OVS names both sides compute.
//!
//! The gateway router `GR_<node>` takes the interface's own address and MAC (the node
//! keeps one address on the underlay, as with ovn-kubernetes' shared gateway), its IPv6
//! address too when the report has one and an IPv6 next hop; the agent splits the
//! bridge's traffic between the host and the router.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

/// What the node agent found for its gateway interface (JSON in the Node annotation
/// [`crate::keys::NODE_GATEWAY`]). `error` set: the controller builds no gateway router
/// for the node and says why; its pods leave through the management port meanwhile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGateway {
    /// The OVS bridge holding the node's uplink and address (e.g. `br-phy`).
    pub interface: String,
    /// The bridge's MAC (`0a:58:...`), which the gateway router's external port takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// The bridge's IPv4 address with its prefix (`172.16.0.1/24`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Ipv4Net>,
    /// The IPv4 next hop of traffic leaving the cluster (the underlay's router).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_hop_v4: Option<Ipv4Addr>,
    /// The bridge's global IPv6 address with its prefix (`fd00:172:16::1/64`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Net>,
    /// The IPv6 next hop; with [`Self::ipv6`] it gives the gateway router an IPv6 side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_hop_v6: Option<Ipv6Addr>,
    /// Why the agent cannot offer a gateway on this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why a gateway report offers no usable IPv4 gateway.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum GatewayUnusable {
    /// The agent's own verdict ([`NodeGateway::error`]), word for word.
    #[error("{0}")]
    Reported(String),
    #[error("{interface} has no IPv4 address")]
    NoIpv4 { interface: String },
    #[error("{interface} has no MAC")]
    NoMac { interface: String },
    #[error("{interface}: MAC: {source}")]
    BadMac {
        interface: String,
        source: crate::mac::BadMac,
    },
    #[error("{interface}: no IPv4 next hop")]
    NoNextHopV4 { interface: String },
}

impl NodeGateway {
    /// The IPv4 part of a usable gateway: (address with prefix, MAC, next hop), or why not.
    pub fn usable_v4(&self) -> Result<(Ipv4Net, crate::mac::Mac, IpAddr), GatewayUnusable> {
        if let Some(e) = &self.error {
            return Err(GatewayUnusable::Reported(e.clone()));
        }
        let interface = || self.interface.clone();
        let ip = self.ipv4.ok_or_else(|| GatewayUnusable::NoIpv4 {
            interface: interface(),
        })?;
        let mac = self
            .mac
            .as_deref()
            .ok_or_else(|| GatewayUnusable::NoMac {
                interface: interface(),
            })?
            .parse::<crate::mac::Mac>()
            .map_err(|source| GatewayUnusable::BadMac {
                interface: interface(),
                source,
            })?;
        let hop = self
            .next_hop_v4
            .ok_or_else(|| GatewayUnusable::NoNextHopV4 {
                interface: interface(),
            })?;
        Ok((ip, mac, IpAddr::V4(hop)))
    }

    /// The IPv6 part (address with prefix, next hop) when the report has both; without
    /// it the node's pods leave over IPv6 through its management port.
    pub fn usable_v6(&self) -> Option<(Ipv6Net, Ipv6Addr)> {
        if self.error.is_some() {
            return None;
        }
        Some((self.ipv6?, self.next_hop_v6?))
    }
}

/// The gateway router of `node`.
pub fn gateway_router(node: &str) -> String {
    format!("GR_{node}")
}

/// The external switch of `node`'s gateway router (its port and the localnet port).
pub fn external_switch(node: &str) -> String {
    format!("ext_{node}")
}

/// The localnet port on [`external_switch`]: ovn-controller names the OVS patch port on
/// the gateway bridge after it ([`gateway_patch_port`]).
pub fn external_localnet_port(node: &str) -> String {
    format!("lnet_{node}")
}

/// The OVS patch port ovn-controller creates on the gateway bridge for
/// [`external_localnet_port`] (`patch-<localnet port>-to-br-int`).
pub fn gateway_patch_port(node: &str) -> String {
    format!("patch-{}-to-br-int", external_localnet_port(node))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_only_with_address_mac_and_next_hop() {
        let mut g = NodeGateway {
            interface: "br-phy".into(),
            mac: Some("0a:58:ac:10:00:01".into()),
            ipv4: Some("172.16.0.1/24".parse().unwrap()),
            next_hop_v4: Some(Ipv4Addr::new(172, 16, 0, 254)),
            ipv6: Some("fd00:172:16::1/64".parse().unwrap()),
            next_hop_v6: None,
            error: None,
        };
        assert_eq!(g.usable_v6(), None, "no IPv6 next hop");
        g.next_hop_v6 = Some("fd00:172:16::fe".parse().unwrap());
        assert_eq!(
            g.usable_v6().map(|(a, h)| (a.to_string(), h.to_string())),
            Some(("fd00:172:16::1/64".into(), "fd00:172:16::fe".into()))
        );
        let (ip, _, hop) = g.usable_v4().unwrap();
        assert_eq!(ip.to_string(), "172.16.0.1/24");
        assert_eq!(hop.to_string(), "172.16.0.254");
        let json = serde_json::to_string(&g).unwrap();
        assert!(json.contains("\"nextHopV4\":\"172.16.0.254\""), "{json}");
        assert_eq!(serde_json::from_str::<NodeGateway>(&json).unwrap(), g);
        g.next_hop_v4 = None;
        assert_eq!(
            g.usable_v4().unwrap_err().to_string(),
            "br-phy: no IPv4 next hop"
        );
        g.error = Some("interface eth9 does not exist".into());
        assert_eq!(
            g.usable_v4().unwrap_err().to_string(),
            "interface eth9 does not exist"
        );
        assert_eq!(g.usable_v6(), None);
    }
}
