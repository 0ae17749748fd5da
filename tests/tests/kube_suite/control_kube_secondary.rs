//! The `zstack-ovnkube-controller` binary learns NetworkAttachmentDefinitions from a real
//! kube-apiserver 1.20 (Multus's `k8s.cni.cncf.io/v1` CRD, installed after the controller
//! started, through kube-rs's dynamic API)
//! and serves a pod's secondary network on a real OVN NB + northd: the pod's
//! `k8s.ovn.org/pod-networks` gets the `<nad-ns>/<nad>` entry in the NAD's Subnet, the
//! second LSP appears; a NAD edited to drop its `subnet` is reported on the pod and the
//! port goes; a deleted pod leaves no secondary LSP.

use std::time::Duration;

use api::multus::NETWORK_ERRORS;
use api::pod_networks::{POD_NETWORKS, decode_network};
use api::subnet::Subnet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::json;
use tests::kube_objects::{KubeAndOvn, create, eventually};
use tests::nbctl::nbctl;

/// Multus's NetworkAttachmentDefinition CRD (as its deployment installs it).
fn nad_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "network-attachment-definitions.k8s.cni.cncf.io"},
        "spec": {"group": "k8s.cni.cncf.io", "scope": "Namespaced",
            "names": {"plural": "network-attachment-definitions", "singular": "network-attachment-definition",
                      "kind": "NetworkAttachmentDefinition", "shortNames": ["net-attach-def"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"config": {"type": "string"}}}},
                    "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .expect("crd")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_serves_secondary_networks_from_kube_nads() {
    const T: &str = "control_kube_secondary::controller_serves_secondary_networks_from_kube_nads";
    let mut bins = vec!["etcd"];
    bins.extend_from_slice(tests::OVSDB_BINS);
    if !tests::require_real(T, &bins) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("cksec");
    let KubeAndOvn {
        kube_api,
        client,
        central: _central,
        nb,
    } = KubeAndOvn::start(s.dir.path(), true).await;
    tests::record_real_run(T);
    // Multus installed after the controller: it finds the API on a later discovery retry
    let log = s.dir.path().join("controller.log");
    let _controller = KubeAndOvn::controller(&kube_api, &nb, &log);
    eventually(
        "the controller to miss the NAD API",
        Duration::from_secs(30),
        || async {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("NetworkAttachmentDefinition API not found")
                .then_some(())
        },
    )
    .await;
    tests::kube_objects::install_crd(&client, nad_crd()).await;

    let subnets: Api<Subnet> = Api::all(client.clone());
    for (name, cidr, default) in [
        ("main", "10.2.0.0/16", true),
        ("sec", "10.77.0.0/16", false),
    ] {
        create(
            &subnets,
            json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
            "metadata": {"name": name}, "spec": {"cidr": cidr, "default": default}}),
        )
        .await;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    create(
        &nodes,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node1"}}),
    )
    .await;
    let gvk = GroupVersionKind::gvk("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "network-attachment-definitions");
    let nads: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let nad = |config: serde_json::Value| {
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "vhost-sec", "namespace": "default"},
            "spec": {"config": config.to_string()}})
    };
    let good = json!({"cniVersion": "1.0.0", "name": "vhost-sec", "type": "zstack-ovn-cni",
        "interfaceType": "vhost-user", "subnet": "sec"});
    let obj: DynamicObject = serde_json::from_value(nad(good)).expect("nad");
    nads.create(&Default::default(), &obj)
        .await
        .expect("create NAD");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(&pods, json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "vm", "namespace": "default",
            "annotations": {"k8s.v1.cni.cncf.io/networks": r#"[{"name":"vhost-sec","interface":"net1"}]"#}},
        "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x"}]}}))
    .await;

    let annotation = |key: &'static str| {
        let pods = pods.clone();
        move || {
            let pods = pods.clone();
            async move {
                let p = pods.get("vm").await.ok()?;
                p.metadata
                    .annotations?
                    .get(key)
                    .cloned()
                    .filter(|v| !v.is_empty())
            }
        }
    };
    let entry = eventually(
        "vm's secondary network entry",
        Duration::from_secs(60),
        || {
            let get = annotation(POD_NETWORKS);
            async move { decode_network(&get().await?, "default/vhost-sec").ok()? }
        },
    )
    .await;
    let ip = entry.ip_addresses[0]
        .split('/')
        .next()
        .expect("ip")
        .to_string();
    assert!(ip.starts_with("10.77."), "{ip}");
    let lsp = "default_vm_default.vhost-sec";
    eventually("the second LSP", Duration::from_secs(30), || async {
        nbctl(&nb, &["lsp-list", "subnet-sec"])
            .contains(&format!("({lsp})"))
            .then_some(())
    })
    .await;
    assert_eq!(
        nbctl(&nb, &["lsp-get-addresses", lsp]).trim(),
        format!("{} {ip}", entry.mac_address)
    );

    // the NAD loses its subnet: the pod says why, the port goes
    let patch = json!({"spec": {"config": json!({"type": "zstack-ovn-cni", "name": "vhost-sec"}).to_string()}});
    nads.patch("vhost-sec", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch NAD");
    let why = eventually(
        "the network error on the pod",
        Duration::from_secs(30),
        annotation(NETWORK_ERRORS),
    )
    .await;
    assert!(why.contains("has no \\\"subnet\\\""), "{why}");
    eventually(
        "the second LSP removed",
        Duration::from_secs(30),
        || async { (!nbctl(&nb, &["lsp-list", "subnet-sec"]).contains(lsp)).then_some(()) },
    )
    .await;

    // fixed again, then the pod deleted: no secondary LSP left
    let patch =
        json!({"spec": {"config": json!({"type": "zstack-ovn-cni", "subnet": "sec"}).to_string()}});
    nads.patch("vhost-sec", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch NAD");
    eventually("the second LSP back", Duration::from_secs(30), || async {
        nbctl(&nb, &["lsp-list", "subnet-sec"])
            .contains(lsp)
            .then_some(())
    })
    .await;
    pods.delete("vm", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    eventually("no secondary LSP", Duration::from_secs(30), || async {
        let left = nbctl(
            &nb,
            &[
                "--bare",
                "--columns=name",
                "find",
                "Logical_Switch_Port",
                "external_ids:\"zstack.io/kind\"=pod-network",
            ],
        );
        left.trim().is_empty().then_some(())
    })
    .await;
}
