//! Services through the `zstack-ovnkube-controller` binary on a real kube-apiserver 1.20
//! (+ etcd) and a real OVN NB. That server has no discovery.k8s.io/v1 EndpointSlices, so
//! the controller falls back to core v1 Endpoints: a Service (cluster IP allocated by the
//! API server) and its Endpoints (written by hand: there is no kube-controller-manager)
//! become the Load_Balancer `Service_default/web_TCP`; an Endpoints change updates it; a
//! not-ready address is left out; deleting the Service deletes the row.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use control::crd::Subnet;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, CustomResourceExt};
use lab::central::{Central, CentralConfig};
use serde_json::json;
use tests::nbctl::nbctl;

/// Kills the controller process when the test ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `vips` of our load balancer `name`, once it exists (bounded wait).
async fn vips_until(nb: &str, name: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let t = Instant::now();
    loop {
        let out = nbctl(
            nb,
            &[
                "--bare",
                "--columns=vips",
                "find",
                "Load_Balancer",
                &format!("name=\"{name}\""),
            ],
        );
        if ok(out.trim()) {
            return out.trim().to_string();
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}: {out}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_from_core_endpoints_on_kube_1_20() {
    let mut bins = vec!["etcd"];
    bins.extend_from_slice(tests::OVSDB_BINS);
    if !tests::require_real("services_kube", &bins) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("svck");
    let kube_api = tests::kube::KubeApi::start(&s.dir.path().join("kube"))
        .await
        .expect("etcd + kube-apiserver");
    let client = kube_api.client().await.expect("kube client");
    let central = Central::start(CentralConfig {
        dir: s.dir.path().join("central"),
        raft: false,
        northd: false,
        tcp: false,
    })
    .expect("OVN central");
    let nb = central.nb_remote();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Subnet::crd())
        .await
        .expect("create Subnet CRD");
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(
            crds,
            "subnets.network.zstack.io",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("CRD established in time")
    .expect("watch CRD");
    let log = s.dir.path().join("controller.log");
    let _controller = Proc(
        Command::new(tests::workspace_bin("zstack-ovnkube-controller"))
            .args(["--nb", &nb, "--kubeconfig"])
            .arg(kube_api.kubeconfig_path())
            .env("RUST_LOG", "info")
            .stdout(std::fs::File::create(&log).expect("log"))
            .stderr(Stdio::null())
            .spawn()
            .expect("start zstack-ovnkube-controller"),
    );
    let subnets: Api<Subnet> = Api::all(client.clone());
    let sn: Subnet = serde_json::from_value(json!({"apiVersion": "network.zstack.io/v1",
        "kind": "Subnet", "metadata": {"name": "main"},
        "spec": {"cidr": "10.2.0.0/16", "default": true}}))
    .expect("subnet");
    subnets
        .create(&PostParams::default(), &sn)
        .await
        .expect("create Subnet");

    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))
    .expect("service");
    let svc = services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create Service");
    let cluster_ip = svc
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("the API server allocates a cluster IP");
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = |ready: &[&str], not_ready: &[&str]| -> Endpoints {
        let addrs = |l: &[&str]| l.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>();
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "web"},
            "subsets": [{"addresses": addrs(ready), "notReadyAddresses": addrs(not_ready),
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]}))
        .expect("endpoints")
    };
    endpoints
        .create(&PostParams::default(), &ep(&["10.2.0.5"], &["10.2.0.9"]))
        .await
        .expect("create Endpoints");

    let name = "Service_default/web_TCP";
    let vip = format!("{cluster_ip}:80");
    let v = vips_until(&nb, name, "the Service's load balancer", |v| {
        v.contains(&vip)
    })
    .await;
    assert!(
        v.contains("10.2.0.5:8080") && !v.contains("10.2.0.9"),
        "{v}"
    );

    // an Endpoints change updates the row
    endpoints
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"subsets": [{"addresses": [{"ip": "10.2.0.5"}, {"ip": "10.2.0.6"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]}),
            ),
        )
        .await
        .expect("patch Endpoints");
    vips_until(&nb, name, "the second backend", |v| {
        v.contains("10.2.0.6:8080")
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("using core v1 Endpoints"),
        "the controller says which endpoints API it uses:\n{text}"
    );

    services
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete Service");
    vips_until(&nb, name, "the row to go", str::is_empty).await;
    tests::record_real_run("services_kube");
}
