//! [`ClusterConfig`] and the fixed addressing of a `zovn cluster`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};

/// The management network: the host (root netns) is `.1` and serves the API there; node
/// `i` is `.(10+i)` on its `eth0`. Kubelet ⇄ apiserver traffic only.
pub const MGMT_NET: &str = "172.30.0";
/// The data network: node `i` is `.(10+i)` on its `eth1`, the NIC the chart's
/// `tunnel.interface` puts on `br-phy` for the tunnel endpoint. The host has no address on it.
pub const DATA_NET: &str = "172.31.0";
/// The API server's port on the host's management address.
pub const API_PORT: u16 = 6443;
/// Service ClusterIPs (the chart's `network.serviceCIDR` default).
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// The Kubernetes version of the binaries `tests/kube/build-kube.sh` builds.
pub const KUBE_VERSION: &str = "1.20.2";
/// The pod sandbox image every node's containerd uses (`make test-images`).
pub const PAUSE_IMAGE: &str = "localhost/zovn/pause:1";
/// The node NIC names inside a node's netns.
pub const MGMT_IFACE: &str = "eth0";
pub const DATA_IFACE: &str = "eth1";
/// The single-NIC shape's gateways: addresses nobody holds on the management network, so
/// a node's only NIC holds default routes (IPv4 and IPv6) as a real node's does, and what
/// they would carry dies unanswered on the host's bridge: nothing leaves the lab.
pub const SINGLE_NIC_GW4: &str = "172.30.0.254";
pub const SINGLE_NIC_GW6: &str = "fd30::fe";

/// What `zovn cluster up` builds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// State directory (certificates, etcd data, each node's private directories, logs).
    pub dir: PathBuf,
    /// Prefix of host-side names (bridges, veths, netns, cgroups); ≤ 6 chars `[a-z0-9]`.
    pub prefix: String,
    /// Number of nodes (1-9), named `node1`…
    pub nodes: usize,
    /// OCI archives imported into every node's containerd before kubelet starts. One of
    /// them must hold [`PAUSE_IMAGE`].
    pub images: Vec<PathBuf>,
    /// 2 MiB hugepages the host must have before kubelets start (they report what they
    /// see at start as `hugepages-2Mi` capacity); 0 leaves the pool alone.
    pub hugepages_2m: u64,
    /// The pod network's CIDR, as kubeadm's `podSubnet`: kube-proxy masquerades traffic to
    /// Services from outside it (a host process whose route to the Service CIDR goes
    /// through the agent's management port, 100.64.0.0/16, would otherwise keep that source
    /// address after DNAT to an endpoint outside OVN, e.g. the API server). The chart's
    /// `network.clusterCIDR` default.
    #[serde(default = "default_pod_cidr")]
    pub pod_cidr: String,
    /// Directory holding kube-apiserver-1.20.2/, kubelet-1.20.2/… (`$ZOVN_CACHE`).
    pub kube_cache: PathBuf,
    /// Every node has one NIC (eth0) for management and data, with a global IPv6 address
    /// and default routes ([`SINGLE_NIC_GW4`]): the shape `tunnel.interface` must move
    /// onto br-phy without cutting the node off (`zovn cluster up --single-nic`).
    #[serde(default)]
    pub single_nic: bool,
}

impl ClusterConfig {
    /// Defaults: 2 nodes, prefix `zc`, no images, 1024 hugepages (2 GiB), the kube cache.
    pub fn new(dir: impl Into<PathBuf>) -> ClusterConfig {
        ClusterConfig {
            dir: dir.into(),
            prefix: "zc".into(),
            nodes: 2,
            images: Vec::new(),
            hugepages_2m: 1024,
            pod_cidr: default_pod_cidr(),
            kube_cache: std::env::var_os("ZOVN_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/var/cache/zovn")),
            single_nic: false,
        }
    }

    /// Refuses what cannot work, naming the field.
    pub fn validate(&self) -> Result<()> {
        if !(1..=9).contains(&self.nodes) {
            return Err(LabError::Invalid(format!(
                "nodes: {} (a cluster has 1 to 9 nodes)",
                self.nodes
            )));
        }
        if self.prefix.is_empty()
            || self.prefix.len() > 6
            || !self
                .prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(LabError::Invalid(format!(
                "prefix {:?}: 1-6 characters [a-z0-9]",
                self.prefix
            )));
        }
        if !self.dir.is_absolute() {
            return Err(LabError::Invalid(format!(
                "dir {}: must be absolute",
                self.dir.display()
            )));
        }
        // nodes mount a tmpfs on /run and their own directories over these: a state dir
        // below them would be hidden from the node's daemons
        for masked in [
            "/run",
            "/var/run",
            "/var/lib/kubelet",
            "/var/lib/containerd",
        ] {
            if self.dir.starts_with(masked) {
                return Err(LabError::Invalid(format!(
                    "dir {}: below {masked}, which every node masks with its own",
                    self.dir.display()
                )));
            }
        }
        if self.pod_cidr.parse::<ipnet::IpNet>().is_err() {
            return Err(LabError::Invalid(format!(
                "pod CIDR {:?} is not a CIDR",
                self.pod_cidr
            )));
        }
        for image in &self.images {
            if !image.is_file() {
                return Err(LabError::Invalid(format!(
                    "image archive {} does not exist (make images; make test-images)",
                    image.display()
                )));
            }
        }
        Ok(())
    }

    /// A binary of the cached Kubernetes build.
    pub fn kube_binary(&self, component: &str) -> PathBuf {
        self.kube_cache
            .join(format!("{component}-{KUBE_VERSION}"))
            .join(component)
    }
}

/// 10.244.0.0/16, the chart's `network.clusterCIDR` default.
pub fn default_pod_cidr() -> String {
    "10.244.0.0/16".into()
}

/// Kubernetes node name of node `i` (1-based).
pub fn node_name(i: usize) -> String {
    format!("node{i}")
}

/// The management address of node `i`.
pub fn node_mgmt_ip(i: usize) -> String {
    format!("{MGMT_NET}.{}", 10 + i)
}

/// The data-network address of node `i`.
pub fn node_data_ip(i: usize) -> String {
    format!("{DATA_NET}.{}", 10 + i)
}

/// The global IPv6 address of node `i`'s only NIC in the single-NIC shape (with its /64).
pub fn node_mgmt_ip6(i: usize) -> String {
    format!("fd30::{}", 10 + i)
}

/// The host's management address (the API server's).
pub fn host_mgmt_ip() -> String {
    format!("{MGMT_NET}.1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_bad_configs_naming_the_field() {
        let ok = ClusterConfig::new("/tmp/zc");
        assert!(ok.validate().is_ok());
        let mut c = ok.clone();
        c.nodes = 0;
        assert!(c.validate().unwrap_err().to_string().contains("nodes: 0"));
        let mut c = ok.clone();
        c.prefix = "Bad-".into();
        assert!(c.validate().unwrap_err().to_string().contains("prefix"));
        let mut c = ok.clone();
        c.dir = "/run/zc".into();
        assert!(c.validate().unwrap_err().to_string().contains("masks"));
        let mut c = ok;
        c.images = vec!["/nonexistent.oci.tar".into()];
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("make images")
        );
    }

    #[test]
    fn addresses() {
        assert_eq!(node_mgmt_ip(1), "172.30.0.11");
        assert_eq!(node_data_ip(2), "172.31.0.12");
        assert_eq!(host_mgmt_ip(), "172.30.0.1");
        assert_eq!(node_mgmt_ip6(1), "fd30::11");
    }
}
