//! OVN central in `ha` mode on a real cluster (issue 29), and a node on the kernel
//! datapath: `zovn cluster` with 3 nodes (`lab::kubecluster`, as in `cluster_e2e`), the
//! chart installed with `ovn.standalone.haMode: ha` (a 3-member Raft StatefulSet per
//! database, one member per node, files on each member's node under the chart's
//! hostPath) and every node on the kernel datapath (`node.datapathConfig.datapath:
//! kernel`). Named steps, each printing its figures (`tests::e2e::Steps`):
//!
//! 1. `ha-install`: every release pod Ready, each node Ready reporting datapath `kernel`,
//!    each database one Raft cluster of 3 servers (`cluster/status` on every member: the
//!    same cluster id, 3 servers, one leader); a pod on node2 pings a pod on node1.
//! 2. `ha-members` (`cluster_ha/raft.rs`): while a writer adds an NB row every 100 ms
//!    through the members' client addresses and a probe pings node2 → node1 at 10/s: each
//!    member of both databases deleted in turn (NB's and SB's member `k` together), then
//!    each database's leader twice. Every member comes back on its node with its own
//!    server id (its own log), 3 servers, the same cluster id; every write acknowledged
//!    is in NB and its datapath in SB (northd wrote through the SB cluster); the probe
//!    loses nothing over 1 s; a pod created afterwards gets its address. The longest
//!    time without an acknowledged write (the leader elections) is printed.
//! 3. `ha-disk-lost` (`cluster_ha/raft.rs`): member 2 of both databases loses its
//!    directory on its node and its pod is deleted: it joins the same cluster afresh (a new
//!    server id), its former self is kicked (3 servers again), no acknowledged write lost.
//! 4. `restart-ovs-kernel`: node2's ovs-vswitchd restarted in place and its container
//!    restarted by kubelet (`tests::e2e::vswitchd`) while the probe runs: the longest gap
//!    printed beside issue 29's 1 s target for a kernel node.
//!
//! The cluster is always torn down; its state directory is kept when a step failed.
//! Heavy: holds `tests::heavy_lock`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use lab::kubecluster::{ClusterConfig, KubeCluster};
use serde_json::{Value, json};
use tests::e2e::objects::{
    client, create, create_namespace, ip_of, label, name, node_is_ready, node_of, sleeper,
};
use tests::e2e::ping_probe::{PingRun, Probe};
use tests::e2e::{ClusterGuard, Steps, exec, vswitchd, wait_until};

#[path = "cluster_ha/raft.rs"]
mod raft;

const TEST: &str = "cluster_ha::cluster_ha";
const NS: &str = "ha";
const SYS: &str = "kube-system";
const RELEASE: &str = "zs";
const INSTANCE: &str = "app.kubernetes.io/instance=zs";
/// The chart's object names: `<release>-zstack-ovn-…`.
const FULLNAME: &str = "zs-zstack-ovn";
const NODES: usize = 3;
/// Release pods: 3 NB and 3 SB members, the controller, an agent and an OVS pod per node.
const RELEASE_PODS: usize = 3 + 3 + 1 + NODES * 2;
/// Issue 29's target for a kernel node's ovs-vswitchd restart, and for running pods while
/// OVN central members restart.
const GAP_TARGET: Duration = Duration::from_secs(1);
const STEPS: [&str; 4] = [
    "ha-install",
    "ha-members",
    "ha-disk-lost",
    "restart-ovs-kernel",
];

struct Ha {
    guard: ClusterGuard,
    kc: PathBuf,
    client: kube::Client,
    helm: PathBuf,
}

impl Ha {
    fn cluster(&self) -> &KubeCluster {
        self.guard.get()
    }
    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }
}

#[test]
fn cluster_ha() {
    let bins = [
        "kubectl",
        "etcd",
        "containerd",
        "runc",
        "nsenter",
        "ovs-vsctl",
        "ovn-nbctl",
        "ovn-sbctl",
    ];
    if !tests::require_real(TEST, &bins) {
        return;
    }
    let Some(helm) = tests::helm::require_helm(TEST) else {
        return;
    };
    // a developer's partial run of another suite (ZOVN_E2E_STEPS) names none of these
    if !STEPS.iter().any(|s| tests::e2e::step_selected(s)) {
        println!(
            "{TEST}: none of {STEPS:?} selected by {}",
            tests::e2e::STEPS_ENV
        );
        return;
    }
    let _lock = tests::heavy_lock();
    let images = tests::e2e::ensure_images();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let mut cfg = ClusterConfig::new(std::env::temp_dir().join("zovn-cluster-ha"));
    cfg.kube_cache =
        tests::kube::cluster_binaries().unwrap_or_else(|e| panic!("Kubernetes binaries: {e:#}"));
    cfg.prefix = "cha".into();
    cfg.nodes = NODES;
    cfg.images = images;
    // the kernel datapath needs no hugepages: leave the host's pool alone
    cfg.hugepages_2m = 0;
    let t = Instant::now();
    let cluster = KubeCluster::up(cfg).unwrap_or_else(|e| panic!("zovn cluster up: {e}"));
    println!(
        "cluster up ({NODES} nodes): {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let kc = cluster.kubeconfig();
    let guard = ClusterGuard {
        cluster: Some(cluster),
        keep: false,
    };
    let client = rt
        .block_on(client(&kc))
        .unwrap_or_else(|e| panic!("kube client: {e:#}"));
    let e = Ha {
        guard,
        kc,
        client,
        helm,
    };
    let mut steps = Steps::default();
    macro_rules! step {
        ($name:expr, $f:expr) => {{
            if steps.selected($name) {
                let t0 = Instant::now();
                let r = rt.block_on($f);
                steps.record($name, t0, r)
            } else {
                true
            }
        }};
    }
    if step!("ha-install", install(&e)) {
        // the writer's acknowledged rows, checked again after the disk loss
        let mut writes = raft::Acked::default();
        step!("ha-members", raft::members(&e, &mut writes));
        step!("ha-disk-lost", raft::disk_lost(&e, &mut writes));
        step!("restart-ovs-kernel", restart_ovs_kernel(&e));
    } else {
        for s in &STEPS[1..] {
            steps.skip(s, "ha-install");
        }
    }
    let failed = steps.summary().to_vec();
    let mut e = e;
    e.guard.keep = !failed.is_empty();
    drop(e);
    assert!(failed.is_empty(), "failed steps: {failed:?}");
}

fn values(api_server: &str) -> String {
    format!(
        "ovn:\n  mode: standalone\n  standalone: {{haMode: ha}}\n\
         controller:\n  replicas: 1\n\
         node:\n  datapathConfig: {{datapath: kernel}}\n\
         kubernetes:\n  apiServer: {api_server}\n\
         tunnel:\n  interface: {}\n",
        lab::kubecluster::config::DATA_IFACE
    )
}

async fn pods_ready(
    e: &Ha,
    ns: &str,
    selector: &str,
    n: usize,
    bound: Duration,
) -> Result<Vec<Pod>> {
    tests::e2e::objects::pods_ready(&e.client, &e.kc, ns, selector, n, bound).await
}

async fn install(e: &Ha) -> Result<()> {
    let c = e.cluster();
    let values_file = c.dir().join("ha-values.yaml");
    std::fs::write(&values_file, values(&c.api_server()))?;
    let t = Instant::now();
    let r = tests::helm::run(
        &e.helm,
        &[
            "install",
            RELEASE,
            &tests::helm::chart_dir().to_string_lossy(),
            "-n",
            SYS,
            "--kubeconfig",
            &e.kc.to_string_lossy(),
            "-f",
            &values_file.to_string_lossy(),
        ],
    )?;
    if !r.ok {
        bail!("helm install: {}{}", r.stdout, r.stderr);
    }
    let pods = pods_ready(e, SYS, INSTANCE, RELEASE_PODS, Duration::from_secs(480)).await?;
    let ready_secs = t.elapsed().as_secs_f64();
    let mut by_component = BTreeMap::<String, Vec<String>>::new();
    for p in &pods {
        by_component
            .entry(label(p, "app.kubernetes.io/component"))
            .or_default()
            .push(node_of(p));
    }
    for db in ["nbdb", "sbdb"] {
        let mut nodes = by_component.get(db).cloned().unwrap_or_default();
        nodes.sort();
        nodes.dedup();
        if nodes.len() != 3 {
            bail!("{db}: members on {nodes:?}, not one on each of 3 nodes: {by_component:?}");
        }
    }
    let nodes: Api<Node> = Api::all(e.client.clone());
    wait_until(
        "every node Ready reporting datapath kernel",
        Duration::from_secs(120),
        || {
            let nodes = nodes.clone();
            async move {
                for i in 1..=NODES {
                    let n = nodes.get(&format!("node{i}")).await?;
                    let dp = n
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(api::keys::DATAPATH_STATUS))
                        .and_then(|s| serde_json::from_str::<Value>(s).ok())
                        .and_then(|v| v["datapath"].as_str().map(str::to_string));
                    if !node_is_ready(&n) || dp.as_deref() != Some("kernel") {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            }
        },
    )
    .await?;
    let mut ids = Vec::new();
    for db in &raft::DBS {
        let st = raft::wait_healthy(e, db, &BTreeMap::new()).await?;
        ids.push(format!("{}: cluster {}", db.name, st.cluster_id));
    }
    // the test pods: a target on node1, a client on node2
    create_namespace(&e.client, NS).await?;
    for (n, node) in [("target", "node1"), ("client", "node2")] {
        create(
            &e.pods(NS),
            sleeper(NS, n, Some(node), json!({"ha": "probe"})),
        )
        .await?;
    }
    pods_ready(e, NS, "ha=probe", 2, Duration::from_secs(120)).await?;
    let probe = start_probe(e).await?;
    let run = probe.stop()?;
    println!(
        "  helm install (haMode ha, kernel datapath): all {RELEASE_PODS} release pods Ready \
         {ready_secs:.1} s after it; {}; node2 → node1: {run}",
        ids.join(", ")
    );
    Ok(())
}

/// The probe node2 → node1 (10 packets/s).
async fn start_probe(e: &Ha) -> Result<Probe> {
    let target = e.pods(NS).get("target").await?;
    Probe::start(
        &e.kc,
        NS,
        "client",
        &ip_of(&target),
        "pod (node2) → pod (node1), kernel datapath",
    )
}

/// Waits until the probe's path answers a single ping, then stops and reads it.
async fn stop_probe(e: &Ha, probe: Probe) -> Result<PingRun> {
    let (from, to) = probe.endpoints();
    let (from, to) = (from.to_string(), to.to_string());
    wait_until(
        "the probe's path answering again",
        Duration::from_secs(60),
        || async { exec(&e.kc, NS, &from, &["ping", "-c", "1", "-W", "1", &to]).map(Some) },
    )
    .await?;
    probe.stop()
}

async fn restart_ovs_kernel(e: &Ha) -> Result<()> {
    let c = e.cluster();
    let ovs_pod = e
        .pods(SYS)
        .list(&ListParams::default().labels(&format!("{INSTANCE},app.kubernetes.io/component=ovs")))
        .await?
        .items
        .into_iter()
        .find(|p| node_of(p) == "node2" && p.metadata.deletion_timestamp.is_none())
        .map(|p| name(&p));
    let Some(ovs_pod) = ovs_pod else {
        bail!("no OVS pod on node2");
    };
    let probe = start_probe(e).await?;
    let in_place = vswitchd::restart_in_place(c, &e.kc, SYS, &ovs_pod, 2).await?;
    let run_in_place = stop_probe(e, probe).await?;
    let probe = start_probe(e).await?;
    let restarted = vswitchd::restart_container(c, 2).await?;
    let run_container = stop_probe(e, probe).await?;
    let met = |r: &PingRun| {
        if r.longest_gap <= GAP_TARGET {
            "met"
        } else {
            "NOT met"
        }
    };
    println!(
        "  node2 (kernel): ovs-vswitchd restarted in place, new process after {in_place:.1} s: \
         {run_in_place}; issue target {} ms {}",
        GAP_TARGET.as_millis(),
        met(&run_in_place)
    );
    println!(
        "  node2 (kernel): its container restarted by kubelet (script started {:.1} s after \
         the SIGTERM, ovs-vswitchd answering after {:.1} s): {run_container}; issue target {} ms {}",
        restarted.kubelet_secs,
        restarted.back_secs,
        GAP_TARGET.as_millis(),
        met(&run_container)
    );
    for (what, r, bound) in [
        ("in place", &run_in_place, GAP_IN_PLACE),
        ("container restart", &run_container, GAP_CONTAINER),
    ] {
        if r.longest_gap > bound {
            bail!("{what}: {r} (bound {} ms)", bound.as_millis());
        }
    }
    Ok(())
}

/// What is asserted for a kernel node's restarts on this shared 2-core machine, with room
/// for its noise (issue 29's target, 1 s, printed beside each): measured 0.6 s in place
/// and 1.0 s for a container restart (2026-11-28).
const GAP_IN_PLACE: Duration = Duration::from_secs(3);
const GAP_CONTAINER: Duration = Duration::from_secs(5);
