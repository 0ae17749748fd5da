//! The node agents: one `zstack-ovnkube-node` per lab node, run inside the node's netns
//! the way a DaemonSet pod with host networking runs on a real node:
//!
//! ```text
//! ip netns exec <node netns> zstack-ovnkube-node --node-name <prefix>-node<i>
//!     --ovs-db unix:<dir>/node<i>/run/db.sock --cni-socket <dir>/node<i>/run/cni.sock
//!     --pods lab:<dir>/run/lab-api.sock --cni-conf-dir <dir>/node<i>/cni/net.d
//!     --cni-bin-dir <dir>/node<i>/cni/bin --cni-shim <zstack-ovn-cni>
//!     --state-dir <dir>/node<i>/agent --vswitchd-ctl <dir>/node<i>/run/ovs-vswitchd.ctl
//!     --metrics-addr 127.0.0.1:9476 (the node netns' loopback)
//!     [--datapath-config <dir>/node<i>/datapath.yaml
//!      --vswitchd-restart-cmd "zovn lab restart-vswitchd --dir <dir> --node <i>"]
//! ```
//! (the datapath flags when the lab was started with `--datapath`).
//!
//! Output goes to `<dir>/node<i>/log/agent.log`. The agent takes no pidfile argument, so
//! its record is recognised by its `--state-dir` ([`DaemonRecord::ident`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::error::{LabError, Result};
use crate::node::node_env;
use crate::process::{DaemonRecord, DetachedSpec, log_tail, spawn_detached};
use crate::state::{Layout, NodeState};

/// The agent binary's name.
pub const AGENT_BIN: &str = "zstack-ovnkube-node";
/// The CNI shim's name.
pub const SHIM_BIN: &str = "zstack-ovn-cni";
/// Environment variable naming the agent binary.
pub const AGENT_BIN_ENV: &str = "ZSTACK_OVNKUBE_NODE_BIN";
/// Environment variable naming the shim binary.
pub const SHIM_BIN_ENV: &str = "ZSTACK_OVN_CNI_BIN";
/// How long [`start`] waits for the agent's CNI socket.
pub const SOCKET_TIMEOUT: Duration = Duration::from_secs(20);

/// A workspace binary: `$env`, else next to the current executable or one directory up
/// (a test binary in `target/<profile>/deps/` finds `target/<profile>/<name>`).
pub fn find_bin(name: &str, env: &str) -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("{env}={} is not a file", p.display());
    }
    let me = std::env::current_exe()?;
    let mut looked = Vec::new();
    for dir in me
        .parent()
        .into_iter()
        .flat_map(|d| [Some(d), d.parent()])
        .flatten()
    {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
        looked.push(p.display().to_string());
    }
    bail!(
        "{name} not found (looked at {}; set {env})",
        looked.join(", ")
    )
}

/// The node agent binary ([`AGENT_BIN_ENV`] or next to this executable).
pub fn agent_exe() -> anyhow::Result<PathBuf> {
    find_bin(AGENT_BIN, AGENT_BIN_ENV)
}

/// The CNI shim binary ([`SHIM_BIN_ENV`] or next to this executable).
pub fn shim_exe() -> anyhow::Result<PathBuf> {
    find_bin(SHIM_BIN, SHIM_BIN_ENV)
}

/// The agent's arguments for `node`.
pub fn agent_args(
    layout: &Layout,
    node: &NodeState,
    shim: Option<&Path>,
    cfg: &crate::LabConfig,
) -> Vec<String> {
    let gateway = cfg.gateway;
    let i = node.index;
    let s = |p: PathBuf| p.to_string_lossy().into_owned();
    let mut a = vec![
        "--node-name".into(),
        node.system_id.clone(),
        "--ovs-db".into(),
        node.db_remote.clone(),
        "--cni-socket".into(),
        s(layout.node_cni_socket(i)),
        "--pods".into(),
        format!("lab:{}", layout.api_socket().display()),
        "--cni-conf-dir".into(),
        s(layout.node_cni_conf(i)),
        "--cni-bin-dir".into(),
        s(layout.node_cni_bin(i)),
    ];
    if let Some(shim) = shim {
        a.extend(["--cni-shim".into(), s(shim.to_path_buf())]);
    }
    a.extend(["--state-dir".into(), s(layout.node_agent_state(i))]);
    a.extend([
        "--vswitchd-ctl".into(),
        s(node.dir.join("run/ovs-vswitchd.ctl")),
        "--metrics-addr".into(),
        format!("127.0.0.1:{AGENT_METRICS_PORT}"),
        "--pinger-interval-ms".into(),
        cfg.pinger_interval_ms.to_string(),
    ]);
    if !cfg.external_ip_cidrs.is_empty() {
        a.extend([
            "--service-external-ip-cidrs".into(),
            cfg.external_ip_cidrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ]);
    }
    if gateway == crate::Gateway::Shared {
        // br-phy holds the uplink and the node's address; the nodes have no default route
        a.extend([
            "--gateway-mode".into(),
            "shared".into(),
            "--gateway-interface".into(),
            "br-phy".into(),
            "--gateway-next-hop".into(),
            crate::external::UNDERLAY_ROUTER_V4.into(),
            "--gateway-next-hop-v6".into(),
            crate::external::UNDERLAY_ROUTER_V6.into(),
        ]);
    }
    if node.datapath.is_some() {
        a.extend([
            "--datapath-config".into(),
            s(node.dir.join("datapath.yaml")),
        ]);
        match find_bin(ZOVN_BIN, ZOVN_BIN_ENV) {
            Ok(zovn) => a.extend([
                "--vswitchd-restart-cmd".into(),
                format!(
                    "{} lab restart-vswitchd --dir {} --node {i}",
                    zovn.display(),
                    layout.dir.display()
                ),
            ]),
            Err(e) => tracing::warn!(error = %e, "agents get no --vswitchd-restart-cmd"),
        }
    }
    a
}

/// The agents' `/metrics` port, on the loopback of each node's netns.
pub const AGENT_METRICS_PORT: u16 = 9476;

/// The lab CLI's name (the agents' restart command runs it).
pub const ZOVN_BIN: &str = "zovn";
/// Environment variable naming the lab CLI binary.
pub const ZOVN_BIN_ENV: &str = "ZOVN_BIN";

/// Starts the agent of `node` and waits (bounded) until its CNI socket exists. An agent
/// that exits is an error (with its log); one that is alive but has no socket after
/// [`SOCKET_TIMEOUT`] is recorded anyway (pods retry until it serves).
pub fn start(
    layout: &Layout,
    node: &NodeState,
    agent: &Path,
    shim: Option<&Path>,
    cfg: &crate::LabConfig,
) -> Result<DaemonRecord> {
    start_with_args(layout, node, agent, agent_args(layout, node, shim, cfg))
}

/// As [`start`], with the agent's arguments given (e.g. [`agent_args`] edited by a test).
pub fn start_with_args(
    layout: &Layout,
    node: &NodeState,
    agent: &Path,
    args: Vec<String>,
) -> Result<DaemonRecord> {
    let i = node.index;
    for d in [
        layout.node_cni_conf(i),
        layout.node_cni_bin(i),
        layout.node_agent_state(i),
    ] {
        std::fs::create_dir_all(&d).map_err(|e| LabError::io("create dir", &d, e))?;
    }
    let socket = layout.node_cni_socket(i);
    let state = layout.node_agent_state(i);
    let spec = DetachedSpec {
        name: format!("node{i}/{AGENT_BIN}"),
        program: agent.to_path_buf(),
        args,
        netns: Some(node.netns.clone()),
        log_file: layout.node_agent_log(i),
        mount_ns: None,
        pidfile: node.dir.join(format!("run/{AGENT_BIN}.pid")),
        ident: Some(state.to_string_lossy().into_owned()),
        env: node_env(&node.dir),
    };
    // a socket left by an agent that was killed (no agent runs for this node: the caller
    // checked): gone first, so the wait below sees the new agent's socket, which it binds
    // once it has restored its sandboxes
    match std::fs::remove_file(&socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(LabError::io("remove stale socket", &socket, e));
        }
        _ => {}
    }
    let rec = spawn_detached(&spec)?;
    // the pidfile is informative (the record is what `down` uses)
    let _ = std::fs::write(&rec.pidfile, format!("{}\n", rec.pid));
    let t0 = Instant::now();
    while !socket.exists() {
        if !rec.is_alive() {
            return Err(LabError::Daemon {
                name: rec.name.clone(),
                program: rec.program.clone(),
                detail: format!(
                    "exited before serving {}{}",
                    socket.display(),
                    log_tail(&rec.log_file)
                ),
            });
        }
        if t0.elapsed() >= SOCKET_TIMEOUT {
            tracing::warn!(node = i, socket = %socket.display(), "the agent serves no CNI socket yet");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(rec)
}
