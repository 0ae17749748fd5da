//! `zovn capture` on the lab: the pod's node from the lab's object store, and
//! `zstack-ovnkube-node debug capture` (the workspace's agent binary, beside this
//! program) run in that node's network namespace, on its Open_vSwitch database.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use diag::capture::{CaptureError, CaptureOptions, parse_pod};
use diag::trace::backend::Backend;

use super::trace::LabBackend;

/// The command that captures pod `key`'s port on its lab node (not started). It dies with
/// SIGTERM (and so cleans up) when the thread that starts it ends.
pub fn command(dir: &Path, key: &str, opts: &CaptureOptions) -> Result<Command, CaptureError> {
    let (ns, name) = parse_pod(key)?;
    let tool = |what: &str, e: &dyn std::fmt::Display| CaptureError::Tool {
        tool: what.into(),
        detail: e.to_string(),
    };
    let mut b = LabBackend::open(dir).map_err(|e| tool("lab", &e))?;
    let pods = b.pods().map_err(|e| tool("lab", &e))?;
    let lab = b.lab();
    let pod = pods
        .iter()
        .find(|p| p["metadata"]["namespace"] == ns && p["metadata"]["name"] == name)
        .ok_or_else(|| CaptureError::UnknownPod(key.into()))?;
    let node_name = pod["spec"]["nodeName"]
        .as_str()
        .ok_or_else(|| CaptureError::NotScheduled(key.into()))?;
    let node = lab
        .nodes()
        .iter()
        .find(|n| n.system_id == node_name)
        .ok_or_else(|| {
            CaptureError::BadInput(format!(
                "pod {key} is on node {node_name}, which is not a node of this lab"
            ))
        })?;
    let agent = crate::agent::agent_exe().map_err(|e| tool("the node agent's binary", &e))?;
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &node.netns])
        .arg(agent)
        .args(["debug", "capture", "--protocol"])
        .arg(api::pcap::CAPTURE_PROTOCOL.to_string())
        .args(["--db", &node.db_remote, "--iface-id"])
        .arg(api::names::pod_port(ns, name))
        .args(["--bridge", dataplane::ovs::BR_INT, "--vswitchd-ctl"])
        .arg(node.dir.join("run/ovs-vswitchd.ctl"))
        .arg("--duration")
        .arg(opts.duration.as_secs().max(1).to_string());
    if let Some(n) = opts.count {
        c.arg("--count").arg(n.to_string());
    }
    // SAFETY: prctl(2) is async-signal-safe and touches no memory of the parent.
    unsafe {
        c.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                .map_err(std::io::Error::from)
        });
    }
    Ok(c)
}
