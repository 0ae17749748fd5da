//! The client against a real 3-member Raft cluster of OVN_Northbound: it stays on the
//! leader, follows a new leader after the old one is killed, and never reports a lost
//! transaction as committed.

mod common;

use std::time::Duration;

use common::*;
use ovsdb::ops::row;
use ovsdb::{Client, ClientConfig, Error, MonitorRequest, Operation, Remote, Value};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_leader_killed_client_follows_new_leader() {
    if !real_env("raft_leader_killed_client_follows_new_leader") {
        return;
    }
    let dir = tempdir("raft");
    let mut cluster = Cluster::start(dir.path());
    let leader = cluster.wait_for_leader(&[0, 1, 2], BOUND);
    let sock = |c: &Cluster, i: usize| Remote::Unix(c.members[i].sock.clone());

    let c = Client::connect(
        ClientConfig::parse(&cluster.remotes())
            .unwrap()
            .with_backoff(Duration::from_millis(50), Duration::from_secs(1))
            .with_request_timeout(BOUND),
    )
    .await
    .unwrap();
    assert_eq!(
        c.status().remote,
        Some(sock(&cluster, leader)),
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
    cluster.members[leader].kill9();

    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let new_leader = cluster.wait_for_leader(&others, BOUND);
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
    let want = sock(&cluster, new_leader);
    eventually(BOUND, "the client to move to the new leader", || {
        let s = c.status();
        s.connected && s.remote.as_ref() == Some(&want)
    })
    .await;
    assert!(cluster.members[new_leader].is_leader());
    c.transact(NB, insert("after", "after")).await.unwrap();

    // Exactly once for every reported commit, at most once for unknown outcomes.
    let nb = &cluster.members[new_leader].sock;
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
    c.close().await;
}
