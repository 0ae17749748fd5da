//! NetworkPolicy on top of the platform's security groups ([`super::platform_sg`]).

use std::collections::BTreeSet;

use ovsdb::Uuid;
use ovsdb::nb::Acl;
use serde_json::json;

use super::platform_sg::{MEMBERS_KEY, PRIORITY_BASE, PRIORITY_NODE, PlatformGroup, deny_key};
use super::tests::{CID, cluster, namespaces, pg, policy};
use super::*;

fn platform_acl(dir: &str, priority: i64, m: &str, action: &str) -> Acl {
    Acl {
        uuid: Uuid::new_v4(),
        direction: dir.into(),
        priority,
        match_: m.into(),
        action: action.into(),
        ..Default::default()
    }
}

/// `sg_web`: drop at 1000, TCP 22 from 10.98/16 at 1001; x/a and x/b are in it.
fn sg_web() -> (PlatformGroup, Acl, Acl) {
    let drop = platform_acl("to-lport", 1000, "outport == @sg_web && ip4", "drop");
    let ssh = platform_acl(
        "to-lport",
        1001,
        "outport == @sg_web && ip4.src == 10.98.0.0/16 && tcp.dst == 22",
        "allow-related",
    );
    let g = PlatformGroup {
        name: "sg_web".into(),
        members: BTreeSet::from(["x_a".to_string(), "x_b".to_string()]),
        acls: vec![drop.clone(), ssh.clone()],
        unreadable: false,
    };
    (g, drop, ssh)
}

fn run_with(pols: &[NetworkPolicy], groups: Vec<PlatformGroup>) -> Translation {
    let pods = cluster();
    let nss = namespaces();
    translate(&PolicyInput {
        cluster_id: CID,
        policies: pols.iter().collect(),
        namespaces: &nss,
        pods: pods.iter().map(|(p, a)| (p, a)).collect(),
        node_cidrs: vec!["100.64.0.0/16".parse().expect("cidr")],
        platform_groups: groups,
    })
}

/// x/a may be reached on TCP 80 only.
fn web_80() -> NetworkPolicy {
    policy(json!({"metadata": {"namespace": "x", "name": "web"},
        "spec": {"podSelector": {"matchLabels": {"pod": "a"}},
                 "ingress": [{"ports": [{"port": 80}]}]}}))
}

#[test]
fn without_platform_groups_nothing_changes() {
    let t = run_with(&[web_80()], Vec::new());
    let keys = [MEMBERS_KEY.to_string(), deny_key(Direction::Ingress)];
    for k in keys {
        assert!(
            !t.nb.port_groups.contains_key(&port_group_name(CID, &k)),
            "{k}: {t:#?}"
        );
    }
}

#[test]
fn the_nodes_reach_pods_in_groups_even_without_policies() {
    let (g, ..) = sg_web();
    let t = run_with(&[], vec![g]);
    let m = pg(&t, MEMBERS_KEY);
    assert_eq!(
        m.ports,
        BTreeSet::from(["x_a".to_string(), "x_b".to_string()])
    );
    let node = &m.acls["node"];
    assert_eq!(node.priority, PRIORITY_NODE);
    assert_eq!(node.action, "allow-related");
    assert!(node.match_.contains("ip4.src == 100.64.0.0/16"), "{node:?}");
    // nothing isolated: no mirror group
    assert_eq!(t.nb.port_groups.len(), 1, "{t:#?}");
}

#[test]
fn a_platform_allow_is_mirrored_only_where_a_policy_rule_agrees() {
    let (g, drop, ssh) = sg_web();
    let t = run_with(&[web_80()], vec![g]);
    let d = pg(&t, &deny_key(Direction::Ingress));
    // only x/a is isolated (x/b is in the group, but no policy selects it)
    assert_eq!(d.ports, BTreeSet::from(["x_a".to_string()]));
    assert_eq!(d.acls["deny"].priority, PRIORITY_BASE);
    assert_eq!(d.acls["deny"].action, "drop");
    let rule = "x/web/ingress[0]";
    // the policy's rule alone, just above the catch-all drop
    let alone = &d.acls[&format!("rule/{rule}")];
    assert_eq!(alone.priority, PRIORITY_BASE + 1);
    assert!(alone.match_.contains("tcp.dst == 80"), "{alone:?}");
    // the platform's order is kept above: its drop (1000) under its allow (1001)
    let drop_m = &d.acls[&format!("sg/{}", drop.uuid)];
    let ssh_m = &d.acls[&format!("sg/{}/{rule}", ssh.uuid)];
    assert!(PRIORITY_BASE + 1 < drop_m.priority && drop_m.priority < ssh_m.priority);
    assert_eq!(drop_m.action, "drop");
    assert!(
        drop_m
            .match_
            .starts_with("(outport == @sg_web && ip4) && outport == @"),
        "{drop_m:?}"
    );
    // the allow of 22 narrowed by the policy's 80: matches nothing, as it should
    assert_eq!(ssh_m.action, "allow-related");
    assert!(
        ssh_m.match_.contains("tcp.dst == 22") && ssh_m.match_.contains("tcp.dst == 80"),
        "{ssh_m:?}"
    );
    assert_eq!(
        ssh_m
            .external_ids
            .get(api::external_ids::nb::PLATFORM_GROUP),
        Some(&"sg_web".to_string())
    );
    assert_eq!(
        ssh_m.external_ids.get(api::external_ids::nb::PLATFORM_ACL),
        Some(&ssh.uuid.to_string())
    );
    // the policy's node rule is mirrored too (the platform decides on it like any source)
    assert!(
        d.acls
            .keys()
            .any(|k| k == &format!("sg/{}/x/web/node", ssh.uuid)),
        "{:?}",
        d.acls.keys()
    );
    // the policy's own group and default deny are as without platform groups
    let plain = run_with(&[web_80()], Vec::new());
    assert_eq!(pg(&t, "x/web"), pg(&plain, "x/web"));
    assert_eq!(
        pg(&t, &super::deny_key(Direction::Ingress)),
        pg(&plain, &super::deny_key(Direction::Ingress))
    );
}

#[test]
fn only_the_policies_of_the_pods_in_groups_are_mirrored() {
    let (g, ..) = sg_web();
    // y/a is in no platform group: its policy's rules are not mirrored
    let other = policy(json!({"metadata": {"namespace": "y", "name": "db"},
        "spec": {"podSelector": {"matchLabels": {"pod": "a"}},
                 "ingress": [{"ports": [{"port": 5432}]}]}}));
    let t = run_with(&[web_80(), other], vec![g]);
    let d = pg(&t, &deny_key(Direction::Ingress));
    assert!(
        d.acls.keys().all(|k| !k.contains("y/db")),
        "{:?}",
        d.acls.keys()
    );
    assert!(
        d.acls.keys().any(|k| k.contains("x/web")),
        "{:?}",
        d.acls.keys()
    );
}

#[test]
fn a_stage_the_platform_has_no_rule_in_gets_no_mirror() {
    let (mut g, ..) = sg_web();
    // the platform's egress rules run before the load balancer, ours after it
    g.acls.push(platform_acl(
        "from-lport",
        1000,
        "inport == @sg_web && ip4",
        "drop",
    ));
    let egress = policy(json!({"metadata": {"namespace": "x", "name": "out"},
        "spec": {"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"],
                 "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}}));
    let t = run_with(&[egress], vec![g.clone()]);
    let d = pg(&t, &deny_key(Direction::Egress));
    assert!(
        d.acls.keys().all(|k| !k.starts_with("sg/")),
        "{:?}",
        d.acls.keys()
    );
    assert!(d.acls["deny"].options.contains_key("apply-after-lb"));
    // one after the load balancer is mirrored
    let mut after = platform_acl("from-lport", 1000, "inport == @sg_web && ip4", "drop");
    after.options.insert("apply-after-lb".into(), "true".into());
    g.acls = vec![after.clone()];
    let egress = policy(json!({"metadata": {"namespace": "x", "name": "out"},
        "spec": {"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Egress"],
                 "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}}));
    let t = run_with(&[egress], vec![g]);
    let d = pg(&t, &deny_key(Direction::Egress));
    assert!(d.acls.contains_key(&format!("sg/{}", after.uuid)), "{d:#?}");
}

#[test]
fn unreadable_groups_fail_closed() {
    let (mut g, ..) = sg_web();
    g.acls.clear();
    g.unreadable = true;
    let t = run_with(&[web_80()], vec![g]);
    let d = pg(&t, &deny_key(Direction::Ingress));
    assert_eq!(d.acls.keys().collect::<Vec<_>>(), ["deny"], "{d:#?}");
    assert!(
        t.problems
            .iter()
            .any(|p| p.message.contains("could not be read")),
        "{:?}",
        t.problems
    );
}
