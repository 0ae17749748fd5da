//! Pod-to-pod datapath throughput and latency on one node: AF_XDP ports vs kernel
//! fallback ports vs a direct veth pair (the ceiling), in one run on the same machine.
//!
//! A 1-node lab (userspace datapath, ovs-vswitchd-dpdk with a PMD thread) with its object
//! store, controller and node agent, started through the lab crate exactly as `zovn lab
//! up` does. Pods are applied to the object store and wired by the lab's pod runtime
//! through the real CNI shim and agent: two with `network.zstack.io/datapath: afxdp`, two
//! with `network.zstack.io/datapath: kernel` (AF_PACKET on the netdev bridge). The OVS
//! Interface type each pod really got is read back and printed (a pod that fell back is
//! reported as such, not as AF_XDP). Two direct veth pairs between namespaces without OVS
//! are the references: one with the pods' MTU and pod-side tx checksum offload off (the
//! agent's setting for every pod), one with the same MTU and default offloads.
//!
//! For each path, with the tools run inside the namespaces (`ip netns exec`):
//! `iperf3 -P1` and `-P4` (`seconds` each) and, following Kube-OVN's method, `qperf -m
//! SIZE tcp_lat udp_lat tcp_bw` for 1 B, 1 KiB and 4 KiB. The ratios the issue sets
//! targets for are printed with the figures. Everything (servers, namespaces, pods, lab)
//! is stopped at the end, also after a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use lab::apiserver::ApiClient;
use lab::{Lab, LabConfig};
use serde_json::{Value, json};

use crate::host::{heavy_lock, other_config, run_ok, teardown_lab, which};
use crate::pmd_sleep_modes::{self as sleep, IdleCost};

/// Targets from the issue.
pub const TARGET_XDP_VS_FALLBACK: f64 = 4.0;
pub const TARGET_XDP_VS_VETH: f64 = 0.5;
pub const TARGET_LAT_XDP_VS_VETH: f64 = 1.5;

const SUBNET_CIDR: &str = "10.44.0.0/16";
const SUBNET_GW: &str = "10.44.0.1";
use api::keys::POD_DATAPATH as DATAPATH_ANNOTATION;
/// qperf message sizes (bytes).
pub const SIZES: [u32; 3] = [1, 1024, 4096];
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an idle node's CPU use is measured under each `pmdMaxSleep` mode.
const IDLE_WINDOW: Duration = Duration::from_secs(10);
/// Targets of issue #33 for the adaptive PMD sleep against busy polling.
pub const TARGET_SLEEP_BW: f64 = 0.9;
pub const TARGET_SLEEP_LAT: f64 = 1.2;
pub const TARGET_IDLE_PCT: f64 = 5.0;

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    /// Scratch directory (lab state, logs).
    pub dir: PathBuf,
    /// iperf3 duration per run.
    pub seconds: u32,
    /// qperf duration per test.
    pub qperf_seconds: u32,
    /// `pmdMaxSleep` of the node's datapath config (µs); `None`: the agent's default (auto).
    pub pmd_max_sleep: Option<u32>,
    /// `afxdp.mode` of the node's datapath config (`native`, `generic`); `None`: native.
    pub afxdp_mode: Option<String>,
    /// `cpuDmaLatencyUs` of the node's datapath config: the agent holds this CPU wake-up
    /// latency request for the whole run, so every path (the veth pairs too) runs with it.
    pub cpu_dma_latency: Option<u32>,
    /// `afxdp.rxCpus` of the node's datapath config (`auto`, a cpulist, `off`); `None`: the
    /// agent's default (off).
    pub afxdp_rx_cpus: Option<String>,
    /// Rounds: every path is measured once per round, the paths alternating, and each
    /// figure is the median over the rounds (a shared machine's load moves between runs).
    pub rounds: u32,
    /// `pmdMaxSleep` values (`0`, µs, `auto`) under which the AF_XDP pods are measured
    /// again, each with the idle node's CPU cost (see [`crate::pmd_sleep_modes`]).
    pub pmd_sleep_modes: Vec<String>,
}

/// One measured path.
#[derive(Debug, Clone, Default)]
pub struct PathResult {
    pub name: String,
    /// What the path really is (OVS Interface types of the two ends, offloads).
    pub detail: String,
    pub iperf_p1_gbps: f64,
    pub iperf_p4_gbps: f64,
    /// TCP retransmissions of the -P1 and -P4 runs (iperf3's sender).
    pub retransmits: (u64, u64),
    /// Per message size: (size, tcp_lat µs, udp_lat µs, tcp_bw Gbit/s).
    pub qperf: Vec<(u32, f64, f64, f64)>,
}

impl PathResult {
    fn tcp_lat(&self, size: u32) -> f64 {
        self.qperf
            .iter()
            .find(|q| q.0 == size)
            .map_or(f64::NAN, |q| q.1)
    }

    fn to_json(&self) -> Value {
        json!({
            "path": self.name,
            "detail": self.detail,
            "iperf3_p1_gbps": self.iperf_p1_gbps,
            "iperf3_p4_gbps": self.iperf_p4_gbps,
            "iperf3_retransmits": [self.retransmits.0, self.retransmits.1],
            "qperf": self.qperf.iter().map(|(m, tl, ul, bw)| json!({
                "msg_size": m, "tcp_lat_us": tl, "udp_lat_us": ul, "tcp_bw_gbps": bw,
            })).collect::<Vec<_>>(),
        })
    }
}

/// The run's figures.
#[derive(Debug, Clone)]
pub struct Report {
    pub config: Config,
    /// `Open_vSwitch other_config` of the node during the run (PMD settings).
    pub other_config: BTreeMap<String, String>,
    pub afxdp: PathResult,
    pub kernel: PathResult,
    pub veth: PathResult,
    pub veth_offload: PathResult,
    /// The AF_XDP pods again with their receive steering (RPS, `afxdp.rxCpus`) cleared for
    /// the run, alternating with the steered runs: what the steering gives. `None` when the
    /// pods had no steering.
    pub afxdp_unsteered: Option<PathResult>,
    /// Per `pmdMaxSleep` mode: the idle cost (medians) and the AF_XDP pair's figures.
    pub sleep_modes: Vec<(String, IdleCost, PathResult)>,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

impl Report {
    /// (what, value, target, met).
    pub fn ratios(&self) -> Vec<(String, f64, String, bool)> {
        let (x, k, v) = (&self.afxdp, &self.kernel, &self.veth);
        let mut out = Vec::new();
        for (p, xs, ks, vs) in [
            ("-P1", x.iperf_p1_gbps, k.iperf_p1_gbps, v.iperf_p1_gbps),
            ("-P4", x.iperf_p4_gbps, k.iperf_p4_gbps, v.iperf_p4_gbps),
        ] {
            let r = ratio(xs, ks);
            out.push((
                format!("iperf3 {p}: AF_XDP / kernel fallback"),
                r,
                format!(">= {TARGET_XDP_VS_FALLBACK}x"),
                r >= TARGET_XDP_VS_FALLBACK,
            ));
            let r = ratio(xs, vs);
            out.push((
                format!("iperf3 {p}: AF_XDP / direct veth"),
                r,
                format!(">= {TARGET_XDP_VS_VETH}x"),
                r >= TARGET_XDP_VS_VETH,
            ));
        }
        if let Some(u) = &self.afxdp_unsteered {
            for (what, a, b) in [
                ("iperf3 -P1", x.iperf_p1_gbps, u.iperf_p1_gbps),
                ("iperf3 -P4", x.iperf_p4_gbps, u.iperf_p4_gbps),
            ] {
                let r = ratio(a, b);
                out.push((
                    format!("{what}: AF_XDP rx steering on / off"),
                    r,
                    "info".into(),
                    true,
                ));
            }
            let r = ratio(x.tcp_lat(1), u.tcp_lat(1));
            out.push((
                "qperf tcp_lat 1B: AF_XDP rx steering on / off".into(),
                r,
                "info".into(),
                true,
            ));
        }
        if let Some((_, busy_idle, busy)) = self.sleep_modes.iter().find(|(m, ..)| m == "0") {
            for (mode, idle, p) in self.sleep_modes.iter().filter(|(m, ..)| m != "0") {
                let adaptive = mode == "auto";
                let target = |t: String| if adaptive { t } else { "info".into() };
                let r = ratio(p.iperf_p1_gbps, busy.iperf_p1_gbps);
                out.push((
                    format!("iperf3 -P1: pmdMaxSleep {mode} / busy polling"),
                    r,
                    target(format!(">= {TARGET_SLEEP_BW}x")),
                    !adaptive || r >= TARGET_SLEEP_BW,
                ));
                let r = ratio(p.tcp_lat(1), busy.tcp_lat(1));
                out.push((
                    format!("qperf tcp_lat 1B: pmdMaxSleep {mode} / busy"),
                    r,
                    target(format!("<= {TARGET_SLEEP_LAT}x")),
                    !adaptive || r <= TARGET_SLEEP_LAT,
                ));
                let r = ratio(idle.vswitchd_pct, busy_idle.vswitchd_pct);
                out.push((
                    format!("idle ovs-vswitchd CPU: pmdMaxSleep {mode} / busy"),
                    r,
                    "info".into(),
                    true,
                ));
            }
        }
        for (mode, idle, _) in &self.sleep_modes {
            let adaptive = mode == "auto";
            out.push((
                format!("idle node, pmdMaxSleep {mode}: % of a core (vswitchd)"),
                idle.vswitchd_pct,
                if adaptive {
                    format!("<= {TARGET_IDLE_PCT}")
                } else {
                    "info".into()
                },
                !adaptive || idle.vswitchd_pct <= TARGET_IDLE_PCT,
            ));
        }
        for m in SIZES {
            let r = ratio(x.tcp_lat(m), v.tcp_lat(m));
            out.push((
                format!("qperf tcp_lat {}: AF_XDP / direct veth", size_name(m)),
                r,
                format!("<= {TARGET_LAT_XDP_VS_VETH}x"),
                r <= TARGET_LAT_XDP_VS_VETH,
            ));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "benchmark": "datapath",
            "iperf3_seconds": self.config.seconds,
            "qperf_seconds": self.config.qperf_seconds,
            "ovs_other_config": self.other_config,
            "cpu_dma_latency_us": self.config.cpu_dma_latency,
            "rounds": self.config.rounds,
            "pmd_sleep_modes": self.sleep_modes.iter().map(|(m, idle, _)| json!({
                "mode": m,
                "idle_vswitchd_pct_of_core": idle.vswitchd_pct,
                "idle_agent_pct_of_core": idle.agent_pct,
            })).collect::<Vec<_>>(),
            "paths": self.paths().into_iter().map(PathResult::to_json).collect::<Vec<_>>(),
            "ratios": self.ratios().into_iter().map(|(what, v, target, met)| json!({
                "what": what, "value": v, "target": target, "met": met,
            })).collect::<Vec<_>>(),
        })
    }

    /// The measured paths, in table order.
    pub fn paths(&self) -> Vec<&PathResult> {
        let mut v = vec![&self.afxdp];
        v.extend(&self.afxdp_unsteered);
        v.extend(self.sleep_modes.iter().map(|(_, _, p)| p));
        v.extend([&self.kernel, &self.veth, &self.veth_offload]);
        v
    }

    pub fn table(&self) -> String {
        let mut s = format!(
            "datapath: two pods on one node, iperf3 {} s per run, qperf {} s per test, \
             median of {} alternating round(s)\n\
             OVS other_config: {}\n",
            self.config.seconds,
            self.config.qperf_seconds,
            self.config.rounds,
            self.other_config
                .iter()
                .filter(|(k, _)| k.starts_with("pmd") || k.contains("tso") || k.starts_with("dpdk"))
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        if let Some(us) = self.config.cpu_dma_latency {
            s += &format!(
                "CPU wake-up latency request (cpuDmaLatencyUs): {us} µs, held by the agent for every path\n"
            );
        }
        s += &format!("{:<34} {:>10} {:>10}", "path", "P1 Gbit/s", "P4 Gbit/s");
        for m in SIZES {
            s += &format!(
                " {:>10} {:>10} {:>10}",
                format!("tcp_lat {}", size_name(m)),
                format!("udp_lat {}", size_name(m)),
                format!("bw {}", size_name(m))
            );
        }
        s += "\n";
        for p in self.paths() {
            s += &format!(
                "{:<34} {:>10.2} {:>10.2}",
                p.name, p.iperf_p1_gbps, p.iperf_p4_gbps
            );
            for (_, tl, ul, bw) in &p.qperf {
                s += &format!(" {:>8.1}us {:>8.1}us {:>5.2}Gb/s", tl, ul, bw);
            }
            s += "\n";
        }
        for p in self.paths() {
            s += &format!(
                "  {}: {}; iperf3 retransmits P1 {} P4 {}\n",
                p.name, p.detail, p.retransmits.0, p.retransmits.1
            );
        }
        for (mode, idle, _) in &self.sleep_modes {
            s += &format!(
                "  idle node, pmdMaxSleep {mode}: ovs-vswitchd {:.1} %, agent {:.1} % of a core ({} s window)\n",
                idle.vswitchd_pct,
                idle.agent_pct,
                IDLE_WINDOW.as_secs()
            );
        }
        s += "ratios (targets from the issue):\n";
        for (what, v, target, met) in self.ratios() {
            let unit = if what.contains("% of a core") {
                "%"
            } else {
                "x"
            };
            s += &format!(
                "  {what:<52} {v:>6.2}{unit}  target {target:<8} {}\n",
                match (target.as_str(), met) {
                    ("info", _) => "",
                    (_, true) => "met",
                    (_, false) => "MISSED",
                }
            );
        }
        s
    }
}

fn size_name(m: u32) -> String {
    if m >= 1024 && m.is_multiple_of(1024) {
        format!("{}K", m / 1024)
    } else {
        format!("{m}B")
    }
}

/// Runs the benchmark (blocking: call it off the async runtime).
pub fn run(cfg: Config) -> Result<Report> {
    ensure!(
        cfg.seconds > 0 && cfg.qperf_seconds > 0 && cfg.rounds > 0,
        "durations and rounds must be > 0"
    );
    for tool in ["ip", "ss", "ethtool", "ovs-vsctl", "iperf3", "qperf"] {
        ensure!(
            which(tool).is_some(),
            "`{tool}` is not installed (run `make deps`)"
        );
    }
    let zovn = lab::apiserver::zovn_exe()?;
    let agent = lab::agent::agent_exe()
        .context("build it with `cargo build --release -p dataplane -p cni --bins`")?;
    let shim = lab::agent::shim_exe()
        .context("build it with `cargo build --release -p dataplane -p cni --bins`")?;
    let _lock = heavy_lock("datapath")?;
    std::fs::create_dir_all(&cfg.dir).with_context(|| format!("create {}", cfg.dir.display()))?;
    let mut bench = Bench {
        cfg: cfg.clone(),
        lab_dir: cfg.dir.join("lab"),
        prefix: format!("db{:x}", std::process::id() % 0xfff),
        netns: Vec::new(),
        servers: Vec::new(),
        lab_started: false,
    };
    let result = bench.measure(&zovn, &agent, &shim);
    let teardown = bench.teardown();
    match (result, teardown) {
        (Ok(r), Ok(())) => Ok(r),
        (Err(e), t) => {
            if let Err(te) = t {
                eprintln!("teardown after the failure also failed: {te:#}");
            }
            Err(e)
        }
        (Ok(_), Err(e)) => Err(e.context("teardown")),
    }
}

/// The run's state; [`Bench::teardown`] (also on drop) undoes everything.
struct Bench {
    cfg: Config,
    lab_dir: PathBuf,
    prefix: String,
    /// Namespaces of the direct veth pairs (deleted at teardown).
    netns: Vec<String>,
    /// iperf3/qperf servers we started.
    servers: Vec<Child>,
    lab_started: bool,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// Two endpoints: the client's netns, the server's netns and address.
#[derive(Clone)]
struct Pair {
    client_ns: String,
    server_ns: String,
    server_ip: String,
}

impl Bench {
    fn measure(&mut self, zovn: &Path, agent: &Path, shim: &Path) -> Result<Report> {
        eprintln!("datapath: lab up (1 node, prefix {})", self.prefix);
        self.lab_started = true;
        // the agent sets DPDK up and decides (the product path: `zovn lab up --datapath dpdk`)
        let mut config = LabConfig::new(self.lab_dir.clone(), &self.prefix);
        config.datapath = vec!["dpdk".into()];
        let mut lab = Lab::up(config).context("lab up")?;
        lab.keep_running();
        if self.cfg.pmd_max_sleep.is_some()
            || self.cfg.afxdp_mode.is_some()
            || self.cfg.afxdp_rx_cpus.is_some()
            || self.cfg.cpu_dma_latency.is_some()
        {
            // the node's datapath config file, read by the agent at start
            let f = lab.node(1).context("node 1")?.dir.join("datapath.yaml");
            let mut text: String = lab::node::datapath_config("dpdk")
                .lines()
                .filter(|l| self.cfg.pmd_max_sleep.is_none() || !l.starts_with("pmdMaxSleep"))
                .map(|l| format!("{l}\n"))
                .collect();
            if let Some(us) = self.cfg.pmd_max_sleep {
                text += &format!("pmdMaxSleep: {us}\n");
            }
            let afxdp: Vec<String> = [
                self.cfg.afxdp_mode.as_ref().map(|m| format!("mode: {m}")),
                self.cfg
                    .afxdp_rx_cpus
                    .as_ref()
                    .map(|c| format!("rxCpus: \"{c}\"")),
            ]
            .into_iter()
            .flatten()
            .collect();
            if !afxdp.is_empty() {
                text += &format!("afxdp: {{{}}}\n", afxdp.join(", "));
            }
            if let Some(us) = self.cfg.cpu_dma_latency {
                text += &format!("cpuDmaLatencyUs: {us}\n");
            }
            std::fs::write(&f, text).with_context(|| format!("write {}", f.display()))?;
        }
        lab.start_apiserver(zovn)
            .context("start the lab object store")?;
        lab.start_agents(agent, Some(shim))
            .context("start the node agent")?;
        let node = lab.node(1).context("node 1")?.clone();

        let pods = [
            ("xdp-a", "afxdp"),
            ("xdp-b", "afxdp"),
            ("krn-a", "kernel"),
            ("krn-b", "kernel"),
        ];
        let mut objects = vec![json!({
            "apiVersion": "network.zstack.io/v1", "kind": "Subnet",
            "metadata": {"name": "bench"},
            "spec": {"cidr": SUBNET_CIDR, "gateway": SUBNET_GW, "default": true}})];
        for (name, dp) in pods {
            objects.push(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default",
                             "annotations": {DATAPATH_ANNOTATION: dp}},
                "spec": {"nodeName": node.system_id, "containers": [{"name": "c"}]}}));
        }
        ApiClient::connect(&self.lab_dir)?
            .apply(objects)
            .context("apply the Subnet and the pods")?;
        let recs = self.wait_ready(&pods.map(|p| p.0))?;
        let ns_ip = |name: &str| -> Result<(String, String)> {
            let r = recs
                .get(name)
                .ok_or_else(|| anyhow!("pod {name} has no record"))?;
            let ip = r
                .ips
                .iter()
                .find(|a| !a.contains(':'))
                .and_then(|a| a.split('/').next())
                .ok_or_else(|| anyhow!("pod {name} has no IPv4 address"))?;
            Ok((r.netns.clone(), ip.to_string()))
        };
        let (xa, _) = ns_ip("xdp-a")?;
        let (xb, xb_ip) = ns_ip("xdp-b")?;
        let (ka, _) = ns_ip("krn-a")?;
        let (kb, kb_ip) = ns_ip("krn-b")?;
        let iface_type = |pod: &str| -> Result<String> {
            let out = run_ok(Command::new("ovs-vsctl").args([
                "--db",
                &node.db_remote,
                "--bare",
                "--columns=type",
                "find",
                "Interface",
                &format!("external_ids:iface-id=default_{pod}"),
            ]))?;
            let t = String::from_utf8_lossy(&out.stdout).trim().to_string();
            Ok(if t.is_empty() {
                "system (AF_PACKET)".into()
            } else {
                t
            })
        };
        // fast-start ports move to AF_XDP in the background: measure them once moved
        let t0 = Instant::now();
        for pod in ["xdp-a", "xdp-b"] {
            while iface_type(pod)? != "afxdp" {
                ensure!(
                    t0.elapsed() < READY_TIMEOUT,
                    "pod {pod}'s port is still {} after {READY_TIMEOUT:?}",
                    iface_type(pod)?
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let mtu = link_mtu(&xa, "eth0")?;
        let tx = |ns: &str| offload(ns, "eth0", "tx-checksumming").unwrap_or_else(|_| "?".into());
        let xdp_detail = format!(
            "OVS ports {} / {}, MTU {mtu}, pod tx-checksumming {}",
            iface_type("xdp-a")?,
            iface_type("xdp-b")?,
            tx(&xa)
        );
        let krn_detail = format!(
            "OVS ports {} / {}, MTU {}, pod tx-checksumming {}",
            iface_type("krn-a")?,
            iface_type("krn-b")?,
            link_mtu(&ka, "eth0")?,
            tx(&ka)
        );
        let other_config = other_config(&node.db_remote)?;

        // the references: direct veth pairs, no OVS
        let veth = self.veth_pair("d", "10.77.0", mtu, true)?;
        let veth_off = self.veth_pair("o", "10.77.1", mtu, false)?;
        let veth_detail = format!(
            "veth pair, MTU {mtu}, tx-checksumming {} (as the pods)",
            tx(&veth.client_ns)
        );
        let veth_off_detail = format!(
            "veth pair, MTU {mtu}, tx-checksumming {}, TSO {} (defaults)",
            tx(&veth_off.client_ns),
            offload(&veth_off.client_ns, "eth0", "tcp-segmentation-offload")
                .unwrap_or_else(|_| "?".into())
        );

        // what the PMD did during the AF_XDP runs (sleeping? busy?)
        let ctl = node.dir.join("run/ovs-vswitchd.ctl");
        let appctl = |cmd: &str| {
            run_ok(Command::new("ovs-appctl").arg("-t").arg(&ctl).arg(cmd))
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        };
        let xdp_pair = Pair {
            client_ns: xa.clone(),
            server_ns: xb,
            server_ip: xb_ip,
        };
        let krn_pair = Pair {
            client_ns: ka,
            server_ns: kb,
            server_ip: kb_ip,
        };
        // the receive steering the agent gave the AF_XDP pods (afxdp.rxCpus)
        let steering = rps_cpus(&xa)?;
        let steered = steering.trim_start_matches(['0', ',']).trim() != "";
        let xdp_detail = format!("{xdp_detail}, pod rps_cpus {steering}");
        appctl("dpif-netdev/pmd-stats-clear")?;
        let mut runs: [Vec<PathResult>; 5] = Default::default();
        let modes = self.cfg.pmd_sleep_modes.clone();
        let mut mode_runs: Vec<(Vec<IdleCost>, Vec<PathResult>)> =
            vec![Default::default(); modes.len()];
        let (vswitchd_pid, agent_pid) = (
            sleep::pid_of(&node.dir.join("run/ovs-vswitchd.pid"))?,
            sleep::pid_of(&node.dir.join(format!("run/{}.pid", lab::agent::AGENT_BIN)))?,
        );
        let file_sleep = other_config.get("pmd-maxsleep").cloned();
        for round in 1..=self.cfg.rounds {
            eprintln!("datapath: round {round}/{}", self.cfg.rounds);
            for (i, mode) in modes.iter().enumerate() {
                sleep::set_mode(&self.lab_dir, &node.system_id, &node.db_remote, mode)?;
                std::thread::sleep(sleep::SETTLE);
                let idle = sleep::idle_cost(vswitchd_pid, agent_pid, IDLE_WINDOW)?;
                eprintln!(
                    "datapath: pmdMaxSleep {mode}: idle ovs-vswitchd {:.1} %, agent {:.1} % of a core",
                    idle.vswitchd_pct, idle.agent_pct
                );
                mode_runs[i].0.push(idle);
                let name = format!("AF_XDP, pmdMaxSleep {mode}");
                mode_runs[i]
                    .1
                    .push(self.path(&name, xdp_detail.clone(), &xdp_pair)?);
            }
            if !modes.is_empty() {
                // back to the file's setting for the other paths
                sleep::override_and_wait(
                    &self.lab_dir,
                    &node.system_id,
                    &node.db_remote,
                    &json!({}),
                    file_sleep.clone(),
                )?;
            }
            runs[0].push(self.path("AF_XDP ports (afxdp)", xdp_detail.clone(), &xdp_pair)?);
            if steered {
                // the same pods with the kernel default (no RPS), then the steering back
                for ns in [&xdp_pair.client_ns, &xdp_pair.server_ns] {
                    set_rps_cpus(ns, "0")?;
                }
                let r = self.path(
                    "AF_XDP, rx steering off",
                    "the AF_XDP pods with rps_cpus 0 for the run".into(),
                    &xdp_pair,
                );
                for ns in [&xdp_pair.client_ns, &xdp_pair.server_ns] {
                    set_rps_cpus(ns, &steering)?;
                }
                runs[1].push(r?);
            }
            runs[2].push(self.path(
                "kernel fallback (AF_PACKET)",
                krn_detail.clone(),
                &krn_pair,
            )?);
            runs[3].push(self.path("direct veth, tx csum off", veth_detail.clone(), &veth)?);
            runs[4].push(self.path(
                "direct veth, default offloads",
                veth_off_detail.clone(),
                &veth_off,
            )?);
        }
        let [xdp_runs, unsteered_runs, krn_runs, veth_runs, veth_off_runs] = runs;
        let mut afxdp = median_result(xdp_runs);
        afxdp.detail += &format!("; {}", pmd_summary(&appctl("dpif-netdev/pmd-perf-show")?));
        for pod in ["xdp-a", "xdp-b"] {
            let out = run_ok(Command::new("ovs-vsctl").args([
                "--db",
                &node.db_remote,
                "--bare",
                "--columns=statistics",
                "find",
                "Interface",
                &format!("external_ids:iface-id=default_{pod}"),
            ]))?;
            let stats = String::from_utf8_lossy(&out.stdout);
            let drops: Vec<&str> = stats
                .split([',', ' ', '{', '}'])
                .filter(|kv| kv.contains("dropped"))
                .collect();
            afxdp.detail += &format!("; {pod} port {}", drops.join(" "));
        }
        afxdp.detail += &format!(
            "; rxqs: {}",
            appctl("dpif-netdev/pmd-rxq-show")?
                .lines()
                .filter(|l| l.trim_start().starts_with("port:"))
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(Report {
            config: self.cfg.clone(),
            other_config,
            afxdp,
            kernel: median_result(krn_runs),
            veth: median_result(veth_runs),
            veth_offload: median_result(veth_off_runs),
            afxdp_unsteered: (!unsteered_runs.is_empty()).then(|| median_result(unsteered_runs)),
            sleep_modes: modes
                .into_iter()
                .zip(mode_runs)
                .map(|(m, (idle, paths))| {
                    let idle = IdleCost {
                        vswitchd_pct: median(idle.iter().map(|c| c.vswitchd_pct).collect()),
                        agent_pct: median(idle.iter().map(|c| c.agent_pct).collect()),
                    };
                    (m, idle, median_result(paths))
                })
                .collect(),
        })
    }

    /// Waits until the runtime reports every pod ready; returns their records by name.
    fn wait_ready(&self, names: &[&str]) -> Result<BTreeMap<String, lab::pods::record::PodRecord>> {
        let layout = lab::state::Layout::new(&self.lab_dir);
        let t = Instant::now();
        loop {
            let file = lab::pods::record::PodsFile::load(&layout.pods_file())?;
            let recs: BTreeMap<String, _> = names
                .iter()
                .filter_map(|n| {
                    file.pod(&format!("default/{n}"))
                        .filter(|r| r.ready && !r.ips.is_empty())
                        .map(|r| (n.to_string(), r.clone()))
                })
                .collect();
            if recs.len() == names.len() {
                return Ok(recs);
            }
            if t.elapsed() > READY_TIMEOUT {
                let why: Vec<String> = names
                    .iter()
                    .map(|n| {
                        let m = file
                            .pod(&format!("default/{n}"))
                            .map(|r| format!("ready={} {:?}", r.ready, r.message))
                            .unwrap_or_else(|| "no record".into());
                        format!("{n}: {m}")
                    })
                    .collect();
                bail!("pods not ready after {READY_TIMEOUT:?}: {}", why.join("; "));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Two namespaces `<prefix><tag>a|b` joined by a veth pair (`eth0` both sides),
    /// `<net>.1/24` and `<net>.2/24`, `mtu`, tx checksum offload off when `tx_off`.
    fn veth_pair(&mut self, tag: &str, net: &str, mtu: u32, tx_off: bool) -> Result<Pair> {
        let (a, b) = (
            format!("{}{tag}a", self.prefix),
            format!("{}{tag}b", self.prefix),
        );
        for ns in [&a, &b] {
            run_ok(Command::new("ip").args(["netns", "add", ns]))?;
            self.netns.push(ns.clone());
        }
        run_ok(Command::new("ip").args([
            "-n",
            &a,
            "link",
            "add",
            "eth0",
            "mtu",
            &mtu.to_string(),
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "mtu",
            &mtu.to_string(),
            "netns",
            &b,
        ]))?;
        for (ns, ip) in [(&a, format!("{net}.1/24")), (&b, format!("{net}.2/24"))] {
            run_ok(Command::new("ip").args(["-n", ns, "addr", "add", &ip, "dev", "eth0"]))?;
            run_ok(Command::new("ip").args(["-n", ns, "link", "set", "eth0", "up"]))?;
            run_ok(Command::new("ip").args(["-n", ns, "link", "set", "lo", "up"]))?;
            if tx_off {
                run_ok(
                    Command::new("ip")
                        .args(["netns", "exec", ns, "ethtool", "-K", "eth0", "tx", "off"]),
                )?;
            }
        }
        Ok(Pair {
            client_ns: a,
            server_ns: b,
            server_ip: format!("{net}.2"),
        })
    }

    /// iperf3 -P1/-P4 and qperf on one pair.
    fn path(&mut self, name: &str, detail: String, p: &Pair) -> Result<PathResult> {
        eprintln!("datapath: {name}");
        let mut r = PathResult {
            name: name.to_string(),
            detail,
            ..Default::default()
        };
        let iperf = self.server(&p.server_ns, &["iperf3", "-s", "-p", "5201"])?;
        wait_listening(&p.server_ns, 5201)?;
        for (streams, out, retr) in [
            (1, &mut r.iperf_p1_gbps, &mut r.retransmits.0),
            (4, &mut r.iperf_p4_gbps, &mut r.retransmits.1),
        ] {
            let o = run_ok(Command::new("ip").args([
                "netns",
                "exec",
                &p.client_ns,
                "iperf3",
                "-J",
                "-c",
                &p.server_ip,
                "-t",
                &self.cfg.seconds.to_string(),
                "-P",
                &streams.to_string(),
            ]))?;
            (*out, *retr) = iperf_gbps(&String::from_utf8_lossy(&o.stdout))
                .with_context(|| format!("{name}: iperf3 -P{streams}"))?;
        }
        self.stop_server(iperf);
        let qperf = self.server(&p.server_ns, &["qperf"])?;
        wait_listening(&p.server_ns, 19765)?;
        for m in SIZES {
            let o = run_ok(Command::new("ip").args([
                "netns",
                "exec",
                &p.client_ns,
                "qperf",
                "-t",
                &self.cfg.qperf_seconds.to_string(),
                "-ub",
                "-m",
                &m.to_string(),
                &p.server_ip,
                "tcp_lat",
                "udp_lat",
                "tcp_bw",
            ]))?;
            let q = parse_qperf(&String::from_utf8_lossy(&o.stdout))
                .with_context(|| format!("{name}: qperf -m {m}"))?;
            let get = |t: &str| q.get(t).copied().unwrap_or(f64::NAN);
            r.qperf.push((
                m,
                get("tcp_lat") * 1e6,
                get("udp_lat") * 1e6,
                get("tcp_bw") / 1e9,
            ));
        }
        self.stop_server(qperf);
        eprintln!(
            "  iperf3 P1 {:.2} / P4 {:.2} Gbit/s; tcp_lat 1B {:.1} us",
            r.iperf_p1_gbps,
            r.iperf_p4_gbps,
            r.tcp_lat(1)
        );
        Ok(r)
    }

    /// Starts `argv` in netns `ns` (stopped by [`Bench::stop_server`] or teardown).
    fn server(&mut self, ns: &str, argv: &[&str]) -> Result<usize> {
        let c = crate::host::spawn_in_netns(ns, argv)?;
        self.servers.push(c);
        Ok(self.servers.len() - 1)
    }

    fn stop_server(&mut self, i: usize) {
        if let Some(c) = self.servers.get_mut(i) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn teardown(&mut self) -> Result<()> {
        for mut c in self.servers.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
        let started = std::mem::take(&mut self.lab_started);
        teardown_lab(&mut self.netns, &self.lab_dir, started)
    }
}

/// Median of a figure over rounds (NaN when there is none).
/// The median (NaN for no value; NaNs ignored).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One path's rounds folded into one result: each figure the median over the rounds,
/// retransmissions summed.
fn median_result(runs: Vec<PathResult>) -> PathResult {
    let Some(first) = runs.first() else {
        return PathResult::default();
    };
    let col = |f: &dyn Fn(&PathResult) -> f64| median(runs.iter().map(f).collect());
    PathResult {
        name: first.name.clone(),
        detail: first.detail.clone(),
        iperf_p1_gbps: col(&|r| r.iperf_p1_gbps),
        iperf_p4_gbps: col(&|r| r.iperf_p4_gbps),
        retransmits: runs.iter().fold((0, 0), |(a, b), r| {
            (a + r.retransmits.0, b + r.retransmits.1)
        }),
        qperf: SIZES
            .iter()
            .map(|&m| {
                let pick = |i: usize| {
                    median(
                        runs.iter()
                            .filter_map(|r| r.qperf.iter().find(|q| q.0 == m))
                            .map(|q| [q.1, q.2, q.3][i])
                            .collect(),
                    )
                };
                (m, pick(0), pick(1), pick(2))
            })
            .collect(),
    }
}

/// `rps_cpus` of `eth0`'s first rx queue in netns `ns` (what the agent set).
fn rps_cpus(ns: &str) -> Result<String> {
    let o = run_ok(Command::new("ip").args([
        "netns",
        "exec",
        ns,
        "cat",
        "/sys/class/net/eth0/queues/rx-0/rps_cpus",
    ]))?;
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Writes `mask` to `rps_cpus` of every rx queue of `eth0` in netns `ns` (`ip netns exec`
/// mounts that netns' sysfs).
fn set_rps_cpus(ns: &str, mask: &str) -> Result<()> {
    run_ok(Command::new("ip").args([
        "netns",
        "exec",
        ns,
        "sh",
        "-c",
        &format!("for q in /sys/class/net/eth0/queues/rx-*; do echo {mask} > $q/rps_cpus; done"),
    ]))?;
    Ok(())
}

/// The lines of `pmd-perf-show` that say whether the PMD slept or worked, per PMD.
fn pmd_summary(perf_show: &str) -> String {
    perf_show
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.starts_with("pmd thread")
                || l.starts_with("- Used TSC cycles")
                || l.starts_with("- sleep iterations")
                || l.starts_with("Rx packets")
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Waits (bounded) until something listens on TCP `port` in netns `ns` (`ss`, no
/// connection: a probe would count as a client of the server).
pub fn wait_listening(ns: &str, port: u16) -> Result<()> {
    let t = Instant::now();
    loop {
        let o = run_ok(Command::new("ip").args([
            "netns",
            "exec",
            ns,
            "ss",
            "-Hltn",
            &format!("sport = :{port}"),
        ]))?;
        if !String::from_utf8_lossy(&o.stdout).trim().is_empty() {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(10) {
            bail!("nothing listens on port {port} in {ns} after 10 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `iperf3 -J -c to -t seconds` (one TCP stream) from netns `from`: the receiver's Gbit/s.
pub fn iperf_client(from: &str, to: &str, seconds: u32) -> Result<f64> {
    let o = run_ok(Command::new("ip").args([
        "netns",
        "exec",
        from,
        "iperf3",
        "-J",
        "-c",
        to,
        "-t",
        &seconds.to_string(),
    ]))?;
    let (gbps, _) = iperf_gbps(&String::from_utf8_lossy(&o.stdout))
        .with_context(|| format!("iperf3 {from} → {to}"))?;
    Ok(gbps)
}

/// The receiver's rate of an `iperf3 -J` run, in Gbit/s, and the sender's TCP
/// retransmissions.
pub fn iperf_gbps(json_text: &str) -> Result<(f64, u64)> {
    let v: Value = serde_json::from_str(json_text).context("iperf3 -J output is not JSON")?;
    if let Some(e) = v["error"].as_str() {
        bail!("iperf3: {e}");
    }
    let gbps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .map(|b| b / 1e9)
        .ok_or_else(|| anyhow!("no end.sum_received.bits_per_second in the iperf3 output"))?;
    Ok((
        gbps,
        v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0),
    ))
}

/// `qperf` output → test name → value in SI base units (seconds for `latency`,
/// bits/s for `bw` and `udp_bw`'s `recv_bw` with `-ub`).
pub fn parse_qperf(text: &str) -> Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    let mut test: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) && line.trim_end().ends_with(':') {
            test = Some(line.trim().trim_end_matches(':').to_string());
            continue;
        }
        let Some((key, val)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        // udp_bw reports what was sent and what arrived: the receiver's rate counts
        if key != "latency" && key != "bw" && key != "recv_bw" {
            continue;
        }
        let t = test
            .clone()
            .ok_or_else(|| anyhow!("qperf: {line:?} before a test name"))?;
        let mut w = val.split_whitespace();
        let (num, unit) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
        let n: f64 = num
            .replace(',', "")
            .parse()
            .map_err(|_| anyhow!("qperf: {line:?}: not a number"))?;
        let scale = match unit {
            "ns" => 1e-9,
            "us" => 1e-6,
            "ms" => 1e-3,
            "sec" | "s" => 1.0,
            "b/sec" => 1.0,
            "Kb/sec" => 1e3,
            "Mb/sec" => 1e6,
            "Gb/sec" => 1e9,
            "Tb/sec" => 1e12,
            // without -ub qperf prints bytes
            "B/sec" => 8.0,
            "KB/sec" => 8e3,
            "MB/sec" => 8e6,
            "GB/sec" => 8e9,
            u => bail!("qperf: unknown unit {u:?} in {line:?}"),
        };
        out.insert(t, n * scale);
    }
    ensure!(!out.is_empty(), "qperf printed no figures: {text:?}");
    Ok(out)
}

fn link_mtu(ns: &str, dev: &str) -> Result<u32> {
    let o = run_ok(Command::new("ip").args(["-n", ns, "-j", "link", "show", dev]))?;
    let v: Value = serde_json::from_slice(&o.stdout).context("ip -j link")?;
    v[0]["mtu"]
        .as_u64()
        .and_then(|m| u32::try_from(m).ok())
        .ok_or_else(|| anyhow!("no MTU for {dev} in {ns}"))
}

/// `on`/`off` of an ethtool feature of `dev` in `ns`.
fn offload(ns: &str, dev: &str, feature: &str) -> Result<String> {
    let o = run_ok(Command::new("ip").args(["netns", "exec", ns, "ethtool", "-k", dev]))?;
    let text = String::from_utf8_lossy(&o.stdout);
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{feature}:")))
        .and_then(|v| v.split_whitespace().next())
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no {feature} in ethtool -k {dev}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qperf_output() {
        // real qperf 0.4.11 output (AF_XDP pair on the lab, -m 1, then -ub -m 4K)
        let q = parse_qperf(
            "tcp_lat:\n    latency  =  82.9 us\nudp_lat:\n    latency  =  81 us\ntcp_bw:\n    bw  =  2.21 Gb/sec\n",
        )
        .unwrap();
        assert!((q["tcp_lat"] - 82.9e-6).abs() < 1e-12);
        assert!((q["udp_lat"] - 81e-6).abs() < 1e-12);
        assert!((q["tcp_bw"] - 2.21e9).abs() < 1.0);
        let q = parse_qperf("tcp_bw:\n    bw  =  1.24 MB/sec\n").unwrap();
        assert!((q["tcp_bw"] - 9.92e6).abs() < 1.0);
        let q = parse_qperf("udp_bw:\n    send_bw  =  2.5 Gb/sec\n    recv_bw  =  1.5 Gb/sec\n")
            .unwrap();
        assert_eq!(q["udp_bw"], 1.5e9, "the receiver's rate");
        assert!(parse_qperf("tcp_bw:\n    bw  =  1 furlongs\n").is_err());
        assert!(parse_qperf("").is_err());
    }

    #[test]
    fn iperf_json() {
        let (g, r) = iperf_gbps(
            r#"{"end":{"sum_received":{"bits_per_second":2.5e9},"sum_sent":{"retransmits":7}}}"#,
        )
        .unwrap();
        assert!((g - 2.5).abs() < 1e-9);
        assert_eq!(r, 7);
        let e = iperf_gbps(r#"{"error":"unable to connect"}"#).unwrap_err();
        assert!(e.to_string().contains("unable to connect"));
    }
}
