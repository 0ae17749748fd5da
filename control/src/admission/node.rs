//! What a node agent may change on its own Node: the annotations it reports, nothing else.
//! (That the Node is its own is [`crate::agent_identity`]'s decision.)

use std::collections::BTreeSet;

use api::keys::{CHASSIS_ID, DATAPATH_STATUS, NODE_GATEWAY};
use serde_json::{Map, Value};

/// The Node annotations a node agent writes; every other field of a Node (labels, taints,
/// other annotations, the whole spec) is an administrator's or the controller's.
pub const AGENT_NODE_ANNOTATIONS: [&str; 3] = [CHASSIS_ID, NODE_GATEWAY, DATAPATH_STATUS];

/// Metadata the API server itself maintains on every write.
const SERVER_METADATA: [&str; 3] = ["managedFields", "resourceVersion", "generation"];

/// An agent's write that changes more than its own reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a node agent may change only its own Node's annotations {owned}; this request also changes {changed}"
)]
pub struct NotItsFields {
    /// The changed fields it may not touch, e.g. `metadata.labels`, `annotation network.zstack.io/datapath-config`.
    pub changed: String,
    owned: String,
}

static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();

/// The object at `key` of `map` (an empty one when absent or not an object).
fn field<'a>(map: &'a Map<String, Value>, key: &str) -> &'a Map<String, Value> {
    map.get(key)
        .and_then(Value::as_object)
        .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

fn as_map(v: &Value) -> &Map<String, Value> {
    v.as_object().unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

/// The keys whose values differ between `old` and `new` (absent and `null` alike).
fn changed_keys<'a>(old: &'a Map<String, Value>, new: &'a Map<String, Value>) -> BTreeSet<&'a str> {
    old.keys()
        .chain(new.keys())
        .map(String::as_str)
        .filter(|k| {
            let (a, b) = (old.get(*k), new.get(*k));
            a.filter(|v| !v.is_null()) != b.filter(|v| !v.is_null())
        })
        .collect()
}

/// Refuses an update of a Node by its agent that changes anything but
/// [`AGENT_NODE_ANNOTATIONS`]. `status` is not compared: a write to the Node itself
/// cannot change it (the API server keeps the old status), and agents may not write
/// `nodes/status`.
pub fn agent_node_update(old: &Value, new: &Value) -> Result<(), NotItsFields> {
    let mut changed = Vec::new();
    let (old, new) = (as_map(old), as_map(new));
    let (om, nm) = (field(old, "metadata"), field(new, "metadata"));
    for k in changed_keys(om, nm) {
        if k == "annotations" || SERVER_METADATA.contains(&k) {
            continue;
        }
        changed.push(format!("metadata.{k}"));
    }
    for k in changed_keys(field(om, "annotations"), field(nm, "annotations")) {
        if !AGENT_NODE_ANNOTATIONS.contains(&k) {
            changed.push(format!("annotation {k}"));
        }
    }
    for k in changed_keys(field(old, "spec"), field(new, "spec")) {
        changed.push(format!("spec.{k}"));
    }
    for k in changed_keys(old, new) {
        if !["metadata", "spec", "status", "apiVersion", "kind"].contains(&k) {
            changed.push(k.to_string());
        }
    }
    if changed.is_empty() {
        return Ok(());
    }
    Err(NotItsFields {
        changed: changed.join(", "),
        owned: AGENT_NODE_ANNOTATIONS.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: Value, annotations: Value, spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node1", "resourceVersion": "1", "labels": labels,
                "annotations": annotations},
            "spec": spec, "status": {"capacity": {"cpu": "2"}}})
    }

    #[test]
    fn the_agents_own_reports_may_change_and_nothing_else() {
        let old = node(
            json!({"kubernetes.io/hostname": "node1"}),
            json!({CHASSIS_ID: "node1", "other": "x"}),
            json!({"podCIDR": "10.0.0.0/24"}),
        );
        // its reports: set, changed, removed; server metadata and status moving along
        let mut new = node(
            json!({"kubernetes.io/hostname": "node1"}),
            json!({NODE_GATEWAY: "{}", DATAPATH_STATUS: "{\"a\":1}", "other": "x"}),
            json!({"podCIDR": "10.0.0.0/24"}),
        );
        new["metadata"]["resourceVersion"] = json!("2");
        new["metadata"]["managedFields"] = json!([{"manager": "agent"}]);
        new["status"] = json!({"capacity": {"cpu": "64"}});
        assert_eq!(agent_node_update(&old, &new), Ok(()));

        let cases = [
            (
                node(
                    json!({"kubernetes.io/hostname": "node1", "role": "gw"}),
                    json!({CHASSIS_ID: "node1", "other": "x"}),
                    json!({"podCIDR": "10.0.0.0/24"}),
                ),
                "metadata.labels",
            ),
            (
                node(
                    json!({"kubernetes.io/hostname": "node1"}),
                    json!({CHASSIS_ID: "node1"}),
                    json!({"podCIDR": "10.0.0.0/24"}),
                ),
                "annotation other",
            ),
            (
                node(
                    json!({"kubernetes.io/hostname": "node1"}),
                    json!({CHASSIS_ID: "node1", "other": "x", api::keys::DATAPATH_CONFIG: "{}"}),
                    json!({"podCIDR": "10.0.0.0/24"}),
                ),
                "annotation network.zstack.io/datapath-config",
            ),
            (
                node(
                    json!({"kubernetes.io/hostname": "node1"}),
                    json!({CHASSIS_ID: "node1", "other": "x"}),
                    json!({"podCIDR": "10.0.0.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]}),
                ),
                "spec.taints",
            ),
            (
                node(
                    json!({"kubernetes.io/hostname": "node1"}),
                    json!({CHASSIS_ID: "node1", "other": "x"}),
                    json!({"podCIDR": "10.0.0.0/24", "unschedulable": true}),
                ),
                "spec.unschedulable",
            ),
        ];
        for (new, what) in cases {
            let e = agent_node_update(&old, &new).expect_err(what);
            assert_eq!(e.changed, what);
            assert!(e.to_string().contains(NODE_GATEWAY), "{e}");
        }
        // an empty map and no map are the same
        let bare = node(
            json!({"kubernetes.io/hostname": "node1"}),
            json!({CHASSIS_ID: "node1", "other": "x"}),
            json!({"podCIDR": "10.0.0.0/24"}),
        );
        let mut with_null = bare.clone();
        with_null["metadata"]["finalizers"] = Value::Null;
        assert_eq!(agent_node_update(&bare, &with_null), Ok(()));
    }
}
