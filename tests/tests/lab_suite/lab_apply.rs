//! The lab's object store end to end: a 2-node lab, its object-store daemon (a real
//! `zovn lab serve` process), `zovn lab apply/get/delete` on `examples/lab/`, checked
//! against the NB with `ovn-nbctl`; an invalid Subnet; an annotation change; a SIGKILLed
//! daemon restarted by `zovn lab up` (pods keep their addresses, the NB is untouched); and
//! a clean `down`.
//!
//! Needs the `zovn` binary (`target/<profile>/zovn`, built by `cargo test --workspace` or
//! `cargo build -p lab --bin zovn`; or `$ZOVN_BIN`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lab::apiserver::ApiClient;
use lab::{Lab, LabConfig};
use serde_json::Value;

/// Takes the lab in the directory down when dropped (also when the test panics).
struct DownOnDrop(PathBuf);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if let Ok(lab) = Lab::open(&self.0) {
            let _ = lab.down();
        }
    }
}

struct Zovn {
    exe: PathBuf,
    dir: PathBuf,
}

impl Zovn {
    /// Runs `zovn lab ARGS... --dir DIR`: (success, stdout, stderr).
    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(&self.exe)
            .arg("lab")
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .output()
            .expect("run zovn");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args);
        assert!(ok, "zovn lab {args:?} failed:\n{out}\n{err}");
        out
    }

    fn items(&self, kind: &str) -> Vec<Value> {
        let out = self.ok(&["get", kind, "-o", "json"]);
        let list: Value = serde_json::from_str(&out).expect("get -o json");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// Pod `ns/name` → (IP, node).
    fn pod_ips(&self) -> BTreeMap<String, (String, String)> {
        self.items("pods")
            .iter()
            .map(|p| {
                let key = format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap_or(""),
                    p["metadata"]["name"].as_str().unwrap_or("")
                );
                let nets = p["metadata"]["annotations"]["k8s.ovn.org/pod-networks"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{key} has no pod-networks: {p}"));
                let nets: Value = serde_json::from_str(nets).expect("pod-networks JSON");
                let ip = nets["default"]["ip_addresses"][0]
                    .as_str()
                    .and_then(|a| a.split('/').next())
                    .unwrap_or_else(|| panic!("{key}: no address in {nets}"))
                    .to_string();
                let node = p["spec"]["nodeName"].as_str().unwrap_or("").to_string();
                (key, (ip, node))
            })
            .collect()
    }

    fn subnet(&self, name: &str) -> Value {
        self.items("sn")
            .into_iter()
            .find(|s| s["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no Subnet {name}"))
    }

    fn wait_settled(&self) {
        let pending = ApiClient::connect(&self.dir)
            .and_then(|mut c| c.wait(Duration::from_secs(60)))
            .expect("wait request");
        assert!(pending.is_empty(), "not settled: {pending:?}");
    }
}

fn in_cidr(ip: &str, net: &str, len: u32) -> bool {
    let ip: Ipv4Addr = ip.parse().expect("ipv4");
    let net: Ipv4Addr = net.parse().expect("ipv4");
    let mask = u32::MAX << (32 - len);
    u32::from(ip) & mask == u32::from(net)
}

fn lsps(nb: &str, switch: &str) -> Vec<String> {
    let mut v: Vec<String> = tests::nbctl::nbctl(nb, &["lsp-list", switch])
        .lines()
        .filter_map(|l| l.split('(').nth(1))
        .map(|n| n.trim_end_matches(')').to_string())
        .filter(|n| !n.ends_with("ovn_cluster_router"))
        .collect();
    v.sort();
    v
}

/// Every row of the NB tables the controller writes, as text, sorted (UUIDs included).
fn nb_rows(nb: &str) -> Vec<String> {
    let mut rows = Vec::new();
    for table in [
        "Logical_Switch_Port",
        "Logical_Switch",
        "Logical_Router_Port",
    ] {
        let out = tests::nbctl::nbctl(nb, &["list", table]);
        rows.extend(out.split("\n\n").map(|r| format!("{table}: {}", r.trim())));
    }
    rows.sort();
    rows
}

fn session_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    // state ppid pgrp session
    rest.split_whitespace()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .expect("session")
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write manifest");
    p.to_string_lossy().into_owned()
}

#[test]
fn lab_apply_examples_restart_and_delete() {
    if !tests::require_real("lab_apply_examples_restart_and_delete", tests::LAB_BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let exe = lab::apiserver::zovn_exe().unwrap_or_else(|e| panic!("{e:#}"));
    let s = tests::scratch("lap");
    let dir = s.dir.path().join("lab");
    let cfg = LabConfig {
        nodes: 2,
        ..LabConfig::new(dir.clone(), &s.prefix)
    };
    let mut lab = Lab::up(cfg).expect("lab up");
    lab.keep_running();
    let _down = DownOnDrop(dir.clone());
    let api = lab.start_apiserver(&exe).expect("object store daemon");
    assert_eq!(
        session_of(api.pid),
        api.pid,
        "daemon runs in its own session"
    );
    let sock = lab::state::Layout::new(&dir).api_socket();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&sock).expect("socket").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "socket mode");
    let nb = lab.nb_remote();
    let node = |i: usize| format!("{}-node{i}", s.prefix);
    let z = Zovn {
        exe: exe.clone(),
        dir: dir.clone(),
    };
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab");
    let examples = examples.to_str().expect("utf-8 path");
    let pods_yaml = format!("{examples}/20-pods.yaml");

    // the examples: every pod addressed from its namespace's Subnet
    let out = z.ok(&["apply", "-f", examples, "--wait"]);
    for line in [
        "namespace/blue created",
        "subnet/demo created",
        "pod/demo/db created",
    ] {
        assert!(out.contains(line), "{out}");
    }
    let nodes: Vec<String> = z
        .items("nodes")
        .iter()
        .map(|n| n["metadata"]["name"].to_string())
        .collect();
    assert_eq!(
        nodes,
        [format!("\"{}\"", node(1)), format!("\"{}\"", node(2))]
    );
    let pods = z.pod_ips();
    eprintln!("pods: {pods:?}");
    assert_eq!(pods.len(), 4);
    for (key, (ip, _)) in &pods {
        let ok = if key.starts_with("blue/") {
            in_cidr(ip, "10.17.0.0", 24)
        } else {
            in_cidr(ip, "10.16.0.0", 16)
        };
        assert!(ok, "{key} got {ip}");
    }
    assert_eq!(pods["demo/db"].0, "10.16.0.100", "static IP honoured");
    assert_eq!(pods["demo/db"].1, node(2), "nodeName shorthand");
    let on1 = pods.values().filter(|(_, n)| *n == node(1)).count();
    assert_eq!(on1, 2, "spread over both nodes: {pods:?}");
    assert_eq!(lsps(&nb, "subnet-blue"), ["blue_client", "blue_dns"]);
    assert_eq!(lsps(&nb, "subnet-demo"), ["demo_db", "demo_web"]);
    let requested = tests::nbctl::nbctl(
        &nb,
        &[
            "get",
            "Logical_Switch_Port",
            "demo_db",
            "options:requested-chassis",
        ],
    );
    assert_eq!(requested.trim().trim_matches('"'), node(2));
    for name in ["demo", "blue"] {
        let st = &z.subnet(name)["status"];
        assert_eq!(st["phase"], "Active", "{name}: {st}");
        assert_eq!(st["usedIPs"], 2.0, "{name}: {st}");
    }
    let table = z.ok(&["get", "sn"]);
    eprintln!("{table}");
    assert!(
        table.contains("subnet-blue") && table.contains("Active"),
        "{table}"
    );
    let table = z.ok(&["get", "pods"]);
    eprintln!("{table}");
    assert!(
        table.contains("10.16.0.100") && table.contains("Ready"),
        "{table}"
    );

    // an invalid Subnet: Failed, with the reason
    let tmp = s.dir.path();
    let bad = write(
        tmp,
        "bad-subnet.yaml",
        "apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {name: bad}\n\
         spec: {cidr: 10.18.0.0/24, gateway: 10.19.0.1}\n",
    );
    z.ok(&["apply", "-f", &bad, "--wait"]);
    let st = &z.subnet("bad")["status"];
    assert_eq!(st["phase"], "Failed", "{st}");
    let reason = st["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("gateway 10.19.0.1 is outside cidr 10.18.0.0/24"),
        "{reason}"
    );
    let table = z.ok(&["get", "sn"]);
    assert!(
        table.contains("Failed") && table.contains("is outside cidr"),
        "{table}"
    );
    assert!(
        lsps(&nb, "subnet-demo").len() == 2,
        "a failed Subnet changes nothing else"
    );

    // an unsupported kind: nothing of the file applied
    let mixed = write(
        tmp,
        "mixed.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: extra, namespace: demo}\nspec: {containers: []}\n\
         ---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
    );
    let (ok, _, err) = z.run(&["apply", "-f", &mixed]);
    assert!(
        !ok && err.contains("Deployment") && err.contains("mixed.yaml"),
        "{err}"
    );
    assert!(!z.pod_ips().contains_key("demo/extra"), "nothing applied");

    // changed annotations: same addresses
    let changed = std::fs::read_to_string(&pods_yaml)
        .expect("pods manifest")
        .replace(
            "  labels: {app: web}\n",
            "  labels: {app: web}\n  annotations: {demo.zstack.io/rev: \"2\"}\n",
        );
    let changed = write(tmp, "pods-changed.yaml", &changed);
    let out = z.ok(&["apply", "-f", &changed, "--wait"]);
    assert!(
        out.contains("pod/demo/web configured") && out.contains("pod/demo/db unchanged"),
        "{out}"
    );
    assert_eq!(z.pod_ips(), pods, "addresses kept across an update");

    // SIGKILL the daemon; `zovn lab up` starts it again from store.json
    let before = nb_rows(&nb);
    lab::process::kill9(&api).expect("kill -9 the object store");
    let (ok, _, err) = z.run(&["get", "pods"]);
    assert!(!ok && err.contains("no object store running"), "{err}");
    let out = z.ok(&["up"]);
    assert!(out.contains("started it again"), "{out}");
    let reopened = Lab::open(&dir).expect("lab");
    let api2 = reopened.apiserver().expect("recorded").clone();
    assert_ne!(api2.pid, api.pid);
    assert!(api2.is_alive());
    z.wait_settled();
    assert_eq!(z.pod_ips(), pods, "addresses kept across a restart");
    assert_eq!(z.subnet("demo")["status"]["usedIPs"], 2.0);
    // the restarted controller wrote nothing: the NB stays exactly as it was
    for _ in 0..10 {
        assert_eq!(nb_rows(&nb), before, "NB changed after the restart");
        std::thread::sleep(Duration::from_millis(200));
    }

    // delete the pods: their ports go
    let out = z.ok(&["delete", "-f", &pods_yaml, "--wait"]);
    assert!(out.contains("pod/blue/dns deleted"), "{out}");
    assert!(lsps(&nb, "subnet-blue").is_empty() && lsps(&nb, "subnet-demo").is_empty());
    assert_eq!(z.subnet("blue")["status"]["usedIPs"], 0.0);
    let out = z.ok(&["delete", "-f", &pods_yaml]);
    assert!(out.contains("pod/demo/web not found"), "{out}");

    // down: no process, no netns, no state dir
    let pids: Vec<(String, i32)> = reopened
        .daemons()
        .iter()
        .map(|d| (d.name.clone(), d.pid))
        .collect();
    assert!(pids.iter().any(|(n, _)| n == "lab-apiserver"));
    reopened.down().expect("down");
    for (name, pid) in &pids {
        assert!(
            !lab::process::is_alive(*pid),
            "{name} (pid {pid}) alive after down"
        );
    }
    let left: Vec<String> = lab::netns::list()
        .into_iter()
        .filter(|n| n.starts_with(&s.prefix))
        .collect();
    assert!(left.is_empty(), "netns left: {left:?}");
    assert!(!dir.exists(), "state dir left");
}
