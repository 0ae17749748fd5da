//! The chart's `pre-delete` hook (`zstack-ovnkube-node uninstall-hook`): tell every node
//! agent of the release that the plugin is being uninstalled, and wait until each said so.
//!
//! [`run`]: (1) the marker ConfigMap is created, or replaced by a new object (a new UID:
//! agents ignore the UID of a marker that was there when they started,
//! [`super::marker`]); (2) until every live agent pod's node acknowledged it
//! ([`api::keys::uninstall_ack_key`]) or the timeout passed, the agent pods are listed and
//! the marker read again every poll interval; (3) the marker is deleted. Agent pods: those
//! matching the label selector whose `app.kubernetes.io/component` is the component or
//! starts with it and `-` (the chart's `node` and `node-<pool>` DaemonSets), on a node,
//! not being deleted, not finished. A node that did not acknowledge in time keeps its
//! state: [`run`] names it and what to remove by hand, and the hook still succeeds, so an
//! uninstall is never blocked by a node that is down.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};

use super::client::UninstallError;
use super::marker::now_rfc3339;

/// The label naming a chart component.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";

/// What the hook does.
#[derive(Debug, Clone)]
pub struct HookConfig {
    pub namespace: String,
    /// The marker ConfigMap's name.
    pub marker: String,
    /// Labels put on the marker.
    pub marker_labels: BTreeMap<String, String>,
    /// Label selector of the release's pods (e.g. `app.kubernetes.io/instance=zs`).
    pub agents_selector: String,
    /// The agents' component label: this value, or it followed by `-` and anything.
    pub agents_component: String,
    /// How long to wait for the acknowledgements.
    pub timeout: Duration,
    /// How often to look.
    pub poll: Duration,
}

/// What the hook saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookReport {
    /// The UID of the marker it created.
    pub marker_uid: String,
    /// Nodes whose agent acknowledged.
    pub acknowledged: BTreeSet<String>,
    /// Nodes with a live agent pod that did not acknowledge in time (they keep their state).
    pub missing: BTreeSet<String>,
    /// The marker was deleted at the end.
    pub marker_deleted: bool,
}

/// Whether `pod` is a live agent pod of the release: its component, on a node, not being
/// deleted, not finished.
pub fn is_live_agent(pod: &Pod, component: &str) -> bool {
    let component_ok = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(COMPONENT_LABEL))
        .is_some_and(|c| {
            c == component
                || c.strip_prefix(component)
                    .is_some_and(|rest| rest.starts_with('-'))
        });
    let on_node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    component_ok && on_node && !finished && pod.metadata.deletion_timestamp.is_none()
}

/// The nodes of the live agent pods, split into (acknowledged, not yet) by the marker's
/// annotations.
pub fn acknowledgements(
    pods: &[Pod],
    component: &str,
    marker_annotations: &BTreeMap<String, String>,
) -> (BTreeSet<String>, BTreeSet<String>) {
    pods.iter()
        .filter(|p| is_live_agent(p, component))
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .partition(|node| marker_annotations.contains_key(&api::keys::uninstall_ack_key(node)))
}

/// `key=value,key=value` (the hook's `--marker-labels`) → a map; blanks are skipped.
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, UninstallError> {
    s.split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(|i| match i.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((k.trim().to_string(), v.trim().to_string()))
            }
            _ => Err(UninstallError::BadLabel(i.to_string())),
        })
        .collect()
}

/// Runs the hook (see the module doc). An error means the marker could not be created
/// or read within the timeout; the caller still lets the uninstall go on.
pub async fn run(client: kube::Client, cfg: &HookConfig) -> Result<HookReport, UninstallError> {
    let deadline = tokio::time::Instant::now() + cfg.timeout;
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), &cfg.namespace);
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, &cfg.namespace);
    let marker_uid = create_marker(&cms, cfg, deadline).await?;
    tracing::info!(
        marker = %marker_name(cfg),
        uid = %marker_uid,
        timeout = ?cfg.timeout,
        "uninstall marker created: waiting for every node agent to acknowledge"
    );
    let waited = wait_for_acks(&cms, &pods, cfg, &marker_uid, deadline).await;
    let marker_deleted = delete_marker(&cms, cfg).await;
    let (acknowledged, missing) = waited?;
    let report = HookReport {
        marker_uid,
        acknowledged,
        missing,
        marker_deleted,
    };
    if report.missing.is_empty() {
        tracing::info!(nodes = ?report.acknowledged, "every node agent acknowledged the uninstall: each cleans its node at SIGTERM");
    } else {
        tracing::warn!(
            missing = ?report.missing,
            acknowledged = ?report.acknowledged,
            "{}",
            missing_message(&report.missing)
        );
    }
    Ok(report)
}

/// What an operator does about nodes that did not acknowledge.
pub fn missing_message(missing: &BTreeSet<String>) -> String {
    let nodes: Vec<&str> = missing.iter().map(String::as_str).collect();
    format!(
        "node agents on {} did not acknowledge the uninstall in time: those nodes keep \
         the plugin's state. On each, once the agent pod is gone, remove by hand (see \
         docs/install.md, \"Uninstalling\"): {} in the CNI conf dir, {} in the CNI bin \
         dir, the nft table `inet {}`, and the contents of /var/run/zstack-ovn and \
         /var/lib/zstack-ovn/node (with OVS in the node pod also /etc/openvswitch, \
         /var/run/openvswitch, /var/run/ovn, and the tap devices br-int, br-phy, \
         ovs-netdev, ovn-k8s-mp0)",
        nodes.join(", "),
        cni::conflist::CONFLIST_NAME,
        cni::conflist::BINARY_NAME,
        crate::host::nat::TABLE,
    )
}

/// Deletes a marker left by an earlier run, then creates a new one; retried until the
/// deadline (the old object may take a moment to go). Returns the new UID.
async fn create_marker(
    cms: &kube::Api<ConfigMap>,
    cfg: &HookConfig,
    deadline: tokio::time::Instant,
) -> Result<String, UninstallError> {
    let what = format!("create ConfigMap {}", marker_name(cfg));
    let marker = ConfigMap {
        metadata: ObjectMeta {
            name: Some(cfg.marker.clone()),
            labels: Some(cfg.marker_labels.clone()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("requested".to_string(), now_rfc3339())])),
        ..Default::default()
    };
    loop {
        match cms.delete(&cfg.marker, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(marker = %cfg.marker, "an earlier uninstall marker removed"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                tracing::warn!(marker = %cfg.marker, error = %e, "earlier marker not removed")
            }
        }
        let err = match cms.create(&PostParams::default(), &marker).await {
            Ok(cm) => {
                return cm.metadata.uid.ok_or_else(|| UninstallError::Marker {
                    marker: marker_name(cfg),
                    why: "created without a UID",
                });
            }
            Err(e) => e,
        };
        if tokio::time::Instant::now() + cfg.poll >= deadline {
            return Err(UninstallError::kube(what, err));
        }
        tracing::warn!(error = %err, "{what}: retrying");
        tokio::time::sleep(cfg.poll).await;
    }
}

/// Polls until every live agent's node acknowledged or the deadline; returns
/// (acknowledged, missing). A failed poll is logged and the next one tries again; a marker
/// deleted or replaced behind the hook's back ends the wait with an error.
async fn wait_for_acks(
    cms: &kube::Api<ConfigMap>,
    pods: &kube::Api<Pod>,
    cfg: &HookConfig,
    uid: &str,
    deadline: tokio::time::Instant,
) -> Result<(BTreeSet<String>, BTreeSet<String>), UninstallError> {
    let lp = ListParams::default().labels(&cfg.agents_selector);
    let mut last: Result<(BTreeSet<String>, BTreeSet<String>), UninstallError> =
        Err(UninstallError::Marker {
            marker: marker_name(cfg),
            why: "not read before the timeout",
        });
    let mut logged_missing = BTreeSet::new();
    loop {
        match poll_once(cms, pods, cfg, &lp, uid).await {
            Ok(split) => {
                if split.1.is_empty() {
                    return Ok(split);
                }
                if split.1 != logged_missing {
                    tracing::info!(waiting_for = ?split.1, acknowledged = ?split.0, "waiting for node agents");
                    logged_missing = split.1.clone();
                }
                last = Ok(split);
            }
            Err(e @ UninstallError::Marker { .. }) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "uninstall hook: poll failed; retrying");
                if last.is_err() {
                    last = Err(e);
                }
            }
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return last;
        }
        tokio::time::sleep(cfg.poll.min(deadline - now)).await;
    }
}

fn marker_name(cfg: &HookConfig) -> String {
    format!("{}/{}", cfg.namespace, cfg.marker)
}

async fn poll_once(
    cms: &kube::Api<ConfigMap>,
    pods: &kube::Api<Pod>,
    cfg: &HookConfig,
    lp: &ListParams,
    uid: &str,
) -> Result<(BTreeSet<String>, BTreeSet<String>), UninstallError> {
    let listed = pods.list(lp).await.map_err(|e| {
        UninstallError::kube(
            format!("list pods {} in {}", cfg.agents_selector, cfg.namespace),
            e,
        )
    })?;
    let marker = match cms.get(&cfg.marker).await {
        Ok(m) => m,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Err(UninstallError::Marker {
                marker: marker_name(cfg),
                why: "deleted while the hook waited for the acknowledgements",
            });
        }
        Err(e) => {
            return Err(UninstallError::kube(
                format!("get ConfigMap {}", marker_name(cfg)),
                e,
            ));
        }
    };
    if marker.metadata.uid.as_deref() != Some(uid) {
        // the acknowledgements on it would belong to another marker
        return Err(UninstallError::Marker {
            marker: marker_name(cfg),
            why: "replaced by another object while the hook waited",
        });
    }
    let annotations = marker.metadata.annotations.unwrap_or_default();
    Ok(acknowledgements(
        &listed.items,
        &cfg.agents_component,
        &annotations,
    ))
}

/// Deletes the marker (missing is fine); a few tries. True if it is gone.
async fn delete_marker(cms: &kube::Api<ConfigMap>, cfg: &HookConfig) -> bool {
    for attempt in 1..=5u32 {
        match cms.delete(&cfg.marker, &DeleteParams::default()).await {
            Ok(_) => return true,
            Err(kube::Error::Api(s)) if s.code == 404 => return true,
            Err(e) => {
                tracing::warn!(marker = %cfg.marker, attempt, error = %e, "uninstall marker not deleted");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    fn pod(component: &str, node: Option<&str>, phase: &str, deleting: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                labels: Some(BTreeMap::from([(
                    COMPONENT_LABEL.to_string(),
                    component.to_string(),
                )])),
                deletion_timestamp: deleting.then_some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ),
                ),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn agent_pods_are_the_node_components_on_a_node_and_alive() {
        assert!(is_live_agent(
            &pod("node", Some("n1"), "Running", false),
            "node"
        ));
        assert!(is_live_agent(
            &pod("node-dpdk", Some("n1"), "Pending", false),
            "node"
        ));
        assert!(!is_live_agent(
            &pod("nodes", Some("n1"), "Running", false),
            "node"
        ));
        assert!(!is_live_agent(
            &pod("controller", Some("n1"), "Running", false),
            "node"
        ));
        assert!(!is_live_agent(&pod("node", None, "Pending", false), "node"));
        assert!(!is_live_agent(
            &pod("node", Some("n1"), "Running", true),
            "node"
        ));
        assert!(!is_live_agent(
            &pod("node", Some("n1"), "Failed", false),
            "node"
        ));
        assert!(!is_live_agent(
            &pod("node", Some("n1"), "Succeeded", false),
            "node"
        ));
    }

    #[test]
    fn marker_labels_parse_or_name_the_bad_item() {
        assert_eq!(
            parse_labels("a=1, b/c=x ,,").unwrap(),
            BTreeMap::from([
                ("a".to_string(), "1".to_string()),
                ("b/c".to_string(), "x".to_string())
            ])
        );
        assert!(parse_labels("").unwrap().is_empty());
        for bad in ["a=1,b", "=x"] {
            let e = parse_labels(bad).unwrap_err();
            assert!(matches!(e, UninstallError::BadLabel(_)), "{bad}: {e}");
        }
        assert!(
            parse_labels("a=1,b")
                .unwrap_err()
                .to_string()
                .contains("\"b\"")
        );
    }

    #[test]
    fn acknowledgements_split_the_nodes() {
        let pods = vec![
            pod("node", Some("n1"), "Running", false),
            pod("node-dpdk", Some("n2"), "Running", false),
            pod("controller", Some("n3"), "Running", false),
        ];
        let acks = BTreeMap::from([
            (api::keys::uninstall_ack_key("n1"), "t".to_string()),
            (api::keys::uninstall_ack_key("n3"), "t".to_string()),
        ]);
        let (ok, missing) = acknowledgements(&pods, "node", &acks);
        assert_eq!(ok, BTreeSet::from(["n1".to_string()]));
        assert_eq!(missing, BTreeSet::from(["n2".to_string()]));
        let msg = missing_message(&missing);
        assert!(
            msg.contains("n2") && msg.contains("inet zstack-ovn"),
            "{msg}"
        );
    }
}
