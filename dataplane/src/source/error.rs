//! The error of a pod source ([`crate::source::PodSource`]) and of the Kubernetes writes
//! beside it ([`crate::agent::report`]): its own module so that both can name it without
//! importing each other.

/// Errors of a pod source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("lab object store {socket}: {detail}")]
    Lab { socket: String, detail: String },
    #[error("Kubernetes API: {0}")]
    Kube(String),
    #[error("invalid pod source {0:?}: expected lab:SOCKET or kube")]
    Spec(String),
}
