//! The pod-networks codec: what the controller writes and the node agent reads.
//!
//! - [`POD_NETWORKS`] (`k8s.ovn.org/pod-networks`): exactly the ovn-kubernetes format, one
//!   entry per network (`default` for the primary network, `<nad-ns>/<nad-name>` for a
//!   Multus secondary network):
//!   ```json
//!   {"default":{"ip_addresses":["10.1.0.5/24"],"mac_address":"0a:58:0a:01:00:05",
//!               "gateway_ips":["10.1.0.1"],"routes":[],
//!               "ip_address":"10.1.0.5/24","gateway_ip":"10.1.0.1"}}
//!   ```
//!   (`ip_address`/`gateway_ip` are the legacy single-value fields, the first family's.)
//! - [`POD_SUBNET`] (`network.zstack.io/subnet`): the Subnet the addresses came from.
//! - [`NODE_MGMT_PORT`] (`network.zstack.io/mgmt-port`, on a Node): one [`PodNetwork`] entry.
//!
//! [`PodNetwork`] is the wire form (strings, as the JSON holds them); [`PodNetwork::typed`]
//! turns it into [`NetworkAddrs`] (IP networks, addresses and a [`Mac`]), with an error
//! naming the bad value.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub use crate::keys::{NODE_MGMT_PORT, POD_NETWORKS, POD_SUBNET};
use crate::mac::Mac;

/// The primary network's key in [`POD_NETWORKS`].
pub const DEFAULT_NETWORK: &str = "default";

/// The addresses IPAM gave a pod: what goes into the LSP and the pod annotation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodAddresses {
    pub subnet: String,
    /// One per family, with the Subnet's prefix length.
    pub ips: Vec<IpNet>,
    pub mac: Mac,
    pub gateways: Vec<IpAddr>,
}

/// One network's entry of [`POD_NETWORKS`], typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkAddrs {
    pub mac: Mac,
    /// The interface's addresses with their prefix length.
    pub ips: Vec<IpNet>,
    pub gateways: Vec<IpAddr>,
    /// Destination and next hop (`None`: on-link).
    pub routes: Vec<(IpNet, Option<IpAddr>)>,
}

/// A route in a [`PodNetwork`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dest: String,
    #[serde(rename = "nextHop")]
    pub next_hop: String,
}

/// One network's entry of `k8s.ovn.org/pod-networks`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodNetwork {
    pub ip_addresses: Vec<String>,
    pub mac_address: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateway_ips: Vec<String>,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip_address: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gateway_ip: String,
}

/// Why an annotation could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AnnotationError {
    #[error("annotation {annotation} is not valid JSON of the expected shape: {detail}")]
    Shape { annotation: String, detail: String },
    #[error("annotation {annotation} has no {network:?} network")]
    NoNetwork { annotation: String, network: String },
    #[error("annotation {annotation}: the entry lists no IP address")]
    NoAddress { annotation: String },
    #[error("annotation {annotation}: {value:?} is not a {what}")]
    Value {
        annotation: String,
        value: String,
        what: &'static str,
    },
}

impl PodNetwork {
    /// The entry for `addrs`.
    pub fn from_addresses(addrs: &PodAddresses) -> Self {
        let ips: Vec<String> = addrs.ips.iter().map(IpNet::to_string).collect();
        let gws: Vec<String> = addrs.gateways.iter().map(IpAddr::to_string).collect();
        PodNetwork {
            ip_address: ips.first().cloned().unwrap_or_default(),
            gateway_ip: gws.first().cloned().unwrap_or_default(),
            ip_addresses: ips,
            mac_address: addrs.mac.to_string(),
            gateway_ips: gws,
            routes: Vec::new(),
        }
    }

    /// The typed entry; the error names the value that is not an address, a network or a
    /// MAC. An entry without any address is refused (nothing to configure).
    pub fn typed(&self) -> Result<NetworkAddrs, AnnotationError> {
        let (ips, gateways, mac) = self.addresses_and_mac(true)?;
        let mut routes = Vec::with_capacity(self.routes.len());
        for r in &self.routes {
            let dest = r
                .dest
                .parse::<IpNet>()
                .map_err(|_| value_error(&r.dest, "route destination"))?;
            let via = if r.next_hop.is_empty() {
                None
            } else {
                Some(
                    r.next_hop
                        .parse::<IpAddr>()
                        .map_err(|_| value_error(&r.next_hop, "next hop"))?,
                )
            };
            routes.push((dest, via));
        }
        Ok(NetworkAddrs {
            mac,
            ips,
            gateways,
            routes,
        })
    }

    /// Reads one entry on its own (the [`NODE_MGMT_PORT`] value).
    pub fn decode(annotation: &str, value: &str) -> Result<PodNetwork, AnnotationError> {
        serde_json::from_str(value).map_err(|e| AnnotationError::Shape {
            annotation: annotation.into(),
            detail: e.to_string(),
        })
    }

    /// Back to addresses (for IPAM rebuild), given the Subnet name.
    pub fn to_addresses(&self, subnet: &str) -> Result<PodAddresses, AnnotationError> {
        let (ips, gateways, mac) = self.addresses_and_mac(false)?;
        Ok(PodAddresses {
            subnet: subnet.to_string(),
            ips,
            mac,
            gateways,
        })
    }

    /// The addresses, gateways and MAC, parsed; the error names the value at fault.
    /// `require_address`: an entry without any address is refused.
    fn addresses_and_mac(
        &self,
        require_address: bool,
    ) -> Result<(Vec<IpNet>, Vec<IpAddr>, Mac), AnnotationError> {
        let ips: Vec<IpNet> = parse_each(&self.ip_addresses, "CIDR address")?;
        if require_address && ips.is_empty() {
            return Err(AnnotationError::NoAddress {
                annotation: POD_NETWORKS.into(),
            });
        }
        let gateways = parse_each(&self.gateway_ips, "IP address")?;
        let mac = self
            .mac_address
            .parse()
            .map_err(|_| value_error(&self.mac_address, "MAC address"))?;
        Ok((ips, gateways, mac))
    }
}

/// A value of [`POD_NETWORKS`] that is not a `what`.
fn value_error(value: &str, what: &'static str) -> AnnotationError {
    AnnotationError::Value {
        annotation: POD_NETWORKS.into(),
        value: value.into(),
        what,
    }
}

fn parse_each<T: std::str::FromStr>(
    values: &[String],
    what: &'static str,
) -> Result<Vec<T>, AnnotationError> {
    values
        .iter()
        .map(|s| s.parse().map_err(|_| value_error(s, what)))
        .collect()
}

/// The `k8s.ovn.org/pod-networks` value for a pod on the primary network.
pub fn encode_pod_networks(addrs: &PodAddresses) -> String {
    let map = BTreeMap::from([(DEFAULT_NETWORK, PodNetwork::from_addresses(addrs))]);
    serde_json::to_string(&map).unwrap_or_default()
}

/// The `k8s.ovn.org/pod-networks` value for a pod on the primary network and on the
/// secondary networks `others` (keyed `<nad-ns>/<nad-name>`, as ovn-kubernetes does).
pub fn encode_pod_networks_with(
    addrs: &PodAddresses,
    others: &BTreeMap<String, PodAddresses>,
) -> String {
    let mut map: BTreeMap<&str, PodNetwork> = others
        .iter()
        .map(|(k, a)| (k.as_str(), PodNetwork::from_addresses(a)))
        .collect();
    map.insert(DEFAULT_NETWORK, PodNetwork::from_addresses(addrs));
    serde_json::to_string(&map).unwrap_or_default()
}

/// Reads the entry of `network` (`default`, or a NAD's `<ns>/<name>`) of a
/// `k8s.ovn.org/pod-networks` value; `Ok(None)` when the value has no such entry.
pub fn decode_network(value: &str, network: &str) -> Result<Option<PodNetwork>, AnnotationError> {
    let mut map: BTreeMap<String, PodNetwork> =
        serde_json::from_str(value).map_err(|e| AnnotationError::Shape {
            annotation: POD_NETWORKS.into(),
            detail: e.to_string(),
        })?;
    Ok(map.remove(network))
}

/// Reads the primary network's entry of a `k8s.ovn.org/pod-networks` value.
pub fn decode_pod_networks(value: &str) -> Result<PodNetwork, AnnotationError> {
    let mut map: BTreeMap<String, PodNetwork> =
        serde_json::from_str(value).map_err(|e| AnnotationError::Shape {
            annotation: POD_NETWORKS.into(),
            detail: e.to_string(),
        })?;
    map.remove(DEFAULT_NETWORK)
        .ok_or_else(|| AnnotationError::NoNetwork {
            annotation: POD_NETWORKS.into(),
            network: DEFAULT_NETWORK.into(),
        })
}

/// The addresses recorded on a pod (both annotations present and well-formed), if any.
pub fn pod_addresses(
    annotations: &BTreeMap<String, String>,
) -> Option<Result<PodAddresses, AnnotationError>> {
    let nets = annotations.get(POD_NETWORKS)?;
    let subnet = annotations.get(POD_SUBNET)?;
    Some(decode_pod_networks(nets).and_then(|n| n.to_addresses(subnet)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs() -> PodAddresses {
        PodAddresses {
            subnet: "blue".into(),
            ips: vec![
                "10.1.0.5/24".parse().unwrap(),
                "fd00::5/64".parse().unwrap(),
            ],
            mac: "0a:58:0a:01:00:05".parse().unwrap(),
            gateways: vec!["10.1.0.1".parse().unwrap(), "fd00::1".parse().unwrap()],
        }
    }

    #[test]
    fn ovn_kubernetes_shape() {
        let v: serde_json::Value = serde_json::from_str(&encode_pod_networks(&addrs())).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"default": {
                "ip_addresses": ["10.1.0.5/24", "fd00::5/64"],
                "mac_address": "0a:58:0a:01:00:05",
                "gateway_ips": ["10.1.0.1", "fd00::1"],
                "routes": [],
                "ip_address": "10.1.0.5/24",
                "gateway_ip": "10.1.0.1"
            }})
        );
    }

    #[test]
    fn typed_entry() {
        let v = r#"{"default":{"ip_addresses":["10.1.0.5/24","fd00::5/64"],"mac_address":"0a:58:0a:01:00:05",
            "gateway_ips":["10.1.0.1"],"routes":[{"dest":"10.96.0.0/16","nextHop":"10.1.0.1"},
            {"dest":"10.2.0.0/16","nextHop":""}]}}"#;
        let t = decode_pod_networks(v).unwrap().typed().unwrap();
        assert_eq!(t.mac.to_string(), "0a:58:0a:01:00:05");
        assert_eq!(t.ips, addrs().ips);
        assert_eq!(t.gateways, vec!["10.1.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            t.routes,
            vec![
                (
                    "10.96.0.0/16".parse().unwrap(),
                    Some("10.1.0.1".parse().unwrap())
                ),
                ("10.2.0.0/16".parse().unwrap(), None)
            ]
        );
        let mut pn = decode_pod_networks(v).unwrap();
        pn.mac_address = "zz".into();
        assert!(
            pn.typed()
                .unwrap_err()
                .to_string()
                .contains("\"zz\" is not a MAC")
        );
        pn.ip_addresses.clear();
        assert!(matches!(pn.typed(), Err(AnnotationError::NoAddress { .. })));
        let m = PodNetwork::decode(NODE_MGMT_PORT, "[]")
            .unwrap_err()
            .to_string();
        assert!(m.contains(NODE_MGMT_PORT), "{m}");
    }

    #[test]
    fn round_trip_and_errors() {
        let mut ann = BTreeMap::new();
        ann.insert(POD_NETWORKS.to_string(), encode_pod_networks(&addrs()));
        ann.insert(POD_SUBNET.to_string(), "blue".to_string());
        assert_eq!(pod_addresses(&ann).unwrap().unwrap(), addrs());

        ann.insert(POD_NETWORKS.to_string(), "{not json".into());
        assert!(matches!(
            pod_addresses(&ann).unwrap(),
            Err(AnnotationError::Shape { .. })
        ));
        ann.insert(
            POD_NETWORKS.to_string(),
            r#"{"other":{"ip_addresses":[],"mac_address":""}}"#.into(),
        );
        assert!(matches!(
            pod_addresses(&ann).unwrap(),
            Err(AnnotationError::NoNetwork { .. })
        ));
        ann.insert(
            POD_NETWORKS.to_string(),
            r#"{"default":{"ip_addresses":["10.1.0.500/24"],"mac_address":"0a:58:0a:01:00:05"}}"#
                .into(),
        );
        let err = pod_addresses(&ann).unwrap().unwrap_err().to_string();
        assert!(err.contains("10.1.0.500/24"), "{err}");
    }
}
