//! The pod annotations the controller writes.
//!
//! - `k8s.ovn.org/pod-networks`: exactly the ovn-kubernetes format, one entry per network
//!   (`default` for the primary network):
//!   ```json
//!   {"default":{"ip_addresses":["10.1.0.5/24"],"mac_address":"0a:58:0a:01:00:05",
//!               "gateway_ips":["10.1.0.1"],"routes":[],
//!               "ip_address":"10.1.0.5/24","gateway_ip":"10.1.0.1"}}
//!   ```
//!   (`ip_address`/`gateway_ip` are the legacy single-value fields, the first family's.)
//! - `network.zstack.io/subnet`: the Subnet the addresses came from (IPAM rebuild).
//!
//! The node agent reads them to configure the pod's interface.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::model::{Mac, PodAddresses};

/// The ovn-kubernetes pod network annotation.
pub const POD_NETWORKS: &str = "k8s.ovn.org/pod-networks";
/// The Subnet a pod's addresses belong to.
pub const POD_SUBNET: &str = "network.zstack.io/subnet";
/// The primary network's key in [`POD_NETWORKS`].
pub const DEFAULT_NETWORK: &str = "default";
/// A node's management-port addresses on the join switch (same format as one
/// [`PodNetwork`] entry).
pub const NODE_MGMT_PORT: &str = "network.zstack.io/mgmt-port";

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

    /// Back to addresses (for IPAM rebuild), given the Subnet name.
    pub fn to_addresses(&self, subnet: &str) -> Result<PodAddresses, AnnotationError> {
        let bad = |value: &str, what| AnnotationError::Value {
            annotation: POD_NETWORKS.into(),
            value: value.into(),
            what,
        };
        let ips = self
            .ip_addresses
            .iter()
            .map(|s| s.parse::<IpNet>().map_err(|_| bad(s, "CIDR address")))
            .collect::<Result<Vec<_>, _>>()?;
        let gateways = self
            .gateway_ips
            .iter()
            .map(|s| s.parse::<IpAddr>().map_err(|_| bad(s, "IP address")))
            .collect::<Result<Vec<_>, _>>()?;
        let mac: Mac = self
            .mac_address
            .parse()
            .map_err(|_| bad(&self.mac_address, "MAC address"))?;
        Ok(PodAddresses {
            subnet: subnet.to_string(),
            ips,
            mac,
            gateways,
        })
    }
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
