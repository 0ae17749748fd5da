//! CNI ADD latency, throughput and per-phase breakdown per datapath, on ONE lab.
//!
//! The lab has a node per veth datapath asked (`kernel`, `afxdp`, `dpdk`, in that order;
//! with `no_fast_start` also an afxdp/dpdk node whose datapath config says
//! `afxdp: {fastStart: false}`), vhost-user pods go on the dpdk node. Every node's agent
//! gets the datapath config the lab writes for `zovn lab up --datapath X` (the product's
//! defaults are what is measured); the agents are started by the benchmark inside the node
//! netns with the lab's arguments minus the CNI config install, so the lab's pod runtime
//! leaves the benchmark's pods alone. Pods are driven the way a runtime drives them: the
//! pod netns, the Pod object applied to the object store (pinned to the path's node), then
//! the real `zstack-ovn-cni` shim with `ADD`.
//!
//! Per datapath:
//! - **sequential**: `pods` pods one after another; each ADD's latency from exec to
//!   result; pods/s over the loop (netns + apply + ADD per pod);
//! - **concurrent**: `concurrent` pods applied together, their ADDs started together
//!   (barrier); latencies and pods/s from the apply to the last result; on fast-start nodes
//!   also the time until every one of them is switched (the agent's `pod port moved to
//!   AF_XDP` lines) and really open as AF_XDP in ovs-vswitchd ([`crate::vswitchd_ports`]);
//! - **phases**: the agent's `CNI ADD phases` line of each ADD (see
//!   [`crate::phase_log`]): p50/p99 per phase, fast starts, pool hits;
//! - the ratio to the kernel node's figures (same run).
//!
//! On the kernel node also the **baseline**: the same per-pod work done by hand like a
//! shell plugin — `ovn-nbctl lsp-add -- lsp-set-addresses`, `ip netns add`, `ip link add
//! ... type veth peer`, move, name/MAC/MTU/address/route with `ip`, `ethtool -K eth0 tx
//! off`, `ovs-vsctl add-port ... external_ids:iface-id=...`, `ovs-vsctl wait-until
//! Interface ... external_ids:ovn-installed=true` — one pod after another.
//!
//! One warm-up pod per path is not counted. Each path's pods are deleted (DEL timed) before
//! the next path starts, so paths do not add to each other's load (an AF_XDP port costs
//! ovs-vswitchd ~75 MiB); a path that fails is reported and the next one runs. Everything
//! is torn down at the end (DEL per pod, netns deleted, agents stopped, lab down), also
//! when a step fails.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail, ensure};
use api::keys::VHOST_USER;
use lab::apiserver::ApiClient;
use lab::{Lab, LabConfig};
use serde_json::{Value, json};

use crate::host::{heavy_lock, run_ok, which};
pub use crate::phase_log::percentile;
use crate::phase_log::{AgentLog, PhaseStats, finite};
use crate::vswitchd_ports::{PortOpen, opens_line, parse_opens, wait_open};

/// Issue #17: sequential ADD p99 on afxdp/dpdk within this factor of the kernel path's.
pub const TARGET_P99_VS_KERNEL: f64 = 2.0;

const SUBNET_CIDR: &str = "10.33.0.0/16";
const SUBNET_GW: &str = "10.33.0.1";
const BASE_GW: &str = "10.34.0.1";
const MTU: u32 = 1400;
const ADD_TIMEOUT_S: f64 = 30.0;
const AGENT_LOG_FILTER: &str = "info";
const AGENT_START_TIMEOUT: Duration = Duration::from_secs(90);
const MOVE_TIMEOUT: Duration = Duration::from_secs(60);

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    /// Scratch directory (lab state, agent logs).
    pub dir: PathBuf,
    /// Pods added one after another, per datapath (ours and the baseline).
    pub pods: usize,
    /// Pods added at once, per datapath.
    pub concurrent: usize,
    /// `kernel`, `afxdp`, `dpdk`, `vhost`.
    pub datapaths: Vec<String>,
    /// Also afxdp/dpdk nodes with fast start off.
    pub no_fast_start: bool,
    /// Copy the agents' logs into this directory before teardown.
    pub agent_log: Option<PathBuf>,
}

/// Per-pod latencies (seconds) and the wall time they took together.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub latencies: Vec<f64>,
    pub wall_s: f64,
}

impl Series {
    pub fn p(&self, q: f64) -> f64 {
        percentile(&self.latencies, q)
    }
    pub fn pods_per_s(&self) -> f64 {
        self.latencies.len() as f64 / self.wall_s.max(1e-9)
    }
    fn to_json(&self) -> Value {
        json!({"pods": self.latencies.len(), "p50_ms": finite(self.p(0.5) * 1e3),
               "p99_ms": finite(self.p(0.99) * 1e3), "max_ms": finite(self.p(1.0) * 1e3),
               "wall_s": self.wall_s, "pods_per_s": finite(self.pods_per_s())})
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

/// A measured path: a kind of pod port on one node.
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    /// `kernel`, `afxdp`, `dpdk`, `vhost`, `afxdp no-fast-start`, ...
    pub label: String,
    /// The node's datapath.
    pub datapath: String,
    /// 1-based lab node.
    pub node: usize,
    pub vhost: bool,
    pub fast_start: bool,
}

impl PathSpec {
    /// Veth pods that start on a kernel port and move to AF_XDP after the ADD.
    pub fn moves(&self) -> bool {
        !self.vhost && self.fast_start && self.datapath != "kernel"
    }
}

/// A lab node's datapath and whether its AF_XDP pods start fast.
pub type NodePlan = (String, bool);

/// (when, datapath, switch_ms, port) of one `moved to AF_XDP` line.
type MoveSeen = (f64, String, f64, String);

/// The lab's node datapaths ((datapath, fast start) per node, in node order) and the
/// paths measured on them, for the datapaths asked.
pub fn plan(datapaths: &[String], no_fast_start: bool) -> Result<(Vec<NodePlan>, Vec<PathSpec>)> {
    let mut nodes: Vec<(String, bool)> = Vec::new();
    let mut paths = Vec::new();
    let node_of = |nodes: &mut Vec<(String, bool)>, dp: &str, fast: bool| -> usize {
        if let Some(i) = nodes.iter().position(|(d, f)| d == dp && *f == fast) {
            return i + 1;
        }
        nodes.push((dp.to_string(), fast));
        nodes.len()
    };
    for want in ["kernel", "afxdp", "dpdk", "vhost"] {
        if !datapaths.iter().any(|d| d == want) {
            continue;
        }
        let dp = if want == "vhost" { "dpdk" } else { want };
        let fasts: &[bool] = if no_fast_start && want != "kernel" && want != "vhost" {
            &[true, false]
        } else {
            &[true]
        };
        for &fast in fasts {
            let node = node_of(&mut nodes, dp, fast);
            paths.push(PathSpec {
                label: if fast {
                    want.to_string()
                } else {
                    format!("{want} no-fast-start")
                },
                datapath: dp.to_string(),
                node,
                vhost: want == "vhost",
                fast_start: fast,
            });
        }
    }
    for d in datapaths {
        ensure!(
            ["kernel", "afxdp", "dpdk", "vhost"].contains(&d.as_str()),
            "unknown datapath {d:?} (kernel, afxdp, dpdk, vhost)"
        );
    }
    ensure!(!paths.is_empty(), "no datapath to measure");
    Ok((nodes, paths))
}

/// What one path measured.
#[derive(Debug, Clone, Default)]
pub struct PathReport {
    pub label: String,
    pub sequential: Series,
    /// Sequential, per pod end to end: netns + apply + ADD (same wall time).
    pub sequential_e2e: Series,
    pub concurrent: Series,
    pub phases_sequential: PhaseStats,
    pub phases_concurrent: PhaseStats,
    /// Concurrent apply → the last of those pods' `moved to AF_XDP` line (fast-start paths).
    pub all_afxdp_s: Option<f64>,
    /// Concurrent apply → all of them open as AF_XDP in ovs-vswitchd (`dpctl/show`).
    pub all_open_s: Option<f64>,
    pub switch_ms: Vec<f64>,
    pub fell_back: usize,
    /// DEL of this path's pods (after it was measured).
    pub del: Series,
    /// The path's AF_XDP opens in ovs-vswitchd's log (sequential and at once).
    pub opens: Vec<PortOpen>,
    /// Why the path could not be measured (the other paths still are).
    pub error: Option<String>,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub config: Config,
    pub paths: Vec<PathReport>,
    /// By hand on the kernel node, per pod end to end (empty without a kernel node).
    pub baseline: Series,
    /// The baseline's time per step (seconds per pod, in order).
    pub baseline_steps: Vec<(&'static str, Vec<f64>)>,
}

impl Report {
    fn kernel(&self) -> Option<&PathReport> {
        self.paths
            .iter()
            .find(|p| p.label == "kernel" && p.error.is_none())
    }

    /// Sequential p99 within 2x the kernel path's (afxdp/dpdk paths; `None` elsewhere).
    pub fn p99_verdict(&self, p: &PathReport) -> Option<bool> {
        let k = self.kernel()?;
        (p.label != "kernel" && p.label != "vhost")
            .then(|| p.sequential.p(0.99) <= TARGET_P99_VS_KERNEL * k.sequential.p(0.99))
    }

    pub fn to_json(&self) -> Value {
        let k = self.kernel();
        let ratio = |s: &Series, ks: Option<&Series>| match ks {
            Some(b) => {
                json!({"p50": finite(s.p(0.5) / b.p(0.5)), "p99": finite(s.p(0.99) / b.p(0.99)),
                              "pods_per_s": finite(s.pods_per_s() / b.pods_per_s())})
            }
            None => Value::Null,
        };
        let paths: Vec<Value> = self
            .paths
            .iter()
            .map(|p| {
                json!({
                    "datapath": p.label,
                    "sequential_add": p.sequential.to_json(),
                    "sequential_end_to_end": p.sequential_e2e.to_json(),
                    "concurrent_add": p.concurrent.to_json(),
                    "vs_kernel": {
                        "sequential_add": ratio(&p.sequential, k.map(|k| &k.sequential)),
                        "concurrent_add": ratio(&p.concurrent, k.map(|k| &k.concurrent)),
                    },
                    "phases": {"sequential": p.phases_sequential.to_json(),
                               "concurrent": p.phases_concurrent.to_json()},
                    "concurrent_all_moved_to_afxdp_s": p.all_afxdp_s.map(finite),
                    "concurrent_all_open_as_afxdp_in_vswitchd_s": p.all_open_s.map(finite),
                    "switch_p50_ms": finite(percentile(&p.switch_ms, 0.5)),
                    "switch_max_ms": finite(percentile(&p.switch_ms, 1.0)),
                    "fell_back": p.fell_back,
                    "sequential_p99_within_2x_kernel": self.p99_verdict(p),
                    "del": p.del.to_json(),
                    "vswitchd_afxdp_opens": {
                        "count": p.opens.len(),
                        "open_ms_p50": finite(percentile(&p.opens.iter().filter_map(PortOpen::open_ms).collect::<Vec<_>>(), 0.5)),
                        "pmd_reload_ms_p50": finite(percentile(&p.opens.iter().filter_map(PortOpen::reload_ms).collect::<Vec<_>>(), 0.5)),
                        "whole_ms_p50": finite(percentile(&p.opens.iter().filter_map(PortOpen::total_ms).collect::<Vec<_>>(), 0.5)),
                    },
                    "error": p.error,
                })
            })
            .collect();
        json!({
            "benchmark": "cni-add",
            "pods": self.config.pods,
            "concurrent": self.config.concurrent,
            "paths": paths,
            "baseline_by_hand_kernel_node": self.baseline.to_json(),
            "baseline_steps": self.baseline_steps.iter().map(|(name, v)| {
                json!({"step": name, "p50_ms": finite(percentile(v, 0.5) * 1e3),
                       "p99_ms": finite(percentile(v, 0.99) * 1e3), "mean_ms": finite(mean(v) * 1e3)})
            }).collect::<Vec<_>>(),
        })
    }

    pub fn table(&self) -> String {
        let k = self.kernel();
        let mut s = format!(
            "cni-add: one lab, a node per datapath; per datapath {} sequential ADDs and {} at once \
             (shim exec -> result; target: sequential p99 <= {TARGET_P99_VS_KERNEL}x kernel)\n\
             {:<24} {:<14} {:>8} {:>8} {:>8}  {:>8} {:>8} {:>8}\n",
            self.config.pods,
            self.config.concurrent,
            "datapath",
            "ADDs",
            "p50 ms",
            "p99 ms",
            "pods/s",
            "p50/krn",
            "p99/krn",
            "rate/krn"
        );
        let line = |label: &str, mode: &str, x: &Series, base: Option<&Series>| {
            let r = |a: f64, b: Option<f64>| match b {
                Some(b) => format!("{:>7.2}x", a / b),
                None => format!("{:>8}", "-"),
            };
            format!(
                "{label:<24} {mode:<14} {:>8.1} {:>8.1} {:>8.1}  {} {} {}\n",
                x.p(0.5) * 1e3,
                x.p(0.99) * 1e3,
                x.pods_per_s(),
                r(x.p(0.5), base.map(|b| b.p(0.5))),
                r(x.p(0.99), base.map(|b| b.p(0.99))),
                r(x.pods_per_s(), base.map(Series::pods_per_s)),
            )
        };
        for p in &self.paths {
            if let Some(e) = &p.error {
                s += &format!("{:<24} FAILED: {e}\n", p.label);
            }
            s += &line(
                &p.label,
                "sequential",
                &p.sequential,
                k.map(|k| &k.sequential),
            );
            s += &line(
                "",
                &format!("{} at once", self.config.concurrent),
                &p.concurrent,
                k.map(|k| &k.concurrent),
            );
        }
        if !self.baseline.latencies.is_empty() {
            s += &line(
                "by hand (kernel node)",
                "sequential",
                &self.baseline,
                k.map(|k| &k.sequential_e2e),
            );
            if let Some(k) = k {
                s += &line(
                    "kernel, end to end",
                    "netns+apply+ADD",
                    &k.sequential_e2e,
                    None,
                );
            }
        }
        for p in &self.paths {
            s += &format!(
                "{:<24} {:<14} {:>8.1} {:>8.1} {:>8.1}\n",
                format!("{} DEL", p.label),
                "sequential",
                p.del.p(0.5) * 1e3,
                p.del.p(0.99) * 1e3,
                p.del.pods_per_s()
            );
        }
        s += "where an ADD's time goes (agents' `CNI ADD phases` lines; total = request -> result):\n";
        for p in &self.paths {
            s += &format!(
                "  {:<22} sequential: {}\n",
                p.label,
                p.phases_sequential.line()
            );
            s += &format!("  {:<22} at once:    {}\n", "", p.phases_concurrent.line());
            if let Some(t) = p.all_afxdp_s {
                s += &format!(
                    "  {:<22} the {} pods added at once: all moved {t:.2} s after the apply, \
                     all open as AF_XDP in ovs-vswitchd {:.2} s; switch p50 {:.0} ms, max {:.0} ms{}\n",
                    "",
                    self.config.concurrent,
                    p.all_open_s.unwrap_or(f64::NAN),
                    percentile(&p.switch_ms, 0.5),
                    percentile(&p.switch_ms, 1.0),
                    if p.fell_back > 0 {
                        format!(", {} fell back to kernel", p.fell_back)
                    } else {
                        String::new()
                    }
                );
            }
            if !p.opens.is_empty() {
                s += &format!("  {:<22} {}\n", "", opens_line(&p.opens));
            }
            if let Some(ok) = self.p99_verdict(p) {
                s += &format!(
                    "  {:<22} sequential p99 {:.2}x kernel: {}\n",
                    "",
                    p.sequential.p(0.99) / k.map_or(f64::NAN, |k| k.sequential.p(0.99)),
                    if ok { "pass" } else { "FAIL" }
                );
            }
        }
        if !self.baseline_steps.is_empty() {
            s += "  by hand on the kernel node, per step\n";
            for (name, v) in &self.baseline_steps {
                s += &format!(
                    "    {name:<44} p50 {:>7.1} ms  p99 {:>7.1} ms  mean {:>7.1} ms\n",
                    percentile(v, 0.5) * 1e3,
                    percentile(v, 0.99) * 1e3,
                    mean(v) * 1e3
                );
            }
        }
        s
    }
}

/// Runs the benchmark (blocking: call it off the async runtime).
pub fn run(cfg: Config) -> Result<Report> {
    ensure!(
        cfg.pods > 0 && cfg.concurrent > 0,
        "--pods and --concurrent must be > 0"
    );
    ensure!(
        cfg.pods + cfg.concurrent < 10_000,
        "at most 10000 pods per datapath"
    );
    let (nodes, paths) = plan(&cfg.datapaths, cfg.no_fast_start)?;
    let zovn = lab::apiserver::zovn_exe()?;
    let (agent, shim) = (lab::agent::agent_exe(), lab::agent::shim_exe());
    let (agent, shim) = match (agent, shim) {
        (Ok(a), Ok(s)) => (a, s),
        (a, s) => bail!(
            "{}; build them with `cargo build --release -p dataplane -p cni --bins`",
            [a.err(), s.err()]
                .into_iter()
                .flatten()
                .map(|e| format!("{e:#}"))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    for tool in ["ip", "ethtool", "ovs-vsctl", "ovn-nbctl"] {
        ensure!(
            which(tool).is_some(),
            "`{tool}` is not installed (run `make deps`)"
        );
    }
    let _lock = heavy_lock("cni-add")?;
    std::fs::create_dir_all(&cfg.dir).with_context(|| format!("create {}", cfg.dir.display()))?;
    let prefix = format!("pf{:x}", std::process::id() % 0xfff);
    let mut bench = Bench {
        cfg: cfg.clone(),
        lab_dir: cfg.dir.join("lab"),
        prefix,
        shim,
        agents: Vec::new(),
        nodes: Vec::new(),
        nb: String::new(),
        added: Vec::new(),
        netns: Vec::new(),
        base_ports: Vec::new(),
        lab_started: false,
        next: 0,
    };
    let result = bench.measure(&zovn, &agent, &nodes, &paths);
    if let Some(dst) = &cfg.agent_log {
        let _ = std::fs::create_dir_all(dst);
        for n in &bench.nodes {
            let _ = std::fs::copy(
                &n.log,
                dst.join(format!("node{}-{}.log", n.index, n.label.replace(' ', "-"))),
            );
        }
    }
    let teardown = bench.teardown();
    let report = match (result, teardown) {
        (Ok(r), Ok(())) => r,
        (Err(e), t) => {
            if let Err(te) = t {
                eprintln!("teardown after the failure also failed: {te:#}");
            }
            return Err(e);
        }
        (Ok(_), Err(e)) => return Err(e.context("teardown")),
    };
    Ok(report)
}

/// A lab node and the agent the benchmark runs on it.
#[derive(Debug, Clone)]
struct NodeInfo {
    index: usize,
    /// `kernel`, `afxdp`, `afxdp no-fast-start`, ...
    label: String,
    name: String,
    netns: String,
    db: String,
    socket: PathBuf,
    log: PathBuf,
    /// ovs-vswitchd's control socket.
    ctl: PathBuf,
    vswitchd_log: PathBuf,
}

/// A shim ADD (torn down with DEL).
#[derive(Debug, Clone)]
struct Added {
    cid: String,
    netns: String,
    pod: String,
    socket: PathBuf,
}

/// One measured ADD.
#[derive(Debug, Clone)]
struct AddSample {
    cid: String,
    /// The host-side interface (the OVS port) from the result.
    host: String,
    /// Wall-clock exec and result (seconds since the epoch).
    exec_at: f64,
    result_at: f64,
}

impl AddSample {
    fn latency(&self) -> f64 {
        self.result_at - self.exec_at
    }
}

/// The run's state; [`Bench::teardown`] (also run on drop) undoes everything.
struct Bench {
    cfg: Config,
    lab_dir: PathBuf,
    prefix: String,
    shim: PathBuf,
    agents: Vec<Child>,
    nodes: Vec<NodeInfo>,
    nb: String,
    added: Vec<Added>,
    netns: Vec<String>,
    /// Baseline host interfaces (in the kernel node's netns) and their OVS ports.
    base_ports: Vec<String>,
    lab_started: bool,
    /// The next pod index (container ids and netns names).
    next: usize,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A pod name part for a path label (`afxdp no-fast-start` → `afxdp-nfs`).
fn tag(label: &str) -> String {
    label.replace(" no-fast-start", "-nfs")
}

impl Bench {
    fn node(&self, i: usize) -> Result<&NodeInfo> {
        self.nodes
            .iter()
            .find(|n| n.index == i)
            .ok_or_else(|| anyhow!("lab node {i} is not up"))
    }

    fn measure(
        &mut self,
        zovn: &Path,
        agent: &Path,
        nodes: &[NodePlan],
        paths: &[PathSpec],
    ) -> Result<Report> {
        eprintln!(
            "cni-add: lab up, {} nodes ({}), prefix {}",
            nodes.len(),
            nodes
                .iter()
                .map(|(d, f)| if *f {
                    d.clone()
                } else {
                    format!("{d} no-fast-start")
                })
                .collect::<Vec<_>>()
                .join(", "),
            self.prefix
        );
        self.lab_started = true;
        let mut lab = Lab::up(LabConfig {
            cluster_cidr: Vec::new(),
            nodes: nodes.len(),
            datapath: nodes.iter().map(|(d, _)| d.clone()).collect(),
            ..LabConfig::new(self.lab_dir.clone(), &self.prefix)
        })
        .context("lab up")?;
        lab.keep_running();
        self.nb = lab.nb_remote();
        for (i, (dp, fast)) in nodes.iter().enumerate() {
            let st = lab.node(i + 1)?.clone();
            if !*fast {
                let f = st.dir.join("datapath.yaml");
                let mut text =
                    std::fs::read_to_string(&f).with_context(|| format!("read {}", f.display()))?;
                text += "afxdp: {fastStart: false}\n";
                std::fs::write(&f, text).with_context(|| format!("write {}", f.display()))?;
            }
            self.nodes.push(NodeInfo {
                index: i + 1,
                label: if *fast {
                    dp.clone()
                } else {
                    format!("{dp} no-fast-start")
                },
                name: st.system_id.clone(),
                netns: st.netns.clone(),
                db: st.db_remote.clone(),
                socket: lab::state::Layout::new(&self.lab_dir).node_cni_socket(i + 1),
                log: self.cfg.dir.join(format!("agent-node{}.log", i + 1)),
                ctl: st.dir.join("run/ovs-vswitchd.ctl"),
                vswitchd_log: st.dir.join("log/ovs-vswitchd.log"),
            });
        }
        lab.start_apiserver(zovn)
            .context("start the lab object store")?;
        ApiClient::connect(&self.lab_dir)?
            .apply(vec![
                json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
                "metadata": {"name": "perf"},
                "spec": {"cidr": SUBNET_CIDR, "gateway": SUBNET_GW, "default": true}}),
            ])
            .context("apply the Subnet")?;
        for st in lab.nodes().to_vec() {
            self.start_agent(&lab, &st, agent)?;
        }

        // the baseline's logical switch (not the controller's)
        let kernel_node = paths.iter().find(|p| p.label == "kernel").map(|p| p.node);
        let ls = format!("{}-base", self.prefix);
        if kernel_node.is_some() {
            run_ok(
                Command::new("ovn-nbctl")
                    .arg(format!("--db={}", self.nb))
                    .args(["ls-add", &ls]),
            )?;
        }

        // warm-up of the baseline (not counted); ours is warmed up per path below
        if let Some(k) = kernel_node {
            self.baseline_one(0, &ls, k)?;
        }

        // each path's pods are deleted before the next path starts: the paths do not
        // share a node's load, and AF_XDP ports (~75 MiB of ovs-vswitchd each) do not pile up
        let mut reports = Vec::new();
        for p in paths {
            // warm-up (not counted): the node's first port after the previous path's DELs
            let measured = self.ours_one(p, "warm").and_then(|_| self.measure_path(p));
            let mut r = measured.unwrap_or_else(|e| {
                eprintln!("cni-add: {} failed: {e:#}", p.label);
                PathReport {
                    label: p.label.clone(),
                    error: Some(format!("{e:#}")),
                    ..PathReport::default()
                }
            });
            let (del, err) = self.del_added();
            r.del = del;
            if let Some(e) = err {
                r.error.get_or_insert(format!("DEL: {e:#}"));
            }
            reports.push(r);
        }

        let (mut base, mut base_steps) = (Series::default(), Vec::new());
        if let Some(k) = kernel_node {
            eprintln!("cni-add: baseline, {} pods by hand", self.cfg.pods);
            let t0 = Instant::now();
            for i in 1..=self.cfg.pods {
                let t = Instant::now();
                let steps = self.baseline_one(i, &ls, k)?;
                base.latencies.push(t.elapsed().as_secs_f64());
                for (name, secs) in steps {
                    match base_steps
                        .iter_mut()
                        .find(|(n, _): &&mut (&'static str, Vec<f64>)| *n == name)
                    {
                        Some((_, v)) => v.push(secs),
                        None => base_steps.push((name, vec![secs])),
                    }
                }
            }
            base.wall_s = t0.elapsed().as_secs_f64();
        }
        Ok(Report {
            config: self.cfg.clone(),
            paths: reports,
            baseline: base,
            baseline_steps: base_steps,
        })
    }

    fn measure_path(&mut self, p: &PathSpec) -> Result<PathReport> {
        eprintln!("cni-add: {}: {} sequential ADDs", p.label, self.cfg.pods);
        let mut seq = Vec::new();
        let mut e2e = Vec::new();
        let t0 = Instant::now();
        for _ in 0..self.cfg.pods {
            let t = Instant::now();
            seq.push(self.ours_one(p, "s")?);
            e2e.push(t.elapsed().as_secs_f64());
        }
        let seq_wall = t0.elapsed().as_secs_f64();
        if p.moves() {
            // the sequential pods' switches done before the concurrent burst
            let (_, moved) = self.wait_moved(p, &seq)?;
            let ports: Vec<String> = moved
                .into_iter()
                .filter(|(_, dp, _, _)| dp == "afxdp")
                .map(|(_, _, _, port)| port)
                .collect();
            let node = self.node(p.node)?;
            wait_open(
                &[(node.netns.clone(), node.ctl.clone())],
                &ports,
                MOVE_TIMEOUT,
            )?;
        }
        eprintln!("cni-add: {}: {} ADDs at once", p.label, self.cfg.concurrent);
        let (conc, conc_wall, conc_apply) = self.ours_concurrent(p)?;
        let mut r = PathReport {
            label: p.label.clone(),
            sequential: Series {
                latencies: seq.iter().map(AddSample::latency).collect(),
                wall_s: seq_wall,
            },
            sequential_e2e: Series {
                latencies: e2e,
                wall_s: seq_wall,
            },
            concurrent: Series {
                latencies: conc.iter().map(AddSample::latency).collect(),
                wall_s: conc_wall,
            },
            ..PathReport::default()
        };
        let log = if p.moves() {
            let (log, moved) = self.wait_moved(p, &conc)?;
            r.all_afxdp_s = moved
                .iter()
                .map(|(at, _, _, _)| *at)
                .reduce(f64::max)
                .map(|t| t - conc_apply);
            r.fell_back = moved.iter().filter(|(_, dp, _, _)| dp != "afxdp").count();
            r.switch_ms = moved.iter().map(|(_, _, ms, _)| *ms).collect();
            let ports: Vec<String> = moved
                .iter()
                .filter(|(_, dp, _, _)| dp == "afxdp")
                .map(|(_, _, _, port)| port.clone())
                .collect();
            let node = self.node(p.node)?;
            let open = wait_open(
                &[(node.netns.clone(), node.ctl.clone())],
                &ports,
                MOVE_TIMEOUT,
            )?;
            r.all_open_s = Some(open - conc_apply);
            log
        } else {
            AgentLog::read(&self.node(p.node)?.log)
        };
        let phases = |v: &[AddSample]| -> Result<PhaseStats> {
            let adds: Vec<_> = v.iter().filter_map(|s| log.add_of(&s.cid)).collect();
            ensure!(
                adds.len() == v.len(),
                "{} of {} ADDs on {} have a `CNI ADD phases` line in {}",
                adds.len(),
                v.len(),
                p.label,
                self.node(p.node)?.log.display()
            );
            Ok(PhaseStats::of(adds))
        };
        r.phases_sequential = phases(&seq)?;
        r.phases_concurrent = phases(&conc)?;
        if !p.vhost && p.datapath != "kernel" {
            let node = self.node(p.node)?;
            let text = std::fs::read_to_string(&node.vswitchd_log).unwrap_or_default();
            let ports: Vec<String> = seq.iter().chain(&conc).map(|s| s.host.clone()).collect();
            r.opens = parse_opens(&text, &ports);
        }
        Ok(r)
    }

    /// Waits until the node's log has a move line for each sample's pod; the log and
    /// (time, datapath, switch_ms) per pod.
    fn wait_moved(&self, p: &PathSpec, samples: &[AddSample]) -> Result<(AgentLog, Vec<MoveSeen>)> {
        let node = self.node(p.node)?;
        let t0 = Instant::now();
        loop {
            let log = AgentLog::read(&node.log);
            let pods: Vec<String> = samples
                .iter()
                .filter_map(|s| log.add_of(&s.cid).map(|a| a.pod.clone()))
                .collect();
            let moved: Vec<MoveSeen> = log
                .moved_of(&pods)
                .into_iter()
                .map(|m| (m.at, m.datapath.clone(), m.switch_ms, m.port.clone()))
                .collect();
            if pods.len() == samples.len() && moved.len() == samples.len() {
                return Ok((log, moved));
            }
            if t0.elapsed() > MOVE_TIMEOUT {
                bail!(
                    "{}: {} of {} pod ports moved to AF_XDP after {MOVE_TIMEOUT:?}",
                    p.label,
                    moved.len(),
                    samples.len()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts node `st`'s agent inside its netns with the lab's arguments (datapath config
    /// included) minus the CNI config install (the lab's pod runtime must not see it).
    fn start_agent(&mut self, lab: &Lab, st: &lab::state::NodeState, agent: &Path) -> Result<()> {
        let node = self.node(st.index)?.clone();
        let layout = lab::state::Layout::new(lab.dir());
        let mut args = lab::agent::agent_args(&layout, st, None, lab.config());
        for flag in ["--cni-conf-dir", "--cni-bin-dir"] {
            if let Some(i) = args.iter().position(|a| a == flag) {
                args.drain(i..(i + 2).min(args.len()));
            }
        }
        let state = layout.node_agent_state(st.index);
        std::fs::create_dir_all(&state).with_context(|| format!("create {}", state.display()))?;
        let log =
            File::create(&node.log).with_context(|| format!("create {}", node.log.display()))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &node.netns])
            .arg(agent)
            .args(&args)
            .envs(lab::node::node_env(&st.dir))
            .env("RUST_LOG", AGENT_LOG_FILTER)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", agent.display()))?;
        self.agents.push(child);
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(&node.socket).is_err() {
            if let Some(c) = self.agents.last_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                bail!(
                    "the agent of node{} exited ({status}) before serving {}:\n{}",
                    node.index,
                    node.socket.display(),
                    tail(&node.log)
                );
            }
            if t.elapsed() > AGENT_START_TIMEOUT {
                bail!(
                    "the agent of node{} serves no {} after {AGENT_START_TIMEOUT:?}:\n{}",
                    node.index,
                    node.socket.display(),
                    tail(&node.log)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn pod_object(&self, p: &PathSpec, name: &str) -> Result<Value> {
        let mut v = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": self.node(p.node)?.name, "containers": []}});
        if p.vhost {
            v["metadata"]["annotations"] =
                json!({VHOST_USER: "{\"queues\": 1, \"owner\": \"0:0\"}"});
        }
        Ok(v)
    }

    fn add_netns(&mut self, name: &str) -> Result<()> {
        run_ok(Command::new("ip").args(["netns", "add", name]))?;
        self.netns.push(name.to_string());
        Ok(())
    }

    /// A fresh pod index, its container id and netns name.
    fn next_pod(&mut self) -> (usize, String, String) {
        self.next += 1;
        let i = self.next;
        (i, container_id(i), format!("{}o{i}", self.prefix))
    }

    /// One pod on path `p`: netns, Pod object, shim ADD (measured).
    fn ours_one(&mut self, p: &PathSpec, kind: &str) -> Result<AddSample> {
        let (i, cid, ns) = self.next_pod();
        let pod = format!("{}-{kind}{i}", tag(&p.label));
        self.add_netns(&ns)?;
        ApiClient::connect(&self.lab_dir)?
            .apply(vec![self.pod_object(p, &pod)?])
            .with_context(|| format!("apply pod {pod}"))?;
        let socket = self.node(p.node)?.socket.clone();
        let s = shim_add(&self.shim, &socket, &cid, &ns, &pod);
        self.added.push(Added {
            cid,
            netns: ns,
            pod,
            socket,
        });
        s
    }

    /// `concurrent` pods on path `p`: netns created, Pods applied in one request, ADDs
    /// released together. Returns the samples, the wall time from the apply and the
    /// apply's wall-clock time.
    fn ours_concurrent(&mut self, p: &PathSpec) -> Result<(Vec<AddSample>, f64, f64)> {
        let n = self.cfg.concurrent;
        let socket = self.node(p.node)?.socket.clone();
        let mut jobs = Vec::new();
        for _ in 0..n {
            let (i, cid, ns) = self.next_pod();
            self.add_netns(&ns)?;
            jobs.push((cid, ns, format!("{}-c{i}", tag(&p.label))));
        }
        let objects = jobs
            .iter()
            .map(|(_, _, pod)| self.pod_object(p, pod))
            .collect::<Result<Vec<_>>>()?;
        let barrier = Arc::new(Barrier::new(n + 1));
        let handles: Vec<_> = jobs
            .iter()
            .cloned()
            .map(|(cid, ns, pod)| {
                let (shim, socket, barrier) = (self.shim.clone(), socket.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    shim_add(&shim, &socket, &cid, &ns, &pod)
                })
            })
            .collect();
        let apply_at = now();
        let t0 = Instant::now();
        let applied = ApiClient::connect(&self.lab_dir)
            .and_then(|mut c| c.apply(objects))
            .context("apply the concurrent pods");
        barrier.wait();
        let mut out = Vec::new();
        let mut first_err = applied.err();
        for (h, (cid, ns, pod)) in handles.into_iter().zip(jobs) {
            // a failed ADD may have left a half-made sandbox: DEL it at teardown too
            self.added.push(Added {
                cid,
                netns: ns,
                pod,
                socket: socket.clone(),
            });
            match h.join() {
                Ok(Ok(s)) => out.push(s),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(anyhow!("an ADD thread panicked"));
                }
            }
        }
        let wall = t0.elapsed().as_secs_f64();
        if let Some(e) = first_err {
            return Err(e);
        }
        Ok((out, wall, apply_at))
    }

    /// One pod by hand, the way a shell plugin does it (index `i` names and addresses it).
    fn baseline_one(&mut self, i: usize, ls: &str, k: usize) -> Result<Vec<(&'static str, f64)>> {
        let mut steps = Vec::new();
        let mut t = Instant::now();
        let mut lap = |name: &'static str| {
            steps.push((name, t.elapsed().as_secs_f64()));
            t = Instant::now();
        };
        let node = self.node(k)?.clone();
        let nb = self.nb.clone();
        let ns = format!("{}b{i}", self.prefix);
        let host = format!("{}h{i}", self.prefix);
        let tmp = format!("{}t{i}", self.prefix);
        let lsp = format!("{}-base-{i}", self.prefix);
        let (hi, lo) = ((i >> 8) & 0xff, i & 0xff);
        let mac = format!("0a:58:0a:22:{hi:02x}:{lo:02x}");
        let ip = format!("10.34.{hi}.{lo}");
        let ip_ = |args: &[&str]| run_ok(Command::new("ip").args(args));
        run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={nb}"))
                .args(["lsp-add", ls, &lsp, "--", "lsp-set-addresses", &lsp])
                .arg(format!("{mac} {ip}")),
        )?;
        lap("ovn-nbctl lsp-add + lsp-set-addresses");
        self.add_netns(&ns)?;
        lap("ip netns add");
        ip_(&[
            "-n",
            &node.netns,
            "link",
            "add",
            &host,
            "type",
            "veth",
            "peer",
            "name",
            &tmp,
        ])?;
        self.base_ports.push(host.clone());
        ip_(&["-n", &node.netns, "link", "set", &tmp, "netns", &ns])?;
        ip_(&["-n", &ns, "link", "set", &tmp, "name", "eth0"])?;
        ip_(&[
            "-n",
            &ns,
            "link",
            "set",
            "eth0",
            "address",
            &mac,
            "mtu",
            &MTU.to_string(),
        ])?;
        ip_(&["-n", &ns, "addr", "add", &format!("{ip}/16"), "dev", "eth0"])?;
        ip_(&["-n", &ns, "link", "set", "lo", "up"])?;
        ip_(&["-n", &ns, "link", "set", "eth0", "up"])?;
        ip_(&["-n", &ns, "route", "add", "default", "via", BASE_GW])?;
        lap("ip: veth, move, name/MAC/MTU/addr/up/route");
        run_ok(
            Command::new("ip").args(["netns", "exec", &ns, "ethtool", "-K", "eth0", "tx", "off"]),
        )?;
        lap("ip netns exec ethtool -K eth0 tx off");
        ip_(&[
            "-n",
            &node.netns,
            "link",
            "set",
            &host,
            "mtu",
            &MTU.to_string(),
            "up",
        ])?;
        lap("ip: host side MTU + up");
        run_ok(
            Command::new("ovs-vsctl")
                .arg(format!("--db={}", node.db))
                .args(["add-port", "br-int", &host, "--", "set", "Interface", &host])
                .arg(format!("external_ids:iface-id={lsp}")),
        )?;
        lap("ovs-vsctl add-port -- set iface-id");
        run_ok(
            Command::new("ovs-vsctl")
                .arg(format!("--db={}", node.db))
                .args(["--timeout=30", "wait-until", "Interface", &host])
                .arg("external_ids:ovn-installed=true"),
        )
        .with_context(|| format!("{host} never became ovn-installed"))?;
        lap("ovs-vsctl wait-until ovn-installed=true");
        Ok(steps)
    }

    /// DEL every added pod (measured) and delete their netns; the first error.
    fn del_added(&mut self) -> (Series, Option<anyhow::Error>) {
        let mut first_err: Option<anyhow::Error> = None;
        let mut del = Series::default();
        let t0 = Instant::now();
        let agents_alive = !self.agents.is_empty()
            && self
                .agents
                .iter_mut()
                .all(|c| matches!(c.try_wait(), Ok(None)));
        for a in std::mem::take(&mut self.added) {
            if !agents_alive {
                break;
            }
            let t = Instant::now();
            match shim(&self.shim, &a.socket, "DEL", &a.cid, &a.netns, &a.pod) {
                Ok((true, _)) => del.latencies.push(t.elapsed().as_secs_f64()),
                Ok((false, v)) => {
                    first_err.get_or_insert(anyhow!("DEL {}: {v}", a.pod));
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        del.wall_s = t0.elapsed().as_secs_f64();
        for ns in std::mem::take(&mut self.netns) {
            if let Err(e) = run_ok(Command::new("ip").args(["netns", "del", &ns])) {
                first_err.get_or_insert(e);
            }
        }
        (del, first_err)
    }

    /// DEL every pod left, delete the netns and baseline ports, stop the agents, take the
    /// lab down. Idempotent; returns the first error after trying all.
    fn teardown(&mut self) -> Result<()> {
        let (_, mut first_err) = self.del_added();
        if let Some(node) = self.nodes.iter().find(|n| n.label == "kernel").cloned() {
            for host in std::mem::take(&mut self.base_ports) {
                let _ = Command::new("ovs-vsctl")
                    .arg(format!("--db={}", node.db))
                    .args(["--if-exists", "del-port", "br-int", &host])
                    .output();
                let _ = Command::new("ip")
                    .args(["-n", &node.netns, "link", "del", &host])
                    .output();
            }
        }
        for mut c in std::mem::take(&mut self.agents) {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in std::mem::take(&mut self.netns) {
            if let Err(e) = run_ok(Command::new("ip").args(["netns", "del", &ns])) {
                first_err.get_or_insert(e);
            }
        }
        if std::mem::take(&mut self.lab_started) && self.lab_dir.join("lab.json").exists() {
            match Lab::open(&self.lab_dir) {
                Ok(l) => {
                    if let Err(e) = l.down() {
                        first_err.get_or_insert(anyhow!("lab down: {e}"));
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(anyhow!("open the lab for teardown: {e}"));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Runs the shim once: (exit ok, stdout JSON).
fn shim(
    bin: &Path,
    socket: &Path,
    cmd: &str,
    cid: &str,
    netns: &str,
    pod: &str,
) -> Result<(bool, Value)> {
    crate::host::Shim {
        bin,
        socket,
        cni_version: "1.0.0",
        timeout_s: ADD_TIMEOUT_S,
    }
    .call(cmd, cid, netns, pod)
}

/// A measured ADD that must succeed with an address.
fn shim_add(bin: &Path, socket: &Path, cid: &str, netns: &str, pod: &str) -> Result<AddSample> {
    let exec_at = now();
    let (ok, v) = shim(bin, socket, "ADD", cid, netns, pod)?;
    let result_at = now();
    ensure!(ok, "ADD of pod {pod} failed: {v}");
    ensure!(
        v["ips"][0]["address"].is_string(),
        "ADD of pod {pod} returned no address: {v}"
    );
    Ok(AddSample {
        cid: cid.to_string(),
        host: v["interfaces"][0]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        exec_at,
        result_at,
    })
}

/// A container id like a runtime's (64 hex digits, random-looking): the agent names the
/// host interface after its first 11 digits, so they must differ between pods.
fn container_id(i: usize) -> String {
    let mut z =
        ((u64::from(std::process::id())) << 32 | i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    format!("{z:016x}{i:048x}")
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dps(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_node_per_veth_datapath_and_vhost_on_the_dpdk_node() {
        let (nodes, paths) =
            plan(&dps(&["vhost", "kernel", "afxdp", "dpdk"]), false).expect("plan");
        assert_eq!(
            nodes,
            [
                ("kernel".to_string(), true),
                ("afxdp".into(), true),
                ("dpdk".into(), true)
            ]
        );
        let got: Vec<(&str, usize, bool)> = paths
            .iter()
            .map(|p| (p.label.as_str(), p.node, p.vhost))
            .collect();
        assert_eq!(
            got,
            [
                ("kernel", 1, false),
                ("afxdp", 2, false),
                ("dpdk", 3, false),
                ("vhost", 3, true)
            ]
        );
        assert!(paths[1].moves() && !paths[0].moves() && !paths[3].moves());
    }

    #[test]
    fn vhost_alone_still_gets_a_dpdk_node_and_no_fast_start_adds_nodes() {
        let (nodes, paths) = plan(&dps(&["vhost"]), true).expect("plan");
        assert_eq!(nodes, [("dpdk".to_string(), true)]);
        assert_eq!(paths.len(), 1);
        let (nodes, paths) = plan(&dps(&["kernel", "afxdp"]), true).expect("plan");
        assert_eq!(nodes.len(), 3);
        assert_eq!(paths[2].label, "afxdp no-fast-start");
        assert!(!paths[2].moves() && !paths[2].fast_start);
        assert!(plan(&dps(&["kernal"]), false).is_err());
        assert!(plan(&[], false).is_err());
    }

    #[test]
    fn container_ids_differ_in_the_first_digits() {
        let a = container_id(1);
        let b = container_id(2);
        assert_eq!(a.len(), 64);
        assert_ne!(a[..11], b[..11]);
    }
}
