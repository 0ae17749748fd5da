//! `zovn status`: the lab on one screen — OVN central's health (each database member
//! alive, its Raft role, term and entries not yet committed/applied), each node's
//! datapath decision and why, its uplink, PMD load and the megaflow guard's purges, and the
//! pods with problems (no address and why, not Ready and why).

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::Lab;
use crate::apiserver::ApiClient;
use crate::apiserver::protocol::ResourceKind;
use crate::central::Db;

/// One ovsdb-server member or ovn-northd.
#[derive(Debug, Clone, Serialize)]
pub struct CentralRow {
    /// `NB`, `SB` or `northd`.
    pub what: String,
    pub member: usize,
    pub alive: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// Raft entries not yet committed / not yet applied (the member's lag).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncommitted: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unapplied: Option<u64>,
}

/// One node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRow {
    pub node: String,
    pub agent_alive: bool,
    pub datapath: String,
    pub reason: String,
    pub uplink: String,
    /// Busy share of the PMD threads' cycles since the last clear (`None`: no PMD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pmd_busy_percent: Option<f64>,
    /// Datapath flows the megaflow guard purged (stale verdicts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_flow_purges: Option<u64>,
}

/// A pod that needs the operator.
#[derive(Debug, Clone, Serialize)]
pub struct PodProblem {
    pub pod: String,
    pub problem: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    pub central: Vec<CentralRow>,
    pub nodes: Vec<NodeRow>,
    pub pods: Vec<PodProblem>,
}

/// `Entries not yet committed: N` style fields of `cluster/status`.
fn raft_count(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// `GET /metrics` from `127.0.0.1:port` inside netns `ns` (the node agent listens there).
fn metrics_in(ns: &str, port: u16) -> Option<String> {
    let f = std::fs::File::open(Path::new("/run/netns").join(ns)).ok()?;
    std::thread::spawn(move || {
        nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).ok()?;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    })
    .join()
    .ok()
    .flatten()
}

/// The sum of a counter's samples in Prometheus text.
fn counter(text: &str, name: &str) -> Option<u64> {
    let mut found = None;
    for l in text.lines().filter(|l| l.starts_with(name)) {
        let v: f64 = l.rsplit(' ').next()?.parse().ok()?;
        // counters are whole numbers
        *found.get_or_insert(0) += v as u64;
    }
    found
}

fn pmd_busy(ctl: &Path) -> Option<f64> {
    let text = crate::ctl::appctl(ctl, &["dpif-netdev/pmd-stats-show"]).ok()?;
    let stats = dataplane::pmd_stats::parse_pmd_stats(&text).ok()?;
    let busy: Vec<f64> = stats.iter().filter_map(|p| p.busy_percent()).collect();
    (!busy.is_empty()).then(|| busy.iter().sum::<f64>() / busy.len() as f64)
}

fn central_rows(lab: &Lab) -> Vec<CentralRow> {
    let Some(c) = lab.central() else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for (db, what) in [(Db::Nb, "NB"), (Db::Sb, "SB")] {
        for (i, m) in c.members(db).iter().enumerate() {
            let alive = m.is_alive();
            let raw = (alive && m.raft_remote.is_some())
                .then(|| crate::ctl::appctl(&m.unixctl, &["cluster/status", db.name()]).ok())
                .flatten();
            let st = raw.as_deref().map(crate::cluster::parse_cluster_status);
            rows.push(CentralRow {
                what: what.into(),
                member: i + 1,
                alive,
                role: st.as_ref().and_then(|s| s.role.clone()),
                term: st.as_ref().and_then(|s| s.term),
                uncommitted: raw
                    .as_deref()
                    .and_then(|t| raft_count(t, "Entries not yet committed:")),
                unapplied: raw
                    .as_deref()
                    .and_then(|t| raft_count(t, "Entries not yet applied:")),
            });
        }
    }
    if let Some(n) = c.northd() {
        rows.push(CentralRow {
            what: "northd".into(),
            member: 1,
            alive: n.is_alive(),
            role: None,
            term: None,
            uncommitted: None,
            unapplied: None,
        });
    }
    rows
}

fn pod_problem(p: &Value) -> Option<PodProblem> {
    let key = format!(
        "{}/{}",
        p["metadata"]["namespace"].as_str()?,
        p["metadata"]["name"].as_str()?
    );
    let ann = &p["metadata"]["annotations"];
    if let Some(e) = ann[api::keys::IPAM_ERROR].as_str() {
        return Some(PodProblem {
            pod: key,
            problem: format!("no address: {e}"),
        });
    }
    let ready = p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    (ready["status"] != "True").then(|| PodProblem {
        pod: key,
        problem: format!(
            "not Ready: {}",
            ready["message"].as_str().unwrap_or("(no message)")
        ),
    })
}

/// Gathers the overview of the lab in `dir`.
pub fn gather(dir: &Path) -> anyhow::Result<Overview> {
    let lab = Lab::open(dir)?;
    let mut api = ApiClient::connect(dir)?;
    let k8s_nodes = api.get(ResourceKind::Node)?;
    let pods = api.get(ResourceKind::Pod)?;
    let mut nodes = Vec::new();
    for n in lab.nodes() {
        let status: Option<Value> = k8s_nodes
            .iter()
            .find(|k| k["metadata"]["name"] == n.system_id.as_str())
            .and_then(|k| k["metadata"]["annotations"][api::keys::DATAPATH_STATUS].as_str())
            .and_then(|s| serde_json::from_str(s).ok());
        let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
        let (datapath, reason, uplink) = match &status {
            Some(s) => (
                text(&s["datapath"]),
                text(&s["reason"]),
                match (s["uplink"]["port"].as_str(), s["uplink"]["type"].as_str()) {
                    (Some(p), Some(t)) if !p.is_empty() => format!("{p}/{t}"),
                    _ => "-".into(),
                },
            ),
            None => ("-".into(), "no report from the agent".into(), "-".into()),
        };
        let agent_alive = lab
            .agents()
            .iter()
            .find(|a| a.netns.as_deref() == Some(n.netns.as_str()))
            .is_some_and(|a| a.is_alive());
        nodes.push(NodeRow {
            node: n.system_id.clone(),
            agent_alive,
            datapath,
            reason,
            uplink,
            pmd_busy_percent: pmd_busy(&n.dir.join("run/ovs-vswitchd.ctl")),
            stale_flow_purges: metrics_in(&n.netns, crate::agent::AGENT_METRICS_PORT)
                .and_then(|m| counter(&m, "zstack_ovn_stale_megaflow_purges_total")),
        });
    }
    Ok(Overview {
        central: central_rows(&lab),
        nodes,
        pods: pods.iter().filter_map(pod_problem).collect(),
    })
}

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// The overview as text within 80 columns.
pub fn text(o: &Overview) -> String {
    let mut s = String::from("OVN central\n");
    for c in &o.central {
        let mut line = format!(
            "  {:<6} {}  {}",
            c.what,
            c.member,
            if c.alive { "running" } else { "DOWN" }
        );
        if let Some(r) = &c.role {
            line += &format!(", {r}");
        }
        if let Some(t) = c.term {
            line += &format!(", term {t}");
        }
        if let (Some(u), Some(a)) = (c.uncommitted, c.unapplied) {
            line += &format!(", lag {u} uncommitted / {a} unapplied");
        }
        s += &cut(&line, 80);
        s.push('\n');
    }
    s += "NODE              AGENT  DATAPATH  UPLINK          PMD BUSY  PURGES\n";
    for n in &o.nodes {
        s += &format!(
            "{:<17} {:<6} {:<9} {:<15} {:>8}  {:>6}\n",
            cut(&n.node, 17),
            if n.agent_alive { "up" } else { "DOWN" },
            cut(&n.datapath, 9),
            cut(&n.uplink, 15),
            n.pmd_busy_percent
                .map(|b| format!("{b:.0}%"))
                .unwrap_or_else(|| "-".into()),
            n.stale_flow_purges
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into())
        );
        s += &cut(&format!("  why: {}", n.reason), 80);
        s.push('\n');
    }
    if o.pods.is_empty() {
        s += "PODS: no problems\n";
    } else {
        s += "PODS WITH PROBLEMS\n";
        for p in &o.pods {
            s += &cut(&format!("  {}: {}", p.pod, p.problem), 80);
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_raft_lag_are_read() {
        let m = "# TYPE zstack_ovn_stale_megaflow_purges_total counter\nzstack_ovn_stale_megaflow_purges_total 3\nother 1\n";
        assert_eq!(
            counter(m, "zstack_ovn_stale_megaflow_purges_total"),
            Some(3)
        );
        assert_eq!(counter(m, "nothing"), None);
        let c = "Role: leader\nEntries not yet committed: 0\nEntries not yet applied: 2\n";
        assert_eq!(raft_count(c, "Entries not yet applied:"), Some(2));
    }

    #[test]
    fn long_cells_are_cut_to_keep_80_columns() {
        let o = Overview {
            central: vec![],
            nodes: vec![NodeRow {
                node: "a-very-long-node-name-indeed".into(),
                agent_alive: true,
                datapath: "afxdp".into(),
                reason: "x".repeat(200),
                uplink: "zovnu1/afxdp".into(),
                pmd_busy_percent: Some(12.5),
                stale_flow_purges: Some(0),
            }],
            pods: vec![PodProblem {
                pod: "ns/p".into(),
                problem: "y".repeat(200),
            }],
        };
        let t = text(&o);
        assert!(t.lines().all(|l| l.chars().count() <= 80), "{t}");
        assert!(t.contains("12%") || t.contains("13%"), "{t}");
    }
}
