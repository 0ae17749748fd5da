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
//! Used by the object store ([`crate::apiserver`]); it uses the runtime's request types
//! ([`SecondarySpec`]) and its half of Multus ([`crate::pods::networks`]: the
//! default-network annotation, one CNI ADD per secondary network; [`delegate_config`]),
//! which it re-exports, and the shared name rules.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::object_names::{DEFAULT_NAMESPACE, NameError, check_label, check_subdomain};
use crate::pods::networks::{NadUnresolved, SecondarySpec};

/// `apiVersion` of NetworkAttachmentDefinitions.
pub const NAD_V1: &str = "k8s.cni.cncf.io/v1";
pub use crate::pods::cni_exec::delegate_config;
pub use crate::pods::networks::{DEFAULT_NETWORK_ANNOTATION, default_network};

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

/// Why a NetworkAttachmentDefinition is refused.
#[derive(Debug, thiserror::Error)]
pub enum NadError {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("NetworkAttachmentDefinition {name}: spec.config is not JSON: {source}")]
    ConfigNotJson {
        name: String,
        source: serde_json::Error,
    },
    #[error("NetworkAttachmentDefinition {name}: spec.config has no plugin \"type\"")]
    NoPluginType { name: String },
}

/// Defaults the namespace, checks the name and that `spec.config` is a JSON object with a
/// `type`.
pub fn normalized(
    mut n: Box<NetworkAttachmentDefinition>,
) -> Result<Box<NetworkAttachmentDefinition>, NadError> {
    let ns = n
        .metadata
        .namespace
        .get_or_insert_with(|| DEFAULT_NAMESPACE.to_string());
    check_label("NetworkAttachmentDefinition namespace", ns)?;
    let name = n.metadata.name.clone().unwrap_or_default();
    check_subdomain("NetworkAttachmentDefinition", &name)?;
    let config: Value = match serde_json::from_str(&n.spec.config) {
        Ok(c) => c,
        Err(source) => return Err(NadError::ConfigNotJson { name, source }),
    };
    if config.get("type").and_then(Value::as_str).is_none() {
        return Err(NadError::NoPluginType { name });
    }
    Ok(n)
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
                    None => Err(NadUnresolved::NotFound { nad: nad.clone() }),
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
            config: Err(NadUnresolved::Selection(e)),
        }],
    }
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

    fn nad(config: &str) -> Box<NetworkAttachmentDefinition> {
        Box::new(
            serde_json::from_value(json!({
                "apiVersion": NAD_V1, "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": "vhost-net"}, "spec": {"config": config}}))
            .unwrap(),
        )
    }

    #[test]
    fn a_nad_needs_a_plugin_type() {
        let n = normalized(nad(r#"{"type": "zstack-ovn-cni"}"#)).unwrap();
        assert_eq!(n.key(), "default/vhost-net");
        let e = normalized(nad(r#"{"name": "x"}"#)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "NetworkAttachmentDefinition vhost-net: spec.config has no plugin \"type\""
        );
        let e = normalized(nad("not json")).unwrap_err().to_string();
        assert!(
            e.starts_with("NetworkAttachmentDefinition vhost-net: spec.config is not JSON: "),
            "{e}"
        );
    }
}
