//! The benchmark matrix zstack-ovn-kubernetes users know (issue #36): per datapath, node ↔
//! node, pod ↔ pod on one node and pod ↔ pod across nodes, each with iperf3 (TCP, one
//! stream), qperf `tcp_lat` and `udp_lat` (1 B) and qperf `udp_bw` (1 KiB messages, the
//! receiver's rate), in one run.
//!
//! One 2-node lab per datapath, both nodes on it (`kernel`, `afxdp`, `dpdk`), Geneve between
//! them, with its object store, controller and agents: pods `c1` and `s1` on node1, `s2` on
//! node2, on AF_XDP ports on the `afxdp` and `dpdk` nodes (waited for: fast start moves
//! them after Ready). Node ↔ node runs between the nodes' own network namespaces over the
//! underlay addresses (on the AF_XDP and DPDK nodes the node's own traffic crosses br-phy's
//! userspace path too). Every path is measured once per round, rounds alternate the
//! order, the medians are reported with two ratios: pods across nodes ÷ the nodes' own path
//! (what the tunnel and OVS cost) and each datapath ÷ the kernel datapath on the same path.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use lab::apiserver::ApiClient;
use lab::{Lab, LabConfig};
use serde_json::{Value, json};

use crate::datapath_bench::{iperf_client, median, parse_qperf, wait_listening};
use crate::host::{LabGuard, heavy_lock, run_ok, wait_pods, which};

const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The paths, in the order the table prints them.
pub const PATHS: [&str; 3] = ["node-node", "pod-pod same node", "pod-pod across nodes"];

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    pub dir: PathBuf,
    /// Datapaths, one 2-node lab each (`kernel`, `afxdp`, `dpdk`).
    pub datapaths: Vec<String>,
    /// iperf3 seconds per sample.
    pub seconds: u32,
    /// qperf seconds per test.
    pub qperf_seconds: u32,
    pub rounds: usize,
}

/// One path's samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    pub tcp_gbps: Vec<f64>,
    pub tcp_lat_us: Vec<f64>,
    pub udp_lat_us: Vec<f64>,
    pub udp_gbps: Vec<f64>,
}

/// One path's medians.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Figures {
    pub tcp_gbps: f64,
    pub tcp_lat_us: f64,
    pub udp_lat_us: f64,
    pub udp_gbps: f64,
}

impl Samples {
    pub fn figures(&self) -> Figures {
        Figures {
            tcp_gbps: median(self.tcp_gbps.clone()),
            tcp_lat_us: median(self.tcp_lat_us.clone()),
            udp_lat_us: median(self.udp_lat_us.clone()),
            udp_gbps: median(self.udp_gbps.clone()),
        }
    }
}

/// Samples by (datapath, path).
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub config: Option<Config>,
    pub samples: BTreeMap<(String, String), Samples>,
}

impl Report {
    fn figures(&self, dp: &str, path: &str) -> Option<Figures> {
        self.samples
            .get(&(dp.to_string(), path.to_string()))
            .map(Samples::figures)
    }

    /// The table: one row per datapath and path, with the ratios.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<8} {:<22} {:>9} {:>11} {:>11} {:>9} {:>13} {:>13}\n",
            "DATAPATH",
            "PATH",
            "TCP Gb/s",
            "tcp_lat µs",
            "udp_lat µs",
            "UDP Gb/s",
            "TCP ÷ node",
            "TCP ÷ kernel"
        );
        let dps: Vec<String> =
            self.samples
                .keys()
                .map(|(d, _)| d.clone())
                .fold(Vec::new(), |mut v, d| {
                    if !v.contains(&d) {
                        v.push(d);
                    }
                    v
                });
        for dp in &dps {
            let node = self.figures(dp, PATHS[0]);
            for path in PATHS {
                let Some(f) = self.figures(dp, path) else {
                    continue;
                };
                let vs_node = node
                    .filter(|_| path != PATHS[0])
                    .map_or("-".to_string(), |n| {
                        format!("{:.2}x", f.tcp_gbps / n.tcp_gbps)
                    });
                let vs_kernel = self
                    .figures("kernel", path)
                    .filter(|_| dp != "kernel")
                    .map_or("-".to_string(), |k| {
                        format!("{:.2}x", f.tcp_gbps / k.tcp_gbps)
                    });
                out.push_str(&format!(
                    "{dp:<8} {path:<22} {:>9.2} {:>11.1} {:>11.1} {:>9.2} {vs_node:>13} {vs_kernel:>13}\n",
                    f.tcp_gbps, f.tcp_lat_us, f.udp_lat_us, f.udp_gbps
                ));
            }
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .samples
            .iter()
            .map(|((dp, path), s)| {
                let f = s.figures();
                json!({"datapath": dp, "path": path,
                    "tcp_gbps": f.tcp_gbps, "tcp_lat_us": f.tcp_lat_us,
                    "udp_lat_us": f.udp_lat_us, "udp_gbps": f.udp_gbps,
                    "samples": {"tcp_gbps": s.tcp_gbps, "tcp_lat_us": s.tcp_lat_us,
                        "udp_lat_us": s.udp_lat_us, "udp_gbps": s.udp_gbps}})
            })
            .collect();
        json!({"rows": rows})
    }
}

/// One sample of every test from netns `from` to `to`.
fn measure(cfg: &Config, from: &str, to: &str, s: &mut Samples) -> Result<()> {
    let gbps = iperf_client(from, to, cfg.seconds)?;
    s.tcp_gbps.push(gbps);
    let q = cfg.qperf_seconds.to_string();
    let o = run_ok(Command::new("ip").args([
        "netns", "exec", from, "qperf", "-t", &q, "-m", "1", to, "tcp_lat", "udp_lat",
    ]))?;
    let lat = parse_qperf(&String::from_utf8_lossy(&o.stdout))
        .with_context(|| format!("qperf latency {from} → {to}"))?;
    let get = |m: &BTreeMap<String, f64>, k: &str| {
        m.get(k)
            .copied()
            .ok_or_else(|| anyhow!("qperf {from} → {to}: no {k}"))
    };
    s.tcp_lat_us.push(get(&lat, "tcp_lat")? * 1e6);
    s.udp_lat_us.push(get(&lat, "udp_lat")? * 1e6);
    let o = run_ok(Command::new("ip").args([
        "netns", "exec", from, "qperf", "-t", &q, "-m", "1024", "-ub", to, "udp_bw",
    ]))?;
    let bw = parse_qperf(&String::from_utf8_lossy(&o.stdout))
        .with_context(|| format!("qperf udp_bw {from} → {to}"))?;
    s.udp_gbps.push(get(&bw, "udp_bw")? / 1e9);
    Ok(())
}

/// Runs every datapath's lab, one after the other.
pub fn run(cfg: Config) -> Result<Report> {
    ensure!(cfg.rounds > 0, "--rounds must be at least 1");
    ensure!(!cfg.datapaths.is_empty(), "no datapath to measure");
    for dp in &cfg.datapaths {
        ensure!(
            ["kernel", "afxdp", "dpdk"].contains(&dp.as_str()),
            "unknown datapath {dp:?} (kernel, afxdp, dpdk)"
        );
    }
    for tool in ["iperf3", "qperf"] {
        ensure!(which(tool).is_some(), "`{tool}` is not installed");
    }
    let _lock = heavy_lock("matrix")?;
    let mut report = Report {
        config: Some(cfg.clone()),
        samples: BTreeMap::new(),
    };
    for dp in &cfg.datapaths {
        let by_path = run_datapath(&cfg, dp).with_context(|| format!("datapath {dp}"))?;
        for (path, s) in by_path {
            report.samples.insert((dp.clone(), path), s);
        }
    }
    Ok(report)
}

fn run_datapath(cfg: &Config, dp: &str) -> Result<BTreeMap<String, Samples>> {
    let zovn = lab::apiserver::zovn_exe()?;
    let agent = lab::agent::agent_exe()?;
    let shim = lab::agent::shim_exe()?;
    let lab_dir = cfg.dir.join(format!("lab-{dp}"));
    let mut g = LabGuard::new(&lab_dir);
    let mut lc = LabConfig::new(&lab_dir, "zmx");
    lc.nodes = 2;
    lc.datapath = vec![dp.to_string(), dp.to_string()];
    let mut lab = Lab::up(lc).context("lab up")?;
    lab.keep_running();
    lab.start_apiserver(&zovn).context("object store")?;
    lab.start_agents(&agent, Some(&shim))
        .context("node agents")?;
    let (n1, n2) = (lab.node(1)?.clone(), lab.node(2)?.clone());
    let pods: Vec<(String, usize, bool)> = [("c1", 1), ("s1", 1), ("s2", 2)]
        .into_iter()
        .map(|(n, i)| (n.to_string(), i, dp != "kernel"))
        .collect();
    let mut objects = vec![
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "matrix"}, "spec": {"cidr": "10.81.0.0/16", "default": true}}),
    ];
    for (name, node, _) in &pods {
        let node = if *node == 1 { &n1 } else { &n2 };
        objects.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node.system_id, "containers": [{"name": "c"}]}}));
    }
    ApiClient::connect(&lab_dir)?
        .apply(objects)
        .context("apply the Subnet and the pods")?;
    let at = wait_pods(&lab, &lab_dir, &pods, READY_TIMEOUT)?;
    for ns in [&at["s1"].0, &at["s2"].0, &n2.netns] {
        g.server(ns, &["iperf3", "-s", "-p", "5201"])?;
        g.server(ns, &["qperf"])?;
        wait_listening(ns, 5201)?;
        wait_listening(ns, 19765)?;
    }
    let routes: [(&str, &str, &str); 3] = [
        (PATHS[0], &n1.netns, &n2.encap_ip),
        (PATHS[1], &at["c1"].0, &at["s1"].1),
        (PATHS[2], &at["c1"].0, &at["s2"].1),
    ];
    let mut out: BTreeMap<String, Samples> = BTreeMap::new();
    for round in 1..=cfg.rounds {
        let mut order: Vec<_> = routes.to_vec();
        if round % 2 == 0 {
            order.reverse();
        }
        for (path, from, to) in order {
            eprintln!("matrix: {dp}, round {round}/{}, {path}", cfg.rounds);
            measure(cfg, from, to, out.entry(path.to_string()).or_default())?;
        }
    }
    drop(g);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(tcp: f64) -> Samples {
        Samples {
            tcp_gbps: vec![tcp],
            tcp_lat_us: vec![30.0],
            udp_lat_us: vec![25.0],
            udp_gbps: vec![1.0],
        }
    }

    #[test]
    fn the_table_has_a_row_per_path_and_both_ratios() {
        let mut r = Report::default();
        for (dp, tcps) in [("kernel", [10.0, 4.0, 2.0]), ("afxdp", [8.0, 6.0, 3.0])] {
            for (path, t) in PATHS.iter().zip(tcps) {
                r.samples.insert((dp.into(), path.to_string()), s(t));
            }
        }
        let t = r.table();
        let row = |dp: &str, path: &str| {
            t.lines()
                .find(|l| l.starts_with(dp) && l.contains(path))
                .unwrap_or_else(|| panic!("{dp} {path}:\n{t}"))
                .to_string()
        };
        // across nodes ÷ the nodes' own path, and ÷ kernel on the same path
        let a = row("afxdp", "pod-pod across nodes");
        assert!(a.contains("0.38x") && a.contains("1.50x"), "{a}");
        let k = row("kernel", "pod-pod same node");
        assert!(k.contains("0.40x") && k.trim_end().ends_with('-'), "{k}");
        assert!(row("kernel", "node-node").contains("10.00"), "{t}");
        assert_eq!(r.to_json()["rows"].as_array().map(Vec::len), Some(6));
    }
}
