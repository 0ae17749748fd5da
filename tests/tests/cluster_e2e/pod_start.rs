//! Pod start on real kubelets (issue 33), measured against a plain CNI on the same cluster.
//!
//! - `latency`: [`BURST`] pods created back to back in three groups of equal size, one per
//!   pool and port kind: node1 (the DPDK pool: AF_XDP ports in ovs-vswitchd-dpdk), node2
//!   (the default pool: AF_XDP ports) and node2 again with `network.zstack.io/datapath:
//!   kernel` (kernel ports). Creation → Ready as a watch sees it, p50/p99 per group, with
//!   the time split by kubelet's `run_podsandbox` histogram (containerd's sandbox, the CNI
//!   ADD inside) and the agents' `zstack_ovn_cni_add_seconds`.
//! - `reference-cni` (after `uninstall`, when the nodes have no pod network): the same
//!   burst, same groups on the same nodes, with the CNI project's `bridge` + `host-local`
//!   (Debian's containernetworking-plugins) as the nodes' only network; each pod's address
//!   is checked to come from the reference range. Then every trace of it is removed (pods,
//!   conflist, binaries, bridge, IPAM state) before `external-mode`.
//!
//! The product's figures are printed as ratios to the reference's, per group, beside the
//! issue's target (≤ 1.3× at p50 and p99). They are measurements of a shared 2-core machine,
//! not asserted; what is asserted is that every pod of both bursts became Ready on the
//! network it was meant to get.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};
use tests::e2e::objects::{
    create, create_namespace, is_ready, label, name, node_is_ready, node_of, sleeper,
};
use tests::e2e::usage::{ContainerCgroup, Reading, cores};
use tests::e2e::{
    histogram_quantile, label_values, metrics_page, percentile, prometheus_buckets, wait_until,
};

use super::{E2e, INSTANCE, LAB_FIGURE, NS, SYS, pods_ready};

/// Pods per burst: [`GROUPS`] groups of 17.
pub const BURST: usize = 51;
/// The reference burst's namespace.
const REF_NS: &str = "e2e-refcni";
/// The reference network's conflist, bridge and IPAM state on each node.
const REF_CONF: &str = "/etc/cni/net.d/05-reference.conflist";
const REF_BRIDGE: &str = "cniref0";
const REF_IPAM_DIR: &str = "/var/lib/cni/reference";
/// The plugins the reference copies next to the product's shim (and removes).
const REF_PLUGINS: [&str; 2] = ["bridge", "host-local"];

/// A group of the burst: its pods' node and annotations.
struct Group {
    name: &'static str,
    node: usize,
    annotations: Option<Value>,
}

fn groups() -> [Group; 3] {
    [
        Group {
            name: "DPDK pool, AF_XDP port (node1)",
            node: 1,
            annotations: None,
        },
        Group {
            name: "default pool, AF_XDP port (node2)",
            node: 2,
            annotations: None,
        },
        Group {
            name: "default pool, kernel port (node2)",
            node: 2,
            annotations: Some(json!({"network.zstack.io/datapath": "kernel"})),
        },
    ]
}

/// One burst's figures: creation → Ready (ms, sorted) per group, in [`groups`] order.
#[derive(Debug, Clone, Default)]
pub struct Burst {
    groups: Vec<(&'static str, Vec<f64>)>,
}

impl Burst {
    fn p(&self, group: usize, q: f64) -> f64 {
        self.groups
            .get(group)
            .map_or(f64::NAN, |(_, v)| percentile(v, q))
    }
}

/// Kubelet's `/metrics` on node `i`, through the API server's node proxy.
async fn kubelet_metrics(e: &E2e, i: usize) -> Result<String> {
    let req = http::Request::get(format!("/api/v1/nodes/node{i}/proxy/metrics"))
        .body(Vec::new())
        .context("build the kubelet /metrics request")?;
    e.client
        .request_text(req)
        .await
        .with_context(|| format!("GET node{i}'s kubelet /metrics"))
}

/// The histograms that split a pod's start on node `i`: kubelet's sandbox creation (CNI
/// ADD inside) and (`agents`) the agent's CNI ADD.
async fn split_scrape(e: &E2e, i: usize, agents: bool) -> Vec<(String, Vec<(f64, u64)>)> {
    let mut out = Vec::new();
    if let Ok(text) = kubelet_metrics(e, i).await {
        let sandbox = prometheus_buckets(
            &text,
            "kubelet_runtime_operations_duration_seconds",
            Some("operation_type=\"run_podsandbox\""),
        );
        if let Ok(b) = sandbox {
            out.push(("kubelet RunPodSandbox (CNI ADD inside)".to_string(), b));
        }
    }
    if agents {
        let addr = format!("{}:10665", lab::kubecluster::node_mgmt_ip(i));
        if let Ok(page) = metrics_page(&addr) {
            if let Ok(b) = prometheus_buckets(&page, "zstack_ovn_cni_add_seconds", None) {
                out.push(("agent CNI ADD".to_string(), b));
            }
            // the ADD's phases (summed over the ports' datapaths)
            const PHASES: &str = "zstack_ovn_cni_add_phase_seconds";
            for ph in label_values(&page, PHASES, "phase") {
                let filter = format!("phase=\"{ph}\"");
                if let Ok(b) = prometheus_buckets(&page, PHASES, Some(&filter)) {
                    out.push((format!("ADD phase {ph}"), b));
                }
            }
        }
    }
    out
}

/// Creates the burst in `ns` and waits until every pod is Ready; prints the figures and
/// the time split. `agents`: the product's agents run (their CNI ADD histograms).
async fn burst(e: &E2e, ns: &str, agents: bool) -> Result<Burst> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let pods: Api<Pod> = Api::namespaced(e.client.clone(), ns);
    let ready = Arc::new(Mutex::new(BTreeMap::<String, Instant>::new()));
    let seen = ready.clone();
    let stream = watcher(
        pods.clone(),
        watcher::Config::default().labels("e2e=latency"),
    )
    .applied_objects();
    let watch = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            if let Ok(p) = ev
                && is_ready(&p)
                && let Ok(mut m) = seen.lock()
            {
                m.entry(name(&p)).or_insert_with(Instant::now);
            }
        }
    });
    let mut before = Vec::new();
    for i in 1..=2 {
        before.push(split_scrape(e, i, agents).await);
    }
    // the watch is established before the first pod is created
    tokio::time::sleep(Duration::from_millis(500)).await;
    let gs = groups();
    let mut created = BTreeMap::new();
    for i in 0..BURST {
        let g = i % gs.len();
        let n = format!("lat-{i:02}");
        created.insert(n.clone(), (g, Instant::now()));
        let node = format!("node{}", gs[g].node);
        let mut pod = sleeper(ns, &n, Some(&node), json!({"e2e": "latency"}));
        if let Some(a) = &gs[g].annotations {
            pod["metadata"]["annotations"] = a.clone();
        }
        create(&pods, pod).await?;
    }
    let r = wait_until(
        &format!("{BURST} pods Ready as seen by the watch"),
        Duration::from_secs(300),
        || async { Ok((ready.lock().map_or(0, |m| m.len()) == BURST).then_some(())) },
    )
    .await;
    watch.abort();
    if let Err(err) = r {
        let n = ready.lock().map_or(0, |m| m.len());
        let listed = pods_ready(e, ns, "e2e=latency", BURST, Duration::from_secs(1)).await;
        bail!("{err:#}: the watch saw {n} Ready; {:?}", listed.err());
    }
    let ready = ready
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    let mut out = Burst {
        groups: gs.iter().map(|g| (g.name, Vec::new())).collect(),
    };
    for (n, (g, t0)) in &created {
        let ms = ready[n].duration_since(*t0).as_secs_f64() * 1000.0;
        out.groups[*g].1.push(ms);
    }
    let mut all = Vec::new();
    for (gname, v) in &mut out.groups {
        v.sort_by(f64::total_cmp);
        all.extend_from_slice(v);
        println!(
            "    {gname}: {} pods, creation → Ready p50 {:.0} ms, p99 {:.0} ms",
            v.len(),
            percentile(v, 50.0),
            percentile(v, 99.0)
        );
    }
    all.sort_by(f64::total_cmp);
    println!(
        "    all {BURST}: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        percentile(&all, 50.0),
        percentile(&all, 99.0),
        all.last().copied().unwrap_or(f64::NAN)
    );
    // the API server's view, 1 s resolution: creation → scheduled (the scheduler), the
    // container running → Ready (kubelet's status report)
    let listed = pods_ready(e, ns, "e2e=latency", BURST, Duration::from_secs(5)).await?;
    let (mut sched, mut ready_after_start) = (Vec::new(), Vec::new());
    for p in &listed {
        let (Some(created), Some(st)) = (p.metadata.creation_timestamp.as_ref(), p.status.as_ref())
        else {
            continue;
        };
        let created = created.0.as_millisecond();
        let cond = |t: &str| {
            st.conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == t)?
                .last_transition_time
                .as_ref()
                .map(|x| x.0.as_millisecond())
        };
        let started = st
            .container_statuses
            .as_ref()
            .and_then(|cs| {
                cs.first()?
                    .state
                    .as_ref()?
                    .running
                    .as_ref()?
                    .started_at
                    .as_ref()
            })
            .map(|x| x.0.as_millisecond());
        if let Some(s) = cond("PodScheduled") {
            sched.push((s - created) as f64);
        }
        if let (Some(r), Some(c)) = (cond("Ready"), started) {
            ready_after_start.push((r - c) as f64);
        }
    }
    sched.sort_by(f64::total_cmp);
    ready_after_start.sort_by(f64::total_cmp);
    println!(
        "    API timestamps (1 s resolution): created → scheduled p50 {:.0} ms, p99 {:.0} ms; container running → Ready p50 {:.0} ms, p99 {:.0} ms",
        percentile(&sched, 50.0),
        percentile(&sched, 99.0),
        percentile(&ready_after_start, 50.0),
        percentile(&ready_after_start, 99.0)
    );
    for (i, b) in (1..=2).zip(&before) {
        let after = split_scrape(e, i, agents).await;
        let parts: Vec<String> = after
            .iter()
            .map(|(what, a)| {
                // a histogram with no series before the burst (an ADD phase's) starts at 0
                let b = b
                    .iter()
                    .find(|(w, _)| w == what)
                    .map_or(&[][..], |(_, b)| b.as_slice());
                format!(
                    "{what} p50 ≤ {:.0} ms, p99 ≤ {:.0} ms",
                    histogram_quantile(b, a, 0.5) * 1000.0,
                    histogram_quantile(b, a, 0.99) * 1000.0
                )
            })
            .collect();
        println!(
            "    node{i} split (bucket bounds): {}",
            if parts.is_empty() {
                "histograms unavailable".to_string()
            } else {
                parts.join("; ")
            }
        );
    }
    Ok(out)
}

/// The release's node-side containers (agent, OVS, ovn-controller, uplink) on both nodes:
/// `(pod component/container@node, cgroup)`.
async fn node_containers(e: &E2e) -> Result<Vec<(String, ContainerCgroup)>> {
    let pods: Api<Pod> = Api::namespaced(e.client.clone(), SYS);
    let list = pods
        .list(&ListParams::default().labels(INSTANCE))
        .await
        .context("list the release's pods")?;
    let mut out = Vec::new();
    for p in &list.items {
        let component = label(p, "app.kubernetes.io/component");
        if !(component.starts_with("node") || component.starts_with("ovs")) {
            continue;
        }
        let node = node_of(p);
        let i = if node == "node1" { 1 } else { 2 };
        let root = e.cluster().node_names(i)?.cgroup.clone();
        let statuses = p.status.as_ref().and_then(|s| s.container_statuses.clone());
        for c in statuses.unwrap_or_default() {
            let Some(id) = c
                .container_id
                .as_deref()
                .and_then(|id| id.strip_prefix("containerd://"))
            else {
                continue;
            };
            let cg = ContainerCgroup::find(&root, id)?;
            out.push((format!("{component}/{}@{node}", c.name), cg));
        }
    }
    Ok(out)
}

/// Readings of every container, in `node_containers` order (`None`: unreadable).
fn read_all(cs: &[(String, ContainerCgroup)]) -> Vec<Option<Reading>> {
    cs.iter().map(|(_, c)| c.read().ok()).collect()
}

/// Step `latency`: the product's burst, kept for `reference-cni`'s ratios, and what the
/// node pods' containers use idle and during the burst (the chart's requests).
pub async fn latency(e: &E2e) -> Result<()> {
    // a partial run (ZOVN_E2E_STEPS) without `pods` has no test namespace yet
    let nss: Api<Namespace> = Api::all(e.client.clone());
    if nss.get_opt(NS).await?.is_none() {
        create_namespace(&e.client, NS).await?;
    }
    let cs = node_containers(e).await?;
    let idle_t = Instant::now();
    let idle0 = read_all(&cs);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle1 = read_all(&cs);
    let idle_secs = idle_t.elapsed().as_secs_f64();
    println!("  latency: {BURST} pods created back to back on the product:");
    let t = Instant::now();
    let b = burst(e, NS, true).await?;
    let busy1 = read_all(&cs);
    let busy_secs = t.elapsed().as_secs_f64();
    println!("  {LAB_FIGURE}");
    println!(
        "  node pods' containers (cgroup): CPU idle over {idle_secs:.0} s / during the burst over {busy_secs:.0} s, working set before → after it:"
    );
    for (k, (what, _)) in cs.iter().enumerate() {
        let (Some(a), Some(b0), Some(b1)) = (idle0[k], idle1[k], busy1[k]) else {
            println!("    {what}: unreadable");
            continue;
        };
        println!(
            "    {what}: {:.3} / {:.3} cores, {:.0} → {:.0} MiB",
            cores(&a, &b0, idle_secs).unwrap_or(f64::NAN),
            cores(&b0, &b1, busy_secs).unwrap_or(f64::NAN),
            b0.working_set as f64 / f64::from(1 << 20),
            b1.working_set as f64 / f64::from(1 << 20)
        );
    }
    if let Ok(mut slot) = e.pod_start.lock() {
        *slot = Some(b);
    }
    Ok(())
}

/// The reference network on node `i`: bridge + host-local over `10.250.<i>.0/24`.
fn reference_conflist(i: usize) -> String {
    json!({
        "cniVersion": "0.4.0",
        "name": "reference",
        "plugins": [{
            "type": "bridge",
            "bridge": REF_BRIDGE,
            "isGateway": true,
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": format!("10.250.{i}.0/24")}]],
                "dataDir": REF_IPAM_DIR
            }
        }]
    })
    .to_string()
}

/// Waits until both nodes are Ready and free of the `not-ready` taint (a node without a
/// pod network is NotReady; the taint keeps the burst off it a little longer).
async fn nodes_schedulable(e: &E2e) -> Result<()> {
    let nodes: Api<Node> = Api::all(e.client.clone());
    wait_until(
        "node1 and node2 Ready on the reference network, without the not-ready taint",
        Duration::from_secs(120),
        || async {
            let list = nodes.list(&Default::default()).await?;
            Ok(list
                .items
                .iter()
                .all(|n| {
                    node_is_ready(n)
                        && !n
                            .spec
                            .as_ref()
                            .and_then(|s| s.taints.as_ref())
                            .is_some_and(|ts| ts.iter().any(|t| t.key.contains("not-ready")))
                })
                .then_some(()))
        },
    )
    .await
}

/// Removes every trace of the reference network from both nodes (its pods first: their
/// CNI DEL needs the conflist and the plugins).
async fn remove_reference(e: &E2e) -> Result<()> {
    let nss: Api<Namespace> = Api::all(e.client.clone());
    if nss.get_opt(REF_NS).await?.is_some() {
        let _ = nss.delete(REF_NS, &DeleteParams::default()).await;
        wait_until(
            &format!("namespace {REF_NS} gone"),
            Duration::from_secs(240),
            || async { Ok(nss.get_opt(REF_NS).await?.is_none().then_some(())) },
        )
        .await?;
    }
    let bins: Vec<String> = REF_PLUGINS
        .iter()
        .map(|p| format!("/opt/cni/bin/{p}"))
        .collect();
    let script = format!(
        "rm -f {REF_CONF} {}; rm -rf {REF_IPAM_DIR}; \
         if ip link show {REF_BRIDGE} >/dev/null 2>&1; then ip link del {REF_BRIDGE}; fi",
        bins.join(" ")
    );
    for i in 1..=2 {
        e.cluster().node_exec(i, &["sh", "-c", &script])?;
    }
    Ok(())
}

/// Step `reference-cni`: the same burst on bridge + host-local, and the product's ratios.
pub async fn reference_cni(e: &E2e) -> Result<()> {
    let r = reference_burst(e).await;
    // removed whatever happened: `external-mode` installs the product on these nodes
    let t = Instant::now();
    let cleaned = remove_reference(e).await;
    let b = r?;
    cleaned.context("remove the reference network")?;
    println!(
        "  reference network removed from both nodes (pods, conflist, plugins, bridge, IPAM state) in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let product = e.pod_start.lock().ok().and_then(|s| s.clone());
    let Some(p) = product else {
        println!("  no product burst to compare (step latency not run or failed)");
        return Ok(());
    };
    println!("  product ÷ reference CNI, same burst on the same cluster (issue target ≤ 1.3×):");
    for (g, (gname, _)) in b.groups.iter().enumerate() {
        let r50 = p.p(g, 50.0) / b.p(g, 50.0);
        let r99 = p.p(g, 99.0) / b.p(g, 99.0);
        println!(
            "    {gname}: p50 {:.0} / {:.0} ms = {r50:.2}×, p99 {:.0} / {:.0} ms = {r99:.2}×{}",
            p.p(g, 50.0),
            b.p(g, 50.0),
            p.p(g, 99.0),
            b.p(g, 99.0),
            if r50 <= 1.3 && r99 <= 1.3 {
                ""
            } else {
                " (target NOT met)"
            }
        );
    }
    Ok(())
}

async fn reference_burst(e: &E2e) -> Result<Burst> {
    let c = e.cluster();
    for i in 1..=2 {
        let script = format!(
            "cp {} /opt/cni/bin/ && printf '%s' '{}' > {REF_CONF}",
            REF_PLUGINS
                .iter()
                .map(|p| format!("/usr/lib/cni/{p}"))
                .collect::<Vec<_>>()
                .join(" "),
            reference_conflist(i)
        );
        c.node_exec(i, &["sh", "-c", &script])?;
    }
    let t = Instant::now();
    nodes_schedulable(e).await?;
    create_namespace(&e.client, REF_NS).await?;
    println!(
        "  reference network on both nodes: nodes Ready and schedulable, namespace ready in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    println!("  reference CNI (bridge + host-local, containernetworking-plugins): the same burst:");
    let b = burst(e, REF_NS, false).await?;
    // every pod on the reference network, not on anything left of the product's
    let listed = pods_ready(e, REF_NS, "e2e=latency", BURST, Duration::from_secs(5)).await?;
    let foreign: Vec<String> = listed
        .iter()
        .filter(|p| {
            !p.status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .is_some_and(|ip| ip.starts_with("10.250."))
        })
        .map(name)
        .collect();
    if !foreign.is_empty() {
        bail!("pods without a reference address (10.250.0.0/16): {foreign:?}");
    }
    Ok(b)
}
