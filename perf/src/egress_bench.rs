//! `zovn-perf egress`: pods' traffic leaving the cluster against pod-to-pod traffic on the
//! same node and datapath (issue 18's benchmark), per gateway mode (`local`, `shared`).
//!
//! Per mode one lab, a node per datapath asked (`kernel`, `afxdp`, `dpdk`), the real object store,
//! controller, agents and CNI shim; per node a client pod and a server pod, a default
//! Subnet (`natOutgoing`, the default). The external host is the lab's
//! (`198.51.100.10`, outside every node, behind the underlay router). Per round and
//! node, alternating: iperf3 -P1 (TCP, `seconds`) and qperf `tcp_lat` (1 B) from the
//! client to the server pod, then to the external host, then from the node's own host
//! (its kernel, through `br-phy`) to the external host: the underlay's own ceiling in this
//! lab, where the external host sits behind a Linux bridge and a routing netns that share
//! the machine's CPUs with the nodes. The figures are the medians over the rounds and the
//! ratios egress / pod-to-pod and egress / host-to-external in the same run.
//!
//! The egress path of `local` mode: pod → OVN (cluster router's reroute policy) → the
//! node's management port `ovn-k8s-mp0` (an OVS internal port) → the node's kernel
//! (forward + masquerade) → `br-phy`'s uplink → the underlay router → the external host.
//! Of `shared` mode: pod → OVN (reroute to the node's gateway router, SNAT there) →
//! ovn-controller's patch port into `br-phy` (conntrack zone of the gateway rules) → the
//! uplink → the underlay router → the external host, without the node's kernel.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use lab::apiserver::ApiClient;
use lab::{Lab, LabConfig};
use serde_json::{Value, json};

use crate::datapath_bench::{iperf_client, median, parse_qperf, wait_listening};
use crate::host::{LabGuard, heavy_lock, run_ok, wait_pods};

/// The lab's external host.
pub const EXTERNAL: &str = "198.51.100.10";
/// Target of the issue: egress throughput ≥ 0.8× pod-to-pod (for the `shared` mode).
pub const TARGET_SHARED: f64 = 0.8;
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    pub dir: PathBuf,
    pub datapaths: Vec<String>,
    pub seconds: u32,
    pub qperf_seconds: u32,
    pub rounds: usize,
    /// Gateway modes, one lab each.
    pub modes: Vec<lab::Gateway>,
}

/// One datapath's medians in one gateway mode.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PathFigures {
    pub mode: lab::Gateway,
    pub datapath: String,
    pub pod_gbps: f64,
    pub egress_gbps: f64,
    pub pod_lat_us: f64,
    pub egress_lat_us: f64,
    /// The node's host to the external host (the underlay's ceiling).
    pub host_gbps: f64,
    pub host_lat_us: f64,
    /// The node's br-phy uplink port type as the agent left it (`afxdp`, `system`).
    pub uplink: String,
}

impl PathFigures {
    pub fn throughput_ratio(&self) -> f64 {
        self.egress_gbps / self.pod_gbps
    }
    pub fn latency_ratio(&self) -> f64 {
        self.egress_lat_us / self.pod_lat_us
    }
    /// Egress against the node's own host reaching the external host.
    pub fn host_ratio(&self) -> f64 {
        self.egress_gbps / self.host_gbps
    }
    /// A `shared` mode figure of a userspace node (what the target is about).
    pub fn userspace_shared(&self) -> bool {
        self.mode == lab::Gateway::Shared && self.datapath != "kernel"
    }
}

/// What the benchmark measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub config: Config,
    pub paths: Vec<PathFigures>,
}

impl Report {
    pub fn table(&self) -> String {
        let mut s = format!(
            "egress (natOutgoing) vs pod-to-pod on the same node, per gateway mode, medians of \
             {} rounds (iperf3 -P1 {} s, qperf tcp_lat 1 B):\n{:<7} {:<8} {:<7} {:>11} {:>11} {:>7} {:>11} {:>11} {:>7} {:>12} {:>9}\n",
            self.config.rounds,
            self.config.seconds,
            "mode",
            "datapath",
            "uplink",
            "pod Gbit/s",
            "out Gbit/s",
            "ratio",
            "pod lat us",
            "out lat us",
            "ratio",
            "host Gbit/s",
            "out/host"
        );
        for p in &self.paths {
            s += &format!(
                "{:<7} {:<8} {:<7} {:>11.2} {:>11.2} {:>6.2}x {:>11.1} {:>11.1} {:>6.2}x {:>12.2} {:>8.2}x\n",
                p.mode.as_str(),
                p.datapath,
                p.uplink,
                p.pod_gbps,
                p.egress_gbps,
                p.throughput_ratio(),
                p.pod_lat_us,
                p.egress_lat_us,
                p.latency_ratio(),
                p.host_gbps,
                p.host_ratio()
            );
        }
        for p in self.paths.iter().filter(|p| p.userspace_shared()) {
            let r = p.throughput_ratio();
            s += &format!(
                "shared on {}: egress {r:.2}x pod-to-pod, target >= {TARGET_SHARED}x: {}\n",
                p.datapath,
                if r >= TARGET_SHARED { "met" } else { "MISSED" }
            );
        }
        s
    }

    pub fn to_json(&self) -> Value {
        json!({
            "benchmark": "egress", "rounds": self.config.rounds,
            "iperf_seconds": self.config.seconds, "qperf_seconds": self.config.qperf_seconds,
            "target_shared_throughput_ratio": TARGET_SHARED,
            "paths": self.paths.iter().map(|p| json!({
                "mode": p.mode.as_str(), "datapath": p.datapath,
                "uplink": p.uplink,
                "pod_to_pod_gbps": p.pod_gbps, "egress_gbps": p.egress_gbps,
                "throughput_ratio": p.throughput_ratio(),
                "pod_to_pod_tcp_lat_us": p.pod_lat_us, "egress_tcp_lat_us": p.egress_lat_us,
                "latency_ratio": p.latency_ratio(),
                "host_to_external_gbps": p.host_gbps, "host_to_external_tcp_lat_us": p.host_lat_us,
                "egress_to_host_ratio": p.host_ratio(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// iperf3 -P1 Gbit/s and qperf tcp_lat (1 B) µs from netns `from` to `to`.
fn measure(cfg: &Config, from: &str, to: &str) -> Result<(f64, f64)> {
    let gbps = iperf_client(from, to, cfg.seconds)?;
    let o = run_ok(Command::new("ip").args([
        "netns",
        "exec",
        from,
        "qperf",
        "-t",
        &cfg.qperf_seconds.to_string(),
        "-m",
        "1",
        to,
        "tcp_lat",
    ]))?;
    let q = parse_qperf(&String::from_utf8_lossy(&o.stdout))
        .with_context(|| format!("qperf {from} → {to}"))?;
    let lat = q
        .get("tcp_lat")
        .copied()
        .ok_or_else(|| anyhow!("qperf {from} → {to}: no tcp_lat"))?;
    Ok((gbps, lat * 1e6))
}

/// Runs every mode of `cfg`, one lab after the other.
pub fn run(cfg: Config) -> Result<Report> {
    ensure!(cfg.rounds > 0, "--rounds must be at least 1");
    ensure!(!cfg.modes.is_empty(), "no gateway mode to measure");
    for dp in &cfg.datapaths {
        ensure!(
            lab::config::DATAPATHS.contains(&dp.as_str()),
            "unknown datapath {dp:?} (one of {})",
            lab::config::DATAPATHS.join(", ")
        );
    }
    for tool in ["iperf3", "qperf"] {
        ensure!(
            crate::host::which(tool).is_some(),
            "`{tool}` is not installed (run `make deps`)"
        );
    }
    let _lock = heavy_lock("egress")?;
    let mut paths = Vec::new();
    for mode in &cfg.modes {
        paths.extend(run_mode(&cfg, *mode).with_context(|| format!("{} mode", mode.as_str()))?);
    }
    Ok(Report {
        config: cfg.clone(),
        paths,
    })
}

/// One mode's lab, pods and samples.
fn run_mode(cfg: &Config, mode: lab::Gateway) -> Result<Vec<PathFigures>> {
    let zovn = lab::apiserver::zovn_exe()?;
    let agent = lab::agent::agent_exe()?;
    let shim = lab::agent::shim_exe()?;
    let lab_dir = cfg.dir.join(format!("lab-{}", mode.as_str()));
    let mut g = LabGuard::new(&lab_dir);
    let mut lc = LabConfig::new(&lab_dir, "zeg");
    lc.nodes = cfg.datapaths.len();
    lc.datapath = cfg.datapaths.clone();
    lc.gateway = mode;
    let mut lab = Lab::up(lc).context("lab up")?;
    lab.keep_running();
    lab.start_apiserver(&zovn).context("object store")?;
    lab.start_agents(&agent, Some(&shim))
        .context("node agents")?;
    let mut objects = vec![json!({
        "apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "egress-bench"},
        "spec": {"cidr": "10.79.0.0/16", "default": true}})];
    let mut pods = Vec::new();
    for (i, dp) in cfg.datapaths.iter().enumerate() {
        let node = lab.node(i + 1)?.system_id.clone();
        for role in ["c", "s"] {
            let name = format!("{role}{}", i + 1);
            objects.push(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": node, "containers": [{"name": "c"}]}}));
            pods.push((name, i + 1, dp != "kernel"));
        }
    }
    ApiClient::connect(&lab_dir)?
        .apply(objects)
        .context("apply the Subnet and the pods")?;
    let at = wait_pods(&lab, &lab_dir, &pods, READY_TIMEOUT)?;
    let ext = lab.names().external_netns();
    g.server(&ext, &["iperf3", "-s", "-p", "5201"])?;
    g.server(&ext, &["qperf"])?;
    wait_listening(&ext, 5201)?;
    wait_listening(&ext, 19765)?;
    for i in 1..=cfg.datapaths.len() {
        let (ns, _) = &at[&format!("s{i}")];
        g.server(ns, &["iperf3", "-s", "-p", "5201"])?;
        g.server(ns, &["qperf"])?;
        wait_listening(ns, 5201)?;
        wait_listening(ns, 19765)?;
    }
    let mut uplinks = Vec::new();
    for i in 1..=cfg.datapaths.len() {
        let node = lab.node(i)?;
        let port = lab.names().node_uplink(i);
        let out = run_ok(Command::new("ovs-vsctl").args([
            "--db",
            &node.db_remote,
            "get",
            "Interface",
            &port,
            "type",
        ]))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let t = text.trim().trim_matches('"');
        uplinks.push(if t.is_empty() { "system" } else { t }.to_string());
    }
    let mut samples: Vec<[Vec<f64>; 6]> = vec![Default::default(); cfg.datapaths.len()];
    for round in 1..=cfg.rounds {
        for (i, dp) in cfg.datapaths.iter().enumerate() {
            eprintln!(
                "egress: {} mode, round {round}/{}, {dp}",
                mode.as_str(),
                cfg.rounds
            );
            let (client, _) = &at[&format!("c{}", i + 1)];
            let (_, server_ip) = &at[&format!("s{}", i + 1)];
            let (pg, pl) = measure(cfg, client, server_ip)?;
            let (eg, el) = measure(cfg, client, EXTERNAL)?;
            let (hg, hl) = measure(cfg, &lab.node(i + 1)?.netns, EXTERNAL)?;
            let s = &mut samples[i];
            s[4].push(hg);
            s[5].push(hl);
            s[0].push(pg);
            s[1].push(eg);
            s[2].push(pl);
            s[3].push(el);
        }
    }
    let paths = cfg
        .datapaths
        .iter()
        .zip(samples)
        .zip(uplinks)
        .map(|((dp, [pg, eg, pl, el, hg, hl]), uplink)| PathFigures {
            mode,
            datapath: dp.clone(),
            pod_gbps: median(pg),
            egress_gbps: median(eg),
            pod_lat_us: median(pl),
            egress_lat_us: median(el),
            host_gbps: median(hg),
            host_lat_us: median(hl),
            uplink,
        })
        .collect();
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_table() {
        let r = Report {
            config: Config {
                dir: PathBuf::new(),
                datapaths: vec!["afxdp".into()],
                seconds: 5,
                qperf_seconds: 2,
                rounds: 3,
                modes: vec![lab::Gateway::Shared],
            },
            paths: vec![PathFigures {
                mode: lab::Gateway::Shared,
                datapath: "afxdp".into(),
                pod_gbps: 4.0,
                egress_gbps: 2.0,
                pod_lat_us: 20.0,
                egress_lat_us: 50.0,
                host_gbps: 2.5,
                host_lat_us: 30.0,
                uplink: "afxdp".into(),
            }],
        };
        assert_eq!(r.paths[0].throughput_ratio(), 0.5);
        assert_eq!(r.paths[0].latency_ratio(), 2.5);
        assert_eq!(r.paths[0].host_ratio(), 0.8);
        let t = r.table();
        assert!(
            t.contains("afxdp") && t.contains("0.50x") && t.contains("2.50x"),
            "{t}"
        );
        assert!(t.contains("target >= 0.8x: MISSED"), "{t}");
        assert_eq!(r.to_json()["paths"][0]["throughput_ratio"], 0.5);
        assert_eq!(r.to_json()["paths"][0]["uplink"], "afxdp");
    }
}
