//! `zovn status` on the lab: central's members and northd by their pids and control
//! sockets, each node's report (its Node's datapath status), ovs-vswitchd's PMD statistics
//! and the agent's metrics inside the node's netns, pods from the lab's object store.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use crate::Lab;
use crate::apiserver::ApiClient;
use crate::apiserver::protocol::ResourceKind;
use crate::central::Db;
use diag::overview::{
    CentralRow, NodeRow, Overview, counter, datapath_report, pmd_busy, pod_problem, subnet_row,
};

/// `GET /metrics` from `127.0.0.1:port` inside netns `ns` (the node agent listens there).
pub fn metrics_in(ns: &str, port: u16) -> Option<String> {
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

fn pmd_busy_at(ctl: &Path) -> Option<f64> {
    pmd_busy(&crate::ctl::appctl(ctl, &["dpif-netdev/pmd-stats-show"]).ok()?)
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
            rows.push(CentralRow::database(what, i + 1, alive, raw.as_deref()));
        }
    }
    if let Some(n) = c.northd() {
        rows.push(CentralRow::northd(1, n.is_alive()));
    }
    rows
}

/// Gathers the overview of the lab in `dir`.
pub fn gather(dir: &Path) -> anyhow::Result<Overview> {
    let lab = Lab::open(dir)?;
    let mut api = ApiClient::connect(dir)?;
    let k8s_nodes = api.get(ResourceKind::Node)?;
    let pods = api.get(ResourceKind::Pod)?;
    let mut nodes = Vec::new();
    for n in lab.nodes() {
        let (datapath, reason, uplink) = datapath_report(
            k8s_nodes
                .iter()
                .find(|k| k["metadata"]["name"] == n.system_id.as_str()),
        );
        let agent_alive = lab
            .agents()
            .iter()
            .find(|a| a.netns.as_deref() == Some(n.netns.as_str()))
            .is_some_and(|a| a.is_alive());
        let metrics = metrics_in(&n.netns, crate::agent::AGENT_METRICS_PORT);
        nodes.push(NodeRow {
            node: n.system_id.clone(),
            agent_alive,
            datapath,
            reason,
            uplink,
            pmd_busy_percent: pmd_busy_at(&n.dir.join("run/ovs-vswitchd.ctl")),
            stale_flow_purges: metrics
                .as_deref()
                .and_then(|m| counter(m, "zstack_ovn_stale_megaflow_purges_total")),
            pinger: metrics
                .as_deref()
                .map(diag::overview::pinger::peer_probes)
                .unwrap_or_default(),
        });
    }
    Ok(Overview {
        central: central_rows(&lab),
        central_note: lab
            .central()
            .is_none()
            .then(|| "not started by this lab".to_string()),
        nodes,
        subnets: api
            .get(ResourceKind::Subnet)?
            .iter()
            .map(subnet_row)
            .collect(),
        subnets_note: None,
        pods: pods.iter().filter_map(pod_problem).collect(),
    })
}
