//! Issue 30's attacks, tried as a tenant (a user who owns one namespace) would, each
//! refused: this file holds the cases on the real kube-apiserver; the cases on real
//! traffic live beside the feature they attack (`services_lab`'s Service claiming a node's
//! address, the NetworkPolicy translator's forced name collisions).
//!
//! - `a_look_alike_release_in_a_tenant_namespace_is_never_used`: a pod labelled as the
//!   chart's controller and a DaemonSet labelled as its OVS pool, created in a tenant's
//!   namespace, are neither found by the diagnostics (`kubectl zovn status/trace/capture`
//!   exec into what they find) nor patched by `kubectl zovn upgrade-ovs`; the release in
//!   its own namespace is found, alone.
//! - `forged_address_annotations_take_nothing_at_a_leader_change`: the controller (on a
//!   real NB + northd) gave a pod of team B an address of team B's Subnet; a tenant then
//!   copies that pod's address annotations onto a Pending pod and onto a scheduled pod of
//!   its own namespace, and claims a free address of team B's Subnet on a third; at the
//!   next leader change (a new controller's first pass) the victim keeps its address and
//!   port, and the tenant's pods get addresses of the Subnet serving their namespace.

use std::time::Duration;

use diag::kubectl::Kubectl;
use diag::ovs_upgrade::{Options, UpgradeError};
use diag::release::{Release, ReleaseError};
use serde_json::json;

const TENANT: &str = "tenant-a";

mod forged {
    use std::collections::BTreeMap;

    use api::pod_networks::{POD_NETWORKS, POD_SUBNET, decode_pod_networks};
    use api::subnet::{Subnet, SubnetSpec};
    use control::controller::Controller;
    use control::model::{NodeInfo, PodInfo};
    use control::reconcile::Reconciler;
    use control::source::Event;
    use control::source::memory::MemoryStore;
    use control::translate::ClusterConfig;
    use lab::central::{Central, CentralConfig};
    use ovsdb::{Client, ClientConfig};
    use tokio::sync::mpsc::UnboundedReceiver;

    pub fn subnet(name: &str, cidr: &str, namespaces: &[&str], default: bool) -> Subnet {
        let mut s = Subnet::new(
            name,
            SubnetSpec {
                cidr: cidr.into(),
                namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
                default,
                ..Default::default()
            },
        );
        s.metadata.generation = Some(1);
        s
    }

    pub fn pod(
        ns: &str,
        name: &str,
        node: Option<&str>,
        ann: &BTreeMap<String, String>,
    ) -> PodInfo {
        PodInfo {
            namespace: ns.into(),
            name: name.into(),
            uid: format!("uid-{ns}-{name}"),
            node: node.map(str::to_string),
            host_network: false,
            labels: BTreeMap::new(),
            annotations: ann.clone(),
            completed: false,
            ports: Vec::new(),
        }
    }

    pub fn node(name: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            addresses: vec![],
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }
    }

    pub fn central(s: &tests::Scratch) -> Central {
        Central::start(CentralConfig {
            dir: s.dir.path().join("central"),
            raft: false,
            northd: true,
            tcp: false,
        })
        .expect("start OVN central")
    }

    pub async fn controller(nb: &str, store: &MemoryStore) -> Controller<MemoryStore> {
        let client = Client::connect(ClientConfig::parse(nb).expect("remote"))
            .await
            .expect("connect NB");
        let rec = Reconciler::start(client, "zstack-ovn")
            .await
            .expect("reconciler");
        Controller::new(ClusterConfig::default(), rec, store.clone())
    }

    /// Passes until one writes nothing (the controller's own writes come back as events).
    pub async fn settle(ctl: &mut Controller<MemoryStore>, rx: &mut UnboundedReceiver<Event>) {
        ctl.settle(rx, 6).await.expect("settle");
    }

    /// The pod's primary address (its annotation, as the controller wrote it), if any.
    pub fn ip_of(store: &MemoryStore, key: &str) -> Option<String> {
        let p = store.pod(key)?;
        let net = decode_pod_networks(p.annotations.get(POD_NETWORKS)?).ok()?;
        net.ip_addresses.first().cloned()
    }

    /// `ann` with its address (and the Subnet annotation) replaced: a forged claim.
    pub fn with_address(
        ann: &BTreeMap<String, String>,
        from: &str,
        to: &str,
    ) -> BTreeMap<String, String> {
        let mut a = ann.clone();
        if let Some(v) = a.get_mut(POD_NETWORKS) {
            *v = v.replace(from, to);
        }
        assert!(a.contains_key(POD_SUBNET), "{a:?}");
        a
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_address_annotations_take_nothing_at_a_leader_change() {
    use forged::*;
    let test = "tenant_attacks::forged_address_annotations_take_nothing_at_a_leader_change";
    if !tests::require_real(
        test,
        &["ovsdb-server", "ovsdb-tool", "ovn-nbctl", "ovn-northd"],
    ) {
        return;
    }
    let s = tests::scratch("forge");
    let central = central(&s);
    let nb = central.nb_remote();
    let (store, mut rx) = control::source::memory::MemoryStore::new();
    store.apply_subnet(subnet("team-b", "10.1.0.0/24", &["team-b"], false));
    store.apply_subnet(subnet("shared", "10.2.0.0/24", &[], true));
    store.apply_node(node("node1"));
    let none = Default::default();
    store.apply_pod(pod("team-b", "victim", Some("node1"), &none));
    store.mark_synced();
    let mut ctl = controller(&nb, &store).await;
    settle(&mut ctl, &mut rx).await;
    let victim_ip = ip_of(&store, "team-b/victim").expect("the victim's address");
    assert!(victim_ip.starts_with("10.1.0."), "{victim_ip}");
    let victim_ann = store.pod("team-b/victim").expect("victim").annotations;

    // the leader goes; meanwhile the tenant (namespace `aaa`: its pods sort before the
    // victim) writes address annotations on pods of its own
    drop(ctl);
    let victim_addr = victim_ip.split('/').next().unwrap_or_default().to_string();
    // team B's Subnet is 10.1.0.0/24 and the victim its only pod: .77 is free
    let free_addr = "10.1.0.77".to_string();
    assert_ne!(victim_addr, free_addr);
    store.apply_pod(pod("aaa", "pending", None, &victim_ann));
    store.apply_pod(pod("aaa", "running", Some("node1"), &victim_ann));
    store.apply_pod(pod(
        "aaa",
        "other-team",
        Some("node1"),
        &with_address(&victim_ann, &victim_addr, &free_addr),
    ));
    let mut replay = store.replay();
    let mut ctl = controller(&nb, &store).await;
    settle(&mut ctl, &mut replay).await;

    // team B's switch holds no pod port of the tenant; the victim's keeps its address
    let ports = tests::nbctl::nbctl(&nb, &["lsp-list", "subnet-team-b"]);
    assert!(
        ports.contains("team-b_victim") && !ports.contains("aaa_"),
        "{ports}"
    );
    let addrs = tests::nbctl::nbctl(&nb, &["lsp-get-addresses", "team-b_victim"]);
    assert!(
        addrs.contains(&format!("{victim_addr}\"")) || addrs.trim_end().ends_with(&victim_addr),
        "{addrs}"
    );
    assert_eq!(
        ip_of(&store, "team-b/victim").as_deref(),
        Some(victim_ip.as_str()),
        "the victim keeps its address"
    );
    for key in ["aaa/running", "aaa/other-team"] {
        let ip = ip_of(&store, key).unwrap_or_default();
        assert!(
            ip.starts_with("10.2.0."),
            "{key} gets an address of the Subnet serving its namespace, not {ip}"
        );
    }
    drop(ctl);
}

fn kubectl_apply(k: &Kubectl, manifest: &serde_json::Value) {
    use std::io::Write;
    let mut child = k
        .command()
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl apply");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(manifest.to_string().as_bytes())
        .expect("write manifest");
    let out = child.wait_with_output().expect("kubectl apply");
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn look_alike_pod(ns: &str, name: &str, component: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": ns, "name": name, "labels": {
            "app.kubernetes.io/name": "zstack-ovn",
            "app.kubernetes.io/component": component}},
        "spec": {"containers": [{"name": "controller", "image": "busybox",
            "args": ["--nb=tcp:203.0.113.9:6641"]}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_alike_release_in_a_tenant_namespace_is_never_used() {
    let test = "tenant_attacks::a_look_alike_release_in_a_tenant_namespace_is_never_used";
    if !tests::require_real(test, &["etcd", "kubectl"]) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("tenant");
    let api = tests::kube::KubeApi::start(s.dir.path())
        .await
        .expect("etcd + kube-apiserver");
    let k = Kubectl {
        kubeconfig: Some(api.kubeconfig_path().to_path_buf()),
        ..Default::default()
    };
    kubectl_apply(
        &k,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANT}}),
    );
    // what the tenant can create in its namespace (the `edit` role's verbs)
    kubectl_apply(&k, &look_alike_pod(TENANT, "zs-controller", "controller"));
    kubectl_apply(
        &k,
        &json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"namespace": TENANT, "name": "zs-ovs", "labels": {
                "app.kubernetes.io/name": "zstack-ovn", "app.kubernetes.io/component": "ovs"}},
            "spec": {"selector": {"matchLabels": {"x": "y"}},
                "template": {"metadata": {"labels": {"x": "y"}},
                    "spec": {"containers": [{"name": "ovs", "image": "busybox"}]}}}}),
    );

    // no release in kube-system: the tenant's pod is not one
    match Release::discover(&k) {
        Err(ReleaseError::NotInstalled(ns)) => assert_eq!(ns, "kube-system"),
        Err(e) => panic!("unexpected error: {e}"),
        Ok(r) => panic!(
            "the tenant's look-alike was taken for the release: {:?}",
            r.pods
                .iter()
                .map(|p| (&p.namespace, &p.name))
                .collect::<Vec<_>>()
        ),
    }
    let opts = Options {
        dry_run: true,
        timeout: Duration::from_secs(10),
        ..Default::default()
    };
    match diag::ovs_upgrade::upgrade(&k, &opts, |_| {}) {
        Err(UpgradeError::NoDaemonSet(ns)) => assert_eq!(ns, "kube-system"),
        other => panic!("upgrade-ovs considered the tenant's DaemonSet: {other:?}"),
    }
    let e = Release::discover(&k).expect_err("none").to_string();
    assert!(
        e.contains("namespace kube-system") && e.contains("--release-namespace"),
        "{e}"
    );

    // the release in its namespace: found, and alone
    kubectl_apply(
        &k,
        &look_alike_pod("kube-system", "zs-controller", "controller"),
    );
    let r = Release::discover(&k).expect("the release in kube-system");
    let found: Vec<(&str, &str)> = r
        .pods
        .iter()
        .map(|p| (p.namespace.as_str(), p.name.as_str()))
        .collect();
    assert_eq!(found, [("kube-system", "zs-controller")]);
    // an operator who installed it elsewhere names the namespace
    let tenant_k = Kubectl {
        release_namespace: Some(TENANT.into()),
        ..k.clone()
    };
    let r = Release::discover(&tenant_k).expect("named namespace");
    assert!(r.pods.iter().all(|p| p.namespace == TENANT));
}
