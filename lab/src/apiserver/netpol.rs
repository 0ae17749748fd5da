//! NetworkPolicy (`networking.k8s.io/v1`) objects in the lab's store.
//!
//! Only names are checked here. Semantic mistakes a real API server would refuse (an
//! ipBlock that is not a CIDR, an `except` outside its `cidr`, an unknown operator) are
//! accepted on purpose, so the controller's handling of bad objects (a Warning event, the
//! bad part matching nothing, the other policies unaffected) can be exercised in the lab.

use std::collections::BTreeMap;

use control::source::memory::MemoryStore;
use control::source::netpol::policy_key;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::Value;

use super::protocol::{Action, ObjectRef, ResourceKind};
use crate::object_names::{DEFAULT_NAMESPACE, NameError, check_label, check_subdomain};

/// `apiVersion` of NetworkPolicies.
pub const NETWORKING_V1: &str = "networking.k8s.io/v1";

/// Why a NetworkPolicy is refused (only its names and a missing spec, see the module
/// docs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetpolError {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("NetworkPolicy {name}: no spec")]
    NoSpec { name: String },
}

/// Defaults the namespace, checks names, requires a spec.
pub fn normalized(mut p: Box<NetworkPolicy>) -> Result<Box<NetworkPolicy>, NetpolError> {
    let ns = p
        .metadata
        .namespace
        .get_or_insert_with(|| DEFAULT_NAMESPACE.to_string());
    check_label("NetworkPolicy namespace", ns)?;
    let name = p.metadata.name.as_deref().unwrap_or("");
    check_subdomain("NetworkPolicy", name)?;
    if p.spec.is_none() {
        return Err(NetpolError::NoSpec {
            name: name.to_string(),
        });
    }
    Ok(p)
}

/// `networkpolicy/<ns>/<name>`.
pub fn object_ref(p: &NetworkPolicy) -> ObjectRef {
    ObjectRef {
        kind: ResourceKind::NetworkPolicy,
        namespace: Some(
            p.metadata
                .namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
        ),
        name: p.metadata.name.clone().unwrap_or_default(),
    }
}

/// Creates or updates a policy (an identical one is left alone).
pub fn apply(
    policies: &mut BTreeMap<String, NetworkPolicy>,
    mem: &MemoryStore,
    mut p: NetworkPolicy,
) -> Action {
    let key = policy_key(&p);
    let action = match policies.get(&key) {
        None => {
            p.metadata.creation_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ));
            p.metadata.uid = Some(uuid::Uuid::new_v4().to_string());
            p.metadata.generation = Some(1);
            Action::Created
        }
        Some(old) if old.spec == p.spec && old.metadata.labels == p.metadata.labels => {
            return Action::Unchanged;
        }
        Some(old) => {
            p.metadata.creation_timestamp = old.metadata.creation_timestamp.clone();
            p.metadata.uid = old.metadata.uid.clone();
            p.metadata.generation = Some(old.metadata.generation.unwrap_or(1) + 1);
            Action::Configured
        }
    };
    policies.insert(key, p.clone());
    mem.apply_network_policy(p);
    action
}

/// Deletes policy `namespace/name`; false when there was none.
pub fn delete(
    policies: &mut BTreeMap<String, NetworkPolicy>,
    mem: &MemoryStore,
    key: &str,
) -> bool {
    let found = policies.remove(key).is_some();
    if found {
        mem.delete_network_policy(key);
    }
    found
}

/// Deletes the policies of namespace `ns` (the namespace is going); their keys.
pub fn delete_namespace(
    policies: &mut BTreeMap<String, NetworkPolicy>,
    mem: &MemoryStore,
    ns: &str,
) -> Vec<String> {
    let prefix = format!("{ns}/");
    let keys: Vec<String> = policies
        .keys()
        .filter(|k| k.starts_with(&prefix))
        .cloned()
        .collect();
    for k in &keys {
        delete(policies, mem, k);
    }
    keys
}

/// `zovn lab get netpol`: NAMESPACE, NAME, POD-SELECTOR, TYPES.
pub fn table(items: &[Value]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let rows = items
        .iter()
        .filter_map(|v| serde_json::from_value::<NetworkPolicy>(v.clone()).ok())
        .map(|p| {
            let spec = p.spec.clone().unwrap_or_default();
            let sel = spec
                .pod_selector
                .and_then(|s| s.match_labels)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "<all>".into());
            let types = spec
                .policy_types
                .map(|t| t.join(","))
                .unwrap_or_else(|| "<default>".into());
            vec![
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default(),
                sel,
                types,
            ]
        })
        .collect();
    (vec!["NAMESPACE", "NAME", "POD-SELECTOR", "TYPES"], rows)
}
