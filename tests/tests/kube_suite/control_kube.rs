//! The `zstack-ovnkube-controller` binary against a real kube-apiserver 1.20 + etcd and a
//! real OVN NB + northd: the CRD applied, Subnets, a Node and Pods with `nodeName` created
//! through the API; the controller writes pod annotations, Subnet status and NB rows; an
//! invalid Subnet's reason shows in the `kubectl get sn` columns (the server-side Table view
//! kubectl prints); a deleted pod's port goes away.
//!
//! The first run on a fresh machine builds kube-apiserver (~10 minutes, then cached).

use std::time::Duration;

use api::pod_networks::{POD_NETWORKS, decode_pod_networks};
use api::subnet::Subnet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::DeleteParams;
use serde_json::{Value, json};
use tests::kube_objects::{KubeAndOvn, create, eventually};
use tests::nbctl::{column, nbctl};

/// `kubectl get sn` as kubectl shows it: the server-side Table with the printer columns.
async fn get_sn_table(client: &kube::Client) -> Vec<(String, Vec<String>)> {
    let req = http::Request::get("/apis/network.zstack.io/v1/subnets")
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let table: Value = client.request(req).await.expect("GET subnets as Table");
    let names: Vec<String> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let cells: Vec<String> = r["cells"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| match c {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            let row = names
                .iter()
                .zip(cells)
                .map(|(n, c)| format!("{n}={c}"))
                .collect();
            (
                r["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                row,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_binary_on_real_kube_apiserver() {
    let mut bins = vec!["etcd"];
    bins.extend_from_slice(tests::OVSDB_BINS);
    if !tests::require_real(
        "control_kube_controller_binary_on_real_kube_apiserver",
        &bins,
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("ckube");
    // the Subnet CRD from the Rust types (deploy/helm/zstack-ovn/crds/subnet.yaml is checked equal to them)
    let KubeAndOvn {
        kube_api,
        client,
        central,
        nb,
    } = KubeAndOvn::start(s.dir.path(), true).await;
    let controller = KubeAndOvn::controller(&kube_api, &nb, &s.dir.path().join("controller.log"));

    let subnets: Api<Subnet> = Api::all(client.clone());
    create(&subnets, json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "blue"},
        "spec": {"cidr": "10.1.0.0/24", "namespaces": ["team-blue"], "excludeIPs": ["10.1.0.2..10.1.0.20"]}})).await;
    create(
        &subnets,
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "main"}, "spec": {"cidr": "10.2.0.0/16", "default": true}}),
    )
    .await;
    create(
        &subnets,
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "broken"}, "spec": {"cidr": "10.3.0.0/24", "gateway": "10.9.0.1"}}),
    )
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create(
        &namespaces,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-blue"}}),
    )
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    create(
        &nodes,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node1"}}),
    )
    .await;
    let pod_json = |ns: &str, name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
               "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "busybox"}]}})
    };
    let blue_pods: Api<Pod> = Api::namespaced(client.clone(), "team-blue");
    let default_pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(&blue_pods, pod_json("team-blue", "web")).await;
    create(&default_pods, pod_json("default", "db")).await;

    // Pod annotations, written after the NB rows.
    let web = eventually(
        "web's pod-networks annotation",
        Duration::from_secs(30),
        || {
            let api = blue_pods.clone();
            async move {
                let p = api.get("web").await.ok()?;
                p.metadata.annotations?.get(POD_NETWORKS).cloned()
            }
        },
    )
    .await;
    let web = decode_pod_networks(&web).unwrap();
    let ip = web.ip_addresses[0].split('/').next().unwrap().to_string();
    let last: u8 = ip.rsplit('.').next().unwrap().parse().unwrap();
    assert!(
        ip.starts_with("10.1.0.") && last > 20,
        "blue, outside excludes: {ip}"
    );
    assert_eq!(
        nbctl(&nb, &["lsp-get-addresses", "team-blue_web"]).trim(),
        format!("{} {ip}", web.mac_address)
    );
    let db = eventually("db's annotation", Duration::from_secs(30), || {
        let api = default_pods.clone();
        async move {
            api.get("db")
                .await
                .ok()?
                .metadata
                .annotations?
                .get(POD_NETWORKS)
                .cloned()
        }
    })
    .await;
    assert!(decode_pod_networks(&db).unwrap().ip_addresses[0].starts_with("10.2."));
    assert!(nbctl(&nb, &["lsp-list", "join"]).contains("(node-node1)"));

    // `kubectl get sn`: the Table view with the printer columns.
    let table = eventually(
        "Subnet status in the printer columns",
        Duration::from_secs(30),
        || {
            let c = client.clone();
            async move {
                let t = get_sn_table(&c).await;
                let ready = t
                    .iter()
                    .all(|(_, row)| !row.contains(&"Phase=".to_string()));
                ready.then_some(t)
            }
        },
    )
    .await;
    let row = |name: &str| table.iter().find(|(n, _)| n == name).unwrap().1.clone();
    let broken = row("broken");
    assert!(broken.contains(&"Phase=Failed".to_string()), "{broken:?}");
    assert!(
        broken
            .iter()
            .any(|c| c.starts_with("Reason=") && c.contains("10.9.0.1") && c.contains("outside")),
        "{broken:?}"
    );
    let blue = row("blue");
    assert!(blue.contains(&"Phase=Active".to_string()), "{blue:?}");
    assert!(blue.contains(&"Used=1".to_string()), "{blue:?}");
    assert!(
        blue.contains(&"LogicalSwitch=subnet-blue".to_string()),
        "{blue:?}"
    );

    // Pod deleted → its port goes.
    blue_pods
        .delete("web", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    eventually(
        "team-blue_web removed from the NB",
        Duration::from_secs(30),
        || {
            let nb = nb.clone();
            async move {
                (!column(&nb, "Logical_Switch_Port", "name").contains(&"team-blue_web".to_string()))
                    .then_some(())
            }
        },
    )
    .await;
    drop(controller);
    central.stop().unwrap();
}
