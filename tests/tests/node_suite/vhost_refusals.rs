//! vhost-user requests the node agent refuses, through the real shim and agent on a
//! 2-node lab without DPDK (kernel nodes): each refusal names what is wrong, with the CNI
//! code a runtime acts on, and leaves no OVS port, socket directory or record behind.
//!
//! - a NetworkAttachmentDefinition config whose socket path cannot fit `sun_path`;
//! - bad configs (queues 0, an unknown field, an unknown interface type, a socket directory
//!   mode that lets every user write) → 7;
//! - host paths a NAD may not name (a `socketDir` outside the agent's socket root, another
//!   `kubeletDir`) → 101;
//! - a pod annotation naming a host path → 7;
//! - a valid request on a node that is not on a DPDK datapath → 101.

use serde_json::{Value, json};
use tests::agent::{AgentLab, ovs_ports, shim_with};

fn refusal(v: &Value) -> (u64, String) {
    (
        v["code"].as_u64().unwrap_or(0),
        v["msg"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn vhost_user_refusals_are_clear_and_leave_nothing() {
    const T: &str = "vhost_refusals::vhost_user_refusals_are_clear_and_leave_nothing";
    if !tests::require_real(T, tests::LAB_BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("vhr");
    let mut lab = AgentLab::up(&s, "10.67.0.0/16", "10.67.0.1");
    tests::record_real_run(T);
    lab.apply_pod("va", 0);
    lab.apply_pod_with(
        "vb",
        0,
        json!({"network.zstack.io/vhost-user": "{\"socketDir\": \"/etc\"}"}),
    );
    let (na, nb) = (lab.add_netns("va"), lab.add_netns("vb"));
    let node = lab.nodes[0].clone();
    let vhost = |block: Value| json!({"interfaceType": "vhost-user", "vhostUser": block});
    // a path too long below the agent's socket root (this lab's agents use the default)
    let long_root = format!("{}/{}", "/var/run/zstack-ovn/vhost", "r".repeat(90));
    let cases: Vec<(&str, Value, u64, &str)> = vec![
        (
            "socket path too long",
            vhost(json!({"socketDir": long_root})),
            101,
            "bytes, over the 107-byte unix socket limit",
        ),
        (
            "queues 0",
            vhost(json!({"queues": 0})),
            7,
            "queues 0 is out of range 1..=64",
        ),
        (
            "unknown field",
            vhost(json!({"queue": 2})),
            7,
            "unknown field `queue`",
        ),
        (
            "bad mode",
            vhost(json!({"mode": "0644"})),
            7,
            "must give the owner rwx",
        ),
        (
            "a socket directory every user may write",
            vhost(json!({"mode": "0777"})),
            7,
            "lets every user of the node write into the socket directory",
        ),
        (
            "a socket directory outside the agent's root",
            vhost(json!({"socketDir": "/etc"})),
            101,
            "is outside the agent's socket root",
        ),
        (
            "another kubelet directory",
            vhost(json!({"kubeletDir": "/etc/kubernetes", "socketVolume": "vhost"})),
            101,
            "is not kubelet's directory the agent serves",
        ),
        (
            "unknown interface type",
            json!({"interfaceType": "sriov"}),
            7,
            "interfaceType \"sriov\" is not supported",
        ),
        (
            "not a DPDK node",
            vhost(json!({"queues": 2})),
            101,
            "this node is not on a DPDK datapath",
        ),
    ];
    for (i, (what, extra, code, want)) in cases.iter().enumerate() {
        let cid = format!("{:064x}", 0x7000 + i);
        let (ok, v) = shim_with("ADD", &node, &cid, &na, "va", 20.0, extra);
        assert!(!ok, "{what}: accepted: {v}");
        let (c, msg) = refusal(&v);
        assert_eq!(c, *code, "{what}: {v}");
        assert!(msg.contains(want), "{what}: {msg}");
        assert!(msg.contains("default/va"), "{what}: names the pod: {msg}");
        eprintln!("{what}: {c} {msg}");
        let (ok, v) = shim_with("DEL", &node, &cid, &na, "va", 20.0, extra);
        assert!(ok, "{what}: DEL after a refused ADD: {v}");
    }
    // a pod annotation may not name host paths
    let (ok, v) = shim_with(
        "ADD",
        &node,
        &format!("{:064x}", 0x7100),
        &nb,
        "vb",
        20.0,
        &json!({}),
    );
    assert!(!ok, "annotation with socketDir accepted: {v}");
    let (c, msg) = refusal(&v);
    assert_eq!(c, 7, "{v}");
    assert!(
        msg.contains(
            "socketDir names a host path and may only be set in the NetworkAttachmentDefinition"
        ),
        "{msg}"
    );
    // nothing was created
    let ports = ovs_ports(&node.db);
    assert!(
        !ports.iter().any(|p| p.starts_with("vhu")),
        "a refused request left a port: {ports:?}"
    );
    assert!(!std::path::Path::new(&long_root).exists());
    lab.finish();
}
