//! The lab's object store wire protocol: JSON lines over `<dir>/run/lab-api.sock`. The
//! store (`lab::apiserver`) serves it; `zovn` and the node agent's lab source
//! (`dataplane::source::LabSource`) speak it, typed, from here.
//!
//! A client writes one [`Request`] per line and reads one [`Response`] line back; a
//! connection may carry any number of requests in turn. Objects travel as their Kubernetes
//! JSON (`apiVersion`, `kind`, `metadata`, `spec`...).
//!
//! ```text
//! → {"op":"ping"}
//! ← {"result":"pong","pid":4242,"nodes":["zovn-node1","zovn-node2"]}
//! → {"op":"apply","objects":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},...}]}
//! ← {"result":"applied","changes":[{"object":"pod/default/web","action":"created"}]}
//! → {"op":"delete","objects":[{"kind":"Pod","namespace":"default","name":"web"}]}
//! ← {"result":"deleted","changes":[{"object":"pod/default/web","action":"deleted"}]}
//! → {"op":"get","kind":"Subnet"}
//! ← {"result":"objects","items":[{"apiVersion":"network.zstack.io/v1","kind":"Subnet",...}]}
//! → {"op":"annotatenode","name":"zovn-node1","annotations":{"network.zstack.io/datapath-status":"{...}"}}
//! → {"op":"event","event":{"kind":"Event","involvedObject":{"kind":"Node","name":"zovn-node1"},...}}
//! → {"op":"events"}
//! → {"op":"wait","timeout_ms":30000}
//! ← {"result":"waited","done":true,"pending":[]}
//! ← {"result":"error","message":"pod demo/web: node \"node7\" is not a lab node (...)"}
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A request line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Is the store up? Answered with [`Response::Pong`].
    Ping,
    /// Create or update objects (all validated before any is applied).
    Apply { objects: Vec<Value> },
    /// Delete objects; missing ones are reported as [`Action::NotFound`].
    Delete { objects: Vec<ObjectRef> },
    /// Every object of a kind, with the annotations and status the controller wrote.
    Get { kind: ResourceKind },
    /// Until the controller has caught up with every object (bounded by `timeout_ms`).
    Wait { timeout_ms: u64 },
    /// Merge annotations into a Node (what a node agent does with its status); answered
    /// with [`Response::Applied`].
    #[serde(rename = "annotatenode")]
    AnnotateNode {
        name: String,
        annotations: std::collections::BTreeMap<String, String>,
    },
    /// Record a `v1` Event (kept in memory, the last [`MAX_EVENTS`]).
    Event { event: Value },
    /// The recorded events, oldest first ([`Response::Objects`]).
    Events,
}

/// How many events the store keeps.
pub const MAX_EVENTS: usize = 1000;

/// A response line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "lowercase")]
pub enum Response {
    Pong {
        pid: u32,
        /// The lab's Node objects (the chassis names).
        nodes: Vec<String>,
    },
    Applied {
        changes: Vec<Change>,
    },
    Deleted {
        changes: Vec<Change>,
    },
    Objects {
        items: Vec<Value>,
    },
    Waited {
        /// False when the timeout ran out first.
        done: bool,
        /// What was still outstanding (empty when `done`).
        pending: Vec<String>,
    },
    Error {
        message: String,
    },
}

/// The kinds the store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourceKind {
    Namespace,
    Subnet,
    Pod,
    Node,
    Service,
    /// Produced by the lab from Services and Pods (read-only).
    EndpointSlice,
    NetworkPolicy,
    /// Multus NAD (`k8s.cni.cncf.io/v1`).
    NetworkAttachmentDefinition,
}

impl ResourceKind {
    /// `pod`, `subnet`... as in `pod/demo/web`.
    pub fn lower(self) -> &'static str {
        match self {
            ResourceKind::Namespace => "namespace",
            ResourceKind::Subnet => "subnet",
            ResourceKind::Pod => "pod",
            ResourceKind::Node => "node",
            ResourceKind::Service => "service",
            ResourceKind::NetworkPolicy => "networkpolicy",
            ResourceKind::NetworkAttachmentDefinition => "network-attachment-definition",
            ResourceKind::EndpointSlice => "endpointslice",
        }
    }
}

/// Which object: kind, namespace (pods only) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    pub kind: ResourceKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{ns}/{}", self.kind.lower(), self.name),
            None => write!(f, "{}/{}", self.kind.lower(), self.name),
        }
    }
}

/// What an apply or delete did to one object (kubectl's words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Created,
    Configured,
    Unchanged,
    Deleted,
    #[serde(rename = "not found")]
    NotFound,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
            Action::Deleted => "deleted",
            Action::NotFound => "not found",
        })
    }
}

/// One line of an apply/delete answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// `pod/<namespace>/<name>`, `subnet/<name>`, `namespace/<name>`.
    pub object: String,
    pub action: Action,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shapes() {
        let req = Request::Delete {
            objects: vec![ObjectRef {
                kind: ResourceKind::Pod,
                namespace: Some("demo".into()),
                name: "web".into(),
            }],
        };
        let line = serde_json::to_string(&req).expect("encode");
        assert_eq!(
            line,
            r#"{"op":"delete","objects":[{"kind":"Pod","namespace":"demo","name":"web"}]}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&line).expect("decode"), req);
        let ping: Request = serde_json::from_str(r#"{"op":"ping"}"#).expect("ping");
        assert_eq!(ping, Request::Ping);
        let resp = Response::Applied {
            changes: vec![Change {
                object: "pod/demo/web".into(),
                action: Action::NotFound,
            }],
        };
        let line = serde_json::to_string(&resp).expect("encode");
        assert!(line.contains(r#""result":"applied""#) && line.contains(r#""not found""#));
        assert_eq!(
            serde_json::from_str::<Response>(&line).expect("decode"),
            resp
        );
    }

    #[test]
    fn object_ref_display() {
        let r = ObjectRef {
            kind: ResourceKind::Subnet,
            namespace: None,
            name: "blue".into(),
        };
        assert_eq!(r.to_string(), "subnet/blue");
    }
}
