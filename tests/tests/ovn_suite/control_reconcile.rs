//! The NB reconciler against a real OVN_Northbound (ovsdb-server + ovn-northd from the
//! lab), with `ovn-nbctl` as the second opinion: expected rows appear, a second pass and a
//! restarted reconciler write nothing, deletions remove rows, and in external mode every
//! foreign row is left byte-for-byte as it was.

use std::collections::BTreeMap;

use control::desired::DesiredNb;
use control::model::{Mac, NodeInfo, PodAddresses, PodInfo, Protocol, ValidSubnet};
use control::reconcile::Reconciler;
use control::translate::{ClusterConfig, Input, Mode, translate};
use lab::central::{Central, CentralConfig};
use ovsdb::{Client, ClientConfig};
use tests::nbctl::{column, nbctl};

const OWNER: &str = "zstack-ovn";

fn subnet(name: &str, cidr: &str, gw: &str) -> ValidSubnet {
    ValidSubnet {
        name: name.into(),
        protocol: Protocol::IPv4,
        cidrs: vec![cidr.parse().unwrap()],
        gateways: vec![gw.parse().unwrap()],
        excludes: vec![],
        vlan_id: None,
        provider: None,
        external_logical_switch: None,
        security_groups: vec![],
        namespaces: vec![],
        default: false,
        nat_outgoing: true,
    }
}

fn pod(ns: &str, name: &str, node: &str) -> PodInfo {
    PodInfo {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        node: Some(node.into()),
        host_network: false,
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        completed: false,
        ports: Vec::new(),
    }
}

fn addrs(subnet: &str, ip_cidr: &str, mac: &str) -> PodAddresses {
    PodAddresses {
        subnet: subnet.into(),
        ips: vec![ip_cidr.parse().unwrap()],
        mac: mac.parse::<Mac>().unwrap(),
        gateways: vec![],
    }
}

struct Model {
    subnets: Vec<ValidSubnet>,
    pods: Vec<(PodInfo, PodAddresses)>,
    nodes: Vec<(NodeInfo, PodAddresses)>,
}

impl Model {
    fn desired(&self, cfg: &ClusterConfig) -> DesiredNb {
        let input = Input {
            subnets: self.subnets.iter().collect(),
            pods: self.pods.iter().map(|(p, a)| (p, a)).collect(),
            nodes: self.nodes.iter().map(|(n, a)| (n, a)).collect(),
        };
        translate(cfg, &input)
    }

    /// With the egress gateway's rows (as the controller adds them).
    fn desired_with_egress(&self, cfg: &ClusterConfig) -> DesiredNb {
        let mut nb = self.desired(cfg);
        let input = Input {
            subnets: self.subnets.iter().collect(),
            pods: self.pods.iter().map(|(p, a)| (p, a)).collect(),
            nodes: self.nodes.iter().map(|(n, a)| (n, a)).collect(),
        };
        control::translate::egress::add(cfg, &input, &mut nb);
        nb
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

/// `ovn-nbctl lr-policy-list` of the cluster router, one policy per line, trimmed (as a
/// set: policies of one priority come in no fixed order).
fn policies(nb: &str) -> std::collections::BTreeSet<String> {
    nbctl(nb, &["lr-policy-list", "ovn_cluster_router"])
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_policies_converge_and_spare_foreign_rows() {
    if !tests::require_real(
        "control_reconcile_egress_policies_converge_and_spare_foreign_rows",
        tests::OVSDB_BINS,
    ) {
        return;
    }
    let s = tests::scratch("cre");
    let (central, client) = start(&s.dir.path().join("central")).await;
    let nb = central.nb_remote();
    let cfg = ClusterConfig::default();
    let mut model = Model {
        subnets: vec![subnet("blue", "10.1.0.0/24", "10.1.0.1")],
        pods: vec![
            (
                pod("ns1", "a", "node1"),
                addrs("blue", "10.1.0.5/24", "0a:58:0a:01:00:05"),
            ),
            (
                pod("ns1", "b", "node2"),
                addrs("blue", "10.1.0.6/24", "0a:58:0a:01:00:06"),
            ),
        ],
        nodes: vec![
            (
                node("node1"),
                addrs("join", "100.64.0.2/16", "0a:58:64:40:00:02"),
            ),
            (
                node("node2"),
                addrs("join", "100.64.0.3/16", "0a:58:64:40:00:03"),
            ),
        ],
    };
    let rec = Reconciler::start(client.clone(), OWNER).await.unwrap();
    rec.reconcile(&model.desired_with_egress(&cfg))
        .await
        .unwrap();
    let set1 = api::names::egress_address_set(OWNER, "node1", true);
    let set2 = api::names::egress_address_set(OWNER, "node2", true);
    assert_eq!(
        policies(&nb),
        [
            "31000 ip4.dst == {10.1.0.0/24, 10.96.0.0/16, 100.64.0.0/16} allow".to_string(),
            format!("30000 ip4.src == ${set1} reroute 100.64.0.2"),
            format!("30000 ip4.src == ${set2} reroute 100.64.0.3"),
        ]
        .into()
    );
    let routes = nbctl(&nb, &["lr-route-list", "ovn_cluster_router"]);
    assert!(
        routes.contains("0.0.0.0/0") && routes.contains("100.64.0.1"),
        "{routes}"
    );
    assert_eq!(
        nbctl(&nb, &["get", "Address_Set", &set1, "addresses"]).trim(),
        "[\"10.1.0.5\"]"
    );

    // an operator's own policy and route on our router
    nbctl(
        &nb,
        &[
            "lr-policy-add",
            "ovn_cluster_router",
            "500",
            "ip4.src == 192.0.2.1",
            "drop",
        ],
    );
    nbctl(
        &nb,
        &[
            "lr-route-add",
            "ovn_cluster_router",
            "192.0.2.0/24",
            "100.64.0.9",
        ],
    );

    // converged: no write, also from a restarted reconciler
    let again = rec
        .reconcile(&model.desired_with_egress(&cfg))
        .await
        .unwrap();
    assert_eq!(again.transactions, 0, "{again:?}");
    let restarted = Reconciler::start(client.clone(), OWNER).await.unwrap();
    let third = restarted
        .reconcile(&model.desired_with_egress(&cfg))
        .await
        .unwrap();
    assert_eq!(third.transactions, 0, "{third:?}");

    // node2 goes (with its pod), pod a moves address: node2's policy goes, the operator's stay
    model.nodes.truncate(1);
    model.pods.truncate(1);
    model.pods[0].1 = addrs("blue", "10.1.0.7/24", "0a:58:0a:01:00:07");
    let out = rec
        .reconcile(&model.desired_with_egress(&cfg))
        .await
        .unwrap();
    assert!(out.deletes >= 1, "{out:?}");
    assert_eq!(
        policies(&nb),
        [
            "31000 ip4.dst == {10.1.0.0/24, 10.96.0.0/16, 100.64.0.0/16} allow".to_string(),
            format!("30000 ip4.src == ${set1} reroute 100.64.0.2"),
            "500 ip4.src == 192.0.2.1 drop".to_string(),
        ]
        .into()
    );
    assert!(nbctl(&nb, &["lr-route-list", "ovn_cluster_router"]).contains("192.0.2.0/24"));
    assert_eq!(
        nbctl(&nb, &["get", "Address_Set", &set1, "addresses"]).trim(),
        "[\"10.1.0.7\"]"
    );

    // gateway off: our policies and route go, the operator's stay
    let off = ClusterConfig {
        gateway: control::translate::GatewayMode::Off,
        ..ClusterConfig::default()
    };
    rec.reconcile(&model.desired_with_egress(&off))
        .await
        .unwrap();
    assert_eq!(
        policies(&nb),
        ["500 ip4.src == 192.0.2.1 drop".to_string()].into()
    );
    let routes = nbctl(&nb, &["lr-route-list", "ovn_cluster_router"]);
    assert!(
        routes.contains("192.0.2.0/24") && !routes.contains("0.0.0.0/0"),
        "{routes}"
    );
    client.close().await;
    central.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_gateway_rows_converge_and_go_with_their_node() {
    if !tests::require_real(
        "control_reconcile_shared_gateway_rows_converge_and_go_with_their_node",
        tests::OVSDB_BINS,
    ) {
        return;
    }
    let s = tests::scratch("crg");
    let (central, client) = start(&s.dir.path().join("central")).await;
    let nb = central.nb_remote();
    let cfg = ClusterConfig {
        gateway: control::translate::GatewayMode::Shared,
        ..ClusterConfig::default()
    };
    let mut gw_node = node("node1");
    gw_node.annotations.insert(
        api::keys::NODE_GATEWAY.into(),
        r#"{"interface":"br-phy","mac":"0a:58:ac:10:00:01","ipv4":"172.16.0.1/24","nextHopV4":"172.16.0.254"}"#
            .into(),
    );
    let mut model = Model {
        subnets: vec![subnet("blue", "10.1.0.0/24", "10.1.0.1")],
        pods: vec![(
            pod("ns1", "a", "node1"),
            addrs("blue", "10.1.0.5/24", "0a:58:0a:01:00:05"),
        )],
        nodes: vec![
            (gw_node, addrs("join", "100.64.0.2/16", "0a:58:64:40:00:02")),
            (
                node("node2"),
                addrs("join", "100.64.0.3/16", "0a:58:64:40:00:03"),
            ),
        ],
    };
    let rec = Reconciler::start(client.clone(), OWNER).await.unwrap();
    rec.reconcile(&model.desired_with_egress(&cfg))
        .await
        .unwrap();
    // node1's gateway router: SNAT to the node's address, out via the underlay's router,
    // back in via the cluster router; node2 (no report) has none
    let nat = nbctl(&nb, &["lr-nat-list", "GR_node1"]);
    assert!(
        nat.contains("snat") && nat.contains("172.16.0.1") && nat.contains("10.1.0.0/24"),
        "{nat}"
    );
    let routes = nbctl(&nb, &["lr-route-list", "GR_node1"]);
    assert!(
        routes.contains("0.0.0.0/0") && routes.contains("172.16.0.254"),
        "{routes}"
    );
    assert!(
        routes.contains("10.1.0.0/24") && routes.contains("100.64.0.1"),
        "{routes}"
    );
    assert_eq!(
        nbctl(
            &nb,
            &["get", "Logical_Router", "GR_node1", "options:chassis"]
        )
        .trim(),
        "node1"
    );
    assert!(
        nbctl(&nb, &["lr-list"])
            .lines()
            .all(|l| !l.contains("GR_node2"))
    );
    let set1 = api::names::egress_address_set(OWNER, "node1", true);
    assert!(
        policies(&nb).contains(&format!("30000 ip4.src == ${set1} reroute 100.64.128.2")),
        "{:?}",
        policies(&nb)
    );
    // an operator's NAT row on our gateway router stays
    nbctl(
        &nb,
        &[
            "lr-nat-add",
            "GR_node1",
            "dnat_and_snat",
            "172.16.0.50",
            "10.1.0.50",
        ],
    );

    // converged: no write, also from a restarted reconciler
    let again = rec
        .reconcile(&model.desired_with_egress(&cfg))
        .await
        .unwrap();
    assert_eq!(again.transactions, 0, "{again:?}");
    let restarted = Reconciler::start(client.clone(), OWNER).await.unwrap();
    let third = restarted
        .reconcile(&model.desired_with_egress(&cfg))
        .await
        .unwrap();
    assert_eq!(third.transactions, 0, "{third:?}");
    let nat = nbctl(&nb, &["lr-nat-list", "GR_node1"]);
    assert!(nat.contains("172.16.0.50") && nat.contains("snat"), "{nat}");

    // natOutgoing turned off on the Subnet: our SNAT row goes, the operator's stays
    model.subnets[0].nat_outgoing = false;
    rec.reconcile(&model.desired_with_egress(&cfg))
        .await
        .unwrap();
    let nat = nbctl(&nb, &["lr-nat-list", "GR_node1"]);
    assert!(nat.contains("172.16.0.50"), "{nat}");
    assert!(!nat.contains("10.1.0.0/24"), "{nat}");

    // node1 goes: its router, external switch and join port go
    model.nodes.remove(0);
    model.pods.clear();
    rec.reconcile(&model.desired_with_egress(&cfg))
        .await
        .unwrap();
    assert!(
        nbctl(&nb, &["lr-list"])
            .lines()
            .all(|l| !l.contains("GR_node1"))
    );
    assert!(
        nbctl(&nb, &["ls-list"])
            .lines()
            .all(|l| !l.contains("ext_node1"))
    );
    assert!(!nbctl(&nb, &["lsp-list", "join"]).contains("jtor-GR_node1"));
    client.close().await;
    central.stop().unwrap();
}

async fn start(dir: &std::path::Path) -> (Central, Client) {
    let central = Central::start(CentralConfig {
        dir: dir.to_path_buf(),
        raft: false,
        northd: true,
        tcp: false,
    })
    .expect("start OVN central");
    let client = Client::connect(ClientConfig::parse(&central.nb_remote()).unwrap())
        .await
        .expect("connect NB");
    (central, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_rows_zero_write_resync_and_deletes() {
    if !tests::require_real(
        "control_reconcile_standalone_rows_zero_write_resync_and_deletes",
        tests::OVSDB_BINS,
    ) {
        return;
    }
    let s = tests::scratch("crs");
    let (central, client) = start(&s.dir.path().join("central")).await;
    let nb = central.nb_remote();
    let cfg = ClusterConfig::default();
    let node = NodeInfo {
        name: "node1".into(),
        addresses: vec!["172.16.0.1".parse().unwrap()],
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    };
    let mut model = Model {
        subnets: vec![
            subnet("blue", "10.1.0.0/24", "10.1.0.1"),
            subnet("red", "10.2.0.0/24", "10.2.0.1"),
        ],
        pods: vec![
            (
                pod("ns1", "a", "node1"),
                addrs("blue", "10.1.0.5/24", "0a:58:0a:01:00:05"),
            ),
            (
                pod("ns1", "b", "node1"),
                addrs("blue", "10.1.0.6/24", "0a:58:0a:01:00:06"),
            ),
            (
                pod("ns2", "c", "node2"),
                addrs("red", "10.2.0.5/24", "0a:58:0a:02:00:05"),
            ),
        ],
        nodes: vec![(node, addrs("join", "100.64.0.2/16", "0a:58:64:40:00:02"))],
    };

    let rec = Reconciler::start(client.clone(), OWNER).await.unwrap();
    let first = rec.reconcile(&model.desired(&cfg)).await.unwrap();
    assert!(first.transactions >= 1 && first.inserts > 0, "{first:?}");
    assert!(first.conflicts.is_empty(), "{:?}", first.conflicts);

    // Second opinion: ovn-nbctl sees the topology.
    assert_eq!(
        column(&nb, "Logical_Switch", "name"),
        vec!["join", "subnet-blue", "subnet-red"]
    );
    assert_eq!(
        column(&nb, "Logical_Router", "name"),
        vec!["ovn_cluster_router"]
    );
    let lsps = nbctl(&nb, &["lsp-list", "subnet-blue"]);
    assert!(
        lsps.contains("(ns1_a)") && lsps.contains("(ns1_b)"),
        "{lsps}"
    );
    assert!(lsps.contains("(subnet-blue-ovn_cluster_router)"), "{lsps}");
    assert_eq!(
        nbctl(&nb, &["lsp-get-addresses", "ns1_a"]).trim(),
        "0a:58:0a:01:00:05 10.1.0.5"
    );
    assert_eq!(
        nbctl(&nb, &["lsp-get-port-security", "ns1_a"]).trim(),
        "0a:58:0a:01:00:05 10.1.0.5"
    );
    assert_eq!(
        nbctl(
            &nb,
            &[
                "get",
                "Logical_Router_Port",
                "ovn_cluster_router-subnet-red",
                "networks"
            ]
        )
        .trim(),
        "[\"10.2.0.1/24\"]"
    );
    assert_eq!(
        nbctl(
            &nb,
            &[
                "get",
                "Logical_Switch_Port",
                "ns2_c",
                "external_ids:zstack.io/owner"
            ]
        )
        .trim(),
        "zstack-ovn"
    );
    assert!(nbctl(&nb, &["lsp-list", "join"]).contains("(node-node1)"));

    // Nothing changed: zero writes, also from a freshly started reconciler (restart).
    let second = rec.reconcile(&model.desired(&cfg)).await.unwrap();
    assert_eq!(second.transactions, 0, "{second:?}");
    let restarted = Reconciler::start(client.clone(), OWNER).await.unwrap();
    let third = restarted.reconcile(&model.desired(&cfg)).await.unwrap();
    assert_eq!(third.transactions, 0, "{third:?}");

    // A changed pod (new MAC), a pod that moved Subnet, a deleted pod, a deleted Subnet.
    model.pods[0].1 = addrs("blue", "10.1.0.5/24", "0a:58:0a:01:00:55");
    model.pods[1].1 = addrs("red", "10.2.0.6/24", "0a:58:0a:02:00:06");
    model.pods.remove(2);
    let out = rec.reconcile(&model.desired(&cfg)).await.unwrap();
    assert!(out.updates >= 1 && out.deletes >= 1, "{out:?}");
    assert_eq!(
        nbctl(&nb, &["lsp-get-addresses", "ns1_a"]).trim(),
        "0a:58:0a:01:00:55 10.1.0.5"
    );
    assert!(nbctl(&nb, &["lsp-list", "subnet-red"]).contains("(ns1_b)"));
    assert!(!nbctl(&nb, &["lsp-list", "subnet-blue"]).contains("(ns1_b)"));
    assert!(!column(&nb, "Logical_Switch_Port", "name").contains(&"ns2_c".to_string()));

    model.subnets.retain(|s| s.name != "red");
    model.pods.retain(|(_, a)| a.subnet != "red");
    rec.reconcile(&model.desired(&cfg)).await.unwrap();
    assert_eq!(
        column(&nb, "Logical_Switch", "name"),
        vec!["join", "subnet-blue"]
    );
    assert!(
        !column(&nb, "Logical_Router_Port", "name")
            .contains(&"ovn_cluster_router-subnet-red".to_string())
    );
    assert!(!column(&nb, "Logical_Switch_Port", "name").contains(&"ns1_b".to_string()));
    client.close().await;
    central.stop().unwrap();
}

/// Every foreign row, as `ovn-nbctl list` prints it (sorted blocks, so order-independent).
fn foreign_snapshot(nb: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for table in [
        "Logical_Switch",
        "Logical_Switch_Port",
        "ACL",
        "Logical_Router",
        "Logical_Router_Port",
        "Address_Set",
    ] {
        let text = nbctl(nb, &["list", table]);
        let mut blocks: Vec<String> = text
            .split("\n\n")
            .map(str::trim)
            .filter(|b| !b.is_empty() && !b.contains("zstack.io/owner"))
            .map(str::to_string)
            .collect();
        blocks.sort();
        out.insert(table.to_string(), blocks);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_mode_touches_only_its_own_rows() {
    if !tests::require_real(
        "control_reconcile_external_mode_touches_only_its_own_rows",
        tests::OVSDB_BINS,
    ) {
        return;
    }
    let s = tests::scratch("cre");
    let (central, client) = start(&s.dir.path().join("central")).await;
    let nb = central.nb_remote();

    // The platform's rows, made by its own tool.
    nbctl(&nb, &["ls-add", "zstack-l2-a"]);
    nbctl(&nb, &["ls-add", "zstack-l2-b"]);
    nbctl(
        &nb,
        &[
            "lsp-add",
            "zstack-l2-a",
            "vm-1",
            "--",
            "lsp-set-addresses",
            "vm-1",
            "fa:16:3e:00:00:01 10.10.0.5",
        ],
    );
    nbctl(&nb, &["lsp-add", "zstack-l2-b", "vm-2"]);
    nbctl(
        &nb,
        &[
            "acl-add",
            "zstack-l2-a",
            "to-lport",
            "1000",
            "ip4.src == 10.10.0.0/24",
            "allow",
        ],
    );
    nbctl(&nb, &["lr-add", "zstack-vrouter"]);
    nbctl(
        &nb,
        &[
            "lrp-add",
            "zstack-vrouter",
            "zstack-vrouter-a",
            "fa:16:3e:00:00:fe",
            "10.10.0.1/24",
        ],
    );
    nbctl(
        &nb,
        &[
            "create",
            "Address_Set",
            "name=zstack_vms",
            "addresses=10.10.0.5",
        ],
    );
    // A foreign row that happens to carry one of our names: must not be adopted.
    nbctl(&nb, &["ls-add", "subnet-clash"]);
    let before = foreign_snapshot(&nb);

    let cfg = ClusterConfig {
        mode: Mode::External,
        ..ClusterConfig::default()
    };
    let mut ext = subnet("shared", "10.10.0.0/24", "10.10.0.1");
    ext.external_logical_switch = Some("zstack-l2-a".into());
    let model = Model {
        subnets: vec![ext, subnet("clash", "10.20.0.0/24", "10.20.0.1")],
        pods: vec![
            (
                pod("ns1", "p1", "node1"),
                addrs("shared", "10.10.0.20/24", "0a:58:0a:0a:00:14"),
            ),
            (
                pod("ns1", "p2", "node1"),
                addrs("shared", "10.10.0.21/24", "0a:58:0a:0a:00:15"),
            ),
        ],
        nodes: vec![],
    };
    let rec = Reconciler::start(client.clone(), OWNER).await.unwrap();
    let out = rec.reconcile(&model.desired(&cfg)).await.unwrap();
    assert!(
        out.conflicts.iter().any(|c| c.contains("subnet-clash")),
        "the foreign subnet-clash must be reported, not adopted: {:?}",
        out.conflicts
    );
    let ports = nbctl(&nb, &["lsp-list", "zstack-l2-a"]);
    assert!(ports.contains("(ns1_p1)") && ports.contains("(ns1_p2)") && ports.contains("(vm-1)"));
    // External mode creates no router or join switch of its own.
    assert_eq!(
        column(&nb, "Logical_Router", "name"),
        vec!["zstack-vrouter"]
    );

    // Full resync from a new reconciler: zero writes, and GC of everything of ours.
    let again = Reconciler::start(client.clone(), OWNER).await.unwrap();
    assert_eq!(
        again
            .reconcile(&model.desired(&cfg))
            .await
            .unwrap()
            .transactions,
        0
    );
    let gc = again.reconcile(&DesiredNb::default()).await.unwrap();
    assert_eq!(gc.deletes, 2, "{gc:?}");
    assert!(!nbctl(&nb, &["lsp-list", "zstack-l2-a"]).contains("ns1_p"));

    // Every foreign row is byte-for-byte what the platform wrote.
    assert_eq!(foreign_snapshot(&nb), before);
    client.close().await;
    central.stop().unwrap();
}
