//! External mode's uninstall: the controller stopped before the NB is cleaned.
//!
//! In external mode the Northbound database is the platform's and outlives the release, so
//! the chart's pre-delete hook also removes every row of ours from it
//! (`zstack-ovnkube-controller --uninstall-nb`, the hook Job's second step). A controller
//! still running would write them back, so first the hook scales the controller's
//! Deployment to 0 replicas and waits until none of its pods is left (a pod being deleted
//! still runs until it is gone). [`stop`] fails when that does not happen in time: the
//! Job then fails, and `helm uninstall` with it, rather than clean under a live writer.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};

use super::client::UninstallError;

/// What [`stop`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// There was no such Deployment.
    Absent,
    /// Scaled to 0 and its last pod gone; the pods there were when scaled.
    Stopped { pods: Vec<String> },
}

/// `key=value,...` of a Deployment's `matchLabels`.
fn selector(d: &Deployment) -> Option<String> {
    let labels: &BTreeMap<String, String> = d.spec.as_ref()?.selector.match_labels.as_ref()?;
    (!labels.is_empty()).then(|| {
        labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// Scales Deployment `namespace/name` to 0 and waits (at most `timeout`, looking every
/// `poll`) until no pod of it is left.
pub async fn stop(
    client: kube::Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
    poll: Duration,
) -> Result<Stopped, UninstallError> {
    let what = |w: &str| format!("{w} Deployment {namespace}/{name}");
    let deployments: kube::Api<Deployment> = kube::Api::namespaced(client.clone(), namespace);
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, namespace);
    let Some(d) = deployments
        .get_opt(name)
        .await
        .map_err(|e| UninstallError::kube(what("read"), e))?
    else {
        return Ok(Stopped::Absent);
    };
    // without a selector its pods cannot be told apart: refuse rather than guess
    let sel = selector(&d).ok_or_else(|| UninstallError::Controller {
        deployment: format!("{namespace}/{name}"),
        why: "the Deployment has no matchLabels: its pods cannot be waited for",
    })?;
    let lp = ListParams::default().labels(&sel);
    let names = |list: Vec<Pod>| -> Vec<String> {
        list.into_iter().filter_map(|p| p.metadata.name).collect()
    };
    let before = names(
        pods.list(&lp)
            .await
            .map_err(|e| UninstallError::kube(format!("list pods {sel}"), e))?
            .items,
    );
    deployments
        .patch_scale(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
        )
        .await
        .map_err(|e| UninstallError::kube(what("scale to 0"), e))?;
    tracing::info!(deployment = %name, pods = ?before, "controller scaled to 0: waiting for its pods to go");
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match pods.list(&lp).await {
            Ok(l) if l.items.is_empty() => return Ok(Stopped::Stopped { pods: before }),
            Ok(l) => {
                let left = names(l.items);
                if tokio::time::Instant::now() + poll >= deadline {
                    tracing::error!(deployment = %name, left = ?left, "controller pods still there");
                    return Err(UninstallError::Controller {
                        deployment: format!("{namespace}/{name}"),
                        why: "its pods did not go in time: the NB is not cleaned under a \
                              running controller",
                    });
                }
            }
            Err(e) if tokio::time::Instant::now() + poll >= deadline => {
                return Err(UninstallError::kube(format!("list pods {sel}"), e));
            }
            Err(e) => tracing::warn!(error = %e, "list the controller's pods: retrying"),
        }
        tokio::time::sleep(poll).await;
    }
}
