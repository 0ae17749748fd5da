//! Multus secondary networks served by this plugin: the pod's selections and the
//! NetworkAttachmentDefinitions (no I/O).
//!
//! A pod lists its secondary networks in [`NETWORKS_ANNOTATION`]
//! (`k8s.v1.cni.cncf.io/networks`): `name`, `ns/name`, `name@ifname` separated by commas,
//! or the JSON form `[{"name": .., "namespace": .., "interface": ..}]`. Multus then calls
//! the NAD's plugin with `CNI_IFNAME` = the entry's `interface`, or `net1`, `net2`, … by
//! position when it gives none. A NetworkAttachmentDefinition ([`NadInfo`]) is ours when
//! its config's `type` (or one of its `plugins`) is [`PLUGIN_TYPE`]; it names the Subnet
//! its interfaces attach to with [`SUBNET_KEY`] (`"subnet": "<name>"`).
//!
//! For each such network the controller allocates addresses in that Subnet (a KubeVirt
//! VM keeps them, as on the primary network), creates a second logical switch port
//! [`crate::names::network_port`] and publishes the addresses in `k8s.ovn.org/pod-networks`
//! under the key `<nad-ns>/<nad-name>` (the primary stays under `default`); the Subnet of
//! each entry goes into [`NETWORK_SUBNETS`], a network that cannot be served into
//! [`NETWORK_ERRORS`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::keys::{NETWORK_ERRORS, NETWORK_SUBNETS, NETWORKS_ANNOTATION};

/// The CNI plugin `type` of this project.
pub const PLUGIN_TYPE: &str = "zstack-ovn-cni";
/// NAD config key: the Subnet a secondary interface attaches to.
pub const SUBNET_KEY: &str = "subnet";

/// One entry of [`NETWORKS_ANNOTATION`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkSelection {
    pub namespace: String,
    pub name: String,
    /// The pod interface (`net1`, … when the entry gives none).
    pub interface: String,
}

impl NetworkSelection {
    /// `<namespace>/<name>` of the NAD.
    pub fn nad_key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Why [`NETWORKS_ANNOTATION`] cannot be read.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("annotation {NETWORKS_ANNOTATION} {value:?}: {reason}")]
pub struct SelectionError {
    pub value: String,
    pub reason: String,
}

#[derive(Deserialize)]
struct JsonSelection {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    interface: Option<String>,
}

/// The secondary networks of a pod in namespace `pod_ns` (empty when it names none).
pub fn selections(
    pod_ns: &str,
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<NetworkSelection>, SelectionError> {
    let Some(raw) = annotations.get(NETWORKS_ANNOTATION).map(|v| v.trim()) else {
        return Ok(Vec::new());
    };
    if raw.is_empty() {
        return Ok(Vec::new());
    }
    let bad = |reason: String| SelectionError {
        value: raw.to_string(),
        reason,
    };
    let entries: Vec<(String, String, Option<String>)> = if raw.starts_with('[') {
        let items: Vec<JsonSelection> =
            serde_json::from_str(raw).map_err(|e| bad(format!("not a list of networks: {e}")))?;
        items
            .into_iter()
            .map(|i| {
                let ns = i
                    .namespace
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| pod_ns.to_string());
                (ns, i.name, i.interface.filter(|n| !n.is_empty()))
            })
            .collect()
    } else {
        raw.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                let (net, iface) = match s.split_once('@') {
                    Some((n, i)) => (n, Some(i.to_string())),
                    None => (s, None),
                };
                let (ns, name) = net.split_once('/').unwrap_or((pod_ns, net));
                (ns.to_string(), name.to_string(), iface)
            })
            .collect()
    };
    let mut out = Vec::with_capacity(entries.len());
    for (i, (namespace, name, iface)) in entries.into_iter().enumerate() {
        if name.is_empty() || namespace.is_empty() {
            return Err(bad(format!("entry {} has no network name", i + 1)));
        }
        // as Multus' namespaceIsolation: a NAD of another namespace is another team's
        // network (its vhost-user socket directory, its addresses)
        if namespace != pod_ns {
            return Err(bad(format!(
                "entry {} names NetworkAttachmentDefinition {namespace}/{name} of another namespace: \
                 a pod may use its own namespace's ({pod_ns}) only",
                i + 1
            )));
        }
        let interface = iface.unwrap_or_else(|| format!("net{}", i + 1));
        if out
            .iter()
            .any(|s: &NetworkSelection| s.interface == interface)
        {
            return Err(bad(format!("interface {interface} is named twice")));
        }
        out.push(NetworkSelection {
            namespace,
            name,
            interface,
        });
    }
    Ok(out)
}

/// The selection of interface `ifname`, if the pod names it.
pub fn selection_for(
    pod_ns: &str,
    annotations: &BTreeMap<String, String>,
    ifname: &str,
) -> Result<Option<NetworkSelection>, SelectionError> {
    Ok(selections(pod_ns, annotations)?
        .into_iter()
        .find(|s| s.interface == ifname))
}

/// The reason [`NETWORK_ERRORS`] gives for network `nad_key`, if any (`None` also when the
/// value is not the expected JSON map).
pub fn network_error(annotations: &BTreeMap<String, String>, nad_key: &str) -> Option<String> {
    let errors: BTreeMap<String, String> =
        serde_json::from_str(annotations.get(NETWORK_ERRORS)?).ok()?;
    errors.get(nad_key).cloned()
}

/// A NetworkAttachmentDefinition as the controller sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NadInfo {
    pub namespace: String,
    pub name: String,
    /// `spec.config`, parsed (`Null` when it is not JSON).
    pub config: Value,
}

impl NadInfo {
    /// From the NAD's metadata and its `spec.config` text.
    pub fn new(namespace: &str, name: &str, config: &str) -> NadInfo {
        NadInfo {
            namespace: namespace.to_string(),
            name: name.to_string(),
            config: serde_json::from_str(config).unwrap_or(Value::Null),
        }
    }

    /// `<namespace>/<name>`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Our plugin's config: the config itself, or our entry of a conflist's `plugins`.
    pub fn plugin_config(&self) -> Option<&Value> {
        let ours = |v: &Value| v.get("type").and_then(Value::as_str) == Some(PLUGIN_TYPE);
        if ours(&self.config) {
            return Some(&self.config);
        }
        self.config
            .get("plugins")
            .and_then(Value::as_array)?
            .iter()
            .find(|p| ours(p))
    }

    /// Whether the NAD names this plugin.
    pub fn is_ours(&self) -> bool {
        self.plugin_config().is_some()
    }

    /// The Subnet its interfaces attach to; the error says what to write.
    pub fn subnet(&self) -> Result<String, NadSubnetError> {
        let nad = || self.key();
        let cfg = self
            .plugin_config()
            .ok_or_else(|| NadSubnetError::NotOurs { nad: nad() })?;
        match cfg.get(SUBNET_KEY) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            Some(other) => Err(NadSubnetError::NotAName {
                nad: nad(),
                value: other.to_string(),
            }),
            None => Err(NadSubnetError::Missing { nad: nad() }),
        }
    }
}

/// Why a NetworkAttachmentDefinition names no Subnet of ours ([`NadInfo::subnet`]); the
/// text says what to write.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NadSubnetError {
    #[error("NetworkAttachmentDefinition {nad} does not use plugin {PLUGIN_TYPE}")]
    NotOurs { nad: String },
    /// `value`: the JSON found instead of a name.
    #[error(
        "NetworkAttachmentDefinition {nad}: \"{SUBNET_KEY}\" must be the name of a Subnet, \
         not {value}"
    )]
    NotAName { nad: String, value: String },
    #[error(
        "NetworkAttachmentDefinition {nad} has no \"{SUBNET_KEY}\": a secondary network of \
         {PLUGIN_TYPE} must name the Subnet (network.zstack.io/v1) it attaches to, e.g. \
         \"{SUBNET_KEY}\": \"vhost-sec\""
    )]
    Missing { nad: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(NETWORKS_ANNOTATION.to_string(), v.to_string())])
    }

    #[test]
    fn selection_forms() {
        let s = selections("vms", &ann("a, vms/b@dpdk0,c")).unwrap();
        let got: Vec<(String, String)> = s
            .iter()
            .map(|s| (s.nad_key(), s.interface.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("vms/a".to_string(), "net1".to_string()),
                ("vms/b".into(), "dpdk0".into()),
                ("vms/c".into(), "net3".into())
            ]
        );
        let s = selections(
            "vms",
            &ann(r#"[{"name":"vhost-net","interface":"pod16367aacb67"},{"name":"x","namespace":"vms"}]"#),
        )
        .unwrap();
        assert_eq!(s[0].nad_key(), "vms/vhost-net");
        assert_eq!(s[0].interface, "pod16367aacb67");
        assert_eq!(s[1].interface, "net2");
        assert_eq!(
            selection_for("vms", &ann("a,b"), "net2")
                .unwrap()
                .unwrap()
                .name,
            "b"
        );
        assert!(selections("vms", &BTreeMap::new()).unwrap().is_empty());
        // another namespace's NAD, in either form: refused, naming it
        for other in ["a, other/b@dpdk0", r#"[{"name":"b","namespace":"other"}]"#] {
            let e = selections("vms", &ann(other)).unwrap_err().to_string();
            assert!(
                e.contains("other/b of another namespace") && e.contains("(vms) only"),
                "{e}"
            );
        }
        assert!(selections("vms", &ann("[{]")).is_err());
        assert!(
            selections("vms", &ann("a@x,b@x"))
                .unwrap_err()
                .to_string()
                .contains("named twice")
        );
    }

    #[test]
    fn nad_subnet() {
        let n = NadInfo::new(
            "vms",
            "vhost-net",
            r#"{"type":"zstack-ovn-cni","subnet":"sec","interfaceType":"vhost-user"}"#,
        );
        assert!(n.is_ours());
        assert_eq!(n.subnet().unwrap(), "sec");
        let missing = NadInfo::new("vms", "m", r#"{"type":"zstack-ovn-cni"}"#);
        assert_eq!(
            missing.subnet().unwrap_err().to_string(),
            "NetworkAttachmentDefinition vms/m has no \"subnet\": a secondary network of \
             zstack-ovn-cni must name the Subnet (network.zstack.io/v1) it attaches to, e.g. \
             \"subnet\": \"vhost-sec\""
        );
        assert_eq!(
            NadInfo::new("vms", "n", r#"{"type":"zstack-ovn-cni","subnet":3}"#)
                .subnet()
                .unwrap_err()
                .to_string(),
            "NetworkAttachmentDefinition vms/n: \"subnet\" must be the name of a Subnet, not 3"
        );
        assert_eq!(
            NadInfo::new("vms", "b", r#"{"type":"bridge"}"#)
                .subnet()
                .unwrap_err()
                .to_string(),
            "NetworkAttachmentDefinition vms/b does not use plugin zstack-ovn-cni"
        );
        let list = NadInfo::new(
            "vms",
            "l",
            r#"{"plugins":[{"type":"tuning"},{"type":"zstack-ovn-cni","subnet":"s2"}]}"#,
        );
        assert_eq!(list.subnet().unwrap(), "s2");
        assert!(!NadInfo::new("a", "b", r#"{"type":"bridge"}"#).is_ours());
        assert!(!NadInfo::new("a", "b", "not json").is_ours());
    }
}
