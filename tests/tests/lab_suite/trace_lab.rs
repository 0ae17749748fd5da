//! `zovn trace` on a 2-node lab (kernel datapath, gateway mode off: nothing leaves the
//! cluster), through the real CLI, OVN's ovn-trace and each node's ovs-vswitchd.
//!
//! Checked:
//! - a pod isolated by a NetworkPolicy: the trace says dropped (exit 1) and names that
//!   policy; once the policy admits the client: delivered (exit 0), naming the rule;
//! - a Service: delivered to the backend the load balancer chose, named;
//! - routed between Subnets, across nodes, over UDP: delivered, the receiving node's trace
//!   (with the router's rewrites) forwarding it;
//! - cross-node: the source node's OpenFlow trace sends the packet through the tunnel to
//!   the destination's node, named, whose own trace (from its tunnel port) drops it while
//!   the policy isolates the server and forwards it once admitted;
//! - a destination with no route (nothing leaves the cluster here): dropped, "no route";
//! - IPv6 across nodes (a dual-stack Subnet): delivered, both nodes' traces forwarding;
//! - `zovn status` with Raft databases (a second lab, `--raft`): three members each, one
//!   leader, terms and lag; the NB leader killed: shown DOWN, another member leading;
//! - bad input (unknown pod, a pod without an address, a malformed port): one line,
//!   exit 2;
//! - the text stays within 80 columns; `-o json` carries the verdict and findings;
//! - `zovn status`: the central's members running, both nodes' datapath decision and why,
//!   the pod without an address and why (text within 80 columns, and JSON).

use std::time::Duration;

use serde_json::Value;
use tests::zovn::{Zovn, wait_until};

const BINS: &[&str] = &[
    "ovs-vswitchd",
    "ovsdb-server",
    "ovn-northd",
    "ovn-controller",
    "ovn-trace",
    "ovs-appctl",
];

const OBJECTS: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: tr}
---
apiVersion: network.zstack.io/v1
kind: Subnet
metadata: {name: tiny}
spec: {cidr: 10.99.0.0/30, namespaces: [tiny]}
---
apiVersion: v1
kind: Namespace
metadata: {name: tiny}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: tr, labels: {app: client}}
spec: {nodeName: NODE1, containers: [{name: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: server, namespace: tr, labels: {app: server}}
spec: {nodeName: NODE2, containers: [{name: c, ports: [{containerPort: 8080}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: tr}
spec:
  selector: {app: server}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: only-monitoring, namespace: tr}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: monitoring}}}]
---
apiVersion: network.zstack.io/v1
kind: Subnet
metadata: {name: six}
spec: {cidr: "10.97.0.0/24,fd00:97::/64", namespaces: [six]}
---
apiVersion: v1
kind: Namespace
metadata: {name: six}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: six}
spec: {nodeName: NODE1, containers: [{name: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: six}
spec: {nodeName: NODE2, containers: [{name: c, ports: [{containerPort: 8080}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: first, namespace: tiny}
spec: {nodeName: NODE2, containers: [{name: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: second, namespace: tiny}
spec: {nodeName: NODE2, containers: [{name: c}]}
"#;

const ADMIT: &str = r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: admit-client, namespace: tr}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{port: 8080}]
"#;

/// `zovn trace ARGS --dir DIR`: (exit code, stdout, stderr).
fn trace(z: &Zovn, args: &[&str]) -> (i32, String, String) {
    z.trace(args)
}

fn json(z: &Zovn, src: &str, dst: &str) -> Value {
    let (_, out, err) = trace(z, &[src, dst, "-o", "json"]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"))
}

fn within_80(text: &str) {
    for l in text.lines() {
        assert!(l.chars().count() <= 80, "longer than 80 columns: {l:?}");
    }
}

#[test]
fn trace_names_the_policy_the_backend_and_the_path() {
    if !tests::require_real(
        "trace_lab_trace_names_the_policy_the_backend_and_the_path",
        BINS,
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("trc");
    let (z, _down) = tests::zovn::cli_up(
        &s,
        &[
            "--nodes",
            "2",
            "--datapath",
            "kernel",
            "--gateway-mode",
            "off",
        ],
    );
    let p = s.prefix.clone();
    let f = s.dir.path().join("objects.yaml");
    let objects = OBJECTS
        .replace("NODE1", &format!("{p}-node1"))
        .replace("NODE2", &format!("{p}-node2"));
    std::fs::write(&f, objects).expect("write");
    z.ok(&["apply", "-f", f.to_str().expect("utf-8")]);
    z.wait_ready(&["tr/client", "tr/server"], Duration::from_secs(60));
    // the /30 has room for one pod: the other one gets no address
    let (mut with, mut without) = (String::new(), String::new());
    wait_until(
        "one tiny pod with an address, one without",
        Duration::from_secs(30),
        || {
            let pods = z.pods();
            let has = |k: &str| {
                pods.get(k)
                    .is_some_and(|p| p["status"]["podIP"].as_str().is_some())
            };
            let (a, b) = match (has("tiny/first"), has("tiny/second")) {
                (true, false) => ("tiny/first", "tiny/second"),
                (false, true) => ("tiny/second", "tiny/first"),
                _ => return false,
            };
            with = a.to_string();
            without = b.to_string();
            true
        },
    );

    // isolated: dropped, and the policy named
    let mut last = (0, String::new(), String::new());
    wait_until(
        "the trace to see the policy",
        Duration::from_secs(30),
        || {
            last = trace(&z, &["tr/client", "tr/server:8080"]);
            last.0 == 1 && last.1.contains("tr/only-monitoring")
        },
    );
    let (_, text, _) = &last;
    assert!(text.contains("DROPPED"), "{text}");
    assert!(text.contains("isolated for ingress"), "{text}");
    within_80(text);
    // cross-node: the source node sends it through the tunnel to the server's node
    assert!(
        text.contains(&format!("tunnel to node {p}-node2")),
        "{text}"
    );
    let j = json(&z, "tr/client", "tr/server:8080");
    assert_eq!(j["verdict"], "dropped");
    let denied = j["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["kind"] == "policy-denied")
        .cloned()
        .unwrap_or_else(|| panic!("no policy-denied finding: {j:#}"));
    assert_eq!(denied["pod"], "tr/server");
    assert_eq!(
        denied["isolated_by"],
        serde_json::json!(["tr/only-monitoring"])
    );
    // both nodes' OpenFlow traces: forwarded through the tunnel on the client's, dropped
    // on the server's (a to-lport ACL acts where the packet arrives)
    assert_eq!(j["physical"][0]["node"], format!("{p}-node1"));
    assert_ne!(j["physical"][0]["datapath_actions"], "drop");
    assert_eq!(j["physical"][1]["node"], format!("{p}-node2"));
    assert_eq!(j["physical"][1]["datapath_actions"], "drop", "{j:#}");

    // admitted: delivered, naming the rule
    let f2 = s.dir.path().join("admit.yaml");
    std::fs::write(&f2, ADMIT).expect("write");
    z.ok(&["apply", "-f", f2.to_str().expect("utf-8")]);
    wait_until(
        "the trace to see the admitting rule",
        Duration::from_secs(30),
        || {
            last = trace(&z, &["tr/client", "tr/server:8080"]);
            last.0 == 0
        },
    );
    let (_, text, _) = &last;
    assert!(
        text.contains("DELIVERED: delivered to pod tr/server"),
        "{text}"
    );
    assert!(
        text.contains("NetworkPolicy tr/admit-client (rule ingress[0])"),
        "{text}"
    );
    within_80(text);
    // another port is still not admitted
    assert_eq!(trace(&z, &["tr/client", "tr/server:9090"]).0, 1);

    // a Service: the backend the load balancer chose
    let (code, text, err) = trace(&z, &["tr/client", "svc/tr/web"]);
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("Service tr/web ("), "{text}");
    assert!(text.contains("chose backend"), "{text}");
    assert!(text.contains("delivered to pod tr/server"), "{text}");
    within_80(&text);

    // routed between Subnets and across nodes, UDP: the router's rewrites reach the
    // receiving node's trace, which delivers
    let (code, text, err) = trace(&z, &[with.as_str(), "tr/client:53/udp"]);
    assert_eq!(code, 0, "{text}{err}");
    assert!(
        text.contains("DELIVERED: delivered to pod tr/client"),
        "{text}"
    );
    assert!(text.contains("routed it"), "{text}");
    assert!(
        text.contains(&format!("tunnel to node {p}-node1")),
        "{text}"
    );
    assert!(
        text.contains(&format!("node {p}-node1 (OpenFlow): forwarded")),
        "{text}"
    );

    // IPv6, across nodes: from the pod's IPv6 address, both nodes forwarding
    z.wait_ready(&["six/a", "six/b"], Duration::from_secs(60));
    let b6 = z.pods()["six/b"]["status"]["podIPs"]
        .as_array()
        .and_then(|ips| {
            ips.iter()
                .filter_map(|i| i["ip"].as_str())
                .find(|ip| ip.contains(':'))
                .map(str::to_string)
        })
        .expect("six/b has an IPv6 address");
    let j = json(&z, "six/a", &format!("[{b6}]:8080"));
    assert_eq!(j["verdict"], "delivered", "{j:#}");
    assert!(
        j["source"]["ip"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("fd00:97::")),
        "{j:#}"
    );
    assert_eq!(j["physical"][0]["node"], format!("{p}-node1"), "{j:#}");
    assert_eq!(j["physical"][1]["node"], format!("{p}-node2"), "{j:#}");
    assert_ne!(j["physical"][1]["datapath_actions"], "drop", "{j:#}");

    // nothing leaves the cluster (gateway mode off): no route
    let (code, text, _) = trace(&z, &["tr/client", "198.51.100.10:8080"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("no route"), "{text}");

    // zovn status: the central, both nodes' decisions, the pod without an address
    let status = z.status(&[]);
    within_80(&status);
    for want in [
        "NB     1  running",
        "SB     1  running",
        "northd 1  running",
    ] {
        assert!(status.contains(want), "{want}: {status}");
    }
    for i in 1..=2 {
        assert!(
            status
                .lines()
                .any(|l| l.starts_with(&format!("{p}-node{i}")) && l.contains("kernel")),
            "{status}"
        );
    }
    assert!(
        status.contains(&format!("{without}: no address")),
        "{status}"
    );
    let j: Value = serde_json::from_str(&z.status(&["-o", "json"])).expect("status json");
    assert_eq!(j["nodes"].as_array().map(Vec::len), Some(2), "{j:#}");
    assert_eq!(j["nodes"][0]["reason"], "kernel as configured");
    assert!(
        j["pods"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["pod"] == without.as_str())),
        "{j:#}"
    );

    // bad input: one line, exit 2
    for (dst, src, want) in [
        ("tr/server", "tr/nosuch", "pod tr/nosuch not found"),
        ("tr/server:http", "tr/client", "port \"http\""),
        ("tr/server", without.as_str(), "has no address"),
        ("svc/tr/nosuch", "tr/client", "Service tr/nosuch not found"),
    ] {
        let (code, out, err) = trace(&z, &[src, dst]);
        assert_eq!(code, 2, "{src} → {dst}: {out}{err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "{src} → {dst}: {err}");
    }
    // no lab there: say how to start one
    let out = std::process::Command::new(&z.exe)
        .args(["trace", "tr/client", "tr/server", "--dir"])
        .arg(s.dir.path().join("no-lab-here"))
        .output()
        .expect("run zovn trace");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("zovn lab up"), "{err}");
}

/// `zovn status` on a lab whose OVN databases are 3-member Raft clusters: every member's
/// role, term and lag; a killed member shows as down, and a new leader is elected if it
/// led.
#[test]
fn status_shows_raft_roles_and_a_dead_member() {
    if !tests::require_real("trace_lab_status_shows_raft_roles_and_a_dead_member", BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("trr");
    let (z, _down) = tests::zovn::cli_up(
        &s,
        &[
            "--nodes",
            "1",
            "--raft",
            "--datapath",
            "kernel",
            "--gateway-mode",
            "off",
        ],
    );
    let status = |args: &[&str]| z.status(args);
    let j: Value = serde_json::from_str(&status(&["-o", "json"])).expect("JSON");
    let rows = |j: &Value, what: &str| -> Vec<Value> {
        j["central"]
            .as_array()
            .expect("central")
            .iter()
            .filter(|r| r["what"] == what)
            .cloned()
            .collect()
    };
    for what in ["NB", "SB"] {
        let r = rows(&j, what);
        assert_eq!(r.len(), 3, "{what}: {j:#}");
        assert_eq!(
            r.iter().filter(|m| m["role"] == "leader").count(),
            1,
            "{what}: one leader: {j:#}"
        );
        assert_eq!(
            r.iter().filter(|m| m["role"] == "follower").count(),
            2,
            "{what}: {j:#}"
        );
        for m in &r {
            assert_eq!(m["alive"], true, "{m}");
            assert!(m["term"].as_u64().is_some_and(|t| t >= 1), "{m}");
            assert!(m["uncommitted"].as_u64().is_some(), "{m}");
            assert!(m["unapplied"].as_u64().is_some(), "{m}");
        }
    }
    let text = status(&[]);
    within_80(&text);
    assert!(text.contains("leader, term"), "{text}");

    // kill the NB leader: it shows as down, and another member leads
    let lab = lab::Lab::open(&z.dir).expect("lab");
    let central = lab.central().expect("central");
    let leader = rows(&j, "NB")
        .iter()
        .find(|m| m["role"] == "leader")
        .and_then(|m| m["member"].as_u64())
        .expect("leader") as usize;
    let pid = central.members(lab::Db::Nb)[leader - 1].pid;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the NB leader");
    let mut last = Value::Null;
    wait_until(
        "status: the killed NB member down, another one leading",
        Duration::from_secs(30),
        || {
            last = serde_json::from_str(&status(&["-o", "json"])).expect("JSON");
            let r = rows(&last, "NB");
            r.iter()
                .any(|m| m["member"] == leader as u64 && m["alive"] == false)
                && r.iter()
                    .any(|m| m["member"] != leader as u64 && m["role"] == "leader")
        },
    );
    let text = status(&[]);
    assert!(text.contains(&format!("NB     {leader}  DOWN")), "{text}");
}
