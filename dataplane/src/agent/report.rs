//! Events the agent records about its Node and its pods (datapath decisions, fallbacks,
//! configuration errors), and how they reach each pod source: the lab's object store gets
//! a `v1` Event as JSON ([`AgentEvent::to_kube_json`]); a Kubernetes API gets an
//! `events.k8s.io/v1` Event through kube-runtime's [`Recorder`] ([`KubeEvents`]), which
//! turns a repeat into a count on the first event rather than a new object (a Node's
//! events fall back to `v1` Events where the server refuses the former).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder, Reporter};
use serde_json::{Value, json};

use crate::source::error::SourceError;

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
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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
    /// The `v1` Event object the lab's object store keeps (name `<subject>.<nanoseconds
    /// in hex>` as kube-runtime's recorder names them, namespace of the subject; Node
    /// events go to `default` as kubelet's do).
    pub fn to_kube_json(&self) -> Value {
        let (kind, ns, name) = match &self.subject {
            Subject::Node(n) => ("Node", "default".to_string(), n.clone()),
            Subject::Pod { namespace, name } => ("Pod", namespace.clone(), name.clone()),
        };
        let now = now_rfc3339();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{name}.{nanos:x}"), "namespace": ns},
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

    /// The object the event is about.
    pub fn object_ref(&self) -> ObjectReference {
        match &self.subject {
            Subject::Node(n) => ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(n.clone()),
                ..Default::default()
            },
            Subject::Pod { namespace, name } => ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(namespace.clone()),
                name: Some(name.clone()),
                ..Default::default()
            },
        }
    }
}

/// How many (subject, reason) pairs [`KubeEvents`] remembers before it starts afresh.
const MAX_RECORDERS: usize = 1024;

/// Events through kube-runtime's [`Recorder`] (`events.k8s.io/v1`, reporting controller
/// [`COMPONENT`], reporting instance the node).
///
/// The recorder files an event about a cluster-scoped object (a Node) in `default`, which
/// kube-apiserver 1.20 refuses for `events.k8s.io` Events (422: it wants them in
/// `kube-system`); newer servers take it. Where the server refuses, a Node's events are
/// written as `v1` Events in `default` instead, as kubelet writes its own
/// ([`AgentEvent::to_kube_json`]), from then on.
///
/// The recorder counts a repeat of the same (object, type, reason) in the first event's
/// `series` and keeps that event's note; so that a new message (another configuration
/// error, a changed fallback) is not hidden behind an old one, each (subject, reason)
/// keeps its last message and gets a fresh recorder, hence a new Event object, when the
/// message changes.
#[derive(Clone)]
pub struct KubeEvents {
    client: kube::Client,
    #[allow(clippy::type_complexity)]
    recorders: Arc<Mutex<HashMap<(Subject, String), (String, Recorder)>>>,
    /// The server refused a Node's `events.k8s.io` Event: Node events go as `v1` Events.
    legacy_node_events: Arc<AtomicBool>,
}

impl KubeEvents {
    pub fn new(client: kube::Client) -> KubeEvents {
        KubeEvents {
            client,
            recorders: Arc::default(),
            legacy_node_events: Arc::default(),
        }
    }

    /// The recorder for `ev`: the last one of its (subject, reason) while the message is
    /// the same, else a new one.
    fn recorder(&self, ev: &AgentEvent) -> Recorder {
        let mut map = self.recorders.lock().unwrap_or_else(|e| e.into_inner());
        let key = (ev.subject.clone(), ev.reason.clone());
        if let Some((message, r)) = map.get(&key)
            && *message == ev.message
        {
            return r.clone();
        }
        if map.len() >= MAX_RECORDERS {
            map.clear();
        }
        let reporter = Reporter {
            controller: COMPONENT.into(),
            instance: Some(ev.node.clone()),
        };
        let r = Recorder::new(self.client.clone(), reporter);
        map.insert(key, (ev.message.clone(), r.clone()));
        r
    }

    /// Publishes `ev` (its reason is also the event's `action`).
    pub async fn publish(&self, ev: &AgentEvent) -> Result<(), SourceError> {
        let event = Event {
            type_: match ev.event_type {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: ev.reason.clone(),
            note: Some(ev.message.clone()),
            action: ev.reason.clone(),
            secondary: None,
        };
        let node = matches!(ev.subject, Subject::Node(_));
        if node && self.legacy_node_events.load(Ordering::Relaxed) {
            return self.create_v1(ev).await;
        }
        match self.recorder(ev).publish(&event, &ev.object_ref()).await {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(s)) if node && s.code == 422 => {
                tracing::info!(reason = %s.message,
                    "the API server refuses events.k8s.io Events about a Node in default: writing v1 Events");
                self.legacy_node_events.store(true, Ordering::Relaxed);
                self.create_v1(ev).await
            }
            Err(e) => Err(SourceError::Kube(format!(
                "publish event {}: {e}",
                ev.reason
            ))),
        }
    }

    /// Creates `ev` as a `v1` Event ([`AgentEvent::to_kube_json`]).
    async fn create_v1(&self, ev: &AgentEvent) -> Result<(), SourceError> {
        let v = ev.to_kube_json();
        let ns = v["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let obj: k8s_openapi::api::core::v1::Event = serde_json::from_value(v)
            .map_err(|e| SourceError::Kube(format!("build event: {e}")))?;
        let api: kube::Api<k8s_openapi::api::core::v1::Event> =
            kube::Api::namespaced(self.client.clone(), &ns);
        api.create(&Default::default(), &obj)
            .await
            .map(|_| ())
            .map_err(|e| SourceError::Kube(format!("create event {}: {e}", ev.reason)))
    }
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
        let r = ev.object_ref();
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()),
            (Some("Pod"), Some("x"), Some("a"))
        );
        let node = AgentEvent {
            subject: Subject::Node("n1".into()),
            ..ev
        };
        assert_eq!(node.object_ref().namespace, None);
        assert_eq!(node.to_kube_json()["metadata"]["namespace"], "default");
    }
}
