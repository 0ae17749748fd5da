//! Step `single-nic` of `cluster_e2e` (issue 29), after `uninstall`: the README's install
//! command, word for word, on nodes whose only NIC carries both kubelet's traffic and the
//! tunnel.
//!
//! Both nodes are made single-NIC (`KubeCluster::make_single_nic`, what `zovn cluster up
//! --single-nic` builds: eth1 deleted; eth0 holding the node's IPv4 address, a global IPv6
//! address and the default routes, IPv4 and IPv6). Then the README's `helm install` line
//! runs as it is written (no values: `tunnel.interface` defaults to `auto`, the NIC holding
//! the node's InternalIP). Checked:
//!
//! - every release pod Ready, both nodes Ready;
//! - on each node br-phy holds eth0's addresses and both default routes, eth0 none of them;
//! - kubelet keeps its API server after the move: each node's Lease is renewed again;
//! - pods on the two nodes reach each other (HTTP and ping, both ways);
//! - `helm uninstall` (and the CRD deleted): eth0 has its addresses, its default routes
//!   and its Service CIDR route back, nothing of ours is left on either node, and each
//!   kubelet still renews its Lease.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use lab::kubecluster::config::{SINGLE_NIC_GW4, SINGLE_NIC_GW6};
use lab::kubecluster::{node_mgmt_ip, node_mgmt_ip6};
use tests::e2e::objects::{ip_of, name, node_is_ready, node_of};
use tests::e2e::wait_until;

use super::{
    E2e, NS, SYS, create_web, delete_test_namespace, helm_uninstall, leftovers, ping, pods_ready,
    reach,
};

/// The README's release name and its pods: central, 2 controllers, an agent and an OVS
/// pod on each node.
const README_RELEASE: &str = "zstack-ovn";
const README_INSTANCE: &str = "app.kubernetes.io/instance=zstack-ovn";
const README_PODS: usize = 7;

/// The README's `helm install …` line, split into words.
fn readme_install() -> Result<Vec<String>> {
    let readme = include_str!("../../../README.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("helm install "))
        .context("README.md has no `helm install` line")?;
    let line = line.split('#').next().unwrap_or_default();
    Ok(line.split_whitespace().map(str::to_string).collect())
}

/// True if node `i` holds a default route of `family` (`-4`/`-6`) through `dev`.
fn default_route_on(e: &E2e, i: usize, family: &str, dev: &str) -> bool {
    e.cluster()
        .node_exec(i, &["ip", family, "route", "show", "default"])
        .is_ok_and(|r| r.lines().any(|l| l.contains(&format!("dev {dev}"))))
}

/// True if `dev` on node `i` holds `ip` (any prefix length).
fn has_addr(e: &E2e, i: usize, dev: &str, ip: &str) -> bool {
    e.cluster()
        .node_exec(i, &["ip", "-o", "addr", "show", "dev", dev])
        .is_ok_and(|a| a.contains(&format!(" {ip}/")))
}

/// What node `i`'s NICs hold: the moved shape (`on_bridge`) or the node's own.
fn nic_shape(e: &E2e, i: usize, on_bridge: bool) -> Result<()> {
    let (holder, other) = if on_bridge {
        ("br-phy", "eth0")
    } else {
        ("eth0", "br-phy")
    };
    for ip in [node_mgmt_ip(i), node_mgmt_ip6(i)] {
        if !has_addr(e, i, holder, &ip) {
            bail!("node{i}: {holder} does not hold {ip}");
        }
        if has_addr(e, i, other, &ip) {
            bail!("node{i}: {other} still holds {ip}");
        }
    }
    for family in ["-4", "-6"] {
        if !default_route_on(e, i, family, holder) {
            let r = e
                .cluster()
                .node_exec(i, &["ip", family, "route", "show", "default"])
                .unwrap_or_default();
            bail!("node{i}: the {family} default route is not through {holder}: {r:?}");
        }
    }
    Ok(())
}

/// Waits until each node's kubelet renewed its Lease (every 10 s) after `after`: it
/// reaches its API server.
async fn leases_renewed(e: &E2e, after: &str) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(e.client.clone(), "kube-node-lease");
    let renew_time = |n: String| {
        let leases = leases.clone();
        async move {
            let l = leases.get(&n).await?;
            anyhow::Ok(l.spec.and_then(|s| s.renew_time).map(|t| t.0))
        }
    };
    for i in 1..=2 {
        let n = format!("node{i}");
        let before = renew_time(n.clone()).await?;
        wait_until(
            &format!("{n}'s Lease renewed after {after}"),
            Duration::from_secs(60),
            || async {
                let now = renew_time(n.clone()).await?;
                Ok((now.is_some() && now != before).then_some(()))
            },
        )
        .await?;
    }
    Ok(())
}

async fn nodes_ready(e: &E2e, bound: Duration) -> Result<()> {
    let nodes: Api<Node> = Api::all(e.client.clone());
    wait_until("both nodes Ready", bound, || {
        let nodes = nodes.clone();
        async move {
            for i in 1..=2 {
                if !node_is_ready(&nodes.get(&format!("node{i}")).await?) {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        }
    })
    .await
}

pub async fn single_nic(e: &E2e) -> Result<()> {
    let c = e.cluster();
    for i in 1..=2 {
        c.make_single_nic(i)?;
        nic_shape(e, i, false).with_context(|| format!("node{i} made single-NIC"))?;
    }
    let words = readme_install()?;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    println!("  README: {}", words.join(" "));
    let t = Instant::now();
    let out = std::process::Command::new(&e.helm)
        .args(&words[1..])
        .current_dir(&root)
        .env("KUBECONFIG", &e.kc)
        .output()
        .context("run helm")?;
    if !out.status.success() {
        bail!(
            "the README's helm install: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    pods_ready(
        e,
        SYS,
        README_INSTANCE,
        README_PODS,
        Duration::from_secs(300),
    )
    .await?;
    let ready_secs = t.elapsed().as_secs_f64();
    for i in 1..=2 {
        wait_until(
            &format!("node{i}: br-phy holding eth0's addresses and default routes"),
            Duration::from_secs(60),
            || async { Ok(nic_shape(e, i, true).is_ok().then_some(())) },
        )
        .await
        .with_context(|| {
            nic_shape(e, i, true)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        })?;
    }
    let moved_secs = t.elapsed().as_secs_f64();
    // kubelet reaches its API server through br-phy now: each node's Lease is renewed
    // (every 10 s) after the move, and the nodes stay Ready
    leases_renewed(e, "the move").await?;
    nodes_ready(e, Duration::from_secs(60)).await?;

    create_web(e, 2).await?;
    let pods = pods_ready(e, NS, "app=web", 2, Duration::from_secs(180)).await?;
    let (a, b) = (&pods[0], &pods[1]);
    if node_of(a) == node_of(b) {
        bail!("both web pods on {}", node_of(a));
    }
    for (from, to) in [(a, b), (b, a)] {
        let url = format!("http://{}:8080/", ip_of(to));
        let (body, _) = reach(e, &name(from), &url).await?;
        if body != name(to) {
            bail!(
                "{} fetched {body:?} from {}, not its name",
                name(from),
                name(to)
            );
        }
        ping(e, &name(from), &ip_of(to)).await?;
    }
    println!(
        "  single NIC: the README's install Ready in {ready_secs:.1} s, eth0's addresses and \
         default routes (IPv4, IPv6) on br-phy at {moved_secs:.1} s, both kubelets renewed \
         their Lease after it; {}@{} ⇄ {}@{} http + ping ok",
        name(a),
        node_of(a),
        name(b),
        node_of(b)
    );

    // uninstall: eth0 gets everything back
    delete_test_namespace(e, Duration::from_secs(120)).await?;
    let t = Instant::now();
    helm_uninstall(e, README_RELEASE).await?;
    wait_until(
        "eth0 holding its addresses and routes again, nothing of ours left",
        Duration::from_secs(60),
        || async {
            let mut left = Vec::new();
            for i in 1..=2 {
                if let Err(err) = nic_shape(e, i, false) {
                    left.push(err.to_string());
                }
                left.extend(
                    leftovers(c, i, true)
                        .into_iter()
                        .map(|l| format!("node{i}: {l}")),
                );
            }
            if left.is_empty() {
                Ok(Some(()))
            } else {
                bail!("{}", left.join("; "))
            }
        },
    )
    .await?;
    println!(
        "  helm uninstall → eth0 holds {}/{} and the default routes via {SINGLE_NIC_GW4} / \
         {SINGLE_NIC_GW6} again on both nodes, nothing left, in {:.1} s",
        node_mgmt_ip(1),
        node_mgmt_ip6(1),
        t.elapsed().as_secs_f64()
    );
    // without a CNI plugin the nodes are NotReady; their kubelets still reach the API
    // server through eth0
    leases_renewed(e, "the uninstall").await
}
