//! `zovn-perf node-memory`: what a full node of pods costs ovs-vswitchd, per datapath.
//!
//! For each datapath (`kernel`, `afxdp`, `dpdk`) a fresh 1-node lab as `zovn lab up
//! --datapath X` builds it, with the agent's datapath config as the lab writes it plus
//! `afxdp.maxPorts` when given (`--max-ports`; without it the agent's default budget
//! applies, 10 % of the machine's memory). A default Subnet, then pods applied in steps
//! (`--steps 10,50,110`: the pods up to that count, on node 1), each step waited for until
//! every pod is Ready and no port still waits to move to AF_XDP. Measured after each step:
//! ovs-vswitchd's resident memory (`VmRSS`), the hugepages in use on the machine
//! (`HugePages_Total − HugePages_Free`, DPDK's socket memory among them), and the pods'
//! OVS Interface types (how many AF_XDP ports, how many kernel ports and why). The cost
//! per pod is (RSS at the step − RSS before the first pod) / pods; the kernel datapath in
//! the same run is the baseline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use lab::apiserver::ApiClient;
use lab::{Lab, LabConfig};
use serde_json::{Value, json};

use crate::host::{heavy_lock, run_ok, teardown_lab};

const SUBNET_CIDR: &str = "10.46.0.0/16";
const SUBNET_GW: &str = "10.46.0.1";
/// Bound of one step (Ready and every port settled).
const STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    pub dir: PathBuf,
    /// Pod counts measured, ascending.
    pub steps: Vec<usize>,
    pub datapaths: Vec<String>,
    /// `afxdp.maxPorts` in the node's datapath config; `None`: the agent's default.
    pub max_ports: Option<u32>,
}

/// One measurement.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub pods: usize,
    pub vswitchd_rss_kib: u64,
    pub hugepages_used_kib: u64,
    /// Pod ports by OVS Interface type (`afxdp`, `system` for AF_PACKET).
    pub port_types: BTreeMap<String, usize>,
    /// Seconds from the step's apply until it settled.
    pub settle_s: f64,
}

/// One datapath's run.
#[derive(Debug, Clone, Default)]
pub struct DatapathRun {
    pub datapath: String,
    /// The budget the agent reported (`afxdp.budget` of its status), if any.
    pub budget: Option<Value>,
    pub baseline: Sample,
    pub steps: Vec<Sample>,
}

impl DatapathRun {
    /// MiB of ovs-vswitchd RSS per pod at `s`, against the baseline.
    pub fn rss_per_pod_mib(&self, s: &Sample) -> f64 {
        if s.pods == 0 {
            return f64::NAN;
        }
        s.vswitchd_rss_kib
            .saturating_sub(self.baseline.vswitchd_rss_kib) as f64
            / 1024.0
            / s.pods as f64
    }
}

/// The run's figures.
#[derive(Debug, Clone)]
pub struct Report {
    pub config: Config,
    pub runs: Vec<DatapathRun>,
}

/// The target per pod on the primary path at 110 pods (or a budget).
pub const TARGET_MIB_PER_POD: f64 = 16.0;

impl Report {
    pub fn table(&self) -> String {
        let mut s = format!(
            "node-memory: pods on one node, ovs-vswitchd RSS and hugepages after each step (afxdp.maxPorts: {})\n",
            self.config
                .max_ports
                .map_or_else(|| "agent default".to_string(), |n| n.to_string())
        );
        s += &format!(
            "{:<8} {:>5} {:>10} {:>10} {:>12} {:>9}  ports\n",
            "datapath", "pods", "RSS MiB", "huge MiB", "MiB per pod", "settle s"
        );
        for r in &self.runs {
            s += &format!(
                "{:<8} {:>5} {:>10.0} {:>10.0} {:>12} {:>9}  (before the first pod)\n",
                r.datapath,
                0,
                r.baseline.vswitchd_rss_kib as f64 / 1024.0,
                r.baseline.hugepages_used_kib as f64 / 1024.0,
                "-",
                "-"
            );
            for st in &r.steps {
                s += &format!(
                    "{:<8} {:>5} {:>10.0} {:>10.0} {:>12.2} {:>9.1}  {}\n",
                    r.datapath,
                    st.pods,
                    st.vswitchd_rss_kib as f64 / 1024.0,
                    st.hugepages_used_kib as f64 / 1024.0,
                    r.rss_per_pod_mib(st),
                    st.settle_s,
                    st.port_types
                        .iter()
                        .map(|(t, n)| format!("{n} {t}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            if let Some(b) = &r.budget {
                s += &format!("  {} budget: {b}\n", r.datapath);
            }
        }
        let kernel = self.runs.iter().find(|r| r.datapath == "kernel");
        for r in self.runs.iter().filter(|r| r.datapath != "kernel") {
            let (Some(last), Some(k)) = (r.steps.last(), kernel.and_then(|k| k.steps.last()))
            else {
                continue;
            };
            let kr = kernel.map_or(f64::NAN, |kr| kr.rss_per_pod_mib(k));
            let per = r.rss_per_pod_mib(last);
            s += &format!(
                "  {} at {} pods: {per:.1} MiB per pod ({:.0}× the kernel path's {kr:.2}); target ≤ {TARGET_MIB_PER_POD} MiB or a budget: {}\n",
                r.datapath,
                last.pods,
                per / kr.max(0.01),
                if per <= TARGET_MIB_PER_POD {
                    "met"
                } else if r.budget.is_some() && last.port_types.contains_key("system") {
                    "budget holds"
                } else {
                    "MISSED"
                }
            );
        }
        s
    }

    pub fn to_json(&self) -> Value {
        json!({
            "benchmark": "node-memory",
            "max_ports": self.config.max_ports,
            "runs": self.runs.iter().map(|r| json!({
                "datapath": r.datapath,
                "budget": r.budget,
                "baseline_rss_kib": r.baseline.vswitchd_rss_kib,
                "baseline_hugepages_kib": r.baseline.hugepages_used_kib,
                "steps": r.steps.iter().map(|s| json!({
                    "pods": s.pods,
                    "vswitchd_rss_kib": s.vswitchd_rss_kib,
                    "hugepages_used_kib": s.hugepages_used_kib,
                    "rss_per_pod_mib": r.rss_per_pod_mib(s),
                    "port_types": s.port_types,
                    "settle_s": s.settle_s,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// `VmRSS` of `pid` in kB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    meminfo_field(&s, "VmRSS:").with_context(|| format!("/proc/{pid}/status: no VmRSS"))
}

/// The kB value of `field` (`Name:`) in a `/proc/meminfo`-style text.
pub fn meminfo_field(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Hugepages in use on the machine, in kB.
pub fn hugepages_used_kib() -> Result<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").context("read /proc/meminfo")?;
    let total = meminfo_field(&m, "HugePages_Total:").unwrap_or(0);
    let free = meminfo_field(&m, "HugePages_Free:").unwrap_or(0);
    let size = meminfo_field(&m, "Hugepagesize:").unwrap_or(2048);
    Ok(total.saturating_sub(free) * size)
}

pub fn run(cfg: Config) -> Result<Report> {
    ensure!(
        !cfg.steps.is_empty(),
        "--steps must name at least one count"
    );
    ensure!(
        cfg.steps.windows(2).all(|w| w[0] < w[1]) && cfg.steps[0] > 0,
        "--steps must be ascending and > 0"
    );
    for dp in &cfg.datapaths {
        ensure!(
            ["kernel", "afxdp", "dpdk"].contains(&dp.as_str()),
            "unknown datapath {dp:?} (kernel, afxdp, dpdk)"
        );
    }
    let zovn = lab::apiserver::zovn_exe()?;
    let agent = lab::agent::agent_exe()?;
    let shim = lab::agent::shim_exe()?;
    let _lock = heavy_lock("node-memory")?;
    std::fs::create_dir_all(&cfg.dir).with_context(|| format!("create {}", cfg.dir.display()))?;
    let mut runs = Vec::new();
    for (i, dp) in cfg.datapaths.iter().enumerate() {
        eprintln!("node-memory: {dp}");
        let lab_dir = cfg.dir.join(format!("lab{i}"));
        let prefix = format!("nm{:03x}{i}", std::process::id() % 0xfff);
        let result = one_datapath(&cfg, dp, &lab_dir, &prefix, (&zovn, &agent, &shim));
        let down = teardown_lab(&mut Vec::new(), &lab_dir, true);
        runs.push(result.and_then(|r| down.map(|()| r))?);
    }
    Ok(Report { config: cfg, runs })
}

fn one_datapath(
    cfg: &Config,
    dp: &str,
    lab_dir: &Path,
    prefix: &str,
    (zovn, agent, shim): (&Path, &Path, &Path),
) -> Result<DatapathRun> {
    let mut lc = LabConfig::new(lab_dir, prefix);
    lc.datapath = vec![dp.to_string()];
    lc.cluster_cidr = Vec::new();
    let mut lab = Lab::up(lc).context("lab up")?;
    lab.keep_running();
    let node = lab.node(1).context("node 1")?.clone();
    if let Some(n) = cfg.max_ports {
        let f = node.dir.join("datapath.yaml");
        let mut text =
            std::fs::read_to_string(&f).with_context(|| format!("read {}", f.display()))?;
        text += &format!("afxdp: {{maxPorts: {n}}}\n");
        std::fs::write(&f, text).with_context(|| format!("write {}", f.display()))?;
    }
    lab.start_apiserver(zovn).context("object store")?;
    lab.start_agents(agent, Some(shim)).context("node agent")?;
    let mut api = ApiClient::connect(lab_dir)?;
    api.apply(vec![
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "mem"},
        "spec": {"cidr": SUBNET_CIDR, "gateway": SUBNET_GW, "default": true}}),
    ])
    .context("apply the Subnet")?;
    api.wait(Duration::from_secs(20))?;
    let pid = crate::pmd_sleep_modes::pid_of(&node.dir.join("run/ovs-vswitchd.pid"))?;
    // the agent's first passes (datapath, uplink) are done when it reported its status
    let t0 = Instant::now();
    let budget = loop {
        let status = api
            .get(lab::apiserver::ResourceKind::Node)?
            .into_iter()
            .find(|n| n["metadata"]["name"] == node.system_id.as_str())
            .and_then(|n| {
                n["metadata"]["annotations"][api::keys::DATAPATH_STATUS]
                    .as_str()
                    .and_then(|s| serde_json::from_str::<Value>(s).ok())
            });
        if let Some(s) = status.filter(|s| s["reason"] != "not decided yet") {
            break s["afxdp"]["budget"].clone();
        }
        ensure!(t0.elapsed() < Duration::from_secs(60), "no datapath status");
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(Duration::from_secs(2));
    let mut run = DatapathRun {
        datapath: dp.to_string(),
        budget: (dp != "kernel" && !budget.is_null()).then_some(budget),
        baseline: Sample {
            vswitchd_rss_kib: rss_kib(pid)?,
            hugepages_used_kib: hugepages_used_kib()?,
            ..Sample::default()
        },
        steps: Vec::new(),
    };
    let mut have = 0;
    for &n in &cfg.steps {
        let names: Vec<String> = (have..n).map(|i| format!("m{i}")).collect();
        let t = Instant::now();
        api.apply(
            names
                .iter()
                .map(|name| {
                    json!({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"nodeName": node.system_id, "containers": [{"name": "c"}]}})
                })
                .collect(),
        )
        .with_context(|| format!("apply pods up to {n}"))?;
        have = n;
        let port_types = wait_settled(&mut api, &node.db_remote, n)?;
        let settle_s = t.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_secs(1));
        let s = Sample {
            pods: n,
            vswitchd_rss_kib: rss_kib(pid)?,
            hugepages_used_kib: hugepages_used_kib()?,
            port_types,
            settle_s,
        };
        eprintln!(
            "node-memory: {dp} {n} pods: RSS {:.0} MiB ({:.1} MiB per pod), {:?}, {settle_s:.1} s",
            s.vswitchd_rss_kib as f64 / 1024.0,
            run.rss_per_pod_mib(&s),
            s.port_types
        );
        run.steps.push(s);
    }
    Ok(run)
}

/// Waits until `n` pods are Ready and none of the node's pod ports waits to move; the
/// pod ports by Interface type.
fn wait_settled(api: &mut ApiClient, db: &str, n: usize) -> Result<BTreeMap<String, usize>> {
    let t0 = Instant::now();
    loop {
        let ready = api
            .get(lab::apiserver::ResourceKind::Pod)?
            .iter()
            .filter(|p| api::pod_json::is_ready(p))
            .count();
        if ready >= n {
            let rows = run_ok(Command::new("ovs-vsctl").args([
                "--db",
                db,
                "--format=json",
                "--columns=type,external_ids",
                "find",
                "Interface",
                "external_ids:zstack.io/owner=zstack-ovn-node",
            ]))?;
            let v: Value = serde_json::from_slice(&rows.stdout).context("ovs-vsctl find")?;
            let mut types = BTreeMap::new();
            let mut pending = 0;
            for row in v["data"].as_array().into_iter().flatten() {
                let ids = row[1][1].as_array().cloned().unwrap_or_default();
                let key = |k: &str| ids.iter().any(|p| p[0] == k);
                if !key("zstack.io/pod") {
                    continue;
                }
                if key("zstack.io/datapath-pending") {
                    pending += 1;
                }
                let t = row[0].as_str().unwrap_or_default();
                *types
                    .entry(if t.is_empty() { "system" } else { t }.to_string())
                    .or_insert(0) += 1;
            }
            if pending == 0 && types.values().sum::<usize>() >= n {
                return Ok(types);
            }
        }
        if t0.elapsed() > STEP_TIMEOUT {
            bail!("{ready} of {n} pods Ready, ports not settled after {STEP_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_and_per_pod_cost() {
        let m = "MemTotal:       24567890 kB\nHugePages_Total:     512\nHugePages_Free:      384\nHugepagesize:       2048 kB\n";
        assert_eq!(meminfo_field(m, "MemTotal:"), Some(24_567_890));
        assert_eq!(meminfo_field(m, "HugePages_Free:"), Some(384));
        assert_eq!(meminfo_field(m, "Nope:"), None);
        let run = DatapathRun {
            baseline: Sample {
                vswitchd_rss_kib: 100 * 1024,
                ..Sample::default()
            },
            ..DatapathRun::default()
        };
        let s = Sample {
            pods: 10,
            vswitchd_rss_kib: 830 * 1024,
            ..Sample::default()
        };
        assert!((run.rss_per_pod_mib(&s) - 73.0).abs() < 1e-9);
        assert!(run.rss_per_pod_mib(&Sample::default()).is_nan());
    }

    #[test]
    fn own_rss_is_read() {
        assert!(rss_kib(std::process::id()).unwrap() > 0);
    }
}
