//! Where the agent reads pods, its Node and the Subnets, mirroring the controller's
//! `source`: the lab's object store (`lab:SOCKET`, JSON lines) or a Kubernetes API (`kube`,
//! reflector stores kept by one watch each, so an ADD or a periodic pass reads memory, not
//! the API server).
//!
//! | module | holds |
//! |---|---|
//! | [`view`] | what the agent reads ([`PodInfo`]) and the [`PodSource`] trait, writes included (Node annotations, events) |
//! | [`lab`] | [`LabSource`]: the lab's object store |
//! | [`kube`] | [`KubeSource`]: the Kubernetes API through reflector stores, and the client settings |
//! | [`error`] | [`SourceError`] |

pub mod error;
pub mod kube;
pub mod lab;
#[cfg(test)]
mod tests;
pub mod view;

use std::path::PathBuf;

pub use error::SourceError;
pub use kube::{KubeSource, STORE_READY_TIMEOUT, client_with_timeouts, kube_client, watch_config};
pub use lab::{LabSource, parse_cidrs, pod_from_json};
pub use view::{PodInfo, PodSource};

/// Parses `--pods`: `lab:SOCKET` or `kube` (whose stores hold the pods and the Node of
/// `node`).
pub async fn from_spec(
    spec: &str,
    kubeconfig: Option<PathBuf>,
    node: &str,
) -> Result<Box<dyn PodSource>, SourceError> {
    if let Some(sock) = spec.strip_prefix("lab:") {
        if sock.is_empty() {
            return Err(SourceError::Spec(spec.into()));
        }
        return Ok(Box::new(LabSource::new(sock)));
    }
    if spec == "kube" {
        return Ok(Box::new(KubeSource::new(kubeconfig, node).await?));
    }
    Err(SourceError::Spec(spec.into()))
}
