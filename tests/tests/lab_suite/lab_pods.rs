//! The lab's pod runtime end to end.
//!
//! - `runtime_with_a_stub_plugin`: a 2-node lab and its object store, a stand-in CNI
//!   plugin (a shell script answering like the shim: code 11 first, then a result) in
//!   the nodes' CNI dirs — checks what a container runtime must do: the netns, the
//!   `CNI_*` environment and stdin, retry on 11, the result recorded (READY, DATAPATH),
//!   the responder (TCP + UDP), `zovn lab exec/probe`, DEL + netns removal on delete (a
//!   failing DEL retried until it succeeds, the netns kept until then), and a `down` that
//!   leaves nothing.
//! - `pods_reach_each_other`: the real thing — agents (`zstack-ovnkube-node`) and the
//!   real shim, `examples/lab/`, every pod Ready, a TCP/UDP reachability matrix within a
//!   node and across nodes, ping, delete, down.
//!
//! Needs `zovn` (and for the second test `zstack-ovnkube-node`, `zstack-ovn-cni`) in
//! `target/<profile>/`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use tests::zovn::{
    Zovn, assert_cli_down_clean, assert_down_clean, netns_of, pod_ip, start_agents, start_lab,
    wait_until,
};

const STUB: &str = r#"#!/bin/sh
# stand-in for zstack-ovn-cni: logs the call, answers 11 to the first ADD of a container
# and fails the first two DELs after an ADD succeeded
log="$(dirname "$0")/../calls.log"
stdin=$(cat)
echo "$CNI_COMMAND|$CNI_CONTAINERID|$CNI_NETNS|$CNI_IFNAME|$CNI_ARGS|$CNI_PATH|$ZSTACK_OVN_CNI_SOCKET|$stdin" >> "$log"
case "$CNI_COMMAND" in
ADD)
  seen="$(dirname "$0")/../seen-$CNI_CONTAINERID"
  if [ ! -e "$seen" ]; then
    touch "$seen"
    echo '{"cniVersion":"1.0.0","code":11,"msg":"the node agent is not up yet"}'
    exit 1
  fi
  touch "$(dirname "$0")/../added-$CNI_CONTAINERID"
  echo "{\"cniVersion\":\"1.0.0\",\"interfaces\":[{\"name\":\"eth0\",\"mac\":\"0a:58:0a:63:00:05\",\"sandbox\":\"$CNI_NETNS\"}],\"ips\":[{\"address\":\"10.99.0.5/24\",\"interface\":0}]}"
  ;;
DEL)
  # after a successful ADD: the first DEL answers 11, the second fails, the third succeeds
  [ -e "$(dirname "$0")/../added-$CNI_CONTAINERID" ] || exit 0
  dels="$(dirname "$0")/../dels-$CNI_CONTAINERID"
  echo x >> "$dels"
  [ -e "$CNI_NETNS" ] && echo "DEL-NETNS|$CNI_CONTAINERID|present" >> "$log"
  case "$(wc -l < "$dels")" in
  1) echo '{"cniVersion":"1.0.0","code":11,"msg":"stub: the agent is busy"}'; exit 1 ;;
  2) echo '{"cniVersion":"1.0.0","code":999,"msg":"stub: DEL failed"}'; exit 1 ;;
  esac
  ;;
esac
exit 0
"#;

const STUB_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: demo}
spec:
  nodeName: node1
  containers:
    - name: c
      image: x
      ports:
        - {containerPort: 80}
        - {containerPort: 53, protocol: UDP}
---
apiVersion: v1
kind: Pod
metadata: {name: idle, namespace: demo}
spec:
  nodeName: node2
  containers: [{name: c, image: x}]
---
apiVersion: v1
kind: Pod
metadata: {name: host, namespace: demo}
spec:
  nodeName: node2
  hostNetwork: true
  containers: [{name: c, image: x}]
"#;

#[test]
fn runtime_with_a_stub_plugin() {
    if !tests::require_real("lab_pods::runtime_with_a_stub_plugin", tests::OVSDB_BINS)
        || !tests::require_real("lab_pods::runtime_with_a_stub_plugin", tests::LAB_BINS)
    {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("lpr");
    let (lab, z, _down) = start_lab(&s, 2, &[]);
    let dir = z.dir.clone();

    // what the agent would install: a conflist and the plugin, per node
    let layout = lab::state::Layout::new(&dir);
    for i in 1..=2 {
        let bin = layout.node_cni_bin(i);
        let conf = layout.node_cni_conf(i);
        std::fs::create_dir_all(&bin).expect("bin dir");
        std::fs::create_dir_all(&conf).expect("conf dir");
        let plugin = bin.join("stub-cni");
        std::fs::write(&plugin, STUB).expect("stub");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let list = serde_json::json!({"cniVersion": "1.0.0", "name": "stubnet",
            "plugins": [{"type": "stub-cni", "mtu": 1400}]});
        std::fs::write(conf.join("10-stub.conflist"), list.to_string()).expect("conflist");
    }
    let manifest = s.dir.path().join("pods.yaml");
    std::fs::write(&manifest, STUB_PODS).expect("manifest");
    z.ok(&["apply", "-f", manifest.to_str().expect("utf-8")]);

    let pods = z.wait_ready(&["demo/web", "demo/idle"], Duration::from_secs(30));
    let web = &pods["demo/web"];
    let ns = netns_of(web);
    assert!(
        ns.starts_with(&format!("{}p-", s.prefix)) && ns.len() <= 15,
        "{ns}"
    );
    assert!(lab::netns::exists(&ns));
    assert_eq!(pod_ip(web), "10.99.0.5");
    assert_eq!(web["status"]["phase"], "Running");
    assert_eq!(web["status"]["hostIP"], "172.16.0.1");
    assert_eq!(
        web["metadata"]["annotations"]["lab.zstack.io/datapath"],
        "kernel/veth"
    );
    // hostNetwork pods get no netns and no CNI call
    assert!(
        pods["demo/host"]["status"].is_null(),
        "{}",
        pods["demo/host"]
    );
    let table = z.ok(&["get", "pods"]);
    eprintln!("{table}");
    assert!(
        table.contains("DATAPATH") && table.contains("READY"),
        "{table}"
    );
    let web_line = table
        .lines()
        .find(|l| l.starts_with("demo/web"))
        .expect("web row");
    assert!(
        web_line.contains("kernel/veth") && web_line.contains("true"),
        "{web_line}"
    );

    // the calls: like a runtime (env, stdin with name + cniVersion), ADD retried after 11
    let calls = std::fs::read_to_string(layout.node(1).join("cni/calls.log")).expect("calls");
    let adds: Vec<&str> = calls.lines().filter(|l| l.starts_with("ADD|")).collect();
    assert!(adds.len() >= 2, "ADD not retried after code 11:\n{calls}");
    let f: Vec<&str> = adds[0].splitn(8, '|').collect();
    assert_eq!(f[1].len(), 64, "container id {}", f[1]);
    assert!(f[1].chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(f[2], format!("/var/run/netns/{ns}"));
    assert_eq!(f[3], "eth0");
    assert!(
        f[4].contains("K8S_POD_NAMESPACE=demo;K8S_POD_NAME=web;")
            && f[4].contains(&format!(
                "K8S_POD_UID={}",
                web["metadata"]["uid"].as_str().expect("uid")
            )),
        "{}",
        f[4]
    );
    assert_eq!(Path::new(f[5]), layout.node_cni_bin(1));
    assert_eq!(Path::new(f[6]), layout.node_cni_socket(1));
    let stdin: Value = serde_json::from_str(f[7]).expect("stdin JSON");
    assert_eq!(stdin["name"], "stubnet");
    assert_eq!(stdin["cniVersion"], "1.0.0");
    assert_eq!(stdin["type"], "stub-cni");
    assert_eq!(stdin["mtu"], 1400);

    // the responder answers inside the pod netns; exec passes the exit code through
    assert_eq!(
        z.ok(&["probe", "demo/web", "127.0.0.1:80"]).trim(),
        "demo/web"
    );
    assert_eq!(
        z.ok(&["probe", "demo/web", "127.0.0.1:53", "--udp"]).trim(),
        "demo/web"
    );
    let (code, _, err) = z.run(&["probe", "demo/web", "127.0.0.1:81", "--timeout", "500ms"]);
    assert_eq!(code, 1, "closed port reachable? {err}");
    let (code, _, _) = z.run(&["exec", "demo/web", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code, 3);
    let out = z.ok(&["exec", "demo/web", "--", "ss", "-Hltn"]);
    assert!(out.contains(":80"), "{out}");
    let (code, _, err) = z.run(&["exec", "demo/nope", "--", "true"]);
    assert_ne!(code, 0);
    assert!(err.contains("demo/nope"), "{err}");

    // delete: DEL, responder stopped, netns gone
    let rt = lab.runtime_pods().expect("pods.json");
    let responder = rt.pods["demo/web"].responder.clone().expect("responder");
    assert!(responder.is_alive());
    assert!(
        rt.pods["demo/idle"].responder.is_none(),
        "no ports, no responder"
    );
    let idle_ns = rt.pods["demo/idle"].netns.clone();
    let del = s.dir.path().join("web.yaml");
    std::fs::write(
        &del,
        // by kind, namespace and name, as kubectl deletes: no spec needed
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: demo}\n",
    )
    .expect("write");
    z.ok(&["delete", "-f", del.to_str().expect("utf-8")]);
    // a failing DEL is retried (kubelet keeps the sandbox until DEL succeeds), and the
    // record says why the pod is still there
    let mut seen = None;
    wait_until(
        "web's failed DEL on its record",
        Duration::from_secs(15),
        || {
            seen = lab
                .runtime_pods()
                .ok()
                .and_then(|f| f.pods.get("demo/web").and_then(|r| r.message.clone()))
                .filter(|m| m.contains("CNI DEL failed (attempt 2"));
            seen.is_some()
        },
    );
    let seen = seen.expect("message");
    assert!(seen.contains("stub: DEL failed"), "{seen}");
    wait_until("web torn down", Duration::from_secs(15), || {
        !lab::netns::exists(&ns) && !responder.is_alive()
    });
    wait_until("web out of pods.json", Duration::from_secs(5), || {
        lab.runtime_pods()
            .is_ok_and(|f| !f.pods.contains_key("demo/web"))
    });
    let calls = std::fs::read_to_string(layout.node(1).join("cni/calls.log")).expect("calls");
    let last_del = calls
        .lines()
        .rfind(|l| l.starts_with("DEL|"))
        .expect("a DEL call");
    assert!(
        last_del.contains("prevResult"),
        "DEL without prevResult: {last_del}"
    );
    let web_cid = rt.pods["demo/web"].container_id.clone();
    let dels = calls
        .lines()
        .filter(|l| l.starts_with(&format!("DEL|{web_cid}|")) && l.contains("prevResult"))
        .count();
    assert_eq!(
        dels, 3,
        "after the delete (DELs with the ADD result): two failed DELs, then one that \
         succeeded: {calls}"
    );
    let netns_present = calls
        .lines()
        .filter(|l| *l == format!("DEL-NETNS|{web_cid}|present"))
        .count();
    assert_eq!(netns_present, 3, "the netns stays until DEL succeeds");

    // down: the remaining pod's netns goes too
    let mut pids = vec![i64::from(responder.pid)];
    pids.extend(lab.daemons().iter().map(|d| i64::from(d.pid)));
    assert!(lab::netns::exists(&idle_ns));
    drop(lab);
    assert_down_clean(&dir, &s.prefix, &pids);
}

#[test]
fn pods_reach_each_other() {
    if !tests::require_real("lab_pods::pods_reach_each_other", tests::OVSDB_BINS)
        || !tests::require_real("lab_pods::pods_reach_each_other", tests::LAB_BINS)
    {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("lpe");
    let (mut lab, z, _down) = start_lab(&s, 2, &[]);
    let agents = start_agents(&mut lab);
    assert_eq!(agents.len(), 2);

    z.apply_example("lab");
    let keys = ["demo/web", "demo/db", "blue/dns", "blue/client"];
    let pods = z.wait_ready(&keys, Duration::from_secs(120));
    eprintln!("{}", z.ok(&["get", "pods"]));

    // the matrix: every pod → every declared port of every other pod
    let node = |k: &str| {
        pods[k]["spec"]["nodeName"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let mut same_node = 0;
    let mut cross_node = 0;
    let mut failures = Vec::new();
    for to in keys {
        let ip = pod_ip(&pods[to]);
        let ports: Vec<(i64, bool)> = pods[to]["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
            .map(|p| {
                (
                    p["containerPort"].as_i64().unwrap_or(0),
                    p["protocol"] == "UDP",
                )
            })
            .collect();
        for from in keys.iter().filter(|f| **f != to) {
            for (port, udp) in &ports {
                let target = format!("{ip}:{port}");
                let mut args = vec!["probe", from, target.as_str(), "--timeout", "3s"];
                if *udp {
                    args.push("--udp");
                }
                let (code, out, err) = z.run(&args);
                if code == 0 && out.trim() == to {
                    if node(from) == node(to) {
                        same_node += 1;
                    } else {
                        cross_node += 1;
                    }
                } else {
                    failures.push(format!("{from} → {to} {target} udp={udp}: {out}{err}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "unreachable:\n{}", failures.join("\n"));
    assert!(
        same_node > 0 && cross_node > 0,
        "{same_node} same-node, {cross_node} cross-node"
    );

    let db_ip = pod_ip(&pods["demo/db"]);
    // three echoes, one answered is enough: the pods may be moving from their start-up
    // veth to AF_XDP right now (fastStart), a 0.1-0.2 s pause of their own traffic that
    // once swallowed the single echo this sent (CI, 2026-11-29)
    let (code, out, err) = z.run(&[
        "exec", "demo/web", "--", "ping", "-c3", "-i0.3", "-W2", &db_ip,
    ]);
    assert_eq!(code, 0, "ping {db_ip}: {out}{err}");

    // delete a pod: its netns and responder go
    let rt = lab.runtime_pods().expect("pods.json");
    let web = rt.pods["demo/web"].clone();
    let responder = web.responder.clone().expect("responder");
    let del = s.dir.path().join("web.yaml");
    std::fs::write(
        &del,
        // by kind, namespace and name, as kubectl deletes: no spec needed
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: demo}\n",
    )
    .expect("write");
    z.ok(&["delete", "-f", del.to_str().expect("utf-8")]);
    wait_until("web torn down", Duration::from_secs(30), || {
        !lab::netns::exists(&web.netns) && !responder.is_alive()
    });

    let mut pids: Vec<i64> = lab.daemons().iter().map(|d| i64::from(d.pid)).collect();
    pids.extend(
        lab.runtime_pods()
            .expect("pods.json")
            .pods
            .values()
            .filter_map(|p| p.responder.as_ref().map(|r| i64::from(r.pid))),
    );
    drop(lab);
    // through the CLI, as after `make lab`: quiet but for a daemon nobody recorded
    assert_cli_down_clean(&z, &s.prefix, &pids);
}

/// Probes `from` → `to_ip:port` until it answers with `to` (bounded).
fn probe_until(z: &Zovn, from: &str, target: &str, to: &str, bound: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let (code, out, _) = z.run(&["probe", from, target, "--timeout", "1s"]);
        if code == 0 && out.trim() == to {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < bound,
            "{from} → {target} still unreachable after {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// ovs-vswitchd crashes and is restarted (same database and run dir): the pods on that node
/// regain their network without any pod being re-created, and no port is duplicated.
#[test]
fn pods_survive_an_ovs_vswitchd_restart() {
    if !tests::require_real(
        "lab_pods::pods_survive_an_ovs_vswitchd_restart",
        tests::LAB_BINS,
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("lpv");
    let (mut lab, z, _down) = start_lab(&s, 2, &[]);
    let dir = z.dir.clone();
    start_agents(&mut lab);
    z.apply_example("lab");
    let keys = ["demo/web", "demo/db", "blue/dns", "blue/client"];
    let pods = z.wait_ready(&keys, Duration::from_secs(120));
    let web_node = pods["demo/web"]["spec"]["nodeName"]
        .as_str()
        .unwrap()
        .to_string();
    let node_index = lab
        .nodes()
        .iter()
        .find(|n| n.system_id == web_node)
        .map(|n| n.index)
        .expect("web's node");
    let db = format!("{}:5432", pod_ip(&pods["demo/db"]));
    let web = format!("{}:80", pod_ip(&pods["demo/web"]));
    probe_until(&z, "demo/web", &db, "demo/db", Duration::from_secs(10));
    // The pod MTU was derived from the tunnel endpoint's interface (br-phy, 1500) minus the
    // Geneve overhead, and the agent said so.
    let mtu = z.ok(&["exec", "demo/web", "--", "cat", "/sys/class/net/eth0/mtu"]);
    assert_eq!(mtu.trim(), "1400");
    let agent_log = std::fs::read_to_string(dir.join(format!("node{node_index}/log/agent.log")))
        .expect("agent log");
    assert!(
        agent_log.contains("underlay MTU minus the encapsulation overhead")
            && agent_log.contains("br-phy"),
        "the agent logs how it chose the MTU"
    );
    let node_db = lab.node(node_index).unwrap().db_remote.clone();
    let ports_before =
        lab::ctl::vsctl(&node_db, &["--bare", "--columns=name", "list", "Interface"]).unwrap();

    let old_pid = lab
        .node(node_index)
        .unwrap()
        .daemons
        .iter()
        .find(|d| d.name.ends_with("ovs-vswitchd"))
        .unwrap()
        .pid;
    let rec = lab
        .restart_vswitchd(node_index)
        .expect("restart ovs-vswitchd");
    assert_ne!(rec.pid, old_pid);
    let cross = probe_until(&z, "demo/web", &db, "demo/db", Duration::from_secs(30));
    let into = probe_until(&z, "demo/db", &web, "demo/web", Duration::from_secs(30));
    eprintln!("connectivity back after the restart: {cross:?} (out), {into:?} (in)");
    let ports_after =
        lab::ctl::vsctl(&node_db, &["--bare", "--columns=name", "list", "Interface"]).unwrap();
    let sorted = |s: &str| {
        let mut v: Vec<String> = s
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        sorted(&ports_after),
        sorted(&ports_before),
        "same ports, none duplicated"
    );
    drop(lab);
}
