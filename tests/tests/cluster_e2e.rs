//! The chart on a real Kubernetes cluster (issue 16, `make cluster-e2e`): `zovn cluster`
//! (`lab::kubecluster`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler 1.20.2
//! on the host; node1 and node2 each a netns + mount namespace with containerd, runc and
//! kubelet), the product image and the test images imported into every node's containerd,
//! node1 labelled for the DPDK node pool. Then, as named steps (each prints
//! `step <name>: ok (<secs>)` or `step <name>: FAILED: <why>`; a step whose prerequisite
//! failed is not run and counts as failed; the test ends with `N passed, M failed`):
//!
//! 1. `install`: `helm install` (the real Helm engine) with a standalone single central,
//!    `tunnel.type: vxlan` (zstack-ovn-kubernetes' default: every step after it runs on
//!    VXLAN, each node's tunnel port checked; `single-nic` and `external-mode` install with
//!    the default Geneve), 2 controller replicas with leader election, the default node DaemonSet (node2) and
//!    the node pool `dpdk` (node1: DPDK datapath, 2 MiB hugepages, vhost-user on): every
//!    pod of the release Running and Ready, both nodes Ready, each agent's
//!    `network.zstack.io/datapath-status` (node1: `dpdk`); the time from `helm install` to
//!    all Ready is printed. When `upgrade-release` runs (CI: always), this installs the
//!    previous release (`deploy/previous-release`: its chart and image, built once per
//!    machine by `scripts/previous-release.sh`), and `upgrade-release`
//!    (`cluster_e2e/upgrade_release.rs`) upgrades it to this tree's chart and image, node
//!    by node, while pods talk across nodes: every step after it tests the current release.
//!    `ovn-tls` (`cluster_e2e/ovn_tls.rs`): the chart's PKI as a compromised node meets it
//!    (chassis certificates granted per node, plain TCP unanswered, node1's certificate
//!    refused by NB and by SB's RBAC for another chassis's rows). `admission`
//!    (`cluster_e2e/admission.rs`): the chart's webhook, reached through its Service,
//!    refuses node1's agent's token on node2 and a tenant's forged pod annotations.
//! 2. `pods`: a Deployment spread over both nodes (kubelet → containerd → the conflist →
//!    the shim → the agent pod) gets addresses from the default Subnet; HTTP and ping
//!    between pods on the same node and across nodes.
//! 3. `service`: a ClusterIP Service (Endpoints from kube-controller-manager) answers from
//!    a pod on each node; `netpol`: a NetworkPolicy isolating one pod blocks it while
//!    another stays reachable, and deleting the policy admits traffic again;
//!    `diagnose` (`cluster_e2e/diagnose.rs`): `kubectl zovn status` and `kubectl zovn
//!    trace` on this cluster (a policy named, both nodes traced, a Service's backend).
//! 4. `dpdk`: a pod on node1 asking for vhost-user (`network.zstack.io/vhost-user`),
//!    `hugepages-2Mi` from kubelet, the socket directory as a hostPath volume at the
//!    agent's socket root (`docs/vhost-user.md`: a pod annotation cannot name host paths,
//!    and without Multus no `socketVolume`); `dpdk-testpmd` from the product image forwards
//!    between virtio-user (server) and a tap `eth0` the container configures from
//!    `k8s.ovn.org/pod-networks`; a pod on node2 pings it; the OVS port is a
//!    `dpdkvhostuserclient` on that socket and counted packets both ways.
//!    Then the day-2 steps whose probes include it (`cluster_e2e/day2.rs`: `upgrade-agent`,
//!    `restart-ovs`); after them testpmd is deleted: it busy-polls one of the 2 cores.
//! 5. `fault-agent`: the node-agent pod on node1 deleted while a Deployment scales up:
//!    every pod Running, each pod exactly one OVS port on its node, no port without a pod;
//!    `fault-leader`: the controller pod holding the Lease deleted: the other replica holds
//!    it and serves a new pod; `fault-kubelet`: node2's kubelet restarted: no sandbox,
//!    container or OVS port changed, a new pod on node2 still starts.
//! 6. `latency` (`cluster_e2e/pod_start.rs`): 51 pods created back to back, a third per
//!    pool and port kind; creation → Ready as a watch sees it, p50/p99 per group, split by
//!    kubelet's and the agents' histograms.
//! 7. `uninstall`: the test namespace deleted (no pod LSP, no pod OVS port left), `helm
//!    uninstall`, the CRD deleted: on both nodes no OVS Interface of ours in the OVS
//!    database, no link but the node's NICs, no conflist, shim, nftables table or vhost
//!    socket directory.
//!    `reference-cni` (`cluster_e2e/pod_start.rs`): the same burst with bridge + host-local
//!    as the nodes' network, the product's figures as ratios to it; then removed.
//! 8. `external-mode` (`cluster_e2e/external_mode.rs`): a platform OVN on the host (NB and
//!    SB on TCP at the host's management address), its router and switch made with
//!    `ovn-nbctl`; the chart installed with `ovn.mode=external` on it; a Subnet on the
//!    platform's switch, web pods on both nodes Ready through kubelet's HTTP readiness
//!    probe (the node's management port on that switch), their ports on it in the
//!    platform's NB, a Service's ClusterIP and nodePort from a pod on each node; after
//!    `helm uninstall` (and `--uninstall-nb` if it left rows of ours) every platform row as
//!    the platform left it.
//! 9. `single-nic` (`cluster_e2e/single_nic.rs`): both nodes made single-NIC, the README's
//!    `helm install` line run word for word; eth0's addresses and default routes on br-phy,
//!    kubelets keeping their API server, pods across nodes, everything back after uninstall.
//!
//! The cluster is always torn down (`tests::e2e::ClusterGuard`); its state directory (every
//! daemon's log) is kept when a step failed. Heavy: holds `tests::heavy_lock`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use lab::kubecluster::{ClusterConfig, KubeCluster};
use serde_json::{Value, json};
use tests::e2e::objects::{
    TESTPMD_SCRIPT, client, create, ip_of, is_ready, label, name, node_is_ready, node_of,
    ovs_pod_ports, sleeper, web_deployment,
};
use tests::e2e::{ClusterGuard, Steps, exec, kubectl, ovs_vsctl, wait_until};

#[path = "cluster_e2e/admission.rs"]
mod admission;
#[path = "cluster_e2e/day2.rs"]
mod day2;
#[path = "cluster_e2e/diagnose.rs"]
mod diagnose;
#[path = "cluster_e2e/external_mode.rs"]
mod external_mode;
#[path = "cluster_e2e/ovn_tls.rs"]
mod ovn_tls;
#[path = "cluster_e2e/pod_start.rs"]
mod pod_start;
#[path = "cluster_e2e/single_nic.rs"]
mod single_nic;
#[path = "cluster_e2e/uninstall_safety.rs"]
mod uninstall_safety;
#[path = "cluster_e2e/upgrade_release.rs"]
mod upgrade_release;

const TEST: &str = "cluster_e2e::cluster_e2e";
/// The test workloads' namespace.
const NS: &str = "e2e";
/// The release's namespace and name.
const SYS: &str = "kube-system";
const RELEASE: &str = "zs";
const INSTANCE: &str = "app.kubernetes.io/instance=zs";
/// The controller's Lease (`--leader-elect-lease-name` from the chart).
const LEASE: &str = "zs-zstack-ovn-controller";
/// The DPDK node pool's label (on node1).
const DPDK_LABEL: &str = "network.zstack.io/datapath";
/// The agent's vhost-user socket root (chart `vhost.socketRoot`).
const VHOST_ROOT: &str = "/var/run/zstack-ovn/vhost";
/// Release pods: central, 2 controllers, the default pool's agent and OVS pods (node2), the
/// DPDK pool's (node1).
const RELEASE_PODS: usize = 7;
/// Lab figures of docs/performance.md (CNI ADD through the real shim and agent).
const LAB_FIGURE: &str = "lab (docs/performance.md): CNI ADD sequential p50 29 ms / p99 52 ms; \
                          20 concurrent p50 117-134 ms / p99 138-147 ms";

fn product_image() -> String {
    format!(
        "docker.io/zstack-ovn/zstack-ovn:{}",
        env!("CARGO_PKG_VERSION")
    )
}

/// What every step uses.
struct E2e {
    guard: ClusterGuard,
    kc: PathBuf,
    client: kube::Client,
    helm: PathBuf,
    /// The release `install` installs and `upgrade-release` upgrades from (a run that
    /// selects `upgrade-release`); `None`: `install` installs the current chart.
    previous: Option<tests::e2e::PreviousRelease>,
    /// `latency`'s burst, for `reference-cni`'s ratios.
    pod_start: std::sync::Mutex<Option<pod_start::Burst>>,
}

impl E2e {
    fn cluster(&self) -> &KubeCluster {
        self.guard.get()
    }
    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }
}

#[test]
fn cluster_e2e() {
    let bins = [
        "kubectl",
        "etcd",
        "containerd",
        "runc",
        "nsenter",
        "ovs-vsctl",
        "ovsdb-tool",
        "ovn-nbctl",
        "nft",
        // external-mode: the platform's OVN central on the host
        "ovsdb-server",
        "ovsdb-client",
        "ovn-northd",
        "ovn-sbctl",
    ];
    if !tests::require_real(TEST, &bins) {
        return;
    }
    let Some(helm) = tests::helm::require_helm(TEST) else {
        return;
    };
    let _lock = tests::heavy_lock();
    let mut images = tests::e2e::ensure_images();
    let previous = tests::e2e::step_selected("upgrade-release").then(|| {
        let t = Instant::now();
        let p = tests::e2e::previous_release()
            .unwrap_or_else(|e| panic!("the previous release (deploy/previous-release): {e:#}"));
        println!(
            "previous release {} ({}): {:.1} s",
            p.version,
            p.tag,
            t.elapsed().as_secs_f64()
        );
        images.push(p.archive.clone());
        p
    });
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");

    let mut cfg = ClusterConfig::new(std::env::temp_dir().join("zovn-cluster-e2e"));
    // kubelet, kube-proxy... 1.20.2: built from Debian's source package when missing
    cfg.kube_cache =
        tests::kube::cluster_binaries().unwrap_or_else(|e| panic!("Kubernetes binaries: {e:#}"));
    cfg.prefix = "ce2e".into();
    cfg.images = images;
    let t = Instant::now();
    let cluster = KubeCluster::up_with_progress(cfg, |s| {
        println!("  cluster up: {} ({:.1} s)", s.what, s.took.as_secs_f64())
    })
    .unwrap_or_else(|e| panic!("zovn cluster up: {e}"));
    println!("cluster up: {:.1} s", t.elapsed().as_secs_f64());
    let kc = cluster.kubeconfig();
    let guard = ClusterGuard {
        cluster: Some(cluster),
        keep: false,
    };
    let client = rt
        .block_on(client(&kc))
        .unwrap_or_else(|e| panic!("kube client: {e:#}"));
    let mut e = E2e {
        guard,
        kc,
        client,
        helm,
        previous,
        pod_start: Default::default(),
    };

    let mut steps = Steps::default();
    // kept with the cluster's state directory when a step failed
    steps.log_to(e.cluster().dir().join("steps.log"));
    // ZOVN_E2E_STEPS=install,pods,dpdk,restart-ovs: a developer's partial run (a step
    // not selected counts as passed for the ones after it)
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
    let later = [
        "upgrade-release",
        "ovn-tls",
        "admission",
        "pods",
        "service",
        "netpol",
        "diagnose",
        "dpdk",
        "upgrade-agent",
        "restart-ovs",
        "fault-agent",
        "fault-leader",
        "fault-kubelet",
        "restart-central",
        "backup-restore",
        "uninstall-safety",
        "latency",
        "uninstall",
        "reference-cni",
        "external-mode",
        "single-nic",
    ];
    // a step name ZOVN_E2E_STEPS does not know is a typo, not a partial run
    if let Ok(list) = std::env::var(tests::e2e::STEPS_ENV) {
        let unknown: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| *s != "install" && !later.contains(s))
            .collect();
        assert!(
            unknown.is_empty(),
            "{}={list}: unknown step(s) {unknown:?}; the steps: install, {}",
            tests::e2e::STEPS_ENV,
            later.join(", ")
        );
    }
    if step!("install", install(&e)) {
        // everything after it tests the current release
        step!("upgrade-release", upgrade_release::upgrade_release(&e));
        step!("ovn-tls", ovn_tls::ovn_tls(&e));
        step!("admission", admission::admission(&e));
        if step!("pods", pods(&e)) {
            step!("service", service(&e));
            step!("netpol", netpol(&e));
            step!("diagnose", diagnose::diagnose(&e));
        } else {
            steps.skip("service", "pods");
            steps.skip("netpol", "pods");
            steps.skip("diagnose", "pods");
        }
        step!("dpdk", dpdk(&e));
        step!("upgrade-agent", day2::upgrade_agent(&e));
        step!("restart-ovs", day2::restart_ovs(&e));
        // testpmd busy-polls one of the machine's 2 cores; no step after this one needs it
        if let Err(err) = rt.block_on(stop_testpmd(&e)) {
            println!("  dpdk-app (testpmd) not stopped: {err:#}");
        }
        step!("fault-agent", fault_agent(&e));
        step!("fault-leader", fault_leader(&e));
        step!("fault-kubelet", fault_kubelet(&mut e));
        step!("restart-central", day2::restart_central(&e));
        step!("backup-restore", day2::backup_restore(&e));
        step!("uninstall-safety", uninstall_safety::uninstall_safety(&e));
        step!("latency", pod_start::latency(&e));
        if step!("uninstall", uninstall(&e)) {
            // before single-nic, which leaves the nodes without eth1 (the tunnel NIC here);
            // it leaves nothing of its release on the nodes
            step!("reference-cni", pod_start::reference_cni(&e));
            step!("external-mode", external_mode::external_mode(&e));
            step!("single-nic", single_nic::single_nic(&e));
        } else {
            steps.skip("reference-cni", "uninstall");
            steps.skip("external-mode", "uninstall");
            steps.skip("single-nic", "uninstall");
        }
    } else {
        for s in later {
            steps.skip(s, "install");
        }
    }
    let failed = steps.summary().to_vec();
    e.guard.keep = !failed.is_empty();
    drop(e);
    assert!(failed.is_empty(), "failed steps: {failed:?}");
}

/// How the test reaches OVN central from a node: TLS with the release's controller
/// certificate (the chart's PKI, on by default), or plain TCP without it.
async fn ovn_client(e: &E2e) -> Result<tests::e2e::ovn_client::OvnClient> {
    tests::e2e::ovn_client::OvnClient::of_release(&e.client, SYS, RELEASE, e.cluster().dir()).await
}

/// Waits until exactly `n` live pods match `selector` in `ns` and all are Ready; on
/// timeout the error carries `kubectl describe` and logs of the pods that are not.
async fn pods_ready(
    e: &E2e,
    ns: &str,
    selector: &str,
    n: usize,
    bound: Duration,
) -> Result<Vec<Pod>> {
    tests::e2e::objects::pods_ready(&e.client, &e.kc, ns, selector, n, bound).await
}

/// The values of the install: see the module docs. `previous`: for the previous release,
/// whose agents know no adaptive PMD sleep (`upgrade-release` writes the current ones).
pub(crate) fn values(api_server: &str, previous: bool) -> String {
    // The PMD threads sleep when idle. The current release's default (`auto`: sleep up to
    // 1 ms while quiet, busy polling from 1000 packets/s) is what a user gets, and what
    // `latency` measures the node pods' CPU on. The previous release would busy-poll by
    // default: 50 µs, or it takes one of the machine's 2 cores per node until the upgrade
    // (docs/datapath.md, `pmdMaxSleep`).
    let sleep = if previous { ", pmdMaxSleep: 50" } else { "" };
    let node_config = if previous { "{pmdMaxSleep: 50}" } else { "{}" };
    format!(
        "ovn:\n  mode: standalone\n  standalone: {{haMode: single}}\n\
         controller:\n  replicas: 2\n\
         node:\n  datapathConfig: {node_config}\n\
         nodePools:\n  - name: dpdk\n    nodeSelector: {{{DPDK_LABEL}: dpdk}}\n    \
         datapathConfig: {{datapath: dpdk, socketMem: [256], socketLimit: [512]{sleep}}}\n    \
         hugepages: {{size: 2Mi, amount: 512Mi}}\n    memory: 1Gi\n    vhost: true\n\
         kubernetes:\n  apiServer: {api_server}\n\
         tunnel:\n  type: vxlan\n  interface: {}\n",
        // The data NIC carries the tunnel endpoints. With the default (auto: eth0, the NIC
        // kubelet reaches the API server through) node1 went NotReady during the 50-pod
        // burst: its own traffic rode the DPDK node's userspace path through the AF_XDP
        // port churn (docs/install.md, "The tunnel NIC")
        lab::kubecluster::config::DATA_IFACE
    )
}

/// `helm install` of `release` from `chart` with `values` into [`SYS`].
fn helm_install(
    e: &E2e,
    release: &str,
    chart: &std::path::Path,
    values: &std::path::Path,
) -> Result<()> {
    let r = tests::helm::run(
        &e.helm,
        &[
            "install",
            release,
            &chart.to_string_lossy(),
            "-n",
            SYS,
            "--kubeconfig",
            &e.kc.to_string_lossy(),
            "-f",
            &values.to_string_lossy(),
        ],
    )?;
    if !r.ok {
        bail!("helm install: {}{}", r.stdout, r.stderr);
    }
    Ok(())
}

async fn install(e: &E2e) -> Result<()> {
    let c = e.cluster();
    kubectl(
        &e.kc,
        &[
            "label",
            "node",
            &c.node_name(1),
            &format!("{DPDK_LABEL}=dpdk"),
            "--overwrite",
        ],
    )?;
    // the previous release when `upgrade-release` runs next, else the current chart
    let chart = e
        .previous
        .as_ref()
        .map_or_else(tests::helm::chart_dir, |p| p.chart.clone());
    let values_file = c.dir().join("e2e-values.yaml");
    std::fs::write(&values_file, values(&c.api_server(), e.previous.is_some()))?;
    let t = Instant::now();
    helm_install(e, RELEASE, &chart, &values_file)?;
    let helm_secs = t.elapsed().as_secs_f64();
    let pods = pods_ready(e, SYS, INSTANCE, RELEASE_PODS, Duration::from_secs(420)).await?;
    let ready_secs = t.elapsed().as_secs_f64();
    let mut by_component = BTreeMap::<String, Vec<String>>::new();
    for p in &pods {
        by_component
            .entry(label(p, "app.kubernetes.io/component"))
            .or_default()
            .push(format!("{}@{}", name(p), node_of(p)));
    }
    println!("  release pods: {by_component:?}");
    for (comp, n) in [
        ("central", 1),
        ("controller", 2),
        ("node", 1),
        ("node-dpdk", 1),
        ("ovs", 1),
        ("ovs-dpdk", 1),
    ] {
        let got = by_component.get(comp).map_or(0, Vec::len);
        if got != n {
            bail!("{n} {comp} pod(s) expected, {got} Ready: {by_component:?}");
        }
    }
    if !by_component["node-dpdk"][0].ends_with(&format!("@{}", c.node_name(1))) {
        bail!("the dpdk pool's agent is not on node1: {by_component:?}");
    }
    let nodes: Api<Node> = Api::all(e.client.clone());
    let status = wait_until(
        "both nodes Ready with network.zstack.io/datapath-status (node1: dpdk)",
        Duration::from_secs(120),
        || {
            let nodes = nodes.clone();
            async move {
                let mut out = Vec::new();
                for i in 1..=2 {
                    let n = nodes.get(&format!("node{i}")).await?;
                    let ready = node_is_ready(&n);
                    let st = n
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(api::keys::DATAPATH_STATUS))
                        .and_then(|s| serde_json::from_str::<Value>(s).ok());
                    let Some(st) = st.filter(|_| ready) else {
                        return Ok(None);
                    };
                    out.push(st["datapath"].as_str().unwrap_or_default().to_string());
                }
                if out[0] != "dpdk" {
                    bail!("node1 reports datapath {:?}, not dpdk", out[0]);
                }
                Ok(Some(out))
            }
        },
    )
    .await?;
    // the pass on VXLAN (zstack-ovn-kubernetes' default tunnel): every step after this runs
    // on it; `single-nic` (the README's install) and `external-mode` run on Geneve
    for i in 1..=2 {
        let find = |ty: &str| {
            tests::e2e::ovs_vsctl(
                c,
                i,
                &[
                    "--bare",
                    "--columns=name",
                    "find",
                    "Interface",
                    &format!("type={ty}"),
                ],
            )
        };
        let vxlan = wait_until(
            &format!("node{i}'s VXLAN tunnel port"),
            Duration::from_secs(60),
            || async { Ok(Some(find("vxlan")?).filter(|p| !p.trim().is_empty())) },
        )
        .await?;
        let geneve = find("geneve")?;
        if !geneve.trim().is_empty() {
            bail!("node{i} has Geneve tunnel ports ({geneve:?}) with tunnel.type vxlan");
        }
        println!("  node{i} tunnel: vxlan ({})", vxlan.trim());
    }
    if e.previous.is_none() {
        central_metrics(e).await?;
    }
    println!(
        "  install{}: helm install returned in {helm_secs:.1} s, all {RELEASE_PODS} release pods Ready {ready_secs:.1} s after it; datapath node1 {} node2 {}",
        e.previous
            .as_ref()
            .map(|p| format!(" of the previous release {} ({})", p.version, p.tag))
            .unwrap_or_default(),
        status[0],
        status[1]
    );
    Ok(())
}

/// The central pod's `dbexporter` (the chart's `ovn.standalone.metricsPort`, 9479, on its
/// node's address): NB and SB up with a file size, its ovn-northd up and active.
pub(crate) async fn central_metrics(e: &E2e) -> Result<()> {
    let central = pods_ready(
        e,
        SYS,
        "app.kubernetes.io/component=central",
        1,
        Duration::from_secs(60),
    )
    .await?;
    let node = node_of(&central[0]);
    let i: usize = node
        .trim_start_matches("node")
        .parse()
        .with_context(|| format!("central on node {node:?}"))?;
    let addr = format!("{}:9479", lab::kubecluster::node_mgmt_ip(i));
    let page = wait_until(
        &format!("OVN central's metrics on {addr}"),
        Duration::from_secs(60),
        || async {
            let Ok(page) = tests::e2e::metrics_page(&addr) else {
                return Ok(None);
            };
            let has = |l: &str| page.lines().any(|x| x == l);
            let ok = has("zstack_ovn_db_up{db=\"nb\"} 1")
                && has("zstack_ovn_db_up{db=\"sb\"} 1")
                && has("zstack_ovn_northd_active 1")
                && page.contains("zstack_ovn_db_file_bytes{db=\"nb\"}");
            Ok(ok.then_some(page))
        },
    )
    .await?;
    let sizes: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("zstack_ovn_db_file_bytes"))
        .collect();
    println!("  OVN central's metrics on {addr}: NB, SB up, northd active; {sizes:?}");
    Ok(())
}

/// `wget` of `url` from pod `from`: the body.
fn fetch(e: &E2e, from: &str, url: &str) -> Result<String> {
    // busybox 1.35's `wget -T` segfaults (Debian busybox-static): bound it with `timeout`
    exec(
        &e.kc,
        NS,
        from,
        &[
            "busybox", "timeout", "5", "busybox", "wget", "-q", "-O", "-", url,
        ],
    )
}

/// Waits (30 s) until `from` fetches `url`; returns the body and the seconds it took.
async fn reach(e: &E2e, from: &str, url: &str) -> Result<(String, f64)> {
    let t = Instant::now();
    let body = wait_until(
        &format!("pod {from} fetching {url}"),
        Duration::from_secs(30),
        || async { fetch(e, from, url).map(Some) },
    )
    .await?;
    Ok((body.trim().to_string(), t.elapsed().as_secs_f64()))
}

/// Waits (30 s) until `from` pings `ip`.
async fn ping(e: &E2e, from: &str, ip: &str) -> Result<f64> {
    let t = Instant::now();
    wait_until(
        &format!("pod {from} pinging {ip}"),
        Duration::from_secs(30),
        || async { exec(&e.kc, NS, from, &["ping", "-c", "1", "-W", "2", ip]).map(|_| Some(())) },
    )
    .await?;
    Ok(t.elapsed().as_secs_f64())
}

/// The web pods: (node1 pods, node2 pods), each sorted by name.
async fn web_pods(e: &E2e) -> Result<(Vec<Pod>, Vec<Pod>)> {
    let pods = e
        .pods(NS)
        .list(&ListParams::default().labels("app=web"))
        .await?;
    let (mut a, mut b): (Vec<Pod>, Vec<Pod>) = pods
        .items
        .into_iter()
        .filter(is_ready)
        .partition(|p| node_of(p) == "node1");
    a.sort_by_key(name);
    b.sort_by_key(name);
    if a.len() < 2 || b.is_empty() {
        bail!(
            "web pods: {} on node1, {} on node2 (2 + 1 needed)",
            a.len(),
            b.len()
        );
    }
    Ok((a, b))
}

/// Creates the test namespace and a `web` Deployment of `replicas` pods spread over the
/// nodes.
async fn create_web(e: &E2e, replicas: i32) -> Result<()> {
    let nss: Api<Namespace> = Api::all(e.client.clone());
    create(
        &nss,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await?;
    let deps: Api<Deployment> = Api::namespaced(e.client.clone(), NS);
    create(&deps, web_deployment(NS, "web", replicas)).await?;
    Ok(())
}

async fn pods(e: &E2e) -> Result<()> {
    let t = Instant::now();
    create_web(e, 4).await?;
    let pods = pods_ready(e, NS, "app=web", 4, Duration::from_secs(240)).await?;
    println!(
        "  4 web pods Ready in {:.1} s: {:?}",
        t.elapsed().as_secs_f64(),
        pods.iter()
            .map(|p| format!("{}@{} {}", name(p), node_of(p), ip_of(p)))
            .collect::<Vec<_>>()
    );
    let nodes: BTreeSet<String> = pods.iter().map(node_of).collect();
    if nodes.len() != 2 {
        bail!("the web pods are on {nodes:?}, not on both nodes");
    }
    for p in &pods {
        let subnet = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(api::keys::POD_SUBNET).cloned())
            .unwrap_or_default();
        let ip = ip_of(p);
        if !ip.starts_with("10.244.") || subnet != "cluster-default" {
            bail!(
                "pod {} has address {ip:?} from subnet {subnet:?} (expected 10.244.0.0/16 from the default Subnet cluster-default)",
                name(p)
            );
        }
    }
    let (n1, n2) = web_pods(e).await?;
    let (a, b, c) = (name(&n1[0]), &n1[1], &n2[0]);
    for (what, from, to) in [
        ("same node", a.as_str(), b),
        ("node1 → node2", a.as_str(), c),
    ] {
        let (body, secs) = reach(e, from, &format!("http://{}:8080/", ip_of(to))).await?;
        if body != name(to) {
            bail!(
                "{what}: {from} fetched {body:?} from {}, not its name",
                name(to)
            );
        }
        let ping_secs = ping(e, from, &ip_of(to)).await?;
        println!(
            "  {what}: {from} → {} http {secs:.2} s, ping {ping_secs:.2} s",
            name(to)
        );
    }
    let back = &n1[0];
    let (body, _) = reach(e, &name(c), &format!("http://{}:8080/", ip_of(back))).await?;
    if body != name(back) {
        bail!("node2 → node1: fetched {body:?}, not {}", name(back));
    }
    ping(e, &name(c), &ip_of(back)).await?;
    println!(
        "  node2 → node1: {} → {} http + ping ok",
        name(c),
        name(back)
    );
    Ok(())
}

async fn service(e: &E2e) -> Result<()> {
    let svcs: Api<Service> = Api::namespaced(e.client.clone(), NS);
    let svc = create(
        &svcs,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
        }),
    )
    .await?;
    let vip = svc
        .spec
        .and_then(|s| s.cluster_ip)
        .context("the Service has no ClusterIP")?;
    let eps: Api<Endpoints> = Api::namespaced(e.client.clone(), NS);
    wait_until(
        "Endpoints web with the 4 web pods (kube-controller-manager)",
        Duration::from_secs(60),
        || async {
            let ep = eps.get_opt("web").await?;
            let n: usize = ep
                .and_then(|ep| ep.subsets)
                .unwrap_or_default()
                .iter()
                .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
                .sum();
            Ok((n == 4).then_some(()))
        },
    )
    .await?;
    let (n1, n2) = web_pods(e).await?;
    let names: BTreeSet<String> = n1.iter().chain(&n2).map(name).collect();
    for from in [&n1[0], &n2[0]] {
        let (body, secs) = reach(e, &name(from), &format!("http://{vip}/")).await?;
        if !names.contains(&body) {
            bail!(
                "ClusterIP {vip} answered {body:?} to {}, not a web pod's name",
                name(from)
            );
        }
        println!(
            "  ClusterIP {vip}:80 from {} ({}): answered by {body} after {secs:.2} s",
            name(from),
            node_of(from)
        );
    }
    Ok(())
}

async fn netpol(e: &E2e) -> Result<()> {
    let (n1, n2) = web_pods(e).await?;
    let (client, other, target) = (name(&n1[0]), &n1[1], &n2[0]);
    let url = format!("http://{}:8080/", ip_of(target));
    let other_url = format!("http://{}:8080/", ip_of(other));
    reach(e, &client, &url).await?;
    kubectl(
        &e.kc,
        &["label", "pod", "-n", NS, &name(target), "e2e-isolated=yes"],
    )?;
    let pols: Api<NetworkPolicy> = Api::namespaced(e.client.clone(), NS);
    let t = Instant::now();
    create(
        &pols,
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "isolate", "namespace": NS},
            "spec": {"podSelector": {"matchLabels": {"e2e-isolated": "yes"}},
                     "policyTypes": ["Ingress"]}
        }),
    )
    .await?;
    // the time to the start of the first refused fetch (a refused one lasts its 5 s timeout)
    let blocked = wait_until(
        &format!("NetworkPolicy isolate blocking {client} → {}", name(target)),
        Duration::from_secs(30),
        || async {
            let at = t.elapsed().as_secs_f64();
            Ok(fetch(e, &client, &url).is_err().then_some(at))
        },
    )
    .await?;
    fetch(e, &client, &other_url).with_context(|| {
        format!(
            "{} (not selected by the policy) must stay reachable",
            name(other)
        )
    })?;
    let t = Instant::now();
    pols.delete("isolate", &DeleteParams::default()).await?;
    reach(e, &client, &url).await?;
    println!(
        "  policy isolating {} blocked {client} from the fetch started {blocked:.2} s after the create; {} stayed reachable; deleting the policy admitted traffic within {:.2} s",
        name(target),
        name(other),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn dpdk(e: &E2e) -> Result<()> {
    let c = e.cluster();
    let pods = e.pods(NS);
    let owner = "dpdk-app";
    let id = api::names::vhost_socket_id(NS, owner, "eth0");
    let port = api::names::vhost_port_name(&id);
    let sock = format!("{VHOST_ROOT}/{id}/eth0.sock");
    create(
        &pods,
        sleeper(NS, "dpdk-peer", Some("node2"), json!({"e2e": "dpdk"})),
    )
    .await?;
    let t = Instant::now();
    create(
        &pods,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "dpdk-app", "namespace": NS, "labels": {"e2e": "dpdk"},
                "annotations": {api::keys::VHOST_USER: "{\"queues\": 1}",
                                api::keys::VHOST_OWNER: owner}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "node1"},
                "terminationGracePeriodSeconds": 2,
                "containers": [{
                    "name": "testpmd", "image": product_image(), "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/bash", "-c", TESTPMD_SCRIPT],
                    "env": [
                        {"name": "SOCK", "value": sock},
                        {"name": "PODNET_FILE", "value": "/etc/podinfo/pod-networks"}
                    ],
                    "securityContext": {"privileged": true},
                    "readinessProbe": {"exec": {"command": ["test", "-e", "/tmp/ready"]},
                                       "periodSeconds": 1},
                    "resources": {"limits": {"hugepages-2Mi": "256Mi", "memory": "512Mi"},
                                  "requests": {"hugepages-2Mi": "256Mi", "memory": "512Mi"}},
                    "volumeMounts": [
                        {"name": "vhost", "mountPath": VHOST_ROOT},
                        {"name": "hugepages", "mountPath": "/dev/hugepages"},
                        {"name": "podinfo", "mountPath": "/etc/podinfo"}
                    ]
                }],
                "volumes": [
                    {"name": "vhost", "hostPath": {"path": VHOST_ROOT, "type": "Directory"}},
                    {"name": "hugepages", "emptyDir": {"medium": "HugePages"}},
                    {"name": "podinfo", "downwardAPI": {"items": [{"path": "pod-networks",
                        "fieldRef": {"fieldPath": format!("metadata.annotations['{}']",
                            api::pod_networks::POD_NETWORKS)}}]}}
                ]
            }
        }),
    )
    .await?;
    let ready = pods_ready(e, NS, "e2e=dpdk", 2, Duration::from_secs(180)).await?;
    let ready_secs = t.elapsed().as_secs_f64();
    let app = ready
        .iter()
        .find(|p| name(p) == "dpdk-app")
        .context("dpdk-app")?;
    let app_ip = ip_of(app);
    let typ = ovs_vsctl(c, 1, &["get", "Interface", &port, "type"])?;
    let path = ovs_vsctl(
        c,
        1,
        &["get", "Interface", &port, "options:vhost-server-path"],
    )?;
    if typ.trim() != "dpdkvhostuserclient" || path.trim().trim_matches('"') != sock {
        bail!(
            "OVS Interface {port} on node1: type {typ:?}, vhost-server-path {path:?} (expected dpdkvhostuserclient on {sock})"
        );
    }
    let stats = |k: &'static str| -> Result<u64> {
        Ok(ovs_vsctl(
            c,
            1,
            &["get", "Interface", &port, &format!("statistics:{k}")],
        )?
        .trim()
        .parse()?)
    };
    let (rx0, tx0) = (
        stats("rx_packets").unwrap_or(0),
        stats("tx_packets").unwrap_or(0),
    );
    let secs = ping(e, "dpdk-peer", &app_ip).await?;
    exec(
        &e.kc,
        NS,
        "dpdk-peer",
        &["ping", "-c", "20", "-i", "0.2", "-W", "2", &app_ip],
    )
    .map_err(|err| anyhow::anyhow!("20 pings from node2 to the DPDK pod: {err:#}"))?;
    let (rx, tx) = wait_until(
        "the vhost-user port's statistics counting the pings both ways",
        Duration::from_secs(15),
        || async {
            let (rx, tx) = (stats("rx_packets")?, stats("tx_packets")?);
            Ok((rx >= rx0 + 20 && tx >= tx0 + 20).then_some((rx, tx)))
        },
    )
    .await?;
    println!(
        "  dpdk-app (testpmd on vhost-user port {port}, {app_ip}) Ready {ready_secs:.1} s after creation; \
         first ping from node2 after {secs:.2} s; 20 pings; port rx {rx} tx {tx} packets"
    );
    Ok(())
}

/// Every pod of `NS` has exactly one OVS port on its node and every port of ours a pod.
/// Deletes the `dpdk` step's testpmd pod (when it runs) and waits until it and its OVS
/// port are gone: its forwarding loop busy-polls a core, half of this machine, for as long
/// as it lives. (A force delete removed the object at once, and kubelet's CNI DEL of its
/// port came after `fault-agent` had begun counting ports per pod.)
async fn stop_testpmd(e: &E2e) -> Result<()> {
    let pods = e.pods(NS);
    if pods.get_opt("dpdk-app").await?.is_none() {
        return Ok(());
    }
    pods.delete("dpdk-app", &DeleteParams::default()).await?;
    let c = e.cluster();
    wait_until(
        "dpdk-app (testpmd) and its OVS port gone",
        Duration::from_secs(90),
        || async {
            let pod_gone = pods.get_opt("dpdk-app").await?.is_none();
            let port_gone = !ovs_pod_ports(c, 1)?
                .values()
                .any(|id| id.ends_with("_dpdk-app"));
            Ok((pod_gone && port_gone).then_some(()))
        },
    )
    .await
}

async fn one_port_per_pod(e: &E2e) -> Result<()> {
    let pods = e.pods(NS).list(&ListParams::default()).await?;
    for i in 1..=2 {
        let node = format!("node{i}");
        let want: BTreeSet<String> = pods
            .items
            .iter()
            .filter(|p| node_of(p) == node && p.metadata.deletion_timestamp.is_none())
            .map(|p| api::names::pod_port(NS, &name(p)))
            .collect();
        let ports = ovs_pod_ports(e.cluster(), i)?;
        let mut count = BTreeMap::<&str, usize>::new();
        for id in ports.values() {
            *count.entry(id).or_default() += 1;
        }
        let missing: Vec<&String> = want
            .iter()
            .filter(|w| !count.contains_key(w.as_str()))
            .collect();
        let extra: Vec<(&&str, &usize)> = count
            .iter()
            .filter(|(id, n)| **n != 1 || !want.contains(**id))
            .collect();
        if !missing.is_empty() || !extra.is_empty() {
            bail!(
                "{node}: pods without an OVS port {missing:?}; ports duplicated or without a pod {extra:?}"
            );
        }
    }
    Ok(())
}

async fn fault_agent(e: &E2e) -> Result<()> {
    let deps: Api<Deployment> = Api::namespaced(e.client.clone(), NS);
    let agents = e.pods(SYS);
    let lp =
        ListParams::default().labels(&format!("{INSTANCE},app.kubernetes.io/component=node-dpdk"));
    let old = agents.list(&lp).await?.items;
    let old = old.first().context("no node-dpdk agent pod")?;
    let old_uid = old.metadata.uid.clone().unwrap_or_default();
    create(&deps, web_deployment(NS, "burst", 10)).await?;
    let pods = e.pods(NS);
    wait_until(
        "the first burst pod scheduled on node1",
        Duration::from_secs(30),
        || async {
            let l = pods
                .list(&ListParams::default().labels("app=burst"))
                .await?;
            Ok(l.items.iter().any(|p| node_of(p) == "node1").then_some(()))
        },
    )
    .await?;
    let t = Instant::now();
    agents
        .delete(&name(old), &DeleteParams::default().grace_period(1))
        .await?;
    let burst = pods_ready(e, NS, "app=burst", 10, Duration::from_secs(300)).await?;
    let burst_secs = t.elapsed().as_secs_f64();
    let new = pods_ready(
        e,
        SYS,
        &format!("{INSTANCE},app.kubernetes.io/component=node-dpdk"),
        1,
        Duration::from_secs(120),
    )
    .await?;
    if new[0].metadata.uid.as_deref() == Some(old_uid.as_str()) {
        bail!("the node1 agent pod was not recreated");
    }
    wait_until(
        "one OVS port per pod on both nodes",
        Duration::from_secs(30),
        || async { one_port_per_pod(e).await.map(Some) },
    )
    .await?;
    let on1 = burst.iter().filter(|p| node_of(p) == "node1").count();
    println!(
        "  agent pod on node1 deleted during a 10-pod scale-up ({on1} on node1): all Ready {burst_secs:.1} s after the delete; new agent {}; one OVS port per pod",
        name(&new[0])
    );
    Ok(())
}

async fn holder(leases: &Api<Lease>) -> Result<Option<String>> {
    Ok(leases
        .get_opt(LEASE)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity))
}

async fn fault_leader(e: &E2e) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(e.client.clone(), SYS);
    let sys = e.pods(SYS);
    let ctl = format!("{INSTANCE},app.kubernetes.io/component=controller");
    let old = wait_until(
        "a controller holding the Lease",
        Duration::from_secs(60),
        || async { holder(&leases).await },
    )
    .await?;
    let t = Instant::now();
    sys.delete(&old, &DeleteParams::default()).await?;
    let new = wait_until(
        &format!("a controller other than {old} holding Lease {LEASE}"),
        Duration::from_secs(90),
        || async {
            let Some(h) = holder(&leases).await? else {
                return Ok(None);
            };
            if h == old {
                return Ok(None);
            }
            let live = sys.list(&ListParams::default().labels(&ctl)).await?;
            Ok(live
                .items
                .iter()
                .any(|p| name(p) == h && p.metadata.deletion_timestamp.is_none())
                .then_some(h))
        },
    )
    .await?;
    let takeover = t.elapsed().as_secs_f64();
    create(
        &e.pods(NS),
        sleeper(NS, "after-leader", None, json!({"e2e": "after-leader"})),
    )
    .await?;
    pods_ready(e, NS, "e2e=after-leader", 1, Duration::from_secs(90))
        .await
        .context("a pod created after the takeover")?;
    pods_ready(e, SYS, &ctl, 2, Duration::from_secs(180))
        .await
        .context("the controller Deployment back to 2 Ready replicas")?;
    println!(
        "  leader {old} deleted: {new} holds the Lease {takeover:.1} s later and served a new pod"
    );
    Ok(())
}

/// What must not change on a node when its kubelet restarts.
#[derive(Debug, PartialEq)]
struct NodeSnapshot {
    /// pod → (uid, [(container id, restart count)])
    pods: BTreeMap<String, (String, Vec<(String, i32)>)>,
    ports: BTreeMap<String, String>,
    netns: BTreeSet<String>,
}

async fn snapshot(e: &E2e, i: usize, skip: &str) -> Result<NodeSnapshot> {
    let node = format!("node{i}");
    let mut pods = BTreeMap::new();
    for p in e.pods(NS).list(&ListParams::default()).await?.items {
        if node_of(&p) != node || name(&p) == skip {
            continue;
        }
        let cs = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.container_id.unwrap_or_default(), c.restart_count))
            .collect();
        pods.insert(name(&p), (p.metadata.uid.clone().unwrap_or_default(), cs));
    }
    let mut ports = ovs_pod_ports(e.cluster(), i)?;
    ports.retain(|_, id| *id != api::names::pod_port(NS, skip));
    let netns = e
        .cluster()
        .node_exec(i, &["ls", "/run/netns"])?
        .split_whitespace()
        .map(str::to_string)
        .collect();
    Ok(NodeSnapshot { pods, ports, netns })
}

async fn fault_kubelet(e: &mut E2e) -> Result<()> {
    let before = snapshot(e, 2, "after-kubelet").await?;
    let t = Instant::now();
    e.guard.get_mut().restart_kubelet(2)?;
    create(
        &e.pods(NS),
        sleeper(
            NS,
            "after-kubelet",
            Some("node2"),
            json!({"e2e": "after-kubelet"}),
        ),
    )
    .await?;
    pods_ready(e, NS, "e2e=after-kubelet", 1, Duration::from_secs(120))
        .await
        .context("a new pod on node2 after its kubelet restarted")?;
    let secs = t.elapsed().as_secs_f64();
    let after = snapshot(e, 2, "after-kubelet").await?;
    let netns_added: Vec<&String> = after.netns.difference(&before.netns).collect();
    if after.pods != before.pods || after.ports != before.ports || netns_added.len() > 1 {
        bail!("node2 changed across the kubelet restart:\nbefore {before:?}\nafter  {after:?}");
    }
    let lost: Vec<&String> = before.netns.difference(&after.netns).collect();
    if !lost.is_empty() {
        bail!("pod netns gone after the kubelet restart: {lost:?}");
    }
    println!(
        "  node2 kubelet restarted: {} pods, {} OVS ports, {} netns unchanged; a new pod Ready {secs:.1} s after the restart",
        before.pods.len(),
        before.ports.len(),
        before.netns.len()
    );
    Ok(())
}

/// What of ours remains on node `i` once the release is gone.
/// What of ours node `i` still holds, and what its NICs miss of their own (`single_nic`:
/// the node's only NIC is eth0; its addresses and routes are checked by step `single-nic`).
fn leftovers(c: &KubeCluster, i: usize, single_nic: bool) -> Vec<String> {
    let mut left = Vec::new();
    for f in [
        "/etc/cni/net.d/10-zstack-ovn.conflist",
        "/opt/cni/bin/zstack-ovn-cni",
    ] {
        if c.node_exec(i, &["test", "-e", f]).is_ok() {
            left.push(f.to_string());
        }
    }
    if c.node_exec(i, &["nft", "list", "table", "inet", "zstack-ovn"])
        .is_ok()
    {
        left.push("nftables table inet zstack-ovn".into());
    }
    match c.node_exec(i, &["ls", "-A", VHOST_ROOT]) {
        Ok(s) if !s.trim().is_empty() => left.push(format!(
            "{VHOST_ROOT}: {}",
            s.split_whitespace().collect::<Vec<_>>().join(" ")
        )),
        _ => {}
    }
    let query = r#"["Open_vSwitch",{"op":"select","table":"Interface","where":[],"columns":["name","external_ids"]}]"#;
    match c.node_exec(
        i,
        &["ovsdb-tool", "query", "/etc/openvswitch/conf.db", query],
    ) {
        Ok(s) if s.contains("iface-id") || s.contains("zstack.io/") => left.push(format!(
            "OVS Interfaces of ours in /etc/openvswitch/conf.db: {s}"
        )),
        Ok(_) => {}
        Err(err)
            if c.node_exec(i, &["test", "-e", "/etc/openvswitch/conf.db"])
                .is_ok() =>
        {
            left.push(format!("the OVS database cannot be read: {err}"))
        }
        Err(_) => {}
    }
    // the NICs hold their addresses (and eth0 its route) again: the tunnel NIC's moved
    // onto br-phy and back
    let nics = [
        ("eth0", lab::kubecluster::node_mgmt_ip(i)),
        ("eth1", lab::kubecluster::node_data_ip(i)),
    ];
    for (nic, ip) in &nics[..if single_nic { 1 } else { 2 }] {
        if !c
            .node_exec(i, &["ip", "-4", "-o", "addr", "show", "dev", nic])
            .is_ok_and(|a| a.contains(&format!("{ip}/")))
        {
            left.push(format!("{nic} without its address {ip}"));
        }
    }
    if !c
        .node_exec(i, &["ip", "-4", "route", "show", "dev", "eth0"])
        .is_ok_and(|r| r.contains(lab::kubecluster::config::SERVICE_CIDR))
    {
        left.push("eth0 without its Service CIDR route".into());
    }
    if let Ok(links) = c.node_exec(i, &["ip", "-o", "link", "show"]) {
        for l in links.lines() {
            let n = l.split(':').nth(1).unwrap_or_default().trim();
            let n = n.split('@').next().unwrap_or_default();
            if !["lo", "eth0", "eth1"].contains(&n) || (single_nic && n == "eth1") {
                left.push(format!("link {n}"));
            }
        }
    }
    left
}

/// `helm uninstall <release> --wait`, the Subnet CRD deleted (Helm keeps CRDs), and every
/// pod of the release gone.
async fn helm_uninstall(e: &E2e, release: &str) -> Result<()> {
    let r = tests::helm::run(
        &e.helm,
        &[
            "uninstall",
            release,
            "-n",
            SYS,
            "--kubeconfig",
            &e.kc.to_string_lossy(),
            "--wait",
            "--timeout",
            "3m",
        ],
    )?;
    if !r.ok {
        bail!("helm uninstall: {}{}", r.stdout, r.stderr);
    }
    kubectl(&e.kc, &["delete", "crd", "subnets.network.zstack.io"])?;
    // gone, not only terminating: a terminating OVS pod's uplink container still runs its
    // SIGTERM cleanup (a CI run's single-nic step started while one did)
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"));
    let pods = e.pods(SYS);
    wait_until(
        &format!("every pod of release {release} gone (terminating ones included)"),
        Duration::from_secs(180),
        || async {
            let left = pods.list(&lp).await?.items;
            Ok(left.is_empty().then_some(()))
        },
    )
    .await
}

/// Deletes the test namespace and waits until it is gone (every test pod deleted).
async fn delete_test_namespace(e: &E2e, bound: Duration) -> Result<()> {
    let nss: Api<Namespace> = Api::all(e.client.clone());
    match nss.delete(NS, &DeleteParams::default()).await {
        // none: a partial run without `pods`, or a step that failed before creating it
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        r => drop(r?),
    }
    wait_until(
        &format!("namespace {NS} gone (every test pod deleted)"),
        bound,
        || async { Ok(nss.get_opt(NS).await?.is_none().then_some(())) },
    )
    .await
}

async fn uninstall(e: &E2e) -> Result<()> {
    let c = e.cluster();
    let t = Instant::now();
    delete_test_namespace(e, Duration::from_secs(240)).await?;
    let central = e
        .pods(SYS)
        .list(
            &ListParams::default()
                .labels(&format!("{INSTANCE},app.kubernetes.io/component=central")),
        )
        .await?;
    let nb_ip = central
        .items
        .first()
        .map(ip_of)
        .context("the central pod")?;
    let nb = ovn_client(e).await?.db_args(&nb_ip, 6641);
    wait_until(
        "no pod LSP in the NB and no pod OVS port on either node",
        Duration::from_secs(60),
        || async {
            let mut args = vec!["ovn-nbctl"];
            args.extend(nb.iter().map(String::as_str));
            args.extend([
                "--timeout=10",
                "--format=csv",
                "--no-headings",
                "--columns=name",
                "find",
                "Logical_Switch_Port",
                "external_ids:zstack.io/kind=pod",
            ]);
            let lsps = c.node_exec(1, &args)?;
            if !lsps.trim().is_empty() {
                bail!("pod LSPs left: {}", lsps.trim());
            }
            for i in 1..=2 {
                let ports = ovs_pod_ports(c, i)?;
                if !ports.is_empty() {
                    bail!("node{i} OVS ports left: {ports:?}");
                }
            }
            Ok(Some(()))
        },
    )
    .await?;
    let pods_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    helm_uninstall(e, RELEASE).await?;
    let r = wait_until(
        "nothing of ours left on node1 and node2",
        Duration::from_secs(60),
        || async {
            let left: Vec<String> = (1..=2)
                .flat_map(|i| {
                    leftovers(c, i, false)
                        .into_iter()
                        .map(move |l| format!("node{i}: {l}"))
                })
                .collect();
            if left.is_empty() {
                Ok(Some(()))
            } else {
                bail!("{}", left.join("; "))
            }
        },
    )
    .await;
    r?;
    println!(
        "  test pods deleted, no LSP/port left in {pods_secs:.1} s; helm uninstall + CRD delete → nothing left on either node in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
