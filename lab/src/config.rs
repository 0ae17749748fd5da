//! [`LabConfig`]: what lab to build.

use std::path::PathBuf;

use ipnet::IpNet;

use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::names::{MAX_NODES, Names};

/// Tunnel encapsulation between nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encap {
    #[default]
    Geneve,
    Vxlan,
}

impl Encap {
    /// The `ovn-encap-type` / OVS interface type.
    pub fn as_str(self) -> &'static str {
        match self {
            Encap::Geneve => "geneve",
            Encap::Vxlan => "vxlan",
        }
    }
}

/// Which nodes run the OVS-DPDK build of ovs-vswitchd.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dpdk {
    #[default]
    Off,
    All,
    /// 1-based node indices.
    Nodes(Vec<usize>),
}

impl Dpdk {
    /// Whether node `i` (1-based) uses DPDK.
    pub fn node(&self, i: usize) -> bool {
        match self {
            Dpdk::Off => false,
            Dpdk::All => true,
            Dpdk::Nodes(v) => v.contains(&i),
        }
    }

    /// Whether any of `nodes` nodes uses DPDK.
    pub fn any(&self, nodes: usize) -> bool {
        (1..=nodes).any(|i| self.node(i))
    }
}

impl From<bool> for Dpdk {
    fn from(b: bool) -> Dpdk {
        if b { Dpdk::All } else { Dpdk::Off }
    }
}

/// How the lab's controller treats the OVN databases (its `--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ControllerMode {
    /// The controller owns the NB: cluster router, join switch, egress rows.
    #[default]
    Standalone,
    /// The NB belongs to a platform (as ZStack's does): no router, join switch or gateway
    /// rows; Subnets with `externalLogicalSwitch` put their pods on the platform's switch.
    External,
}

/// A lab: central + `nodes` simulated nodes, state under `dir`, names prefixed by `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabConfig {
    pub dir: PathBuf,
    /// 1–8 chars `[a-z0-9]`; prefixes every netns/interface name.
    pub prefix: String,
    pub nodes: usize,
    /// 3-member Raft clusters for NB and SB.
    pub raft: bool,
    pub dpdk: Dpdk,
    pub encap: Encap,
    /// Datapaths the node agents manage (`auto|dpdk|afxdp|kernel`): empty = the agents
    /// get no datapath config (kernel ports; `dpdk` above then sets DPDK up by hand); one
    /// value = every node; else one per node. Nodes on `dpdk`/`auto` run the DPDK build
    /// of ovs-vswitchd and the agent initialises DPDK itself.
    #[serde(default)]
    pub datapath: Vec<String>,
    /// The cluster CIDR(s) of the default Subnet the lab's controller creates and keeps
    /// (`--cluster-cidr`); empty: none (also a lab saved before this setting existed).
    #[serde(default)]
    pub cluster_cidr: Vec<IpNet>,
    /// Pods' egress (the controller's and agents' `--gateway-mode`); `shared` gives each
    /// node a gateway router sharing its br-phy address.
    #[serde(default)]
    pub gateway: Gateway,
    /// The controller's mode (`zovn lab up --mode`); a lab saved before this setting
    /// existed is standalone.
    #[serde(default)]
    pub mode: ControllerMode,
    /// The Service `externalIPs` the controller and the agents allow
    /// (`--service-external-ip-cidrs`, `zovn lab up --external-ip-cidrs`); empty: none.
    #[serde(default)]
    pub external_ip_cidrs: Vec<IpNet>,
    /// External mode: Subnets may put their pods in the platform's security groups (the
    /// controller's `--platform-security-groups`, `zovn lab up --platform-security-groups`).
    #[serde(default)]
    pub platform_security_groups: bool,
    /// The agents' pinger (`--pinger-interval-ms`, `zovn lab up --pinger-interval-ms`):
    /// milliseconds between rounds; 0 (the default): off, so the suites' packet counts
    /// see only their own traffic.
    #[serde(default)]
    pub pinger_interval_ms: u64,
}

/// The lab's gateway mode (`zovn lab up --gateway-mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Gateway {
    /// Through each node's management port, masqueraded by its agent.
    #[default]
    Local,
    /// A gateway router per node, sharing its br-phy address (SNAT in OVN).
    Shared,
    /// No egress.
    Off,
}

impl Gateway {
    /// The `--gateway-mode` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Gateway::Local => "local",
            Gateway::Shared => "shared",
            Gateway::Off => "off",
        }
    }
}

/// The cluster CIDR a lab gets unless told otherwise.
pub const DEFAULT_CLUSTER_CIDR: &str = "10.244.0.0/16";

/// [`DEFAULT_CLUSTER_CIDR`] as a `cluster_cidr` value.
pub fn default_cluster_cidr() -> Vec<IpNet> {
    DEFAULT_CLUSTER_CIDR.parse().into_iter().collect()
}

/// Parses `zovn lab up --cluster-cidr`: `none` (or empty) for no default Subnet, else one
/// CIDR or an IPv4 and an IPv6 CIDR separated by a comma.
pub fn parse_cluster_cidr(value: &str) -> Result<Vec<IpNet>> {
    let value = value.trim();
    if value.is_empty() || value == "none" {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(|c| {
            c.trim().parse::<IpNet>().map_err(|_| {
                LabError::Invalid(format!(
                    "cluster CIDR {c:?} is not a CIDR (give e.g. 10.244.0.0/16, or none)"
                ))
            })
        })
        .collect()
}

/// The datapath values `LabConfig::datapath` accepts.
pub const DATAPATHS: &[&str] = &["auto", "dpdk", "afxdp", "kernel"];

impl LabConfig {
    /// A single-node, standalone, Geneve, non-DPDK lab.
    pub fn new(dir: impl Into<PathBuf>, prefix: &str) -> LabConfig {
        LabConfig {
            dir: dir.into(),
            prefix: prefix.to_string(),
            nodes: 1,
            raft: false,
            dpdk: Dpdk::Off,
            encap: Encap::Geneve,
            datapath: Vec::new(),
            cluster_cidr: default_cluster_cidr(),
            gateway: Gateway::Local,
            mode: ControllerMode::Standalone,
            external_ip_cidrs: Vec::new(),
            platform_security_groups: false,
            pinger_interval_ms: 0,
        }
    }

    /// The datapath node `i` (1-based) is configured with, if any.
    pub fn datapath_of(&self, i: usize) -> Option<String> {
        match self.datapath.len() {
            0 => None,
            1 => Some(self.datapath[0].clone()),
            _ => self.datapath.get(i.wrapping_sub(1)).cloned(),
        }
    }

    /// Whether node `i` runs the DPDK build of ovs-vswitchd.
    pub fn dpdk_build(&self, i: usize) -> bool {
        self.dpdk.node(i) || matches!(self.datapath_of(i).as_deref(), Some("dpdk" | "auto"))
    }

    /// Checks prefix, node count and DPDK node indices.
    pub fn validate(&self) -> Result<Names> {
        let names = Names::new(&self.prefix)?;
        if self.nodes == 0 || self.nodes > MAX_NODES {
            return Err(LabError::Invalid(format!(
                "nodes must be 1-{MAX_NODES}, got {}",
                self.nodes
            )));
        }
        if let Dpdk::Nodes(v) = &self.dpdk
            && let Some(bad) = v.iter().find(|i| **i == 0 || **i > self.nodes)
        {
            return Err(LabError::Invalid(format!(
                "dpdk node {bad} is not in 1..={}",
                self.nodes
            )));
        }
        if let Some(bad) = self
            .datapath
            .iter()
            .find(|d| !DATAPATHS.contains(&d.as_str()))
        {
            return Err(LabError::Invalid(format!(
                "datapath {bad:?} is not one of {}",
                DATAPATHS.join(", ")
            )));
        }
        if self.datapath.len() > 1 && self.datapath.len() != self.nodes {
            return Err(LabError::Invalid(format!(
                "{} datapaths given for {} nodes: give one for all or one per node",
                self.datapath.len(),
                self.nodes
            )));
        }
        if let Some(bad) = self.cluster_cidr.iter().find(|c| c.trunc() != **c) {
            return Err(LabError::Invalid(format!(
                "cluster CIDR {bad} has host bits set (did you mean {}?)",
                bad.trunc()
            )));
        }
        if self.cluster_cidr.len() > 2
            || (self.cluster_cidr.len() == 2
                && !(self.cluster_cidr[0].addr().is_ipv4()
                    && self.cluster_cidr[1].addr().is_ipv6()))
        {
            return Err(LabError::Invalid(format!(
                "cluster CIDR {:?}: give one CIDR, or an IPv4 and an IPv6 CIDR (IPv4 first)",
                self.cluster_cidr
            )));
        }
        if !self.dir.is_absolute() {
            return Err(LabError::Invalid(format!(
                "lab dir {} must be absolute",
                self.dir.display()
            )));
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpdk_selection() {
        assert!(!Dpdk::Off.any(3));
        assert!(Dpdk::All.node(2));
        let d = Dpdk::Nodes(vec![2]);
        assert!(!d.node(1) && d.node(2) && d.any(2) && !d.any(1));
        assert_eq!(Dpdk::from(true), Dpdk::All);
    }

    #[test]
    fn cluster_cidr_values() {
        assert_eq!(parse_cluster_cidr("none").unwrap(), Vec::<IpNet>::new());
        assert_eq!(parse_cluster_cidr("").unwrap(), Vec::<IpNet>::new());
        assert_eq!(
            parse_cluster_cidr(DEFAULT_CLUSTER_CIDR).unwrap(),
            default_cluster_cidr()
        );
        assert_eq!(
            parse_cluster_cidr("10.244.0.0/16, fd00::/64")
                .unwrap()
                .len(),
            2
        );
        assert!(parse_cluster_cidr("10.244.0/16").is_err());
        let mut c = LabConfig::new("/tmp/x", "lab");
        assert_eq!(c.cluster_cidr, default_cluster_cidr());
        c.cluster_cidr = parse_cluster_cidr("10.244.0.1/16").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("did you mean 10.244.0.0/16")
        );
        c.cluster_cidr = parse_cluster_cidr("fd00::/64,10.244.0.0/16").unwrap();
        assert!(c.validate().is_err());
        // a manifest saved before the setting existed: no default Subnet
        let mut v = serde_json::to_value(LabConfig::new("/tmp/x", "lab")).unwrap();
        v.as_object_mut().unwrap().remove("cluster_cidr");
        v.as_object_mut().unwrap().remove("mode");
        v.as_object_mut().unwrap().remove("gateway");
        let old: LabConfig = serde_json::from_value(v).unwrap();
        assert!(old.cluster_cidr.is_empty());
        assert_eq!(old.mode, ControllerMode::Standalone);
        assert_eq!(old.gateway, Gateway::Local);
    }

    #[test]
    fn validation() {
        let mut c = LabConfig::new("/tmp/x", "lab");
        assert!(c.validate().is_ok());
        c.nodes = 0;
        assert!(c.validate().is_err());
        c.nodes = 2;
        c.dpdk = Dpdk::Nodes(vec![3]);
        assert!(c.validate().is_err());
        c.dpdk = Dpdk::Off;
        c.datapath = vec!["turbo".into()];
        assert!(c.validate().unwrap_err().to_string().contains("\"turbo\""));
        c.datapath = vec!["dpdk".into(), "kernel".into(), "afxdp".into()];
        assert!(c.validate().is_err(), "3 datapaths for 2 nodes");
        c.datapath = vec!["dpdk".into(), "kernel".into()];
        assert!(c.validate().is_ok());
        assert_eq!(c.datapath_of(2).as_deref(), Some("kernel"));
        assert!(c.dpdk_build(1) && !c.dpdk_build(2));
        c.dir = "rel".into();
        assert!(c.validate().is_err());
    }
}
