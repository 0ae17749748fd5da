//! The lab's stand-in for Multus's secondary networks: a pod's
//! `k8s.v1.cni.cncf.io/networks` entries ([`control::multus::selections`]) become one CNI
//! ADD each, after the default network's, with the NAD's config laid over the node's
//! ([`super::cni_exec::delegate_config`]) and the entry's interface name (`net1`,
//! …); DEL runs in reverse order before the default network's.
//!
//! What was attached is kept in `pods/run/<netns>.networks.json` (written before each ADD,
//! with the result after it), so a restarted runtime, a teardown and `get` (the
//! `network-status` annotation) find it without the store.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{LabError, Result};
use crate::state::Layout;

/// Multus: the NAD that replaces the cluster default network for a pod.
pub use api::keys::MULTUS_DEFAULT_NETWORK as DEFAULT_NETWORK_ANNOTATION;

/// A secondary network the store wants for a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecondarySpec {
    /// `<nad-ns>/<nad-name>`.
    pub nad: String,
    pub ifname: String,
    /// The NAD's `spec.config` (`Err`: the NAD is not there, or the annotation naming
    /// the networks is unreadable).
    pub config: std::result::Result<String, NadUnresolved>,
}

/// Why a pod's network has no NAD config to run with yet (the pod waits, with this as its
/// message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NadUnresolved {
    /// `nad`: `<ns>/<name>`.
    #[error("NetworkAttachmentDefinition {nad} not found")]
    NotFound { nad: String },
    /// The pod's `k8s.v1.cni.cncf.io/networks` annotation.
    #[error(transparent)]
    Selection(#[from] api::multus::SelectionError),
}

/// One attached secondary network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attachment {
    pub nad: String,
    pub ifname: String,
    /// The NAD config the ADD ran with (DEL uses it again).
    pub config: String,
    /// The ADD result, once it succeeded.
    #[serde(default)]
    pub result: Option<Value>,
}

fn path(layout: &Layout, netns: &str) -> PathBuf {
    layout.pods_run().join(format!("{netns}.networks.json"))
}

/// The attachments recorded for the pod in `netns` (none when nothing is recorded).
pub fn load(layout: &Layout, netns: &str) -> Vec<Attachment> {
    std::fs::read(path(layout, netns))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Records the attachments of the pod in `netns` (an empty list removes the file).
pub fn save(layout: &Layout, netns: &str, atts: &[Attachment]) -> Result<()> {
    let p = path(layout, netns);
    if atts.is_empty() {
        return match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(LabError::io("remove", &p, e))
            }
            _ => Ok(()),
        };
    }
    std::fs::create_dir_all(layout.pods_run())
        .map_err(|e| LabError::io("create dir", layout.pods_run(), e))?;
    let body = serde_json::to_vec_pretty(atts).map_err(|e| LabError::Invalid(e.to_string()))?;
    hostio::write_atomic(&p, &body, 0o644, hostio::Durability::Volatile)
        .map_err(|e| LabError::io("write", &p, e))
}

/// Records `att` (replacing the entry of its interface, else appended).
pub fn put(layout: &Layout, netns: &str, att: Attachment) -> Result<()> {
    let mut atts = load(layout, netns);
    match atts.iter_mut().find(|a| a.ifname == att.ifname) {
        Some(a) => *a = att,
        None => atts.push(att),
    }
    save(layout, netns, &atts)
}

/// Forgets the attachment of interface `ifname`.
pub fn forget(layout: &Layout, netns: &str, ifname: &str) -> Result<()> {
    let mut atts = load(layout, netns);
    atts.retain(|a| a.ifname != ifname);
    save(layout, netns, &atts)
}

/// The `k8s.v1.cni.cncf.io/network-status` value Multus would write: the default network
/// (`primary_name`, from its result) first, then every attached secondary network under
/// its NAD's name. `None` when there is nothing to say beyond a plain veth default network
/// (the lab writes the annotation for pods with a vhost-user or a secondary interface).
pub fn network_status(
    primary_name: &str,
    primary: Option<&Value>,
    secondaries: &[Attachment],
) -> Option<Value> {
    let primary_vhost = primary.and_then(super::vhost_pod::attachment).is_some();
    let attached: Vec<&Attachment> = secondaries.iter().filter(|a| a.result.is_some()).collect();
    if !primary_vhost && attached.is_empty() {
        return None;
    }
    let mut entries = Vec::new();
    if let Some(e) = primary.and_then(|r| super::vhost_pod::status_entry(r, primary_name, true)) {
        entries.push(e);
    }
    for a in attached {
        if let Some(e) = a
            .result
            .as_ref()
            .and_then(|r| super::vhost_pod::status_entry(r, &a.nad, false))
        {
            entries.push(e);
        }
    }
    Some(Value::Array(entries))
}

/// The NAD key (`ns/name`) a pod's default-network annotation names, if any.
pub fn default_network(pod_ns: &str, annotations: &BTreeMap<String, String>) -> Option<String> {
    let v = annotations.get(DEFAULT_NETWORK_ANNOTATION)?.trim();
    if v.is_empty() {
        return None;
    }
    // Multus also accepts the JSON form [{"name": .., "namespace": ..}]
    if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(v) {
        let first = items.first()?;
        let name = first.get("name")?.as_str()?;
        let ns = first
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or(pod_ns);
        return Some(format!("{ns}/{name}"));
    }
    Some(match v.split_once('/') {
        Some((ns, name)) => format!("{ns}/{name}"),
        None => format!("{pod_ns}/{v}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(ifname: &str, ip: &str, socket: Option<&str>) -> Value {
        let mut pod_if =
            json!({"name": ifname, "mac": "0a:58:0a:10:00:05", "sandbox": "/run/netns/p"});
        if let Some(s) = socket {
            pod_if["socketPath"] = json!(s);
        }
        json!({"cniVersion": "1.1.0", "interfaces": [{"name": "h"}, pod_if],
            "ips": [{"address": ip, "interface": 1}]})
    }

    #[test]
    fn records_and_status() {
        let d = tempfile::tempdir().expect("dir");
        let layout = Layout::new(d.path());
        assert!(load(&layout, "p1").is_empty());
        let att = Attachment {
            nad: "vms/vhost-net".into(),
            ifname: "net1".into(),
            config: "{}".into(),
            result: None,
        };
        put(&layout, "p1", att.clone()).expect("put");
        let done = Attachment {
            result: Some(result("net1", "10.77.0.5/16", Some("/run/v/x/net1.sock"))),
            ..att
        };
        put(&layout, "p1", done.clone()).expect("put again");
        assert_eq!(load(&layout, "p1"), vec![done.clone()]);

        let primary = result("eth0", "10.16.0.5/16", None);
        assert_eq!(network_status("zstack-ovn", Some(&primary), &[]), None);
        let st = network_status("zstack-ovn", Some(&primary), &[done]).expect("status");
        assert_eq!(st[0]["name"], "zstack-ovn");
        assert_eq!(st[0]["default"], true);
        assert!(st[0].get("device-info").is_none());
        assert_eq!(st[1]["name"], "vms/vhost-net");
        assert_eq!(st[1]["interface"], "net1");
        assert_eq!(st[1]["default"], false);
        assert_eq!(st[1]["ips"][0], "10.77.0.5");
        assert_eq!(
            st[1]["device-info"]["vhost-user"]["path"],
            "/run/v/x/net1.sock"
        );

        forget(&layout, "p1", "net1").expect("forget");
        assert!(load(&layout, "p1").is_empty());
        assert!(!path(&layout, "p1").exists());
    }

    #[test]
    fn default_network_forms() {
        let ann = |v: &str| BTreeMap::from([(DEFAULT_NETWORK_ANNOTATION.to_string(), v.into())]);
        assert_eq!(default_network("a", &ann("n")), Some("a/n".into()));
        assert_eq!(default_network("a", &ann("b/n")), Some("b/n".into()));
        assert_eq!(
            default_network("a", &ann(r#"[{"name": "n", "namespace": "c"}]"#)),
            Some("c/n".into())
        );
        assert_eq!(default_network("a", &BTreeMap::new()), None);
    }
}
