//! `upgrade-release` (issue 29): the previous release (`deploy/previous-release`, installed
//! by `install`) upgraded to this tree's chart and image the way docs/install.md
//! ("Upgrading") tells an operator to, while three pods the previous release started talk
//! across nodes (probes at 10 packets/s from node2, an AF_XDP pod and a kernel-port pod,
//! to a pod on node1, the DPDK node):
//!
//! 1. `helm upgrade` with the current chart and the same values file (`--wait`): the
//!    controller, OVN central and the agent DaemonSets roll to the current image; the OVS
//!    DaemonSets (`OnDelete`) keep their pods and the previous image. Asserted: every
//!    rollout completes, no probe loses a packet (the agent-only bound), the OVS pods are
//!    the same pods.
//! 2. Node by node (node2, then node1), the OVS pod deleted: its successor runs the current
//!    image; every probe's longest gap printed beside the target (≤ 1 s on the
//!    AF_XDP node, ≤ 2 s on the DPDK node) and asserted against what this machine meets
//!    (`day2::recreation_over`).
//!
//! Then no test pod was re-created or changed address, every release pod runs the current
//! image, and Helm records the current chart version. The step's namespace is deleted so
//! that the steps after it start as on a fresh install of the current release.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;
use tests::e2e::objects::{create, create_namespace, ip_of, name, sleeper};
use tests::e2e::ping_probe::Probe;
use tests::e2e::wait_until;

use super::day2::{
    GAP_DPDK, GAP_KERNEL_AFXDP, Recreated, identities, images_of, print_runs, recreate_ovs_pod,
    recreation_over, release_pods, rollouts_complete, stop_probes_in,
};
use super::{E2e, INSTANCE, RELEASE, SYS, pods_ready};

/// The step's own namespace: its pods are gone before the next step.
const UNS: &str = "e2e-upgrade";

fn current_image_suffix() -> String {
    format!(":{}", env!("CARGO_PKG_VERSION"))
}

/// The probes: node2's AF_XDP pod and kernel-port pod to node1's pod.
fn start_probes(e: &E2e, target: &str) -> Result<Vec<Probe>> {
    Ok(vec![
        Probe::start(
            &e.kc,
            UNS,
            "upg-afxdp",
            target,
            "AF_XDP pod (node2) → pod on the DPDK node",
        )?,
        Probe::start(
            &e.kc,
            UNS,
            "upg-kernel",
            target,
            "kernel-port pod (node2) → pod on the DPDK node",
        )?,
    ])
}

/// Waits until every probe's path answers a single ping.
async fn paths_back(e: &E2e, target: &str) -> Result<()> {
    wait_until(
        "every probe's path answering again",
        Duration::from_secs(60),
        || async {
            for from in ["upg-afxdp", "upg-kernel"] {
                tests::e2e::exec(&e.kc, UNS, from, &["ping", "-c", "1", "-W", "1", target])?;
            }
            Ok(Some(()))
        },
    )
    .await
}

pub(crate) async fn upgrade_release(e: &E2e) -> Result<()> {
    let prev = e.previous.as_ref().context(
        "no previous release installed (install installs it when upgrade-release is selected)",
    )?;
    let cur = env!("CARGO_PKG_VERSION");
    // the previous release's pods
    create_namespace(&e.client, UNS).await?;
    let pods = e.pods(UNS);
    let labels = json!({"e2e": "upgrade"});
    create(
        &pods,
        sleeper(UNS, "upg-target", Some("node1"), labels.clone()),
    )
    .await?;
    create(
        &pods,
        sleeper(UNS, "upg-afxdp", Some("node2"), labels.clone()),
    )
    .await?;
    let mut kernel = sleeper(UNS, "upg-kernel", Some("node2"), labels);
    kernel["metadata"]["annotations"] = json!({api::keys::POD_DATAPATH: "kernel"});
    create(&pods, kernel).await?;
    let ready = pods_ready(e, UNS, "e2e=upgrade", 3, Duration::from_secs(180)).await?;
    let target = ready
        .iter()
        .find(|p| name(p) == "upg-target")
        .map(ip_of)
        .context("upg-target")?;
    paths_back(e, &target).await?;
    let pods_before = identities(e, UNS, "").await?;
    let ovs_before = release_pods(e, "ovs").await?;
    for (node, p) in &ovs_before {
        let images = images_of(p);
        if !images
            .iter()
            .all(|i| i.ends_with(&format!(":{}", prev.version)))
        {
            bail!(
                "the OVS pod on {node} runs {images:?}, not the previous release {}",
                prev.version
            );
        }
    }

    // 1. helm upgrade: everything but the OVS pods rolls
    let probes = start_probes(e, &target)?;
    let t = Instant::now();
    let values = e.cluster().dir().join("e2e-values.yaml");
    // the current release's values (adaptive PMD sleep), for every later step too
    std::fs::write(&values, super::values(&e.cluster().api_server(), false))?;
    let r = tests::helm::run(
        &e.helm,
        &[
            "upgrade",
            RELEASE,
            &tests::helm::chart_dir().to_string_lossy(),
            "-n",
            SYS,
            "--kubeconfig",
            &e.kc.to_string_lossy(),
            "-f",
            &values.to_string_lossy(),
            "--wait",
            "--timeout",
            "6m",
        ],
    )?;
    if !r.ok {
        bail!(
            "helm upgrade {} → {cur}: {}{}",
            prev.version,
            r.stdout,
            r.stderr
        );
    }
    let helm_secs = t.elapsed().as_secs_f64();
    rollouts_complete(
        e,
        &[
            "deployment/-controller",
            "deployment/-central",
            "daemonset/-node",
            "daemonset/-node-dpdk",
        ],
    )?;
    let rolled_secs = t.elapsed().as_secs_f64();
    let runs = stop_probes_in(e, UNS, probes).await?;
    let ovs_after = release_pods(e, "ovs").await?;
    let same_ovs = ovs_before
        .iter()
        .all(|(n, p)| ovs_after.get(n).map(|q| &q.metadata.uid) == Some(&p.metadata.uid));
    println!(
        "  helm upgrade {} ({}) → {cur}: returned in {helm_secs:.1} s, every rollout complete after \
         {rolled_secs:.1} s; OVS pods unchanged: {same_ovs}:",
        prev.version, prev.tag
    );
    print_runs(&runs);
    if !same_ovs {
        bail!("the upgrade restarted OVS pods (their DaemonSets are OnDelete)");
    }
    let lossy: Vec<_> = runs.iter().filter(|(_, r)| r.lost() > 0).collect();
    if !lossy.is_empty() {
        bail!("packets lost while the release rolled (OVS pods kept): {lossy:?}");
    }

    // 2. the OVS DaemonSets, node by node. This chart adds an env var to ovs-vswitchd
    // (GLIBC_TUNABLES), which only a new pod can take: `kubectl zovn upgrade-ovs` must
    // say so and leave the pods alone, so they are re-created
    let plugins = super::diagnose::plugin_dir(e)?;
    let (code, out, err) =
        super::diagnose::kubectl_zovn(&e.kc, &plugins, &["upgrade-ovs", "--dry-run"]);
    if code != 1 || !out.contains("spec.containers[ovs-vswitchd].env") {
        bail!(
            "kubectl zovn upgrade-ovs --dry-run after the chart's upgrade: exit {code} (want 1,              ovs-vswitchd's env named): {out}{err}"
        );
    }
    println!(
        "  kubectl zovn upgrade-ovs --dry-run: {}",
        out.trim().replace('\n', "\n    ")
    );
    let mut over = Vec::new();
    for (node, goal) in [("node2", GAP_KERNEL_AFXDP), ("node1", GAP_DPDK)] {
        let probes = start_probes(e, &target)?;
        let Recreated {
            old,
            new,
            created_secs,
            ready_secs,
            old_exits,
        } = recreate_ovs_pod(e, node).await?;
        let runs = stop_probes_in(e, UNS, probes).await?;
        let images = images_of(&new);
        if !images.iter().all(|i| i.ends_with(&current_image_suffix())) {
            bail!("{node}: the new OVS pod runs {images:?}, not {cur}");
        }
        let met = runs.iter().all(|(_, r)| r.longest_gap <= goal);
        println!(
            "  {node}: OVS pod {} ({}) deleted (its containers: {old_exits}), {} ({cur}) created \
             {created_secs:.1} s and Ready {ready_secs:.1} s later; issue target {} ms {}:",
            name(&old),
            prev.version,
            name(&new),
            goal.as_millis(),
            if met { "met" } else { "NOT met" }
        );
        print_runs(&runs);
        for (what, r) in runs {
            if let Some(why) = recreation_over(r.longest_gap, created_secs) {
                over.push(format!("{node}: {what}: {r}: {why}"));
            }
        }
    }
    if !over.is_empty() {
        bail!("gaps over the bound: {}", over.join("; "));
    }

    // 3. the release is the current one, the pods are the same pods
    let pods_after = identities(e, UNS, "").await?;
    if pods_after != pods_before {
        bail!("test pods changed: {pods_before:?} → {pods_after:?}");
    }
    let stale: Vec<String> = e
        .pods(SYS)
        .list(&kube::api::ListParams::default().labels(INSTANCE))
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            !images_of(p)
                .iter()
                .all(|i| i.ends_with(&current_image_suffix()))
        })
        .map(|p| format!("{} {:?}", name(p), images_of(p)))
        .collect();
    if !stale.is_empty() {
        bail!("release pods not on {cur}: {stale:?}");
    }
    let history = tests::helm::run(
        &e.helm,
        &[
            "history",
            RELEASE,
            "-n",
            SYS,
            "--kubeconfig",
            &e.kc.to_string_lossy(),
            "-o",
            "json",
        ],
    )?;
    let deployed_chart = serde_json::from_str::<serde_json::Value>(&history.stdout)
        .ok()
        .and_then(|h| {
            h.as_array()?.iter().find(|r| r["status"] == "deployed")?["chart"]
                .as_str()
                .map(str::to_string)
        });
    if deployed_chart.as_deref() != Some(&format!("zstack-ovn-{cur}")) {
        bail!("helm history: deployed chart {deployed_chart:?}, not zstack-ovn-{cur}");
    }
    println!(
        "  release {} → {cur} complete: every release pod on {cur}, the 3 test pods kept their uid and address",
        prev.version
    );
    // the current release's central pod serves OVN's own metrics
    super::central_metrics(e).await?;

    let nss: Api<Namespace> = Api::all(e.client.clone());
    nss.delete(UNS, &DeleteParams::default()).await?;
    wait_until(
        &format!("namespace {UNS} gone"),
        Duration::from_secs(180),
        || async { Ok(nss.get_opt(UNS).await?.is_none().then_some(())) },
    )
    .await?;
    Ok(())
}
