//! `zovn capture` on a real 2-node lab (`--datapath dpdk,afxdp`: node1 OVS-DPDK with a
//! vhost-user pod — the lab's testpmd "VM", its kernel's pings going through testpmd and
//! the vhost-user ring — node2 AF_XDP pod ports), through the real CLI, the real agents
//! and each node's ovs-vswitchd, where the host's tcpdump sees nothing.
//!
//! Checked:
//! - an AF_XDP pod pinging a pod on the other node: `--count N -w FILE` gives a pcap that
//!   parses and holds the pod's echo requests to the target and the replies; afterwards
//!   no Mirror, no temporary port, no tap device is left on the node;
//! - the vhost-user pod pinging: its echo requests and replies, nothing left;
//! - without `-w`: one summary line per packet (`... ICMP echo request id .. seq ..`);
//! - SIGINT to a running `zovn capture` (no count): exit 0, a valid pcap, nothing left;
//! - SIGKILL of the capturing `zstack-ovnkube-node debug capture` (its pid from the Mirror's marks): the
//!   CLI says so (exit 1); the node agent's GC removes the Mirror and port within its
//!   period, with a `CaptureLeftoverRemoved` event naming the port;
//! - bad input (unknown pod, malformed name): exit 2 with one line.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use api::pcap;
use tests::vhost_lab::{DpdkLab, vsctl};
use tests::zovn::{Zovn, alive, pod_ip, wait_until};

const PODS: &str = r#"
apiVersion: network.zstack.io/v1
kind: Subnet
metadata: {name: cap}
spec: {cidr: 10.67.0.0/16, gateway: 10.67.0.1, default: true}
---
apiVersion: v1
kind: Pod
metadata: {name: web1, namespace: default}
spec: {nodeName: node1, containers: [{name: c, image: x, ports: [{containerPort: 80}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: x2, namespace: default}
spec: {nodeName: node2, containers: [{name: c, image: x, ports: [{containerPort: 80}]}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: vm
  namespace: default
  annotations:
    network.zstack.io/vhost-user: '{"queues": 1, "owner": "0:0", "mode": "0770"}'
spec: {nodeName: node1, containers: [{name: app, image: x, ports: [{containerPort: 8080}]}]}
"#;

const MARK: &str = "external_ids:zstack.io/owner=zovn-capture";

/// `zovn capture POD ARGS --dir DIR`, stdout and stderr piped.
fn start_capture(z: &Zovn, pod: &str, args: &[&str]) -> Child {
    Command::new(&z.exe)
        .arg("capture")
        .arg(pod)
        .args(args)
        .arg("--dir")
        .arg(&z.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start zovn capture")
}

/// Waits (bounded) for `child` to exit: (code, stdout, stderr).
fn finish(mut child: Child, bound: Duration) -> (i32, String, String) {
    let t0 = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if t0.elapsed() > bound {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "zovn capture still running after {bound:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The capture rows (Mirrors, Ports, Interfaces) marked on `db`, by name.
fn capture_rows(db: &str) -> Vec<String> {
    ["Mirror", "Port", "Interface"]
        .iter()
        .flat_map(|t| {
            vsctl(db, &["--bare", "--columns=name", "find", t, MARK])
                .split_whitespace()
                .map(|n| format!("{t} {n}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The marks of the one capture Mirror on `db` (`key=value` pairs), once it exists.
fn wait_mirror(db: &str) -> std::collections::BTreeMap<String, String> {
    let mut ids = String::new();
    wait_until("the capture's Mirror", Duration::from_secs(20), || {
        ids = vsctl(
            db,
            &["--bare", "--columns=external_ids", "find", "Mirror", MARK],
        );
        !ids.is_empty()
    });
    ids.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            (
                k.trim_matches('"').to_string(),
                v.trim_matches('"').to_string(),
            )
        })
        .collect()
}

/// Nothing of a capture left on node `netns`'s OVS, no tap device.
fn assert_nothing_left(db: &str, netns: &str) {
    let rows = capture_rows(db);
    assert!(rows.is_empty(), "capture rows left: {rows:?}");
    let links = tests::sh(&["ip", "-n", netns, "-br", "link"]);
    assert!(
        !links.lines().any(|l| l.starts_with("zc")),
        "tap left: {links}"
    );
}

/// `ping -c COUNT` from `pod` to `ip` in the background (our own child, in a process
/// group of its own: [`stop`] ends the ping inside the pod too).
fn ping_bg(z: &Zovn, pod: &str, ip: &str, count: u32) -> Child {
    use std::os::unix::process::CommandExt;
    Command::new(&z.exe)
        .process_group(0)
        .args(["lab", "exec", pod, "--dir"])
        .arg(&z.dir)
        .args([
            "--",
            "ping",
            "-c",
            &count.to_string(),
            "-i",
            "0.2",
            "-W",
            "1",
            ip,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ping")
}

/// Ends a [`ping_bg`]: its whole process group (`zovn lab exec` and the ping it runs).
fn stop(mut c: Child) {
    let pgid = nix::unistd::Pid::from_raw(-(c.id() as i32));
    let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
    let _ = c.wait();
}

/// ICMP echo (type, id) of an Ethernet/IPv4 frame from `src` to `dst`.
fn echo(frame: &[u8], src: &str, dst: &str) -> Option<u8> {
    let ip = frame.get(14..)?;
    if frame.get(12..14)? != [8, 0] || ip.get(9)? != &1 {
        return None;
    }
    let a = |at: usize| {
        ip.get(at..at + 4)
            .map(|o| std::net::Ipv4Addr::new(o[0], o[1], o[2], o[3]).to_string())
    };
    if a(12)? != src || a(16)? != dst {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    ip.get(ihl).copied()
}

/// The pcap in `file` parses, and holds echo requests `from` → `to` and the replies.
fn assert_echoes(file: &Path, from: &str, to: &str) -> usize {
    let bytes = std::fs::read(file).expect("read the pcap");
    let pkts = pcap::read_all(&bytes).expect("a valid pcap");
    let summary: Vec<String> = pkts
        .iter()
        .map(|p| diag::capture::summary::summarize(&p.data))
        .collect();
    let req = pkts
        .iter()
        .filter(|p| echo(&p.data, from, to) == Some(8))
        .count();
    let rep = pkts
        .iter()
        .filter(|p| echo(&p.data, to, from) == Some(0))
        .count();
    assert!(
        req >= 1 && rep >= 1,
        "{from} → {to}: {req} requests, {rep} replies in {summary:#?}"
    );
    pkts.len()
}

#[test]
fn capture_sees_afxdp_and_vhost_user_pods_and_leaves_nothing() {
    const T: &str = "capture_lab::capture_sees_afxdp_and_vhost_user_pods_and_leaves_nothing";
    if !tests::vhost_lab::available(T) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let t_all = Instant::now();
    let s = tests::scratch("cap");
    let DpdkLab {
        lab,
        z,
        db1,
        down: _down,
        ..
    } = DpdkLab::up(&s, &["dpdk", "afxdp"], T);
    let n1 = lab.node(1).expect("node1").clone();
    let n2 = lab.node(2).expect("node2").clone();
    let file = s.dir.path().join("pods.yaml");
    std::fs::write(&file, PODS).expect("write pods");
    z.ok(&["apply", "-f", file.to_str().expect("utf-8")]);
    let pods = z.wait_ready(
        &["default/web1", "default/x2", "default/vm"],
        Duration::from_secs(120),
    );
    let ip = |k: &str| pod_ip(&pods[k]);
    let (web1, x2, vm) = (ip("default/web1"), ip("default/x2"), ip("default/vm"));
    // x2's port is AF_XDP (fast start on a veth first), vm's a vhost-user one
    wait_until("x2's port is AF_XDP", Duration::from_secs(60), || {
        vsctl(
            &n2.db_remote,
            &[
                "--bare",
                "--columns=type",
                "find",
                "Interface",
                "external_ids:iface-id=default_x2",
            ],
        ) == "afxdp"
    });
    assert_eq!(
        vsctl(
            &db1,
            &[
                "--bare",
                "--columns=type",
                "find",
                "Interface",
                "external_ids:iface-id=default_vm"
            ]
        ),
        "dpdkvhostuserclient"
    );
    tests::vhost_lab::ping(&z, "default/x2", &web1);
    tests::vhost_lab::ping(&z, "default/vm", &web1);
    eprintln!("lab and pods ready after {:?}", t_all.elapsed());

    // AF_XDP pod, across nodes, --count -w FILE
    let f1 = s.dir.path().join("x2.pcap");
    let t0 = Instant::now();
    let cap = start_capture(
        &z,
        "default/x2",
        &["--count", "8", "-w", f1.to_str().expect("utf-8")],
    );
    let ids = wait_mirror(&n2.db_remote);
    assert_eq!(
        ids.get("zstack.io/capture-iface-id").map(String::as_str),
        Some("default_x2"),
        "{ids:?}"
    );
    let ping = ping_bg(&z, "default/x2", &web1, 30);
    let (code, _, err) = finish(cap, Duration::from_secs(30));
    stop(ping);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("8 packets captured"), "{err}");
    let n = assert_echoes(&f1, &x2, &web1);
    assert_eq!(n, 8);
    assert_nothing_left(&n2.db_remote, &n2.netns);
    eprintln!("AF_XDP pod: 8 packets in {:?}", t0.elapsed());

    // the vhost-user pod (testpmd ⇄ tap; its kernel pings through the vhost-user ring)
    let f2 = s.dir.path().join("vm.pcap");
    let cap = start_capture(
        &z,
        "default/vm",
        &["--count", "8", "-w", f2.to_str().expect("utf-8")],
    );
    wait_mirror(&db1);
    let ping = ping_bg(&z, "default/vm", &web1, 30);
    let (code, _, err) = finish(cap, Duration::from_secs(30));
    stop(ping);
    assert_eq!(code, 0, "{err}");
    assert_echoes(&f2, &vm, &web1);
    assert_nothing_left(&db1, &n1.netns);

    // summary lines without -w
    let cap = start_capture(&z, "default/web1", &["--count", "4"]);
    wait_mirror(&db1);
    let ping = ping_bg(&z, "default/web1", &x2, 30);
    let (code, out, err) = finish(cap, Duration::from_secs(30));
    stop(ping);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 4, "{out}");
    assert!(
        out.contains(&format!("{web1} > {x2}: ICMP echo request id"))
            || out.contains(&format!("{x2} > {web1}: ICMP echo reply id")),
        "{out}"
    );
    eprintln!("summary lines:\n{out}");
    assert_nothing_left(&db1, &n1.netns);

    // SIGINT to the CLI alone (not its group): it forwards it and waits for the cleanup
    let f3 = s.dir.path().join("int.pcap");
    let cap = start_capture(&z, "default/x2", &["-w", f3.to_str().expect("utf-8")]);
    wait_mirror(&n2.db_remote);
    let ping = ping_bg(&z, "default/x2", &web1, 10);
    wait_until("some packets written", Duration::from_secs(10), || {
        std::fs::metadata(&f3).is_ok_and(|m| m.len() > 24 + 16)
    });
    let t0 = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(cap.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let (code, _, err) = finish(cap, Duration::from_secs(15));
    stop(ping);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("packets captured"), "{err}");
    let n = pcap::read_all(&std::fs::read(&f3).expect("read"))
        .expect("valid pcap")
        .len();
    assert!(n >= 1, "{n} packets");
    assert_nothing_left(&n2.db_remote, &n2.netns);
    eprintln!("SIGINT: {n} packets, clean exit in {:?}", t0.elapsed());

    // SIGKILL of the capturing process: the agent's GC removes what it left
    let f4 = s.dir.path().join("kill.pcap");
    let cap = start_capture(&z, "default/x2", &["-w", f4.to_str().expect("utf-8")]);
    let ids = wait_mirror(&n2.db_remote);
    let pid: i64 = ids["zstack.io/capture-pid"].parse().expect("pid");
    assert!(
        alive(pid),
        "capture pid {pid} from the Mirror is not running"
    );
    let port = format!("zc{pid}");
    let killed = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL");
    let (code, _, err) = finish(cap, Duration::from_secs(10));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("killed by signal 9"), "{err}");
    let gc = dataplane::ovs::capture_mirror::GC_PERIOD + Duration::from_secs(10);
    wait_until("the agent's GC removed the capture rows", gc, || {
        capture_rows(&n2.db_remote).is_empty()
    });
    eprintln!(
        "GC removed the leftovers {:?} after the SIGKILL",
        killed.elapsed()
    );
    assert_nothing_left(&n2.db_remote, &n2.netns);
    wait_until(
        "a CaptureLeftoverRemoved event",
        Duration::from_secs(10),
        || {
            z.items("events").iter().any(|e| {
                e["reason"] == "CaptureLeftoverRemoved"
                    && e["message"].as_str().is_some_and(|m| {
                        m.contains(&port) && m.contains("default_x2") && m.contains("gone")
                    })
            })
        },
    );
    // the agent's own ports were left alone: the pods still talk
    tests::vhost_lab::ping(&z, "default/x2", &web1);

    // bad input: one line, exit 2
    for (pod, want) in [
        ("default/nosuch", "pod default/nosuch not found"),
        // a bare name is looked up in the namespace of -n (default: `default`)
        ("nosuch", "pod default/nosuch not found"),
        ("a/b/c", "namespace/name"),
    ] {
        let (code, out, err) = finish(start_capture(&z, pod, &[]), Duration::from_secs(10));
        assert_eq!(code, 2, "{pod}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "{err}");
    }
    eprintln!("capture_lab done in {:?}", t_all.elapsed());
}
