//! The DPDK-first datapath on real components: `zovn lab up --datapath ...` starts the
//! DPDK build of ovs-vswitchd where asked, and each node agent decides, configures OVS
//! (other_config through OVSDB), reports (Node annotation, events, `zovn lab get
//! nodes`) and attaches veth pods as AF_XDP ports — or falls back and says why.
//!
//! - `dpdk_and_kernel_nodes_reach_each_other`: node 1 on dpdk (DPDK initialised by its
//!   agent, AF_XDP pod ports), node 2 on kernel; a pod on node 1 asking for the kernel
//!   path gets it, a pod on node 2 asking for AF_XDP is told it cannot; ping and TCP
//!   within node 1 (AF_XDP ↔ kernel port) and across the tunnel.
//! - `dpdk_init_failure_falls_back_then_recovers_and_bad_config_is_reported`: one dpdk
//!   node; a Node annotation gives DPDK a bogus EAL argument → the agent restarts
//!   ovs-vswitchd, DPDK fails for real, the node falls back to afxdp and says why, the
//!   pods regain connectivity; the annotation is cleared → DPDK comes back (in a fresh
//!   ovs-vswitchd), a new pod is on AF_XDP again; then a bad configuration (unknown
//!   datapath, a PMD CPU that does not exist, socket-mem beyond the hugepages) → each
//!   named in the status, the node keeps a working datapath and pods keep talking.
//!
//! Needs root, hugepages (set up by the lab), OVS (both builds), OVN.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tests::node_status::{CONFIG, STATUS, events, has_event, wait_status};
use tests::zovn::{DownOnDrop, Zovn, wait_until};

const BINS: &[&str] = &[
    "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk",
    "/usr/lib/openvswitch-switch/ovs-vswitchd",
    "ovsdb-server",
    "ovn-northd",
    "ovn-controller",
    "ovs-vsctl",
];

pub(super) fn subnet_and_pods(prefix: &str, pods: &[(&str, usize, Option<&str>)]) -> Vec<Value> {
    let mut v = vec![json!({
        "apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": format!("{prefix}-net")},
        "spec": {"cidr": "10.61.0.0/24", "gateway": "10.61.0.1", "default": true}})];
    for (name, node, dp) in pods {
        let ann = dp.map_or(json!({}), |d| json!({"network.zstack.io/datapath": d}));
        v.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": ann},
            "spec": {"nodeName": format!("{prefix}-node{node}"),
                "containers": [{"name": "c", "image": "x",
                    "ports": [{"containerPort": 80}]}]}}));
    }
    v
}

pub(super) fn apply(z: &Zovn, objects: Vec<Value>) {
    let f = z
        .dir
        .with_extension(format!("apply-{}.json", objects.len()));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    std::fs::write(&f, list.to_string()).expect("write manifest");
    z.ok(&["apply", "-f", f.to_str().expect("utf-8 path")]);
}

/// The pod's OVS Interface on node `node`: (type, ofport, external_ids:zstack.io/datapath).
pub(super) fn port_of(z: &Zovn, node: usize, pod: &str) -> (String, i64, String) {
    let db = format!("unix:{}/node{node}/run/db.sock", z.dir.display());
    let out = Command::new("ovs-vsctl")
        .args([
            &format!("--db={db}"),
            "--format=json",
            "--columns=type,ofport,external_ids",
            "find",
            "Interface",
            &format!("external_ids:zstack.io/pod=\"default/{pod}\""),
        ])
        .output()
        .expect("ovs-vsctl");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "ovs-vsctl find: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let row = v["data"][0].as_array().cloned().unwrap_or_default();
    assert!(
        !row.is_empty(),
        "no OVS interface for pod {pod} on node{node}"
    );
    let ty = row[0].as_str().unwrap_or("").to_string();
    let ofport = row[1].as_i64().unwrap_or(-1);
    let ids: BTreeMap<String, String> = row[2][1]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[0].as_str()?.to_string(), p[1].as_str()?.to_string())))
        .collect();
    (
        ty,
        ofport,
        ids.get("zstack.io/datapath").cloned().unwrap_or_default(),
    )
}

/// Waits until the pod's port is `(type, zstack.io/datapath)` = `want` with an ofport
/// (a fast-start port starts as a kernel port and is switched in the background).
pub(super) fn wait_port(
    z: &Zovn,
    node: usize,
    pod: &str,
    want: (&str, &str),
) -> (String, i64, String) {
    let t0 = std::time::Instant::now();
    loop {
        let p = port_of(z, node, pod);
        if (p.0.as_str(), p.2.as_str()) == want && p.1 > 0 {
            return p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "pod {pod}'s port is {p:?}, not {want:?} with an ofport, after 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until an event `reason` about `object` says `text`.
pub(super) fn wait_event(z: &Zovn, object: &str, reason: &str, text: &str) {
    let t0 = std::time::Instant::now();
    while !has_event(&events(z), object, reason, text) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no {reason} event about {object} saying {text:?}: {:#?}",
            events(z)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub(super) fn ip_of(pods: &BTreeMap<String, Value>, name: &str) -> String {
    tests::zovn::pod_ip(&pods[&format!("default/{name}")])
}

/// `zovn lab probe` (TCP) until it answers with the target pod's name, bounded.
fn tcp_reaches(z: &Zovn, from: &str, ip: &str, target: &str) {
    let to = format!("{ip}:80");
    let mut last = String::new();
    let ok = (0..50).any(|_| {
        let (code, out, err) = z.run(&["probe", &format!("default/{from}"), &to]);
        last = format!("{out}{err}");
        if code == 0 && out.contains(target) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
        false
    });
    assert!(ok, "{from} → {target} ({to}) over TCP: {last}");
}

pub(super) fn pings(z: &Zovn, from: &str, ip: &str) {
    let (code, out, err) = z.run(&[
        "exec",
        &format!("default/{from}"),
        "--",
        "ping",
        "-c",
        "2",
        "-W",
        "2",
        ip,
    ]);
    assert_eq!(code, 0, "{from} ping {ip}: {out}{err}");
}

pub(super) fn status(z: &Zovn, node: &str) -> Value {
    z.node_annotation_json(node, STATUS)
        .unwrap_or_else(|| panic!("node {node} has no {STATUS} annotation"))
}

/// SIGKILLs node 1's agent and starts it again (the lab's record is updated).
pub(super) fn restart_agent(z: &Zovn) {
    let mut lab = lab::Lab::open(&z.dir).expect("open lab");
    let rec = lab.agents()[0].clone();
    lab::process::kill9(&rec).expect("kill agent");
    std::fs::write(z.dir.join("node1/log/agent.log"), b"").expect("truncate agent log");
    let agent = tests::workspace_bin("zstack-ovnkube-node");
    let shim = tests::workspace_bin("zstack-ovn-cni");
    let recs = lab.start_agents(&agent, Some(&shim)).expect("start agent");
    assert_ne!(recs[0].pid, rec.pid);
}

/// Writes node 1's agent configuration file (the lab's own, `lab::node::datapath_config`,
/// with `over`'s keys on top) and restarts the agent, which reads it at start.
fn set_file_config(z: &Zovn, over: Value) {
    set_file_config_for(z, "dpdk", over);
}

/// [`set_file_config`] on a lab node of `datapath`.
pub(super) fn set_file_config_for(z: &Zovn, datapath: &str, over: Value) {
    use dataplane::datapath::config::DatapathConfig;
    let base = DatapathConfig::parse(&lab::node::datapath_config(datapath), "lab").expect("lab");
    let over = DatapathConfig::parse(&over.to_string(), "test").expect("override");
    let text = serde_norway::to_string(&base.overlay(&over)).expect("yaml");
    std::fs::write(z.dir.join("node1/datapath.yaml"), text).expect("write datapath.yaml");
    restart_agent(z);
}

/// Whether node 1's agent has `/dev/cpu_dma_latency` open (its PM QoS request).
fn agent_holds_pm_qos(z: &Zovn) -> bool {
    let lab = lab::Lab::open(&z.dir).expect("open lab");
    let pid = lab.agents()[0].pid;
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten().any(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|t| t == std::path::Path::new("/dev/cpu_dma_latency"))
            })
        })
        .unwrap_or(false)
}

fn agent_log(z: &Zovn) -> String {
    std::fs::read_to_string(z.dir.join("node1/log/agent.log")).unwrap_or_default()
}

/// The node-1 agent's `/metrics` (it listens on the node netns' loopback).
pub(super) fn node_metrics(prefix: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &format!("{prefix}n1"), "python3", "-c"])
        .arg(format!(
            "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:{}/metrics',timeout=5).read().decode())",
            lab::agent::AGENT_METRICS_PORT
        ))
        .output()
        .expect("python3 in the node netns");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(super) fn up(tag: &str, datapath: &str, nodes: &str) -> (tests::Scratch, Zovn, DownOnDrop) {
    let scratch = tests::scratch(tag);
    let dir = scratch.dir.path().join("lab");
    let z = Zovn::new(&dir);
    let down = DownOnDrop(dir.clone());
    z.ok(&[
        "up",
        "--prefix",
        &scratch.prefix,
        "--nodes",
        nodes,
        "--datapath",
        datapath,
    ]);
    (scratch, z, down)
}

#[test]
fn dpdk_and_kernel_nodes_reach_each_other() {
    if !tests::require_real("dpdk_and_kernel_nodes_reach_each_other", BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let (scratch, z, _down) = up("dpk", "dpdk,kernel", "2");
    let p = scratch.prefix.clone();
    let (n1, n2) = (format!("{p}-node1"), format!("{p}-node2"));
    // receive steering of AF_XDP pods (off by default), asked for on node 1
    z.annotate_node(
        &n1,
        BTreeMap::from([(
            CONFIG.to_string(),
            json!({"afxdp": {"rxCpus": "auto"}}).to_string(),
        )]),
    );
    wait_status(&z, &n1, "afxdp.rxCpus decided", |s| {
        s["afxdp"]["rxCpus"] == "0"
    });

    apply(
        &z,
        subnet_and_pods(
            &p,
            &[
                ("fast", 1, None),
                ("side", 1, Some("kernel")),
                ("far", 2, Some("afxdp")),
            ],
        ),
    );
    let pods = z.wait_ready(
        &["default/fast", "default/side", "default/far"],
        Duration::from_secs(60),
    );

    // what each agent decided, and why
    let s1 = status(&z, &n1);
    assert_eq!(s1["datapath"], "dpdk", "{s1:#}");
    assert_eq!(s1["dpdkInitialized"], true, "{s1:#}");
    assert_eq!(s1["reason"], "dpdk as configured");
    assert!(
        s1["dpdkVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("DPDK "))
    );
    assert_eq!(s1["pmdCpus"], "1", "one PMD, never CPU 0: {s1:#}");
    assert!(
        s1["ovsVersion"].as_str().is_some_and(|v| v.contains("3.1")),
        "{s1:#}"
    );
    assert_eq!(s1["userspaceTso"], false, "tunnels: TSO off");
    assert!(
        s1["hugepages"]["total"].as_u64().unwrap_or(0) >= 128,
        "{s1:#}"
    );
    let s2 = status(&z, &n2);
    assert_eq!(s2["datapath"], "kernel", "{s2:#}");
    assert_eq!(s2["dpdkInitialized"], false);

    // DPDK and the tuning were applied through OVSDB
    let oc = Command::new("ovs-vsctl")
        .args([
            &format!("--db=unix:{}/node1/run/db.sock", z.dir.display()),
            "get",
            "Open_vSwitch",
            ".",
            "other_config",
        ])
        .output()
        .expect("ovs-vsctl");
    let oc = String::from_utf8_lossy(&oc.stdout);
    for kv in [
        "dpdk-init=try",
        "pmd-cpu-mask=\"0x2\"",
        "dpdk-socket-mem=\"256\"",
        "dpdk-extra=\"--no-pci\"",
    ] {
        assert!(oc.contains(kv), "{kv} missing in {oc}");
    }

    // ports: AF_XDP by default on the dpdk node, kernel where asked or where the node is;
    // fast start: the ADD answered on a kernel port, switched to AF_XDP right after
    let (ty, _, dp) = port_of(&z, 1, "fast");
    assert!(
        [("", "kernel"), ("afxdp", "afxdp")].contains(&(ty.as_str(), dp.as_str())),
        "{ty:?} {dp:?}"
    );
    let (_, ofport, _) = wait_port(&z, 1, "fast", ("afxdp", "afxdp"));
    assert!(ofport > 0, "the AF_XDP port opened");
    let log = agent_log(&z);
    let add = log
        .lines()
        .find(|l| l.contains("CNI ADD phases") && l.contains("default/fast"))
        .unwrap_or_else(|| panic!("no phases line for fast:\n{log}"));
    for field in ["datapath=kernel", "then=afxdp", "open_ms=-1"] {
        assert!(add.contains(field), "{field} not in {add}");
    }
    // logged once ovs-vswitchd confirmed the switch (the type in the database is earlier)
    let t0 = std::time::Instant::now();
    while !agent_log(&z)
        .lines()
        .any(|l| l.contains("pod port moved to AF_XDP") && l.contains("default/fast"))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the switch is logged:\n{}",
            agent_log(&z)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // the PMD thread ovs-vswitchd runs for it is reported (on the next 5 s pass)
    wait_status(&z, &n1, "PMD thread on CPU 1 reported", |s| {
        s["pmdThreads"] == json!([{"cpu": 1, "numa": 0}])
    });
    let (ty, _, dp) = port_of(&z, 1, "side");
    assert_eq!((ty.as_str(), dp.as_str()), ("", "kernel"));
    let (ty, _, dp) = port_of(&z, 2, "far");
    assert_eq!((ty.as_str(), dp.as_str()), ("", "kernel"));
    // receive steering (afxdp.rxCpus auto): the AF_XDP pod's input runs on the non-PMD
    // CPU, not inside the PMD's sendto; a kernel-port pod is left at the kernel default
    assert_eq!(s1["afxdp"]["rxCpus"], "0", "{s1:#}");
    assert!(s1.get("errors").is_none(), "no config error: {s1:#}");
    let rps = |pod: &str| {
        z.ok(&[
            "exec",
            &format!("default/{pod}"),
            "--",
            "cat",
            "/sys/class/net/eth0/queues/rx-0/rps_cpus",
        ])
        .trim()
        .trim_start_matches(['0', ','])
        .to_string()
    };
    assert_eq!(rps("fast"), "1", "AF_XDP pod steered to CPU 0");
    assert_eq!(rps("side"), "", "kernel-port pod left alone");

    // the lab follows the fast-start switch (polling the port)
    let t0 = std::time::Instant::now();
    loop {
        let table = z.ok(&["get", "pods"]);
        let shows = |pod: &str, dp: &str| {
            table
                .lines()
                .find(|l| l.starts_with(&format!("default/{pod} ")))
                .is_some_and(|row| row.contains(dp) && !row.contains('→'))
        };
        if shows("fast", "afxdp/veth")
            && shows("side", "kernel/veth")
            && shows("far", "kernel/veth")
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "fast afxdp/veth, side and far kernel/veth:\n{table}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // traffic: AF_XDP ↔ kernel port on one node, and across the tunnel
    let (fast, side, far) = (
        ip_of(&pods, "fast"),
        ip_of(&pods, "side"),
        ip_of(&pods, "far"),
    );
    pings(&z, "fast", &side);
    pings(&z, "fast", &far);
    pings(&z, "far", &fast);
    tcp_reaches(&z, "fast", &side, "side");
    tcp_reaches(&z, "side", &fast, "fast");
    tcp_reaches(&z, "fast", &far, "far");
    tcp_reaches(&z, "far", &fast, "fast");

    // a switch still pending when the agent dies is done by the next agent: the agent is
    // killed and the state of that window (a kernel port marked pending, the record
    // saying so) is put back by hand, since the 300 ms window cannot be hit reliably
    let lab = lab::Lab::open(&z.dir).expect("open lab");
    lab::process::kill9(&lab.agents()[0]).expect("kill agent");
    let db = format!("--db=unix:{}/node1/run/db.sock", z.dir.display());
    let host = Command::new("ovs-vsctl")
        .args([&db, "--bare", "--columns=name", "find", "Interface"])
        .arg("external_ids:zstack.io/pod=\"default/fast\"")
        .output()
        .expect("ovs-vsctl");
    let host = String::from_utf8_lossy(&host.stdout).trim().to_string();
    let set = Command::new("ovs-vsctl")
        .args([&db, "set", "Interface", &host, "type=\"\""])
        .args([
            "external_ids:zstack.io/datapath=kernel",
            "external_ids:zstack.io/datapath-pending=afxdp",
            "--",
            "clear",
            "Interface",
            &host,
            "options",
            "other_config",
        ])
        .status()
        .expect("ovs-vsctl");
    assert!(set.success());
    wait_port(&z, 1, "fast", ("", "kernel"));
    let state = lab::state::Layout::new(&z.dir).node_agent_state(1);
    let file = std::fs::read_dir(&state)
        .expect("agent state dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains(&format!("\"{host}\""))))
        .unwrap_or_else(|| panic!("no record naming {host} in {}", state.display()));
    let mut rec: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    rec["promote_to"] = rec["datapath"].clone();
    rec["datapath"] = serde_json::to_value(dataplane::datapath::Datapath::Kernel).expect("json");
    std::fs::write(&file, rec.to_string()).expect("write record");
    let mut lab = lab::Lab::open(&z.dir).expect("open lab");
    lab.start_agents(
        &tests::workspace_bin("zstack-ovnkube-node"),
        Some(&tests::workspace_bin("zstack-ovn-cni")),
    )
    .expect("start the agent again");
    wait_port(&z, 1, "fast", ("afxdp", "afxdp"));
    tcp_reaches(&z, "fast", &side, "side");
    tcp_reaches(&z, "far", &fast, "fast");

    // told to the operator
    let evs = events(&z);
    assert!(has_event(&evs, &n1, "DatapathSelected", "dpdk"), "{evs:#?}");
    assert!(
        has_event(&evs, &n2, "DatapathSelected", "kernel"),
        "{evs:#?}"
    );
    assert!(
        has_event(&evs, "far", "DatapathRequestIgnored", "kernel datapath"),
        "{evs:#?}"
    );
    let table = z.ok(&["get", "nodes"]);
    let row1 = table
        .lines()
        .find(|l| l.starts_with(&n1))
        .expect("node1 row");
    assert!(
        row1.contains("dpdk") && row1.contains("initialized"),
        "{table}"
    );
    tests::record_real_run("dpdk_and_kernel_nodes_reach_each_other");
}

#[test]
fn dpdk_init_failure_falls_back_then_recovers_and_bad_config_is_reported() {
    let name = "dpdk_init_failure_falls_back_then_recovers_and_bad_config_is_reported";
    if !tests::require_real(name, BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let (scratch, z, _down) = up("dpf", "dpdk", "1");
    let node = format!("{}-node1", scratch.prefix);
    apply(
        &z,
        subnet_and_pods(&scratch.prefix, &[("p1", 1, None), ("p2", 1, None)]),
    );
    let pods = z.wait_ready(&["default/p1", "default/p2"], Duration::from_secs(60));
    let (p1, p2) = (ip_of(&pods, "p1"), ip_of(&pods, "p2"));
    tcp_reaches(&z, "p1", &p2, "p2");
    assert_eq!(status(&z, &node)["datapath"], "dpdk");
    let vswitchd_pid = || {
        std::fs::read_to_string(z.dir.join("node1/run/ovs-vswitchd.pid"))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let pid0 = vswitchd_pid();

    // 0. the Node annotation (any node agent's account may patch Nodes) cannot carry what
    // reaches the privileged ovs-vswitchd or the host: each such key is a configuration
    // error naming it, and ignored
    z.annotate_node(
        &node,
        BTreeMap::from([(
            CONFIG.to_string(),
            json!({"extraEalArgs": "-d /nonexistent/zovn-evil.so",
                "hugepages": {"allocate": true}, "cpuDmaLatencyUs": 0})
            .to_string(),
        )]),
    );
    let s = wait_status(&z, &node, "file-only keys refused in the annotation", |s| {
        let e = s["errors"].to_string();
        ["extraEalArgs", "hugepages.allocate", "cpuDmaLatencyUs"]
            .iter()
            .all(|k| e.contains(&format!("{k} in the annotation")))
    });
    assert_eq!(s["datapath"], "dpdk", "{s:#}");
    assert!(
        !agent_holds_pm_qos(&z),
        "no PM QoS request from the annotation"
    );
    assert_eq!(vswitchd_pid(), pid0, "nothing of it reached ovs-vswitchd");
    z.annotate_node(
        &node,
        BTreeMap::from([(CONFIG.to_string(), "{}".to_string())]),
    );
    // in the agent's file (an administrator's), an EAL option outside the allowlist (`-d`
    // loads a shared object into the privileged ovs-vswitchd) is still an error naming it;
    // DPDK keeps running
    set_file_config(&z, json!({"extraEalArgs": "-d /nonexistent/zovn-evil.so"}));
    let s = wait_status(&z, &node, "the -d option refused", |s| {
        s["errors"]
            .to_string()
            .contains("\\\"-d\\\" is refused (loads a shared object")
    });
    assert_eq!(s["datapath"], "dpdk", "{s:#}");
    assert_eq!(vswitchd_pid(), pid0, "no restart for a refused argument");

    // 1. DPDK init fails for real: an allowed EAL option with a value DPDK rejects
    set_file_config(&z, json!({"extraEalArgs": "--iova-mode=zovn-bogus"}));
    let s = wait_status(&z, &node, "fallback to afxdp (dpdk_init)", |s| {
        s["datapath"] == "afxdp"
            && s["fallbacks"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f["reason"] == "dpdk_init"))
    });
    assert_eq!(s["dpdkInitialized"], false, "{s:#}");
    assert!(
        s["reason"]
            .as_str()
            .is_some_and(|r| r.contains("DPDK initialisation failed")),
        "{s:#}"
    );
    assert_ne!(
        vswitchd_pid(),
        pid0,
        "the agent restarted ovs-vswitchd to apply dpdk-extra"
    );
    let log = std::fs::read_to_string(z.dir.join("node1/log/ovs-vswitchd.log")).unwrap_or_default();
    assert!(
        log.contains("zovn-bogus"),
        "DPDK saw the argument (and failed on it)"
    );
    assert!(has_event(
        &events(&z),
        &node,
        "DatapathFallback",
        "DPDK initialisation failed"
    ));
    // the existing pods regain connectivity on the restarted ovs-vswitchd
    tcp_reaches(&z, "p1", &p2, "p2");
    pings(&z, "p2", &p1);
    // an agent restart decides again from scratch: DPDK is retried, fails, same fallback
    restart_agent(&z);
    let s = wait_status(&z, &node, "fallback again after an agent restart", |s| {
        s["datapath"] == "afxdp"
            && s["fallbacks"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f["reason"] == "dpdk_init"))
            && agent_log(&z).matches("datapath fallback").count() >= 1
    });
    assert_eq!(s["dpdkInitialized"], false, "{s:#}");
    tcp_reaches(&z, "p2", &p1, "p1");
    let line = "zstack_ovn_datapath_fallbacks_total{reason=\"dpdk_init\"} 1";
    wait_until(
        "the dpdk_init fallback counted",
        Duration::from_secs(10),
        || node_metrics(&scratch.prefix).contains(line),
    );

    // 2. the prerequisite returns: DPDK again, new pods on the userspace path. The node
    // also has no 2 MiB hugepages now (no DPDK process holds any, the bogus one never
    // initialised) and lets the agent allocate the 128 socket-mem 256 MiB needs; and it
    // asks for a CPU wake-up latency of 5 µs (held on the real PM QoS device). The lab's
    // `down` puts nr_hugepages back to what it was before `up`. (None rather than fewer
    // than needed: a pass between the shrink and the new annotation would see fewer pages
    // in total than the old config's socket-mem, a config error of its own — one more
    // "config" fallback than this test counts; with none it is a hugepages shortage.)
    let nr = || lab::hugepages::nr_pages_2m().expect("nr_hugepages");
    std::fs::write(lab::hugepages::NR_2M, "0\n").expect("shrink the hugepages");
    assert_eq!(nr(), 0, "no one else holds 2 MiB pages here");
    set_file_config(
        &z,
        json!({"cpuDmaLatencyUs": 5, "hugepages": {"allocate": true}}),
    );
    let s = wait_status(&z, &node, "back on dpdk", |s| {
        s["datapath"] == "dpdk" && s["dpdkInitialized"] == true
    });
    assert!(nr() >= 128, "the agent allocated the hugepages: {}", nr());
    assert!(
        s["hugepages"]["total"].as_u64().is_some_and(|t| t >= 128),
        "{s:#}"
    );
    assert!(
        agent_log(&z).contains("hugepages allocated"),
        "the agent says it allocated them"
    );
    assert_eq!(s["cpuDmaLatencyUs"], 5, "{s:#}");
    assert!(
        agent_holds_pm_qos(&z),
        "the agent holds /dev/cpu_dma_latency open"
    );
    let effective = dataplane::datapath::pm_qos::effective(std::path::Path::new("/"));
    assert!(
        effective.is_some_and(|v| v <= 5),
        "the kernel enforces at most 5 µs: {effective:?}"
    );
    assert!(
        s["fallbacks"].as_array().is_none_or(|f| f.is_empty()),
        "{s:#}"
    );
    apply(&z, subnet_and_pods(&scratch.prefix, &[("p3", 1, None)]));
    let pods = z.wait_ready(&["default/p3"], Duration::from_secs(60));
    wait_port(&z, 1, "p3", ("afxdp", "afxdp"));
    let p3 = ip_of(&pods, "p3");
    tcp_reaches(&z, "p3", &p1, "p1");
    tcp_reaches(&z, "p1", &p3, "p3");

    // 3. bad configuration: named in the status, the node keeps a working datapath
    set_file_config(
        &z,
        json!({"datapath": "turbo", "pmdCpus": "7", "socketMem": [999_999]}),
    );
    let s = wait_status(&z, &node, "config errors reported", |s| {
        s["errors"].as_array().is_some_and(|e| e.len() >= 3)
    });
    let errors = s["errors"].to_string();
    for needle in [
        "\\\"turbo\\\" is unknown",
        "CPU 7 does not exist",
        "socketMem 999999 MiB",
    ] {
        assert!(errors.contains(needle), "{needle} not in {errors}");
    }
    assert_eq!(
        s["datapath"], "afxdp",
        "socket-mem beyond the hugepages: no DPDK; {s:#}"
    );
    assert_eq!(s["pmdCpus"], "1", "derived instead of CPU 7");
    // the latency request is gone with the key: the agent closed the device
    assert!(s.get("cpuDmaLatencyUs").is_none(), "{s:#}");
    wait_until("PM QoS request released", Duration::from_secs(10), || {
        !agent_holds_pm_qos(&z)
    });
    assert!(has_event(
        &events(&z),
        &node,
        "DatapathConfigError",
        "CPU 7 does not exist"
    ));
    tcp_reaches(&z, "p1", &p3, "p3");
    tcp_reaches(&z, "p3", &p2, "p2");
    wait_until("table shows the errors", Duration::from_secs(5), || {
        z.ok(&["get", "nodes"]).contains("config error")
    });
    let line = "zstack_ovn_datapath_fallbacks_total{reason=\"config\"} 1";
    wait_until(
        "the config fallback counted",
        Duration::from_secs(10),
        || node_metrics(&scratch.prefix).contains(line),
    );

    // 4. per port: jumbo MTU with native XDP asked for → this port cannot open as AF_XDP
    // (the annotation may set both; the file back to the lab's own)
    set_file_config(&z, json!({}));
    z.annotate_node(
        &node,
        BTreeMap::from([(
            CONFIG.to_string(),
            json!({"mtu": 9000, "afxdp": {"mode": "native"}}).to_string(),
        )]),
    );
    wait_status(&z, &node, "native XDP + jumbo reported", |s| {
        s["datapath"] == "dpdk" && s["errors"].to_string().contains("native XDP")
    });
    apply(&z, subnet_and_pods(&scratch.prefix, &[("p4", 1, None)]));
    z.wait_ready(&["default/p4"], Duration::from_secs(60));
    // fast start: the switch to AF_XDP fails after the ADD, and the port stays a kernel one
    wait_event(&z, "p4", "DatapathFallback", "could not be opened");
    // fell back per port (and ovs-vswitchd has reopened it as a kernel port)
    wait_port(&z, 1, "p4", ("", "kernel"));
    let mtu = z.ok(&["exec", "default/p4", "--", "cat", "/sys/class/net/eth0/mtu"]);
    assert_eq!(
        mtu.trim(),
        "9000",
        "the node's datapath config MTU applies to pods"
    );
    assert!(has_event(
        &events(&z),
        "p4",
        "DatapathFallback",
        "could not be opened"
    ));
    tcp_reaches(&z, "p4", &p1, "p1");
    tcp_reaches(&z, "p1", &ip_of(&z.pods(), "p4"), "p4");

    // 5. fast start off: the ADD itself opens the AF_XDP port and waits for it
    z.annotate_node(
        &node,
        BTreeMap::from([(
            CONFIG.to_string(),
            json!({"afxdp": {"fastStart": false}}).to_string(),
        )]),
    );
    wait_status(&z, &node, "afxdp.fastStart false", |s| {
        s["afxdp"]["fastStart"] == false
    });
    apply(&z, subnet_and_pods(&scratch.prefix, &[("p5", 1, None)]));
    z.wait_ready(&["default/p5"], Duration::from_secs(60));
    let (ty, ofport, dp) = port_of(&z, 1, "p5");
    assert_eq!(
        (ty.as_str(), dp.as_str()),
        ("afxdp", "afxdp"),
        "AF_XDP at Ready"
    );
    assert!(ofport > 0);
    let log = agent_log(&z);
    let add = log
        .lines()
        .find(|l| l.contains("CNI ADD phases") && l.contains("default/p5"))
        .unwrap_or_else(|| panic!("no phases line for p5:\n{log}"));
    assert!(
        add.contains("datapath=afxdp") && add.contains("then=-") && !add.contains("open_ms=-1"),
        "{add}"
    );
    tcp_reaches(&z, "p5", &p1, "p1");

    // the fallbacks were counted by reason (since the agent's last start: dpdk_init and
    // config were checked in their steps)
    let metrics = node_metrics(&scratch.prefix);
    for line in [
        "zstack_ovn_datapath_fallbacks_total{reason=\"afxdp_port\"} 1",
        "zstack_ovn_port_promotions_total{result=\"fallback\"} 1",
        "zstack_ovn_datapath_info{datapath=\"dpdk\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }
    tests::record_real_run(name);
}
