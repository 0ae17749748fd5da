use std::collections::BTreeMap;

use super::*;
use crate::model::{Mac, NodeInfo, PodAddresses, PodInfo, ValidSubnet};

fn subnet(name: &str, cidrs: &[&str], vlan: Option<u16>) -> ValidSubnet {
    let mut s = crate::ipam::tests::subnet(name, cidrs, &[], &[]);
    s.vlan_id = vlan;
    s
}

fn pod(name: &str, node: &str, subnet: &str, ips: &[&str]) -> (PodInfo, PodAddresses) {
    (
        PodInfo {
            namespace: "ns".into(),
            name: name.into(),
            uid: name.into(),
            node: Some(node.into()),
            host_network: false,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            completed: false,
            ports: vec![],
        },
        PodAddresses {
            subnet: subnet.into(),
            ips: ips.iter().map(|i| i.parse().expect("ip")).collect(),
            mac: Mac([0x0a, 0x58, 0, 0, 0, 1]),
            gateways: vec![],
        },
    )
}

fn node(name: &str, join: &str) -> (NodeInfo, PodAddresses) {
    (
        NodeInfo {
            name: name.into(),
            addresses: vec![],
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        },
        PodAddresses {
            subnet: "join".into(),
            ips: vec![join.parse().expect("ip")],
            mac: Mac([0x0a, 0x58, 0, 0, 0, 2]),
            gateways: vec![],
        },
    )
}

fn translate(cfg: &ClusterConfig) -> DesiredNb {
    translate_with(cfg, None).0
}

/// Translates the model; `gateway`: node n1's gateway report (n2 reports none).
fn translate_with(cfg: &ClusterConfig, gateway: Option<&str>) -> (DesiredNb, GatewayProblems) {
    let subnets = [
        subnet("blue", &["10.16.0.0/16", "fd00:10:16::/64"], None),
        subnet("vlan", &["192.168.50.0/24"], Some(50)),
        ValidSubnet {
            nat_outgoing: false,
            ..subnet("green", &["10.17.0.0/16"], None)
        },
    ];
    let pods = [
        pod("a", "n1", "blue", &["10.16.0.5/16", "fd00:10:16::5/64"]),
        pod("b", "n2", "blue", &["10.16.0.6/16"]),
        pod("u", "n1", "vlan", &["192.168.50.7/24"]),
    ];
    let mut nodes = [node("n1", "100.64.0.2/16"), node("n2", "100.64.0.3/16")];
    if let Some(g) = gateway {
        nodes[0]
            .0
            .annotations
            .insert(api::keys::NODE_GATEWAY.into(), g.into());
    }
    nodes[1].0.addresses = vec!["172.16.0.2".parse().expect("ip")];
    let input = Input {
        subnets: subnets.iter().collect(),
        pods: pods.iter().map(|(p, a)| (p, a)).collect(),
        nodes: nodes.iter().map(|(n, a)| (n, a)).collect(),
    };
    let mut nb = DesiredNb::default();
    let problems = add(cfg, &input, &mut nb).problems;
    (nb, problems)
}

const N1_GATEWAY: &str = r#"{"interface":"br-phy","mac":"0a:58:ac:10:00:01","ipv4":"172.16.0.1/24","nextHopV4":"172.16.0.254"}"#;

#[test]
fn shared_mode_builds_a_gateway_router_per_reporting_node() {
    let cfg = ClusterConfig {
        gateway: GatewayMode::Shared,
        ..ClusterConfig::default()
    };
    let (nb, problems) = translate_with(&cfg, Some(N1_GATEWAY));
    // n1: its gateway router, bound to its chassis, sharing its address and MAC
    let gr = &nb.routers["GR_n1"];
    assert_eq!(gr.row.options["chassis"], "n1");
    assert_eq!(
        gr.children["rtoj-GR_n1"].networks,
        BTreeSet::from(["100.64.128.2/16".to_string()])
    );
    let rtoe = &gr.children["rtoe-GR_n1"];
    assert_eq!(rtoe.mac, "0a:58:ac:10:00:01");
    assert_eq!(rtoe.networks, BTreeSet::from(["172.16.0.1/24".to_string()]));
    let ext = &nb.switches["ext_n1"];
    let lnet = &ext.children["lnet_n1"];
    assert_eq!(
        (lnet.type_.as_str(), lnet.options["network_name"].as_str()),
        ("localnet", "physnet")
    );
    assert_eq!(
        ext.children["etor-GR_n1"].options["router-port"],
        "rtoe-GR_n1"
    );
    let gr_rows = &nb.router_rows["GR_n1"];
    assert_eq!(gr_rows.routes["gw-default-v4"].nexthop, "172.16.0.254");
    // back in: every routed non-VLAN Subnet via the cluster router
    assert_eq!(gr_rows.routes["gw-in-10.16.0.0/16"].nexthop, "100.64.0.1");
    assert_eq!(gr_rows.routes["gw-in-10.17.0.0/16"].nexthop, "100.64.0.1");
    // a VLAN Subnet too: its pods' gateway is the cluster router's port
    assert_eq!(
        gr_rows.routes["gw-in-192.168.50.0/24"].nexthop,
        "100.64.0.1"
    );
    // natOutgoing: false (green) leaves with the pod's address
    assert_eq!(
        gr_rows.nats.keys().collect::<Vec<_>>(),
        ["gw-snat-10.16.0.0/16", "gw-snat-192.168.50.0/24"]
    );
    let snat = &gr_rows.nats["gw-snat-10.16.0.0/16"];
    assert_eq!(
        (snat.type_.as_str(), snat.external_ip.as_str()),
        ("snat", "172.16.0.1")
    );
    // the cluster router sends n1's pods to the gateway router, and the nodes' own
    // addresses to the management port
    let rows = &nb.router_rows[CLUSTER_ROUTER];
    assert_eq!(
        rows.policies["egress-node-n1-v4"].nexthops,
        BTreeSet::from(["100.64.128.2".to_string()])
    );
    let hosts = &rows.policies["egress-node-n1-hosts-v4"];
    assert_eq!(hosts.nexthops, BTreeSet::from(["100.64.0.2".to_string()]));
    assert!(hosts.priority > NODE_PRIORITY && hosts.priority < CLUSTER_PRIORITY);
    let nodes_set = api::names::egress_nodes_address_set(&cfg.cluster_id, true);
    assert!(hosts.match_.ends_with(&format!("ip4.dst == ${nodes_set}")));
    assert_eq!(
        nb.netpol.address_sets[&nodes_set].addresses,
        BTreeSet::from(["172.16.0.1".to_string(), "172.16.0.2".to_string()])
    );
    // n2 reported nothing: no router, the management port path, and the reason
    assert!(!nb.routers.contains_key("GR_n2"));
    assert_eq!(
        rows.policies["egress-node-n2-v4"].nexthops,
        BTreeSet::from(["100.64.0.3".to_string()])
    );
    assert!(!rows.policies.contains_key("egress-node-n2-hosts-v4"));
    assert_eq!(problems["n2"], NoGatewayRouter::NotReported, "{problems:?}");
    assert_eq!(
        problems["n2"].to_string(),
        format!(
            "the node agent has not reported a gateway interface ({}) yet",
            api::keys::NODE_GATEWAY
        )
    );
    // every gateway row is ours
    for p in [
        &gr.row.external_ids,
        &ext.row.external_ids,
        &snat.external_ids,
    ] {
        assert_eq!(p[names::OWNER], cfg.cluster_id);
    }
}

#[test]
fn shared_mode_builds_nothing_for_a_gateway_the_agent_could_not_offer() {
    let cfg = ClusterConfig {
        gateway: GatewayMode::Shared,
        ..ClusterConfig::default()
    };
    let bad = r#"{"interface":"eth9","error":"gateway interface eth9 does not exist"}"#;
    let (nb, problems) = translate_with(&cfg, Some(bad));
    assert!(!nb.routers.contains_key("GR_n1"));
    assert!(!nb.switches.contains_key("ext_n1"));
    assert_eq!(
        problems["n1"].to_string(),
        "gateway interface eth9 does not exist"
    );
    let (nb, problems) = translate_with(&cfg, Some("not json"));
    assert!(nb.routers.is_empty() && problems["n1"].to_string().contains("not a gateway report"));
}

#[test]
fn each_node_reroutes_its_own_pods_to_its_management_port() {
    let cfg = ClusterConfig::default();
    let nb = translate(&cfg);
    let rows = &nb.router_rows[CLUSTER_ROUTER];
    let route = &rows.routes["egress-default-v4"];
    assert_eq!(
        (route.ip_prefix.as_str(), route.nexthop.as_str()),
        ("0.0.0.0/0", "100.64.0.1")
    );
    let cluster = &rows.policies["egress-cluster-v4"];
    assert_eq!(cluster.action, "allow");
    assert_eq!(
        cluster.match_,
        "ip4.dst == {10.16.0.0/16, 10.17.0.0/16, 10.96.0.0/16, 100.64.0.0/16, 192.168.50.0/24}"
    );
    let n1 = &rows.policies["egress-node-n1-v4"];
    let set1 = api::names::egress_address_set(&cfg.cluster_id, "n1", true);
    assert_eq!(n1.match_, format!("ip4.src == ${set1}"));
    assert_eq!(n1.action, "reroute");
    assert_eq!(n1.nexthops, BTreeSet::from(["100.64.0.2".to_string()]));
    assert!(n1.priority < cluster.priority);
    // the VLAN Subnet's pod is in the set (its gateway is the cluster router), the IPv6
    // address is not (no IPv6 join network here)
    assert_eq!(
        nb.netpol.address_sets[&set1].addresses,
        BTreeSet::from(["10.16.0.5".to_string(), "192.168.50.7".to_string()])
    );
    let set2 = api::names::egress_address_set(&cfg.cluster_id, "n2", true);
    assert_eq!(
        nb.netpol.address_sets[&set2].addresses,
        BTreeSet::from(["10.16.0.6".to_string()])
    );
    assert_eq!(
        rows.policies["egress-node-n2-v4"].nexthops,
        BTreeSet::from(["100.64.0.3".to_string()])
    );
    // every row is ours and names its key
    for p in rows.policies.values() {
        assert_eq!(p.external_ids[names::OWNER], cfg.cluster_id);
        assert!(rows.policies.contains_key(&p.external_ids[ROW_KEY]));
    }
}

#[test]
fn external_mode_and_gateway_off_add_nothing() {
    for cfg in [
        ClusterConfig {
            mode: Mode::External,
            ..ClusterConfig::default()
        },
        ClusterConfig {
            gateway: GatewayMode::Off,
            ..ClusterConfig::default()
        },
    ] {
        let nb = translate(&cfg);
        assert!(nb.router_rows.is_empty(), "{cfg:?}");
        assert!(nb.netpol.address_sets.is_empty(), "{cfg:?}");
    }
}

/// A dual-stack node n1 (join 100.64.0.2 and fd98::2) with pod `a`, in shared mode with
/// an IPv6 join network; `gateway`: n1's report.
fn dual_stack(gateway: &str) -> (ClusterConfig, DesiredNb, Egress) {
    let cfg = ClusterConfig {
        join_v6: super::super::JoinV6::new("fd98::/64".parse().expect("cidr")),
        gateway: GatewayMode::Shared,
        ..ClusterConfig::default()
    };
    let subnets = [subnet("blue", &["10.16.0.0/16", "fd00:10:16::/64"], None)];
    let pods = [pod(
        "a",
        "n1",
        "blue",
        &["10.16.0.5/16", "fd00:10:16::5/64"],
    )];
    let mut n1 = node("n1", "100.64.0.2/16");
    n1.1.ips.push("fd98::2/64".parse().expect("ip"));
    n1.0.annotations
        .insert(api::keys::NODE_GATEWAY.into(), gateway.into());
    let nodes = [n1];
    let input = Input {
        subnets: subnets.iter().collect(),
        pods: pods.iter().map(|(p, a)| (p, a)).collect(),
        nodes: nodes.iter().map(|(n, a)| (n, a)).collect(),
    };
    let mut nb = DesiredNb::default();
    let out = add(&cfg, &input, &mut nb);
    (cfg, nb, out)
}

#[test]
fn an_ipv6_join_network_without_an_ipv6_gateway_gives_ipv6_egress_through_the_management_port() {
    let (cfg, nb, out) = dual_stack(N1_GATEWAY);
    let rows = &nb.router_rows[CLUSTER_ROUTER];
    let route = &rows.routes["egress-default-v6"];
    assert_eq!(
        (route.ip_prefix.as_str(), route.nexthop.as_str()),
        ("::/0", "fd98::1")
    );
    assert_eq!(
        rows.policies["egress-cluster-v6"].match_,
        "ip6.dst == {fd00:10:16::/64, fd98::/64}"
    );
    let set6 = api::names::egress_address_set(&cfg.cluster_id, "n1", false);
    let p6 = &rows.policies["egress-node-n1-v6"];
    assert_eq!(p6.match_, format!("ip6.src == ${set6}"));
    // the report has no IPv6: IPv6 takes the management port, the router is IPv4 only
    assert_eq!(p6.nexthops, BTreeSet::from(["fd98::2".to_string()]));
    assert_eq!(
        nb.netpol.address_sets[&set6].addresses,
        BTreeSet::from(["fd00:10:16::5".to_string()])
    );
    assert_eq!(
        rows.policies["egress-node-n1-v4"].nexthops,
        BTreeSet::from(["100.64.128.2".to_string()])
    );
    assert!(!rows.policies.contains_key("egress-node-n1-hosts-v6"));
    let gr = &nb.routers["GR_n1"];
    assert_eq!(
        gr.children["rtoe-GR_n1"].networks,
        BTreeSet::from(["172.16.0.1/24".to_string()])
    );
    assert!(!nb.router_rows["GR_n1"].routes.contains_key("gw-default-v6"));
    assert!(
        !nb.router_rows["GR_n1"]
            .nats
            .contains_key("gw-snat-fd00:10:16::/64")
    );
    assert_eq!(
        out.through_router["n1"],
        vec!["100.64.0.2".parse::<IpAddr>().expect("ip")]
    );
}

#[test]
fn an_ipv6_gateway_report_gives_the_router_an_ipv6_side() {
    let report = r#"{"interface":"br-phy","mac":"0a:58:ac:10:00:01","ipv4":"172.16.0.1/24","nextHopV4":"172.16.0.254","ipv6":"fd00:172:16::1/64","nextHopV6":"fd00:172:16::fe"}"#;
    let (cfg, nb, out) = dual_stack(report);
    let gr = &nb.routers["GR_n1"];
    // the join port's IPv6 address is the upper-half twin of the management port's
    assert_eq!(
        gr.children["rtoj-GR_n1"].networks,
        BTreeSet::from([
            "100.64.128.2/16".to_string(),
            "fd98::8000:0:0:2/64".to_string()
        ])
    );
    assert_eq!(
        gr.children["rtoe-GR_n1"].networks,
        BTreeSet::from(["172.16.0.1/24".to_string(), "fd00:172:16::1/64".to_string()])
    );
    let gr_rows = &nb.router_rows["GR_n1"];
    let d6 = &gr_rows.routes["gw-default-v6"];
    assert_eq!(
        (d6.ip_prefix.as_str(), d6.nexthop.as_str()),
        ("::/0", "fd00:172:16::fe")
    );
    assert_eq!(gr_rows.routes["gw-in-fd00:10:16::/64"].nexthop, "fd98::1");
    let snat6 = &gr_rows.nats["gw-snat-fd00:10:16::/64"];
    assert_eq!(snat6.external_ip, "fd00:172:16::1");
    assert_eq!(snat6.logical_ip, "fd00:10:16::/64");
    // the cluster router sends n1's IPv6 pods to the router, the nodes' own IPv6
    // addresses to the management port
    let rows = &nb.router_rows[CLUSTER_ROUTER];
    assert_eq!(
        rows.policies["egress-node-n1-v6"].nexthops,
        BTreeSet::from(["fd98::8000:0:0:2".to_string()])
    );
    let hosts6 = &rows.policies["egress-node-n1-hosts-v6"];
    assert_eq!(hosts6.nexthops, BTreeSet::from(["fd98::2".to_string()]));
    let set6 = api::names::egress_nodes_address_set(&cfg.cluster_id, false);
    assert!(
        hosts6.match_.ends_with(&format!("ip6.dst == ${set6}")),
        "{}",
        hosts6.match_
    );
    assert_eq!(
        nb.netpol.address_sets[&set6].addresses,
        BTreeSet::from(["fd00:172:16::1".to_string()])
    );
    assert_eq!(out.through_router["n1"].len(), 2, "both families");
}
