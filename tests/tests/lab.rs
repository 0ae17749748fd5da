//! Real-daemon tests of the `lab` crate: central (standalone, Raft), multi-node labs with
//! cross-node traffic, stale-state recovery, and an OVS-DPDK node.

use std::time::Instant;

use lab::{Central, CentralConfig, Db, Signal};

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
