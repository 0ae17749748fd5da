//! `zovn-perf pod-burst`: issue #17's user test as a benchmark.
//!
//! For each datapath asked and each round: a FRESH 2-node lab with that datapath (what
//! `zovn lab up --nodes 2 --datapath X` builds: central, two nodes, the object store with
//! the controller and the pod runtime, one node agent per node with the lab's datapath
//! config — the product's defaults), a default Subnet, two probe pods pinned to node1,
//! then the burst: `pods` Pods applied in one request with no `spec.nodeName` (the store
//! spreads them over both nodes), timed from the apply until the store shows every one
//! Ready (what `zovn lab get pods` shows).
//!
//! Per run, from both agents' logs (see [`crate::phase_log`]): the ADD p50/p99 and per
//! phase, how many ADDs started fast (`then=afxdp`), the time from the apply until every
//! burst pod's port is switched (the last `pod port moved to AF_XDP` line) and until
//! ovs-vswitchd really has every one open as AF_XDP ([`crate::vswitchd_ports`]), and the
//! switches' `switch_ms`.
//!
//! Then the traffic probe (every datapath, kernel as the reference): between the two
//! probe pods, a ping every 2 ms and an iperf3 TCP stream (rate-limited, the machine has
//! 2 cores) while `probe_pods` more pods are added at once on node1; the longest gap
//! between replies, packets lost, whether iperf3 finished without error. On fast-start
//! nodes, one more pod is added and pinged from as soon as it is Ready, across its own
//! switch to AF_XDP (the new pod's gap).
//!
//! Every lab is torn down after its run, also when the run fails (the lab's `down` removes
//! the pods' netns and restores the hugepages it reserved); a failed run is reported and
//! the next one runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use lab::apiserver::{ApiClient, ResourceKind};
use lab::{Lab, LabConfig};
use serde_json::{Value, json};

use crate::host::{heavy_lock, teardown_lab};
use crate::phase_log::{AgentLog, PhaseStats, finite, percentile};
use crate::traffic_gap::{PingGaps, Probe, ProbeReport};
use crate::vswitchd_ports::{PortOpen, opens_line, parse_opens, wait_open};

mod summary;
pub use summary::Summary;

/// Targets from the issue.
pub const TARGET_READY_VS_KERNEL: f64 = 1.5;
pub const TARGET_ADD_P99_S: f64 = 1.0;
pub const TARGET_GAP_MS: f64 = 100.0;

const SUBNET_CIDR: &str = "10.36.0.0/16";
const SUBNET_GW: &str = "10.36.0.1";
const READY_TIMEOUT: Duration = Duration::from_secs(180);
const MOVE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the new pod pings (its switch must fall inside).
const NEW_POD_PING_S: u32 = 5;

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    pub dir: PathBuf,
    /// `kernel`, `afxdp`, `dpdk`, `auto`.
    pub datapaths: Vec<String>,
    pub rounds: usize,
    /// Burst size (both nodes).
    pub pods: usize,
    /// Pods added on node1 during the traffic probe; 0: no probe.
    pub probe_pods: usize,
    /// Length of the probe's ping and iperf3 (must cover the probe burst).
    pub probe_seconds: u32,
    /// iperf3 `-b` of the probe stream; `None`: ping only.
    pub iperf_rate: Option<String>,
    /// Also run afxdp/dpdk with `afxdp: {fastStart: false}` (the agent's old behaviour).
    pub no_fast_start: bool,
    /// Keep the agents' logs here (`<dir>/<variant>-r<round>-node<i>.log`).
    pub keep_logs: Option<PathBuf>,
}

/// A datapath and whether its AF_XDP pods start fast.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub datapath: String,
    pub fast_start: bool,
}

impl Variant {
    pub fn label(&self) -> String {
        if self.fast_start || !self.afxdp_ports() {
            self.datapath.clone()
        } else {
            format!("{} no-fast-start", self.datapath)
        }
    }
    /// Veth pods get AF_XDP ports on this datapath.
    pub fn afxdp_ports(&self) -> bool {
        self.datapath != "kernel"
    }
    /// Veth pods start on a kernel port and move later.
    pub fn moves(&self) -> bool {
        self.afxdp_ports() && self.fast_start
    }
}

/// The variants a config asks for, in order.
pub fn variants(datapaths: &[String], no_fast_start: bool) -> Vec<Variant> {
    let mut v = Vec::new();
    for dp in datapaths {
        v.push(Variant {
            datapath: dp.clone(),
            fast_start: true,
        });
        if no_fast_start && dp != "kernel" {
            v.push(Variant {
                datapath: dp.clone(),
                fast_start: false,
            });
        }
    }
    v
}

/// One run: one fresh lab.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub label: String,
    pub round: usize,
    pub error: Option<String>,
    /// Apply → all Ready (store), seconds.
    pub ready_s: f64,
    /// Burst pods per node (node1, node2).
    pub per_node: (usize, usize),
    pub adds: PhaseStats,
    /// Agent-side ADD durations of the burst pods (seconds).
    pub add_s: Vec<f64>,
    /// Apply → the last burst pod's `moved to AF_XDP` line (seconds); `None` when ports
    /// start on AF_XDP.
    pub all_afxdp_s: Option<f64>,
    /// Apply → every burst pod's port open as AF_XDP in ovs-vswitchd (`dpctl/show`).
    pub all_open_s: Option<f64>,
    /// Burst pods moved / fell back to the kernel path.
    pub moved: usize,
    pub fell_back: usize,
    pub switch_ms: Vec<f64>,
    pub probe: Option<ProbeReport>,
    /// Probe burst: apply → all Ready (and moved), seconds.
    pub probe_burst_s: f64,
    /// A new pod's ping across its own switch.
    pub new_pod: Option<PingGaps>,
    /// The burst pods' AF_XDP opens in ovs-vswitchd's logs.
    pub opens: Vec<PortOpen>,
}

impl Run {
    fn to_json(&self) -> Value {
        json!({
            "datapath": self.label, "round": self.round, "error": self.error,
            "all_ready_s": finite(self.ready_s),
            "pods_per_node": [self.per_node.0, self.per_node.1],
            "add_p50_ms": finite(percentile(&self.add_s, 0.5) * 1e3),
            "add_p99_ms": finite(percentile(&self.add_s, 0.99) * 1e3),
            "phases": self.adds.to_json(),
            "all_moved_to_afxdp_s": self.all_afxdp_s.map(finite),
            "all_open_as_afxdp_in_vswitchd_s": self.all_open_s.map(finite),
            "moved": self.moved, "fell_back": self.fell_back,
            "switch_p50_ms": finite(percentile(&self.switch_ms, 0.5)),
            "switch_max_ms": finite(percentile(&self.switch_ms, 1.0)),
            "probe": self.probe.as_ref().map(ProbeReport::to_json),
            "probe_burst_s": finite(self.probe_burst_s),
            "new_pod_longest_gap_ms": self.new_pod.as_ref().map(|g| finite(g.longest_gap_ms)),
            "new_pod_lost": self.new_pod.as_ref().map(PingGaps::lost),
            "vswitchd_afxdp_opens": {
                "count": self.opens.len(),
                "open_ms_p50": finite(percentile(&self.opens.iter().filter_map(PortOpen::open_ms).collect::<Vec<_>>(), 0.5)),
                "open_ms_max": finite(percentile(&self.opens.iter().filter_map(PortOpen::open_ms).collect::<Vec<_>>(), 1.0)),
                "pmd_reload_ms_p50": finite(percentile(&self.opens.iter().filter_map(PortOpen::reload_ms).collect::<Vec<_>>(), 0.5)),
                "pmd_reload_ms_max": finite(percentile(&self.opens.iter().filter_map(PortOpen::reload_ms).collect::<Vec<_>>(), 1.0)),
                "whole_ms_p50": finite(percentile(&self.opens.iter().filter_map(PortOpen::total_ms).collect::<Vec<_>>(), 0.5)),
                "whole_ms_max": finite(percentile(&self.opens.iter().filter_map(PortOpen::total_ms).collect::<Vec<_>>(), 1.0)),
            },
        })
    }
}

/// What the benchmark measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub config: Config,
    pub runs: Vec<Run>,
}

fn median(v: &[f64]) -> f64 {
    percentile(v, 0.5)
}

impl Report {
    /// Median all-Ready time of `label` over its successful rounds.
    pub fn ready_median(&self, label: &str) -> f64 {
        let v: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.label == label && r.error.is_none())
            .map(|r| r.ready_s)
            .collect();
        median(&v)
    }

    /// The kernel run's all-Ready time of `r`'s round (the median over rounds if that
    /// round's kernel run failed or was not asked).
    pub fn kernel_ready(&self, r: &Run) -> f64 {
        self.runs
            .iter()
            .find(|k| k.label == "kernel" && k.round == r.round && k.error.is_none())
            .map_or_else(|| self.ready_median("kernel"), |k| k.ready_s)
    }

    fn verdicts(&self, r: &Run) -> Vec<(&'static str, Option<bool>)> {
        let kernel = self.kernel_ready(r);
        let ready = (r.label != "kernel" && kernel.is_finite())
            .then_some(r.ready_s <= TARGET_READY_VS_KERNEL * kernel);
        let p99 = percentile(&r.add_s, 0.99);
        let gap = r.probe.as_ref().map(|p| {
            p.ping.longest_gap_ms < TARGET_GAP_MS
                && p.udp
                    .as_ref()
                    .is_none_or(|u| u.longest_reply_gap_ms < TARGET_GAP_MS)
                && p.iperf.ok
                && p.ping.received > 0
        });
        vec![
            ("ready<=1.5x", ready),
            ("p99<1s", p99.is_finite().then_some(p99 < TARGET_ADD_P99_S)),
            ("gap<100ms", gap),
        ]
    }

    pub fn to_json(&self) -> Value {
        let runs: Vec<Value> = self
            .runs
            .iter()
            .map(|r| {
                let mut v = r.to_json();
                v["ready_vs_kernel"] = finite(r.ready_s / self.kernel_ready(r));
                v["targets_met"] = self
                    .verdicts(r)
                    .into_iter()
                    .map(|(k, b)| (k.to_string(), json!(b)))
                    .collect::<serde_json::Map<_, _>>()
                    .into();
                v
            })
            .collect();
        json!({
            "benchmark": "pod-burst",
            "pods": self.config.pods, "nodes": 2, "rounds": self.config.rounds,
            "probe_pods": self.config.probe_pods, "probe_seconds": self.config.probe_seconds,
            "iperf_rate": self.config.iperf_rate,
            "targets": {"ready_vs_kernel": TARGET_READY_VS_KERNEL, "add_p99_s": TARGET_ADD_P99_S,
                        "longest_gap_ms": TARGET_GAP_MS},
            "runs": runs,
            "summary": self.summaries().iter().map(Summary::to_json).collect::<Vec<_>>(),
        })
    }

    pub fn table(&self) -> String {
        let mut s = format!(
            "pod-burst: {} pods at once on a fresh 2-node lab per datapath and round \
             (targets: all Ready <= {TARGET_READY_VS_KERNEL}x kernel, ADD p99 < {TARGET_ADD_P99_S} s, \
             longest gap < {TARGET_GAP_MS} ms, no reset)\n\
             {:<22} {:>2} {:>8} {:>7} {:>6} {:>8} {:>8} {:>5} {:>9} {:>9} {:>12}  targets\n",
            self.config.pods,
            "datapath",
            "r",
            "ready s",
            "vs krn",
            "split",
            "p50 ms",
            "p99 ms",
            "fast",
            "moved s",
            "open s",
            "switch ms"
        );
        for r in &self.runs {
            if let Some(e) = &r.error {
                s += &format!("{:<22} {:>2} FAILED: {e}\n", r.label, r.round);
                continue;
            }
            let at = |x: Option<f64>| match x {
                Some(x) => format!("{x:.2}"),
                None if r.label.starts_with("kernel") => "-".into(),
                None => "at ADD".into(),
            };
            let switch = if r.switch_ms.is_empty() {
                "-".into()
            } else {
                format!(
                    "{:.0}/{:.0}",
                    percentile(&r.switch_ms, 0.5),
                    percentile(&r.switch_ms, 1.0)
                )
            };
            s += &format!(
                "{:<22} {:>2} {:>8.2} {:>6.2}x {:>6} {:>8.0} {:>8.0} {:>5} {:>9} {:>9} {:>12}  {}\n",
                r.label,
                r.round,
                r.ready_s,
                r.ready_s / self.kernel_ready(r),
                format!("{}/{}", r.per_node.0, r.per_node.1),
                percentile(&r.add_s, 0.5) * 1e3,
                percentile(&r.add_s, 0.99) * 1e3,
                r.adds.fast,
                at(r.all_afxdp_s),
                at(r.all_open_s),
                switch,
                verdict_text(&self.verdicts(r))
            );
        }
        s += "per phase (agent log, burst pods; p50/p99 ms):\n";
        for r in self.runs.iter().filter(|r| r.error.is_none()) {
            s += &format!(
                "  {:<22} r{} {}{}\n",
                r.label,
                r.round,
                r.adds.line(),
                if r.fell_back > 0 {
                    format!("; {} fell back to kernel", r.fell_back)
                } else {
                    String::new()
                }
            );
            if !r.opens.is_empty() {
                s += &format!("  {:<22}    {}\n", "", opens_line(&r.opens));
            }
        }
        if self.runs.iter().any(|r| r.probe.is_some()) {
            s += &format!(
                "traffic between two running pods on node1 during a {}-pod burst there \
                 (ping every 2 ms{}):\n  {:<22} {:>2} {:>9} {:>10} {:>9} {:>8} {:>7} {:>13}\n",
                self.config.probe_pods,
                self.config
                    .iperf_rate
                    .as_ref()
                    .map(|r| format!(" + iperf3 TCP -b {r}"))
                    .unwrap_or_default(),
                "datapath",
                "r",
                "burst s",
                "gap ms",
                "lost/sent",
                "iperf3",
                "Gbit/s",
                "new pod gap"
            );
            for r in &self.runs {
                let Some(p) = &r.probe else { continue };
                s += &format!(
                    "  {:<22} {:>2} {:>9.2} {:>10.1} {:>9} {:>8} {:>7.2} {:>13}{}\n",
                    r.label,
                    r.round,
                    r.probe_burst_s,
                    p.ping.longest_gap_ms,
                    format!("{}/{}", p.ping.lost(), p.ping.sent),
                    if p.iperf.ok { "ok" } else { "ERROR" },
                    p.iperf.gbit_s,
                    r.new_pod
                        .as_ref()
                        .map(|g| format!("{:.1} ms", g.longest_gap_ms))
                        .unwrap_or_else(|| "-".into()),
                    match (&p.iperf.error, p.covered) {
                        (Some(e), _) => format!("  iperf3: {e}"),
                        (None, false) => "  (the burst outlasted the probe)".into(),
                        _ => String::new(),
                    }
                );
            }
            if self
                .runs
                .iter()
                .any(|r| r.probe.as_ref().is_some_and(|p| p.udp.is_some()))
            {
                s += &format!(
                    "the same pods, UDP echo every 2 ms at real-time priority (send gap: the \
                     sender's own pause; rtt: how long the path held a datagram):\n  {:<22} \
                     {:>2} {:>12} {:>11} {:>11} {:>9} {:>9}\n",
                    "datapath",
                    "r",
                    "reply gap ms",
                    "send gap ms",
                    "max rtt ms",
                    "lost/sent",
                    "loss ms"
                );
                for r in &self.runs {
                    let Some(u) = r.probe.as_ref().and_then(|p| p.udp.as_ref()) else {
                        continue;
                    };
                    s += &format!(
                        "  {:<22} {:>2} {:>12.1} {:>11.1} {:>11.1} {:>9} {:>9.1}\n",
                        r.label,
                        r.round,
                        u.longest_reply_gap_ms,
                        u.longest_send_gap_ms,
                        u.max_rtt_ms,
                        format!("{}/{}", u.lost(), u.sent),
                        u.longest_loss_ms
                    );
                }
            }
        }
        s += &self.summary_table();
        s
    }
}

fn verdict_text(v: &[(&str, Option<bool>)]) -> String {
    v.iter()
        .filter_map(|(k, b)| b.map(|b| format!("{k} {}", if b { "pass" } else { "FAIL" })))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs every variant and round (blocking: call it off the async runtime).
pub fn run(cfg: Config) -> Result<Report> {
    ensure!(
        cfg.pods > 0 && cfg.rounds > 0,
        "--pods and --rounds must be > 0"
    );
    for dp in &cfg.datapaths {
        ensure!(
            lab::config::DATAPATHS.contains(&dp.as_str()),
            "unknown datapath {dp:?} (one of {})",
            lab::config::DATAPATHS.join(", ")
        );
    }
    let zovn = lab::apiserver::zovn_exe()?;
    let agent = lab::agent::agent_exe()?;
    let shim = lab::agent::shim_exe()?;
    if cfg.probe_pods > 0 {
        for tool in ["ping", "iperf3", "ss"] {
            ensure!(
                crate::host::which(tool).is_some(),
                "`{tool}` is not installed (run `make deps`)"
            );
        }
    }
    let _lock = heavy_lock("pod-burst")?;
    std::fs::create_dir_all(&cfg.dir).with_context(|| format!("create {}", cfg.dir.display()))?;
    if let Some(keep) = &cfg.keep_logs {
        std::fs::create_dir_all(keep).with_context(|| format!("create {}", keep.display()))?;
    }
    let mut runs = Vec::new();
    let mut n = 0;
    for round in 1..=cfg.rounds {
        for v in variants(&cfg.datapaths, cfg.no_fast_start) {
            n += 1;
            eprintln!("pod-burst: {} round {round}", v.label());
            let mut r = Run {
                label: v.label(),
                round,
                ..Run::default()
            };
            let lab_dir = cfg.dir.join(format!("lab{n}"));
            let prefix = format!("pb{:03x}{n}", std::process::id() % 0xfff);
            let mut guard = LabGuard {
                dir: lab_dir.clone(),
                started: false,
            };
            let result = one_run(
                &cfg,
                &v,
                &lab_dir,
                &prefix,
                &mut guard,
                &mut r,
                (&zovn, &agent, &shim),
            );
            if let Some(keep) = &cfg.keep_logs {
                let _ = std::fs::create_dir_all(keep);
                for i in 1..=2 {
                    let src = lab::state::Layout::new(&lab_dir).node_agent_log(i);
                    let dst = keep.join(format!(
                        "{}-r{round}-node{i}.log",
                        v.label().replace(' ', "-")
                    ));
                    let _ = std::fs::copy(src, dst);
                }
            }
            let down = guard.down();
            if let Err(e) = result.and(down) {
                eprintln!("pod-burst: {} round {round} failed: {e:#}", v.label());
                r.error = Some(format!("{e:#}"));
            }
            runs.push(r);
        }
    }
    Ok(Report { config: cfg, runs })
}

/// Brings the lab in `dir` down when dropped (or by [`LabGuard::down`]).
struct LabGuard {
    dir: PathBuf,
    started: bool,
}

impl LabGuard {
    fn down(&mut self) -> Result<()> {
        let started = std::mem::take(&mut self.started);
        teardown_lab(&mut Vec::new(), &self.dir, started)
    }
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        let _ = self.down();
    }
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn pod(name: &str, node: Option<&str>) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "burst"}},
        "spec": {"containers": [{"name": "c"}]}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    p
}

/// A pod as the store shows it.
#[derive(Debug, Clone, Default)]
struct Seen {
    ready: bool,
    node: String,
    netns: String,
    ip: String,
}

fn pods_seen(api: &mut ApiClient) -> Result<BTreeMap<String, Seen>> {
    let mut out = BTreeMap::new();
    for p in api.get(ResourceKind::Pod)? {
        let name = p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let ready = api::pod_json::is_ready(&p);
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        out.insert(
            name,
            Seen {
                ready,
                node: s(&p["spec"]["nodeName"]),
                netns: s(&p["metadata"]["annotations"]["lab.zstack.io/netns"]),
                ip: s(&p["status"]["podIP"]),
            },
        );
    }
    Ok(out)
}

/// Polls the store every 50 ms until every pod of `names` is Ready; the pods as seen.
fn wait_ready(api: &mut ApiClient, names: &[String]) -> Result<BTreeMap<String, Seen>> {
    let t0 = Instant::now();
    loop {
        let seen = pods_seen(api)?;
        let ready = names
            .iter()
            .filter(|n| seen.get(*n).is_some_and(|s| s.ready))
            .count();
        if ready == names.len() {
            return Ok(seen);
        }
        if t0.elapsed() > READY_TIMEOUT {
            bail!(
                "{ready} of {} pods Ready after {:?}",
                names.len(),
                READY_TIMEOUT
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until both agents' logs show a move line for every pod of `keys`
/// (`default/<name>`); the merged log.
fn wait_moved(lab_dir: &Path, keys: &[String]) -> Result<AgentLog> {
    let t0 = Instant::now();
    loop {
        let log = agent_logs(lab_dir);
        let n = log.moved_of(keys).len();
        if n == keys.len() {
            return Ok(log);
        }
        if t0.elapsed() > MOVE_TIMEOUT {
            bail!(
                "{n} of {} pod ports moved to AF_XDP after {:?}",
                keys.len(),
                MOVE_TIMEOUT
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The AF_XDP opens of the pods `names` in both nodes' ovs-vswitchd logs (their host
/// ports from the lab runtime's records).
fn vswitchd_opens(lab: &Lab, names: &[String]) -> Result<Vec<PortOpen>> {
    let recs = lab.runtime_pods()?;
    let ports: Vec<String> = names
        .iter()
        .filter_map(|n| recs.pod(&format!("default/{n}")))
        .filter_map(|r| r.result.as_ref())
        .filter_map(lab::pods::cni_exec::host_ifname)
        .collect();
    let mut out = Vec::new();
    for n in lab.nodes() {
        let log = std::fs::read_to_string(n.dir.join("log/ovs-vswitchd.log")).unwrap_or_default();
        out.extend(parse_opens(&log, &ports));
    }
    Ok(out)
}

fn agent_logs(lab_dir: &Path) -> AgentLog {
    let layout = lab::state::Layout::new(lab_dir);
    let mut log = AgentLog::default();
    for i in 1..=2 {
        log.extend(AgentLog::read(&layout.node_agent_log(i)));
    }
    log
}

fn keys(names: &[String]) -> Vec<String> {
    names.iter().map(|n| format!("default/{n}")).collect()
}

fn one_run(
    cfg: &Config,
    v: &Variant,
    lab_dir: &Path,
    prefix: &str,
    guard: &mut LabGuard,
    r: &mut Run,
    (zovn, agent, shim): (&Path, &Path, &Path),
) -> Result<()> {
    let mut lc = LabConfig::new(lab_dir, prefix);
    lc.nodes = 2;
    lc.datapath = vec![v.datapath.clone()];
    lc.cluster_cidr = Vec::new();
    guard.started = true;
    let mut lab = Lab::up(lc).context("lab up")?;
    lab.keep_running();
    if !v.fast_start {
        for i in 1..=2 {
            let f = lab.node(i)?.dir.join("datapath.yaml");
            let mut text =
                std::fs::read_to_string(&f).with_context(|| format!("read {}", f.display()))?;
            text += "afxdp: {fastStart: false}\n";
            std::fs::write(&f, text).with_context(|| format!("write {}", f.display()))?;
        }
    }
    lab.start_apiserver(zovn).context("object store")?;
    lab.start_agents(agent, Some(shim)).context("node agents")?;
    let mut api = ApiClient::connect(lab_dir)?;
    api.apply(vec![
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "burst"},
        "spec": {"cidr": SUBNET_CIDR, "gateway": SUBNET_GW, "default": true}}),
    ])
    .context("apply the Subnet")?;
    api.wait(Duration::from_secs(20))?;

    let vswitchds: Vec<(String, PathBuf)> = lab
        .nodes()
        .iter()
        .map(|n| (n.netns.clone(), n.dir.join("run/ovs-vswitchd.ctl")))
        .collect();

    // the probe pods, on every datapath (the same warm-up everywhere)
    let probes: Vec<String> = vec!["probe-a".into(), "probe-b".into()];
    api.apply(probes.iter().map(|n| pod(n, Some("node1"))).collect())
        .context("apply the probe pods")?;
    let seen = wait_ready(&mut api, &probes)?;
    if v.moves() {
        wait_moved(lab_dir, &keys(&probes))?;
    }
    let (a, b) = (&seen["probe-a"], &seen["probe-b"]);
    let (a_ns, b_ns, b_ip) = (a.netns.clone(), b.netns.clone(), b.ip.clone());
    ensure!(
        !a_ns.is_empty() && !b_ns.is_empty() && !b_ip.is_empty(),
        "probe pods without netns/IP: {a:?} {b:?}"
    );

    // the burst
    let names: Vec<String> = (0..cfg.pods).map(|i| format!("b{i}")).collect();
    let objects = names.iter().map(|n| pod(n, None)).collect();
    let t_wall = now();
    let t0 = Instant::now();
    api.apply(objects).context("apply the burst")?;
    let seen = wait_ready(&mut api, &names)?;
    r.ready_s = t0.elapsed().as_secs_f64();
    let node1 = names
        .iter()
        .filter(|n| seen[*n].node.ends_with("node1"))
        .count();
    r.per_node = (node1, names.len() - node1);
    eprintln!(
        "pod-burst: {} pods Ready in {:.2} s",
        names.len(),
        r.ready_s
    );
    let burst_keys = keys(&names);
    let log = if v.moves() {
        wait_moved(lab_dir, &burst_keys)?
    } else {
        agent_logs(lab_dir)
    };
    let adds = log.adds_of(&burst_keys);
    ensure!(
        adds.len() == names.len(),
        "{} of {} burst pods have a `CNI ADD phases` line in the agents' logs (is RUST_LOG \
         hiding info?)",
        adds.len(),
        names.len()
    );
    r.adds = PhaseStats::of(adds.iter().copied());
    r.add_s = adds.iter().filter_map(|a| a.total_s()).collect();
    if v.moves() {
        let moved = log.moved_of(&burst_keys);
        r.all_afxdp_s = moved
            .iter()
            .map(|m| m.at)
            .fold(None, |acc: Option<f64>, t| {
                Some(acc.map_or(t, |a| a.max(t)))
            })
            .map(|t| t - t_wall);
        r.fell_back = moved.iter().filter(|m| m.datapath != "afxdp").count();
        r.moved = moved.len() - r.fell_back;
        r.switch_ms = moved.iter().map(|m| m.switch_ms).collect();
        let ports: Vec<String> = moved
            .iter()
            .filter(|m| m.datapath == "afxdp")
            .map(|m| m.port.clone())
            .collect();
        r.all_open_s = Some(wait_open(&vswitchds, &ports, MOVE_TIMEOUT)? - t_wall);
    }

    if v.afxdp_ports() {
        r.opens = vswitchd_opens(&lab, &names)?;
    }

    // traffic between the probe pods while pods are added on node1
    if cfg.probe_pods > 0 {
        let probe = Probe::start(
            cfg.keep_logs.as_deref().unwrap_or(&cfg.dir),
            &format!("{prefix}-probe"),
            &a_ns,
            &b_ns,
            &b_ip,
            cfg.probe_seconds,
            cfg.iperf_rate.as_deref(),
        )?;
        // the stream runs before the burst starts (pre-roll, part of the probe)
        std::thread::sleep(Duration::from_secs(1));
        let more: Vec<String> = (0..cfg.probe_pods).map(|i| format!("t{i}")).collect();
        let t0 = Instant::now();
        api.apply(more.iter().map(|n| pod(n, Some("node1"))).collect())
            .context("apply the probe burst")?;
        wait_ready(&mut api, &more)?;
        if v.moves() {
            let log = wait_moved(lab_dir, &keys(&more))?;
            let ports: Vec<String> = log
                .moved_of(&keys(&more))
                .iter()
                .filter(|m| m.datapath == "afxdp")
                .map(|m| m.port.clone())
                .collect();
            wait_open(&vswitchds, &ports, MOVE_TIMEOUT)?;
        }
        r.probe_burst_s = t0.elapsed().as_secs_f64();
        let covered = now() < probe.started_at() + f64::from(cfg.probe_seconds);
        let (ping, iperf, udp) = probe.finish_all()?;
        r.probe = Some(ProbeReport {
            ping,
            iperf: iperf.unwrap_or_default(),
            seconds: f64::from(cfg.probe_seconds),
            covered,
            udp,
        });
        if v.moves() {
            r.new_pod = Some(new_pod_gap(
                cfg, lab_dir, prefix, &mut api, &b_ip, &vswitchds,
            )?);
        }
    }
    Ok(())
}

/// One more pod on node1, pinged from as soon as it is Ready, across its switch.
fn new_pod_gap(
    cfg: &Config,
    lab_dir: &Path,
    prefix: &str,
    api: &mut ApiClient,
    to_ip: &str,
    vswitchds: &[(String, PathBuf)],
) -> Result<PingGaps> {
    let name = "fresh".to_string();
    api.apply(vec![pod(&name, Some("node1"))])?;
    let seen = wait_ready(api, std::slice::from_ref(&name))?;
    let ns = seen
        .get(&name)
        .map(|s| s.netns.clone())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| anyhow!("pod {name} has no netns"))?;
    let probe = Probe::start(
        cfg.keep_logs.as_deref().unwrap_or(&cfg.dir),
        &format!("{prefix}-fresh"),
        &ns,
        "",
        to_ip,
        NEW_POD_PING_S,
        None,
    )?;
    let start = probe.started_at();
    let moved = wait_moved(lab_dir, &keys(std::slice::from_ref(&name)))?;
    let port = moved
        .moved_of(&keys(std::slice::from_ref(&name)))
        .first()
        .map(|m| m.port.clone())
        .ok_or_else(|| anyhow!("no move line for {name}"))?;
    // the switch is over when ovs-vswitchd has the port open as AF_XDP
    let open_at = wait_open(vswitchds, std::slice::from_ref(&port), MOVE_TIMEOUT)?;
    let (gaps, _) = probe.finish()?;
    ensure!(
        open_at >= start && open_at <= start + f64::from(NEW_POD_PING_S),
        "the new pod's switch (open at {open_at:.3}) was not inside its ping ({start:.3} + \
         {NEW_POD_PING_S} s)"
    );
    Ok(gaps)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn config() -> Config {
        Config {
            dir: PathBuf::new(),
            datapaths: vec![],
            rounds: 1,
            pods: 60,
            probe_pods: 0,
            probe_seconds: 10,
            iperf_rate: None,
            no_fast_start: false,
            keep_logs: None,
        }
    }

    #[test]
    fn variants_add_no_fast_start_only_where_ports_move() {
        let dps: Vec<String> = ["kernel", "afxdp"].map(String::from).to_vec();
        let v = variants(&dps, true);
        let labels: Vec<String> = v.iter().map(Variant::label).collect();
        assert_eq!(labels, ["kernel", "afxdp", "afxdp no-fast-start"]);
        assert!(v[1].moves() && !v[2].moves() && !v[0].moves());
        assert_eq!(variants(&dps, false).len(), 2);
    }

    #[test]
    fn verdicts_compare_with_the_kernel_median() {
        let run = |label: &str, ready: f64, p99: f64| Run {
            label: label.into(),
            round: 1,
            ready_s: ready,
            add_s: vec![p99],
            ..Run::default()
        };
        let report = Report {
            config: config(),
            runs: vec![
                run("kernel", 1.0, 0.2),
                run("afxdp", 1.6, 0.5),
                run("dpdk", 1.4, 1.2),
            ],
        };
        let v = |i: usize| report.verdicts(&report.runs[i]);
        assert_eq!(v(0)[0].1, None, "kernel is the reference");
        assert_eq!((v(1)[0].1, v(1)[1].1), (Some(false), Some(true)));
        assert_eq!((v(2)[0].1, v(2)[1].1), (Some(true), Some(false)));
        assert_eq!(v(1)[2].1, None, "no probe, no verdict");
        assert!(report.table().contains("ready<=1.5x FAIL"));
    }
}
