//! CNI ADD latency and throughput on a real 1-node lab.
//!
//! The lab (central with northd, one node with OVS + ovn-controller in its netns), its
//! object store with the real controller, and one `zstack-ovnkube-node` started inside the
//! node netns. Pods are driven the way a runtime drives them: create the pod netns, apply
//! the Pod object to the object store, exec the real `zstack-ovn-cni` shim with `ADD`
//! (`CNI_*` environment, network config on stdin). An ADD returns once the pod is ready:
//! the controller's annotation read, the veth plumbed, the OVS port written and
//! ovn-controller's `ovn-installed` seen.
//!
//! - **sequential**: `pods` pods one after another; each ADD's latency from exec to
//!   result; pods/s over the whole loop (netns + apply + ADD per pod);
//! - **concurrent**: `concurrent` pods applied together, their ADDs started together
//!   (barrier); latencies and pods/s from the apply to the last result;
//! - **baseline** (same run, same node): the same per-pod work done by hand like a shell
//!   plugin — `ovn-nbctl lsp-add -- lsp-set-addresses`, `ip netns add`, `ip link add ...
//!   type veth peer`, move, name/MAC/MTU/address/route with `ip`, `ethtool -K eth0 tx
//!   off`, `ovs-vsctl add-port ... external_ids:iface-id=...`, `ovs-vsctl wait-until
//!   Interface ... external_ids:ovn-installed=true` — one pod after another;
//! - **breakdown**: the agent runs with `dataplane::pod_iface=debug`; its log timestamps
//!   split each ADD into shim→agent, annotation wait, veth, OVS transaction,
//!   `ovn-installed` wait and agent→result.
//!
//! One warm-up pod per path is not counted. Everything is torn down at the end (DEL per
//! pod, netns deleted, agent stopped, lab down), also when a step fails.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail, ensure};
use lab::apiserver::ApiClient;
use lab::{Dpdk, Encap, Lab, LabConfig};
use serde_json::{Value, json};

use crate::host::{heavy_lock, run_ok, which};

/// Targets from the issue.
pub const TARGET_P99_S: f64 = 0.150;
pub const TARGET_PODS_PER_S: f64 = 25.0;

const SUBNET_CIDR: &str = "10.33.0.0/16";
const SUBNET_GW: &str = "10.33.0.1";
const BASE_GW: &str = "10.34.0.1";
const MTU: u32 = 1400;
const ADD_TIMEOUT_S: f64 = 30.0;
const AGENT_LOG_FILTER: &str = "info,dataplane::pod_iface=debug";

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    /// Scratch directory (lab state, agent state and log).
    pub dir: PathBuf,
    /// Pods added one after another (ours and the baseline).
    pub pods: usize,
    /// Pods added at once.
    pub concurrent: usize,
    /// Copy the agent log here before teardown.
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
}

/// Nearest-rank percentile (`q` in 0..=1) of `v`; NaN when empty.
pub fn percentile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// Where an ADD's time went (seconds per ADD), from the agent log.
#[derive(Debug, Clone, Default)]
pub struct Breakdown {
    /// exec of the shim → the agent starts the request.
    pub shim_to_agent: Vec<f64>,
    /// waiting for the controller's `k8s.ovn.org/pod-networks` annotation.
    pub annotation: Vec<f64>,
    /// veth pair, move, addresses, routes, offload (`pod_iface::setup`).
    pub veth: Vec<f64>,
    /// sandbox state + the OVS port transaction.
    pub ovs: Vec<f64>,
    /// waiting for ovn-controller's `ovn-installed`.
    pub ovn_installed: Vec<f64>,
    /// the agent's answer → the shim's result read.
    pub agent_to_result: Vec<f64>,
}

impl Breakdown {
    fn phases(&self) -> [(&'static str, &Vec<f64>); 6] {
        [
            ("shim exec -> agent", &self.shim_to_agent),
            ("annotation wait", &self.annotation),
            ("veth + netns config", &self.veth),
            ("state + OVS transaction", &self.ovs),
            ("ovn-installed wait", &self.ovn_installed),
            ("agent -> shim result", &self.agent_to_result),
        ]
    }

    fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("adds_matched".into(), self.annotation.len().into());
        for (name, v) in self.phases() {
            m.insert(
                name.into(),
                json!({"p50_ms": percentile(v, 0.5) * 1e3, "p99_ms": percentile(v, 0.99) * 1e3,
                       "mean_ms": mean(v) * 1e3}),
            );
        }
        Value::Object(m)
    }

    fn table(&self, title: &str) -> String {
        let mut s = format!(
            "  {title} ({} ADDs matched in the agent log)\n",
            self.annotation.len()
        );
        for (name, v) in self.phases() {
            s += &format!(
                "    {name:<26} p50 {:>7.1} ms  p99 {:>7.1} ms  mean {:>7.1} ms\n",
                percentile(v, 0.5) * 1e3,
                percentile(v, 0.99) * 1e3,
                mean(v) * 1e3
            );
        }
        s
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub config: Config,
    /// Sequential ADDs: exec → result.
    pub sequential: Series,
    /// Sequential, per pod end to end: netns + apply + ADD (same wall time).
    pub sequential_e2e: Series,
    pub concurrent: Series,
    /// By hand, per pod end to end.
    pub baseline: Series,
    pub breakdown_sequential: Breakdown,
    pub breakdown_concurrent: Breakdown,
    /// The baseline's time per step (seconds per pod, in order).
    pub baseline_steps: Vec<(&'static str, Vec<f64>)>,
    /// DEL latencies at teardown.
    pub del: Series,
}

impl Report {
    pub fn to_json(&self) -> Value {
        let b = &self.baseline;
        let ser = |s: &Series| {
            json!({"pods": s.latencies.len(), "p50_ms": s.p(0.5) * 1e3, "p99_ms": s.p(0.99) * 1e3,
                   "max_ms": s.p(1.0) * 1e3, "wall_s": s.wall_s, "pods_per_s": s.pods_per_s()})
        };
        let ratio = |s: &Series| {
            json!({"p50_vs_baseline": s.p(0.5) / b.p(0.5), "p99_vs_baseline": s.p(0.99) / b.p(0.99),
                   "pods_per_s_vs_baseline": s.pods_per_s() / b.pods_per_s()})
        };
        json!({
            "benchmark": "cni-add",
            "pods": self.config.pods,
            "concurrent": self.config.concurrent,
            "targets": {"p99_ms": TARGET_P99_S * 1e3, "pods_per_s": TARGET_PODS_PER_S},
            "sequential_add": ser(&self.sequential),
            "sequential_end_to_end": ser(&self.sequential_e2e),
            "concurrent_add": ser(&self.concurrent),
            "baseline_by_hand": ser(b),
            "del": ser(&self.del),
            "ratios": {
                "sequential_add": ratio(&self.sequential),
                "sequential_end_to_end": ratio(&self.sequential_e2e),
                "concurrent_add": ratio(&self.concurrent),
            },
            "targets_met": {
                "sequential_p99": self.sequential.p(0.99) < TARGET_P99_S,
                "sequential_pods_per_s": self.sequential_e2e.pods_per_s() >= TARGET_PODS_PER_S,
                "concurrent_p99": self.concurrent.p(0.99) < TARGET_P99_S,
                "concurrent_pods_per_s": self.concurrent.pods_per_s() >= TARGET_PODS_PER_S,
            },
            "breakdown": {
                "sequential": self.breakdown_sequential.to_json(),
                "concurrent": self.breakdown_concurrent.to_json(),
            },
            "baseline_steps": self.baseline_steps.iter().map(|(name, v)| {
                json!({"step": name, "p50_ms": percentile(v, 0.5) * 1e3,
                       "p99_ms": percentile(v, 0.99) * 1e3, "mean_ms": mean(v) * 1e3})
            }).collect::<Vec<_>>(),
        })
    }

    pub fn table(&self) -> String {
        let b = &self.baseline;
        let mut s = format!(
            "cni-add: 1-node lab, {} sequential pods, {} concurrent (targets: p99 < {:.0} ms, >= {:.0} pods/s)\n\
             {:<44} {:>9} {:>9} {:>8}  {:>9} {:>9} {:>9}\n",
            self.config.pods,
            self.config.concurrent,
            TARGET_P99_S * 1e3,
            TARGET_PODS_PER_S,
            "path",
            "p50 ms",
            "p99 ms",
            "pods/s",
            "p50/base",
            "p99/base",
            "rate/base"
        );
        let line = |name: &str, x: &Series| {
            format!(
                "{name:<44} {:>9.1} {:>9.1} {:>8.1}  {:>8.2}x {:>8.2}x {:>8.2}x\n",
                x.p(0.5) * 1e3,
                x.p(0.99) * 1e3,
                x.pods_per_s(),
                x.p(0.5) / b.p(0.5),
                x.p(0.99) / b.p(0.99),
                x.pods_per_s() / b.pods_per_s()
            )
        };
        s += &line("shim ADD, sequential (exec -> result)", &self.sequential);
        s += &line(
            "  same, per pod end to end (netns+apply+ADD)",
            &self.sequential_e2e,
        );
        s += &line(
            &format!("shim ADD, {} concurrent", self.config.concurrent),
            &self.concurrent,
        );
        s += &line("baseline: ip/ethtool/ovs-vsctl/ovn-nbctl", b);
        s += &format!(
            "{:<44} {:>9.1} {:>9.1} {:>8.1}\n",
            "shim DEL (teardown)",
            self.del.p(0.5) * 1e3,
            self.del.p(0.99) * 1e3,
            self.del.pods_per_s()
        );
        s += "where an ADD's time goes (agent log timestamps):\n";
        s += &self.breakdown_sequential.table("sequential");
        s += &self.breakdown_concurrent.table("concurrent");
        s += "  baseline, per step\n";
        for (name, v) in &self.baseline_steps {
            s += &format!(
                "    {name:<44} p50 {:>7.1} ms  p99 {:>7.1} ms  mean {:>7.1} ms\n",
                percentile(v, 0.5) * 1e3,
                percentile(v, 0.99) * 1e3,
                mean(v) * 1e3
            );
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
        cfg.pods + cfg.concurrent < 60_000,
        "at most 60000 pods in total"
    );
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
        agent: None,
        socket: cfg.dir.join("agent/cni.sock"),
        agent_log: cfg.dir.join("agent.log"),
        node: None,
        added: Vec::new(),
        netns: Vec::new(),
        base_ports: Vec::new(),
        lab_started: false,
    };
    let result = bench.measure(&zovn, &agent);
    if let Some(dst) = &cfg.agent_log {
        let _ = std::fs::copy(&bench.agent_log, dst);
    }
    let teardown = bench.teardown();
    let (mut report, del) = match (result, teardown) {
        (Ok(r), Ok(del)) => (r, del),
        (Err(e), t) => {
            if let Err(te) = t {
                eprintln!("teardown after the failure also failed: {te:#}");
            }
            return Err(e);
        }
        (Ok(_), Err(e)) => return Err(e.context("teardown")),
    };
    report.del = del;
    Ok(report)
}

/// The node the agent runs on.
#[derive(Debug, Clone)]
struct NodeInfo {
    name: String,
    netns: String,
    db: String,
    nb: String,
}

/// A shim ADD that succeeded (torn down with DEL).
#[derive(Debug, Clone)]
struct Added {
    cid: String,
    netns: String,
    pod: String,
}

/// One measured ADD.
#[derive(Debug, Clone)]
struct AddSample {
    cid: String,
    /// The host-side interface (the OVS port) from the result.
    host: String,
    /// Wall-clock exec and result (seconds since the epoch; the agent logs wall time).
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
    agent: Option<Child>,
    socket: PathBuf,
    agent_log: PathBuf,
    node: Option<NodeInfo>,
    added: Vec<Added>,
    netns: Vec<String>,
    /// Baseline host interfaces (in the node netns) and their OVS ports.
    base_ports: Vec<String>,
    lab_started: bool,
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

impl Bench {
    fn node(&self) -> Result<&NodeInfo> {
        self.node
            .as_ref()
            .ok_or_else(|| anyhow!("the lab is not up"))
    }

    fn measure(&mut self, zovn: &Path, agent: &Path) -> Result<Report> {
        // the lab, its object store + controller, a default Subnet
        eprintln!("cni-add: lab up (prefix {})", self.prefix);
        self.lab_started = true;
        let mut lab = Lab::up(LabConfig {
            cluster_cidr: Vec::new(),
            dir: self.lab_dir.clone(),
            prefix: self.prefix.clone(),
            nodes: 1,
            raft: false,
            dpdk: Dpdk::Off,
            datapath: Vec::new(),
            encap: Encap::Geneve,
        })
        .context("lab up")?;
        lab.keep_running();
        lab.start_apiserver(zovn)
            .context("start the lab object store")?;
        let st = lab.node(1).context("node 1")?;
        self.node = Some(NodeInfo {
            name: st.system_id.clone(),
            netns: st.netns.clone(),
            db: st.db_remote.clone(),
            nb: lab.nb_remote(),
        });
        let api = lab::state::Layout::new(&self.lab_dir).api_socket();
        ApiClient::connect(&self.lab_dir)?
            .apply(vec![
                json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
                "metadata": {"name": "perf"},
                "spec": {"cidr": SUBNET_CIDR, "gateway": SUBNET_GW, "default": true}}),
            ])
            .context("apply the Subnet")?;
        self.start_agent(agent, &api)?;

        // the baseline's logical switch (not the controller's)
        let node = self.node()?.clone();
        let ls = format!("{}-base", self.prefix);
        run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={}", node.nb))
                .args(["ls-add", &ls]),
        )?;

        // warm-up (not counted): the controller's first pass, first port of each switch
        eprintln!("cni-add: warm-up");
        self.ours_one(0, "warm")?;
        self.baseline_one(0, &ls)?;

        eprintln!("cni-add: {} sequential ADDs", self.cfg.pods);
        let mut seq = Vec::new();
        let mut e2e = Vec::new();
        let t0 = Instant::now();
        for i in 1..=self.cfg.pods {
            let t = Instant::now();
            seq.push(self.ours_one(i, "seq")?);
            e2e.push(t.elapsed().as_secs_f64());
        }
        let seq_wall = t0.elapsed().as_secs_f64();

        eprintln!("cni-add: {} concurrent ADDs", self.cfg.concurrent);
        let (conc, conc_wall) = self.ours_concurrent(self.cfg.pods + 1)?;

        eprintln!("cni-add: baseline, {} pods by hand", self.cfg.pods);
        let mut base = Vec::new();
        let mut base_steps: Vec<(&'static str, Vec<f64>)> = Vec::new();
        let t0 = Instant::now();
        for i in 1..=self.cfg.pods {
            let t = Instant::now();
            let steps = self.baseline_one(i, &ls)?;
            base.push(t.elapsed().as_secs_f64());
            for (name, secs) in steps {
                match base_steps.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, v)) => v.push(secs),
                    None => base_steps.push((name, vec![secs])),
                }
            }
        }
        let base_wall = t0.elapsed().as_secs_f64();

        let log = std::fs::read_to_string(&self.agent_log)
            .with_context(|| format!("read {}", self.agent_log.display()))?;
        let events = parse_agent_log(&log);
        Ok(Report {
            config: self.cfg.clone(),
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
            baseline: Series {
                latencies: base,
                wall_s: base_wall,
            },
            breakdown_sequential: breakdown(&seq, &events),
            breakdown_concurrent: breakdown(&conc, &events),
            baseline_steps: base_steps,
            del: Series::default(),
        })
    }

    fn start_agent(&mut self, agent: &Path, api: &Path) -> Result<()> {
        let node = self.node()?.clone();
        let state = self.cfg.dir.join("agent/state");
        std::fs::create_dir_all(&state).with_context(|| format!("create {}", state.display()))?;
        let log = File::create(&self.agent_log)
            .with_context(|| format!("create {}", self.agent_log.display()))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &node.netns])
            .arg(agent)
            .args(["--node-name", &node.name, "--ovs-db", &node.db])
            .arg("--cni-socket")
            .arg(&self.socket)
            .arg("--pods")
            .arg(format!("lab:{}", api.display()))
            .arg("--state-dir")
            .arg(&state)
            .args(["--mtu", &MTU.to_string()])
            .env("RUST_LOG", AGENT_LOG_FILTER)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", agent.display()))?;
        self.agent = Some(child);
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            if let Some(c) = self.agent.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                bail!(
                    "the agent exited ({status}) before serving {}:\n{}",
                    self.socket.display(),
                    tail(&self.agent_log)
                );
            }
            if t.elapsed() > Duration::from_secs(20) {
                bail!(
                    "the agent serves no {} after 20 s:\n{}",
                    self.socket.display(),
                    tail(&self.agent_log)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn pod_object(&self, name: &str) -> Result<Value> {
        Ok(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": self.node()?.name, "containers": []}}))
    }

    fn add_netns(&mut self, name: &str) -> Result<()> {
        run_ok(Command::new("ip").args(["netns", "add", name]))?;
        self.netns.push(name.to_string());
        Ok(())
    }

    /// One pod: netns, Pod object, shim ADD (measured).
    fn ours_one(&mut self, i: usize, tag: &str) -> Result<AddSample> {
        let pod = format!("{tag}{i}");
        let ns = format!("{}o{i}", self.prefix);
        let cid = container_id(i);
        self.add_netns(&ns)?;
        ApiClient::connect(&self.lab_dir)?
            .apply(vec![self.pod_object(&pod)?])
            .with_context(|| format!("apply pod {pod}"))?;
        let s = shim_add(&self.shim, &self.socket, &cid, &ns, &pod)?;
        self.added.push(Added {
            cid,
            netns: ns,
            pod,
        });
        Ok(s)
    }

    /// `concurrent` pods from index `first`: netns created, Pods applied in one request,
    /// ADDs released together. Returns the samples and the wall time from the apply.
    fn ours_concurrent(&mut self, first: usize) -> Result<(Vec<AddSample>, f64)> {
        let n = self.cfg.concurrent;
        let mut jobs = Vec::new();
        for i in first..first + n {
            let ns = format!("{}o{i}", self.prefix);
            self.add_netns(&ns)?;
            jobs.push((container_id(i), ns, format!("conc{i}")));
        }
        let objects = jobs
            .iter()
            .map(|(_, _, pod)| self.pod_object(pod))
            .collect::<Result<Vec<_>>>()?;
        let barrier = Arc::new(Barrier::new(n + 1));
        let handles: Vec<_> = jobs
            .iter()
            .cloned()
            .map(|(cid, ns, pod)| {
                let (shim, socket, barrier) =
                    (self.shim.clone(), self.socket.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    shim_add(&shim, &socket, &cid, &ns, &pod)
                })
            })
            .collect();
        let t0 = Instant::now();
        let applied = ApiClient::connect(&self.lab_dir)
            .and_then(|mut c| c.apply(objects))
            .context("apply the concurrent pods");
        barrier.wait();
        let mut out = Vec::new();
        let mut first_err = applied.err();
        for (h, (cid, ns, pod)) in handles.into_iter().zip(jobs) {
            match h.join() {
                Ok(Ok(s)) => {
                    self.added.push(Added {
                        cid,
                        netns: ns,
                        pod,
                    });
                    out.push(s);
                }
                Ok(Err(e)) => {
                    // a failed ADD may have left a half-made sandbox: DEL it at teardown
                    self.added.push(Added {
                        cid,
                        netns: ns,
                        pod,
                    });
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
        Ok((out, wall))
    }

    /// One pod by hand, the way a shell plugin does it (index `i` names and addresses it).
    fn baseline_one(&mut self, i: usize, ls: &str) -> Result<Vec<(&'static str, f64)>> {
        let mut steps = Vec::new();
        let mut t = Instant::now();
        let mut lap = |name: &'static str| {
            steps.push((name, t.elapsed().as_secs_f64()));
            t = Instant::now();
        };
        let node = self.node()?.clone();
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
                .arg(format!("--db={}", node.nb))
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

    /// DEL every added pod (measured), delete the netns and baseline ports, stop the
    /// agent, take the lab down. Idempotent; returns the first error after trying all.
    fn teardown(&mut self) -> Result<Series> {
        let mut first_err: Option<anyhow::Error> = None;
        let mut del = Series::default();
        let t0 = Instant::now();
        let agent_alive = self
            .agent
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        for a in std::mem::take(&mut self.added) {
            if !agent_alive {
                break;
            }
            let t = Instant::now();
            match shim(&self.shim, &self.socket, "DEL", &a.cid, &a.netns, &a.pod) {
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
        if let Some(node) = self.node.clone() {
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
        if let Some(mut c) = self.agent.take() {
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
            None => Ok(del),
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

/// Agent log events of interest: (wall time s, what, key field).
#[derive(Debug, Clone, Default)]
struct AgentEvents {
    /// host ifname → "pod interface setup" time.
    setup: Vec<(String, f64)>,
    /// host ifname → "pod interface ready" time.
    ready: Vec<(String, f64)>,
    /// port → "OVS port added/updated" time.
    port: Vec<(String, f64)>,
    /// container → (done time, elapsed ms).
    done: Vec<(String, f64, f64)>,
}

fn parse_agent_log(text: &str) -> AgentEvents {
    let mut ev = AgentEvents::default();
    for line in text.lines() {
        let Some(ts) = line.split_whitespace().next().and_then(parse_rfc3339) else {
            continue;
        };
        if line.contains("pod interface setup") {
            if let Some(h) = field(line, "host") {
                ev.setup.push((h, ts));
            }
        } else if line.contains("pod interface ready") {
            if let Some(h) = field(line, "host") {
                ev.ready.push((h, ts));
            }
        } else if line.contains("OVS port added") || line.contains("OVS port updated") {
            if let Some(p) = field(line, "port") {
                ev.port.push((p, ts));
            }
        } else if line.contains("CNI request done")
            && line.contains("command=ADD")
            && let (Some(c), Some(ms)) = (field(line, "container"), field(line, "elapsed_ms"))
            && let Ok(ms) = ms.parse::<f64>()
        {
            ev.done.push((c, ts, ms));
        }
    }
    ev
}

/// `key=value` (value up to the next space, quotes stripped) in a log line.
fn field(line: &str, key: &str) -> Option<String> {
    let pat = format!(" {key}=");
    let start = line.find(&pat)? + pat.len();
    let rest = &line[start..];
    let v = rest.split_whitespace().next()?;
    Some(v.trim_matches('"').to_string())
}

/// `YYYY-MM-DDTHH:MM:SS[.frac]Z` → seconds since the epoch.
fn parse_rfc3339(s: &str) -> Option<f64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, dd) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (hh, mm) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let ss = t.next()?.parse::<f64>().ok()?;
    // days from civil (Howard Hinnant)
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + dd - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hh * 3600 + mm * 60) as f64 + ss)
}

/// Splits each sample's time by the agent's log events for its sandbox (matched by the
/// container id and the host ifname from the ADD result, inside the ADD's time window).
fn breakdown(samples: &[AddSample], ev: &AgentEvents) -> Breakdown {
    let mut b = Breakdown::default();
    for s in samples {
        let within = |t: f64| t >= s.exec_at - 0.01 && t <= s.result_at + 0.01;
        let Some(&(_, done, ms)) = ev.done.iter().find(|(c, t, _)| *c == s.cid && within(*t))
        else {
            continue;
        };
        let start = done - ms / 1e3;
        let find = |v: &[(String, f64)]| {
            v.iter()
                .find(|(h, t)| *h == s.host && within(*t))
                .map(|(_, t)| *t)
        };
        let (Some(setup), Some(ready), Some(port)) =
            (find(&ev.setup), find(&ev.ready), find(&ev.port))
        else {
            continue;
        };
        b.shim_to_agent.push((start - s.exec_at).max(0.0));
        b.annotation.push((setup - start).max(0.0));
        b.veth.push(ready - setup);
        b.ovs.push(port - ready);
        b.ovn_installed.push(done - port);
        b.agent_to_result.push((s.result_at - done).max(0.0));
    }
    b
}
