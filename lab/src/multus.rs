//! The lab's Multus: `NetworkAttachmentDefinition`s (`k8s.cni.cncf.io/v1`) in the store,
//! and what a pod's Multus annotations ask of the runtime.
//!
//! - A NAD is kept as given (namespaced, by name). A pod whose
//!   `v1.multus-cni.io/default-network` annotation names one (`name` or `ns/name`) gets the
//!   NAD's `spec.config` as its CNI network config, laid over the node's config the way
//!   the lab runs CNI (see [`delegate_config`]): the agent then reads the vhost-user
//!   request from the config (`interfaceType`/`vhostUser`) as it does under Multus.
//! - A pod's Multus secondary networks (`k8s.v1.cni.cncf.io/networks`, see
//!   [`control::multus`]) are attached by the runtime after its default network, each with
//!   its NAD's config ([`secondary_networks`], attached by [`crate::pods::networks`]); the
//!   controller learns every NAD too.
//!
//! Used by the object store ([`crate::apiserver`]) and the pod runtime ([`crate::pods`]);
//! it uses only the runtime's request types and the store's metadata rules.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::apiserver::meta::{DEFAULT_NAMESPACE, check_label, check_subdomain};
use crate::apiserver::protocol::{ObjectRef, ResourceKind};
use crate::pods::cni_exec::NetworkConfig;
use crate::pods::networks::SecondarySpec;

/// `apiVersion` of NetworkAttachmentDefinitions.
pub const NAD_V1: &str = "k8s.cni.cncf.io/v1";
/// Multus: the NAD that replaces the cluster default network for a pod.
pub const DEFAULT_NETWORK_ANNOTATION: &str = "v1.multus-cni.io/default-network";

/// A NetworkAttachmentDefinition: only `spec.config` matters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkAttachmentDefinition {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NadSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NadSpec {
    /// The CNI config, as JSON text.
    #[serde(default)]
    pub config: String,
}

impl NetworkAttachmentDefinition {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata
                .namespace
                .as_deref()
                .unwrap_or(DEFAULT_NAMESPACE),
            self.metadata.name.as_deref().unwrap_or("")
        )
    }
}

/// Defaults the namespace, checks the name and that `spec.config` is a JSON object with a
/// `type`.
pub fn normalized(
    mut n: Box<NetworkAttachmentDefinition>,
) -> Result<Box<NetworkAttachmentDefinition>, String> {
    let ns = n
        .metadata
        .namespace
        .get_or_insert_with(|| DEFAULT_NAMESPACE.to_string());
    check_label("NetworkAttachmentDefinition namespace", ns)?;
    let name = n.metadata.name.clone().unwrap_or_default();
    check_subdomain("NetworkAttachmentDefinition", &name)?;
    let config: Value = serde_json::from_str(&n.spec.config)
        .map_err(|e| format!("NetworkAttachmentDefinition {name}: spec.config is not JSON: {e}"))?;
    if config.get("type").and_then(Value::as_str).is_none() {
        return Err(format!(
            "NetworkAttachmentDefinition {name}: spec.config has no plugin \"type\""
        ));
    }
    Ok(n)
}

/// `network-attachment-definition/<ns>/<name>`.
pub fn object_ref(n: &NetworkAttachmentDefinition) -> ObjectRef {
    ObjectRef {
        kind: ResourceKind::NetworkAttachmentDefinition,
        namespace: Some(
            n.metadata
                .namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
        ),
        name: n.metadata.name.clone().unwrap_or_default(),
    }
}

/// The NAD as the controller sees it.
pub fn nad_info(n: &NetworkAttachmentDefinition) -> control::multus::NadInfo {
    control::multus::NadInfo::new(
        n.metadata.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE),
        n.metadata.name.as_deref().unwrap_or(""),
        &n.spec.config,
    )
}

/// The secondary networks pod `info` names, each with its NAD's config (`Err`: the NAD is
/// not there, or the annotation is unreadable).
pub fn secondary_networks(
    nads: &BTreeMap<String, NetworkAttachmentDefinition>,
    info: &control::model::PodInfo,
) -> Vec<SecondarySpec> {
    match control::multus::selections(&info.namespace, &info.annotations) {
        Ok(sel) => sel
            .into_iter()
            .map(|s| {
                let nad = s.nad_key();
                let config = match nads.get(&nad) {
                    Some(n) => Ok(n.spec.config.clone()),
                    None => Err(format!("NetworkAttachmentDefinition {nad} not found")),
                };
                SecondarySpec {
                    nad,
                    ifname: s.interface,
                    config,
                }
            })
            .collect(),
        Err(e) => vec![SecondarySpec {
            nad: String::new(),
            ifname: String::new(),
            config: Err(e.to_string()),
        }],
    }
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

/// The node's network config with the NAD's plugin config laid over it: the NAD's keys
/// win, the node's local keys the NAD does not set (the agent's socket, timeouts) stay,
/// the `cniVersion` the lab's runtime negotiated stays. The NAD must name the plugin the
/// node runs.
pub fn delegate_config(node: &NetworkConfig, nad_config: &str) -> Result<NetworkConfig, String> {
    let nad: Map<String, Value> = serde_json::from_str(nad_config)
        .map_err(|e| format!("the NAD's config is not a JSON object: {e}"))?;
    let plugin = nad.get("type").and_then(Value::as_str).unwrap_or("");
    if plugin != node.plugin {
        return Err(format!(
            "the NAD's plugin {plugin:?} is not the node's plugin {:?} (the lab runs only \
             that one)",
            node.plugin
        ));
    }
    let mut out = node.clone();
    for (k, v) in nad {
        if k != "cniVersion" {
            out.config.insert(k, v);
        }
    }
    Ok(out)
}

/// `get network-attachment-definitions` table.
pub fn table(items: &[Value]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let rows = items
        .iter()
        .filter_map(|v| serde_json::from_value::<NetworkAttachmentDefinition>(v.clone()).ok())
        .map(|n| {
            let config: Value = serde_json::from_str(&n.spec.config).unwrap_or_default();
            let field = |k: &str| {
                config
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            vec![
                n.metadata.namespace.clone().unwrap_or_default(),
                n.metadata.name.clone().unwrap_or_default(),
                field("type"),
                field("interfaceType"),
            ]
        })
        .collect();
    (vec!["NAMESPACE", "NAME", "TYPE", "INTERFACE-TYPE"], rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn nad_config_overlays_the_node_config() {
        let node = NetworkConfig {
            file: "x.conflist".into(),
            plugin: "zstack-ovn-cni".into(),
            cni_version: "1.1.0".into(),
            config: serde_json::from_value(json!({"type": "zstack-ovn-cni", "name": "zstack-ovn",
                "cniVersion": "1.1.0", "socket": "/run/a.sock"}))
            .unwrap(),
        };
        let nad = r#"{"cniVersion": "1.0.0", "name": "vhost-net", "type": "zstack-ovn-cni",
            "interfaceType": "vhost-user", "vhostUser": {"queues": 2}}"#;
        let c = delegate_config(&node, nad).unwrap();
        assert_eq!(c.config["socket"], "/run/a.sock");
        assert_eq!(c.config["cniVersion"], "1.1.0");
        assert_eq!(c.config["name"], "vhost-net");
        assert_eq!(c.config["vhostUser"]["queues"], 2);
        let e = delegate_config(&node, r#"{"type": "bridge"}"#).unwrap_err();
        assert!(e.contains("bridge"), "{e}");
    }
}
