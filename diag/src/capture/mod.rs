//! `zovn capture NS/POD`: the packets of one pod's OVS port, on any datapath (kernel veth,
//! AF_XDP, vhost-user), as pcap or one summary line per packet.
//!
//! On the userspace datapath the host's tcpdump sees nothing of what passes between
//! AF_XDP or vhost-user ports inside ovs-vswitchd, so the packets are taken from OVS
//! itself: a `Mirror` of the pod's port onto a temporary internal port whose tap device is
//! read with an AF_PACKET socket (`zstack-ovnkube-node debug capture`, run on the node:
//! the `dataplane` crate's `capture`), the Mirror and port marked
//! `zstack.io/owner=zovn-capture` with the capturing process's pid and start time and
//! always removed: on the count, the duration, SIGINT/SIGTERM/SIGHUP, a closed output; by
//! the node agent's GC when the capturing process was killed.
//!
//! The operator's side is split in two so that any backend feeds the same consumer:
//! - a backend builds the [`std::process::Command`] that runs the node side on the pod's
//!   node, passing the stream's version ([`api::pcap::CAPTURE_PROTOCOL`]): the lab's
//!   (`ip netns exec` into the lab node's netns, in the `lab` crate) or
//!   [`cluster_backend::command`] (`kubectl exec -i` into the node's agent container);
//! - [`run::run_capture`] runs it and consumes its pcap stream ([`api::pcap`]): to a file,
//!   to stdout, or as summary lines ([`summary`]), forwarding Ctrl-C and waiting for the
//!   clean exit.

pub mod cluster_backend;
pub mod run;
pub mod summary;

pub use run::{RunOptions, run_capture};

/// Exit code of bad input (an unknown pod, a malformed name, a pod without a port).
pub const EXIT_INPUT: i32 = api::pcap::EXIT_INPUT;

/// Why a capture could not be started. [`CaptureError::is_input`] errors are the
/// operator's (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{0}")]
    BadInput(String),
    #[error("pod {0} not found")]
    UnknownPod(String),
    #[error("pod {0} is not scheduled on a node")]
    NotScheduled(String),
    #[error("{tool}: {detail}")]
    Tool { tool: String, detail: String },
}

impl CaptureError {
    /// The operator's mistake, not the system's.
    pub fn is_input(&self) -> bool {
        !matches!(self, CaptureError::Tool { .. })
    }
}

/// What the operator asks of the capture, whatever the backend.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Stop after this long in any case (a forgotten capture ends by itself).
    pub duration: std::time::Duration,
}

/// `namespace/name` → (namespace, name).
pub fn parse_pod(key: &str) -> Result<(&str, &str), CaptureError> {
    match key.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => Err(CaptureError::BadInput(format!(
            "{key:?} is not a pod: give namespace/name"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_namespace_slash_name() {
        assert_eq!(parse_pod("default/web").expect("pod"), ("default", "web"));
        for bad in ["web", "/web", "default/", "a/b/c", ""] {
            let e = parse_pod(bad).expect_err(bad);
            assert!(
                e.is_input() && e.to_string().contains("namespace/name"),
                "{e}"
            );
        }
    }
}
