//! `zovn status`: a lab or a cluster on one screen — OVN central's health (each database
//! member alive, its Raft role, term and entries not yet committed/applied), each node's
//! datapath decision and why, its uplink, PMD load and the megaflow guard's purges, and the
//! pods with problems (no address and why, not Ready and why).
//!
//! - the lab's (the `lab` crate's `diag_backends::overview`): read from a lab's daemons
//!   and sockets;
//! - [`cluster_source`]: read from a cluster through the API server and `kubectl exec`
//!   into the release's pods.

pub mod cluster_source;
pub mod pinger;

use serde::Serialize;
use serde_json::Value;

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

impl CentralRow {
    /// A database member; `raw` is its `cluster/status` output (none: standalone, or not
    /// running).
    pub fn database(what: &str, member: usize, alive: bool, raw: Option<&str>) -> Self {
        let st = raw.map(crate::raft_status::parse_cluster_status);
        CentralRow {
            what: what.into(),
            member,
            alive,
            role: st.as_ref().and_then(|s| s.role.clone()),
            term: st.as_ref().and_then(|s| s.term),
            uncommitted: raw.and_then(|t| raft_count(t, "Entries not yet committed:")),
            unapplied: raw.and_then(|t| raft_count(t, "Entries not yet applied:")),
        }
    }

    /// An ovn-northd.
    pub fn northd(member: usize, alive: bool) -> Self {
        CentralRow {
            what: "northd".into(),
            member,
            alive,
            role: None,
            term: None,
            uncommitted: None,
            unapplied: None,
        }
    }
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
    /// What its pinger measured to the other nodes (empty: pinger off, or no metrics).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pinger: Vec<pinger::PeerProbe>,
}

/// A pod that needs the operator.
#[derive(Debug, Clone, Serialize)]
pub struct PodProblem {
    pub pod: String,
    pub problem: String,
}

/// One Subnet: where its pods are and whether it serves.
#[derive(Debug, Clone, Serialize)]
pub struct SubnetRow {
    pub name: String,
    /// `Active`, `Failed`, or `Pending` before the controller looked at it.
    pub phase: String,
    pub cidr: String,
    /// The logical switch serving it (external mode: the platform's, `spec.externalLogicalSwitch`).
    pub switch: String,
    pub platform_switch: bool,
    /// The platform's security groups its pods are in (status: in effect).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<String>,
    /// Why it is not Active.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The row of a Subnet object (JSON as the API server serves it).
pub fn subnet_row(v: &Value) -> SubnetRow {
    let str_at = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let spec = &v["spec"];
    let status = &v["status"];
    let platform = spec["externalLogicalSwitch"]
        .as_str()
        .filter(|s| !s.is_empty());
    let phase = status["phase"].as_str().unwrap_or("Pending").to_string();
    let reason = status["reason"]
        .as_str()
        .filter(|r| !r.is_empty() && phase != "Active")
        .map(str::to_string);
    SubnetRow {
        name: str_at(&v["metadata"]["name"]),
        cidr: str_at(&spec["cidr"]),
        switch: platform
            .map(str::to_string)
            .unwrap_or_else(|| str_at(&status["logicalSwitch"])),
        platform_switch: platform.is_some(),
        security_groups: status["securityGroups"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|g| g.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        phase,
        reason,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    pub central: Vec<CentralRow>,
    /// Why there are no central rows (external mode: the platform's OVN).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub central_note: Option<String>,
    pub nodes: Vec<NodeRow>,
    pub subnets: Vec<SubnetRow>,
    /// Why there are no Subnet rows (they could not be listed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnets_note: Option<String>,
    pub pods: Vec<PodProblem>,
}

/// `Entries not yet committed: N` style fields of `cluster/status`.
pub fn raft_count(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// The sum of a counter's samples in Prometheus text.
pub fn counter(text: &str, name: &str) -> Option<u64> {
    let mut found = None;
    for l in text.lines().filter(|l| l.starts_with(name)) {
        let v: f64 = l.rsplit(' ').next()?.parse().ok()?;
        // counters are whole numbers
        *found.get_or_insert(0) += v as u64;
    }
    found
}

/// The PMD threads' mean busy share from `dpif-netdev/pmd-stats-show` (`None`: no PMD).
pub fn pmd_busy(pmd_stats_show: &str) -> Option<f64> {
    let stats = ovsdb::pmd_stats::parse_pmd_stats(pmd_stats_show).ok()?;
    let busy: Vec<f64> = stats.iter().filter_map(|p| p.busy_percent()).collect();
    (!busy.is_empty()).then(|| busy.iter().sum::<f64>() / busy.len() as f64)
}

/// A Node's datapath, the reason, and `uplink-port/type` from its agent's report
/// (`network.zstack.io/datapath-status`).
pub fn datapath_report(node: Option<&Value>) -> (String, String, String) {
    let status: Option<Value> = node
        .and_then(|k| k["metadata"]["annotations"][api::keys::DATAPATH_STATUS].as_str())
        .and_then(|s| serde_json::from_str(s).ok());
    let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
    match &status {
        Some(s) => (
            text(&s["datapath"]),
            text(&s["reason"]),
            match (s["uplink"]["port"].as_str(), s["uplink"]["type"].as_str()) {
                (Some(p), Some(t)) if !p.is_empty() => format!("{p}/{t}"),
                _ => "-".into(),
            },
        ),
        None => ("-".into(), "no report from the agent".into(), "-".into()),
    }
}

pub fn pod_problem(p: &Value) -> Option<PodProblem> {
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
    if let Some(n) = &o.central_note {
        s += &cut(&format!("  {n}"), 80);
        s.push('\n');
    }
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
    s += &pinger::matrix(
        &o.nodes
            .iter()
            .map(|n| (n.node.clone(), n.pinger.clone()))
            .collect::<Vec<_>>(),
    );
    s += "SUBNET            PHASE    CIDR                LOGICAL SWITCH\n";
    if let Some(n) = &o.subnets_note {
        s += &cut(&format!("  {n}"), 80);
        s.push('\n');
    }
    for n in &o.subnets {
        s += &cut(
            &format!(
                "{:<17} {:<8} {:<19} {}{}",
                cut(&n.name, 17),
                cut(&n.phase, 8),
                cut(&n.cidr, 19),
                n.switch,
                if n.platform_switch { " (platform)" } else { "" }
            ),
            80,
        );
        s.push('\n');
        if !n.security_groups.is_empty() {
            s += &cut(
                &format!(
                    "  platform security groups: {}",
                    n.security_groups.join(", ")
                ),
                80,
            );
            s.push('\n');
        }
        if let Some(r) = &n.reason {
            s += &cut(&format!("  why: {r}"), 80);
            s.push('\n');
        }
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
            central_note: None,
            nodes: vec![NodeRow {
                node: "a-very-long-node-name-indeed".into(),
                agent_alive: true,
                datapath: "afxdp".into(),
                reason: "x".repeat(200),
                uplink: "zovnu1/afxdp".into(),
                pmd_busy_percent: Some(12.5),
                stale_flow_purges: Some(0),
                pinger: Vec::new(),
            }],
            subnets: vec![subnet_row(&serde_json::json!({
                "metadata": {"name": "a-platform-subnet-with-a-long-name"},
                "spec": {"cidr": "10.99.0.0/24", "externalLogicalSwitch": "platform-ls",
                         "securityGroups": ["sg_web", "sg_db"]},
                "status": {"phase": "Failed", "securityGroups": ["sg_web"],
                           "reason": "z".repeat(200)}}))],
            subnets_note: None,
            pods: vec![PodProblem {
                pod: "ns/p".into(),
                problem: "y".repeat(200),
            }],
        };
        let t = text(&o);
        assert!(t.lines().all(|l| l.chars().count() <= 80), "{t}");
        assert!(t.contains("12%") || t.contains("13%"), "{t}");
        assert!(
            t.contains("Failed   10.99.0.0/24        platform-ls (platform)"),
            "{t}"
        );
        // the groups in effect (status), not those asked for
        assert!(t.contains("  platform security groups: sg_web\n"), "{t}");
        assert!(t.contains("  why: zzz"), "{t}");
    }

    #[test]
    fn a_subnet_of_ours_shows_its_switch_and_no_reason_when_active() {
        let r = subnet_row(&serde_json::json!({
            "metadata": {"name": "default"},
            "spec": {"cidr": "10.16.0.0/16"},
            "status": {"phase": "Active", "logicalSwitch": "zovn-default", "reason": ""}}));
        assert_eq!(
            (
                r.switch.as_str(),
                r.platform_switch,
                r.reason,
                r.phase.as_str()
            ),
            ("zovn-default", false, None, "Active")
        );
        // not looked at yet
        let r = subnet_row(&serde_json::json!({"metadata": {"name": "n"}, "spec": {}}));
        assert_eq!(r.phase, "Pending");
    }
}
