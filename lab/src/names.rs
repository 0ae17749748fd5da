//! Names of the lab's kernel objects. Every network namespace and interface name starts
//! with the lab's prefix (so concurrent labs never collide) and fits IFNAMSIZ (15 chars).

use crate::error::{LabError, Result};

/// Longest interface name Linux accepts (IFNAMSIZ - 1).
pub const IFNAMSIZ_MAX: usize = api::ifname::MAX_LEN;
/// Longest accepted lab prefix.
pub const MAX_PREFIX: usize = 8;
/// Most nodes a lab may have (keeps names short).
pub const MAX_NODES: usize = 99;
/// Longest pod name (see [`Names::pod_netns`]).
pub const MAX_POD_NAME: usize = 5;

/// Name generator for one lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    prefix: String,
}

impl Names {
    /// Validates `prefix`: 1–8 chars, lowercase ASCII letters and digits, starting with a letter.
    pub fn new(prefix: &str) -> Result<Names> {
        let ok = !prefix.is_empty()
            && prefix.len() <= MAX_PREFIX
            && prefix.starts_with(|c: char| c.is_ascii_lowercase())
            && prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !ok {
            return Err(LabError::Invalid(format!(
                "prefix {prefix:?} must be 1-{MAX_PREFIX} chars [a-z0-9], starting with a letter"
            )));
        }
        Ok(Names {
            prefix: prefix.to_string(),
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Network namespace of node `i` (1-based): `<prefix>n<i>`.
    pub fn node_netns(&self, i: usize) -> String {
        format!("{}n{i}", self.prefix)
    }

    /// Network namespace holding the underlay bridge: `<prefix>ul`.
    pub fn underlay_netns(&self) -> String {
        format!("{}ul", self.prefix)
    }

    /// The Linux bridge of the underlay (inside [`Names::underlay_netns`]).
    pub fn underlay_bridge(&self) -> String {
        format!("{}br", self.prefix)
    }

    /// Node `i`'s underlay veth end, inside the node netns (a port of br-phy).
    pub fn node_uplink(&self, i: usize) -> String {
        format!("{}u{i}", self.prefix)
    }

    /// Node `i`'s underlay veth end on the underlay bridge.
    pub fn underlay_port(&self, i: usize) -> String {
        format!("{}p{i}", self.prefix)
    }

    /// OVN chassis name (`external_ids:system-id`) of node `i`.
    pub fn system_id(&self, i: usize) -> String {
        format!("{}-node{i}", self.prefix)
    }

    /// Network namespace of a test pod: `<prefix>q<pod>`.
    pub fn pod_netns(&self, pod: &str) -> String {
        format!("{}q{pod}", self.prefix)
    }

    /// Host-side veth of a test pod, inside the node netns (a port of br-int).
    pub fn pod_host_veth(&self, pod: &str) -> String {
        format!("{}v{pod}", self.prefix)
    }

    /// Network namespace of the external host, outside every node: `<prefix>x`.
    pub fn external_netns(&self) -> String {
        format!("{}x", self.prefix)
    }

    /// The external host's interface, inside [`Names::external_netns`].
    pub fn external_host_if(&self) -> String {
        format!("{}xh", self.prefix)
    }

    /// The underlay router's interface towards the external host, inside
    /// [`Names::underlay_netns`].
    pub fn external_router_if(&self) -> String {
        format!("{}xr", self.prefix)
    }

    /// Network namespace of a host on a VLAN of the underlay ([`crate::vlan_host`]):
    /// `<prefix>w`.
    pub fn vlan_host_netns(&self) -> String {
        format!("{}w", self.prefix)
    }

    /// The VLAN host's OVS bridge (inside [`Names::vlan_host_netns`]).
    pub fn vlan_host_bridge(&self) -> String {
        format!("{}wb", self.prefix)
    }

    /// The VLAN host's trunk veth end, a port of its bridge.
    pub fn vlan_host_trunk(&self) -> String {
        format!("{}wt", self.prefix)
    }

    /// The VLAN host's own interface: its bridge's internal (access) port.
    pub fn vlan_host_if(&self) -> String {
        format!("{}wh", self.prefix)
    }

    /// The VLAN host's trunk veth end on the underlay bridge (inside
    /// [`Names::underlay_netns`]).
    pub fn vlan_host_underlay_port(&self) -> String {
        format!("{}wu", self.prefix)
    }
}

/// Checks an interface name ([`api::ifname`]: the CNI specification's rule).
pub fn check_ifname(name: &str) -> Result<()> {
    api::ifname::check(name).map_err(|e| LabError::Invalid(e.to_string()))
}

/// Checks a pod name (short, `[a-z0-9]`).
pub fn check_pod_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > MAX_POD_NAME
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    {
        return Err(LabError::Invalid(format!(
            "pod name {name:?} must be 1-{MAX_POD_NAME} chars [a-z0-9]"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_names_fit_ifnamsiz() {
        let n = Names::new("abcdefgh").expect("8-char prefix");
        let pod = "p9999";
        for name in [
            n.node_netns(MAX_NODES),
            n.underlay_netns(),
            n.underlay_bridge(),
            n.node_uplink(MAX_NODES),
            n.underlay_port(MAX_NODES),
            n.pod_netns(pod),
            n.pod_host_veth(pod),
            n.external_netns(),
            n.external_host_if(),
            n.external_router_if(),
            n.vlan_host_netns(),
            n.vlan_host_bridge(),
            n.vlan_host_trunk(),
            n.vlan_host_if(),
            n.vlan_host_underlay_port(),
        ] {
            assert!(name.len() <= IFNAMSIZ_MAX, "{name} too long");
            check_ifname(&name).expect("valid");
            assert!(name.starts_with("abcdefgh"));
        }
    }

    #[test]
    fn rejects_bad_prefixes_and_names() {
        for p in ["", "abcdefghi", "9ab", "Ab", "a-b", "a b"] {
            assert!(Names::new(p).is_err(), "{p:?} accepted");
        }
        assert!(check_ifname("abcdefghijklmnop").is_err());
        assert!(check_pod_name("p123456").is_err());
        assert!(check_pod_name("p1").is_ok());
    }

    #[test]
    fn names_are_distinct_per_node() {
        let n = Names::new("lab").expect("prefix");
        assert_eq!(n.node_netns(1), "labn1");
        assert_ne!(n.node_uplink(1), n.underlay_port(1));
        assert_ne!(n.node_netns(1), n.node_netns(11));
        assert_eq!(n.system_id(2), "lab-node2");
        assert_eq!(n.external_netns(), "labx");
        assert_ne!(n.external_host_if(), n.external_router_if());
    }
}
