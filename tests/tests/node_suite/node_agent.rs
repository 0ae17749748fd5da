//! The node agent (`zstack-ovnkube-node`) end to end: a 2-node lab with its object store,
//! one agent per node started inside the node netns, and the real `zstack-ovn-cni` shim
//! called like a runtime. ADD/CHECK/DEL, cross-node ping and TCP over Geneve, host-to-pod
//! through the management port, metrics, an agent SIGKILLed and restarted (pods keep
//! working, a new ADD works), an annotation that never comes (100) and an IPAM error
//! (101); nothing left behind.
//!
//! Needs the `zovn`, `zstack-ovn-cni` and `zstack-ovnkube-node` binaries
//! (`cargo build --workspace --bins`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::agent::{
    AgentLab, Node, in_ns, pid_gone, ping, pod_annotations, result_ip, shim, shim_with,
};

const BINS: &[&str] = &[
    "ovsdb-server",
    "ovsdb-tool",
    "ovsdb-client",
    "ovn-nbctl",
    "ovn-sbctl",
    "ovn-northd",
    "ovn-controller",
    "ovs-vsctl",
    "ovs-appctl",
    "ovs-vswitchd",
    "ip",
    "ping",
    "iperf3",
];

/// `/metrics` of an agent (it listens on 127.0.0.1 inside the node netns).
fn metrics(node: &Node) -> String {
    get(node, "/metrics")
}

/// The whole answer (status line, headers, body) to `GET path` on the agent's
/// `--metrics-addr`.
fn get(node: &Node, path: &str) -> String {
    let text = std::fs::read_to_string(&node.log).unwrap_or_default();
    let addr = text
        .lines()
        .rev()
        .find_map(|l| l.split("http://").nth(1))
        .and_then(|r| r.split("/metrics").next())
        .expect("metrics address in the agent log")
        .to_string();
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let script = format!(
        "exec 3<>/dev/tcp/{host}/{port}; printf 'GET {path} HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3"
    );
    let out = in_ns(&node.netns, &["bash", "-c", &script]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn node_agent_cni_end_to_end() {
    if !tests::require_real("node_agent_cni_end_to_end", BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("nag");
    // a Subnet, both agents; a pod per node, one with an address IPAM cannot give
    let mut lab = AgentLab::up(&s, "10.33.0.0/16", "10.33.0.1");
    let dir = lab.dir.clone();
    lab.apply_pod("pa", 0);
    lab.apply_pod("pb", 1);
    lab.apply_pod("pc", 0);
    lab.apply_pod_with(
        "bad",
        0,
        json!({"ovn.kubernetes.io/ip_address": "10.99.0.5"}),
    );
    let (qa, qb, qc) = (
        lab.add_netns("qa"),
        lab.add_netns("qb"),
        lab.add_netns("qc"),
    );

    // ADD on each node: the result carries the annotated address
    let cid_a = format!("{:0<64}", "a1");
    let cid_b = format!("{:0<64}", "b2");
    let (ok, ra) = shim("ADD", &lab.nodes[0], &cid_a, &qa, "pa", 30.0);
    assert!(ok, "ADD pa: {ra}\n{}", lab.logs());
    let (ok, rb) = shim("ADD", &lab.nodes[1], &cid_b, &qb, "pb", 30.0);
    assert!(ok, "ADD pb: {rb}\n{}", lab.logs());
    let (ip_a, ip_b) = (result_ip(&ra), result_ip(&rb));
    let nets: Value = serde_json::from_str(
        pod_annotations(&dir, "pa")["k8s.ovn.org/pod-networks"]
            .as_str()
            .expect("pa annotated"),
    )
    .expect("pod-networks JSON");
    assert_eq!(
        nets["default"]["ip_addresses"][0].as_str(),
        ra["ips"][0]["address"].as_str()
    );
    assert_eq!(ra["ips"][0]["gateway"], "10.33.0.1", "{ra}");
    assert_eq!(
        ra["interfaces"][1]["sandbox"],
        format!("/var/run/netns/{qa}")
    );
    assert_eq!(ra["cniVersion"], "1.0.0");

    // CHECK
    let (ok, r) = shim("CHECK", &lab.nodes[0], &cid_a, &qa, "pa", 10.0);
    assert!(ok, "CHECK pa: {r}");

    // cross-node ping and TCP over Geneve
    assert!(
        ping(&qa, &ip_b, Duration::from_secs(10)),
        "pa -> pb ping\n{}",
        lab.logs()
    );
    assert!(ping(&qb, &ip_a, Duration::from_secs(10)), "pb -> pa ping");
    let mut server = Command::new("ip")
        .args(["netns", "exec", &qb, "iperf3", "-s", "-1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -s");
    std::thread::sleep(Duration::from_millis(500));
    let out = in_ns(&qa, &["iperf3", "-c", &ip_b, "-t", "2", "-J"]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "iperf3: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let j: Value = serde_json::from_slice(&out.stdout).expect("iperf3 JSON");
    let bps = j["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    eprintln!("pa -> pb TCP: {:.0} Mbit/s", bps / 1e6);
    assert!(bps > 1e6, "TCP throughput {bps}");

    // host-to-pod through the management port
    assert!(
        ping(&lab.nodes[0].netns, &ip_b, Duration::from_secs(20)),
        "node1 -> pb via ovn-k8s-mp0\n{}",
        lab.logs()
    );

    let m = metrics(&lab.nodes[0]);
    assert!(m.contains("zstack_ovn_cni_add_seconds_count 1"), "{m}");
    let h = get(&lab.nodes[0], "/healthz");
    assert!(
        h.starts_with("HTTP/1.1 200") && h.ends_with("\r\n\r\nok\n"),
        "{h}"
    );
    let r = get(&lab.nodes[0], "/readyz");
    assert!(
        r.starts_with("HTTP/1.1 200") && r.contains("CNI server listening"),
        "{r}"
    );
    assert!(
        m.contains(r#"zstack_ovn_cni_requests_total{command="CHECK",result="ok"} 1"#),
        "{m}"
    );

    // SIGKILL the agent of node1, restart it: pods keep working, a new ADD works
    let old_pid = lab.kill_agent(0);
    lab.start_agent(0);
    assert!(
        ping(&qa, &ip_b, Duration::from_secs(10)),
        "after restart\n{}",
        lab.logs()
    );
    let cid_c = format!("{:0<64}", "c3");
    let (ok, rc) = shim("ADD", &lab.nodes[0], &cid_c, &qc, "pc", 30.0);
    assert!(ok, "ADD pc after restart: {rc}\n{}", lab.logs());
    let ip_c = result_ip(&rc);
    assert!(ping(&qc, &ip_b, Duration::from_secs(10)), "pc -> pb");
    assert!(ping(&qb, &ip_c, Duration::from_secs(10)), "pb -> pc");
    let (ok, r) = shim("CHECK", &lab.nodes[0], &cid_a, &qa, "pa", 10.0);
    assert!(ok, "CHECK pa after restart: {r}");

    // a port lost from OVS (as after a database reset) is re-added by the OVS watch
    let port_c = rc["interfaces"][0]["name"]
        .as_str()
        .expect("host ifname")
        .to_string();
    let ports = |db: &str| {
        let out = Command::new("ovs-vsctl")
            .args(["--db", db, "list-ports", "br-int"])
            .output()
            .expect("ovs-vsctl list-ports");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        Command::new("ovs-vsctl")
            .args(["--db", &lab.nodes[0].db, "del-port", "br-int", &port_c])
            .status()
            .expect("ovs-vsctl del-port")
            .success()
    );
    let t = Instant::now();
    while !ports(&lab.nodes[0].db).lines().any(|l| l == port_c) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{port_c} not re-added\n{}",
            lab.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        ping(&qc, &ip_b, Duration::from_secs(10)),
        "pc -> pb after re-add"
    );

    // GC on node2 with no valid attachment: pb's port and veth go
    let port_b = rb["interfaces"][0]["name"]
        .as_str()
        .expect("host ifname")
        .to_string();
    let (ok, r) = shim_with(
        "GC",
        &lab.nodes[1],
        "",
        &qb,
        "",
        10.0,
        &json!({"cni.dev/valid-attachments": [{"containerID": cid_a, "ifname": "eth0"}]}),
    );
    assert!(ok, "GC: {r}");
    assert!(
        !ports(&lab.nodes[1].db).lines().any(|l| l == port_b),
        "GC left {port_b}"
    );
    assert!(
        !in_ns(&lab.nodes[1].netns, &["ip", "link", "show", &port_b])
            .status
            .success()
    );

    // an annotation that never comes: 100 within the timeout
    let t = Instant::now();
    let (ok, r) = shim(
        "ADD",
        &lab.nodes[0],
        &format!("{:0<64}", "d4"),
        &qc,
        "ghost",
        3.0,
    );
    assert!(!ok && r["code"] == 100, "{r}");
    assert!(
        r["msg"].as_str().unwrap_or("").contains("default/ghost"),
        "{r}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // an IPAM error: 101 with the controller's message
    let t = Instant::now();
    let msg = loop {
        if let Some(m) = pod_annotations(&dir, "bad")
            .get("network.zstack.io/ipam-error")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
        {
            break m.to_string();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no IPAM error on pod bad"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let (ok, r) = shim(
        "ADD",
        &lab.nodes[0],
        &format!("{:0<64}", "e5"),
        &qc,
        "bad",
        10.0,
    );
    assert!(!ok && r["code"] == 101, "{r}");
    assert!(
        r["msg"].as_str().unwrap_or("").contains(&msg),
        "{r} vs {msg}"
    );

    // STATUS, DEL (twice), nothing of ours left in OVS
    let (ok, r) = shim("STATUS", &lab.nodes[0], "", &qa, "", 5.0);
    assert!(ok, "STATUS: {r}");
    for (node, cid, ns, pod) in [
        (&lab.nodes[0], &cid_a, &qa, "pa"),
        (&lab.nodes[1], &cid_b, &qb, "pb"),
        (&lab.nodes[0], &cid_c, &qc, "pc"),
    ] {
        let (ok, r) = shim("DEL", node, cid, ns, pod, 10.0);
        assert!(ok, "DEL {pod}: {r}");
        let (ok, r) = shim("DEL", node, cid, ns, pod, 10.0);
        assert!(ok, "second DEL {pod}: {r}");
    }
    for n in &lab.nodes {
        let out = Command::new("ovs-vsctl")
            .args(["--db", &n.db, "--columns=name", "find", "Port"])
            .arg("external_ids:zstack.io/owner=zstack-ovn-node")
            .output()
            .expect("ovs-vsctl");
        let text = String::from_utf8_lossy(&out.stdout);
        // the pods' ports live on br-int; br-phy's uplink carries the mark too (the lab
        // marks it as the chart's uplink container does: the agent manages its type)
        let br_int = Command::new("ovs-vsctl")
            .args(["--db", &n.db, "list-ports", "br-int"])
            .output()
            .expect("ovs-vsctl");
        let on_br_int = String::from_utf8_lossy(&br_int.stdout).to_string();
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split(':').nth(1))
            .map(|s| s.trim().trim_matches('"'))
            .filter(|p| on_br_int.lines().any(|l| l == *p))
            .collect();
        assert_eq!(names, ["ovn-k8s-mp0"], "ports left on {}", n.name);
    }
    let (ok, r) = shim("CHECK", &lab.nodes[0], &cid_a, &qa, "pa", 10.0);
    assert!(!ok && r["code"] == 3, "CHECK after DEL: {r}");

    // leave nothing behind: agents (the SIGKILLed one too), netns, the lab
    assert!(pid_gone(old_pid), "agent pid {old_pid} still alive");
    lab.finish();
}
