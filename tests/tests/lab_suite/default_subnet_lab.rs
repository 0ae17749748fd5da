//! The lab's default Subnet through the real `zovn` CLI: `zovn lab up` (default cluster
//! CIDR 10.244.0.0/16, kept in the lab's config) gives a pod in a fresh namespace an address
//! from the controller's `cluster-default` Subnet, which `zovn lab get subnets` shows; a lab
//! brought up with `--cluster-cidr none` has no default Subnet and the pod gets the clear
//! error. Needs `zovn`, `zstack-ovnkube-node` and `zstack-ovn-cni` in `target/<profile>/`.

use std::time::Duration;

use api::keys::{IPAM_ERROR, POD_NETWORKS};
use serde_json::Value;
use tests::zovn::{DownOnDrop, Zovn, wait_until};

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: hs}\n\
spec:\n  nodeName: node1\n  containers: [{name: c, image: x}]\n";

/// Annotation `key` of pod `hs/web`, once it is set (bounded).
fn pod_annotation(z: &Zovn, key: &str) -> String {
    let mut found = String::new();
    wait_until(&format!("hs/web's {key}"), Duration::from_secs(60), || {
        let pods = z.pods();
        let v = pods
            .get("hs/web")
            .and_then(|p| p["metadata"]["annotations"][key].as_str())
            .filter(|v| !v.is_empty());
        if let Some(v) = v {
            found = v.to_string();
        }
        v.is_some()
    });
    found
}

/// `zovn lab up` with `extra` flags, a pod in the fresh namespace `hs`; returns the lab.
fn up_with_pod(s: &tests::Scratch, extra: &[&str]) -> (Zovn, DownOnDrop) {
    let dir = s.dir.path().join("lab");
    let z = Zovn::new(&dir);
    let down = DownOnDrop(dir.clone());
    let mut args = vec!["up", "--nodes", "1", "--prefix", s.prefix.as_str()];
    args.extend_from_slice(extra);
    z.ok(&args);
    let pod = s.dir.path().join("pod.yaml");
    std::fs::write(&pod, POD).expect("pod manifest");
    z.ok(&["apply", "-f", pod.to_str().expect("utf-8")]);
    (z, down)
}

#[test]
fn lab_up_gives_a_fresh_namespace_addresses() {
    if !tests::require_real(
        "default_subnet_lab_lab_up_gives_a_fresh_namespace_addresses",
        tests::LAB_BINS,
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();

    // the default: 10.244.0.0/16
    let s = tests::scratch("dsl");
    let (z, down) = up_with_pod(&s, &[]);
    let lab = lab::Lab::open(&z.dir).expect("lab");
    assert_eq!(lab.config().cluster_cidr, lab::default_cluster_cidr());
    let networks = pod_annotation(&z, POD_NETWORKS);
    let net = api::pod_networks::decode_pod_networks(&networks).expect("pod-networks");
    assert!(
        net.ip_addresses[0].starts_with("10.244."),
        "hs/web: {networks}"
    );
    let table = z.ok(&["get", "subnets"]);
    eprintln!("{table}");
    let row = table
        .lines()
        .find(|l| l.starts_with("cluster-default"))
        .unwrap_or_else(|| panic!("no cluster-default in:\n{table}"));
    assert!(
        row.contains("10.244.0.0/16") && row.contains("Active"),
        "{table}"
    );
    let sn: Value = z
        .items("subnets")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "cluster-default")
        .expect("cluster-default");
    assert_eq!(
        sn["metadata"]["labels"][api::keys::MANAGED_BY],
        api::keys::MANAGED_BY_CONTROLLER
    );
    drop(down);

    // --cluster-cidr none: no default Subnet, the old clear error
    let s = tests::scratch("dsn");
    let (z, _down) = up_with_pod(&s, &["--cluster-cidr", "none"]);
    let err = pod_annotation(&z, IPAM_ERROR);
    assert_eq!(
        err,
        "no Subnet serves namespace hs and no Subnet is the default"
    );
    assert!(z.items("subnets").is_empty(), "no Subnet at all");
}
