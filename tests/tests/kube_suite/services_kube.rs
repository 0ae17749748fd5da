//! Services through the `zstack-ovnkube-controller` binary on a real kube-apiserver 1.20
//! (+ etcd) and a real OVN NB. That server has no discovery.k8s.io/v1 EndpointSlices, so
//! the controller falls back to core v1 Endpoints: a Service (cluster IP allocated by the
//! API server) and its Endpoints (written by hand: there is no kube-controller-manager)
//! become the Load_Balancer `Service_default/web_TCP`; an Endpoints change updates it; a
//! not-ready address is left out; deleting the Service deletes the row.

use std::time::{Duration, Instant};

use api::subnet::Subnet;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tests::kube_objects::KubeAndOvn;
use tests::nbctl::nbctl;

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
    let KubeAndOvn {
        kube_api,
        client,
        central: _central,
        nb,
    } = KubeAndOvn::start(s.dir.path(), false).await;
    let log = s.dir.path().join("controller.log");
    let _controller = KubeAndOvn::controller(&kube_api, &nb, &log);
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
    // the Service may be seen before its Endpoints (a vip with no backend first)
    let v = vips_until(&nb, name, "the Service's load balancer", |v| {
        v.contains(&vip) && v.contains("10.2.0.5:8080")
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
