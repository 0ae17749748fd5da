//! `zovn lab stats [--node N] [-o table|json]`: per node, the datapath counters the agent
//! exports as metrics — PMD threads, rx queue usage, and the agent's ports — collected the
//! same way (`dataplane::datapath::metrics::collect`: vswitchd's unixctl socket and one
//! `select` of the Interface statistics).

use std::path::PathBuf;

use anyhow::Context;
use dataplane::datapath::metrics::{DatapathSnapshot, PortSource, collect, connect_db};
use dataplane::ovs::unixctl::Unixctl;
use lab::Lab;

use super::args::{StatsArgs, StatsOutput};

/// One node's collection.
#[derive(Debug, serde::Serialize)]
struct NodeStats {
    node: String,
    vswitchd_ctl: PathBuf,
    #[serde(flatten)]
    snapshot: DatapathSnapshot,
}

pub fn run(a: StatsArgs) -> anyhow::Result<()> {
    let lab =
        Lab::open(&a.dir.dir).with_context(|| format!("no lab at {}", a.dir.dir.display()))?;
    let nodes: Vec<_> = lab
        .nodes()
        .iter()
        .filter(|n| a.node.is_none_or(|i| n.index == i))
        .cloned()
        .collect();
    if nodes.is_empty() {
        anyhow::bail!(
            "no node {} in the lab ({} nodes)",
            a.node.unwrap_or(0),
            lab.nodes().len()
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let stats: Vec<NodeStats> = rt.block_on(async {
        let mut out = Vec::new();
        for n in &nodes {
            let ctl = n.dir.join("run/ovs-vswitchd.ctl");
            let db = connect_db(&n.db_remote).await;
            let source = match &db {
                Ok(db) => PortSource::Db(db),
                Err(_) => PortSource::Unavailable,
            };
            let mut snapshot = collect(&Unixctl::new(&ctl), source).await;
            if let Err(e) = &db {
                snapshot.ports_error = Some(format!("{}: {e}", n.db_remote));
            }
            if let Ok(db) = db {
                db.close().await;
            }
            out.push(NodeStats {
                node: n.system_id.clone(),
                vswitchd_ctl: ctl,
                snapshot,
            });
        }
        out
    });
    match a.output {
        StatsOutput::Json => println!("{}", serde_json::to_string_pretty(&stats)?),
        StatsOutput::Table => {
            for n in &stats {
                print!("{}", table(n));
            }
        }
    }
    Ok(())
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn table(n: &NodeStats) -> String {
    use std::fmt::Write;
    let s = &n.snapshot;
    let mut o = String::new();
    let _ = writeln!(o, "node {} ({})", n.node, n.vswitchd_ctl.display());
    if let Some(e) = &s.vswitchd_error {
        let _ = writeln!(o, "  ovs-vswitchd: DOWN ({e})");
    }
    if s.vswitchd_up {
        let _ = writeln!(
            o,
            "  {:<8} {:>5} {:>14} {:>16} {:>14}",
            "THREAD", "NUMA", "PACKETS", "BUSY% (total)", "CYCLES/PKT"
        );
        for t in &s.pmd {
            let (core, numa) = t.thread.labels();
            let name = if core == "main" {
                core
            } else {
                format!("core {core}")
            };
            let _ = writeln!(
                o,
                "  {:<8} {:>5} {:>14} {:>16} {:>14}",
                name,
                if numa.is_empty() { "-".into() } else { numa },
                t.packets_received,
                opt(t.busy_percent().map(|b| format!("{b:.1}"))),
                opt(t.avg_cycles_per_packet.map(|c| format!("{c:.0}"))),
            );
        }
        let window = opt(s.rxq.window_secs);
        let _ = writeln!(
            o,
            "  {:<8} {:<20} {:>5} {:>8} {:>12}",
            "RXQ CORE",
            "PORT",
            "QUEUE",
            "ENABLED",
            format!("USAGE% ({window}s)")
        );
        for p in &s.rxq.pmds {
            for q in &p.rxqs {
                let _ = writeln!(
                    o,
                    "  {:<8} {:<20} {:>5} {:>8} {:>12}",
                    p.core,
                    q.port,
                    q.queue,
                    q.enabled,
                    opt(q.usage_percent),
                );
            }
            let _ = writeln!(
                o,
                "  {:<8} {:<20} {:>5} {:>8} {:>12}",
                p.core,
                "(overhead)",
                "",
                "",
                opt(p.overhead_percent)
            );
        }
    }
    if let Some(e) = &s.ports_error {
        let _ = writeln!(o, "  ports: unavailable ({e})");
    }
    let _ = writeln!(
        o,
        "  {:<16} {:<24} {:<7} {:>12} {:>12} {:>9} {:>9} {:>7}",
        "PORT", "POD", "TYPE", "RX PKTS", "TX PKTS", "RX DROP", "TX DROP", "ERRORS"
    );
    for p in &s.ports {
        let errors = match (p.get("rx_errors"), p.get("tx_errors")) {
            (None, None) => None,
            (r, t) => Some(r.unwrap_or(0) + t.unwrap_or(0)),
        };
        let _ = writeln!(
            o,
            "  {:<16} {:<24} {:<7} {:>12} {:>12} {:>9} {:>9} {:>7}",
            p.port,
            if p.pod.is_empty() { "-" } else { &p.pod },
            if p.kind.is_empty() { "system" } else { &p.kind },
            opt(p.get("rx_packets")),
            opt(p.get("tx_packets")),
            opt(p.get("rx_dropped")),
            opt(p.get("tx_dropped")),
            opt(errors),
        );
    }
    o
}
