//! Multus secondary networks in the controller, against a real OVN NB (+ northd), fed by
//! the in-process object store: a pod naming a NAD of ours in `k8s.v1.cni.cncf.io/networks`
//! gets addresses in the NAD's Subnet, a second LSP `<ns>_<pod>_<nad-ns>.<nad>` with our
//! external_ids, and its entry in `k8s.ovn.org/pod-networks` (the primary's `default`
//! entry unchanged); a KubeVirt pod's secondary addresses survive its replacement pod;
//! a NAD without `subnet` is reported on the pod; a restarted controller keeps every
//! address (from the pod annotations, or from the ports when an annotation was lost);
//! deleting pods (and the VM) leaves no secondary LSP.

use std::collections::BTreeMap;

use api::multus::{NETWORK_ERRORS, NETWORK_SUBNETS, NETWORKS_ANNOTATION, NadInfo};
use api::pod_networks::{POD_NETWORKS, decode_network, decode_pod_networks};
use api::subnet::{Subnet, SubnetSpec};
use control::controller::{Controller, SyncReport};
use control::model::{NodeInfo, PodInfo};
use control::reconcile::Reconciler;
use control::source::Event;
use control::source::memory::MemoryStore;
use control::translate::ClusterConfig;
use lab::central::{Central, CentralConfig};
use ovsdb::{Client, ClientConfig};
use tests::nbctl::nbctl;
use tokio::sync::mpsc::UnboundedReceiver;

fn subnet(name: &str, cidr: &str, default: bool) -> Subnet {
    let mut s = Subnet::new(
        name,
        SubnetSpec {
            cidr: cidr.into(),
            default,
            ..Default::default()
        },
    );
    s.metadata.generation = Some(1);
    s
}

fn pod(ns: &str, name: &str, ann: &[(&str, &str)]) -> PodInfo {
    PodInfo {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{ns}-{name}"),
        node: Some("node1".into()),
        host_network: false,
        labels: BTreeMap::new(),
        annotations: ann
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        completed: false,
        ports: Vec::new(),
    }
}

async fn pass(ctl: &mut Controller<MemoryStore>, rx: &mut UnboundedReceiver<Event>) -> SyncReport {
    while let Ok(ev) = rx.try_recv() {
        ctl.apply(ev);
    }
    ctl.sync().await.expect("sync")
}

/// Passes until one writes nothing (the controller's own writes come back as events).
async fn settle(ctl: &mut Controller<MemoryStore>, rx: &mut UnboundedReceiver<Event>) {
    ctl.settle(rx, 6).await.expect("settle");
}

async fn controller(nb: &str, store: &MemoryStore) -> Controller<MemoryStore> {
    let client = Client::connect(ClientConfig::parse(nb).unwrap())
        .await
        .unwrap();
    let rec = Reconciler::start(client, "zstack-ovn").await.unwrap();
    Controller::new(ClusterConfig::default(), rec, store.clone())
}

/// (ip, mac) of pod `key`'s entry `network` in pod-networks.
fn net_of(store: &MemoryStore, key: &str, network: &str) -> Option<(String, String)> {
    let p = store.pod(key)?;
    let n = decode_network(p.annotations.get(POD_NETWORKS)?, network).ok()??;
    Some((n.ip_addresses[0].clone(), n.mac_address))
}

fn lsps(nb: &str, switch: &str) -> String {
    nbctl(nb, &["lsp-list", switch])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secondary_networks_get_addresses_ports_and_annotations() {
    const T: &str = "control_secondary::secondary_networks_get_addresses_ports_and_annotations";
    if !tests::require_real(T, tests::OVSDB_BINS) {
        return;
    }
    let s = tests::scratch("csec");
    let central = Central::start(CentralConfig {
        dir: s.dir.path().join("central"),
        raft: false,
        northd: true,
        tcp: false,
    })
    .expect("central");
    tests::record_real_run(T);
    let nb = central.nb_remote();
    let (store, mut rx) = MemoryStore::new();
    store.apply_subnet(subnet("pods", "10.10.0.0/16", true));
    store.apply_subnet(subnet("sec", "10.77.0.0/16", false));
    store.apply_node(NodeInfo {
        name: "node1".into(),
        addresses: vec![],
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    });
    store.apply_nad(NadInfo::new(
        "vms",
        "vhost-net",
        r#"{"cniVersion":"1.0.0","type":"zstack-ovn-cni","interfaceType":"vhost-user","subnet":"sec"}"#,
    ));
    store.apply_nad(NadInfo::new(
        "vms",
        "nosubnet",
        r#"{"type":"zstack-ovn-cni"}"#,
    ));
    store.apply_nad(NadInfo::new("vms", "foreign", r#"{"type":"bridge"}"#));
    let vm_pod = |name: &str| {
        pod(
            "vms",
            name,
            &[
                ("kubevirt.io/domain", "vm1"),
                (
                    NETWORKS_ANNOTATION,
                    r#"[{"name":"vhost-net","interface":"net1"},{"name":"foreign"}]"#,
                ),
            ],
        )
    };
    store.apply_pod(vm_pod("virt-launcher-vm1-aaaaa"));
    store.apply_pod(pod("vms", "plain", &[(NETWORKS_ANNOTATION, "vhost-net")]));
    store.apply_pod(pod("vms", "broken", &[(NETWORKS_ANNOTATION, "nosubnet")]));
    store.apply_pod(pod("vms", "none", &[]));
    store.mark_synced();
    let mut ctl = controller(&nb, &store).await;
    settle(&mut ctl, &mut rx).await;

    // addresses in the NAD's Subnet, the primary entry unchanged
    let vm1 = "vms/virt-launcher-vm1-aaaaa";
    let (vm_ip, vm_mac) = net_of(&store, vm1, "vms/vhost-net").expect("vm1 on vhost-net");
    assert!(vm_ip.starts_with("10.77."), "{vm_ip}");
    let primary = decode_pod_networks(&store.pod(vm1).unwrap().annotations[POD_NETWORKS]).unwrap();
    assert!(primary.ip_addresses[0].starts_with("10.10."), "{primary:?}");
    assert_ne!(primary.mac_address, vm_mac, "two MACs");
    let ann = store.pod(vm1).unwrap().annotations;
    assert_eq!(ann[NETWORK_SUBNETS], r#"{"vms/vhost-net":"sec"}"#);
    assert!(
        net_of(&store, vm1, "vms/foreign").is_none(),
        "another plugin's NAD is not ours to serve"
    );
    let (plain_ip, _) = net_of(&store, "vms/plain", "vms/vhost-net").expect("plain");
    assert_ne!(plain_ip, vm_ip);
    assert!(net_of(&store, "vms/none", "vms/vhost-net").is_none());

    // the second LSPs, on the secondary Subnet's switch, ours, bound to the node
    let sec = lsps(&nb, "subnet-sec");
    let vm_lsp = "vms_virt-launcher-vm1-aaaaa_vms.vhost-net";
    assert!(sec.contains(&format!("({vm_lsp})")), "{sec}");
    assert!(sec.contains("(vms_plain_vms.vhost-net)"), "{sec}");
    assert!(lsps(&nb, "subnet-pods").contains("(vms_virt-launcher-vm1-aaaaa)"));
    let ids = nbctl(&nb, &["get", "Logical_Switch_Port", vm_lsp, "external_ids"]);
    for want in [
        "\"zstack.io/owner\"=zstack-ovn",
        "\"zstack.io/kind\"=pod-network",
        "\"zstack.io/network\"=\"vms/vhost-net\"",
        "\"zstack.io/subnet\"=sec",
    ] {
        assert!(ids.contains(want), "{want} in {ids}");
    }
    let addrs = nbctl(&nb, &["lsp-get-addresses", vm_lsp]);
    assert_eq!(
        addrs.trim(),
        format!("{vm_mac} {}", vm_ip.split('/').next().unwrap())
    );
    let chassis = nbctl(
        &nb,
        &[
            "get",
            "Logical_Switch_Port",
            vm_lsp,
            "options:requested-chassis",
        ],
    );
    assert_eq!(chassis.trim(), "node1");

    // a NAD without "subnet": the pod says why, its primary network still works
    let broken = store.pod("vms/broken").unwrap().annotations;
    assert!(
        broken[NETWORK_ERRORS].contains("has no \\\"subnet\\\""),
        "{}",
        broken[NETWORK_ERRORS]
    );
    assert!(decode_pod_networks(&broken[POD_NETWORKS]).is_ok());
    // fixed NAD: served, the error cleared
    store.apply_nad(NadInfo::new(
        "vms",
        "nosubnet",
        r#"{"type":"zstack-ovn-cni","subnet":"sec"}"#,
    ));
    settle(&mut ctl, &mut rx).await;
    let broken = store.pod("vms/broken").unwrap().annotations;
    assert_eq!(broken[NETWORK_ERRORS], "");
    assert!(net_of(&store, "vms/broken", "vms/nosubnet").is_some());

    // a restarted controller keeps every address and writes nothing
    drop(ctl);
    let mut rx2 = store.replay();
    let mut ctl = controller(&nb, &store).await;
    let r = pass(&mut ctl, &mut rx2).await;
    assert_eq!(r.nb.transactions, 0, "restart changes no NB row: {r:?}");
    assert_eq!(r.annotations_written, 0, "{r:?}");
    assert_eq!(net_of(&store, vm1, "vms/vhost-net").unwrap().0, vm_ip);
    // the store's own event stream feeds the new controller from now on

    // a crash between the NB write and the annotation patch: the next controller takes
    // plain's secondary address back from its port, a newcomer gets another one
    drop(ctl);
    while rx.try_recv().is_ok() {}
    let (plain_ip, plain_mac) = net_of(&store, "vms/plain", "vms/vhost-net").unwrap();
    let primary_only = {
        let p = store.pod("vms/plain").unwrap();
        let mut m: BTreeMap<String, serde_json::Value> =
            serde_json::from_str(&p.annotations[POD_NETWORKS]).unwrap();
        m.retain(|k, _| k == "default");
        serde_json::to_string(&m).unwrap()
    };
    store.apply_pod(pod(
        "vms",
        "plain",
        &[
            (NETWORKS_ANNOTATION, "vhost-net"),
            (POD_NETWORKS, &primary_only),
            (NETWORK_SUBNETS, ""),
        ],
    ));
    store.apply_pod(pod(
        "vms",
        "newcomer",
        &[(NETWORKS_ANNOTATION, "vhost-net")],
    ));
    while rx.try_recv().is_ok() {}
    let mut rx2 = store.replay();
    let mut ctl = controller(&nb, &store).await;
    pass(&mut ctl, &mut rx2).await;
    settle(&mut ctl, &mut rx).await;
    assert_eq!(
        net_of(&store, "vms/plain", "vms/vhost-net"),
        Some((plain_ip.clone(), plain_mac)),
        "the address of plain's port, not a new one"
    );
    let (newcomer_ip, _) = net_of(&store, "vms/newcomer", "vms/vhost-net").unwrap();
    assert_ne!(newcomer_ip, plain_ip);
    store.delete_pod("vms/newcomer");

    // the VM's next pod (restart/migration) gets the same secondary IP and MAC
    store.delete_pod(vm1);
    store.apply_pod(vm_pod("virt-launcher-vm1-bbbbb"));
    settle(&mut ctl, &mut rx).await;
    let vm1b = "vms/virt-launcher-vm1-bbbbb";
    assert_eq!(
        net_of(&store, vm1b, "vms/vhost-net"),
        Some((vm_ip.clone(), vm_mac.clone()))
    );
    let sec = lsps(&nb, "subnet-sec");
    assert!(!sec.contains(vm_lsp), "the old pod's port is gone: {sec}");
    assert!(sec.contains("(vms_virt-launcher-vm1-bbbbb_vms.vhost-net)"));

    // the pod stops naming the network: its port and addresses go
    store.apply_pod(pod("vms", "plain", &[(NETWORKS_ANNOTATION, "")]));
    settle(&mut ctl, &mut rx).await;
    assert!(!lsps(&nb, "subnet-sec").contains("vms_plain_"));

    // every pod deleted (a bare VMI: its addresses go with its last pod)
    for k in [vm1b, "vms/plain", "vms/broken", "vms/none"] {
        store.delete_pod(k);
    }
    settle(&mut ctl, &mut rx).await;
    let sec = lsps(&nb, "subnet-sec");
    assert!(
        sec.trim().lines().all(|l| l.contains("ovn_cluster_router")),
        "{sec}"
    );
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
    assert_eq!(left.trim(), "", "no secondary LSP left");
}
