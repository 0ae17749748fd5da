//! The ovsdb client against a real 3-member Raft cluster of OVN_Northbound (started by
//! `lab::Central`): it stays on the leader, follows a new leader after the old one is
//! killed, and never reports a lost transaction as committed.

use std::time::{Duration, Instant};

use lab::{Central, CentralConfig, Db, Signal};
use ovsdb::ops::row;
use ovsdb::{Client, ClientConfig, Error, MonitorRequest, Operation, Remote, Value};
use tests::nbctl::column as nbctl_column;

const NB: &str = "OVN_Northbound";
const BOUND: Duration = Duration::from_secs(30);

fn insert(name: &str, key: &str) -> Vec<Operation> {
    vec![Operation::insert(
        "Logical_Switch",
        row([
            ("name", Value::string(name)),
            ("external_ids", Value::string_map([("zovn-test", key)])),
        ]),
    )]
}

/// Polls `cond` until true, at most `bound` (for conditions outside the replica, e.g.
/// the client's status).
async fn eventually(bound: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_leader_killed_client_follows_new_leader() {
    if !tests::require_real(
        "raft_leader_killed_client_follows_new_leader",
        tests::CENTRAL_DB_BINS,
    ) {
        return;
    }
    // 3 NB + 3 SB members: one heavy test at a time on this machine
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("raft");
    let mut central = Central::start(CentralConfig {
        dir: s.dir.path().join("central"),
        raft: true,
        northd: false,
        tcp: false,
    })
    .expect("raft central starts");
    assert_eq!(central.nb_members().len(), 3);
    let leader = central.nb_leader().expect("a leader");
    let remote = |c: &Central, i: usize| -> Remote { c.nb_members()[i].remote.parse().unwrap() };

    let c = Client::connect(
        ClientConfig::parse(&central.nb_remote())
            .unwrap()
            .with_backoff(Duration::from_millis(50), Duration::from_secs(1))
            .with_request_timeout(BOUND),
    )
    .await
    .unwrap();
    assert_eq!(
        c.status().remote,
        Some(remote(&central, leader)),
        "not on the leader"
    );
    let replica = c
        .monitor(NB, vec![MonitorRequest::table("Logical_Switch")])
        .await
        .unwrap();
    c.transact(NB, insert("before", "before")).await.unwrap();

    const N: usize = 40;
    let c2 = c.clone();
    let inserter = tokio::spawn(async move {
        let mut outcomes = Vec::new();
        for i in 0..N {
            let r = c2
                .transact(NB, insert(&format!("ls{i}"), &format!("k{i}")))
                .await;
            outcomes.push(r.map(|_| ()));
        }
        outcomes
    });
    replica
        .wait_for(BOUND, |v| v.len("Logical_Switch") >= 10)
        .await
        .unwrap();
    let old_pid = central.nb_members()[leader].pid;
    central
        .kill_member(Db::Nb, leader, Signal::SIGKILL)
        .expect("kill -9 the leader");
    assert!(!lab::process::is_alive(old_pid));

    // only live members are candidates, so this is a new leader among the other two
    let new_leader = central.nb_leader().expect("a new leader");
    assert_ne!(new_leader, leader);
    let outcomes = inserter.await.unwrap();
    let lost = outcomes.iter().filter(|o| o.is_err()).count();
    eprintln!("{lost} of {N} transactions had an unknown outcome");
    for e in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        assert!(
            matches!(e, Error::ConnectionLost { .. } | Error::Timeout(_)),
            "unexpected error {e}"
        );
    }

    // The client follows the new leader, and new transactions succeed there.
    let want = remote(&central, new_leader);
    eventually(BOUND, "the client to move to the new leader", || {
        let s = c.status();
        s.connected && s.remote.as_ref() == Some(&want)
    })
    .await;
    assert!(
        central.nb_members()[new_leader]
            .cluster_status()
            .expect("cluster/status")
            .is_leader()
    );
    c.transact(NB, insert("after", "after")).await.unwrap();

    // Exactly once for every reported commit, at most once for unknown outcomes.
    let nb = &central.nb_members()[new_leader].remote;
    let listed = nbctl_column(nb, "Logical_Switch", "external_ids");
    for (i, o) in outcomes.iter().enumerate() {
        let key = format!("zovn-test=k{i}");
        let n = listed.iter().filter(|l| **l == key).count();
        match o {
            Ok(()) => assert_eq!(n, 1, "ls{i} reported committed, found {n} times"),
            Err(_) => assert!(n <= 1, "ls{i} present {n} times"),
        }
    }
    for k in ["before", "after"] {
        let key = format!("zovn-test={k}");
        assert_eq!(listed.iter().filter(|l| **l == key).count(), 1, "{k}");
    }
    // The replica converges to what the cluster holds.
    let names = nbctl_column(nb, "Logical_Switch", "name");
    replica
        .wait_for(BOUND, |v| {
            let mut got: Vec<&str> = v.rows("Logical_Switch").map(|r| r.str("name")).collect();
            got.sort();
            got == names
        })
        .await
        .unwrap();
    // The monitor resumed on the new leader with monitor_cond_since (only the missed
    // changes), not a full resend: the cluster members share the transaction history.
    let stats = replica.sync_stats();
    assert_eq!(
        stats.full_syncs, 1,
        "only the first monitor sends everything: {stats:?}"
    );
    assert!(stats.resumes >= 1, "the reconnect must resume: {stats:?}");
    c.close().await;
    central.stop().expect("stop the cluster");
}
