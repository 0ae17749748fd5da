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
    let subnets = [
        subnet("blue", &["10.16.0.0/16", "fd00:10:16::/64"], None),
        subnet("vlan", &["192.168.50.0/24"], Some(50)),
    ];
    let pods = [
        pod("a", "n1", "blue", &["10.16.0.5/16", "fd00:10:16::5/64"]),
        pod("b", "n2", "blue", &["10.16.0.6/16"]),
        pod("u", "n1", "vlan", &["192.168.50.7/24"]),
    ];
    let nodes = [node("n1", "100.64.0.2/16"), node("n2", "100.64.0.3/16")];
    let input = Input {
        subnets: subnets.iter().collect(),
        pods: pods.iter().map(|(p, a)| (p, a)).collect(),
        nodes: nodes.iter().map(|(n, a)| (n, a)).collect(),
    };
    let mut nb = DesiredNb::default();
    add(cfg, &input, &mut nb);
    nb
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
        "ip4.dst == {10.16.0.0/16, 10.96.0.0/16, 100.64.0.0/16, 192.168.50.0/24}"
    );
    let n1 = &rows.policies["egress-node-n1-v4"];
    let set1 = api::names::egress_address_set(&cfg.cluster_id, "n1", true);
    assert_eq!(n1.match_, format!("ip4.src == ${set1}"));
    assert_eq!(n1.action, "reroute");
    assert_eq!(n1.nexthops, BTreeSet::from(["100.64.0.2".to_string()]));
    assert!(n1.priority < cluster.priority);
    // the VLAN Subnet's pod and the IPv6 address are not in the set
    assert_eq!(
        nb.netpol.address_sets[&set1].addresses,
        BTreeSet::from(["10.16.0.5".to_string()])
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
