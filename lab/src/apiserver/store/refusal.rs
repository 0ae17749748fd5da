//! Why [`super::LabStore::apply`] applies nothing: every problem of the batch, each naming
//! its object.

use crate::apiserver::services::AllocationError;

/// Every problem of a refused apply, in object order (joined with `; `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", join(.0))]
pub struct ApplyError(pub Vec<ApplyProblem>);

fn join(problems: &[ApplyProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// One object of an apply that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyProblem {
    /// `pod`: `namespace/name`.
    #[error("pod {pod}: {reason}")]
    Pod { pod: String, reason: PlacementError },
    /// `service`: `namespace/name`.
    #[error("service {service}: {reason}")]
    Service {
        service: String,
        reason: AllocationError,
    },
}

/// Why a pod cannot go where it asks (or anywhere).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error(transparent)]
    UnknownNode(#[from] UnknownNode),
    #[error("the lab has no nodes")]
    NoNodes,
    #[error(
        "spec.nodeName cannot change (the pod runs on {current}, not {wanted}): delete the pod \
         first"
    )]
    NodeChange { current: String, wanted: String },
}

/// A `spec.nodeName` that is no lab node; `nodes`: the lab's node names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "node {name:?} is not a lab node (nodes: {}; node1..node{} also work)",
    nodes.join(", "),
    nodes.len()
)]
pub struct UnknownNode {
    pub name: String,
    pub nodes: Vec<String>,
}
