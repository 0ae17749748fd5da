//! The Helm chart's start scripts (the rendered ConfigMap `zs-zstack-ovn-scripts`): every
//! one is valid bash, and they run for real on the daemons, each group in a private mount
//! and network namespace: OVN central `single` (NB, SB and northd), the `ha` script forming
//! a 3-member NB Raft cluster, the node's ovsdb-server, ovs-vswitchd and ovn-controller
//! answering the readiness probes the DaemonSet declares, and the `uplink` keeper (br-phy,
//! the NIC's address, `ovn-bridge-mappings`). Helm 3.17.2 renders the chart.

use tests::helm::{self, container, containers, named, render_profile as render};
use tests::process_group::ProcessGroup;

#[test]
fn every_start_script_is_valid_bash() {
    let Some(helm) = helm::require_helm("helm_scripts::start_scripts_parse") else {
        return;
    };
    let objs = render(&helm, "ha");
    let scripts = helm::scripts(&objs);
    assert!(scripts.len() >= 6, "{:?}", scripts.keys());
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, body) in scripts {
        let p = dir.path().join(name);
        std::fs::write(&p, body.as_str().expect("script")).expect("write");
        let out = std::process::Command::new("bash")
            .arg("-n")
            .arg(&p)
            .output()
            .expect("bash -n");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // every script a container runs is in the ConfigMap
    for o in &objs {
        for c in containers(o) {
            for a in c["command"].as_array().into_iter().flatten() {
                if let Some(s) = a.as_str().and_then(|a| a.strip_prefix("/zovn/scripts/")) {
                    assert!(scripts.contains_key(s), "{} runs missing {s}", c["name"]);
                }
            }
        }
    }
}

/// The chart's Raft start script, for real: three NB members started by
/// `ovsdb-central.sh` exactly as the ha StatefulSet runs it (member 0 creates the cluster,
/// 1 and 2 join through member 0's address), each in its own mount namespace (its own
/// `/var/lib/ovn` and `/run`) inside one private network namespace, on 127.0.0.1-3.
/// Then a member loses its disk (member 0, which created the cluster, then member 2) and
/// starts again: it joins the cluster the others serve (the same cluster id: never a second
/// cluster), kicks its former self so the cluster counts 3 servers again, serves what the
/// cluster held, and a write still commits. Then, with a writer committing every 50 ms,
/// each member restarts with its disk in turn and the leader twice: one cluster id
/// throughout, each back among 3 servers, no acknowledged write lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ha_start_script_forms_a_three_member_raft_cluster() {
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let test = "helm_scripts::the_ha_start_script_forms_a_three_member_raft_cluster";
    let Some(helm) = helm::require_helm(test) else {
        return;
    };
    if !tests::require_real(
        test,
        &["ovsdb-server", "ovsdb-tool", "ovn-nbctl", "ip", "unshare"],
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let scratch = tests::scratch("helmraft");
    let objs = render(&helm, "ha");
    let scripts = helm::write_scripts(&objs, scratch.dir.path());
    let ns = format!("{}helm", scratch.prefix);
    tests::sh(&["ip", "netns", "add", &ns]);
    struct DelNs(String);
    impl Drop for DelNs {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let _ns = DelNs(ns.clone());
    tests::sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    // each member's /run in the scratch dir: its control socket reachable from here
    let start = |i: usize| {
        let data = scratch.dir.path().join(format!("data-{i}"));
        std::fs::create_dir_all(&data).expect("mkdir");
        let run = scratch.dir.path().join(format!("run-{i}"));
        std::fs::create_dir_all(&run).expect("mkdir");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(scratch.dir.path().join(format!("member-{i}.log")))
            .expect("log");
        // its own PID namespace, as in its container: killing the member (its `unshare`,
        // whose child dies with it) kills the script and its server together
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, "unshare", "-p", "-f", "--kill-child", "bash", "-c"])
            .arg(r#"mount --bind "$RUNDIR" /run && mount --bind "$DATA" /var/lib/ovn && exec bash "$SCRIPTS/ovsdb-central.sh""#)
            .env("DATA", &data)
            .env("RUNDIR", &run)
            .env("SCRIPTS", &scripts)
            .env("DB", "nb")
            .env("MODE", "ha")
            .env("POD_NAME", format!("zs-zstack-ovn-nbdb-{i}"))
            .env("POD_IP", format!("127.0.0.{}", i + 1))
            .env("PEER0", "127.0.0.1")
            .env("PEERS", "127.0.0.1,127.0.0.2,127.0.0.3")
            .env("OVN_SSL", "false")
            .env("TLS_DIR", "/nonexistent")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start member");
        Some(tests::kube_objects::KillOnDrop(child))
    };
    let mut members: Vec<_> = (0..3).map(start).collect();
    let all = "tcp:127.0.0.1:6641,tcp:127.0.0.2:6641,tcp:127.0.0.3:6641";
    let nbctl = |db: &str, args: &[&str]| {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "ovn-nbctl",
                "--timeout=5",
                &format!("--db={db}"),
            ])
            .args(args)
            .output()
            .expect("ovn-nbctl");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // a write through the leader (ovn-nbctl finds it among the members)
    tests::kube_objects::eventually(
        "the Raft cluster accepts a write",
        Duration::from_secs(60),
        || async { nbctl(all, &["--may-exist", "ls-add", "chart-raft"]).map(|_| ()) },
    )
    .await;
    // every member holds it: each is a cluster member, not a standalone copy
    for i in 1..=3 {
        let db = format!("tcp:127.0.0.{i}:6641");
        tests::kube_objects::eventually(
            &format!("member {i} has the switch"),
            Duration::from_secs(30),
            || async {
                nbctl(&db, &["--no-leader-only", "ls-list"]).filter(|o| o.contains("chart-raft"))
            },
        )
        .await;
    }
    // the cluster's id and servers, as member `i` (0-based) sees them
    let status = |i: usize| {
        let out = Command::new("ovs-appctl")
            .arg("-t")
            .arg(scratch.dir.path().join(format!("run-{i}/ovn/ovnnb_db.ctl")))
            .args(["cluster/status", "OVN_Northbound"])
            .output()
            .expect("ovs-appctl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let cid_of = |db: &std::path::Path| {
        tests::sh(&["ovsdb-tool", "db-cid", &db.to_string_lossy()])
            .trim()
            .to_string()
    };
    let file = |i: usize| scratch.dir.path().join(format!("data-{i}/ovnnb_db.db"));
    let cid = cid_of(&file(1));
    // A member loses its disk (member 0, the one that created the cluster, then member 2):
    // it joins the cluster the others serve (never a new one) and kicks its former self,
    // so the cluster has 3 servers again, and it serves what the cluster holds.
    for lost in [0usize, 2] {
        members[lost] = None; // killed and reaped
        std::fs::remove_file(file(lost)).expect("wipe the member's file");
        members[lost] = start(lost);
        let db = format!("tcp:127.0.0.{}:6641", lost + 1);
        tests::kube_objects::eventually(
            &format!("member {lost} back with the switch after losing its disk"),
            Duration::from_secs(60),
            || async {
                nbctl(&db, &["--no-leader-only", "ls-list"]).filter(|o| o.contains("chart-raft"))
            },
        )
        .await;
        assert_eq!(
            cid_of(&file(lost)),
            cid,
            "member {lost} is in another cluster"
        );
        let other = (lost + 1) % 3;
        let t = std::time::Instant::now();
        loop {
            let st = status(other);
            if st.matches(" at tcp:").count() == 3 && st.contains("Role: ") {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "not 3 servers again after member {lost} rejoined:\n{st}\nits own:\n{}\n{}",
                status(lost),
                std::fs::read_to_string(scratch.dir.path().join(format!("member-{lost}.log")))
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| !l.contains("misrouted"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // a write still commits (a quorum of the 3)
        nbctl(all, &["ls-add", &format!("after-loss-{lost}")])
            .unwrap_or_else(|| panic!("a write after member {lost} rejoined"));
    }
    // Restarts with their disks (a member pod deleted, a node drained): each member in
    // turn, then the leader twice, while a writer commits through the cluster. Each member
    // rejoins its own cluster from its own log: one cluster id throughout, 3 servers
    // again, and no acknowledged write lost.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let ns = ns.clone();
        tokio::task::spawn_blocking(move || {
            let (mut acked, mut refused) = (Vec::new(), Vec::new());
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let name = format!("inflight-{n}");
                n += 1;
                let out = Command::new("ip")
                    .args(["netns", "exec", &ns, "ovn-nbctl", "--timeout=5"])
                    .arg(format!("--db={all}"))
                    .args(["ls-add", &name])
                    .output()
                    .expect("ovn-nbctl");
                if out.status.success() {
                    acked.push(name);
                } else {
                    refused.push(String::from_utf8_lossy(&out.stderr).trim().to_string());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (acked, refused)
        })
    };
    let leader = || (0..3).find(|&i| status(i).contains("Role: leader"));
    let mut order: Vec<(usize, &str)> = (0..3).map(|i| (i, "in turn")).collect();
    order.extend([(usize::MAX, "leader"), (usize::MAX, "leader")]);
    for (which, why) in order {
        let i = if which == usize::MAX {
            let t = std::time::Instant::now();
            loop {
                if let Some(l) = leader() {
                    break l;
                }
                assert!(t.elapsed() < Duration::from_secs(30), "no leader");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        } else {
            which
        };
        members[i] = None; // killed and reaped; its file stays
        members[i] = start(i);
        let t = std::time::Instant::now();
        loop {
            let st = status(i);
            if st.matches(" at tcp:").count() == 3
                && (st.contains("Role: leader") || st.contains("Role: follower"))
                && st.contains("Leader: ")
                && !st.contains("Leader: unknown")
            {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "member {i} ({why}) not back in its cluster:\n{st}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for m in 0..3 {
            assert_eq!(
                cid_of(&file(m)),
                cid,
                "member {m} changed cluster after member {i} ({why}) restarted"
            );
        }
        eprintln!(
            "member {i} ({why}) restarted: back in its cluster in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (acked, refused) = writer.await.expect("writer");
    assert!(acked.len() >= 5, "only {} writes committed", acked.len());
    let held = tests::kube_objects::eventually(
        "the cluster answering a read",
        Duration::from_secs(30),
        || async { nbctl(all, &["ls-list"]) },
    )
    .await;
    let lost: Vec<&String> = acked
        .iter()
        .filter(|n| !held.contains(&format!("({n})")))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    eprintln!(
        "{} writes acknowledged during 5 restarts (3 in turn, the leader twice), none lost; \
         {} failed (a member down, a leader being elected: ovn-nbctl gives up on a refused connection): {:?}",
        acked.len(),
        refused.len(),
        refused.iter().collect::<std::collections::BTreeSet<_>>()
    );
    for i in 0..3 {
        let db = scratch.dir.path().join(format!("data-{i}/ovnnb_db.db"));
        let local = tests::sh(&["ovsdb-tool", "db-local-address", &db.to_string_lossy()]);
        assert_eq!(local.trim(), format!("tcp:127.0.0.{}:6643", i + 1));
        assert_eq!(
            tests::sh(&["ovsdb-tool", "db-is-clustered", &db.to_string_lossy()]).trim(),
            ""
        );
    }
    drop(members);
}

/// What a node-scripts test stands on: the chart rendered `single`, its scripts written
/// into a scratch dir, the heavy-test lock held. None (the test skipped, saying why)
/// without helm or one of `bins`.
struct NodeScripts {
    _heavy: tests::HeavyLock,
    scratch: tests::Scratch,
    objs: Vec<serde_json::Value>,
    scripts: std::path::PathBuf,
}

fn node_scripts(test: &str, tag: &str, bins: &[&str]) -> Option<NodeScripts> {
    let helm = helm::require_helm(test)?;
    if !tests::require_real(test, bins) {
        return None;
    }
    let _heavy = tests::heavy_lock();
    let scratch = tests::scratch(tag);
    let objs = render(&helm, "single");
    let scripts = helm::write_scripts(&objs, scratch.dir.path());
    Some(NodeScripts {
        _heavy,
        scratch,
        objs,
        scripts,
    })
}

/// The node pod's start scripts, for real: `node-ovsdb.sh`, `node-vswitchd.sh` (kernel
/// build) and `node-ovn-controller.sh` from the rendered ConfigMap, in one private mount
/// namespace (own `/run` and `/etc/openvswitch`) and network namespace, as the node pod's
/// containers share the host paths. The database is created, the chassis id is the node
/// name, and every daemon answers on its control socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_start_scripts_bring_up_ovs_and_ovn_controller() {
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let test = "helm_scripts::the_node_start_scripts_bring_up_ovs_and_ovn_controller";
    let bins = [
        "ovsdb-server",
        "ovs-vswitchd",
        "ovn-controller",
        "nsenter",
        "unshare",
    ];
    let Some(NodeScripts {
        _heavy,
        scratch,
        objs,
        scripts,
    }) = node_scripts(test, "helmnode", &bins)
    else {
        return;
    };
    let log = std::fs::File::create(scratch.dir.path().join("node.log")).expect("log");
    let node = format!("{}node", scratch.prefix);
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "-n", "--propagation", "private", "bash", "-c"])
        .arg(concat!(
            "mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /etc/openvswitch && ip link set lo up && ",
            "(bash \"$SCRIPTS/node-ovsdb.sh\" & bash \"$SCRIPTS/node-vswitchd.sh\" & ",
            "bash \"$SCRIPTS/node-ovn-controller.sh\" & wait)"
        ))
        .env("SCRIPTS", &scripts)
        .env("NODE_NAME", &node)
        .env("VSWITCHD", "/usr/lib/openvswitch-switch/ovs-vswitchd")
        .env("OVN_SSL", "false")
        .env("TLS_DIR", "/nonexistent")
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .stdin(Stdio::null());
    // the whole process group (bash and the daemons) goes when the test ends
    let group = ProcessGroup::spawn(&mut cmd).expect("start the node scripts");
    let inside = |args: &[&str]| group.inside(args);
    // each container's readiness probe, as kubelet runs it
    let node_ds = named(&objs, "DaemonSet", "zs-zstack-ovn-ovs").expect("OVS DaemonSet");
    for c in ["ovsdb-server", "ovs-vswitchd", "ovn-controller"] {
        let probe: Vec<String> = container(node_ds, c)["readinessProbe"]["exec"]["command"]
            .as_array()
            .expect("exec probe")
            .iter()
            .map(|a| a.as_str().expect("arg").to_string())
            .collect();
        let probe: Vec<&str> = probe.iter().map(String::as_str).collect();
        tests::kube_objects::eventually(
            &format!("{c}'s readiness probe {probe:?}"),
            Duration::from_secs(60),
            || async { inside(&probe) },
        )
        .await;
    }
    let id = inside(&[
        "ovs-vsctl",
        "--timeout=5",
        "get",
        "Open_vSwitch",
        ".",
        "external_ids:system-id",
    ])
    .expect("system-id");
    assert_eq!(id.trim_matches('"'), node);
    // ovs-vswitchd writes the datapath types it supports into the database
    let types = inside(&[
        "ovs-vsctl",
        "--timeout=5",
        "get",
        "Open_vSwitch",
        ".",
        "datapath_types",
    ]);
    assert!(
        types.as_deref().is_some_and(|t| t.contains("netdev")),
        "datapath_types {types:?}"
    );
    // ovn-controller must create br-int as a userspace bridge: there is no kernel module
    let dp = inside(&[
        "ovs-vsctl",
        "--timeout=5",
        "get",
        "Open_vSwitch",
        ".",
        "external_ids:ovn-bridge-datapath-type",
    ]);
    assert_eq!(dp.as_deref().map(|d| d.trim_matches('"')), Some("netdev"));
    let br_int = tests::kube_objects::eventually(
        "br-int created by ovn-controller",
        Duration::from_secs(30),
        || async {
            inside(&[
                "ovs-vsctl",
                "--timeout=5",
                "get",
                "Bridge",
                "br-int",
                "datapath_type",
            ])
        },
    )
    .await;
    assert_eq!(br_int.trim_matches('"'), "netdev");
}

/// Two OVS pods on one node, for real (a node pool renamed: the old DaemonSet's pod still
/// stopping while the new one's starts): pod B's `node-ovsdb.sh`, `node-vswitchd.sh` and
/// `node-ovn-controller.sh` wait while pod A's daemons run, instead of failing on their
/// pidfiles (which crash-looped the containers: kubelet's back-off, a 47 s gap); once A's
/// scripts get SIGTERM, B's daemons start on B's own ovsdb-server and answer, none of B's
/// scripts having exited.
#[test]
fn a_new_pods_node_scripts_wait_for_the_old_pods_daemons() {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::Duration;
    use tests::zovn::{alive, wait_until};
    let test = "helm_scripts::a_new_pods_node_scripts_wait_for_the_old_pods_daemons";
    let bins = [
        "ovsdb-server",
        "ovs-vswitchd",
        "ovn-controller",
        "nsenter",
        "unshare",
        "flock",
    ];
    let Some(NodeScripts {
        _heavy,
        scratch,
        objs: _,
        scripts,
    }) = node_scripts(test, "helmtwo", &bins)
    else {
        return;
    };
    let dir = scratch.dir.path();
    let names = ["node-ovsdb", "node-vswitchd", "node-ovn-controller"];
    let node = format!("{}node", scratch.prefix);
    let env = |c: &mut Command| {
        c.env("SCRIPTS", &scripts)
            .env("DIR", dir)
            .env("NODE_NAME", &node)
            .env("VSWITCHD", "/usr/lib/openvswitch-switch/ovs-vswitchd")
            .env("OVN_SSL", "false")
            .env("TLS_DIR", "/nonexistent")
            .stdin(Stdio::null());
    };
    let log = std::fs::File::create(dir.join("a.log")).expect("log");
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "-n", "--propagation", "private", "bash", "-c"])
        .arg(concat!(
            "mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /etc/openvswitch && ip link set lo up && ",
            "(for s in node-ovsdb node-vswitchd node-ovn-controller; do ",
            "bash \"$SCRIPTS/$s.sh\" & echo $! > \"$DIR/a-$s.pid\"; done; wait); ",
            // the namespaces' anchor for `inside` once pod A's scripts are gone
            "exec sleep infinity"
        ))
        .env("POD_UID", "pod-a")
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    env(&mut cmd);
    let group = ProcessGroup::spawn(&mut cmd).expect("start pod A's scripts");
    let inside = |args: &[&str]| group.inside(args);
    let answers = |ctl: &str| inside(&["ovs-appctl", "-t", ctl, "version"]).is_some();
    let vswitchd = "/var/run/openvswitch/ovs-vswitchd.ctl";
    let controller_up = || inside(&["ovn-appctl", "-t", "ovn-controller", "version"]).is_some();
    let t = std::time::Instant::now();
    while !answers(vswitchd) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "pod A's ovs-vswitchd not up:\n{}",
            std::fs::read_to_string(dir.join("a.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_until(
        "pod A's ovn-controller",
        Duration::from_secs(60),
        controller_up,
    );
    let marker = || inside(&["cat", "/var/run/openvswitch/zovn-ovsdb.pod"]);
    assert_eq!(marker().as_deref(), Some("pod-a"));
    // pod B's containers start while A's run, in the same host paths
    let b: Vec<std::process::Child> = names
        .iter()
        .map(|s| {
            let log = std::fs::File::create(dir.join(format!("b-{s}.log"))).expect("log");
            let mut c = Command::new("nsenter");
            c.args(["-t", &group.id().to_string(), "-m", "-n", "--", "bash"])
                .arg(scripts.join(format!("{s}.sh")))
                .env("POD_UID", "pod-b")
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .process_group(group.id() as i32);
            env(&mut c);
            c.spawn().expect("pod B's script")
        })
        .collect();
    let b_log =
        |s: &str| std::fs::read_to_string(dir.join(format!("b-{s}.log"))).unwrap_or_default();
    for s in names {
        wait_until(
            &format!("pod B's {s} waiting for pod A's"),
            Duration::from_secs(30),
            || b_log(s).contains("is still stopping: waiting for it"),
        );
    }
    assert_eq!(
        marker().as_deref(),
        Some("pod-a"),
        "B's server started beside A's"
    );
    assert!(answers(vswitchd), "pod A's ovs-vswitchd disturbed by pod B");
    // pod A goes: kubelet's SIGTERM to each of its containers
    let a_pids: Vec<i32> = names
        .iter()
        .map(|s| {
            std::fs::read_to_string(dir.join(format!("a-{s}.pid")))
                .expect("pod A's pid")
                .trim()
                .parse()
                .expect("a pid")
        })
        .collect();
    for &pid in &a_pids {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("SIGTERM pod A's script");
    }
    let t = std::time::Instant::now();
    while marker().as_deref() != Some("pod-b") {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "pod B's own ovsdb-server not up: A:\n{}\nB:\n{}\n{:?}",
            std::fs::read_to_string(dir.join("a.log")).unwrap_or_default(),
            b_log("node-ovsdb"),
            inside(&["ps", "-eo", "pid,args"]),
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_until("pod B's ovs-vswitchd", Duration::from_secs(60), || {
        answers(vswitchd)
    });
    wait_until(
        "pod B's ovn-controller",
        Duration::from_secs(60),
        controller_up,
    );
    for &pid in &a_pids {
        wait_until("pod A's scripts gone", Duration::from_secs(30), || {
            !alive(i64::from(pid))
        });
    }
    for (s, mut c) in names.iter().zip(b) {
        assert!(
            c.try_wait().expect("pod B's script").is_none(),
            "pod B's {s} exited (a container restart):\n{}",
            b_log(s)
        );
        assert!(
            b_log(s).contains("the previous instance is gone"),
            "pod B's {s}:\n{}",
            b_log(s)
        );
    }
}

/// OVN central `single`, for real: the pod's three containers (`ovsdb-central.sh` for NB
/// and SB, `northd.sh` on their unix sockets, as the Deployment sets them) in one private
/// mount and network namespace, each script the PID 1 of its own PID namespace as in its
/// container; a logical switch written to NB reaches SB through northd. SIGTERM to each
/// script (what kubelet sends a container) stops its daemon by that signal (status 143):
/// an OVS daemon exec'd as PID 1 ignores the signal it raises again and ends in a
/// general-protection trap (status 139).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_single_central_scripts_run_nb_sb_and_northd() {
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let test = "helm_scripts::the_single_central_scripts_run_nb_sb_and_northd";
    let Some(helm) = helm::require_helm(test) else {
        return;
    };
    if !tests::require_real(
        test,
        &[
            "ovsdb-server",
            "ovsdb-tool",
            "ovn-northd",
            "ovn-nbctl",
            "ovn-sbctl",
            "nsenter",
            "unshare",
        ],
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let scratch = tests::scratch("helmcentral");
    let objs = render(&helm, "single");
    let scripts = helm::write_scripts(&objs, scratch.dir.path());
    // northd's remotes exactly as the Deployment passes them
    let central = named(&objs, "Deployment", "zs-zstack-ovn-central").expect("central");
    let env = |name: &str| {
        container(central, "northd")["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .expect("northd env")
            .to_string()
    };
    let data = scratch.dir.path().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    // the chart's PKI as rendered: central's Secret where the pod mounts it, the
    // controller's certificate for the clients below
    let tls = scratch.dir.path().join("tls");
    let client = scratch.dir.path().join("client");
    helm::write_secret(&objs, "zs-zstack-ovn-ovn-central-tls", &tls);
    helm::write_secret(&objs, "zs-zstack-ovn-ovn-controller-tls", &client);
    let log = std::fs::File::create(scratch.dir.path().join("central.log")).expect("log");
    let sb_env = |name: &str| {
        container(central, "sbdb")["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .unwrap_or_else(|| panic!("sbdb env {name}"))
            .replace("/etc/zstack-ovn/tls", &tls.display().to_string())
    };
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "-n", "--propagation", "private", "bash", "-c"])
        .arg(concat!(
            "mount -t tmpfs tmpfs /run && mount --bind \"$DATA\" /var/lib/ovn && ip link set lo up && ",
            "pid1() { unshare -p -f bash \"$SCRIPTS/$2\"; echo \"$1 exited $?\"; }; ",
            "(DB=nb pid1 nb ovsdb-central.sh & DB=sb SB_RBAC=\"$SB_RBAC_SB\" SSL_CA=\"$SSL_CA_SB\" pid1 sb ovsdb-central.sh & ",
            "pid1 northd northd.sh & wait)"
        ))
        .env("SCRIPTS", &scripts)
        .env("DATA", &data)
        .env("MODE", "single")
        .env("POD_IP", "127.0.0.1")
        .env("NB_REMOTE", env("NB_REMOTE"))
        .env("SB_REMOTE", env("SB_REMOTE"))
        .env("OVN_SSL", "true")
        .env("TLS_DIR", &tls)
        .env("SB_RBAC_SB", sb_env("SB_RBAC"))
        .env("SSL_CA_SB", sb_env("SSL_CA"))
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .stdin(Stdio::null());
    // the whole process group (bash and the daemons) goes when the test ends
    let group = ProcessGroup::spawn(&mut cmd).expect("start the central scripts");
    let inside = |args: &[&str]| group.inside(args);
    let key = format!("--private-key={}", client.join("tls.key").display());
    let cert = format!("--certificate={}", client.join("tls.crt").display());
    let ca = format!("--ca-cert={}", client.join("ca.crt").display());
    // clients reach the servers on the pod address (what the Services target), over TLS
    tests::kube_objects::eventually("NB accepts a switch", Duration::from_secs(60), || async {
        inside(&[
            "ovn-nbctl",
            "--timeout=5",
            &key,
            &cert,
            &ca,
            "--db=ssl:127.0.0.1:6641",
            "--may-exist",
            "ls-add",
            "chart-single",
        ])
    })
    .await;
    tests::kube_objects::eventually(
        "northd puts it into SB, served on TLS with role=ovn-controller",
        Duration::from_secs(60),
        || async {
            inside(&[
                "ovn-sbctl",
                "--timeout=5",
                &key,
                &cert,
                &ca,
                "--db=ssl:127.0.0.1:6642",
                "--bare",
                "--columns=external_ids",
                "list",
                "Datapath_Binding",
            ])
            .filter(|o| o.contains("chart-single"))
        },
    )
    .await;
    let conn = inside(&[
        "ovn-sbctl",
        "--db=unix:/var/run/ovn/ovnsb_db.sock",
        "--bare",
        "--columns=target,role",
        "list",
        "Connection",
    ])
    .expect("SB connections");
    assert_eq!(
        conn.split_whitespace().collect::<Vec<_>>(),
        ["pssl:6642:127.0.0.1", "ovn-controller"]
    );
    // plain TCP: no answer on either port; the controller's certificate writes nothing to SB
    for port in ["6641", "6642"] {
        assert!(
            inside(&[
                "ovsdb-client",
                "--timeout=3",
                "list-dbs",
                &format!("tcp:127.0.0.1:{port}")
            ])
            .is_none(),
            "plain TCP answered on {port}"
        );
    }
    let write = inside(&[
        "ovsdb-client",
        "--timeout=5",
        &key,
        &cert,
        &ca,
        "transact",
        "ssl:127.0.0.1:6642",
        r#"["OVN_Southbound",{"op":"delete","table":"Datapath_Binding","where":[]}]"#,
    ])
    .unwrap_or_default();
    assert!(write.contains("permission error"), "{write}");
    assert!(data.join("ovnnb_db.db").is_file() && data.join("ovnsb_db.db").is_file());

    // kubelet stopping each container: SIGTERM to its PID 1 (the child of its `unshare`)
    let log = scratch.dir.path().join("central.log");
    let pid_ones = namespace_inits(group.id());
    assert_eq!(pid_ones.len(), 3, "nb, sb and northd: {pid_ones:?}");
    for pid in pid_ones {
        let killed = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        assert!(killed.is_ok_and(|s| s.success()), "kill -TERM {pid}");
    }
    let exits = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let exits: Vec<String> = text
            .lines()
            .filter(|l| l.contains(" exited "))
            .map(str::to_string)
            .collect();
        (exits.len() == 3).then_some(exits)
    };
    let exits = tests::kube_objects::eventually(
        "the three scripts exit after SIGTERM",
        Duration::from_secs(30),
        || async { exits() },
    )
    .await;
    for line in &exits {
        assert!(
            line.ends_with(" exited 143"),
            "a daemon stopped by SIGTERM exits by it (143), not by a trap (139): {exits:?}"
        );
    }
}

/// One run of `node-uplink.sh` in [`the_uplink_script_keeps_the_bridge_mappings_and_removes_its_own`]:
/// the chart's values, a mapping the operator set by hand before the script starts, what
/// `ovn-bridge-mappings` holds while the script runs and after its SIGTERM.
struct UplinkCase {
    set: &'static [&'static str],
    by_hand: Option<&'static str>,
    running: &'static str,
    after: Option<&'static str>,
    /// The agent wrote the uninstall flag before SIGTERM (`helm uninstall`); without it
    /// SIGTERM is a pod restart.
    uninstall: bool,
    /// A second pod's keeper (another POD_UID) started and claimed br-phy before the
    /// SIGTERM: the first one's stop must leave everything to it.
    successor: bool,
}

/// The uplink keeper, for real: `node-ovsdb.sh`, `node-vswitchd.sh` and `node-uplink.sh`
/// from the chart rendered with `tunnel.interface=eth1` (the container's env as rendered),
/// in a private mount and network namespace (its own sysfs: the script looks the NIC up
/// there) whose `eth1` (a veth) holds 192.0.2.5/24.
/// br-phy takes the NIC, its addresses and its routes (default route included);
/// `ovn-bridge-mappings` is the chart's value (the default, or the operator's list) and
/// comes back when removed by hand. SIGTERM without the agent's uninstall flag (a pod
/// restart) leaves all of it in place; with the flag it removes the mapping with br-phy and
/// puts the addresses and routes back. With `tunnel.bridgeMappings=""` a mapping the
/// operator set stays, through SIGTERM too. A keeper whose successor (a newer pod) has
/// claimed br-phy leaves it all in place at SIGTERM, even with the uninstall flag.
#[test]
fn the_uplink_script_keeps_the_bridge_mappings_and_removes_its_own() {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::Duration;
    use tests::zovn::{alive, wait_until};
    let test = "helm_scripts::the_uplink_script_keeps_the_bridge_mappings_and_removes_its_own";
    let Some(helm) = helm::require_helm(test) else {
        return;
    };
    if !tests::require_real(
        test,
        &["ovsdb-server", "ovs-vswitchd", "nsenter", "unshare", "ip"],
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let cases = [
        // the default: the NIC holding the node's address (HOST_IP)
        UplinkCase {
            set: &["--set", "tunnel.interface=auto"],
            by_hand: None,
            running: "physnet:br-phy",
            after: None,
            uninstall: false,
            successor: false,
        },
        UplinkCase {
            set: &[
                "--set-json",
                r#"tunnel.bridgeMappings="physnet:br-phy,storage:br-st""#,
            ],
            by_hand: None,
            running: "physnet:br-phy,storage:br-st",
            after: None,
            uninstall: true,
            successor: false,
        },
        UplinkCase {
            set: &["--set-json", r#"tunnel.bridgeMappings="""#],
            by_hand: Some("physnet:br-mine"),
            running: "physnet:br-mine",
            after: Some("physnet:br-mine"),
            uninstall: true,
            successor: false,
        },
        // an old release's pod still terminating while the new release's pod runs
        UplinkCase {
            set: &[],
            by_hand: None,
            running: "physnet:br-phy",
            after: None,
            uninstall: true,
            successor: true,
        },
    ];
    for case in cases {
        let what = format!(
            "{:?}{}",
            case.set,
            if case.successor { " (successor)" } else { "" }
        );
        let scratch = tests::scratch("helmupl");
        let mut set = vec!["--set", "tunnel.interface=eth1"];
        set.extend(case.set);
        let objs = helm::render_with(&helm, "single", "zs", "kube-system", &set).expect("render");
        let scripts = helm::write_scripts(&objs, scratch.dir.path());
        let node_ds = named(&objs, "DaemonSet", "zs-zstack-ovn-ovs").expect("OVS DaemonSet");
        let rendered = container(node_ds, "uplink")["env"]
            .as_array()
            .expect("uplink env");
        assert!(
            rendered.iter().any(|e| e["name"] == "POD_UID"
                && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"),
            "the uplink container's POD_UID is not the pod's UID: {rendered:?}"
        );
        let env: Vec<(String, String)> = rendered
            .iter()
            // HOST_IP and POD_UID come from the downward API: set below
            .filter(|e| e.get("value").is_some())
            .map(|e| {
                let s = |k: &str| e[k].as_str().expect("env name/value").to_string();
                (s("name"), s("value"))
            })
            .collect();
        let pidfile = scratch.dir.path().join("uplink.pid");
        let log = std::fs::File::create(scratch.dir.path().join("node.log")).expect("log");
        let mut cmd = Command::new("unshare");
        cmd.args(["-m", "-n", "--propagation", "private", "bash", "-c"])
            .arg(concat!(
                "mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /etc/openvswitch && ",
                "mount -t sysfs sysfs /sys && ip link set lo up && mkdir -p /run/zstack-ovn && ",
                "ip link add eth1 type veth peer name eth1p && ip link set eth1p up && ",
                "ip addr add 192.0.2.5/24 dev eth1 && ip -6 addr add 2001:db8:5::5/64 dev eth1 nodad && ",
                "ip link set eth1 up && ip route add default via 192.0.2.1 dev eth1 && ",
                "ip route add 198.51.100.0/24 via 192.0.2.254 dev eth1 && ",
                "ip -6 route add default via 2001:db8:5::1 dev eth1 && ",
                "(bash \"$SCRIPTS/node-ovsdb.sh\" & bash \"$SCRIPTS/node-vswitchd.sh\" & ",
                "until [ -S /var/run/openvswitch/db.sock ]; do sleep 0.1; done; ",
                "if [ -n \"$BY_HAND\" ]; then ovs-vsctl --no-wait --timeout=10 init && ",
                "ovs-vsctl --no-wait --timeout=10 set Open_vSwitch . ",
                "external_ids:ovn-bridge-mappings=\"\\\"$BY_HAND\\\"\"; fi; ",
                "bash \"$SCRIPTS/node-uplink.sh\" & echo $! > \"$PIDFILE\"; wait)"
            ))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("SCRIPTS", &scripts)
            .env("PIDFILE", &pidfile)
            .env("BY_HAND", case.by_hand.unwrap_or(""))
            .env("NODE_NAME", format!("{}node", scratch.prefix))
            .env("VSWITCHD", "/usr/lib/openvswitch-switch/ovs-vswitchd")
            .env("OVN_SSL", "false")
            .env("TLS_DIR", "/nonexistent")
            .env("UNINSTALL_FLAG", "/run/uninstall-requested")
            .env("HOST_IP", "192.0.2.5")
            .env("POD_UID", "pod-a")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .stdin(Stdio::null());
        // the whole process group (bash, the scripts, the daemons) goes when a case ends
        let group = ProcessGroup::spawn(&mut cmd).expect("start the node scripts");
        let inside = |args: &[&str]| group.inside(args);
        let vsctl = |args: &[&str]| {
            let mut a = vec!["ovs-vsctl", "--timeout=5"];
            a.extend(args);
            inside(&a)
        };
        let mappings = || {
            vsctl(&[
                "--if-exists",
                "get",
                "Open_vSwitch",
                ".",
                "external_ids:ovn-bridge-mappings",
            ])
            .map(|m| m.trim_matches('"').to_string())
            .filter(|m| !m.is_empty())
        };
        // another pod's keeper in the same namespaces (its own log)
        let keeper = |uid: &str| {
            let log = std::fs::File::create(scratch.dir.path().join(format!("uplink-{uid}.log")))
                .expect("log");
            Command::new("nsenter")
                .args(["-t", &group.id().to_string(), "-m", "-n", "--", "bash"])
                .arg(scripts.join("node-uplink.sh"))
                .envs(env.iter().map(|(k, v)| (k, v)))
                .env("UNINSTALL_FLAG", "/run/uninstall-requested")
                .env("HOST_IP", "192.0.2.5")
                .env("POD_UID", uid)
                .env("OVN_SSL", "false")
                .env("TLS_DIR", "/nonexistent")
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .stdin(Stdio::null())
                // in the group: killed with it even when an assertion fails first
                .process_group(group.id() as i32)
                .spawn()
                .expect("another uplink keeper")
        };
        // a pod's ovs-vswitchd container in the same namespaces (the group's log)
        let vswitchd_script = || {
            let log = std::fs::OpenOptions::new()
                .append(true)
                .open(scratch.dir.path().join("node.log"))
                .expect("log");
            Command::new("nsenter")
                .args(["-t", &group.id().to_string(), "-m", "-n", "--", "bash"])
                .arg(scripts.join("node-vswitchd.sh"))
                .envs(env.iter().map(|(k, v)| (k, v)))
                .env("NODE_NAME", format!("{}node", scratch.prefix))
                .env("VSWITCHD", "/usr/lib/openvswitch-switch/ovs-vswitchd")
                .env("OVN_SSL", "false")
                .env("TLS_DIR", "/nonexistent")
                .env("POD_UID", "pod-a")
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .stdin(Stdio::null())
                .process_group(group.id() as i32)
                .spawn()
                .expect("ovs-vswitchd's script")
        };
        let addr_on = |dev: &str| {
            inside(&["ip", "-4", "-o", "addr", "show", "dev", dev])
                .is_some_and(|a| a.contains("192.0.2.5/24"))
        };
        let addr6_on = |dev: &str| {
            inside(&["ip", "-6", "-o", "addr", "show", "dev", dev])
                .is_some_and(|a| a.contains("2001:db8:5::5/64"))
        };
        // the container's readiness probe, as kubelet runs it
        let t = std::time::Instant::now();
        while inside(&["test", "-e", "/var/run/zstack-ovn/uplink-ready"]).is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{what}: the uplink not ready: {:?}\n{}",
                inside(&["ip", "-o", "addr"]),
                std::fs::read_to_string(scratch.dir.path().join("node.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(addr_on("br-phy"), "{what}: the address is not on br-phy");
        assert!(!addr_on("eth1"), "{what}: the address is still on eth1");
        assert!(
            addr6_on("br-phy"),
            "{what}: the IPv6 address is not on br-phy"
        );
        assert!(
            !addr6_on("eth1"),
            "{what}: the IPv6 address is still on eth1: {:?}\n{}",
            inside(&["ip", "-6", "-o", "addr"]),
            std::fs::read_to_string(scratch.dir.path().join("node.log"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("uplink"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        // the NIC's routes (the default route: a node whose only NIC this is) moved along
        let routes_on = |dev: &str| {
            let v4 = inside(&["ip", "-4", "route", "show", "dev", dev]).unwrap_or_default();
            let v6 = inside(&["ip", "-6", "route", "show", "dev", dev]).unwrap_or_default();
            v4.contains("default via 192.0.2.1")
                && v4.contains("198.51.100.0/24 via 192.0.2.254")
                && v6.contains("default via 2001:db8:5::1")
        };
        assert!(routes_on("br-phy"), "{what}: the routes are not on br-phy");
        let log_path = scratch.dir.path().join("node.log");
        let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        assert_eq!(
            mappings().as_deref(),
            Some(case.running),
            "{what}:\n{}",
            log()
        );
        if case.by_hand.is_none() {
            // level-triggered: removed by hand, it comes back
            vsctl(&[
                "remove",
                "Open_vSwitch",
                ".",
                "external_ids",
                "ovn-bridge-mappings",
            ])
            .expect("remove the mapping");
            wait_until(
                // the keeper's next pass: 8 s apart once its addresses are in place
                &format!("{what}: the mapping back"),
                Duration::from_secs(20),
                || mappings().as_deref() == Some(case.running),
            );
        }
        let successor = case.successor.then(|| {
            // a newer pod's keeper starts while this one still runs, and claims br-phy
            let next = keeper("pod-b");
            wait_until(
                &format!("{what}: the successor owns br-phy"),
                Duration::from_secs(30),
                || {
                    vsctl(&[
                        "get",
                        "bridge",
                        "br-phy",
                        "external_ids:zstack.io/uplink-owner",
                    ])
                    .is_some_and(|o| o.trim().trim_matches('"') == "pod-b")
                },
            );
            next
        });
        if case.uninstall {
            // what the agent writes when `helm uninstall`'s pre-delete hook asks it
            inside(&["touch", "/run/uninstall-requested"]).expect("the uninstall flag");
        }
        // the pod goes: SIGTERM to the script
        let mut pid: i32 = std::fs::read_to_string(&pidfile)
            .expect("the uplink pidfile")
            .trim()
            .parse()
            .expect("a pid");
        let pod_restart = !case.uninstall && !case.successor;
        let mut second_keeper = None;
        if pod_restart {
            // first the keeper's container alone (an in-place image update): ovs-vswitchd
            // still forwards, so br-phy keeps the addresses and routes
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            )
            .expect("SIGTERM the uplink script");
            wait_until(
                &format!("{what}: the keeper stopped alone gone"),
                Duration::from_secs(20),
                || !alive(i64::from(pid)),
            );
            assert!(
                addr_on("br-phy") && addr6_on("br-phy") && !addr_on("eth1") && routes_on("br-phy"),
                "{what}: a keeper stopped alone moved the addresses or routes: {:?}\n{}",
                inside(&["ip", "-o", "addr"]),
                log()
            );
            // the keeper says why it left br-phy as it is (also when the SIGTERM lands in
            // `put_routes … >/dev/null`: its trap writes to the container's log, not there)
            assert!(
                log().contains("uplink: stopping alone, ovs-vswitchd still forwards"),
                "{what}: the keeper stopped alone without saying so; its log:\n{}",
                log()
            );
            // its next container takes br-phy as it is; then the whole pod goes:
            // ovs-vswitchd's script stops with the keeper
            let next = keeper("pod-a");
            wait_until(
                &format!("{what}: the keeper's next container ready"),
                Duration::from_secs(60),
                || inside(&["test", "-e", "/var/run/zstack-ovn/uplink-ready"]).is_some(),
            );
            for p in script_pids(group.id(), "node-vswitchd.sh") {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            pid = next.id() as i32;
            second_keeper = Some(next);
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("SIGTERM the uplink script");
        wait_until(
            &format!("{what}: the uplink script gone"),
            Duration::from_secs(15),
            || !alive(i64::from(pid)),
        );
        if let Some(mut next) = successor {
            // the old pod's stop left br-phy, the address, the routes and the mapping to
            // the successor, and the successor still keeps them
            let what = format!("{what}: after the old keeper's SIGTERM");
            assert!(
                vsctl(&["br-exists", "br-phy"]).is_some(),
                "{what}: br-phy removed"
            );
            assert!(
                addr_on("br-phy") && addr6_on("br-phy") && !addr_on("eth1"),
                "{what}: the addresses moved: {:?}",
                inside(&["ip", "-o", "addr"])
            );
            assert!(routes_on("br-phy"), "{what}: the routes left br-phy");
            assert_eq!(mappings().as_deref(), Some(case.running), "{what}");
            assert!(
                inside(&["test", "-e", "/var/run/zstack-ovn/uplink-ready"]).is_some(),
                "{what}: the successor's readiness marker removed"
            );
            assert!(
                log().contains("uplink: stopping: br-phy belongs to pod pod-b now"),
                "{what}: the old keeper did not see its successor:\n{}",
                log()
            );
            let _ = next.kill();
            let _ = next.wait();
            continue;
        }
        if !case.uninstall {
            // a pod restart: the NIC has its addresses and routes while OVS is down (the
            // node's own traffic), br-phy and the mapping stay for the next pod
            assert!(
                vsctl(&["br-exists", "br-phy"]).is_some(),
                "{what}: br-phy removed by a restart"
            );
            assert!(
                addr_on("eth1") && addr6_on("eth1"),
                "{what}: addresses not back on eth1"
            );
            assert!(
                routes_on("eth1"),
                "{what}: routes not back on eth1: {:?} {:?}\n{}",
                inside(&["ip", "-4", "route"]),
                inside(&["ip", "-6", "route"]),
                log()
                    .lines()
                    .filter(|l| !l.starts_with("20")) // all but the daemons' own log lines
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            assert_eq!(mappings().as_deref(), Some(case.running), "{what}: restart");
            if let Some(mut k) = second_keeper.take() {
                let _ = k.wait();
            }
            // the next pod: its ovs-vswitchd, then its keeper moves them onto br-phy again,
            // and off the NIC
            let mut vswitchd = vswitchd_script();
            let mut next = keeper("pod-a");
            wait_until(
                &format!("{what}: the next keeper ready"),
                Duration::from_secs(60),
                || inside(&["test", "-e", "/var/run/zstack-ovn/uplink-ready"]).is_some(),
            );
            assert!(
                addr_on("br-phy") && !addr_on("eth1"),
                "{what}: address after restart"
            );
            assert!(
                routes_on("br-phy"),
                "{what}: routes not on br-phy after restart"
            );
            assert!(
                !inside(&["ip", "-4", "route", "show", "dev", "eth1"])
                    .unwrap_or_default()
                    .contains("default"),
                "{what}: the default route left on eth1 too"
            );
            let _ = next.kill();
            let _ = next.wait();
            // the group's end stops this ovs-vswitchd (its process group)
            let _ = vswitchd.kill();
            let _ = vswitchd.wait();
            continue;
        }
        assert_eq!(mappings().as_deref(), case.after, "{what}: after SIGTERM");
        assert!(
            vsctl(&["br-exists", "br-phy"]).is_none(),
            "{what}: br-phy left"
        );
        assert!(
            routes_on("eth1"),
            "{what}: the routes are not back on eth1: {:?} {:?}\n{}",
            inside(&["ip", "-4", "route"]),
            inside(&["ip", "-6", "route"]),
            log()
        );
        assert!(addr_on("eth1"), "{what}: the address is not back on eth1");
        assert!(
            addr6_on("eth1"),
            "{what}: the IPv6 address is not back on eth1"
        );
    }
}

/// The first process of every PID namespace process group `pgid` made with
/// `unshare -p -f` (each one's only child of its `unshare`).
fn namespace_inits(pgid: u32) -> Vec<i32> {
    let arg0 = |pid: i32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .ok()
            .and_then(|c| {
                c.split(|b| *b == 0)
                    .next()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
            })
    };
    let in_group = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(2).map(str::to_string))
                .is_some_and(|g| g == pgid.to_string())
        })
    };
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|&pid| in_group(pid) && arg0(pid).as_deref() == Some("unshare"))
                .flat_map(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                        .unwrap_or_default()
                        .split_whitespace()
                        .filter_map(|c| c.parse::<i32>().ok())
                        .collect::<Vec<_>>()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The pids of process group `pgid`'s `script` processes (the script itself, not its
/// subshells).
fn script_pids(pgid: u32, script: &str) -> Vec<i32> {
    // `bash <dir>/<script>`: its second argument (a `bash -c` naming it is not it)
    let is_script = |pid: i32| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
            c.split(|b| *b == 0)
                .nth(1)
                .is_some_and(|a| String::from_utf8_lossy(a).ends_with(&format!("/{script}")))
        })
    };
    let stat = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    // after the command name: state, parent, process group
    let fields = |s: &str| -> Vec<i64> {
        s.rsplit_once(')')
            .map(|(_, r)| {
                r.split_whitespace()
                    .skip(1)
                    .take(2)
                    .filter_map(|f| f.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|&pid| {
                    let Some(f) = stat(pid).map(|s| fields(&s)) else {
                        return false;
                    };
                    f.len() == 2
                        && f[1] == i64::from(pgid)
                        && is_script(pid)
                        && !is_script(f[0] as i32)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The OpenFlow tables of every bridge in `group`'s OVS, as `ovs-ofctl -O OpenFlow15` dumps
/// them without statistics (flows, groups, meters, TLV map), for comparing two moments.
fn openflow_tables(group: &ProcessGroup, br: &str) -> String {
    let mut out = String::new();
    for what in ["dump-flows", "dump-groups", "dump-meters", "dump-tlv-map"] {
        let mut args = vec!["ovs-ofctl", "-O", "OpenFlow15", what, br];
        if what == "dump-flows" {
            args.extend(["--no-stats", "--no-names"]);
        }
        let mut lines: Vec<String> = group
            .inside(&args)
            .unwrap_or_else(|| panic!("{what} {br}"))
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.contains("reply (OF1.5)"))
            .map(str::to_string)
            .collect();
        lines.sort();
        out.push_str(&format!("{what}:\n{}\n", lines.join("\n")));
    }
    out
}

/// ovs-vswitchd restarted by its own start script, the way kubelet restarts the container
/// (issue 29): `node-vswitchd.sh` in a loop beside `node-ovsdb.sh`, in a private mount and
/// network namespace. br-int is `fail_mode=secure` with no controller, as under
/// ovn-controller: only the OpenFlow tables forward, so traffic comes back after a restart
/// only if they are restored. Two namespaces ping each other through a select group, a
/// meter and flows (and a Geneve TLV mapping) at 10 packets/s while the script gets
/// SIGTERM: the tables after the restart are the ones before, flow-restore-wait is cleared,
/// and the longest gap between two replies is printed and bounded (2 s on this machine).
/// Then the agent's restart command (`vswitchd-restart.sh`): the script starts ovs-vswitchd
/// again in place with the tables saved, the same bounds; and a crash (SIGKILL): started
/// again in place, cold.
#[test]
fn the_vswitchd_script_restores_its_openflow_tables_across_a_restart() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    use tests::zovn::{alive, wait_until};
    let test = "helm_scripts::the_vswitchd_script_restores_its_openflow_tables_across_a_restart";
    let Some(helm) = helm::require_helm(test) else {
        return;
    };
    if !tests::require_real(
        test,
        &[
            "ovsdb-server",
            "ovs-vswitchd",
            "ovs-ofctl",
            "nsenter",
            "unshare",
            "ip",
            "ping",
        ],
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let scratch = tests::scratch("helmflow");
    let objs = render(&helm, "single");
    let scripts = helm::write_scripts(&objs, scratch.dir.path());
    let log_path = scratch.dir.path().join("node.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "-n", "--propagation", "private", "bash", "-c"])
        .arg(concat!(
            "mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /etc/openvswitch && ip link set lo up && ",
            "(bash \"$SCRIPTS/node-ovsdb.sh\" & ",
            // kubelet's part: the container's process started again whenever it exits
            "(while :; do bash \"$SCRIPTS/node-vswitchd.sh\" & echo $! > /run/vswitchd-script.pid; ",
            "wait $!; echo \"vswitchd script exited: $?\"; done) & wait)"
        ))
        .env("SCRIPTS", &scripts)
        .env("NODE_NAME", format!("{}node", scratch.prefix))
        .env("VSWITCHD", "/usr/lib/openvswitch-switch/ovs-vswitchd")
        .env("OVN_SSL", "false")
        .env("TLS_DIR", "/nonexistent")
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .stdin(Stdio::null());
    let group = ProcessGroup::spawn(&mut cmd).expect("start the node scripts");
    let logs = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let sh = |script: &str| {
        group
            .inside(&["bash", "-c", script])
            .unwrap_or_else(|| panic!("{script}\n{}", logs()))
    };
    let vswitchd_up = || {
        group
            .inside(&[
                "ovs-appctl",
                "-t",
                "/var/run/openvswitch/ovs-vswitchd.ctl",
                "version",
            ])
            .is_some()
    };
    wait_until("ovs-vswitchd up", Duration::from_secs(60), vswitchd_up);
    sh(concat!(
        "set -e; ovs-vsctl --timeout=10 add-br br-int -- set bridge br-int datapath_type=netdev ",
        "fail_mode=secure protocols=OpenFlow13,OpenFlow15; ",
        "for x in a b; do ip netns add p$x; ip link add ${x}1 type veth peer name ${x}0 netns p$x; ",
        "ip -n p$x link set lo up; ip -n p$x link set ${x}0 up; ip link set ${x}1 up; ",
        "ovs-vsctl --timeout=10 add-port br-int ${x}1; done; ",
        "ip -n pa addr add 10.9.0.1/24 dev a0; ip -n pb addr add 10.9.0.2/24 dev b0; ",
        "OF='ovs-ofctl -O OpenFlow15'; ",
        "$OF add-tlv-map br-int '{class=0x102,type=0x80,len=4}->tun_metadata0'; ",
        "$OF add-meter br-int 'meter=1 pktps bands=type=drop rate=100000'; ",
        "$OF add-group br-int 'group_id=7,type=select,bucket=output:b1'; ",
        "$OF add-flow br-int 'in_port=a1,actions=group:7'; ",
        "$OF add-flow br-int 'in_port=b1,actions=meter:1,output:a1'"
    ));
    let before = openflow_tables(&group, "br-int");
    assert!(
        before.contains("group:7") && before.contains("meter:1"),
        "{before}"
    );
    // 10 packets/s, timestamped, in the background of the namespace
    sh("ip netns exec pa ping -D -i 0.1 -w 40 10.9.0.2 > /run/ping.log 2>&1 &");
    let replies = || {
        group
            .inside(&["cat", "/run/ping.log"])
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" bytes from "))
            .filter_map(|l| l.strip_prefix('[')?.split(']').next()?.parse::<f64>().ok())
            .collect::<Vec<f64>>()
    };
    wait_until(
        "pings answered through br-int",
        Duration::from_secs(20),
        || replies().len() >= 5,
    );
    let pid_of_script = || -> i64 {
        group
            .inside(&["cat", "/run/vswitchd-script.pid"])
            .and_then(|p| p.parse().ok())
            .expect("the script's pid")
    };
    let old = pid_of_script();
    let t = Instant::now();
    sh(&format!("kill -TERM {old}"));
    wait_until("the old script gone", Duration::from_secs(30), || {
        !alive(old)
    });
    wait_until("ovs-vswitchd back", Duration::from_secs(60), || {
        pid_of_script() != old && vswitchd_up()
    });
    wait_until("flow-restore-wait cleared", Duration::from_secs(30), || {
        group
            .inside(&[
                "ovs-vsctl",
                "--timeout=5",
                "get",
                "Open_vSwitch",
                ".",
                "other_config",
            ])
            .is_some_and(|c| !c.contains("flow-restore-wait"))
    });
    let restart_secs = t.elapsed().as_secs_f64();
    let n = replies().len();
    let t = Instant::now();
    while replies().len() < n + 10 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no pings answered after the restart; tables now:\n{}\nbefore:\n{before}\n{}",
            openflow_tables(&group, "br-int"),
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = openflow_tables(&group, "br-int");
    assert_eq!(
        after,
        before,
        "the tables changed over the restart\n{}",
        logs()
    );
    assert!(
        logs().contains("saved flows restored"),
        "the script did not say it restored the tables:\n{}",
        logs()
    );
    let r = replies();
    let gap = r.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    println!(
        "ovs-vswitchd restarted by SIGTERM to its script: back and forwarding after {restart_secs:.2} s; \
         longest gap between ping replies {:.0} ms ({} replies)",
        gap * 1e3,
        r.len()
    );
    assert!(
        gap < 2.0,
        "traffic stopped for {gap:.2} s over the restart\n{}",
        logs()
    );

    // the agent's restart command (start-time settings changed): the tables saved, then
    // ovs-vswitchd exits and its script, still running, starts it again in place with them
    let vswitchd_pid = || {
        group
            .inside(&["cat", "/var/run/openvswitch/ovs-vswitchd.pid"])
            .and_then(|p| p.parse::<i64>().ok())
    };
    let script = pid_of_script();
    let old_vs = vswitchd_pid().expect("ovs-vswitchd's pid");
    let n = replies().len();
    sh(&format!(
        "bash {}/vswitchd-restart.sh",
        scripts.to_str().expect("utf-8 path")
    ));
    wait_until(
        "ovs-vswitchd started again by its script",
        Duration::from_secs(60),
        || {
            vswitchd_pid().is_some_and(|p| p != old_vs)
                && vswitchd_up()
                && logs().matches("flow-restore-wait cleared").count() >= 2
        },
    );
    assert_eq!(
        pid_of_script(),
        script,
        "the script itself ended\n{}",
        logs()
    );
    assert!(
        logs().contains("starting it again with its saved tables"),
        "{}",
        logs()
    );
    let t = Instant::now();
    while replies().len() < n + 10 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no pings answered after the in-place restart\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        openflow_tables(&group, "br-int"),
        before,
        "the tables changed over the in-place restart\n{}",
        logs()
    );
    let r = replies();
    let gap = r[n.saturating_sub(1)..]
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(0.0, f64::max);
    println!(
        "ovs-vswitchd restarted in place (vswitchd-restart.sh): longest gap {:.0} ms",
        gap * 1e3
    );
    assert!(
        gap < 2.0,
        "traffic stopped for {gap:.2} s over the in-place restart\n{}",
        logs()
    );

    // a crash (SIGKILL): nothing saved; started again in place, cold
    let old_vs = vswitchd_pid().expect("ovs-vswitchd's pid");
    sh(&format!("kill -KILL {old_vs}"));
    wait_until(
        "ovs-vswitchd started again after a crash",
        Duration::from_secs(60),
        || vswitchd_pid().is_some_and(|p| p != old_vs) && vswitchd_up(),
    );
    assert_eq!(
        pid_of_script(),
        script,
        "the script itself ended\n{}",
        logs()
    );
    assert!(logs().contains("starting it again, cold"), "{}", logs());
}
