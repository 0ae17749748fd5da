//! Events the agent records about its Node and its pods (datapath decisions, fallbacks,
//! configuration errors), and how they become Kubernetes `v1` Events.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::pods::SourceError;

/// `Normal` or `Warning`, as Kubernetes has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    Node(String),
    Pod { namespace: String, name: String },
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentEvent {
    pub subject: Subject,
    pub event_type: EventType,
    /// CamelCase, e.g. `DatapathSelected`, `DatapathFallback`, `DatapathConfigError`.
    pub reason: String,
    pub message: String,
    /// The reporting node (`source.host`).
    pub node: String,
}

/// The component name on events.
pub const COMPONENT: &str = "zstack-ovnkube-node";

impl AgentEvent {
    /// The `v1` Event object (name generated per subject and reason, namespace of the
    /// subject; Node events go to `default` as kubelet's do).
    pub fn to_kube_json(&self) -> Value {
        let (kind, ns, name) = match &self.subject {
            Subject::Node(n) => ("Node", "default".to_string(), n.clone()),
            Subject::Pod { namespace, name } => ("Pod", namespace.clone(), name.clone()),
        };
        let now = now_rfc3339();
        let suffix = format!(
            "{:x}",
            fnv(&format!("{}{}{}", self.reason, self.message, now))
        );
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{name}.{suffix}"), "namespace": ns},
            "involvedObject": {"kind": kind, "name": name, "namespace": if kind == "Pod" { Value::from(ns.clone()) } else { Value::Null }},
            "reason": self.reason,
            "message": self.message,
            "type": self.event_type.as_str(),
            "source": {"component": COMPONENT, "host": self.node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        })
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// UTC now as RFC 3339 (seconds).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86400, secs % 86400);
    // civil from days (Howard Hinnant's algorithm)
    let z = days as i64 + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Kubernetes: merge-patch the Node's annotations.
pub async fn kube_annotate_node(
    client: &kube::Client,
    node: &str,
    annotations: &BTreeMap<String, String>,
) -> Result<(), SourceError> {
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let patch = json!({"metadata": {"annotations": annotations}});
    api.patch(
        node,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
    .map_err(|e| SourceError::Kube(format!("annotate node {node}: {e}")))
}

/// Kubernetes: create the Event.
pub async fn kube_event(client: &kube::Client, ev: &AgentEvent) -> Result<(), SourceError> {
    let v = ev.to_kube_json();
    let ns = v["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let obj: k8s_openapi::api::core::v1::Event =
        serde_json::from_value(v).map_err(|e| SourceError::Kube(format!("build event: {e}")))?;
    let api: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(client.clone(), &ns);
    api.create(&Default::default(), &obj)
        .await
        .map(|_| ())
        .map_err(|e| SourceError::Kube(format!("create event {}: {e}", ev.reason)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_json_is_a_v1_event() {
        let ev = AgentEvent {
            subject: Subject::Pod {
                namespace: "x".into(),
                name: "a".into(),
            },
            event_type: EventType::Warning,
            reason: "DatapathFallback".into(),
            message: "m".into(),
            node: "n1".into(),
        };
        let v = ev.to_kube_json();
        let e: k8s_openapi::api::core::v1::Event = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(e.involved_object.kind.as_deref(), Some("Pod"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("x"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert!(e.metadata.name.unwrap().starts_with("a."));
        let ts = v["firstTimestamp"].as_str().unwrap();
        assert_eq!(ts.len(), 20, "{ts}");
        assert!(ts.starts_with("20") && ts.ends_with('Z'));
    }
}
