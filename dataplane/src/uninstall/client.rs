//! The Kubernetes edge of the uninstall: the client, the errors, the DaemonSet question.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::decide::{DaemonSetState, daemonset_state};

/// How long the DaemonSet question may take at SIGTERM.
pub const DAEMONSET_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of the uninstall's Kubernetes and file operations.
#[derive(Debug, thiserror::Error)]
pub enum UninstallError {
    #[error("kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no Kubernetes configuration (in-cluster or $KUBECONFIG): {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// A request failed; `what` names it (e.g. `create ConfigMap kube-system/x`).
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("label {0:?} is not key=value")]
    BadLabel(String),
    /// The marker is not what the hook expects; `why` says how.
    #[error("uninstall marker {marker}: {why}")]
    Marker { marker: String, why: &'static str },
    /// The controller's Deployment could not be stopped; `why` says how.
    #[error("controller Deployment {deployment}: {why}")]
    Controller {
        deployment: String,
        why: &'static str,
    },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl UninstallError {
    /// A failed request named by `what`.
    pub fn kube(what: impl Into<String>, source: kube::Error) -> UninstallError {
        UninstallError::Kube {
            what: what.into(),
            source,
        }
    }
}

/// A client from `kubeconfig`, else in-cluster / `$KUBECONFIG`.
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, UninstallError> {
    let config = match kubeconfig {
        Some(path) => {
            let err = |source| UninstallError::Kubeconfig {
                path: path.to_path_buf(),
                source,
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(err)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(err)?
        }
        None => kube::Config::infer().await?,
    };
    crate::source::client_with_timeouts(config).map_err(UninstallError::Client)
}

/// The state of the DaemonSet `namespace/name` ([`DAEMONSET_TIMEOUT`] at most).
pub async fn read_daemonset(client: kube::Client, namespace: &str, name: &str) -> DaemonSetState {
    let api: kube::Api<k8s_openapi::api::apps::v1::DaemonSet> =
        kube::Api::namespaced(client, namespace);
    match tokio::time::timeout(DAEMONSET_TIMEOUT, api.get(name)).await {
        Ok(r) => daemonset_state(r.map(|ds| ds.metadata.deletion_timestamp.is_some())),
        Err(_) => DaemonSetState::NoAnswer(format!("no answer within {DAEMONSET_TIMEOUT:?}")),
    }
}
