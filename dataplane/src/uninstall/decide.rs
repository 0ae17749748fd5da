//! The SIGTERM decision, pure: clean the node or keep it.
//!
//! The one signal that means "the plugin is being uninstalled" is the uninstall marker: a
//! ConfigMap the chart's `pre-delete` hook creates on `helm uninstall` and only then
//! ([`super::marker`]). Without a marker seen during this run the node is kept, whatever the
//! API server says about the DaemonSet: a force-deleted pod (its token is invalid: 401), a
//! DaemonSet replaced by a renamed node pool or deleted and recreated by an operator (404),
//! an API server that does not answer, are all restarts.
//!
//! With the marker seen, one more question guards against a restart in the window between
//! the marker and the deletion of the DaemonSet (an uninstall that failed after its hook,
//! a rollout during the hook): when the agent's DaemonSet is still there and not being
//! deleted, the node is kept. An answer that cannot tell (401/403: the agent's RBAC went
//! with the release; the API server unreachable) lets the marker decide.

/// What the API server says about the agent's own DaemonSet at SIGTERM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonSetState {
    /// Not asked; the reason says why (no `--uninstall-daemonset`, unreadable at start,
    /// no marker seen so the answer cannot matter).
    NotChecked(String),
    /// There, not being deleted.
    Present,
    /// There, with a deletion timestamp.
    Deleting,
    /// 404.
    Gone,
    /// 401 or 403: the agent may no longer read it.
    Hidden(u16),
    /// Any other error, or no answer in time.
    NoAnswer(String),
}

impl std::fmt::Display for DaemonSetState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DaemonSetState::NotChecked(why) => write!(f, "the DaemonSet was not checked ({why})"),
            DaemonSetState::Present => f.write_str("the DaemonSet exists and is not being deleted"),
            DaemonSetState::Deleting => f.write_str("the DaemonSet is being deleted"),
            DaemonSetState::Gone => f.write_str("the DaemonSet is gone"),
            DaemonSetState::Hidden(code) => write!(
                f,
                "the agent may no longer read its DaemonSet (HTTP {code}): cannot tell"
            ),
            DaemonSetState::NoAnswer(e) => {
                write!(f, "the API server did not answer ({e}): cannot tell")
            }
        }
    }
}

/// Classifies the answer to `GET daemonsets/<name>` (`Ok(being deleted)`).
pub fn daemonset_state(answer: Result<bool, kube::Error>) -> DaemonSetState {
    match answer {
        Ok(true) => DaemonSetState::Deleting,
        Ok(false) => DaemonSetState::Present,
        Err(kube::Error::Api(s)) if s.code == 404 => DaemonSetState::Gone,
        Err(kube::Error::Api(s)) if s.code == 401 || s.code == 403 => {
            DaemonSetState::Hidden(s.code)
        }
        Err(e) => DaemonSetState::NoAnswer(e.to_string()),
    }
}

/// What to do at SIGTERM; the reason is logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Remove what the plugin put on the node.
    Clean(String),
    /// Keep everything (a restart).
    Keep(String),
}

/// The decision from the marker seen during this run (its UID, if any) and the DaemonSet's
/// state. Total: every combination has an answer and a reason.
pub fn decide(marker_uid: Option<&str>, daemonset: &DaemonSetState) -> Decision {
    let Some(uid) = marker_uid else {
        return Decision::Keep(format!(
            "no uninstall marker seen during this run (a restart, a force-deleted pod, a \
             replaced DaemonSet); {daemonset}: not a reason to clean"
        ));
    };
    match daemonset {
        DaemonSetState::Present => Decision::Keep(format!(
            "uninstall marker {uid} seen, but {daemonset}: a restart before the uninstall \
             went through"
        )),
        DaemonSetState::NotChecked(_)
        | DaemonSetState::Deleting
        | DaemonSetState::Gone
        | DaemonSetState::Hidden(_)
        | DaemonSetState::NoAnswer(_) => {
            Decision::Clean(format!("uninstall marker {uid} seen and {daemonset}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", "y")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn classifies_every_answer_about_the_daemonset() {
        assert_eq!(daemonset_state(Ok(true)), DaemonSetState::Deleting);
        assert_eq!(daemonset_state(Ok(false)), DaemonSetState::Present);
        assert_eq!(daemonset_state(Err(api_error(404))), DaemonSetState::Gone);
        for code in [401, 403] {
            assert_eq!(
                daemonset_state(Err(api_error(code))),
                DaemonSetState::Hidden(code)
            );
        }
        for code in [500, 503, 429] {
            assert!(
                matches!(
                    daemonset_state(Err(api_error(code))),
                    DaemonSetState::NoAnswer(_)
                ),
                "{code}"
            );
        }
    }

    fn every_state() -> Vec<DaemonSetState> {
        vec![
            DaemonSetState::NotChecked("no --uninstall-daemonset".into()),
            DaemonSetState::Present,
            DaemonSetState::Deleting,
            DaemonSetState::Gone,
            DaemonSetState::Hidden(401),
            DaemonSetState::Hidden(403),
            DaemonSetState::NoAnswer("connection refused".into()),
        ]
    }

    #[test]
    fn without_a_marker_the_node_is_always_kept() {
        // the old trigger (404, 401, 403 at SIGTERM) alone must never clean
        for ds in every_state() {
            match decide(None, &ds) {
                Decision::Keep(why) => {
                    assert!(why.contains("no uninstall marker"), "{why}");
                    assert!(why.contains(&ds.to_string()), "{why}");
                }
                Decision::Clean(why) => panic!("{ds:?} without a marker cleaned: {why}"),
            }
        }
    }

    #[test]
    fn with_a_marker_only_a_daemonset_still_there_keeps_the_node() {
        for ds in every_state() {
            let d = decide(Some("uid-1"), &ds);
            match (&ds, &d) {
                (DaemonSetState::Present, Decision::Keep(why)) => {
                    assert!(why.contains("uid-1") && why.contains("restart"), "{why}")
                }
                (DaemonSetState::Present, Decision::Clean(_)) => {
                    panic!("a DaemonSet still there must keep the node: {d:?}")
                }
                (_, Decision::Clean(why)) => {
                    assert!(why.contains("uid-1"), "{why}");
                    assert!(why.contains(&ds.to_string()), "{why}");
                }
                (_, Decision::Keep(why)) => panic!("{ds:?} with the marker kept: {why}"),
            }
        }
    }
}
