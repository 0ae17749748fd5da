//! The controller's default Subnet on a real kube-apiserver 1.20 + etcd and a real OVN NB
//! and northd: `zstack-ovnkube-controller --cluster-cidr 10.244.0.0/16` creates the Subnet
//! `cluster-default` (labelled as ours); a pod in a fresh namespace with no user Subnet gets
//! an address in it; deleted, the Subnet comes back; a user's `default: true` Subnet created
//! afterwards wins for new pods, the first pod keeps its address, and the managed Subnet's
//! status says it yields; restarted with another `--cluster-cidr`, the controller leaves the
//! Subnet as it is and its `MatchesClusterCIDR` condition says they disagree.

use std::time::Duration;

use api::keys::{MANAGED_BY, MANAGED_BY_CONTROLLER};
use api::pod_networks::{POD_NETWORKS, decode_pod_networks};
use api::subnet::{
    CONDITION_CLUSTER_DEFAULT, CONDITION_MATCHES_FLAG, REASON_CIDR_MISMATCH, REASON_YIELDS, Subnet,
};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;
use tests::kube_objects::{KubeAndOvn, create, eventually};

const BOUND: Duration = Duration::from_secs(30);

/// The pod's primary address, once the controller has written it.
async fn pod_ip(pods: &Api<Pod>, name: &str) -> String {
    let ann = eventually(&format!("{name}'s pod-networks"), BOUND, || {
        let api = pods.clone();
        let name = name.to_string();
        async move {
            let p = api.get(&name).await.ok()?;
            p.metadata.annotations?.get(POD_NETWORKS).cloned()
        }
    })
    .await;
    let net = decode_pod_networks(&ann).expect("pod-networks");
    net.ip_addresses[0].split('/').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_keeps_the_default_subnet_on_real_kube_apiserver() {
    let mut bins = vec!["etcd"];
    bins.extend_from_slice(tests::OVSDB_BINS);
    if !tests::require_real(
        "default_subnet_kube_controller_keeps_the_default_subnet_on_real_kube_apiserver",
        &bins,
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("dsnkube");
    let KubeAndOvn {
        kube_api,
        client,
        central: _central,
        nb,
    } = KubeAndOvn::start(s.dir.path(), true).await;
    let controller = KubeAndOvn::controller_with_args(
        &kube_api,
        &nb,
        &s.dir.path().join("controller.log"),
        &["--cluster-cidr", "10.244.0.0/16"],
    );

    // the Subnet appears, labelled as ours, Active, the cluster's default
    let subnets: Api<Subnet> = Api::all(client.clone());
    let sn = eventually("Subnet cluster-default Active", BOUND, || {
        let api = subnets.clone();
        async move {
            let sn = api.get("cluster-default").await.ok()?;
            let active = sn
                .status
                .as_ref()
                .and_then(|st| st.condition(CONDITION_CLUSTER_DEFAULT))
                .is_some_and(|c| c.status == "True");
            active.then_some(sn)
        }
    })
    .await;
    assert_eq!(
        sn.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MANAGED_BY))
            .map(String::as_str),
        Some(MANAGED_BY_CONTROLLER)
    );
    assert_eq!(sn.spec.cidr, "10.244.0.0/16");
    assert!(sn.spec.default);

    // a pod in a fresh namespace, no user Subnet anywhere
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create(
        &namespaces,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "hs"}}),
    )
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    create(
        &nodes,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node1"}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "hs");
    let pod_json = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "hs"},
               "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "busybox"}]}})
    };
    create(&pods, pod_json("first")).await;
    let first = pod_ip(&pods, "first").await;
    assert!(first.starts_with("10.244."), "first pod: {first}");

    // deleted → re-created
    let uid = sn.metadata.uid.clone();
    subnets
        .delete("cluster-default", &DeleteParams::default())
        .await
        .expect("delete cluster-default");
    let back = eventually("cluster-default re-created", BOUND, || {
        let api = subnets.clone();
        let uid = uid.clone();
        async move {
            let sn = api.get("cluster-default").await.ok()?;
            (sn.metadata.uid != uid).then_some(sn)
        }
    })
    .await;
    assert_eq!(back.spec.cidr, "10.244.0.0/16");
    assert!(back.spec.default);
    // the first pod holds an address in it (the same one unless the deletion was seen
    // before the re-creation)
    let first = pod_ip(&pods, "first").await;
    assert!(first.starts_with("10.244."), "first pod: {first}");

    // a user's default Subnet created afterwards wins for new pods
    create(
        &subnets,
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "ovn-default"}, "spec": {"cidr": "10.16.0.0/16", "default": true}}),
    )
    .await;
    let yields = eventually("cluster-default yields", BOUND, || {
        let api = subnets.clone();
        async move {
            let sn = api.get("cluster-default").await.ok()?;
            let c = sn.status?.condition(CONDITION_CLUSTER_DEFAULT)?.clone();
            (c.reason == REASON_YIELDS).then_some(c)
        }
    })
    .await;
    assert_eq!(yields.status, "False");
    assert!(
        yields.message.contains("yields to Subnet ovn-default"),
        "{}",
        yields.message
    );
    let user = eventually("ovn-default Active", BOUND, || {
        let api = subnets.clone();
        async move {
            let st = api.get("ovn-default").await.ok()?.status?;
            st.condition("Ready")
                .is_some_and(|c| c.status == "True")
                .then_some(st)
        }
    })
    .await;
    assert_eq!(user.logical_switch.as_deref(), Some("subnet-ovn-default"));
    create(&pods, pod_json("second")).await;
    let second = pod_ip(&pods, "second").await;
    assert!(second.starts_with("10.16."), "second pod: {second}");
    // the first pod keeps its address
    assert_eq!(pod_ip(&pods, "first").await, first);

    // restarted with another --cluster-cidr: the Subnet is left as it is, its condition
    // says that the flag and the Subnet disagree
    drop(controller);
    let _controller = KubeAndOvn::controller_with_args(
        &kube_api,
        &nb,
        &s.dir.path().join("controller2.log"),
        &["--cluster-cidr", "10.250.0.0/16"],
    );
    let mismatch = eventually("MatchesClusterCIDR=False", BOUND, || {
        let api = subnets.clone();
        async move {
            let sn = api.get("cluster-default").await.ok()?;
            let c = sn.status?.condition(CONDITION_MATCHES_FLAG)?.clone();
            (c.reason == REASON_CIDR_MISMATCH).then_some(c)
        }
    })
    .await;
    assert_eq!(mismatch.status, "False");
    assert!(
        mismatch.message.contains("--cluster-cidr is 10.250.0.0/16"),
        "{}",
        mismatch.message
    );
    let kept = subnets
        .get("cluster-default")
        .await
        .expect("cluster-default");
    assert_eq!(kept.spec.cidr, "10.244.0.0/16");
    assert_eq!(kept.metadata.uid, back.metadata.uid);
    assert_eq!(pod_ip(&pods, "first").await, first);
}
