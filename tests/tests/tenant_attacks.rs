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

use std::time::Duration;

use lab::kubectl::Kubectl;
use lab::ovs_upgrade::{Options, UpgradeError};
use lab::release::{Release, ReleaseError};
use serde_json::json;

const TENANT: &str = "tenant-a";

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
    match lab::ovs_upgrade::upgrade(&k, &opts, |_| {}) {
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
