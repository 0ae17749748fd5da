//! `zovn status` on a real cluster, through the API server with the operator's
//! kubeconfig (see [`crate::kubectl`]):
//!
//! - OVN central: the release's central pods (`central`, or the Raft members `nbdb-N` /
//!   `sbdb-N`), each database container and northd ready or not, and each member's Raft
//!   role, term and lag (`cluster/status` in its container; a standalone database has
//!   none). Without central pods (external mode) the platform owns OVN, and the screen
//!   says so;
//! - nodes: each Node's agent report (`network.zstack.io/datapath-status`), its agent pod
//!   Ready, the PMD busy share (`ovs-appctl dpif-netdev/pmd-stats-show` in the agent's
//!   pod) and the megaflow guard's purges (the agent's `/metrics` through the API
//!   server's pod proxy);
//! - pods: an IPAM error on the pod, or not Ready with the Ready condition's message and
//!   the last `FailedCreatePodSandBox` event (the CNI's error) for it.

use serde_json::Value;

use super::{
    CentralRow, NodeRow, Overview, PodProblem, counter, datapath_report, pmd_busy, pod_problem,
    subnet_row,
};
use crate::kubectl::Kubectl;
use crate::release::{Release, ReleasePod};

/// The agent's metrics port when its `--metrics-addr` does not say (the chart's default).
const METRICS_PORT: u16 = 10660;

fn central_rows(k: &Kubectl, release: &Release) -> Vec<CentralRow> {
    let mut rows = Vec::new();
    let mut members = [0usize; 2];
    let mut northd = 0usize;
    for p in release.central() {
        for (i, (db, schema)) in [("nb", "OVN_Northbound"), ("sb", "OVN_Southbound")]
            .iter()
            .enumerate()
        {
            let container = format!("{db}db");
            if !p.containers.iter().any(|(n, _)| *n == container) {
                continue;
            }
            members[i] += 1;
            let alive = p.container_is_ready(&container);
            let raw = alive
                .then(|| {
                    let ctl = format!("/var/run/ovn/ovn{db}_db.ctl");
                    let cmd: Vec<String> = ["ovs-appctl", "-t", &ctl, "cluster/status", schema]
                        .iter()
                        .map(|s| s.to_string())
                        .collect();
                    // a standalone database answers with an error: no Raft figures
                    k.exec(&p.namespace, &p.name, &container, &cmd).ok()
                })
                .flatten();
            rows.push(CentralRow::database(
                &db.to_uppercase(),
                members[i],
                alive,
                raw.as_deref(),
            ));
        }
        if p.containers.iter().any(|(n, _)| n == "northd") {
            northd += 1;
            rows.push(CentralRow::northd(northd, p.container_is_ready("northd")));
        }
    }
    rows.sort_by(|a, b| a.what.cmp(&b.what).then(a.member.cmp(&b.member)));
    rows
}

fn node_row(k: &Kubectl, node: &Value, agent: Option<&ReleasePod>) -> NodeRow {
    let name = node["metadata"]["name"].as_str().unwrap_or("").to_string();
    let (datapath, reason, uplink) = datapath_report(Some(node));
    let exec = |cmd: &[&str]| -> Option<String> {
        let a = agent?;
        let cmd: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        k.exec(&a.namespace, &a.name, "agent", &cmd).ok()
    };
    let ctl = agent
        .and_then(|a| a.arg("agent", "--vswitchd-ctl"))
        .unwrap_or_else(|| "/var/run/openvswitch/ovs-vswitchd.ctl".into());
    let port = agent
        .and_then(|a| a.arg("agent", "--metrics-addr"))
        .and_then(|m| m.rsplit(':').next()?.parse().ok())
        .unwrap_or(METRICS_PORT);
    let metrics = agent.and_then(|a| k.pod_proxy_get(&a.namespace, &a.name, port, "metrics").ok());
    NodeRow {
        node: name,
        agent_alive: agent.is_some_and(|a| a.ready),
        datapath,
        reason,
        uplink,
        pmd_busy_percent: exec(&["ovs-appctl", "-t", &ctl, "dpif-netdev/pmd-stats-show"])
            .as_deref()
            .and_then(pmd_busy),
        stale_flow_purges: metrics
            .as_deref()
            .and_then(|m| counter(m, "zstack_ovn_stale_megaflow_purges_total")),
        pinger: metrics
            .as_deref()
            .map(super::pinger::peer_probes)
            .unwrap_or_default(),
    }
}

/// The last `FailedCreatePodSandBox` message for each pod (`ns/name`): the CNI's error.
fn sandbox_failures(k: &Kubectl) -> Vec<(String, String, String)> {
    let Ok(v) = k.get_json(&[
        "events",
        "--all-namespaces",
        "--field-selector",
        "reason=FailedCreatePodSandBox",
    ]) else {
        return Vec::new();
    };
    v["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|e| {
                    let o = &e["involvedObject"];
                    Some((
                        format!("{}/{}", o["namespace"].as_str()?, o["name"].as_str()?),
                        e["lastTimestamp"].as_str().unwrap_or("").to_string(),
                        e["message"].as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Gathers the overview of the cluster `k` reaches.
pub fn gather(k: &Kubectl) -> anyhow::Result<Overview> {
    let release = Release::discover(k)?;
    let nodes = k.list_all("nodes")?;
    let pods = k.list_all("pods")?;
    let central = central_rows(k, &release);
    let central_note = central
        .is_empty()
        .then(|| "no central pods in the release: the platform's OVN (external mode)".to_string());
    let nodes = nodes
        .iter()
        .map(|n| {
            let name = n["metadata"]["name"].as_str().unwrap_or("");
            node_row(k, n, release.agent_on(name).ok())
        })
        .collect();
    let failures = sandbox_failures(k);
    let problems = pods
        .iter()
        .filter(|p| p["status"]["phase"] != "Succeeded")
        .filter_map(|p| {
            let mut pr: PodProblem = pod_problem(p)?;
            if let Some((_, _, msg)) = failures
                .iter()
                .filter(|(key, _, _)| *key == pr.pod)
                .max_by(|a, b| a.1.cmp(&b.1))
            {
                pr.problem = format!("{}; sandbox: {msg}", pr.problem);
            }
            Some(pr)
        })
        .collect();
    let (subnets, subnets_note) = match k.list_all("subnets.network.zstack.io") {
        Ok(v) => (v.iter().map(subnet_row).collect(), None),
        Err(e) => (Vec::new(), Some(format!("Subnets not listed: {e}"))),
    };
    Ok(Overview {
        central,
        central_note,
        nodes,
        subnets,
        subnets_note,
        pods: problems,
    })
}
