//! NetworkPolicy rows on a real OVN NB + northd, written by the whole controller from the
//! in-process store: Port_Groups, Address_Sets and ACLs checked with `ovn-nbctl`, northd's
//! logical flows checked with `ovn-sbctl` (it accepted our matches), incremental writes on
//! label changes (counted), foreign rows untouched, deletion, restart with zero writes, and
//! bad objects reported as events without disturbing the other policies.

use std::collections::BTreeMap;

use api::subnet::{Subnet, SubnetSpec};
use control::controller::{Controller, Settled, SyncReport};
use control::model::{NamespaceInfo, NodeInfo, PodInfo};
use control::netpol::{self, Direction};
use control::reconcile::Reconciler;
use control::source::Event;
use control::source::memory::MemoryStore;
use control::translate::ClusterConfig;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use lab::central::{Central, CentralConfig};
use ovsdb::{Client, ClientConfig};
use serde_json::json;
use tests::nbctl::{column, nbctl};
use tokio::sync::mpsc::UnboundedReceiver;

const OWNER: &str = "zstack-ovn";

fn pod(ns: &str, name: &str, labels: &[(&str, &str)]) -> PodInfo {
    PodInfo {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{ns}-{name}"),
        node: Some("node1".into()),
        host_network: false,
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        annotations: BTreeMap::new(),
        completed: false,
        ports: Vec::new(),
    }
}

fn namespace(name: &str, labels: &[(&str, &str)]) -> NamespaceInfo {
    NamespaceInfo {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn policy(v: serde_json::Value) -> NetworkPolicy {
    serde_json::from_value(v).expect("policy")
}

async fn pass(ctl: &mut Controller<MemoryStore>, rx: &mut UnboundedReceiver<Event>) -> SyncReport {
    while let Ok(ev) = rx.try_recv() {
        ctl.apply(ev);
    }
    ctl.sync().await.expect("sync")
}

/// Passes until one writes nothing; the NB writes of all of them summed.
async fn settle(ctl: &mut Controller<MemoryStore>, rx: &mut UnboundedReceiver<Event>) -> Settled {
    ctl.settle(rx, 6).await.expect("settle")
}

async fn controller(nb: &str, store: &MemoryStore) -> Controller<MemoryStore> {
    let client = Client::connect(ClientConfig::parse(nb).expect("remote"))
        .await
        .expect("connect");
    let rec = Reconciler::start(client, OWNER).await.expect("reconciler");
    Controller::new(ClusterConfig::default(), rec, store.clone())
}

fn pg(ns: &str, name: &str) -> String {
    netpol::policy_port_group(OWNER, ns, name)
}

/// Names of the LSPs in port group `name` (through their UUIDs).
fn pg_ports(nb: &str, name: &str) -> Vec<String> {
    let uuids = nbctl(
        nb,
        &[
            "--bare",
            "--columns=ports",
            "find",
            "Port_Group",
            &format!("name={name}"),
        ],
    );
    let mut out: Vec<String> = uuids
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
    out.sort();
    out
}

fn our_rows(nb: &str, table: &str) -> usize {
    nbctl(
        nb,
        &[
            "--bare",
            "--columns=_uuid",
            "find",
            table,
            &format!("external_ids:zstack.io/owner={OWNER}"),
        ],
    )
    .split_whitespace()
    .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn netpol_rows_on_real_nb() {
    if !tests::require_real("netpol_rows_on_real_nb", tests::OVSDB_BINS) {
        return;
    }
    let s = tests::scratch("npr");
    let central = Central::start(CentralConfig {
        dir: s.dir.path().join("central"),
        raft: false,
        northd: true,
        tcp: false,
    })
    .expect("central");
    let nb = central.nb_remote();
    let sb = central.sb_remote();
    // foreign rows the controller must never touch
    nbctl(&nb, &["pg-add", "foreign_pg"]);
    nbctl(
        &nb,
        &["acl-add", "foreign_pg", "to-lport", "1001", "ip4", "allow"],
    );
    nbctl(
        &nb,
        &[
            "create",
            "Address_Set",
            "name=foreign_as",
            "addresses=10.9.9.9",
        ],
    );
    let foreign_before = nbctl(
        &nb,
        &["--bare", "--columns=_uuid,match,priority", "list", "ACL"],
    );

    let (store, mut rx) = MemoryStore::new();
    let mut sn = SubnetSpec {
        cidr: "10.20.0.0/16".into(),
        ..Default::default()
    };
    sn.default = true;
    store.apply_subnet(Subnet::new("pods", sn));
    store.apply_node(NodeInfo {
        name: "node1".into(),
        addresses: vec![],
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    });
    for ns in ["x", "y", "z"] {
        store.apply_namespace(namespace(ns, &[("ns", ns)]));
        for p in ["a", "b", "c"] {
            store.apply_pod(pod(ns, p, &[("pod", p)]));
        }
    }
    store.apply_network_policy(policy(json!({
        "metadata": {"namespace": "x", "name": "allow-from-y"},
        "spec": {"podSelector": {"matchLabels": {"pod": "a"}},
                 "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}],
                              "ports": [{"port": 80}, {"protocol": "UDP", "port": 81}]}]}})));
    store.apply_network_policy(policy(json!({
        "metadata": {"namespace": "y", "name": "deny-egress"},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"]}})));
    store.mark_synced();
    let mut ctl = controller(&nb, &store).await;
    let first = settle(&mut ctl, &mut rx).await;
    assert!(first.inserts > 0, "{first:?}");

    // Port groups: the policies' and one default deny per direction, all ours.
    assert_eq!(pg_ports(&nb, &pg("x", "allow-from-y")), ["x_a"]);
    assert_eq!(
        pg_ports(&nb, &pg("y", "deny-egress")),
        ["y_a", "y_b", "y_c"]
    );
    let deny_in = netpol::port_group_name(OWNER, &netpol::deny_key(Direction::Ingress));
    let deny_eg = netpol::port_group_name(OWNER, &netpol::deny_key(Direction::Egress));
    assert_eq!(pg_ports(&nb, &deny_in), ["x_a"]);
    assert_eq!(pg_ports(&nb, &deny_eg), ["y_a", "y_b", "y_c"]);
    assert_eq!(our_rows(&nb, "Port_Group"), 4);
    // ACLs: node allow ×2, one rule, deny ×2
    assert_eq!(our_rows(&nb, "ACL"), 5);
    let acls = nbctl(&nb, &["acl-list", &pg("x", "allow-from-y")]);
    assert!(acls.contains("to-lport  1001"), "{acls}");
    assert!(acls.contains("allow-related"), "{acls}");
    assert!(
        acls.contains("tcp.dst == 80") && acls.contains("udp.dst == 81"),
        "{acls}"
    );
    let deny = nbctl(&nb, &["acl-list", &deny_eg]);
    assert!(
        deny.contains("from-lport   900") && deny.contains("drop"),
        "{deny}"
    );
    let opts = column(&nb, "ACL", "options");
    assert!(
        opts.iter().any(|o| o.contains("apply-after-lb=true")),
        "{opts:?}"
    );
    // The peer set holds y's pod addresses.
    let sets = nbctl(
        &nb,
        &[
            "--bare",
            "--columns=name,addresses",
            "find",
            "Address_Set",
            &format!("external_ids:zstack.io/owner={OWNER}"),
        ],
    );
    let y_ips: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|p| {
            let p = store.pod(&format!("y/{p}")).expect("pod");
            let net = api::pod_networks::decode_pod_networks(
                &p.annotations[api::pod_networks::POD_NETWORKS],
            )
            .expect("net");
            net.ip_addresses[0]
                .split('/')
                .next()
                .expect("ip")
                .to_string()
        })
        .collect();
    for ip in &y_ips {
        assert!(sets.contains(ip.as_str()), "{ip} in {sets}");
    }
    // northd accepted the matches: the rule ACL is a logical flow (ACL priority + 1000).
    let flows = lab::ctl::sbctl(&sb, &["lflow-list"]).expect("lflow-list");
    let rule_flows: Vec<&str> = flows
        .lines()
        .filter(|l| {
            l.contains("ls_out_acl") && l.contains("priority=2001") && l.contains("tcp.dst == 80")
        })
        .collect();
    assert!(
        !rule_flows.is_empty(),
        "no rule flow in:\n{}",
        flows
            .lines()
            .filter(|l| l.contains("acl"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // A namespace label change: z joins ns=y → only the peer set is written.
    store.apply_namespace(namespace("z", &[("ns", "y")]));
    let r = settle(&mut ctl, &mut rx).await;
    assert_eq!((r.inserts, r.updates, r.deletes), (0, 1, 0), "{r:?}");
    // A pod label change: x/c becomes pod=a → only the policy's group and the deny group.
    store.apply_pod(pod("x", "c", &[("pod", "a")]));
    let r = settle(&mut ctl, &mut rx).await;
    assert_eq!((r.inserts, r.updates, r.deletes), (0, 2, 0), "{r:?}");
    assert_eq!(pg_ports(&nb, &pg("x", "allow-from-y")), ["x_a", "x_c"]);
    assert_eq!(pg_ports(&nb, &deny_in), ["x_a", "x_c"]);
    // A label change nobody selects on: zero writes.
    store.apply_pod(pod("z", "b", &[("pod", "b"), ("unrelated", "1")]));
    let r = settle(&mut ctl, &mut rx).await;
    assert_eq!(r.transactions, 0, "{r:?}");

    // A restarted controller with nothing changed writes nothing.
    drop(ctl);
    let (store2, mut rx2) = MemoryStore::new();
    for ev_pod in store.pods() {
        store2.apply_pod(ev_pod);
    }
    let mut sn = SubnetSpec {
        cidr: "10.20.0.0/16".into(),
        ..Default::default()
    };
    sn.default = true;
    store2.apply_subnet(Subnet::new("pods", sn));
    store2.apply_node(NodeInfo {
        name: "node1".into(),
        addresses: vec![],
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    });
    store2.apply_namespace(namespace("x", &[("ns", "x")]));
    store2.apply_namespace(namespace("y", &[("ns", "y")]));
    store2.apply_namespace(namespace("z", &[("ns", "y")]));
    store2.apply_network_policy(policy(json!({
        "metadata": {"namespace": "x", "name": "allow-from-y"},
        "spec": {"podSelector": {"matchLabels": {"pod": "a"}},
                 "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}],
                              "ports": [{"port": 80}, {"protocol": "UDP", "port": 81}]}]}})));
    store2.apply_network_policy(policy(json!({
        "metadata": {"namespace": "y", "name": "deny-egress"},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"]}})));
    store2.mark_synced();
    let mut ctl = controller(&nb, &store2).await;
    let r = pass(&mut ctl, &mut rx2).await;
    assert_eq!(r.nb.transactions, 0, "restart with nothing changed: {r:?}");
    let (store, mut rx) = (store2, rx2);

    // Bad objects: reported as events, the rest keeps working.
    store.apply_network_policy(policy(json!({
        "metadata": {"namespace": "z", "name": "bad"},
        "spec": {"podSelector": {"matchLabels": {"pod": "c"}},
                 "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.300/8"}}]},
                             {"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}]},
                             {"ports": [{"port": "no-such-port"}]}]}})));
    let r = settle(&mut ctl, &mut rx).await;
    assert!(r.inserts > 0, "{r:?}");
    let events = store.policy_events();
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| e.contains("\"10.0.0.300/8\" is not a CIDR")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains("192.168.0.0/16 is outside cidr")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains("named port \"no-such-port\"")),
        "{events:?}"
    );
    let bad = nbctl(&nb, &["acl-list", &pg("z", "bad")]);
    assert!(
        bad.contains("ip4.src == 10.0.0.0/8"),
        "the valid block is enforced: {bad}"
    );
    assert!(!bad.contains("no-such-port"), "{bad}");
    assert_eq!(
        pg_ports(&nb, &pg("z", "bad")),
        ["z_c"],
        "selected pods stay default-deny"
    );
    assert_eq!(pg_ports(&nb, &pg("x", "allow-from-y")), ["x_a", "x_c"]);
    // the same problems are not reported twice
    pass(&mut ctl, &mut rx).await;
    assert_eq!(store.policy_events().len(), 3);

    // Deleting every policy removes every ACL of ours; the groups and sets stay, marked
    // unused, for a grace period (a namesake coming back is updated in place; the
    // deletion after the grace is checked in control's unit tests); foreign rows are as
    // they were.
    let (groups, sets) = (our_rows(&nb, "Port_Group"), our_rows(&nb, "Address_Set"));
    for key in ["x/allow-from-y", "y/deny-egress", "z/bad"] {
        store.delete_network_policy(key);
    }
    let r = settle(&mut ctl, &mut rx).await;
    assert!(r.deletes > 0, "{r:?}");
    assert_eq!(our_rows(&nb, "ACL"), 0);
    for (t, n) in [("Port_Group", groups), ("Address_Set", sets)] {
        assert_eq!(our_rows(&nb, t), n, "{t}");
        let unmarked = nbctl(
            &nb,
            &[
                "--bare",
                "--columns=name",
                "find",
                t,
                &format!("external_ids:zstack.io/owner={OWNER}"),
                "external_ids:zstack.io/unused-since=[]",
            ],
        );
        assert_eq!(unmarked.trim(), "", "{t} rows not marked unused");
    }
    // a second pass writes nothing (marked rows are kept during the grace period)
    let r = pass(&mut ctl, &mut rx).await;
    assert_eq!(r.nb.transactions, 0, "{r:?}");
    assert_eq!(
        nbctl(
            &nb,
            &["--bare", "--columns=_uuid,match,priority", "list", "ACL"]
        ),
        foreign_before
    );
    assert!(nbctl(&nb, &["list", "Address_Set", "foreign_as"]).contains("10.9.9.9"));
}
