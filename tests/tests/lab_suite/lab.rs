//! Real-daemon tests of the `lab` crate: central (standalone, Raft), multi-node labs with
//! cross-node traffic, stale-state recovery, and an OVS-DPDK node.

use std::path::Path;
use std::time::{Duration, Instant};

use lab::wait::wait_for;
use lab::{Central, CentralConfig, Db, Dpdk, Encap, Lab, LabConfig, PodConfig, Signal};

const CENTRAL_BINS: &[&str] = &[
    "ovsdb-server",
    "ovsdb-tool",
    "ovsdb-client",
    "ovn-nbctl",
    "ovn-sbctl",
    "ovn-northd",
    "ovs-appctl",
];

#[test]
fn central_standalone_with_tcp() {
    if !tests::require_real("central_standalone_with_tcp", CENTRAL_BINS) {
        return;
    }
    let s = tests::scratch("cst");
    let t = Instant::now();
    let central = Central::start(CentralConfig {
        dir: s.dir.path().join("central"),
        raft: false,
        northd: true,
        tcp: true,
    })
    .expect("central starts");
    eprintln!("central up in {:?}", t.elapsed());
    assert!(central.nb_remote().starts_with("unix:") && !central.nb_remote().contains(','));
    let tcp = central.nb_tcp_remote().expect("tcp remote");
    let out = lab::ctl::nbctl(&tcp, &["ls-add", "sw0"])
        .and_then(|_| lab::ctl::nbctl(&central.nb_remote(), &["ls-list"]));
    assert!(out.expect("nbctl over tcp and unix").contains("sw0"));
    assert_eq!(central.nb_leader().expect("leader"), 0);
    let pids: Vec<i32> = central.daemons().iter().map(|d| d.pid).collect();
    assert_eq!(pids.len(), 3);
    central.stop().expect("stop");
    assert!(
        pids.iter().all(|p| !lab::process::is_alive(*p)),
        "all central pids gone"
    );
}

#[test]
fn central_raft_leader_failover() {
    if !tests::require_real("central_raft_leader_failover", CENTRAL_BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("raf");
    let t = Instant::now();
    let mut central = Central::start(CentralConfig {
        dir: s.dir.path().join("central"),
        raft: true,
        northd: true,
        tcp: false,
    })
    .expect("raft central starts");
    eprintln!("raft central up in {:?}", t.elapsed());
    assert_eq!(central.nb_members().len(), 3);
    assert_eq!(central.sb_members().len(), 3);
    assert_eq!(central.nb_remote().split(',').count(), 3);
    lab::ctl::nbctl(&central.nb_remote(), &["ls-add", "sw0"]).expect("write through the cluster");

    let leader = central.nb_leader().expect("a leader");
    let old_pid = central.nb_members()[leader].pid;
    central
        .kill_member(Db::Nb, leader, Signal::SIGKILL)
        .expect("kill leader");
    assert!(!lab::process::is_alive(old_pid));
    let t = Instant::now();
    let new_leader = central.nb_leader().expect("a new leader");
    eprintln!(
        "new leader {new_leader} (old {leader}) after {:?}",
        t.elapsed()
    );
    assert_ne!(new_leader, leader);
    let out = lab::ctl::nbctl(&central.nb_remote(), &["ls-list"]).expect("read after failover");
    assert!(out.contains("sw0"));

    central
        .restart_member(Db::Nb, leader)
        .expect("restart old leader");
    assert!(central.nb_members()[leader].is_alive());
    let st = central.nb_members()[leader]
        .cluster_status()
        .expect("status");
    assert_eq!(st.status.as_deref(), Some("cluster member"));

    let pids: Vec<i32> = central.daemons().iter().map(|d| d.pid).collect();
    assert_eq!(pids.len(), 7);
    central.stop().expect("stop");
    assert!(pids.iter().all(|p| !lab::process::is_alive(*p)));
}

fn lab_config(dir: &Path, prefix: &str, nodes: usize) -> LabConfig {
    LabConfig {
        nodes,
        ..LabConfig::new(dir.join("lab"), prefix)
    }
}

fn print_timings(what: &str, lab: &Lab) {
    let t = lab.timings();
    eprintln!(
        "{what}: central {:?}, nodes {:?}, chassis wait {:?}, total {:?}",
        t.central, t.nodes, t.chassis, t.total
    );
}

/// Takes the lab down and checks that nothing of it is left: no pid alive, no netns with
/// its prefix, no state dir.
fn down_and_check(lab: Lab) {
    let pids: Vec<(String, i32)> = lab
        .daemons()
        .iter()
        .map(|d| (d.name.clone(), d.pid))
        .collect();
    let prefix = lab.names().prefix().to_string();
    let dir = lab.dir().to_path_buf();
    assert!(!pids.is_empty());
    lab.down().expect("lab down");
    for (name, pid) in &pids {
        assert!(
            !lab::process::is_alive(*pid),
            "{name} (pid {pid}) still alive after down"
        );
    }
    let left: Vec<String> = lab::netns::list()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "netns left after down: {left:?}");
    assert!(!dir.exists(), "state dir {} left after down", dir.display());
}

/// Pings `dst` from `ns` until it answers (bounded).
fn ping_until_ok(ns: &str, dst: &str) {
    wait_for(
        &format!("ping {dst} from {ns}"),
        Duration::from_secs(20),
        Duration::from_millis(100),
        |last| match lab::netns::exec(ns, &["ping", "-c", "2", "-i", "0.2", "-W", "1", dst]) {
            Ok(_) => Ok(Some(())),
            Err(e) => {
                *last = Some(e.to_string());
                Ok(None)
            }
        },
    )
    .expect("cross-node ping");
}

#[test]
fn two_node_lab_cross_node_ping_and_clean_down() {
    if !tests::require_real(
        "two_node_lab_cross_node_ping_and_clean_down",
        tests::LAB_BINS,
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("two");
    let cfg = lab_config(s.dir.path(), &s.prefix, 2);
    let mut lab = Lab::up(cfg).expect("lab up");
    print_timings("2-node lab up", &lab);

    // both chassis registered, a Geneve tunnel on each node's br-int
    let chassis = lab.wait_chassis().expect("chassis");
    for n in lab.nodes() {
        assert!(
            chassis.contains(&n.system_id),
            "{} missing from {chassis:?}",
            n.system_id
        );
        let tunnels = wait_for(
            "a geneve port",
            Duration::from_secs(20),
            Duration::from_millis(20),
            |_| {
                let t = lab::node::tunnel_ports(&n.db_remote, Encap::Geneve)?;
                Ok((!t.is_empty()).then_some(t))
            },
        )
        .expect("tunnel port");
        eprintln!("node{} tunnels: {tunnels:?}", n.index);
    }

    // a logical switch with one pod on each node
    let nb = lab.nb_remote();
    lab::ctl::nbctl(&nb, &["ls-add", "ls1"]).expect("ls-add");
    let pods = [
        (1, "a1", "0a:00:00:00:01:01", "10.0.0.11"),
        (2, "b1", "0a:00:00:00:02:01", "10.0.0.21"),
    ];
    let mut netns = Vec::new();
    for (node, name, mac, ip) in pods {
        let addr = format!("{mac} {ip}");
        lab::ctl::nbctl(
            &nb,
            &[
                "lsp-add",
                "ls1",
                name,
                "--",
                "lsp-set-addresses",
                name,
                &addr,
            ],
        )
        .expect("lsp-add");
        let pod = lab
            .add_pod(&PodConfig {
                node,
                name,
                mac,
                ip_cidr: &format!("{ip}/24"),
                mtu: 1400,
            })
            .expect("add pod");
        netns.push(pod.netns);
    }
    let t = Instant::now();
    lab::ctl::nbctl(&nb, &["--wait=hv", "sync"]).expect("wait=hv sync");
    eprintln!("ports bound (wait=hv) in {:?}", t.elapsed());
    let t = Instant::now();
    ping_until_ok(&netns[0], "10.0.0.21");
    ping_until_ok(&netns[1], "10.0.0.11");
    eprintln!("cross-node ping ok in {:?}", t.elapsed());

    // status agrees
    let st = lab.status();
    assert!(st.complete && st.daemons.iter().all(|d| d.alive), "{st:?}");
    assert_eq!(st.daemons.len(), 3 + 2 * 3);
    assert!(st.netns.iter().all(|(_, exists)| *exists));

    down_and_check(lab);
}

#[test]
fn stale_state_is_cleaned_by_next_up() {
    if !tests::require_real("stale_state_is_cleaned_by_next_up", tests::LAB_BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("stl");
    let cfg = lab_config(s.dir.path(), &s.prefix, 2);
    let mut lab = Lab::up(cfg.clone()).expect("first lab up");
    let old: Vec<lab::process::DaemonRecord> = lab.daemons().into_iter().cloned().collect();
    // a running lab is not stale: a second `up` on its dir is refused and leaves it alone
    let err = Lab::up(cfg.clone()).expect_err("up over a running lab must fail");
    assert!(err.to_string().contains("already running"), "{err}");
    assert!(old.iter().all(|d| d.is_alive()));
    // crash: some daemons SIGKILLed, the rest and the netns left behind, no down
    for d in old
        .iter()
        .filter(|d| d.name == "node1/ovs-vswitchd" || d.name == "ovnnb_db")
    {
        lab::process::kill9(d).expect("kill -9");
    }
    lab.keep_running();
    drop(lab);
    assert!(old.iter().filter(|d| d.is_alive()).count() >= 5);
    assert!(lab::netns::exists(&format!("{}n1", s.prefix)));

    let lab = Lab::up(cfg).expect("up over stale state");
    print_timings("lab up over stale state", &lab);
    assert!(
        lab.timings().stale_cleanup.is_some(),
        "stale state not detected"
    );
    for d in &old {
        assert!(!d.is_alive(), "stale {} (pid {}) survived", d.name, d.pid);
    }
    assert_eq!(lab.wait_chassis().expect("chassis").len(), 2);
    down_and_check(lab);
}

fn hugepage_state() -> (u64, Vec<std::path::PathBuf>) {
    (
        lab::hugepages::nr_pages_2m().expect("nr_hugepages"),
        lab::hugepages::hugetlbfs_mounts(),
    )
}

#[test]
fn dpdk_node_initialises_and_down_restores_hugepages() {
    let mut bins = tests::LAB_BINS.to_vec();
    bins.push("/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk");
    if !tests::require_real("dpdk_node_initialises_and_down_restores_hugepages", &bins) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("dpk");
    let before = hugepage_state();
    let mut cfg = lab_config(s.dir.path(), &s.prefix, 1);
    cfg.dpdk = Dpdk::All;
    let lab = Lab::up(cfg).expect("dpdk lab up");
    print_timings("1-node DPDK lab up", &lab);
    let node = lab.node(1).expect("node1").clone();
    assert!(node.dpdk);
    let init = lab::ctl::vsctl(
        &node.db_remote,
        &["get", "Open_vSwitch", ".", "dpdk_initialized"],
    )
    .expect("get");
    assert_eq!(init.trim(), "true");
    let vswitchd = lab
        .daemons()
        .into_iter()
        .find(|d| d.name == "node1/ovs-vswitchd")
        .cloned();
    assert!(
        vswitchd
            .expect("vswitchd")
            .program
            .ends_with("ovs-vswitchd-dpdk")
    );
    let during = hugepage_state();
    assert!(during.0 >= lab::hugepages::MIN_PAGES_2M && !during.1.is_empty());
    let change = lab.manifest().hugepages.clone();
    eprintln!("hugepages before {before:?}, during {during:?}, lab changed {change:?}");
    down_and_check(lab);
    assert_eq!(hugepage_state(), before, "hugepage state not restored");
}
