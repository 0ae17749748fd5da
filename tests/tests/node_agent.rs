//! The node agent (`zstack-ovnkube-node`) end to end: a 2-node lab with its object store,
//! one agent per node started inside the node netns, and the real `zstack-ovn-cni` shim
//! called like a runtime. ADD/CHECK/DEL, cross-node ping and TCP over Geneve, host-to-pod
//! through the management port, metrics, an agent SIGKILLed and restarted (pods keep
//! working, a new ADD works), an annotation that never comes (100) and an IPAM error
//! (101); nothing left behind.
//!
//! Needs the `zovn`, `zstack-ovn-cni` and `zstack-ovnkube-node` binaries
//! (`cargo build --workspace --bins`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::apiserver::ApiClient;
use lab::apiserver::protocol::ResourceKind;
use lab::{Dpdk, Encap, Lab, LabConfig};
use serde_json::{Value, json};

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

/// Everything the test started, undone on drop (also on panic).
struct Cleanup {
    dir: PathBuf,
    agents: Vec<Child>,
    netns: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for a in &mut self.agents {
            let _ = a.kill();
            let _ = a.wait();
        }
        for n in &self.netns {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        if let Ok(lab) = Lab::open(&self.dir) {
            let _ = lab.down();
        }
    }
}

struct Node {
    name: String,
    netns: String,
    db: String,
    socket: PathBuf,
    state: PathBuf,
    log: PathBuf,
}

fn start_agent(node: &Node, api: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&node.log)
        .expect("agent log");
    let child = Command::new("ip")
        .args(["netns", "exec", &node.netns])
        .arg(tests::workspace_bin("zstack-ovnkube-node"))
        .args(["--node-name", &node.name, "--ovs-db", &node.db])
        .arg("--cni-socket")
        .arg(&node.socket)
        .arg("--pods")
        .arg(format!("lab:{}", api.display()))
        .arg("--state-dir")
        .arg(&node.state)
        .args(["--metrics-addr", "127.0.0.1:0", "--mtu", "1400"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start agent");
    let t = Instant::now();
    // connectable, not just present: a killed agent leaves its socket file behind
    while std::os::unix::net::UnixStream::connect(&node.socket).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "agent of {} did not create {} in 20 s:\n{}",
            node.name,
            node.socket.display(),
            std::fs::read_to_string(&node.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// Runs the shim: (exit ok, stdout JSON).
fn shim(
    cmd: &str,
    node: &Node,
    cid: &str,
    netns: &str,
    pod: &str,
    timeout_s: f64,
) -> (bool, Value) {
    shim_with(cmd, node, cid, netns, pod, timeout_s, json!({}))
}

/// [`shim`] with extra network config fields (cniVersion 1.1.0).
fn shim_with(
    cmd: &str,
    node: &Node,
    cid: &str,
    netns: &str,
    pod: &str,
    timeout_s: f64,
    extra: Value,
) -> (bool, Value) {
    let mut conf = json!({
        "cniVersion": "1.0.0",
        "name": "zstack-ovn",
        "type": "zstack-ovn-cni",
        "serverSocket": node.socket,
        "timeoutSeconds": timeout_s,
    });
    if let (Some(c), Some(e)) = (conf.as_object_mut(), extra.as_object()) {
        if !e.is_empty() {
            c.insert("cniVersion".into(), "1.1.0".into());
        }
        c.extend(e.clone());
    }
    let mut c = Command::new(tests::workspace_bin("zstack-ovn-cni"))
        .env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", format!("/var/run/netns/{netns}"))
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/opt/cni/bin")
        .env(
            "CNI_ARGS",
            format!("K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod}"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run shim");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(conf.to_string().as_bytes())
        .expect("write stdin");
    let out = c.wait_with_output().expect("shim output");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("shim {cmd} printed {text:?}: {e}"))
    };
    (out.status.success(), v)
}

fn in_ns(ns: &str, args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .expect("ip netns exec")
}

/// Pings until one reply arrives (bounded).
fn ping(ns: &str, ip: &str, within: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < within {
        if in_ns(ns, &["ping", "-c", "1", "-W", "1", ip])
            .status
            .success()
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

fn pod_annotations(dir: &Path, name: &str) -> serde_json::Map<String, Value> {
    let pods = ApiClient::connect(dir)
        .and_then(|mut c| c.get(ResourceKind::Pod))
        .expect("get pods");
    pods.iter()
        .find(|p| p["metadata"]["name"] == name)
        .and_then(|p| p["metadata"]["annotations"].as_object().cloned())
        .unwrap_or_default()
}

/// `/metrics` of an agent (it listens on 127.0.0.1 inside the node netns).
fn metrics(node: &Node) -> String {
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
        "exec 3<>/dev/tcp/{host}/{port}; printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3"
    );
    let out = in_ns(&node.netns, &["bash", "-c", &script]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn pid_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    }
}

#[test]
fn node_agent_cni_end_to_end() {
    if !tests::require_real("node_agent_cni_end_to_end", BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let zovn = tests::workspace_bin("zovn");
    let s = tests::scratch("nag");
    let dir = s.dir.path().join("lab");
    let mut cleanup = Cleanup {
        dir: dir.clone(),
        agents: Vec::new(),
        netns: Vec::new(),
    };
    let mut lab = Lab::up(LabConfig {
        dir: dir.clone(),
        prefix: s.prefix.clone(),
        nodes: 2,
        raft: false,
        dpdk: Dpdk::Off,
        encap: Encap::Geneve,
    })
    .expect("lab up");
    lab.keep_running();
    lab.start_apiserver(&zovn).expect("object store");
    let api = lab::state::Layout::new(&dir).api_socket();

    // a Subnet, a pod per node, one with an address IPAM cannot give
    let mut client = ApiClient::connect(&dir).expect("object store client");
    let pod = |name: &str, node: usize, ann: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default", "annotations": ann},
               "spec": {"nodeName": format!("{}-node{node}", s.prefix), "containers": []}})
    };
    client
        .apply(vec![
            json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
                   "metadata": {"name": "nag"},
                   "spec": {"cidr": "10.33.0.0/16", "gateway": "10.33.0.1", "default": true}}),
            pod("pa", 1, json!({})),
            pod("pb", 2, json!({})),
            pod("pc", 1, json!({})),
            pod(
                "bad",
                1,
                json!({"ovn.kubernetes.io/ip_address": "10.99.0.5"}),
            ),
        ])
        .expect("apply");

    let nodes: Vec<Node> = (1..=2)
        .map(|i| {
            let st = lab.node(i).expect("node");
            Node {
                name: st.system_id.clone(),
                netns: st.netns.clone(),
                db: st.db_remote.clone(),
                socket: s.dir.path().join(format!("agent{i}/run/cni.sock")),
                state: s.dir.path().join(format!("agent{i}/state")),
                log: s.dir.path().join(format!("agent{i}.log")),
            }
        })
        .collect();
    for n in &nodes {
        cleanup.agents.push(start_agent(n, &api));
    }
    for p in ["qa", "qb", "qc"] {
        let ns = format!("{}{p}", s.prefix);
        assert!(
            Command::new("ip")
                .args(["netns", "add", &ns])
                .status()
                .expect("ip netns add")
                .success()
        );
        cleanup.netns.push(ns);
    }
    let (qa, qb, qc) = (
        cleanup.netns[0].clone(),
        cleanup.netns[1].clone(),
        cleanup.netns[2].clone(),
    );
    let logs = || {
        nodes
            .iter()
            .map(|n| std::fs::read_to_string(&n.log).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };

    // ADD on each node: the result carries the annotated address
    let cid_a = format!("{:0<64}", "a1");
    let cid_b = format!("{:0<64}", "b2");
    let (ok, ra) = shim("ADD", &nodes[0], &cid_a, &qa, "pa", 30.0);
    assert!(ok, "ADD pa: {ra}\n{}", logs());
    let (ok, rb) = shim("ADD", &nodes[1], &cid_b, &qb, "pb", 30.0);
    assert!(ok, "ADD pb: {rb}\n{}", logs());
    let ip_of = |r: &Value| {
        r["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.split('/').next())
            .unwrap_or_else(|| panic!("no address in {r}"))
            .to_string()
    };
    let (ip_a, ip_b) = (ip_of(&ra), ip_of(&rb));
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
    let (ok, r) = shim("CHECK", &nodes[0], &cid_a, &qa, "pa", 10.0);
    assert!(ok, "CHECK pa: {r}");

    // cross-node ping and TCP over Geneve
    assert!(
        ping(&qa, &ip_b, Duration::from_secs(10)),
        "pa -> pb ping\n{}",
        logs()
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
        ping(&nodes[0].netns, &ip_b, Duration::from_secs(20)),
        "node1 -> pb via ovn-k8s-mp0\n{}",
        logs()
    );

    let m = metrics(&nodes[0]);
    assert!(m.contains("zstack_ovn_cni_add_seconds_count 1"), "{m}");
    assert!(
        m.contains(r#"zstack_ovn_cni_requests_total{command="CHECK",result="ok"} 1"#),
        "{m}"
    );

    // SIGKILL the agent of node1, restart it: pods keep working, a new ADD works
    let old = cleanup.agents.remove(0);
    let old_pid = old.id();
    let mut old = old;
    old.kill().expect("SIGKILL agent");
    old.wait().expect("reap agent");
    cleanup.agents.insert(0, start_agent(&nodes[0], &api));
    assert!(
        ping(&qa, &ip_b, Duration::from_secs(10)),
        "after restart\n{}",
        logs()
    );
    let cid_c = format!("{:0<64}", "c3");
    let (ok, rc) = shim("ADD", &nodes[0], &cid_c, &qc, "pc", 30.0);
    assert!(ok, "ADD pc after restart: {rc}\n{}", logs());
    let ip_c = ip_of(&rc);
    assert!(ping(&qc, &ip_b, Duration::from_secs(10)), "pc -> pb");
    assert!(ping(&qb, &ip_c, Duration::from_secs(10)), "pb -> pc");
    let (ok, r) = shim("CHECK", &nodes[0], &cid_a, &qa, "pa", 10.0);
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
            .args(["--db", &nodes[0].db, "del-port", "br-int", &port_c])
            .status()
            .expect("ovs-vsctl del-port")
            .success()
    );
    let t = Instant::now();
    while !ports(&nodes[0].db).lines().any(|l| l == port_c) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{port_c} not re-added\n{}",
            logs()
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
        &nodes[1],
        "",
        &qb,
        "",
        10.0,
        json!({"cni.dev/valid-attachments": [{"containerID": cid_a, "ifname": "eth0"}]}),
    );
    assert!(ok, "GC: {r}");
    assert!(
        !ports(&nodes[1].db).lines().any(|l| l == port_b),
        "GC left {port_b}"
    );
    assert!(
        !in_ns(&nodes[1].netns, &["ip", "link", "show", &port_b])
            .status
            .success()
    );

    // an annotation that never comes: 100 within the timeout
    let t = Instant::now();
    let (ok, r) = shim(
        "ADD",
        &nodes[0],
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
        &nodes[0],
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
    let (ok, r) = shim("STATUS", &nodes[0], "", &qa, "", 5.0);
    assert!(ok, "STATUS: {r}");
    for (node, cid, ns, pod) in [
        (&nodes[0], &cid_a, &qa, "pa"),
        (&nodes[1], &cid_b, &qb, "pb"),
        (&nodes[0], &cid_c, &qc, "pc"),
    ] {
        let (ok, r) = shim("DEL", node, cid, ns, pod, 10.0);
        assert!(ok, "DEL {pod}: {r}");
        let (ok, r) = shim("DEL", node, cid, ns, pod, 10.0);
        assert!(ok, "second DEL {pod}: {r}");
    }
    for n in &nodes {
        let out = Command::new("ovs-vsctl")
            .args(["--db", &n.db, "--columns=name", "find", "Port"])
            .arg("external_ids:zstack.io/owner=zstack-ovn-node")
            .output()
            .expect("ovs-vsctl");
        let text = String::from_utf8_lossy(&out.stdout);
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split(':').nth(1))
            .map(|s| s.trim().trim_matches('"'))
            .collect();
        assert_eq!(names, ["ovn-k8s-mp0"], "ports left on {}", n.name);
    }
    let (ok, r) = shim("CHECK", &nodes[0], &cid_a, &qa, "pa", 10.0);
    assert!(!ok && r["code"] == 3, "CHECK after DEL: {r}");

    // leave nothing behind
    let pids: Vec<u32> = cleanup.agents.iter().map(Child::id).collect();
    for a in &mut cleanup.agents {
        a.kill().expect("stop agent");
        a.wait().expect("reap agent");
    }
    cleanup.agents.clear();
    for pid in pids.iter().chain([&old_pid]) {
        assert!(pid_gone(*pid), "agent pid {pid} still alive");
    }
    for n in std::mem::take(&mut cleanup.netns) {
        assert!(
            Command::new("ip")
                .args(["netns", "del", &n])
                .status()
                .expect("ip netns del")
                .success()
        );
    }
    Lab::open(&dir).expect("lab").down().expect("lab down");
    let left: Vec<String> = lab::netns::list()
        .into_iter()
        .filter(|n| n.starts_with(&s.prefix))
        .collect();
    assert!(left.is_empty(), "netns left: {left:?}");
}
