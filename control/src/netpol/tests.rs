use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::json;

use super::*;
use crate::model::{Mac, NamespaceInfo, PodAddresses, PodInfo, PodPort};

pub(super) const CID: &str = "test-cluster";

thread_local! {
    /// Keys whose OVN name a test forces (key → name): a 64-bit hash collision made on
    /// demand, which real keys cannot produce in a test's time.
    static FORCED: std::cell::RefCell<BTreeMap<String, String>> = const {
        std::cell::RefCell::new(BTreeMap::new())
    };
}

/// The name a test forced for `key` ([`collide`]).
pub(super) fn forced_name(key: &str) -> Option<String> {
    FORCED.with(|f| f.borrow().get(key).cloned())
}

/// Gives every key of `keys` the OVN name `name` in this test's thread.
fn collide(name: &str, keys: &[&str]) {
    FORCED.with(|f| {
        let mut f = f.borrow_mut();
        for k in keys {
            f.insert(k.to_string(), name.to_string());
        }
    });
}

pub(super) fn pod(
    ns: &str,
    name: &str,
    ip: &str,
    labels: &[(&str, &str)],
) -> (PodInfo, PodAddresses) {
    let info = PodInfo {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{ns}-{name}"),
        node: Some("n1".into()),
        host_network: false,
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        annotations: BTreeMap::new(),
        completed: false,
        ports: vec![
            PodPort {
                name: Some("serve-80-tcp".into()),
                port: 80,
                protocol: "TCP".into(),
            },
            PodPort {
                name: Some("serve-81-udp".into()),
                port: 81,
                protocol: "UDP".into(),
            },
        ],
    };
    let addrs = PodAddresses {
        subnet: "s".into(),
        ips: vec![format!("{ip}/16").parse().expect("ip")],
        mac: Mac([0x0a, 0, 0, 0, 0, 1]),
        gateways: vec![],
    };
    (info, addrs)
}

/// x/y/z × a/b/c, like the upstream e2e suite; pod label `pod=<name>`.
pub(super) fn cluster() -> Vec<(PodInfo, PodAddresses)> {
    let mut out = Vec::new();
    for (i, ns) in ["x", "y", "z"].iter().enumerate() {
        for (j, p) in ["a", "b", "c"].iter().enumerate() {
            out.push(pod(
                ns,
                p,
                &format!("10.16.{}.{}", i + 1, j + 10),
                &[("pod", p)],
            ));
        }
    }
    out
}

pub(super) fn namespaces() -> BTreeMap<String, NamespaceInfo> {
    ["x", "y", "z"]
        .iter()
        .map(|n| {
            (
                n.to_string(),
                NamespaceInfo {
                    name: n.to_string(),
                    labels: BTreeMap::from([("ns".into(), n.to_string())]),
                },
            )
        })
        .collect()
}

pub(super) fn policy(v: serde_json::Value) -> NetworkPolicy {
    serde_json::from_value(v).expect("policy json")
}

fn run(
    pols: &[NetworkPolicy],
    pods: &[(PodInfo, PodAddresses)],
    nss: &BTreeMap<String, NamespaceInfo>,
) -> Translation {
    let input = PolicyInput {
        cluster_id: CID,
        policies: pols.iter().collect(),
        namespaces: nss,
        pods: pods.iter().map(|(p, a)| (p, a)).collect(),
        node_cidrs: vec!["100.64.0.0/16".parse::<IpNet>().expect("cidr")],
        platform_groups: Vec::new(),
    };
    translate(&input)
}

pub(super) fn pg<'t>(t: &'t Translation, key: &str) -> &'t DesiredPortGroup {
    let name = port_group_name(CID, key);
    t.nb.port_groups
        .get(&name)
        .unwrap_or_else(|| panic!("no port group for {key}: {t:#?}"))
}

fn rule<'t>(t: &'t Translation, key: &str, rule: &str) -> Option<&'t Acl> {
    pg(t, key).acls.get(rule)
}

#[test]
fn no_policy_writes_nothing() {
    let t = run(&[], &cluster(), &namespaces());
    assert!(t.nb.is_empty());
    assert!(t.problems.is_empty());
}

#[test]
fn deny_all_ingress_selects_pods_and_denies() {
    let p = policy(json!({"metadata": {"namespace": "x", "name": "deny-all"},
        "spec": {"podSelector": {}}}));
    let t = run(&[p], &cluster(), &namespaces());
    let g = pg(&t, "x/deny-all");
    assert_eq!(
        g.ports.iter().cloned().collect::<Vec<_>>(),
        ["x_a", "x_b", "x_c"]
    );
    assert_eq!(
        g.acls.keys().collect::<Vec<_>>(),
        ["node"],
        "no rules, only the node allow"
    );
    assert_eq!(g.acls["node"].action, "allow-related");
    assert!(g.acls["node"].match_.contains("ip4.src == 100.64.0.0/16"));
    let deny = pg(&t, &deny_key(Direction::Ingress));
    assert_eq!(deny.ports, g.ports);
    let d = &deny.acls["deny"];
    assert_eq!(
        (d.action.as_str(), d.direction.as_str(), d.priority),
        ("drop", "to-lport", 900)
    );
    assert_eq!(d.match_, format!("outport == @{} && ip", deny.row.name));
    // policyTypes defaulted to Ingress only
    assert!(
        !t.nb
            .port_groups
            .contains_key(&port_group_name(CID, &deny_key(Direction::Egress)))
    );
    assert_eq!(
        d.external_ids.get(crate::names::OWNER).map(String::as_str),
        Some(CID)
    );
}

#[test]
fn pod_selector_peer_gets_an_address_set() {
    let p = policy(json!({"metadata": {"namespace": "x", "name": "allow-b"},
        "spec": {"podSelector": {"matchLabels": {"pod": "a"}},
                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]}}));
    let t = run(&[p], &cluster(), &namespaces());
    let g = pg(&t, "x/allow-b");
    assert_eq!(g.ports.iter().cloned().collect::<Vec<_>>(), ["x_a"]);
    let a = rule(&t, "x/allow-b", "ingress[0]").expect("rule acl");
    assert_eq!(a.priority, PRIORITY_ALLOW);
    assert_eq!(a.action, "allow-related");
    let sets: Vec<&AddressSet> = t.nb.address_sets.values().collect();
    assert_eq!(sets.len(), 1);
    assert_eq!(
        sets[0].addresses.iter().cloned().collect::<Vec<_>>(),
        ["10.16.1.11"]
    );
    assert!(
        a.match_.contains(&format!("ip4.src == ${}", sets[0].name)),
        "{}",
        a.match_
    );
    assert!(
        a.match_
            .starts_with(&format!("outport == @{} && ip", g.row.name))
    );
}

#[test]
fn namespace_and_pod_selector_combined_and_by_name() {
    let p = policy(json!({"metadata": {"namespace": "x", "name": "p"},
        "spec": {"podSelector": {},
                 "ingress": [{"from": [
                    {"namespaceSelector": {"matchLabels": {"ns": "y"}}, "podSelector": {"matchLabels": {"pod": "a"}}},
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "z"}}}]}]}}));
    let t = run(&[p], &cluster(), &namespaces());
    let mut sets: Vec<Vec<String>> =
        t.nb.address_sets
            .values()
            .map(|s| s.addresses.iter().cloned().collect())
            .collect();
    sets.sort();
    assert_eq!(
        sets,
        vec![
            vec!["10.16.2.10".to_string()],
            vec![
                "10.16.3.10".into(),
                "10.16.3.11".into(),
                "10.16.3.12".into()
            ],
        ]
    );
    let m = &rule(&t, "x/p", "ingress[0]").expect("acl").match_;
    assert_eq!(m.matches("ip4.src == $").count(), 2, "{m}");
}

#[test]
fn identical_peers_share_one_address_set() {
    let mk = |name: &str| {
        policy(json!({"metadata": {"namespace": "x", "name": name},
            "spec": {"podSelector": {"matchLabels": {"pod": name}},
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "c"}}}]}]}}))
    };
    let t = run(&[mk("a"), mk("b")], &cluster(), &namespaces());
    assert_eq!(t.nb.address_sets.len(), 1);
    assert_eq!(
        t.nb.port_groups.len(),
        3,
        "two policies + the ingress deny group"
    );
}

#[test]
fn ip_block_except_and_bad_blocks_fail_closed() {
    let p = policy(json!({"metadata": {"namespace": "x", "name": "p"},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"],
                 "egress": [
                    {"to": [{"ipBlock": {"cidr": "10.16.0.0/16", "except": ["10.16.2.0/24", "192.168.0.0/24"]}}]},
                    {"to": [{"ipBlock": {"cidr": "not-a-cidr"}}]},
                    {"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["bogus"]}}]}]}}));
    let t = run(&[p], &cluster(), &namespaces());
    let a = rule(&t, "x/p", "egress[0]").expect("egress[0]");
    assert_eq!(a.direction, "from-lport");
    assert_eq!(
        a.options.get("apply-after-lb").map(String::as_str),
        Some("true")
    );
    assert!(
        a.match_
            .contains("ip4.dst == {10.16.0.0/23, 10.16.3.0/24, 10.16.4.0/22,")
            && !a.match_.contains("!="),
        "{}",
        a.match_
    );
    assert!(
        rule(&t, "x/p", "egress[1]").is_none(),
        "a bad cidr allows nothing"
    );
    assert!(
        rule(&t, "x/p", "egress[2]").is_none(),
        "a bad except allows nothing"
    );
    let msgs: Vec<&str> = t.problems.iter().map(|p| p.message.as_str()).collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("192.168.0.0/24 is outside cidr")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("\"not-a-cidr\" is not a CIDR")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter().any(|m| m.contains("\"bogus\" is not a CIDR")),
        "{msgs:?}"
    );
    // egress only: the selected pods are in the egress deny group, not ingress
    assert!(
        t.nb.port_groups
            .contains_key(&port_group_name(CID, &deny_key(Direction::Egress)))
    );
    assert!(
        !t.nb
            .port_groups
            .contains_key(&port_group_name(CID, &deny_key(Direction::Ingress)))
    );
}

#[test]
fn ports_numeric_ranges_protocols_and_named() {
    let p = policy(json!({"metadata": {"namespace": "x", "name": "p"},
        "spec": {"podSelector": {"matchLabels": {"pod": "a"}},
                 "ingress": [
                    {"ports": [{"port": 80}, {"protocol": "UDP", "port": 81, "endPort": 90}, {"protocol": "SCTP", "port": 80}]},
                    {"ports": [{"port": "serve-80-tcp"}]},
                    {"ports": [{"port": "nope"}]},
                    {"ports": [{"protocol": "UDP"}]}]}}));
    let t = run(&[p], &cluster(), &namespaces());
    let m0 = &rule(&t, "x/p", "ingress[0]").expect("0").match_;
    assert!(
        m0.contains("(tcp.dst == 80) || (udp.dst >= 81 && udp.dst <= 90) || (sctp.dst == 80)"),
        "{m0}"
    );
    let m1 = &rule(&t, "x/p", "ingress[1]").expect("1").match_;
    assert!(
        m1.contains("tcp.dst == 80 && (ip4.dst == {10.16.1.10})"),
        "{m1}"
    );
    assert!(
        rule(&t, "x/p", "ingress[2]").is_none(),
        "an unknown named port allows nothing"
    );
    assert!(
        t.problems
            .iter()
            .any(|p| p.message.contains("named port \"nope\""))
    );
    let m3 = &rule(&t, "x/p", "ingress[3]").expect("3").match_;
    assert!(m3.ends_with("&& ((udp))"), "{m3}");
}

#[test]
fn egress_default_policy_types_and_named_port_on_destination() {
    let p = policy(json!({"metadata": {"namespace": "x", "name": "p"},
        "spec": {"podSelector": {"matchLabels": {"pod": "a"}},
                 "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}],
                             "ports": [{"protocol": "UDP", "port": "serve-81-udp"}]}]}}));
    let t = run(&[p], &cluster(), &namespaces());
    // egress rules present and policyTypes omitted → Ingress and Egress
    for d in [Direction::Ingress, Direction::Egress] {
        assert!(pg(&t, &deny_key(d)).ports.contains("x_a"));
    }
    let m = &rule(&t, "x/p", "egress[0]").expect("egress").match_;
    assert!(m.contains("udp.dst == 81 && (ip4.dst == {"), "{m}");
    assert!(
        m.contains("10.16.2.10"),
        "every pod with the port name is a destination: {m}"
    );
}

#[test]
fn a_label_change_changes_only_the_affected_set() {
    let pols = [
        policy(json!({"metadata": {"namespace": "x", "name": "p1"},
            "spec": {"podSelector": {"matchLabels": {"pod": "a"}},
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]}})),
        policy(json!({"metadata": {"namespace": "y", "name": "p2"},
            "spec": {"podSelector": {"matchLabels": {"pod": "a"}},
                     "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "z"}}}]}]}})),
    ];
    let pods = cluster();
    let before = run(&pols, &pods, &namespaces());
    let mut pods2 = pods.clone();
    // x/c becomes pod=b: p1's peer set gains it; nothing else changes
    pods2[2].0.labels.insert("pod".into(), "b".into());
    let after = run(&pols, &pods2, &namespaces());
    let changed: Vec<&String> = before
        .nb
        .address_sets
        .iter()
        .filter(|(k, v)| after.nb.address_sets.get(*k) != Some(v))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(before.nb.port_groups, after.nb.port_groups);
    // namespace label change: z loses ns=z → p2's set empties; groups unchanged
    let mut nss = namespaces();
    nss.get_mut("z").expect("z").labels.clear();
    let after_ns = run(&pols, &pods, &nss);
    let changed: Vec<&AddressSet> = after_ns
        .nb
        .address_sets
        .values()
        .filter(|v| before.nb.address_sets.get(&v.name) != Some(*v))
        .collect();
    assert_eq!(changed.len(), 1);
    assert!(changed[0].addresses.is_empty());
    assert_eq!(before.nb.port_groups, after_ns.nb.port_groups);
}

#[test]
fn bad_selector_selects_nothing_and_is_reported() {
    let p = policy(json!({"metadata": {"namespace": "x", "name": "p"},
        "spec": {"podSelector": {"matchExpressions": [{"key": "pod", "operator": "Like", "values": ["a"]}]}}}));
    let t = run(&[p], &cluster(), &namespaces());
    assert!(pg(&t, "x/p").ports.is_empty());
    assert_eq!(t.problems.len(), 1, "{:?}", t.problems);
    assert!(
        t.problems[0]
            .to_string()
            .starts_with("NetworkPolicy x/p: podSelector")
    );
}

#[test]
fn rows_grow_linearly() {
    // 300 pods in 30 namespaces, one policy per namespace with a pod and a namespace peer
    let mut pods = Vec::new();
    let mut nss = BTreeMap::new();
    let mut pols = Vec::new();
    for n in 0..30 {
        let ns = format!("ns{n}");
        nss.insert(
            ns.clone(),
            NamespaceInfo {
                name: ns.clone(),
                labels: BTreeMap::from([("team".into(), format!("t{}", n % 3))]),
            },
        );
        for p in 0..10 {
            pods.push(pod(
                &ns,
                &format!("p{p}"),
                &format!("10.{n}.0.{}", p + 1),
                &[("app", &format!("a{}", p % 2))],
            ));
        }
        pols.push(policy(json!({"metadata": {"namespace": ns, "name": "pol"},
            "spec": {"podSelector": {"matchLabels": {"app": "a0"}},
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "a1"}}},
                                           {"namespaceSelector": {"matchLabels": {"team": "t0"}}}]}]}})));
    }
    let t = run(&pols, &pods, &nss);
    // per policy: 1 group + node acl + 1 rule acl + 1 own peer set; shared: 1 ns peer set, deny group + acl
    assert_eq!(t.nb.len(), 30 * 4 + 1 + 2, "{}", t.nb.len());
}

fn created(v: serde_json::Value, at: &str) -> NetworkPolicy {
    let mut p = policy(v);
    p.metadata.creation_timestamp = Some(serde_json::from_value(json!(at)).expect("timestamp"));
    p
}

/// Two policies whose port group names collide: the older keeps the name with its rules;
/// the newer is refused with a problem naming the holder, and its pods stay isolated
/// (fail closed). Which one is older decides, not their names.
#[test]
fn a_port_group_name_collision_refuses_the_newer_policy() {
    let allow_all = |ns: &str| {
        json!({"metadata": {"namespace": ns, "name": "p"},
            "spec": {"podSelector": {}, "ingress": [{}]}})
    };
    for (x_at, y_at, winner, loser) in [
        ("2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", "x/p", "y/p"),
        ("2026-03-01T00:00:00Z", "2026-02-01T00:00:00Z", "y/p", "x/p"),
    ] {
        collide("np_forced", &["x/p", "y/p"]);
        let t = run(
            &[created(allow_all("x"), x_at), created(allow_all("y"), y_at)],
            &cluster(),
            &namespaces(),
        );
        let g = &t.nb.port_groups["np_forced"];
        assert_eq!(object_of(&g.row.external_ids), Some(winner));
        let loser_ns = &loser[..1];
        assert!(
            g.ports.iter().all(|p| !p.starts_with(loser_ns)),
            "the group holds only {winner}'s pods: {:?}",
            g.ports
        );
        let msgs: Vec<String> = t.problems.iter().map(ToString::to_string).collect();
        assert!(
            msgs.iter()
                .any(|m| m.starts_with(&format!("NetworkPolicy {loser}:"))
                    && m.contains(&format!("already {winner}'s (a hash collision)"))),
            "{msgs:?}"
        );
        let deny = pg(&t, &deny_key(Direction::Ingress));
        for n in ["a", "b", "c"] {
            assert!(
                deny.ports.contains(&format!("{loser_ns}_{n}")),
                "{loser} isolates"
            );
        }
    }
}

/// Two different peers whose address set names collide: the first keeps the set and
/// its pods; the later peer matches nothing (its rule allows no one) and is reported.
#[test]
fn an_address_set_name_collision_refuses_the_later_peer() {
    let from = |ns: &str, pod: &str| {
        json!({"metadata": {"namespace": ns, "name": "p"},
            "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": pod}}}]}]}})
    };
    let victim = "ns=x pods={pod=a}";
    let attacker = "ns=y pods={pod=b}";
    collide("np_peer", &[victim, attacker]);
    let t = run(
        &[
            created(from("x", "a"), "2026-01-01T00:00:00Z"),
            created(from("y", "b"), "2026-02-01T00:00:00Z"),
        ],
        &cluster(),
        &namespaces(),
    );
    let set = &t.nb.address_sets["np_peer_ip4"];
    assert_eq!(object_of(&set.external_ids), Some(victim), "{set:?}");
    assert_eq!(set.addresses, BTreeSet::from(["10.16.1.10".to_string()]));
    assert!(
        rule(&t, "x/p", "ingress[0]").is_some(),
        "the victim's rule stands"
    );
    assert!(
        rule(&t, "y/p", "ingress[0]").is_none(),
        "the colliding peer allows nothing"
    );
    assert!(
        t.problems.iter().any(|p| p.policy == "y/p"
            && p.message
                .contains(&format!("already peer {victim:?}'s (a hash collision)"))),
        "{:?}",
        t.problems
    );
}

/// The policy `ingress` of a namespace named `deny` is a policy like any other: its own
/// group and rules, and the cluster's deny group apart.
#[test]
fn a_namespace_named_deny_shares_nothing_with_the_deny_groups() {
    let mut pods = cluster();
    pods.push(pod("deny", "a", "10.16.9.10", &[("pod", "a")]));
    let p = policy(json!({"metadata": {"namespace": "deny", "name": "ingress"},
        "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}}));
    let q = policy(json!({"metadata": {"namespace": "x", "name": "q"},
        "spec": {"podSelector": {}}}));
    let t = run(&[p, q], &pods, &namespaces());
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let own = pg(&t, "deny/ingress");
    assert_eq!(object_of(&own.row.external_ids), Some("deny/ingress"));
    assert!(own.acls.contains_key("ingress[0]"));
    let deny = pg(&t, &deny_key(Direction::Ingress));
    assert_ne!(own.row.name, deny.row.name);
    assert_eq!(
        deny.ports.iter().cloned().collect::<Vec<_>>(),
        ["deny_a", "x_a", "x_b", "x_c"]
    );
}
