//! The agent's side of the uninstall marker: watch it, record it, acknowledge it.
//!
//! `helm uninstall` runs the chart's `pre-delete` hook ([`super::hook`]), which creates the
//! marker ConfigMap `<fullname>-uninstalling` in the release namespace and waits for every
//! agent to acknowledge it. Nothing else creates it. The agent watches that one object
//! ([`watch_marker`]: a kube-runtime watcher with the field selector `metadata.name=`):
//!
//! - A marker already there at the first list is stale (left by an uninstall that did not
//!   finish: a new agent never starts during an uninstall it must clean up after). Its UID
//!   is remembered, logged once, and ignored for the whole run, re-lists included.
//! - A marker with any other UID, seen while the agent runs, is the request: the agent
//!   writes the flag file [`FLAG_FILE`] (marker, UID, time; atomically) into its flag
//!   directory, remembers it in memory ([`UninstallSignal`]), then acknowledges with a
//!   merge patch adding [`api::keys::uninstall_ack_key`]`(node)` = the time (RFC 3339).
//!   Flag before acknowledgement: once the hook has every acknowledgement Helm deletes the
//!   DaemonSets, and at SIGTERM the flag must be there (the `uplink` container reads it too).
//!
//! The rule is [`MarkerTracker::step`], pure, so it is tested without a server. At start
//! the agent removes a leftover flag ([`clear_flag`]): a starting agent is not uninstalling.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use serde::{Deserialize, Serialize};

use super::client::UninstallError;

/// The flag file's name in the flag directory (the chart's `uplink` container checks it).
pub const FLAG_FILE: &str = "uninstall-requested";

/// How often, and how many times, a failed acknowledgement is retried.
const ACK_RETRY: Duration = Duration::from_secs(1);
const ACK_ATTEMPTS: u32 = 10;

/// An uninstall request: the marker seen while the agent runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UninstallRequest {
    /// `<namespace>/<name>` of the marker.
    pub marker: String,
    pub uid: String,
    /// When the agent saw it (RFC 3339).
    pub seen: String,
}

/// What the agent made of one watch event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerStep {
    Nothing,
    /// Markers there at the first list, ignored (their UIDs); reported once.
    Stale(Vec<String>),
    /// A marker created while the agent runs; `acknowledged`: it already carries this
    /// node's acknowledgement.
    Requested {
        uid: String,
        acknowledged: bool,
    },
}

/// The stale-marker rule over the watch events (pure).
#[derive(Debug, Default)]
pub struct MarkerTracker {
    /// The first complete list is in.
    listed: bool,
    /// UIDs of the first list: stale.
    stale: BTreeSet<String>,
    /// The first list while it comes in.
    listing: BTreeSet<String>,
}

impl MarkerTracker {
    /// One watch event; `ack_key` is this node's acknowledgement annotation.
    pub fn step(&mut self, event: &watcher::Event<ConfigMap>, ack_key: &str) -> MarkerStep {
        match event {
            watcher::Event::Init => {
                if !self.listed {
                    self.listing.clear();
                }
                MarkerStep::Nothing
            }
            watcher::Event::InitApply(cm) | watcher::Event::Apply(cm) => {
                if self.listed {
                    self.consider(cm, ack_key)
                } else {
                    if let Some(uid) = &cm.metadata.uid {
                        self.listing.insert(uid.clone());
                    }
                    MarkerStep::Nothing
                }
            }
            watcher::Event::InitDone => {
                if self.listed {
                    return MarkerStep::Nothing;
                }
                self.listed = true;
                self.stale = std::mem::take(&mut self.listing);
                if self.stale.is_empty() {
                    MarkerStep::Nothing
                } else {
                    MarkerStep::Stale(self.stale.iter().cloned().collect())
                }
            }
            // the hook deletes the marker once every agent acknowledged: the request stays
            watcher::Event::Delete(_) => MarkerStep::Nothing,
        }
    }

    fn consider(&self, cm: &ConfigMap, ack_key: &str) -> MarkerStep {
        let Some(uid) = &cm.metadata.uid else {
            return MarkerStep::Nothing;
        };
        if self.stale.contains(uid) {
            return MarkerStep::Nothing;
        }
        let acknowledged = cm
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ack_key));
        MarkerStep::Requested {
            uid: uid.clone(),
            acknowledged,
        }
    }
}

/// How far the marker watch got (for the log and the tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchProgress {
    /// The first list is in: from now on a marker with a new UID counts.
    pub listed: bool,
    /// UIDs of the markers that were there at the first list (ignored).
    pub stale: Vec<String>,
    /// Watch events handled (each completely, acknowledgement included).
    pub events: u64,
}

/// The request seen during this run, shared between the watch and the SIGTERM path.
#[derive(Debug, Default)]
pub struct UninstallSignal {
    request: Mutex<Option<UninstallRequest>>,
    progress: Mutex<WatchProgress>,
}

impl UninstallSignal {
    /// The uninstall request seen during this run, if any.
    pub fn get(&self) -> Option<UninstallRequest> {
        self.request
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How far the watch got.
    pub fn progress(&self) -> WatchProgress {
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set(&self, r: UninstallRequest) {
        *self.request.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    }

    fn handled(&self, tracker: &MarkerTracker) {
        let mut p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        p.listed = tracker.listed;
        p.stale = tracker.stale.iter().cloned().collect();
        p.events += 1;
    }
}

/// Writes the flag file into `dir` atomically (a reader sees all of it or nothing).
pub fn write_flag(dir: &Path, r: &UninstallRequest) -> Result<PathBuf, UninstallError> {
    let path = dir.join(FLAG_FILE);
    let io = |source| UninstallError::Io {
        what: "write the uninstall flag",
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut text = serde_json::to_string(r).map_err(|e| io(std::io::Error::other(e)))?;
    text.push('\n');
    hostio::write_atomic(
        &path,
        text.as_bytes(),
        0o644,
        hostio::Durability::FileAndDir,
    )
    .map_err(io)?;
    Ok(path)
}

/// The flag file in `dir`, if there is a readable one.
pub fn read_flag(dir: &Path) -> Option<UninstallRequest> {
    let text = std::fs::read_to_string(dir.join(FLAG_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Removes the flag file from `dir`; true if there was one.
pub fn clear_flag(dir: &Path) -> Result<bool, UninstallError> {
    let path = dir.join(FLAG_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(UninstallError::Io {
            what: "remove the uninstall flag",
            path,
            source,
        }),
    }
}

/// What [`watch_marker`] watches and where it records a request.
#[derive(Debug, Clone)]
pub struct MarkerWatch {
    pub namespace: String,
    /// The marker ConfigMap's name.
    pub name: String,
    /// This node (the acknowledgement's key).
    pub node: String,
    /// Where to write [`FLAG_FILE`]; `None`: in memory only.
    pub flag_dir: Option<PathBuf>,
}

/// Now, RFC 3339 to the second.
pub fn now_rfc3339() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

/// Watches the marker until the task is dropped (errors are logged and retried with
/// kube-runtime's backoff); records and acknowledges a request into `signal`.
pub async fn watch_marker(client: kube::Client, w: MarkerWatch, signal: Arc<UninstallSignal>) {
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, &w.namespace);
    let config = crate::source::watch_config().fields(&format!("metadata.name={}", w.name));
    let stream = watcher::watcher(api.clone(), config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let ack_key = api::keys::uninstall_ack_key(&w.node);
    let marker = format!("{}/{}", w.namespace, w.name);
    let mut tracker = MarkerTracker::default();
    tracing::info!(%marker, "watching for the uninstall marker (helm uninstall's pre-delete hook)");
    while let Some(ev) = stream.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(%marker, error = %e, "uninstall marker watch: retrying with backoff");
                continue;
            }
        };
        match tracker.step(&ev, &ack_key) {
            MarkerStep::Nothing => {}
            MarkerStep::Stale(uids) => tracing::info!(
                %marker,
                ?uids,
                "an uninstall marker was there before this agent started: stale (an \
                 uninstall that did not finish), ignored"
            ),
            MarkerStep::Requested { uid, acknowledged } => {
                if signal.get().is_none_or(|r| r.uid != uid) {
                    record(&w, &marker, &uid, &signal);
                }
                if !acknowledged {
                    acknowledge(&api, &w, &ack_key).await;
                }
            }
        }
        signal.handled(&tracker);
    }
}

/// Flag file (when configured), then memory; logged.
fn record(w: &MarkerWatch, marker: &str, uid: &str, signal: &UninstallSignal) {
    let req = UninstallRequest {
        marker: marker.to_string(),
        uid: uid.to_string(),
        seen: now_rfc3339(),
    };
    if let Some(dir) = &w.flag_dir {
        match write_flag(dir, &req) {
            Ok(p) => tracing::info!(flag = %p.display(), "uninstall flag written"),
            // the agent still cleans (it remembers the request); the uplink will not know
            Err(e) => tracing::error!(error = %e, "uninstall flag not written"),
        }
    }
    signal.set(req);
    tracing::info!(
        %marker,
        %uid,
        "uninstall requested (helm uninstall): the node will be cleaned at SIGTERM"
    );
}

/// Merge-patches this node's acknowledgement onto the marker, retried a few times; a
/// marker already gone ends it (the hook gave up waiting).
async fn acknowledge(api: &kube::Api<ConfigMap>, w: &MarkerWatch, ack_key: &str) {
    let patch = serde_json::json!({"metadata": {"annotations": {ack_key: now_rfc3339()}}});
    for attempt in 1..=ACK_ATTEMPTS {
        match api
            .patch(
                &w.name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(marker = %w.name, key = ack_key, "uninstall marker acknowledged");
                return;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                tracing::warn!(marker = %w.name, "uninstall marker gone before the acknowledgement");
                return;
            }
            Err(e) => {
                tracing::warn!(marker = %w.name, attempt, error = %e, "uninstall marker not acknowledged yet");
                tokio::time::sleep(ACK_RETRY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn cm(uid: &str, acks: &[&str]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("zs-uninstalling".into()),
                uid: Some(uid.into()),
                annotations: Some(acks.iter().map(|k| (k.to_string(), "t".into())).collect()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// This node's acknowledgement key.
    fn key() -> String {
        api::keys::uninstall_ack_key("n1")
    }

    #[test]
    fn a_marker_there_at_start_is_stale_for_the_whole_run() {
        let mut t = MarkerTracker::default();
        assert_eq!(t.step(&watcher::Event::Init, &key()), MarkerStep::Nothing);
        assert_eq!(
            t.step(&watcher::Event::InitApply(cm("old", &[])), &key()),
            MarkerStep::Nothing
        );
        assert_eq!(
            t.step(&watcher::Event::InitDone, &key()),
            MarkerStep::Stale(vec!["old".into()])
        );
        // modified, and seen again by a re-list after a watch error: still stale
        assert_eq!(
            t.step(&watcher::Event::Apply(cm("old", &["x"])), &key()),
            MarkerStep::Nothing
        );
        assert_eq!(t.step(&watcher::Event::Init, &key()), MarkerStep::Nothing);
        assert_eq!(
            t.step(&watcher::Event::InitApply(cm("old", &[])), &key()),
            MarkerStep::Nothing
        );
        // the re-list's end reports nothing again (logged once)
        assert_eq!(
            t.step(&watcher::Event::InitDone, &key()),
            MarkerStep::Nothing
        );
        // deleted, then a new one created (a new helm uninstall): that one counts
        assert_eq!(
            t.step(&watcher::Event::Delete(cm("old", &[])), &key()),
            MarkerStep::Nothing
        );
        assert_eq!(
            t.step(&watcher::Event::Apply(cm("new", &[])), &key()),
            MarkerStep::Requested {
                uid: "new".into(),
                acknowledged: false
            }
        );
    }

    #[test]
    fn a_marker_created_while_running_is_a_request_even_when_a_relist_finds_it() {
        let mut t = MarkerTracker::default();
        t.step(&watcher::Event::Init, &key());
        assert_eq!(
            t.step(&watcher::Event::InitDone, &key()),
            MarkerStep::Nothing
        );
        assert_eq!(
            t.step(&watcher::Event::Apply(cm("u1", &[])), &key()),
            MarkerStep::Requested {
                uid: "u1".into(),
                acknowledged: false
            }
        );
        // our acknowledgement comes back as a modification
        assert_eq!(
            t.step(&watcher::Event::Apply(cm("u1", &[&key()])), &key()),
            MarkerStep::Requested {
                uid: "u1".into(),
                acknowledged: true
            }
        );
        // another node's acknowledgement only: ours is still missing
        assert_eq!(
            t.step(
                &watcher::Event::Apply(cm("u1", &[&api::keys::uninstall_ack_key("n2")])),
                &key()
            ),
            MarkerStep::Requested {
                uid: "u1".into(),
                acknowledged: false
            }
        );
        // the watch broke and the re-list brings it: not stale, it came after the start
        t.step(&watcher::Event::Init, &key());
        assert_eq!(
            t.step(&watcher::Event::InitApply(cm("u1", &[&key()])), &key()),
            MarkerStep::Requested {
                uid: "u1".into(),
                acknowledged: true
            }
        );
        assert_eq!(
            t.step(&watcher::Event::InitDone, &key()),
            MarkerStep::Nothing
        );
    }

    #[test]
    fn nothing_counts_before_the_first_list_is_complete() {
        let mut t = MarkerTracker::default();
        t.step(&watcher::Event::Init, &key());
        t.step(&watcher::Event::InitApply(cm("a", &[])), &key());
        t.step(&watcher::Event::InitApply(cm("b", &[])), &key());
        assert_eq!(
            t.step(&watcher::Event::InitDone, &key()),
            MarkerStep::Stale(vec!["a".into(), "b".into()])
        );
        // a marker without a UID (never from a server) is no request
        let mut no_uid = cm("x", &[]);
        no_uid.metadata.uid = None;
        assert_eq!(
            t.step(&watcher::Event::Apply(no_uid), &key()),
            MarkerStep::Nothing
        );
    }

    #[test]
    fn the_flag_file_is_written_read_and_cleared() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("state");
        assert_eq!(read_flag(&dir), None);
        assert!(!clear_flag(&dir).unwrap());
        let r = UninstallRequest {
            marker: "kube-system/zs-uninstalling".into(),
            uid: "u1".into(),
            seen: now_rfc3339(),
        };
        let p = write_flag(&dir, &r).unwrap();
        assert_eq!(p, dir.join(FLAG_FILE));
        assert_eq!(read_flag(&dir), Some(r.clone()));
        // nothing but the flag: the temporary file is gone
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        assert!(clear_flag(&dir).unwrap());
        assert_eq!(read_flag(&dir), None);
        assert!(
            r.seen.ends_with('Z') && r.seen.len() == "2025-01-01T00:00:00Z".len(),
            "{}",
            r.seen
        );
    }
}
