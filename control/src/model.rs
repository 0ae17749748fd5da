//! The cluster model the control plane works on: plain Rust types, independent of where
//! objects come from (kube-rs watchers in production, the lab's in-process store).
//!
//! Sources convert Kubernetes objects into these; the pure translators turn them into
//! desired OVN rows; IPAM and validation speak in these types.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub use api::mac::{BadMac, Mac};
pub use api::pod_networks::PodAddresses;

/// An inclusive range of addresses of one family (`excludeIPs` entries, platform ranges).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct IpRange {
    pub start: IpAddr,
    pub end: IpAddr,
}

impl IpRange {
    /// A single address.
    pub fn single(ip: IpAddr) -> Self {
        IpRange { start: ip, end: ip }
    }

    /// True when `ip` lies in the range (same family).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.start, self.end, ip) {
            (IpAddr::V4(s), IpAddr::V4(e), IpAddr::V4(i)) => s <= i && i <= e,
            (IpAddr::V6(s), IpAddr::V6(e), IpAddr::V6(i)) => s <= i && i <= e,
            _ => false,
        }
    }
}

/// The address families a Subnet serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Protocol {
    IPv4,
    IPv6,
    Dual,
}

/// A Subnet that passed validation: every field parsed and consistent.
///
/// `cidrs` and `gateways` are parallel: one entry per family, IPv4 first when dual-stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidSubnet {
    pub name: String,
    pub protocol: Protocol,
    pub cidrs: Vec<IpNet>,
    pub gateways: Vec<IpAddr>,
    /// `excludeIPs`, plus (external mode) the platform's own address ranges.
    pub excludes: Vec<IpRange>,
    pub vlan_id: Option<u16>,
    pub provider: Option<String>,
    /// External mode: the platform's logical switch this Subnet reuses.
    pub external_logical_switch: Option<String>,
    /// External mode: the platform's security groups (Port_Group names) its pods join.
    pub security_groups: Vec<String>,
    /// Namespaces that draw pod addresses from this Subnet.
    pub namespaces: Vec<String>,
    /// The cluster default Subnet (pods of namespaces no Subnet names).
    pub default: bool,
    /// Egress SNATed to the node's address (`natOutgoing`, default true).
    pub nat_outgoing: bool,
}

/// What a pod asks of IPAM, from its annotations (kube-ovn's names, see [`crate::ipam`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodIpRequest {
    /// `ovn.kubernetes.io/ip_address`: one address, or one per family (comma-separated).
    pub static_ips: Vec<IpAddr>,
    /// `ovn.kubernetes.io/mac_address`.
    pub static_mac: Option<Mac>,
    /// `ovn.kubernetes.io/ip_pool`: the pod takes a free address from this list.
    pub ip_pool: Vec<IpAddr>,
    /// KubeVirt: the VirtualMachineInstance this pod runs (pods of one VMI keep IP/MAC).
    pub vm: Option<String>,
}

/// A pod as the control plane sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: Option<String>,
    pub host_network: bool,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Terminal phase (Succeeded/Failed): its addresses are released.
    pub completed: bool,
    /// Declared container ports (NetworkPolicy and Service named ports resolve here).
    pub ports: Vec<PodPort>,
}

/// A declared container port of a pod.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodPort {
    /// `ports[].name` (an IANA_SVC_NAME), when given.
    pub name: Option<String>,
    pub port: u16,
    /// `TCP` (the default), `UDP` or `SCTP`.
    pub protocol: String,
}

/// A namespace as the control plane sees it (NetworkPolicy namespaceSelectors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

impl PodInfo {
    /// `<namespace>/<name>`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
    /// The Logical_Switch_Port name: `<namespace>_<name>` ([`api::names::pod_port`]).
    pub fn lsp_name(&self) -> String {
        api::names::pod_port(&self.namespace, &self.name)
    }
}

/// A node as the control plane sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// The node's primary (underlay) addresses.
    pub addresses: Vec<IpAddr>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}
