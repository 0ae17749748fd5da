//! Day-2 steps of `cluster_e2e` (issue 29), each measured while pods talk across nodes:
//! three probes at 10 packets/s (`tests::e2e::ping_probe`) from node2 to node1 — a pod on
//! node2's default datapath (AF_XDP) and one asking for a kernel port, both to a web pod on
//! node1 (the DPDK node: its port is AF_XDP in ovs-vswitchd-dpdk), and `dpdk-peer` to the
//! vhost-user pod `dpdk-app` (testpmd, QEMU's place) when the `dpdk` step left it running.
//!
//! - `upgrade-agent`: `helm upgrade --reuse-values --set logging.level=debug --wait`: the
//!   agent DaemonSets and the controller Deployment roll out completely (2 controller
//!   replicas on 2 nodes), the OVS DaemonSets' pods are the same pods, no test pod was
//!   re-created or changed address, and no probe lost a packet. Before it, the Subnet CRD
//!   in the cluster loses its `vlanID` field (an older chart's schema; Helm never upgrades
//!   CRDs): the upgraded controller puts it back (`--apply-crd`).
//! - `restart-ovs`: on node2 then node1, three restarts of ovs-vswitchd, each printing
//!   every probe's longest gap beside the target (≤ 1 s for node2, AF_XDP and
//!   kernel ports; ≤ 2 s for node1, DPDK, vhost-user: OVS reconnects to testpmd's socket,
//!   the pod is not restarted) and asserting what this machine meets: (0) in place by its
//!   script (the agent's restart command, `vswitchd-restart.sh`), the container kept;
//!   (a) its container stopped (SIGTERM) and restarted by kubelet, kubelet's share
//!   printed; (b) the node's OVS pod deleted (what an upgrade of the OVS DaemonSet does on
//!   that node, `OnDelete`): the new pod runs the build's tag `upgrade-agent` set.
//! - `restart-central`: the central pod deleted: it comes back on the node holding its
//!   files (hostPath) with every NB row, running pods keep their traffic (no gap > 1 s),
//!   and a pod created right after the deletion gets its address within 15 s.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;
use tests::e2e::objects::{create, ip_of, is_ready, label, name, node_of, sleeper};
use tests::e2e::ping_probe::{PingRun, Probe};
use tests::e2e::{exec, kubectl, vswitchd, wait_until};

use super::{E2e, INSTANCE, NS, RELEASE, SYS, ovn_client, pods_ready, web_pods};

/// Issue 29's targets for the longest gap while a node's ovs-vswitchd restarts, printed
/// beside every figure.
pub(crate) const GAP_KERNEL_AFXDP: Duration = Duration::from_secs(1);
pub(crate) const GAP_DPDK: Duration = Duration::from_secs(2);
/// What this machine meets today, asserted: ovs-vswitchd's container restarted by kubelet
/// (measured 2.3 s idle, 4.7–11.8 s busy; kubelet's share 1.6–2.8 s, the rest as in
/// [`GAP_IN_PLACE`];
/// docs/install.md) and the OVS pod re-created through the API server (measured 13–24 s).
/// Both restarts' bounds are wide: during this suite testpmd (the `dpdk` step) and the
/// PMD threads of both nodes busy-poll the machine's 2 cores, and the gaps stretch from
/// 1.9–2.3 s (idle, by hand) to 9.7–14.8 s.
pub(crate) const GAP_CONTAINER_RESTART: Duration = Duration::from_secs(30);
/// ovs-vswitchd restarted in place by its script (no kubelet): what this machine meets,
/// asserted (measured 1.9 s on the idle machine, 4.0–11.3 s beside other test suites on
/// the same 2 cores). The restore itself takes 0.5–1 s (`helm_scripts`); on the cluster
/// ovs-vswitchd's first reconfiguration re-attaches the AF_XDP ports (the tunnel NIC's XDP
/// program alone up to 1.4 s, a pod's 0.5 s) before br-int's OpenFlow socket exists and
/// the saved tables can load.
pub(crate) const GAP_IN_PLACE: Duration = Duration::from_secs(30);
pub(crate) const GAP_POD_RECREATED: Duration = Duration::from_secs(60);
/// An OVS pod deleted: the DaemonSet controller creates its replacement once kubelet has
/// removed the old pod, and kubelet 1.20 does that only after the old pod's sandbox is
/// gone. Its sandbox deleter, run when a container is removed, skips a sandbox still
/// stopping at that moment, and then only the container GC (once a minute) removes it:
/// 6–18 s measured usually, 60.4 s once (2026-11-28, the sandbox removed by the GC 49 s
/// after the containers). Asserted: the replacement within one GC period plus the
/// stopping, and the gap after its creation (ours: scheduling, the containers, the
/// restore) within [`GAP_AFTER_CREATED`].
pub(crate) const POD_RELEASED_BY_KUBELET: Duration = Duration::from_secs(90);
/// The part of a re-created OVS pod's gap after its replacement was created (measured
/// 1.8–8 s).
pub(crate) const GAP_AFTER_CREATED: Duration = Duration::from_secs(30);

/// `Some(why)` when a re-created OVS pod's probe gap is over the bounds: its replacement
/// created `created_secs` after the delete ([`POD_RELEASED_BY_KUBELET`]), the gap longer
/// than that plus [`GAP_AFTER_CREATED`].
pub(crate) fn recreation_over(gap: Duration, created_secs: f64) -> Option<String> {
    if created_secs > POD_RELEASED_BY_KUBELET.as_secs_f64() {
        return Some(format!(
            "the replacement pod created {created_secs:.1} s after the delete (kubelet's \
             share, bound {} s)",
            POD_RELEASED_BY_KUBELET.as_secs()
        ));
    }
    let ours = gap.as_secs_f64() - created_secs;
    (ours > GAP_AFTER_CREATED.as_secs_f64()).then(|| {
        format!(
            "{:.1} s of the gap after the replacement's creation (bound {} s)",
            ours,
            GAP_AFTER_CREATED.as_secs()
        )
    })
}
/// Issue 29's target for a new pod's address after OVN central's pod is deleted, and what
/// is asserted (measured 12.2–49.1 s over four runs on 2026-11-28, after the clients'
/// reconnect backoff was capped at 2 s).
const ADDRESS_TARGET_SECS: f64 = 15.0;
const ADDRESS_BOUND_SECS: f64 = 60.0;

/// The probe clients on node2, created once.
async fn probe_clients(e: &E2e) -> Result<()> {
    let pods = e.pods(NS);
    for (n, kernel) in [("probe-afxdp", false), ("probe-kernel", true)] {
        if pods.get_opt(n).await?.is_some() {
            continue;
        }
        let mut p = sleeper(NS, n, Some("node2"), json!({"e2e": "probe"}));
        if kernel {
            p["metadata"]["annotations"] = json!({api::keys::POD_DATAPATH: "kernel"});
        }
        create(&pods, p).await?;
    }
    pods_ready(e, NS, "e2e=probe", 2, Duration::from_secs(120)).await?;
    // a new pod starts on a kernel port and the agent moves it to AF_XDP once the burst is
    // over, pausing its traffic for ~0.1-0.2 s (docs/datapath.md, fast start): a probe
    // started before the move counts that pause against the operation it measures
    wait_until(
        "node2's new AF_XDP ports moved off their kernel start",
        Duration::from_secs(60),
        || async {
            let pending = tests::e2e::ovs_vsctl(
                e.cluster(),
                2,
                &[
                    "--bare",
                    "--columns=name",
                    "find",
                    "Interface",
                    "external_ids:zstack.io/datapath-pending=afxdp",
                ],
            )?;
            Ok(pending.trim().is_empty().then_some(()))
        },
    )
    .await?;
    Ok(())
}

/// Starts every probe (see the module docs).
pub(crate) async fn start_probes(e: &E2e) -> Result<Vec<Probe>> {
    probe_clients(e).await?;
    let (n1, _) = web_pods(e).await?;
    let target = ip_of(&n1[0]);
    let mut probes = vec![
        Probe::start(
            &e.kc,
            NS,
            "probe-afxdp",
            &target,
            "AF_XDP pod (node2) → pod on the DPDK node",
        )?,
        Probe::start(
            &e.kc,
            NS,
            "probe-kernel",
            &target,
            "kernel-port pod (node2) → pod on the DPDK node",
        )?,
    ];
    if let Some(app) = e.pods(NS).get_opt("dpdk-app").await?.filter(is_ready) {
        probes.push(Probe::start(
            &e.kc,
            NS,
            "dpdk-peer",
            &ip_of(&app),
            "pod (node2) → vhost-user pod (testpmd) on node1",
        )?);
    }
    Ok(probes)
}

/// Waits until every probe's client answers a single ping again (traffic is back), then
/// stops the probes and reads them.
pub(crate) async fn stop_probes(e: &E2e, probes: Vec<Probe>) -> Result<Vec<(String, PingRun)>> {
    stop_probes_in(e, NS, probes).await
}

/// [`stop_probes`] for probes whose clients are in namespace `ns`.
pub(crate) async fn stop_probes_in(
    e: &E2e,
    ns: &str,
    probes: Vec<Probe>,
) -> Result<Vec<(String, PingRun)>> {
    wait_until(
        "every probe's path answering again",
        Duration::from_secs(60),
        || async {
            for p in &probes {
                let (from, to) = p.endpoints();
                exec(&e.kc, ns, from, &["ping", "-c", "1", "-W", "1", to])?;
            }
            Ok(Some(()))
        },
    )
    .await?;
    probes
        .into_iter()
        .map(|p| {
            let what = p.what.clone();
            Ok((what, p.stop()?))
        })
        .collect()
}

/// `name → (uid, ip)` of the pods matching `selector` in `ns`.
pub(crate) async fn identities(
    e: &E2e,
    ns: &str,
    selector: &str,
) -> Result<BTreeMap<String, (String, String)>> {
    let lp = ListParams::default().labels(selector);
    Ok(e.pods(ns)
        .list(&lp)
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            (
                name(p),
                (p.metadata.uid.clone().unwrap_or_default(), ip_of(p)),
            )
        })
        .collect())
}

/// The release's pods whose component starts with `prefix`, by node.
pub(crate) async fn release_pods(e: &E2e, prefix: &str) -> Result<BTreeMap<String, Pod>> {
    Ok(e.pods(SYS)
        .list(&ListParams::default().labels(INSTANCE))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| label(p, "app.kubernetes.io/component").starts_with(prefix))
        .map(|p| (node_of(&p), p))
        .collect())
}

pub(crate) fn print_runs(runs: &[(String, PingRun)]) {
    for (what, r) in runs {
        println!("    {what}: {r}");
    }
}

pub(crate) async fn upgrade_agent(e: &E2e) -> Result<()> {
    let probes = start_probes(e).await?;
    let pods_before = identities(e, NS, "").await?;
    let ovs_before: BTreeMap<String, String> = release_pods(e, "ovs")
        .await?
        .into_iter()
        .map(|(n, p)| (n, p.metadata.uid.unwrap_or_default()))
        .collect();
    let agents_before = release_pods(e, "node").await?;
    if ovs_before.len() != 2 || agents_before.len() != 2 {
        bail!(
            "expected an OVS and an agent pod per node: {ovs_before:?}, {:?}",
            agents_before.keys()
        );
    }
    // an older chart's CRD: no vlanID
    let crd_has_vlan = || -> Result<bool> {
        let v: serde_json::Value = serde_json::from_str(&kubectl(
            &e.kc,
            &["get", "crd", "subnets.network.zstack.io", "-o", "json"],
        )?)?;
        Ok(!v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["vlanID"]
            .is_null())
    };
    let mut crd: serde_json::Value = serde_json::from_str(&kubectl(
        &e.kc,
        &["get", "crd", "subnets.network.zstack.io", "-o", "json"],
    )?)?;
    let props =
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            .as_object_mut()
            .context("the CRD's spec properties")?;
    props
        .remove("vlanID")
        .context("the CRD has no vlanID to remove")?;
    let old_crd = e.cluster().dir().join("e2e-old-crd.json");
    std::fs::write(&old_crd, serde_json::to_vec(&crd)?)?;
    kubectl(&e.kc, &["replace", "-f", &old_crd.to_string_lossy()])?;
    if crd_has_vlan()? {
        bail!("the CRD still has vlanID after replacing it with an older schema");
    }
    // the agent's new image: the build's own tag (the same binaries under a second name)
    let new_tag = build_tag().unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string());
    let t = Instant::now();
    let chart = tests::helm::chart_dir();
    let r = tests::helm::run(
        &e.helm,
        &[
            "upgrade",
            RELEASE,
            &chart.to_string_lossy(),
            "-n",
            SYS,
            "--kubeconfig",
            &e.kc.to_string_lossy(),
            "--reuse-values",
            "--set",
            "logging.level=debug",
            "--set",
            &format!("node.image.tag={new_tag}"),
            "--wait",
            "--timeout",
            "5m",
        ],
    )?;
    if !r.ok {
        bail!("helm upgrade: {}{}", r.stdout, r.stderr);
    }
    let helm_secs = t.elapsed().as_secs_f64();
    // every rolled object complete: the controller (2 replicas on 2 nodes: no surge) and
    // the agents
    rollouts_complete(
        e,
        &[
            "deployment/-controller",
            "daemonset/-node",
            "daemonset/-node-dpdk",
        ],
    )?;
    let rolled_secs = t.elapsed().as_secs_f64();
    wait_until(
        "the upgraded controller's Subnet CRD (vlanID back)",
        Duration::from_secs(120),
        || async { Ok(crd_has_vlan()?.then_some(())) },
    )
    .await?;
    let agents_after = release_pods(e, "node").await?;
    for (node, p) in &agents_after {
        let old = agents_before.get(node).and_then(|p| p.metadata.uid.clone());
        if p.metadata.uid == old {
            bail!("the agent pod on {node} was not replaced by the upgrade");
        }
        let level = p.spec.as_ref().and_then(|s| {
            s.containers
                .iter()
                .find(|c| c.name == "agent")?
                .env
                .as_ref()?
                .iter()
                .find(|v| v.name == "RUST_LOG")?
                .value
                .clone()
        });
        if level.as_deref() != Some("debug") {
            bail!("the new agent pod on {node} runs RUST_LOG={level:?}, not debug");
        }
    }
    let runs = stop_probes(e, probes).await?;
    let ovs_after: BTreeMap<String, String> = release_pods(e, "ovs")
        .await?
        .into_iter()
        .map(|(n, p)| (n, p.metadata.uid.unwrap_or_default()))
        .collect();
    let pods_after = identities(e, NS, "").await?;
    println!(
        "  helm upgrade (log level, node.image.tag={new_tag}) returned in {helm_secs:.1} s, every rollout \
         complete after {rolled_secs:.1} s; the CRD's vlanID back; OVS pods unchanged: {}; test pods unchanged: {}",
        ovs_after == ovs_before,
        pods_after == pods_before
    );
    print_runs(&runs);
    if ovs_after != ovs_before {
        bail!("the upgrade restarted OVS pods: {ovs_before:?} → {ovs_after:?}");
    }
    for (n, id) in &pods_before {
        if pods_after.get(n) != Some(id) {
            bail!("test pod {n} changed: {id:?} → {:?}", pods_after.get(n));
        }
    }
    let lossy: Vec<_> = runs.iter().filter(|(_, r)| r.lost() > 0).collect();
    if !lossy.is_empty() {
        bail!("packets lost during an agent-only upgrade: {lossy:?}");
    }
    Ok(())
}

/// `kubectl rollout status` (240 s) of each `kind/-suffix`, named `<release>-zstack-ovn-suffix`.
pub(crate) fn rollouts_complete(e: &E2e, objs: &[&str]) -> Result<()> {
    for obj in objs {
        let obj = obj.replacen("/-", &format!("/{RELEASE}-zstack-ovn-"), 1);
        kubectl(
            &e.kc,
            &["rollout", "status", "-n", SYS, &obj, "--timeout=240s"],
        )
        .with_context(|| format!("rollout of {obj}"))?;
    }
    Ok(())
}

/// The OVS pod's image on each node must be the build's tag after `upgrade-agent` set it
/// (an OnDelete upgrade applies when the pod is re-created).
fn build_tag() -> Option<String> {
    let (product, _) = tests::e2e::image_archives();
    let tag = std::fs::read_to_string(product.with_extension("").with_extension("tag")).ok()?;
    let tag = tag.trim().to_string();
    (!tag.is_empty() && tag != env!("CARGO_PKG_VERSION")).then_some(tag)
}

pub(crate) async fn restart_ovs(e: &E2e) -> Result<()> {
    let mut over = Vec::new();
    for (i, target) in [(2usize, GAP_KERNEL_AFXDP), (1, GAP_DPDK)] {
        let node = format!("node{i}");
        // (0) the agent's restart command (a start-time setting changed): the tables
        // saved, ovs-vswitchd exits and its container's script starts it again in place
        let probes = start_probes(e).await?;
        let ovs_pod = release_pods(e, "ovs")
            .await?
            .remove(&node)
            .with_context(|| format!("the OVS pod on {node}"))?;
        let back_secs =
            vswitchd::restart_in_place(e.cluster(), &e.kc, SYS, &name(&ovs_pod), i).await?;
        let runs = stop_probes(e, probes).await?;
        let met = runs.iter().all(|(_, r)| r.longest_gap <= target);
        println!(
            "  {node}: ovs-vswitchd restarted in place by its script (the agent's restart command): \
             new process after {back_secs:.1} s; issue target {} ms {}:",
            target.as_millis(),
            if met { "met" } else { "NOT met" }
        );
        print_runs(&runs);
        for (what, r) in runs {
            if r.longest_gap > GAP_IN_PLACE {
                over.push(format!("{node} (in-place restart): {what}: {r}"));
            }
        }
        // (a) the ovs-vswitchd container stopped (SIGTERM, as the runtime stops it; an
        // OVS upgrade in place): kubelet starts it again in the same pod
        let probes = start_probes(e).await?;
        let vswitchd::ContainerRestart {
            kubelet_secs,
            back_secs,
        } = vswitchd::restart_container(e.cluster(), i).await?;
        let runs = stop_probes(e, probes).await?;
        let met = runs.iter().all(|(_, r)| r.longest_gap <= target);
        println!(
            "  {node}: ovs-vswitchd's container stopped (SIGTERM) and restarted by kubelet: the new \
             container's script started {kubelet_secs:.1} s after the SIGTERM, ovs-vswitchd answering \
             after {back_secs:.1} s; issue target {} ms {}:",
            target.as_millis(),
            if met { "met" } else { "NOT met" }
        );
        print_runs(&runs);
        for (what, r) in runs {
            if r.longest_gap > GAP_CONTAINER_RESTART {
                over.push(format!("{node} (container restart): {what}: {r}"));
            }
        }
        // (c) `kubectl zovn upgrade-ovs --node`: upgrade-agent changed only the image tag,
        // so the OVS pod gets its new images in place (kubelet restarts its containers)
        let upgraded = std::env::var(tests::e2e::STEPS_ENV)
            .map_or(true, |l| l.split(',').any(|s| s.trim() == "upgrade-agent"));
        if upgraded && build_tag().is_some() {
            upgrade_ovs_in_place(e, i, target, &mut over).await?;
        }
        // (b) the OVS pod deleted: what an upgrade of the OVS DaemonSet (OnDelete) does on
        // the node; the pod is re-created by the DaemonSet controller
        let probes = start_probes(e).await?;
        let Recreated {
            old,
            new,
            created_secs: created,
            ready_secs,
            old_exits,
        } = recreate_ovs_pod(e, &node).await?;
        let runs = stop_probes(e, probes).await?;
        // the OnDelete upgrade applied: the new pod runs the tag upgrade-agent set (when a
        // partial run selected that step)
        if upgraded && let Some(tag) = build_tag() {
            let images = images_of(&new);
            if !images.iter().all(|im| im.ends_with(&format!(":{tag}"))) {
                bail!("{node}: the re-created OVS pod runs {images:?}, not the build's tag {tag}");
            }
            println!("  {node}: the re-created OVS pod runs the build's tag {tag}");
        }
        println!(
            "  {node}: OVS pod {} deleted (its containers: {old_exits}), {} created {created:.1} s and \
             Ready {ready_secs:.1} s later:",
            name(&old),
            name(&new),
        );
        print_runs(&runs);
        for (what, r) in runs {
            if let Some(why) = recreation_over(r.longest_gap, created) {
                over.push(format!("{node} (pod re-created): {what}: {r}: {why}"));
            }
        }
        // the node's agent saw the restart and keeps serving (its readiness)
        pods_ready(
            e,
            SYS,
            &format!(
                "{INSTANCE},app.kubernetes.io/component={}",
                if i == 1 { "node-dpdk" } else { "node" }
            ),
            1,
            Duration::from_secs(60),
        )
        .await?;
    }
    if !over.is_empty() {
        bail!("gaps over the bound: {}", over.join("; "));
    }
    Ok(())
}

/// `kubectl zovn upgrade-ovs --node node<i>` after `upgrade-agent` set the build's tag:
/// the node's OVS pod keeps its uid, every container restarts on the build's tag, the pod
/// carries the DaemonSet's current revision, and the probes' gaps are printed beside the
/// issue's target (asserted: [`GAP_CONTAINER_RESTART`], what a container restart meets).
async fn upgrade_ovs_in_place(
    e: &E2e,
    i: usize,
    target: Duration,
    over: &mut Vec<String>,
) -> Result<()> {
    let node = format!("node{i}");
    let tag = build_tag().context("the build's tag")?;
    let plugins = super::diagnose::plugin_dir(e)?;
    let before = release_pods(e, "ovs")
        .await?
        .remove(&node)
        .with_context(|| format!("the OVS pod on {node}"))?;
    if images_of(&before)
        .iter()
        .all(|im| im.ends_with(&format!(":{tag}")))
    {
        bail!("{node}: the OVS pod already runs {tag}: nothing to upgrade in place");
    }
    let probes = start_probes(e).await?;
    let t = Instant::now();
    let (code, out, err) =
        super::diagnose::kubectl_zovn(&e.kc, &plugins, &["upgrade-ovs", "--node", &node]);
    let secs = t.elapsed().as_secs_f64();
    let runs = stop_probes(e, probes).await?;
    if code != 0 || !out.contains("upgraded in place") {
        bail!("kubectl zovn upgrade-ovs --node {node}: exit {code}: {out}{err}");
    }
    let after = release_pods(e, "ovs")
        .await?
        .remove(&node)
        .with_context(|| format!("the OVS pod on {node}"))?;
    if after.metadata.uid != before.metadata.uid {
        bail!("{node}: upgrade-ovs re-created the OVS pod");
    }
    let images = images_of(&after);
    if !images.iter().all(|im| im.ends_with(&format!(":{tag}"))) {
        bail!("{node}: after upgrade-ovs the OVS pod runs {images:?}, not {tag}");
    }
    // the DaemonSet counts it as updated: its rollout is complete on every node upgraded
    let hash = label(&after, "controller-revision-hash");
    let met = runs.iter().all(|(_, r)| r.longest_gap <= target);
    println!(
        "  {node}: kubectl zovn upgrade-ovs: OVS pod {} upgraded in place to {tag} (revision          {hash}) in {secs:.1} s; issue target {} ms {}:\n    {}",
        name(&after),
        target.as_millis(),
        if met { "met" } else { "NOT met" },
        out.trim()
    );
    print_runs(&runs);
    for (what, r) in runs {
        if r.longest_gap > GAP_CONTAINER_RESTART {
            over.push(format!("{node} (upgrade-ovs in place): {what}: {r}"));
        }
    }
    Ok(())
}

/// A node's OVS pod deleted and its successor Ready: what an upgrade of the OVS
/// DaemonSet (`OnDelete`) does on that node.
pub(crate) struct Recreated {
    pub old: Pod,
    pub new: Pod,
    /// From the delete to the new pod's first sight (the DaemonSet controller creates it
    /// once the old one is gone) and to its readiness.
    pub created_secs: f64,
    pub ready_secs: f64,
    /// How the old pod's containers ended, as its last status showed them: `name +N s
    /// (exit code reason)` after the delete, or `name running` (killed after the grace
    /// period, or gone before a status showed it).
    pub old_exits: String,
}

/// `name +N s (code reason)` per container of `p` (N from `deleted_at`, Unix seconds).
fn container_exits(p: &Pod, deleted_at: i64) -> String {
    let statuses = p
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten());
    statuses
        .map(
            |c| match c.state.as_ref().and_then(|s| s.terminated.as_ref()) {
                Some(t) => format!(
                    "{} +{} s ({}{})",
                    c.name,
                    t.finished_at
                        .as_ref()
                        .map_or("?".into(), |f| (f.0.as_second() - deleted_at).to_string()),
                    t.exit_code,
                    t.reason
                        .as_deref()
                        .map(|r| format!(" {r}"))
                        .unwrap_or_default()
                ),
                None => format!("{} running", c.name),
            },
        )
        .collect::<Vec<_>>()
        .join(", ")
}

/// Deletes `node`'s OVS pod and waits (180 s) for its successor to be Ready.
pub(crate) async fn recreate_ovs_pod(e: &E2e, node: &str) -> Result<Recreated> {
    let old = release_pods(e, "ovs")
        .await?
        .remove(node)
        .with_context(|| format!("the OVS pod on {node}"))?;
    let old_uid = old.metadata.uid.clone().unwrap_or_default();
    let t = Instant::now();
    let deleted_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    e.pods(SYS)
        .delete(&name(&old), &DeleteParams::default())
        .await?;
    let created: std::sync::Mutex<Option<f64>> = Default::default();
    let old_exits: std::sync::Mutex<String> = Default::default();
    let new = wait_until(
        &format!("a new OVS pod on {node} Ready"),
        Duration::from_secs(180),
        || async {
            if let Some(p) = e.pods(SYS).get_opt(&name(&old)).await?
                && let Ok(mut x) = old_exits.lock()
            {
                *x = container_exits(&p, deleted_at);
            }
            let new = release_pods(e, "ovs")
                .await?
                .remove(node)
                .filter(|p| p.metadata.uid.as_deref() != Some(old_uid.as_str()));
            if new.is_some()
                && let Ok(mut c) = created.lock()
            {
                *c = c.or(Some(t.elapsed().as_secs_f64()));
            }
            Ok(new.filter(is_ready))
        },
    )
    .await?;
    let ready_secs = t.elapsed().as_secs_f64();
    let created_secs = created.into_inner().ok().flatten().unwrap_or(ready_secs);
    Ok(Recreated {
        old,
        new,
        created_secs,
        ready_secs,
        old_exits: old_exits.into_inner().unwrap_or_default(),
    })
}

/// The images of `p`'s containers.
pub(crate) fn images_of(p: &Pod) -> Vec<String> {
    p.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| c.image.clone())
        .collect()
}

/// The names of the NB rows of `table` (or their UUIDs where rows have no name).
fn nb_rows(e: &E2e, nb: &[String], table: &str, column: &str) -> Result<Vec<String>> {
    let columns = format!("--columns={column}");
    let mut args = vec!["ovn-nbctl"];
    args.extend(nb.iter().map(String::as_str));
    args.extend([
        "--timeout=10",
        "--format=csv",
        "--no-headings",
        &columns,
        "list",
        table,
    ]);
    let out = e.cluster().node_exec(1, &args)?;
    let mut rows: Vec<String> = out.lines().map(str::to_string).collect();
    rows.sort();
    Ok(rows)
}

pub(crate) async fn restart_central(e: &E2e) -> Result<()> {
    let central = release_pods(e, "central").await?;
    let (node, old) = central.into_iter().next().context("the central pod")?;
    let pinned = kubectl(
        &e.kc,
        &[
            "get",
            "deployment",
            "-n",
            SYS,
            &format!("{RELEASE}-zstack-ovn-central"),
            "-o",
            "jsonpath={.metadata.annotations.network\\.zstack\\.io/central-nodes}",
        ],
    )?;
    if pinned.trim() != node {
        bail!("the central Deployment is pinned to {pinned:?}, its pod runs on {node}");
    }
    let nb = ovn_client(e).await?.db_args(&ip_of(&old), 6641);
    let tables = [
        ("Logical_Switch", "name"),
        ("Logical_Switch_Port", "name"),
        ("Logical_Router", "name"),
        ("Load_Balancer", "name"),
        ("ACL", "match"),
        ("Address_Set", "name"),
    ];
    let mut before = BTreeMap::new();
    for (t, c) in tables {
        before.insert(t, nb_rows(e, &nb, t, c)?);
    }
    let probes = start_probes(e).await?;
    let pods = e.pods(NS);
    let t = Instant::now();
    e.pods(SYS)
        .delete(&name(&old), &DeleteParams::default())
        .await?;
    create(
        &pods,
        sleeper(
            NS,
            "after-central",
            Some("node2"),
            json!({"e2e": "after-central"}),
        ),
    )
    .await?;
    // when the new central pod appeared and turned Ready, seen while waiting
    let seen: std::sync::Mutex<(Option<f64>, Option<f64>)> = Default::default();
    let addr_secs = wait_until(
        "the pod created after the central pod's deletion with an address",
        Duration::from_secs(120),
        || async {
            if let Some(p) = release_pods(e, "central")
                .await?
                .into_values()
                .find(|p| p.metadata.uid != old.metadata.uid)
                && let Ok(mut s) = seen.lock()
            {
                let now = Some(t.elapsed().as_secs_f64());
                s.0 = s.0.or(now);
                if is_ready(&p) {
                    s.1 = s.1.or(now);
                }
            }
            let p = pods.get("after-central").await?;
            let has = p
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(api::keys::POD_NETWORKS));
            Ok(has.then(|| t.elapsed().as_secs_f64()))
        },
    )
    .await?;
    pods_ready(e, NS, "e2e=after-central", 1, Duration::from_secs(120)).await?;
    let ready_secs = t.elapsed().as_secs_f64();
    let new = wait_until(
        "a new central pod Ready",
        Duration::from_secs(120),
        || async {
            Ok(release_pods(e, "central")
                .await?
                .into_values()
                .find(|p| p.metadata.uid != old.metadata.uid && is_ready(p)))
        },
    )
    .await?;
    let runs = stop_probes(e, probes).await?;
    let nb = ovn_client(e).await?.db_args(&ip_of(&new), 6641);
    let mut lost_rows = Vec::new();
    for (tbl, c) in tables {
        let after = nb_rows(e, &nb, tbl, c)?;
        let missing: Vec<_> = before[tbl].iter().filter(|r| !after.contains(r)).collect();
        if !missing.is_empty() {
            lost_rows.push(format!(
                "{tbl}: {} of {} rows gone",
                missing.len(),
                before[tbl].len()
            ));
        }
    }
    let (created, ready) = seen.into_inner().unwrap_or_default();
    let at = |t: Option<f64>| t.map_or("later".to_string(), |t| format!("{t:.1} s"));
    println!(
        "  central pod {} deleted: new pod {} on {} (pinned {node}; created after {}, Ready \
         after {}); a pod created meanwhile had its address after {addr_secs:.1} s, Ready after \
         {ready_secs:.1} s; NB rows kept: {} ({} LSPs)",
        name(&old),
        name(&new),
        node_of(&new),
        at(created),
        at(ready),
        lost_rows.is_empty(),
        before["Logical_Switch_Port"].len()
    );
    print_runs(&runs);
    pods.delete("after-central", &DeleteParams::default())
        .await?;
    // gone, its port with it, before the next step takes its picture of node2
    wait_until(
        "the pod after-central deleted",
        Duration::from_secs(120),
        || async { Ok(pods.get_opt("after-central").await?.is_none().then_some(())) },
    )
    .await?;
    if node_of(&new) != node {
        bail!(
            "the new central pod runs on {}, its files are on {node}",
            node_of(&new)
        );
    }
    if !lost_rows.is_empty() {
        bail!(
            "NB rows lost over a central restart: {}",
            lost_rows.join("; ")
        );
    }
    println!(
        "    issue target: an address within {ADDRESS_TARGET_SECS:.0} s: {}",
        if addr_secs <= ADDRESS_TARGET_SECS {
            "met"
        } else {
            "NOT met"
        }
    );
    if addr_secs > ADDRESS_BOUND_SECS {
        bail!(
            "a new pod got its address {addr_secs:.1} s after the central pod's deletion (bound {ADDRESS_BOUND_SECS:.0} s)"
        );
    }
    let over: Vec<_> = runs
        .iter()
        .filter(|(_, r)| r.longest_gap > GAP_KERNEL_AFXDP)
        .collect();
    if !over.is_empty() {
        bail!("running pods lost traffic over a central restart: {over:?}");
    }
    Ok(())
}

/// `(datapath name → tunnel key)` of the SB's logical datapaths: a restored SB keeps the
/// keys the nodes' flows use.
fn sb_tunnel_keys(e: &E2e, sb: &[String]) -> Result<BTreeMap<String, String>> {
    let mut args = vec!["ovn-sbctl"];
    args.extend(sb.iter().map(String::as_str));
    args.extend([
        "--timeout=10",
        "--format=csv",
        "--no-headings",
        "--columns=external_ids,tunnel_key",
        "list",
        "Datapath_Binding",
    ]);
    let out = e.cluster().node_exec(1, &args)?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let (ids, key) = l.rsplit_once(',')?;
            let name = ids.split("name=").nth(1)?.split([',', '}', '"']).next()?;
            Some((name.to_string(), key.trim().to_string()))
        })
        .collect())
}

/// `backup-restore`: `kubectl zovn backup DIR` while everything runs; then OVN central
/// loses its disk (the Deployment scaled to 0, its files removed from the pinned node,
/// scaled to 1: empty databases); `kubectl zovn restore DIR` into that fresh central. Every
/// NB row of before is back, the SB's datapaths keep their tunnel keys, the pods their
/// addresses, and pods reach each other across nodes and through a ClusterIP Service.
pub(crate) async fn backup_restore(e: &E2e) -> Result<()> {
    let plugins = super::diagnose::plugin_dir(e)?;
    let zovn = |args: &[&str]| super::diagnose::kubectl_zovn(&e.kc, &plugins, args);
    let central = release_pods(e, "central").await?;
    let (node, old) = central.into_iter().next().context("the central pod")?;
    let nb = ovn_client(e).await?.db_args(&ip_of(&old), 6641);
    let sb = ovn_client(e).await?.db_args(&ip_of(&old), 6642);
    let lsps = nb_rows(e, &nb, "Logical_Switch_Port", "name")?;
    let lbs = nb_rows(e, &nb, "Load_Balancer", "name")?;
    let keys = sb_tunnel_keys(e, &sb)?;
    let addrs = identities(e, NS, "").await?;
    let dir = e.cluster().dir().join("e2e-backup");
    let t = Instant::now();
    let (code, out, err) = zovn(&["backup", &dir.to_string_lossy()]);
    if code != 0 {
        bail!("kubectl zovn backup: exit {code}: {out}{err}");
    }
    let backup_secs = t.elapsed().as_secs_f64();
    // the disk lost: no central, its files gone, a fresh central with empty databases
    let deploy = format!("deployment/{RELEASE}-zstack-ovn-central");
    kubectl(&e.kc, &["scale", "-n", SYS, &deploy, "--replicas=0"])?;
    wait_until("no central pod", Duration::from_secs(120), || async {
        Ok(release_pods(e, "central").await?.is_empty().then_some(()))
    })
    .await?;
    let i: usize = node.trim_start_matches("node").parse()?;
    e.cluster()
        .node_exec(i, &["sh", "-c", "rm -rf /var/lib/zstack-ovn/central/*"])?;
    kubectl(&e.kc, &["scale", "-n", SYS, &deploy, "--replicas=1"])?;
    let fresh = wait_until(
        "a fresh central pod Ready",
        Duration::from_secs(120),
        || async {
            Ok(release_pods(e, "central")
                .await?
                .into_values()
                .find(is_ready))
        },
    )
    .await?;
    let t = Instant::now();
    let (code, out, err) = zovn(&["restore", &dir.to_string_lossy()]);
    if code != 0 {
        bail!("kubectl zovn restore: exit {code}: {out}{err}");
    }
    let restore_secs = t.elapsed().as_secs_f64();
    // every restored NB row has a new UUID: restore points SB's bindings at them
    let relinked: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("SB: ")?.split(' ').next()?.parse().ok())
        .with_context(|| format!("kubectl zovn restore printed no relinked count: {out}"))?;
    if relinked == 0 {
        bail!("kubectl zovn restore relinked no datapath binding: {out}");
    }
    // restore pauses northd while it replaces the databases, and resumes it
    let paused = kubectl(
        &e.kc,
        &[
            "exec",
            "-n",
            SYS,
            &name(&fresh),
            "-c",
            "northd",
            "--",
            "ovn-appctl",
            "-t",
            "/var/run/ovn/ovn-northd.ctl",
            "is-paused",
        ],
    )?;
    if paused.trim() != "false" {
        bail!("ovn-northd after kubectl zovn restore: is-paused {paused:?}");
    }
    let nb = ovn_client(e).await?.db_args(&ip_of(&fresh), 6641);
    let sb = ovn_client(e).await?.db_args(&ip_of(&fresh), 6642);
    let lsps_after = nb_rows(e, &nb, "Logical_Switch_Port", "name")?;
    let lbs_after = nb_rows(e, &nb, "Load_Balancer", "name")?;
    let missing: Vec<_> = lsps.iter().filter(|l| !lsps_after.contains(l)).collect();
    if !missing.is_empty() || lbs_after != lbs {
        bail!("after restore: LSPs missing {missing:?}; load balancers {lbs:?} → {lbs_after:?}");
    }
    let keys_after = wait_until(
        "the SB's datapaths with their tunnel keys",
        Duration::from_secs(30),
        || async {
            let k = sb_tunnel_keys(e, &sb)?;
            Ok((k.len() >= keys.len()).then_some(k))
        },
    )
    .await?;
    let moved: Vec<_> = keys
        .iter()
        .filter(|(n, k)| keys_after.get(*n) != Some(k))
        .collect();
    if !moved.is_empty() {
        bail!("datapaths whose tunnel key changed over backup/restore: {moved:?}");
    }
    if identities(e, NS, "").await? != addrs {
        bail!("pods changed over backup/restore");
    }
    // traffic: across nodes and through the Service
    let (n1, n2) = web_pods(e).await?;
    super::ping(e, &name(&n2[0]), &ip_of(&n1[0])).await?;
    let svcs: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(e.client.clone(), NS);
    let vip = svcs
        .get("web")
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .context("the web Service's ClusterIP")?;
    let (body, secs) = super::reach(e, &name(&n2[0]), &format!("http://{vip}/"))
        .await
        .context("the web Service from node2 after restore")?;
    // every client on node2, not only the one above: ovn-controller may still be binding
    // ports to the restored SB, and the next step's probes must not meet that tail
    probe_clients(e).await?;
    let target = ip_of(&n1[0]);
    let clients: Vec<String> = ["probe-afxdp", "probe-kernel"]
        .into_iter()
        .map(String::from)
        .chain(n2.iter().map(name))
        .collect();
    wait_until(
        "every pod on node2 reaching node1 after the restore",
        Duration::from_secs(120),
        || async {
            for c in &clients {
                if exec(&e.kc, NS, c, &["ping", "-c", "1", "-W", "1", &target]).is_err() {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )
    .await?;
    println!(
        "  kubectl zovn backup in {backup_secs:.1} s; central's files lost, a fresh central restored in \
         {restore_secs:.1} s ({relinked} SB datapath bindings relinked): {} LSPs, {} load balancers, {} datapath tunnel keys kept; a pod on node2 \
         reaches node1 and the Service ({body:?} after {secs:.1} s), all {} pods on node2 reach \
         node1 {:.1} s after the restore",
        lsps_after.len(),
        lbs_after.len(),
        keys_after.len(),
        clients.len(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
