//! Real-component test of the `tests::kube` harness: a private etcd + kube-apiserver 1.20.2
//! answering kube-rs (Namespaces, Pods, merge patches, CRDs, dynamic objects).
//!
//! The first run on a fresh machine builds kube-apiserver from Debian's source package
//! (~10 minutes, cached in /var/cache/zovn afterwards).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;

/// True while a process with this pid exists (zombies included: our harness reaps them).
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_pod_patch_crd() {
    if !tests::require_real("kube_apiserver_pod_patch_crd", &["etcd"]) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("kapi");
    let t = Instant::now();
    let api = tests::kube::KubeApi::start(s.dir.path())
        .await
        .expect("etcd + kube-apiserver start");
    eprintln!(
        "kube-apiserver ready at {} in {:?}",
        api.server_url(),
        t.elapsed()
    );
    let (etcd_pid, apiserver_pid) = api.pids();
    let (etcd_pid, apiserver_pid) = (etcd_pid.unwrap(), apiserver_pid.unwrap());
    assert!(api.kubeconfig_path().is_file());
    assert!(!api.token().is_empty());
    let client = api.client().await.expect("kube client");
    let version = client.apiserver_version().await.expect("GET /version");
    assert_eq!(
        (
            version.major.as_str(),
            version.minor.as_str(),
            version.git_version.as_str()
        ),
        ("1", "20", "v1.20.2")
    );

    // Namespace + Pod pinned to a node (no scheduler, no kubelet: it stays Pending).
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "zovn-test"}
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");

    let pods: Api<Pod> = Api::namespaced(client.clone(), "zovn-test");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p1", "labels": {"app": "zovn"}},
        "spec": {
            "nodeName": "node-a",
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]
        }
    }))
    .unwrap();
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    assert_eq!(
        created.spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-a")
    );

    let listed = pods
        .list(&ListParams::default().labels("app=zovn"))
        .await
        .expect("list pods");
    let names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["p1"]);

    let patch = json!({"metadata": {"annotations": {"zstack.io/test": "patched"}}});
    let patched = pods
        .patch("p1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("merge patch pod");
    let got = pods.get("p1").await.expect("get pod");
    for p in [&patched, &got] {
        assert_eq!(
            p.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("zstack.io/test"))
                .map(String::as_str),
            Some("patched")
        );
    }
    assert_eq!(
        got.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );

    // A cluster-scoped CRD, applied server-side, waited for until Established.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.zstack.io"},
        "spec": {
            "group": "test.zstack.io",
            "scope": "Cluster",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}
                    }}
                }}
            }]
        }
    }))
    .unwrap();
    crds.patch(
        "widgets.test.zstack.io",
        &PatchParams::apply("zovn-tests").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply CRD");
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(
            crds.clone(),
            "widgets.test.zstack.io",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("CRD established within 60 s")
    .expect("watch CRD");

    // An instance through the dynamic API. The CRD is Established, but the discovery/REST
    // handler can lag a moment behind: retry a NotFound briefly.
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("test.zstack.io", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut w = DynamicObject::new("w1", &ar);
    w.data = json!({"spec": {"size": 3, "color": "blue"}});
    let deadline = Instant::now() + Duration::from_secs(30);
    let created = loop {
        match widgets.create(&PostParams::default(), &w).await {
            Ok(o) => break o,
            Err(kube::Error::Api(e)) if e.code == 404 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("create widget: {e}"),
        }
    };
    assert_eq!(created.data["spec"]["size"], 3);
    let back = widgets.get("w1").await.expect("get widget");
    assert_eq!(back.data["spec"]["color"], "blue");
    assert_eq!(
        widgets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // Shutdown leaves no etcd / kube-apiserver behind.
    drop(client);
    drop(api);
    assert!(
        !alive(apiserver_pid),
        "kube-apiserver {apiserver_pid} still exists"
    );
    assert!(!alive(etcd_pid), "etcd {etcd_pid} still exists");
}
