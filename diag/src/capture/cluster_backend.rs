//! The capture backend of a real cluster: the pod's node from the API server, and
//! `zstack-ovnkube-node debug capture` (the agent's own binary) run in that node's agent
//! container through `kubectl exec -i` (`pods/exec`: authenticated, authorized and
//! audited by the API server), on the node's OVS socket mounted there. The agent
//! container shares the node's network (the mirror's tap is there) and its pid namespace
//! is the agent's, whose GC removes what a killed capture leaves.
//!
//! The agent and this CLI are two builds: the command names the stream's version
//! ([`api::pcap::CAPTURE_PROTOCOL`]) and an agent of another refuses; an agent too old to
//! have the subcommand is found by a `--version` call first and named.
//!
//! Stopping: `--until-stdin-closes` ends the capture when kubectl's stream goes away, so
//! a Ctrl-C ([`super::RunOptions::close_stdin`]: kubectl runs in its own process group
//! and gets its standard input closed, not a signal) or a dead CLI stops it at once.

use std::os::unix::process::CommandExt;
use std::process::Command;

use super::{CaptureError, CaptureOptions, parse_pod};
use crate::kubectl::{Kubectl, KubectlError};
use crate::release::Release;

fn tool(what: &str, e: &dyn std::fmt::Display) -> CaptureError {
    CaptureError::Tool {
        tool: what.into(),
        detail: e.to_string(),
    }
}

/// The command that captures pod `key`'s port on its node (not started).
pub fn command(k: &Kubectl, key: &str, opts: &CaptureOptions) -> Result<Command, CaptureError> {
    let (ns, name) = parse_pod(key)?;
    let pod = match k.get_json(&["pod", "-n", ns, name]) {
        Ok(p) => p,
        Err(KubectlError::Failed { stderr, .. }) if stderr.contains("NotFound") => {
            return Err(CaptureError::UnknownPod(key.into()));
        }
        Err(e) => return Err(tool("kubectl get pod", &e)),
    };
    if pod["spec"]["hostNetwork"] == true {
        return Err(CaptureError::BadInput(format!(
            "pod {key} uses the host's network: it has no OVS port (capture on the node)"
        )));
    }
    let node = pod["spec"]["nodeName"]
        .as_str()
        .ok_or_else(|| CaptureError::NotScheduled(key.into()))?;
    let release = Release::discover(k).map_err(|e| tool("cluster", &e))?;
    let agent = release.agent_on(node).map_err(|e| tool("cluster", &e))?;
    let node_side = ["zstack-ovnkube-node", "debug", "capture"].map(String::from);
    let probe: Vec<String> = node_side
        .iter()
        .cloned()
        .chain(["--version".to_string()])
        .collect();
    match k.run(&Kubectl::exec_args(
        &agent.namespace,
        &agent.name,
        "agent",
        &probe,
    )) {
        Ok(_) => {}
        // clap's refusal of `debug` by an agent without the subcommand
        Err(KubectlError::Failed { stderr, .. }) if stderr.contains("unexpected argument") => {
            return Err(CaptureError::BadInput(format!(
                "the node agent on {node} (pod {}/{}) cannot capture: it has no \
                 `zstack-ovnkube-node debug capture` (releases before 0.2.0 ran `zovn debug \
                 capture`): upgrade the release, or use the zovn CLI of the installed one",
                agent.namespace, agent.name
            )));
        }
        Err(e) => return Err(tool("kubectl exec", &e)),
    }
    let mut cmd: Vec<String> = node_side.to_vec();
    cmd.extend([
        "--protocol".to_string(),
        api::pcap::CAPTURE_PROTOCOL.to_string(),
        "--until-stdin-closes".to_string(),
        "--iface-id".to_string(),
    ]);
    cmd.push(api::names::pod_port(ns, name));
    if let Some(ctl) = agent.arg("agent", "--vswitchd-ctl") {
        cmd.push("--vswitchd-ctl".into());
        cmd.push(ctl);
    }
    cmd.push("--duration".into());
    cmd.push(opts.duration.as_secs().max(1).to_string());
    if let Some(n) = opts.count {
        cmd.push("--count".into());
        cmd.push(n.to_string());
    }
    let mut args = Kubectl::exec_args(&agent.namespace, &agent.name, "agent", &cmd);
    // -i: the capture's standard input is the stop signal
    args.insert(1, "-i".into());
    let mut c = k.command();
    c.args(args);
    // a Ctrl-C reaches only zovn, which closes kubectl's input: the capture stops itself
    c.process_group(0);
    Ok(c)
}
