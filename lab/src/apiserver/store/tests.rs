use std::collections::BTreeMap;

use control::source::Writer;
use serde_json::json;

use super::*;

fn nodes() -> Vec<LabNode> {
    (1..=2)
        .map(|i| LabNode {
            name: format!("lab-node{i}"),
            index: i,
            address: format!("172.16.0.{i}").parse().expect("ip"),
        })
        .collect()
}

fn store() -> LabStore {
    let (mem, _rx) = MemoryStore::new();
    let s = LabStore::new(mem, nodes());
    s.restore(Snapshot::default());
    s
}

fn obj(v: Value) -> LabObject {
    LabObject::from_value(v).expect("valid object")
}

fn pod(ns: &str, name: &str, node: Option<&str>) -> LabObject {
    let mut spec = json!({"containers": [{"name": "c"}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    obj(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns}, "spec": spec}))
}

fn subnet(name: &str, cidr: &str) -> LabObject {
    obj(
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": name}, "spec": {"cidr": cidr}}),
    )
}

fn node_of(s: &LabStore, key: &str) -> String {
    s.memory().pod(key).and_then(|p| p.node).expect("placed")
}

fn actions(c: &[Change]) -> Vec<String> {
    c.iter()
        .map(|c| format!("{} {}", c.object, c.action))
        .collect()
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

#[test]
fn pods_are_spread_round_robin_and_shorthand_resolves() {
    let s = store();
    let c = s
        .apply(vec![
            pod("d", "a", None),
            pod("d", "b", Some("node2")),
            pod("d", "c", None),
            pod("d", "e", None),
        ])
        .expect("apply");
    assert_eq!(
        actions(&c),
        [
            "pod/d/a created",
            "pod/d/b created",
            "pod/d/c created",
            "pod/d/e created"
        ]
    );
    assert_eq!(node_of(&s, "d/a"), "lab-node1");
    assert_eq!(node_of(&s, "d/b"), "lab-node2");
    assert_eq!(node_of(&s, "d/c"), "lab-node2");
    assert_eq!(node_of(&s, "d/e"), "lab-node1");
    // a re-applied pod without nodeName stays where it is
    let c = s.apply(vec![pod("d", "c", None)]).expect("re-apply");
    assert_eq!(actions(&c), ["pod/d/c unchanged"]);
    assert_eq!(node_of(&s, "d/c"), "lab-node2");
}

#[test]
fn bad_node_or_moved_pod_applies_nothing() {
    let s = store();
    s.apply(vec![pod("d", "a", Some("lab-node1"))])
        .expect("apply");
    let e = s
        .apply(vec![pod("d", "x", None), pod("d", "y", Some("node7"))])
        .expect_err("unknown node");
    assert_eq!(
        e.to_string(),
        "pod d/y: node \"node7\" is not a lab node (nodes: lab-node1, lab-node2; \
         node1..node2 also work)"
    );
    assert!(s.memory().pod("d/x").is_none(), "nothing applied");
    let e = s
        .apply(vec![pod("d", "a", Some("node2"))])
        .expect_err("moved");
    assert_eq!(
        e.to_string(),
        "pod d/a: spec.nodeName cannot change (the pod runs on lab-node1, not lab-node2): \
         delete the pod first"
    );
}

#[test]
fn subnet_generation_and_status_survive_updates() {
    let s = store();
    s.apply(vec![subnet("blue", "10.17.0.0/24")])
        .expect("create");
    let first = s.memory().subnet("blue").expect("stored");
    assert_eq!(first.metadata.generation, Some(1));
    assert!(first.metadata.creation_timestamp.is_some() && first.metadata.uid.is_some());
    let status = control::crd::SubnetStatus {
        reason: "x".into(),
        ..Default::default()
    };
    block_on(s.memory().subnet_status("blue", &status)).expect("status");
    let c = s.apply(vec![subnet("blue", "10.17.0.0/24")]).expect("same");
    assert_eq!(actions(&c), ["subnet/blue unchanged"]);
    let c = s
        .apply(vec![subnet("blue", "10.17.0.0/23")])
        .expect("changed");
    assert_eq!(actions(&c), ["subnet/blue configured"]);
    let now = s.memory().subnet("blue").expect("stored");
    assert_eq!(now.metadata.generation, Some(2));
    assert_eq!(now.metadata.uid, first.metadata.uid);
    assert_eq!(now.status.as_ref().map(|s| s.reason.as_str()), Some("x"));
}

#[test]
fn controller_annotations_are_kept_across_apply_and_snapshot() {
    let s = store();
    s.apply(vec![pod("d", "a", None)]).expect("apply");
    let uid = s.memory().pod("d/a").expect("pod").uid;
    assert!(!uid.is_empty());
    let written = BTreeMap::from([("k8s.ovn.org/pod-networks".to_string(), "{}".to_string())]);
    block_on(s.memory().annotate_pod("d", "a", &written)).expect("annotate");
    let mut changed = pod("d", "a", None).to_value();
    changed["metadata"]["annotations"] = json!({"rev": "2"});
    let c = s.apply(vec![obj(changed)]).expect("re-apply");
    assert_eq!(actions(&c), ["pod/d/a configured"]);
    let live = s.memory().pod("d/a").expect("pod");
    assert_eq!(live.uid, uid);
    assert_eq!(live.annotations.len(), 2, "{:?}", live.annotations);

    let node_ann = BTreeMap::from([("network.zstack.io/mgmt-port".to_string(), "m".to_string())]);
    block_on(s.memory().annotate_node("lab-node1", &node_ann)).expect("node");
    s.apply(vec![
        subnet("blue", "10.17.0.0/24"),
        obj(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "d"}})),
    ])
    .expect("more");
    let snap = s.snapshot();
    let text = serde_json::to_string(&snap).expect("encode");
    let back: Snapshot = serde_json::from_str(&text).expect("decode");
    let (mem, _rx) = MemoryStore::new();
    let t = LabStore::new(mem, nodes());
    t.restore(back);
    for kind in [
        ResourceKind::Pod,
        ResourceKind::Subnet,
        ResourceKind::Namespace,
        ResourceKind::Node,
    ] {
        assert_eq!(t.get(kind), s.get(kind), "{kind:?}");
    }
    assert_eq!(t.memory().pod("d/a").expect("pod").annotations.len(), 2);
}

#[test]
fn nodes_are_registered_on_restore() {
    let (mem, _rx) = MemoryStore::new();
    let s = LabStore::new(mem, nodes());
    assert!(s.get(ResourceKind::Node).is_empty());
    s.restore(Snapshot::default());
    let nodes = s.get(ResourceKind::Node);
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[1]["metadata"]["name"], "lab-node2");
    assert_eq!(nodes[1]["status"]["addresses"][0]["address"], "172.16.0.2");
}

#[test]
fn namespace_delete_takes_its_pods() {
    let s = store();
    s.apply(vec![
        obj(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "d"}})),
        pod("d", "a", None),
        pod("e", "b", None),
    ])
    .expect("apply");
    let refs = [
        ObjectRef {
            kind: ResourceKind::Namespace,
            namespace: None,
            name: "d".into(),
        },
        ObjectRef {
            kind: ResourceKind::Subnet,
            namespace: None,
            name: "nope".into(),
        },
    ];
    let c = s.delete(&refs);
    assert_eq!(
        actions(&c),
        [
            "pod/d/a deleted",
            "namespace/d deleted",
            "subnet/nope not found"
        ]
    );
    assert!(s.memory().pod("d/a").is_none() && s.memory().pod("e/b").is_some());
}
