//! `ha-members` and `ha-disk-lost` of `cluster_ha`: the chart's Raft members deleted
//! while a writer commits and pods talk (see the suite's docs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::api::DeleteParams;
use serde_json::json;
use tests::e2e::objects::{create, ip_of, is_ready, node_of, sleeper};
use tests::e2e::{kubectl, wait_until};

use super::{FULLNAME, GAP_TARGET, Ha, NS, RELEASE, SYS, pods_ready, start_probe, stop_probe};

/// One clustered database of the chart.
pub struct Db {
    /// `nb` or `sb`.
    pub name: &'static str,
    schema: &'static str,
    ctl: &'static str,
    port: u16,
}

pub const DBS: [Db; 2] = [
    Db {
        name: "nb",
        schema: "OVN_Northbound",
        ctl: "/var/run/ovn/ovnnb_db.ctl",
        port: 6641,
    },
    Db {
        name: "sb",
        schema: "OVN_Southbound",
        ctl: "/var/run/ovn/ovnsb_db.ctl",
        port: 6642,
    },
];
const MEMBERS: usize = 3;
/// Where the chart keeps a member's files on its node (`ovn.standalone.hostPath`).
const HOST_PATH: &str = "/var/lib/zstack-ovn/central";

impl Db {
    fn pod(&self, k: usize) -> String {
        format!("{FULLNAME}-{}db-{k}", self.name)
    }
}

/// One member's `cluster/status`.
#[derive(Debug, Clone)]
struct Status {
    cluster_id: String,
    server_id: String,
    role: String,
    servers: usize,
}

/// Reads `ovs-appctl cluster/status` (`Cluster ID: 759e (759ee33f-…)`, `Server ID: …`,
/// `Role: leader`, and one line per server under `Servers:`).
fn parse_status(text: &str) -> Result<Status> {
    let full = |key: &str| -> Result<String> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .with_context(|| format!("no {key:?} in {text}"))?;
        // "759e (759ee33f-…)": the full id in parentheses
        Ok(line
            .split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .map_or(line.trim(), |(id, _)| id)
            .to_string())
    };
    let role = text
        .lines()
        .find_map(|l| l.strip_prefix("Role: "))
        .context("no Role")?
        .trim()
        .to_string();
    let servers = text
        .lines()
        .skip_while(|l| !l.starts_with("Servers:"))
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .filter(|l| l.contains(" at "))
        .count();
    Ok(Status {
        cluster_id: full("Cluster ID: ")?,
        server_id: full("Server ID: ")?,
        role,
        servers,
    })
}

fn status(e: &Ha, db: &Db, k: usize) -> Result<Status> {
    let out = kubectl(
        &e.kc,
        &[
            "exec",
            "-n",
            SYS,
            &db.pod(k),
            "-c",
            &format!("{}db", db.name),
            "--",
            "ovs-appctl",
            "-t",
            db.ctl,
            "cluster/status",
            db.schema,
        ],
    )?;
    parse_status(&out)
}

/// A database's members when healthy.
#[derive(Debug, Clone)]
pub struct Healthy {
    pub cluster_id: String,
    /// Server id by member ordinal.
    pub ids: BTreeMap<usize, String>,
    pub leader: usize,
}

/// Waits (120 s) until every member of `db` answers `cluster/status` as a member of one
/// cluster of 3 servers with one leader, each member in `expect` with that server id.
pub async fn wait_healthy(e: &Ha, db: &Db, expect: &BTreeMap<usize, String>) -> Result<Healthy> {
    let h = wait_until(
        &format!(
            "{} Raft: 3 members, one cluster, one leader, ids {expect:?}",
            db.name
        ),
        Duration::from_secs(120),
        || async move {
            let mut cluster_ids = BTreeSet::new();
            let mut ids = BTreeMap::new();
            let mut leaders = Vec::new();
            for k in 0..MEMBERS {
                let st = status(e, db, k)?;
                if st.servers != MEMBERS || !(st.role == "leader" || st.role == "follower") {
                    return Ok(None);
                }
                if st.role == "leader" {
                    leaders.push(k);
                }
                cluster_ids.insert(st.cluster_id.clone());
                ids.insert(k, st.server_id);
            }
            if cluster_ids.len() != 1 {
                bail!("{} members in different clusters: {cluster_ids:?}", db.name);
            }
            if leaders.len() != 1 || expect.iter().any(|(k, id)| ids.get(k) != Some(id)) {
                return Ok(None);
            }
            Ok(Some(Healthy {
                cluster_id: cluster_ids.into_iter().next().unwrap_or_default(),
                ids,
                leader: leaders[0],
            }))
        },
    )
    .await?;
    Ok(h)
}

/// Every write the writers had acknowledged: NB Logical_Switch names.
#[derive(Default)]
pub struct Acked {
    names: BTreeSet<String>,
}

/// `ovn-nbctl` in a loop on node3 (the host's binary in the node's namespaces) against
/// every NB member's client address: one Logical_Switch (`external_ids:zovn-test`) every
/// 100 ms, each acknowledgement or failure written with its time.
struct Writer {
    child: Child,
    stop: PathBuf,
    out: PathBuf,
    started: f64,
}

fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A client's options for `db`'s members: `--db=<proto>:<node>:<port>,...` (hostNetwork)
/// and, with the chart's PKI (the default), the controller's TLS files.
async fn db_args(e: &Ha, db: &Db) -> Result<Vec<String>> {
    let oc =
        tests::e2e::ovn_client::OvnClient::of_release(&e.client, SYS, RELEASE, e.cluster().dir())
            .await?;
    let mut r = Vec::new();
    for k in 0..MEMBERS {
        let p = e.pods(SYS).get(&db.pod(k)).await?;
        r.push(format!("{}:{}:{}", oc.proto, ip_of(&p), db.port));
    }
    let mut args = vec![format!("--db={}", r.join(","))];
    args.extend(oc.tls);
    Ok(args)
}

const WRITER: &str = r#"i=0
while [ ! -e "$STOP" ]; do
  i=$((i+1)); n="zovn-ha-$TAG-$i"
  # shellcheck disable=SC2086
  if ovn-nbctl $DB --timeout=10 ls-add "$n" -- set Logical_Switch "$n" \
       external_ids:zovn-test=ha-writer >/dev/null 2>>"$OUT.err"; then
    echo "ok $n $(date +%s.%N)"
  else
    echo "fail $n $(date +%s.%N)"
  fi
  sleep 0.1
done >"$OUT"
"#;

impl Writer {
    async fn start(e: &Ha, tag: &str) -> Result<Writer> {
        let c = e.cluster();
        let db = db_args(e, &DBS[0]).await?.join(" ");
        let stop = c.dir().join(format!("writer-{tag}.stop"));
        let out = c.dir().join(format!("writer-{tag}.log"));
        let _ = std::fs::remove_file(&stop);
        let child = lab::kubecluster::node_ns::nsenter(
            c.node_names(3)?,
            &["env", &format!("DB={db}"), &format!("TAG={tag}")],
        )
        .env("STOP", &stop)
        .env("OUT", &out)
        .args(["bash", "-c", WRITER])
        .stdin(Stdio::null())
        .spawn()
        .context("start the NB writer")?;
        Ok(Writer {
            child,
            stop,
            out,
            started: now_secs(),
        })
    }

    /// Stops the loop; the acknowledged names, and the longest time without an
    /// acknowledgement (from the start, between acks, to the stop).
    fn stop(mut self) -> Result<(Vec<String>, usize, f64)> {
        std::fs::write(&self.stop, b"")?;
        let st = self.child.wait()?;
        let stopped = now_secs();
        if !st.success() {
            bail!("the NB writer exited {st}");
        }
        let text = std::fs::read_to_string(&self.out)?;
        let mut acked = Vec::new();
        let mut failed = 0;
        let mut last = self.started;
        let mut longest: f64 = 0.0;
        for l in text.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["ok", n, t] => {
                    let t: f64 = t.parse().unwrap_or(last);
                    longest = longest.max(t - last);
                    last = t;
                    acked.push(n.to_string());
                }
                ["fail", ..] => failed += 1,
                _ => {}
            }
        }
        longest = longest.max(stopped - last);
        Ok((acked, failed, longest))
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.stop, b"");
        let _ = self.child.wait();
    }
}

/// Waits (60 s) until every name in `acked` is an NB Logical_Switch and an SB
/// Datapath_Binding (northd's, through the SB cluster).
async fn verify(e: &Ha, acked: &Acked) -> Result<()> {
    let c = e.cluster();
    let nb = db_args(e, &DBS[0]).await?;
    let sb = db_args(e, &DBS[1]).await?;
    let missing = std::cell::RefCell::new(Vec::new());
    wait_until(
        "every acknowledged write in NB and its datapath in SB",
        Duration::from_secs(60),
        || {
            let (nb, sb) = (nb.clone(), sb.clone());
            let missing = &missing;
            async move {
                let mut args = vec!["ovn-nbctl"];
                args.extend(nb.iter().map(String::as_str));
                args.extend([
                    "--timeout=30",
                    "--format=csv",
                    "--data=bare",
                    "--no-headings",
                    "--columns=name",
                    "find",
                    "Logical_Switch",
                    "external_ids:zovn-test=ha-writer",
                ]);
                let ls = c.node_exec(3, &args)?;
                let ls: BTreeSet<&str> = ls.lines().map(str::trim).collect();
                let mut args = vec!["ovn-sbctl"];
                args.extend(sb.iter().map(String::as_str));
                args.extend([
                    "--timeout=30",
                    "--format=csv",
                    "--data=bare",
                    "--no-headings",
                    "--columns=external_ids",
                    "find",
                    "Datapath_Binding",
                ]);
                let dp = c.node_exec(3, &args)?;
                let dp: BTreeSet<&str> = dp
                    .split_whitespace()
                    .filter_map(|kv| kv.strip_prefix("name="))
                    .collect();
                let now: Vec<String> = acked
                    .names
                    .iter()
                    .filter(|n| !ls.contains(n.as_str()) || !dp.contains(n.as_str()))
                    .cloned()
                    .collect();
                let done = now.is_empty();
                *missing.borrow_mut() = now;
                Ok(done.then_some(()))
            }
        },
    )
    .await
    .with_context(|| format!("acknowledged writes missing: {:?}", missing.borrow()))
}

/// Deletes the pods of `members` (database, ordinal) together; waits until each is back
/// Ready (a new pod) and its database healthy again with the server ids in `ids` (when a
/// member keeps its files, its own id). Prints the times.
async fn round(
    e: &Ha,
    what: &str,
    members: &[(&Db, usize)],
    ids: &[BTreeMap<usize, String>; 2],
) -> Result<[Healthy; 2]> {
    let pods = e.pods(SYS);
    let mut old = Vec::new();
    for (db, k) in members {
        let p = pods.get(&db.pod(*k)).await?;
        old.push((db.pod(*k), p.metadata.uid.clone().unwrap_or_default()));
    }
    let t = Instant::now();
    for (pod, _) in &old {
        pods.delete(pod, &DeleteParams::default()).await?;
    }
    wait_until(
        &format!("{what}: new member pods Ready"),
        Duration::from_secs(180),
        || async {
            for (pod, uid) in &old {
                match pods.get_opt(pod).await? {
                    Some(p) if p.metadata.uid.as_deref() != Some(uid) && is_ready(&p) => {}
                    _ => return Ok(None),
                }
            }
            Ok(Some(()))
        },
    )
    .await?;
    let ready = t.elapsed().as_secs_f64();
    let nb = wait_healthy(e, &DBS[0], &ids[0]).await?;
    let sb = wait_healthy(e, &DBS[1], &ids[1]).await?;
    println!(
        "  {what}: {} deleted: new pods Ready after {ready:.1} s, both databases 3 servers \
         with one leader after {:.1} s (leaders: nb-{}, sb-{})",
        old.iter()
            .map(|(p, _)| p.trim_start_matches(&format!("{FULLNAME}-")))
            .collect::<Vec<_>>()
            .join(" + "),
        t.elapsed().as_secs_f64(),
        nb.leader,
        sb.leader
    );
    Ok([nb, sb])
}

fn same_cluster(before: &[Healthy; 2], after: &[Healthy; 2]) -> Result<()> {
    for (b, a) in before.iter().zip(after) {
        if a.cluster_id != b.cluster_id {
            bail!(
                "cluster id changed from {} to {}: a member formed a new cluster",
                b.cluster_id,
                a.cluster_id
            );
        }
    }
    Ok(())
}

/// Stops the writer, records and prints what it saw, checks NB and SB hold every write.
async fn finish_writer(e: &Ha, w: Writer, acked: &mut Acked) -> Result<()> {
    let (names, failed, longest) = w.stop()?;
    if names.is_empty() {
        bail!("the writer got no write acknowledged");
    }
    let n = names.len();
    acked.names.extend(names);
    let t = Instant::now();
    verify(e, acked).await?;
    println!(
        "  writer: {n} writes acknowledged, {failed} refused or timed out (retried as new \
         rows), longest time without an acknowledged write {longest:.1} s; all {} \
         acknowledged so far in NB and in SB ({:.1} s to check)",
        acked.names.len(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

pub(super) async fn members(e: &Ha, acked: &mut Acked) -> Result<()> {
    let before = [
        wait_healthy(e, &DBS[0], &BTreeMap::new()).await?,
        wait_healthy(e, &DBS[1], &BTreeMap::new()).await?,
    ];
    let ids = [before[0].ids.clone(), before[1].ids.clone()];
    let writer = Writer::start(e, "members").await?;
    let probe = start_probe(e).await?;
    for k in 0..MEMBERS {
        let after = round(
            e,
            &format!("member {k}"),
            &[(&DBS[0], k), (&DBS[1], k)],
            &ids,
        )
        .await?;
        same_cluster(&before, &after)?;
    }
    for n in 1..=2 {
        let now = [
            wait_healthy(e, &DBS[0], &ids[0]).await?,
            wait_healthy(e, &DBS[1], &ids[1]).await?,
        ];
        let after = round(
            e,
            &format!("leaders ({n})"),
            &[(&DBS[0], now[0].leader), (&DBS[1], now[1].leader)],
            &ids,
        )
        .await?;
        same_cluster(&before, &after)?;
    }
    let run = stop_probe(e, probe).await?;
    finish_writer(e, writer, acked).await?;
    println!("  probe throughout: {run}");
    if run.longest_gap > GAP_TARGET {
        bail!(
            "running pods lost traffic while central members restarted: {run} (target {} ms)",
            GAP_TARGET.as_millis()
        );
    }
    // the controller still writes through the restarted cluster
    let t = Instant::now();
    create(
        &e.pods(NS),
        sleeper(NS, "after-ha", Some("node3"), json!({"ha": "after"})),
    )
    .await?;
    let p = pods_ready(e, NS, "ha=after", 1, Duration::from_secs(120)).await?;
    println!(
        "  a pod created after the rounds: Ready with {} in {:.1} s",
        ip_of(&p[0]),
        t.elapsed().as_secs_f64()
    );
    println!(
        "  one cluster throughout: nb {}, sb {}",
        before[0].cluster_id, before[1].cluster_id
    );
    Ok(())
}

pub(super) async fn disk_lost(e: &Ha, acked: &mut Acked) -> Result<()> {
    const K: usize = 2;
    let before = [
        wait_healthy(e, &DBS[0], &BTreeMap::new()).await?,
        wait_healthy(e, &DBS[1], &BTreeMap::new()).await?,
    ];
    // the others keep their ids; member K gets a new one
    let mut ids = [before[0].ids.clone(), before[1].ids.clone()];
    for m in &mut ids {
        m.remove(&K);
    }
    let writer = Writer::start(e, "disk").await?;
    for db in &DBS {
        let p = e.pods(SYS).get(&db.pod(K)).await?;
        let node = node_of(&p);
        let i: usize = node
            .strip_prefix("node")
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("{} on {node}", db.pod(K)))?;
        let dir = format!("{HOST_PATH}/{}db", db.name);
        e.cluster()
            .node_exec(i, &["sh", "-c", &format!("rm -rf {dir}/* {dir}/.[!.]*")])?;
        println!("  {}: {dir} emptied on {node}", db.pod(K));
    }
    let after = round(e, "disk lost", &[(&DBS[0], K), (&DBS[1], K)], &ids).await?;
    same_cluster(&before, &after)?;
    for ((db, b), a) in DBS.iter().zip(&before).zip(&after) {
        if a.ids.get(&K) == b.ids.get(&K) {
            bail!(
                "{}: the member with an empty directory kept server id {:?}",
                db.pod(K),
                b.ids.get(&K)
            );
        }
        println!(
            "  {}: joined afresh as {} (was {}), its former self kicked: 3 servers",
            db.pod(K),
            a.ids.get(&K).map_or("?", String::as_str),
            b.ids.get(&K).map_or("?", String::as_str)
        );
    }
    finish_writer(e, writer, acked).await
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn cluster_status_is_read() {
        let text = "9def\nName: OVN_Northbound\nCluster ID: 759e (759ee33f-f0d2-4340-8313-9a65178886bb)\n\
                    Server ID: 9def (9defbd1c-9049-4785-840d-623a92d8779d)\nAddress: tcp:127.0.0.1:6643\n\
                    Status: cluster member\nRole: follower\nTerm: 2\nLeader: 975a\nVote: unknown\n\n\
                    Log: [2, 7]\nServers:\n    9def (9def at tcp:127.0.0.1:6643) (self)\n    \
                    975a (975a at tcp:127.0.0.2:6643) last msg 100 ms ago\n";
        let st = parse_status(text).unwrap();
        assert_eq!(st.cluster_id, "759ee33f-f0d2-4340-8313-9a65178886bb");
        assert_eq!(st.server_id, "9defbd1c-9049-4785-840d-623a92d8779d");
        assert_eq!(st.role, "follower");
        assert_eq!(st.servers, 2);
    }
}
