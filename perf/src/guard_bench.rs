//! The megaflow guard's cost on a real ovs-vswitchd with many datapath flows
//! (`zovn-perf megaflow-guard`).
//!
//! A bare OVS (`lab::bare_ovs`, no OVN) gets, for each of N UDP ports, a first-pass rule
//! that sends the port through conntrack and a second-pass rule that forwards it: one
//! datagram per port installs 2N datapath flows (N that recirculate, N after the
//! recirculation), the shape of OVN's ACL stages. Then, per N:
//! - **check**: the wall time of one [`MegaflowGuard::check`] (median of 3; it includes
//!   the two `revalidator/wait` rounds it starts with, measured alone as `settle`);
//! - **main-thread stall**: ovs-vswitchd's main thread also serves ovn-controller's
//!   OpenFlow, and a check's dump and traces run there. A probe (`version` over unixctl,
//!   every 2 ms) measures how long the main thread takes to answer while checks run,
//!   against the same probe with no check (the ratio is the figure: the machine is
//!   shared and noisy).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use dataplane::datapath::megaflow_guard::MegaflowGuard;
use dataplane::ovs::unixctl::Unixctl;
use lab::bare_ovs::{BareOvs, send_udp};
use serde_json::{Value, json};

use crate::cni_add::percentile;
use crate::datapath_bench::median;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Scratch directory (the OVS files).
    pub dir: PathBuf,
    /// Namespace prefix.
    pub prefix: String,
    /// The port counts N (2N datapath flows each).
    pub ports: Vec<usize>,
}

/// One N's figures.
#[derive(Debug, Clone, Default)]
pub struct Point {
    pub ports: usize,
    pub dp_flows: usize,
    pub traced: usize,
    /// Median check wall time, ms.
    pub check_ms: f64,
    /// Median of two `revalidator/wait` rounds alone, ms (part of every check).
    pub settle_ms: f64,
    /// Probe latencies (µs) with no check running, and while checks run.
    pub idle_us: Vec<f64>,
    pub busy_us: Vec<f64>,
}

/// The results.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub points: Vec<Point>,
}

impl Report {
    pub fn to_json(&self) -> Value {
        json!({"points": self.points.iter().map(|p| json!({
            "ports": p.ports,
            "datapath_flows": p.dp_flows,
            "traced": p.traced,
            "check_ms": p.check_ms,
            "settle_ms": p.settle_ms,
            "probe_idle_us": {"p50": percentile(&p.idle_us, 0.5), "p99": percentile(&p.idle_us, 0.99), "max": max(&p.idle_us)},
            "probe_busy_us": {"p50": percentile(&p.busy_us, 0.5), "p99": percentile(&p.busy_us, 0.99), "max": max(&p.busy_us)},
        })).collect::<Vec<_>>()})
    }

    pub fn table(&self) -> String {
        let mut s = String::from(
            "megaflow guard on a bare ovs-vswitchd (2 datapath flows per port)\n\
             ports  dp flows  traced  check ms  (settle ms)  main-thread probe µs idle p50/p99/max -> during checks p50/p99/max  (p99 ratio)\n",
        );
        for p in &self.points {
            let q = |v: &[f64]| {
                format!(
                    "{:.0}/{:.0}/{:.0}",
                    percentile(v, 0.5),
                    percentile(v, 0.99),
                    max(v)
                )
            };
            s.push_str(&format!(
                "{:>5}  {:>8}  {:>6}  {:>8.0}  {:>11.0}  {} -> {}  ({:.1}x)\n",
                p.ports,
                p.dp_flows,
                p.traced,
                p.check_ms,
                p.settle_ms,
                q(&p.idle_us),
                q(&p.busy_us),
                percentile(&p.busy_us, 0.99) / percentile(&p.idle_us, 0.99).max(1.0)
            ));
        }
        s
    }
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// Runs the benchmark (takes the heavy-test lock: no lab test runs meanwhile).
pub async fn run(cfg: Config) -> Result<Report> {
    let _lock = crate::host::heavy_lock("megaflow-guard")?;
    let ovs = BareOvs::start(&cfg.dir.join("ovs"), &cfg.prefix).context("bare OVS")?;
    // flows stay while the checks run (the default idles them out after 10 s)
    crate::host::run_ok(std::process::Command::new("ovs-vsctl").args([
        &ovs.db(),
        "set",
        "Open_vSwitch",
        ".",
        "other_config:max-idle=600000",
    ]))?;
    let ctl = || Unixctl::new(ovs.ctl()).with_timeout(Duration::from_secs(30));
    let mut report = Report::default();
    for &n in &cfg.ports {
        let mut rules =
            String::from("table=0,priority=1,actions=drop\ntable=1,priority=1,actions=drop\n");
        for p in 1..=n {
            rules.push_str(&format!(
                "table=0,priority=10,udp,in_port=1,tp_dst={p},actions=ct(table=1,zone=5)\n\
                 table=1,priority=10,udp,ct_state=+trk,tp_dst={p},actions=output:2\n"
            ));
        }
        ovs.rules(&format!("rules-{n}"), &rules)?;
        ovs.appctl(&["revalidator/purge"])?;
        let ports: Vec<u16> = (1..=n)
            .map(|p| u16::try_from(p).context("at most 65535 ports"))
            .collect::<Result<_>>()?;
        // upcalls of a burst are dropped when the handlers' queues fill: resend until
        // (nearly) every port has its two flows
        for _ in 0..20 {
            send_udp(&ovs.na, ports.clone(), 1, Duration::from_micros(100))?;
            let flows = ovs.appctl(&["dpctl/dump-flows"])?.lines().count();
            if flows >= 2 * n {
                break;
            }
        }
        let guard_ctl = ctl();
        let mut guard = MegaflowGuard::new(ctl());
        // the first check also settles the flows the traffic installed
        let first = guard.check().await.context("guard check")?;
        anyhow::ensure!(
            !first.purged,
            "the guard purged a clean bench: {first:?} (a false positive)"
        );
        let mut point = Point {
            ports: n,
            dp_flows: first.flows,
            traced: first.traced,
            ..Point::default()
        };
        // the probe alone, then during 3 checks
        let (idle, _) = probe_while(ctl(), tokio::time::sleep(Duration::from_secs(3))).await;
        point.idle_us = idle;
        let (busy, times) = probe_while(ctl(), async {
            let mut times = Vec::new();
            for _ in 0..3 {
                let t = Instant::now();
                let c = guard.check().await;
                times.push((t.elapsed().as_secs_f64() * 1e3, c));
            }
            times
        })
        .await;
        point.busy_us = busy;
        let mut check_ms = Vec::new();
        for (ms, c) in times {
            let c = c.context("guard check")?;
            anyhow::ensure!(!c.purged, "the guard purged a clean bench: {c:?}");
            check_ms.push(ms);
        }
        point.check_ms = median(check_ms);
        let mut settle = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            for _ in 0..2 {
                guard_ctl.call("revalidator/wait", &[]).await?;
            }
            settle.push(t.elapsed().as_secs_f64() * 1e3);
        }
        point.settle_ms = median(settle);
        report.points.push(point);
    }
    Ok(report)
}

/// Probes the main thread (`version`, every 2 ms, from a task of its own) until `work`
/// is done: the latencies in µs, and `work`'s output.
async fn probe_while<T>(ctl: Unixctl, work: impl std::future::Future<Output = T>) -> (Vec<f64>, T) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                if ctl.call("version", &[]).await.is_ok() {
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            lat
        })
    };
    let out = work.await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    (probe.await.unwrap_or_default(), out)
}
