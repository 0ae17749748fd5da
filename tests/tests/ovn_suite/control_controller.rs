//! The whole controller (validation, IPAM, translators, reconciler, write-back) against a
//! real OVN NB + northd, fed by the in-process object store the lab uses. Checks NB rows
//! with `ovn-nbctl`, the pod/node annotations and the Subnet status; then a restart with
//! nothing changed (zero NB writes, same addresses), a restart after a crash between the NB
//! write and the annotation patch (no address handed out twice), and deletions.

use std::collections::BTreeMap;

use api::pod_networks::{NODE_MGMT_PORT, POD_NETWORKS, POD_SUBNET, decode_pod_networks};
use api::subnet::{Subnet, SubnetPhase, SubnetSpec};
use control::controller::{Controller, IPAM_ERROR, SyncReport};
use control::model::{NodeInfo, PodInfo};
use control::reconcile::Reconciler;
use control::source::Event;
use control::source::memory::MemoryStore;
use control::translate::ClusterConfig;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use lab::central::{Central, CentralConfig};
use ovsdb::{Client, ClientConfig};
use tests::nbctl::{column, nbctl};
use tokio::sync::mpsc::UnboundedReceiver;

fn subnet(name: &str, age_s: i64, spec: SubnetSpec) -> Subnet {
    let mut s = Subnet::new(name, spec);
    let t = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + age_s).unwrap();
    s.metadata.creation_timestamp = Some(Time(t));
    s.metadata.generation = Some(1);
    s
}

fn spec(cidr: &str) -> SubnetSpec {
    SubnetSpec {
        cidr: cidr.into(),
        ..Default::default()
    }
}

fn pod(ns: &str, name: &str, node: &str, ann: &[(&str, &str)]) -> PodInfo {
    PodInfo {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{ns}-{name}"),
        node: Some(node.into()),
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

fn node(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        addresses: vec![],
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }
}

/// A standalone OVN central in the test's scratch dir (with ovn-northd when asked).
fn start_central(s: &tests::Scratch, northd: bool) -> Central {
    Central::start(CentralConfig {
        dir: s.dir.path().join("central"),
        raft: false,
        northd,
        tcp: false,
    })
    .expect("start OVN central")
}

/// Feeds every pending event to the controller and runs one pass.
async fn pass(ctl: &mut Controller<MemoryStore>, rx: &mut UnboundedReceiver<Event>) -> SyncReport {
    while let Ok(ev) = rx.try_recv() {
        ctl.apply(ev);
    }
    ctl.sync().await.expect("sync")
}

/// Passes until one writes nothing (the controller's own writes come back as events).
async fn settle(ctl: &mut Controller<MemoryStore>, rx: &mut UnboundedReceiver<Event>) {
    ctl.settle(rx, 5).await.expect("settle");
}

fn ip_of(store: &MemoryStore, key: &str) -> String {
    let p = store.pod(key).unwrap_or_else(|| panic!("pod {key}"));
    let net = decode_pod_networks(&p.annotations[POD_NETWORKS]).unwrap();
    net.ip_addresses[0].clone()
}

async fn controller(nb: &str, store: &MemoryStore) -> Controller<MemoryStore> {
    controller_with(nb, store, ClusterConfig::default()).await
}

async fn connect(remote: &str) -> Client {
    Client::connect(ClientConfig::parse(remote).unwrap())
        .await
        .unwrap()
}

async fn controller_with(
    nb: &str,
    store: &MemoryStore,
    cfg: ClusterConfig,
) -> Controller<MemoryStore> {
    let client = Client::connect(ClientConfig::parse(nb).unwrap())
        .await
        .unwrap();
    let rec = Reconciler::start(client, "zstack-ovn").await.unwrap();
    Controller::new(cfg, rec, store.clone())
}

fn fill(store: &MemoryStore) {
    let mut blue = spec("10.1.0.0/24");
    blue.exclude_ips = vec!["10.1.0.2..10.1.0.10".into()];
    blue.namespaces = vec!["ns1".into()];
    let mut red = spec("10.2.0.0/24");
    red.default = true;
    let mut bad = spec("10.3.0.0/24");
    bad.gateway = Some("10.4.0.1".into());
    store.apply_subnet(subnet("blue", 0, blue));
    store.apply_subnet(subnet("red", 1, red));
    store.apply_subnet(subnet("bad", 2, bad));
    store.apply_subnet(subnet("late", 3, spec("10.1.0.0/16")));
    store.apply_node(node("node1"));
    store.apply_node(node("node2"));
    store.apply_pod(pod("ns1", "a", "node1", &[]));
    store.apply_pod(pod("ns2", "b", "node2", &[]));
    store.apply_pod(pod(
        "ns1",
        "c",
        "node1",
        &[("ovn.kubernetes.io/ip_address", "10.1.0.50")],
    ));
    store.apply_pod(pod(
        "ns1",
        "d",
        "node1",
        &[("ovn.kubernetes.io/ip_address", "10.1.0.5")],
    ));
    store.mark_synced();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_end_to_end_on_real_nb() {
    if !tests::require_real(
        "control_controller_end_to_end_on_real_nb",
        tests::OVSDB_BINS,
    ) {
        return;
    }
    let s = tests::scratch("cct");
    let central = start_central(&s, true);
    let nb = central.nb_remote();
    let (store, mut rx) = MemoryStore::new();
    fill(&store);
    let mut ctl = controller(&nb, &store).await;
    let first = pass(&mut ctl, &mut rx).await;
    assert!(
        first.nb.inserts > 0 && first.pods_assigned == 3,
        "{first:?}"
    );
    settle(&mut ctl, &mut rx).await;

    // NB rows (second opinion) and annotations agree.
    let blue_ports = nbctl(&nb, &["lsp-list", "subnet-blue"]);
    assert!(
        blue_ports.contains("(ns1_a)") && blue_ports.contains("(ns1_c)"),
        "{blue_ports}"
    );
    assert!(nbctl(&nb, &["lsp-list", "subnet-red"]).contains("(ns2_b)"));
    let a_ip = ip_of(&store, "ns1/a");
    let a_host: std::net::Ipv4Addr = a_ip.split('/').next().unwrap().parse().unwrap();
    assert!(
        a_host.octets()[3] > 10,
        "excluded 10.1.0.2..10 never handed out: {a_ip}"
    );
    assert_eq!(ip_of(&store, "ns1/c"), "10.1.0.50/24");
    let a = store.pod("ns1/a").unwrap();
    assert_eq!(a.annotations[POD_SUBNET], "blue");
    let a_net = decode_pod_networks(&a.annotations[POD_NETWORKS]).unwrap();
    assert_eq!(a_net.gateway_ips, vec!["10.1.0.1"]);
    assert_eq!(
        nbctl(&nb, &["lsp-get-addresses", "ns1_a"]).trim(),
        format!("{} {}", a_net.mac_address, a_host)
    );
    assert!(ip_of(&store, "ns2/b").starts_with("10.2.0."));
    // A static IP inside the excluded range: no address, and the pod says why.
    let d = store.pod("ns1/d").unwrap();
    assert!(!d.annotations.contains_key(POD_NETWORKS));
    let why = &d.annotations[IPAM_ERROR];
    assert!(why.contains("10.1.0.5") && why.contains("exclude"), "{why}");
    assert!(!column(&nb, "Logical_Switch_Port", "name").contains(&"ns1_d".to_string()));

    // Subnet status.
    let st = |n: &str| store.subnet(n).unwrap().status.unwrap();
    assert_eq!(st("blue").phase, SubnetPhase::Active);
    assert_eq!(st("blue").used_ips, Some(2.0));
    assert_eq!(st("blue").available_ips, Some(253.0 - 9.0 - 2.0));
    assert_eq!(st("blue").logical_switch.as_deref(), Some("subnet-blue"));
    assert_eq!(st("bad").phase, SubnetPhase::Failed);
    assert!(
        st("bad").reason.contains("10.4.0.1"),
        "{}",
        st("bad").reason
    );
    assert_eq!(st("late").phase, SubnetPhase::Failed);
    assert!(
        st("late").reason.contains("overlaps"),
        "{}",
        st("late").reason
    );
    assert!(!column(&nb, "Logical_Switch", "name").contains(&"subnet-late".to_string()));

    // Nodes: a management port on the join switch, announced on the node.
    assert!(nbctl(&nb, &["lsp-list", "join"]).contains("(node-node2)"));
    let mgmt = &store.node("node1").unwrap().annotations[NODE_MGMT_PORT];
    assert!(mgmt.contains("100.64.0."), "{mgmt}");

    // Restart with nothing changed: zero NB writes, zero annotation/status writes.
    drop(ctl);
    let mut replay = store.replay();
    let mut ctl = controller(&nb, &store).await;
    let r = pass(&mut ctl, &mut replay).await;
    assert_eq!(r.nb.transactions, 0, "{r:?}");
    assert_eq!((r.annotations_written, r.statuses_written), (0, 0), "{r:?}");
    assert_eq!(r.pods_assigned, 0, "{r:?}");

    // Restart after a crash between the NB write and the annotation patch: pod a lost its
    // annotation but its NB port remains; IPAM must not hand its address to anyone else.
    drop(ctl);
    let (store2, mut rx2) = MemoryStore::new();
    for sn in store.subnets() {
        store2.apply_subnet(sn);
    }
    for n in ["node1", "node2"] {
        store2.apply_node(store.node(n).unwrap());
    }
    for p in store.pods() {
        let mut p = p;
        if p.key() == "ns1/a" {
            p.annotations.clear();
        }
        store2.apply_pod(p);
    }
    store2.apply_pod(pod("ns1", "e", "node1", &[]));
    store2.mark_synced();
    let sb = central.sb_remote();
    let mut ctl = controller(&nb, &store2)
        .await
        .with_southbound(connect(&sb).await);
    settle(&mut ctl, &mut rx2).await;
    assert_eq!(ip_of(&store2, "ns1/a"), a_ip, "pod a keeps its address");
    let ips: Vec<String> = ["ns1/a", "ns1/c", "ns1/e"]
        .iter()
        .map(|k| ip_of(&store2, k))
        .collect();
    assert!(
        ips[2] != ips[0] && ips[2] != ips[1],
        "no double allocation: {ips:?}"
    );

    // Deletions: pod → port gone, address free; Subnet → switch and router port gone.
    store2.delete_pod("ns1/e");
    settle(&mut ctl, &mut rx2).await;
    assert!(!column(&nb, "Logical_Switch_Port", "name").contains(&"ns1_e".to_string()));
    assert_eq!(
        store2.subnet("blue").unwrap().status.unwrap().used_ips,
        Some(2.0)
    );
    store2.delete_subnet("red");
    settle(&mut ctl, &mut rx2).await;
    assert!(!column(&nb, "Logical_Switch", "name").contains(&"subnet-red".to_string()));
    assert!(
        !column(&nb, "Logical_Router_Port", "name")
            .contains(&"ovn_cluster_router-subnet-red".to_string())
    );

    // Node deleted → its management port goes, and (standalone) its SB chassis too; the
    // chassis of the remaining node stays.
    let sbctl = |args: &[&str]| lab::ctl::sbctl(&sb, args).unwrap();
    sbctl(&["chassis-add", "node1", "geneve", "172.16.0.1"]);
    sbctl(&["chassis-add", "node2", "geneve", "172.16.0.2"]);
    store2.delete_node("node2");
    settle(&mut ctl, &mut rx2).await;
    assert!(!nbctl(&nb, &["lsp-list", "join"]).contains("(node-node2)"));
    let chassis = sbctl(&["--bare", "--columns=name", "list", "Chassis"]);
    assert!(
        chassis.contains("node1") && !chassis.contains("node2"),
        "{chassis}"
    );
    drop(ctl);
    central.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_mode_never_hands_out_platform_addresses() {
    if !tests::require_real(
        "control_controller_external_mode_never_hands_out_platform_addresses",
        tests::OVSDB_BINS,
    ) {
        return;
    }
    let s = tests::scratch("cce");
    let central = start_central(&s, true);
    let nb = central.nb_remote();
    // The platform's switch with two VMs on it.
    nbctl(&nb, &["ls-add", "zs-l2"]);
    for (vm, addr) in [
        ("vm-1", "fa:16:3e:00:00:01 10.10.0.5"),
        ("vm-2", "fa:16:3e:00:00:02 10.10.0.6"),
    ] {
        nbctl(
            &nb,
            &["lsp-add", "zs-l2", vm, "--", "lsp-set-addresses", vm, addr],
        );
    }
    let platform_before = nbctl(&nb, &["list", "Logical_Switch_Port", "vm-1"]);

    let (store, mut rx) = MemoryStore::new();
    // 10.10.0.0/29: gateway .1, hosts .2-.6; the platform holds .5 and .6; node1's
    // management port on the switch takes the first free one, before the pods.
    let mut shared = spec("10.10.0.0/29");
    shared.external_logical_switch = Some("zs-l2".into());
    shared.namespaces = vec!["ns1".into()];
    store.apply_subnet(subnet("shared", 0, shared));
    let mut ghost = spec("10.20.0.0/24");
    ghost.external_logical_switch = Some("no-such-switch".into());
    store.apply_subnet(subnet("ghost", 1, ghost));
    store.apply_node(node("node1"));
    for i in 1..=4 {
        store.apply_pod(pod("ns1", &format!("p{i}"), "node1", &[]));
    }
    store.apply_pod(pod(
        "ns1",
        "pinned",
        "node1",
        &[("ovn.kubernetes.io/ip_address", "10.10.0.5")],
    ));
    store.mark_synced();
    let cfg = ClusterConfig {
        mode: control::translate::Mode::External,
        ..ClusterConfig::default()
    };
    let mut ctl = controller_with(&nb, &store, cfg).await;
    settle(&mut ctl, &mut rx).await;

    let mut got: Vec<String> = (1..=4)
        .filter_map(|i| {
            let p = store.pod(&format!("ns1/p{i}"))?;
            p.annotations.get(POD_NETWORKS)?;
            Some(ip_of(&store, &format!("ns1/p{i}")))
        })
        .collect();
    got.sort();
    assert_eq!(got, vec!["10.10.0.3/29", "10.10.0.4/29"]);
    let starved: Vec<_> = (1..=4)
        .map(|i| store.pod(&format!("ns1/p{i}")).unwrap())
        .filter(|p| !p.annotations.contains_key(POD_NETWORKS))
        .collect();
    assert_eq!(starved.len(), 2);
    for p in starved {
        assert!(
            p.annotations[IPAM_ERROR].contains("no free"),
            "{:?}",
            p.annotations
        );
    }
    let mgmt =
        store.node("node1").unwrap().annotations[api::platform_mgmt::PLATFORM_MGMT_PORTS].clone();
    let mgmt = api::platform_mgmt::decode(&mgmt).unwrap();
    assert_eq!(mgmt.len(), 1, "{mgmt:?}");
    assert_eq!(mgmt[0].ip_addresses, ["10.10.0.2/29"]);
    assert_eq!(mgmt[0].port, "mgmt.node1_shared");
    let pinned = store.pod("ns1/pinned").unwrap();
    assert!(
        pinned.annotations[IPAM_ERROR].contains("10.10.0.5"),
        "{:?}",
        pinned.annotations
    );
    let ports = nbctl(&nb, &["lsp-list", "zs-l2"]);
    assert_eq!(ports.matches("(ns1_p").count(), 2, "{ports}");
    assert_eq!(ports.matches("(mgmt.node1_shared)").count(), 1, "{ports}");
    // No router or join switch of ours in external mode; the platform's port untouched.
    assert_eq!(column(&nb, "Logical_Router", "name"), Vec::<String>::new());
    assert_eq!(
        nbctl(&nb, &["list", "Logical_Switch_Port", "vm-1"]),
        platform_before
    );
    let ghost = store.subnet("ghost").unwrap().status.unwrap();
    assert_eq!(ghost.phase, SubnetPhase::Failed);
    assert!(ghost.reason.contains("no-such-switch"), "{}", ghost.reason);
    // and a Warning event says the same, once
    let events = store.subnet_events();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("ghost: ") && e.contains("no-such-switch"))
            .count(),
        1,
        "{events:?}"
    );
    drop(ctl);
    central.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubevirt_vm_keeps_its_address_until_the_vm_is_deleted() {
    if !tests::require_real(
        "control_controller_kubevirt_vm_keeps_its_address_until_the_vm_is_deleted",
        tests::OVSDB_BINS,
    ) {
        return;
    }
    let s = tests::scratch("ccv");
    let central = start_central(&s, false);
    let nb = central.nb_remote();
    let (store, mut rx) = MemoryStore::new();
    let mut vms = spec("10.5.0.0/24");
    vms.default = true;
    store.apply_subnet(subnet("vms", 0, vms));
    store.apply_node(node("node1"));
    store.apply_node(node("node2"));
    store.apply_vm("ns1/vm1");
    let launcher =
        |name: &str, node_name: &str| pod("ns1", name, node_name, &[("kubevirt.io/domain", "vm1")]);
    store.apply_pod(launcher("virt-launcher-vm1-aaaaa", "node1"));
    store.mark_synced();
    let mut ctl = controller(&nb, &store).await;
    settle(&mut ctl, &mut rx).await;
    let first = store.pod("ns1/virt-launcher-vm1-aaaaa").unwrap();
    let first_net = decode_pod_networks(&first.annotations[POD_NETWORKS]).unwrap();
    let used = |store: &MemoryStore| store.subnet("vms").unwrap().status.unwrap().used_ips;
    assert_eq!(used(&store), Some(1.0));

    // The VM restarts elsewhere (old launcher pod gone, new one on node2): same IP and MAC,
    // and the address was never free in between.
    store.delete_pod("ns1/virt-launcher-vm1-aaaaa");
    settle(&mut ctl, &mut rx).await;
    assert_eq!(
        used(&store),
        Some(1.0),
        "the VM's address stays held while the VM exists"
    );
    store.apply_pod(pod("ns1", "other", "node1", &[]));
    store.apply_pod(launcher("virt-launcher-vm1-bbbbb", "node2"));
    settle(&mut ctl, &mut rx).await;
    let second = store.pod("ns1/virt-launcher-vm1-bbbbb").unwrap();
    let second_net = decode_pod_networks(&second.annotations[POD_NETWORKS]).unwrap();
    assert_eq!(second_net.ip_addresses, first_net.ip_addresses);
    assert_eq!(second_net.mac_address, first_net.mac_address);
    assert_ne!(ip_of(&store, "ns1/other"), first_net.ip_addresses[0]);
    assert!(nbctl(&nb, &["lsp-list", "subnet-vms"]).contains("(ns1_virt-launcher-vm1-bbbbb)"));

    // The VirtualMachine is deleted and its pod goes: the address is released.
    store.delete_pod("ns1/virt-launcher-vm1-bbbbb");
    store.delete_vm("ns1/vm1");
    settle(&mut ctl, &mut rx).await;
    assert_eq!(used(&store), Some(1.0), "only `other` holds an address now");
    drop(ctl);
    central.stop().unwrap();
}

/// `ovn-nbctl --bare --columns=COLUMNS list Port_Group NAME`.
fn group_columns(nb: &str, name: &str, columns: &str) -> String {
    nbctl(
        nb,
        &[
            "--bare",
            &format!("--columns={columns}"),
            "list",
            "Port_Group",
            name,
        ],
    )
}

/// The names of the ports in the platform's group `name`.
fn group_ports(nb: &str, name: &str) -> Vec<String> {
    let mut v: Vec<String> = group_columns(nb, name, "ports")
        .split_whitespace()
        .map(|u| {
            nbctl(
                nb,
                &["--bare", "--columns=name", "list", "Logical_Switch_Port", u],
            )
            .trim()
            .to_string()
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_mode_pods_join_the_platforms_security_groups() {
    if !tests::require_real(
        "control_controller_external_mode_pods_join_the_platforms_security_groups",
        tests::OVSDB_BINS,
    ) {
        return;
    }
    let s = tests::scratch("ccg");
    let central = start_central(&s, false);
    let nb = central.nb_remote();
    // the platform: a switch with a VM, its security group (an ACL, the VM in it) and
    // another group
    nbctl(&nb, &["ls-add", "zs-l2"]);
    tests::platform::vm_port(&nb, "zs-l2", "vm-1", "fa:16:3e:00:00:01", "10.10.0.5");
    nbctl(&nb, &["pg-add", "sg_web", "vm-1"]);
    nbctl(&nb, &["pg-add", "sg_other"]);
    nbctl(
        &nb,
        &[
            "acl-add",
            "sg_web",
            "to-lport",
            "1001",
            "outport == @sg_web && tcp.dst == 22",
            "allow-related",
        ],
    );
    let fixed = "acls,external_ids,name";
    let (web_before, other_before) = (
        group_columns(&nb, "sg_web", fixed),
        nbctl(&nb, &["list", "Port_Group", "sg_other"]),
    );

    let (store, mut rx) = MemoryStore::new();
    let mut shared = spec("10.10.0.0/24");
    shared.external_logical_switch = Some("zs-l2".into());
    shared.namespaces = vec!["ns1".into()];
    shared.security_groups = vec!["sg_web".into()];
    store.apply_subnet(subnet("shared", 0, shared.clone()));
    let mut ghost = spec("10.20.0.0/24");
    ghost.external_logical_switch = Some("zs-l2".into());
    ghost.security_groups = vec!["sg_gone".into()];
    store.apply_subnet(subnet("ghost", 1, ghost));
    store.apply_node(node("node1"));
    for i in 1..=2 {
        store.apply_pod(pod("ns1", &format!("p{i}"), "node1", &[]));
    }
    store.mark_synced();
    let cfg = ClusterConfig {
        mode: control::translate::Mode::External,
        platform_security_groups: true,
        ..ClusterConfig::default()
    };
    let mut ctl = controller_with(&nb, &store, cfg.clone()).await;
    settle(&mut ctl, &mut rx).await;

    // our pods' ports joined the group named by their Subnet; the VM stays; the group's
    // other columns and the other group are as the platform left them
    assert_eq!(group_ports(&nb, "sg_web"), ["ns1_p1", "ns1_p2", "vm-1"]);
    assert_eq!(group_columns(&nb, "sg_web", fixed), web_before);
    assert_eq!(
        nbctl(&nb, &["list", "Port_Group", "sg_other"]),
        other_before
    );
    let ghost = store.subnet("ghost").unwrap().status.unwrap();
    assert_eq!(ghost.phase, SubnetPhase::Failed);
    assert!(
        ghost
            .reason
            .contains(r#"security group "sg_gone" not found"#),
        "{}",
        ghost.reason
    );

    // the Subnet names no group any more: our ports leave, the group is the platform's
    shared.security_groups.clear();
    store.apply_subnet(subnet("shared", 0, shared.clone()));
    settle(&mut ctl, &mut rx).await;
    assert_eq!(group_ports(&nb, "sg_web"), ["vm-1"]);
    assert_eq!(group_columns(&nb, "sg_web", fixed), web_before);

    // named again, then the controller restarted with the feature off: refused, and the
    // ports an earlier run put in the group are taken out
    shared.security_groups = vec!["sg_web".into()];
    store.apply_subnet(subnet("shared", 0, shared));
    settle(&mut ctl, &mut rx).await;
    assert_eq!(group_ports(&nb, "sg_web"), ["ns1_p1", "ns1_p2", "vm-1"]);
    drop(ctl);
    let off = ClusterConfig {
        platform_security_groups: false,
        ..cfg
    };
    let mut replay = store.replay();
    let mut ctl = controller_with(&nb, &store, off).await;
    settle(&mut ctl, &mut replay).await;
    assert_eq!(group_ports(&nb, "sg_web"), ["vm-1"]);
    let shared = store.subnet("shared").unwrap().status.unwrap();
    assert!(
        shared.reason.contains("--platform-security-groups"),
        "{}",
        shared.reason
    );
    drop(ctl);
    central.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_mode_uninstall_nb_leaves_the_platform_as_it_was() {
    use control::services::{Proto, ServiceInfo, ServicePort, TargetPort};
    if !tests::require_real(
        "control_controller_external_mode_uninstall_nb_leaves_the_platform_as_it_was",
        tests::OVSDB_BINS,
    ) {
        return;
    }
    let s = tests::scratch("ccu");
    let central = start_central(&s, false);
    let nb = central.nb_remote();
    // the platform: a switch with a VM, a load balancer group of its own on the switch, a
    // security group
    nbctl(&nb, &["ls-add", "zs-l2"]);
    tests::platform::vm_port(&nb, "zs-l2", "vm-1", "fa:16:3e:00:00:01", "10.10.0.5");
    nbctl(
        &nb,
        &[
            "--id=@g",
            "create",
            "Load_Balancer_Group",
            "name=platform_lbg",
            "--",
            "add",
            "Logical_Switch",
            "zs-l2",
            "load_balancer_group",
            "@g",
        ],
    );
    nbctl(&nb, &["pg-add", "sg_web", "vm-1"]);
    let switch_columns = "--columns=name,ports,load_balancer_group,acls,other_config,external_ids";
    let platform = |nb: &str| {
        (
            nbctl(nb, &[switch_columns, "list", "Logical_Switch", "zs-l2"]),
            group_columns(nb, "sg_web", "name,ports,acls,external_ids"),
            nbctl(nb, &["list", "Logical_Switch_Port", "vm-1"]),
        )
    };
    let before = platform(&nb);

    // the controller: pods on the platform switch in its security group, a Service
    let (store, mut rx) = MemoryStore::new();
    let mut shared = spec("10.10.0.0/24");
    shared.external_logical_switch = Some("zs-l2".into());
    shared.namespaces = vec!["ns1".into()];
    shared.security_groups = vec!["sg_web".into()];
    store.apply_subnet(subnet("shared", 0, shared));
    store.apply_node(node("node1"));
    for i in 1..=2 {
        store.apply_pod(pod("ns1", &format!("p{i}"), "node1", &[]));
    }
    store.apply_service(ServiceInfo {
        namespace: "ns1".into(),
        name: "web".into(),
        cluster_ips: vec!["10.96.0.10".parse().unwrap()],
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: Proto::Tcp,
            port: 80,
            target_port: TargetPort::Number(8080),
            node_port: None,
        }],
        ..Default::default()
    });
    // a NetworkPolicy over pods of the group: its rows and the mirrors of the group's rules
    store.apply_network_policy(
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ns1", "name": "web"},
            "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 80}]}]}}))
        .expect("policy"),
    );
    store.mark_synced();
    let cfg = ClusterConfig {
        mode: control::translate::Mode::External,
        platform_security_groups: true,
        ..ClusterConfig::default()
    };
    let mut ctl = controller_with(&nb, &store, cfg).await;
    settle(&mut ctl, &mut rx).await;
    drop(ctl);
    let during = platform(&nb);
    assert_ne!(
        during, before,
        "the controller wrote to the platform's rows"
    );
    assert_eq!(group_ports(&nb, "sg_web"), ["ns1_p1", "ns1_p2", "vm-1"]);
    let ours = |nb: &str| -> Vec<String> {
        [
            "Logical_Switch_Port",
            "Load_Balancer",
            "Load_Balancer_Group",
            "Port_Group",
            "ACL",
            "Address_Set",
        ]
        .iter()
        .flat_map(|t| {
            let cond = if *t == "Load_Balancer_Group" {
                "name=zstack-ovn-services_zstack-ovn".to_string()
            } else {
                "external_ids:zstack.io/owner=zstack-ovn".to_string()
            };
            nbctl(nb, &["--bare", "--columns=name", "find", t, &cond])
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| format!("{t} {}", l.trim()))
                .collect::<Vec<_>>()
        })
        .collect()
    };
    let mine = ours(&nb);
    for want in [
        "Logical_Switch_Port ns1_p1",
        "Logical_Switch_Port mgmt.node1_shared",
        "Load_Balancer Service_ns1/web_TCP",
        "Load_Balancer_Group zstack-ovn-services_zstack-ovn",
    ] {
        assert!(mine.iter().any(|m| m == want), "{want} in {mine:?}");
    }
    // the policy's group, the group of ours in platform groups, the mirror group
    for key in [
        "ns1/web".to_string(),
        control::netpol::platform_sg::MEMBERS_KEY.to_string(),
        control::netpol::platform_sg::deny_key(control::netpol::Direction::Ingress),
    ] {
        let want = format!(
            "Port_Group {}",
            control::netpol::port_group_name("zstack-ovn", &key)
        );
        assert!(mine.contains(&want), "{want} in {mine:?}");
    }

    // the uninstall: the binary, with the NB only
    let out = std::process::Command::new(tests::workspace_bin("zstack-ovnkube-controller"))
        .args(["--mode", "external", "--nb", &nb, "--uninstall-nb"])
        .output()
        .expect("run zstack-ovnkube-controller --uninstall-nb");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "--uninstall-nb: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("removed every NB row"), "{stdout}");
    assert_eq!(ours(&nb), Vec::<String>::new(), "rows of ours left");
    assert_eq!(platform(&nb), before, "the platform's rows as they were");
    central.stop().unwrap();
}
