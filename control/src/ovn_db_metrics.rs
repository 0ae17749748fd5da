//! OVN central's own health as Prometheus metrics: what `zstack-ovn-dbexporter` (a
//! container beside the databases in every OVN central pod) serves on each scrape.
//!
//! Per database (`db="nb"|"sb"`), from its ovsdb-server's `cluster/status` (parsed by
//! [`ovsdb::cluster_status`]) and its file: up, the Raft role and term, whether it leads,
//! the log (entries kept, last index), the entries not yet committed and not yet applied
//! (the member's lag), its Raft connections and disconnections, the servers it knows, its
//! election timer, the file's size. A standalone (non-clustered) database reports up and
//! its size only. ovn-northd: up and active (1) or standby (0), from `status`.
//!
//! Collecting runs `ovs-appctl` against the daemons' control sockets; a daemon that does
//! not answer is `..._up 0` with its other series absent, never a failed scrape. Metric
//! names and meanings: docs/reference/metrics.md.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use ovsdb::cluster_status::{ClusterStatus, parse_cluster_status};

/// One database to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbTarget {
    /// `nb` or `sb` (the `db` label).
    pub db: String,
    /// Its ovsdb-server's control socket (`ovs-appctl -t`).
    pub ctl: PathBuf,
    /// Its database file (size), if known.
    pub file: Option<PathBuf>,
}

impl DbTarget {
    /// The OVSDB schema name behind the `db` label.
    pub fn schema_name(&self) -> &'static str {
        if self.db == "sb" {
            "OVN_Southbound"
        } else {
            "OVN_Northbound"
        }
    }
}

/// What one database looked like at a scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DbSample {
    pub db: String,
    /// The server answered.
    pub up: bool,
    /// Its `cluster/status` (`None`: standalone, or not answering).
    pub raft: Option<ClusterStatus>,
    pub file_bytes: Option<u64>,
}

/// ovn-northd at a scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NorthdSample {
    pub up: bool,
    /// `Status: active` (else standby or paused).
    pub active: bool,
}

/// What `ovs-appctl -t <target> <args>` printed, or why it failed.
pub type Appctl<'a> = &'a dyn Fn(&str, &[&str]) -> Result<String, String>;

/// Runs the real `ovs-appctl`.
pub fn appctl(target: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("ovs-appctl")
        .arg("-t")
        .arg(target)
        .args(args)
        .output()
        .map_err(|e| format!("run ovs-appctl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Samples one database through `ctl`.
pub fn sample_db(t: &DbTarget, ctl: Appctl<'_>) -> DbSample {
    let target = t.ctl.to_string_lossy();
    let file_bytes = t
        .file
        .as_ref()
        .and_then(|f| std::fs::metadata(f).ok())
        .map(|m| m.len());
    match ctl(&target, &["cluster/status", t.schema_name()]) {
        Ok(text) => DbSample {
            db: t.db.clone(),
            up: true,
            raft: Some(parse_cluster_status(&text)),
            file_bytes,
        },
        // a server without a clustered database has no `cluster/status` command at all:
        // up when it lists the database
        Err(_) => DbSample {
            db: t.db.clone(),
            up: ctl(&target, &["ovsdb-server/list-dbs"])
                .is_ok_and(|dbs| dbs.lines().any(|l| l.trim() == t.schema_name())),
            raft: None,
            file_bytes,
        },
    }
}

/// Samples ovn-northd through its control socket (or `ovs-appctl` target name).
pub fn sample_northd(target: &str, ctl: Appctl<'_>) -> NorthdSample {
    match ctl(target, &["status"]) {
        Ok(text) => NorthdSample {
            up: true,
            active: text
                .lines()
                .any(|l| l.trim().eq_ignore_ascii_case("status: active")),
        },
        Err(_) => NorthdSample::default(),
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The Prometheus text exposition of one scrape.
pub fn render(dbs: &[DbSample], northd: Option<NorthdSample>) -> String {
    let mut out = String::new();
    let gauge = |out: &mut String,
                 name: &str,
                 help: &str,
                 value: &dyn Fn(&DbSample) -> Option<(String, f64)>| {
        let rows: Vec<(String, f64)> = dbs.iter().filter_map(value).collect();
        if rows.is_empty() {
            return;
        }
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        family(out, name, kind, help);
        for (labels, v) in rows {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    };
    let db = |s: &DbSample| format!("db=\"{}\"", s.db);
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    gauge(
        &mut out,
        "zstack_ovn_db_up",
        "1 when the database's ovsdb-server answered the scrape.",
        &|s| Some((db(s), flag(s.up))),
    );
    gauge(
        &mut out,
        "zstack_ovn_db_file_bytes",
        "Size of the database file (a Raft log until compaction).",
        &|s| Some((db(s), s.file_bytes? as f64)),
    );
    let raft = |f: fn(&ClusterStatus) -> Option<f64>| {
        move |s: &DbSample| -> Option<(String, f64)> {
            Some((format!("db=\"{}\"", s.db), f(s.raft.as_ref()?)?))
        }
    };
    gauge(
        &mut out,
        "zstack_ovn_db_raft_leader",
        "1 when this member leads its Raft cluster.",
        &raft(|r| Some(if r.is_leader() { 1.0 } else { 0.0 })),
    );
    // one series per role seen, 1 for the current one
    let roles: Vec<(String, f64)> = dbs
        .iter()
        .filter_map(|s| {
            let role = s.raft.as_ref()?.role.clone()?;
            Some((format!("db=\"{}\",role=\"{role}\"", s.db), 1.0))
        })
        .collect();
    if !roles.is_empty() {
        family(
            &mut out,
            "zstack_ovn_db_raft_role",
            "gauge",
            "The member's Raft role (leader, follower, candidate): 1 for the current one.",
        );
        for (labels, v) in roles {
            let _ = writeln!(out, "zstack_ovn_db_raft_role{{{labels}}} {v}");
        }
    }
    gauge(
        &mut out,
        "zstack_ovn_db_raft_term",
        "The member's current Raft term (rises with every election).",
        &raft(|r| Some(r.term? as f64)),
    );
    gauge(
        &mut out,
        "zstack_ovn_db_raft_log_entries",
        "Entries in the member's Raft log (last - first + 1; compaction shrinks it).",
        &raft(|r| r.log.map(|(a, b)| (b + 1).saturating_sub(a) as f64)),
    );
    gauge(
        &mut out,
        "zstack_ovn_db_raft_log_last_index",
        "Index of the last entry of the member's Raft log.",
        &raft(|r| r.log.map(|(_, b)| b as f64)),
    );
    gauge(
        &mut out,
        "zstack_ovn_db_raft_uncommitted_entries",
        "Entries of the log not yet committed by a majority (commit lag).",
        &raft(|r| Some(r.uncommitted? as f64)),
    );
    gauge(
        &mut out,
        "zstack_ovn_db_raft_unapplied_entries",
        "Committed entries not yet applied to the member's database (apply lag).",
        &raft(|r| Some(r.unapplied? as f64)),
    );
    let conns: Vec<(String, f64)> = dbs
        .iter()
        .filter_map(|s| Some((s, s.raft.as_ref()?)))
        .flat_map(|(s, r)| {
            [("in", r.connections_in), ("out", r.connections_out)]
                .into_iter()
                .filter_map(move |(dir, n)| {
                    Some((format!("db=\"{}\",direction=\"{dir}\"", s.db), n? as f64))
                })
        })
        .collect();
    if !conns.is_empty() {
        family(
            &mut out,
            "zstack_ovn_db_raft_connections",
            "gauge",
            "The member's Raft connections to (out) and from (in) the other members.",
        );
        for (labels, v) in conns {
            let _ = writeln!(out, "zstack_ovn_db_raft_connections{{{labels}}} {v}");
        }
    }
    gauge(
        &mut out,
        "zstack_ovn_db_raft_disconnections_total",
        "Raft disconnections since the member's ovsdb-server started.",
        &raft(|r| Some(r.disconnections? as f64)),
    );
    gauge(
        &mut out,
        "zstack_ovn_db_raft_servers",
        "Members of the Raft cluster as this member knows them.",
        &raft(|r| Some(r.servers as f64)),
    );
    gauge(
        &mut out,
        "zstack_ovn_db_raft_election_timer_seconds",
        "The cluster's Raft election timer.",
        &raft(|r| Some(r.election_timer_ms? as f64 / 1000.0)),
    );
    if let Some(n) = northd {
        family(
            &mut out,
            "zstack_ovn_northd_up",
            "gauge",
            "1 when this pod's ovn-northd answered the scrape.",
        );
        let _ = writeln!(out, "zstack_ovn_northd_up {}", flag(n.up));
        if n.up {
            family(
                &mut out,
                "zstack_ovn_northd_active",
                "gauge",
                "1 when this pod's ovn-northd is the active one (0: standby or paused).",
            );
            let _ = writeln!(out, "zstack_ovn_northd_active {}", flag(n.active));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEADER: &str = "Name: OVN_Northbound\nServer ID: b1c9 (b1c9a6a4)\n\
        Status: cluster member\nRole: leader\nTerm: 4\nLeader: self\n\
        Election timer: 1000\nLog: [2, 41]\nEntries not yet committed: 1\n\
        Entries not yet applied: 0\nConnections: ->0000 ->5d1e <-5d1e <-0f1b\n\
        Disconnections: 3\nServers:\n    5d1e (x)\n    b1c9 (y) (self)\n    0f1b (z)\n";

    fn fake(target: &str, args: &[&str]) -> Result<String, String> {
        match (target, args.first().copied()) {
            ("/run/nb.ctl", Some("cluster/status")) => Ok(LEADER.into()),
            ("/run/sb.ctl", Some("cluster/status")) => Err(
                "\"cluster/status\" is not a valid command (use \"list-commands\" to see a list of valid commands)".into(),
            ),
            ("/run/sb.ctl", Some("ovsdb-server/list-dbs")) => Ok("OVN_Southbound\n_Server\n".into()),
            // (ovn-northd prints no newline)
            ("northd", Some("status")) => Ok("Status: standby".into()),
            _ => Err("connection refused".into()),
        }
    }

    fn target(db: &str, ctl: &str) -> DbTarget {
        DbTarget {
            db: db.into(),
            ctl: ctl.into(),
            file: None,
        }
    }

    #[test]
    fn a_leader_a_standalone_db_a_dead_one_and_a_standby_northd() {
        let nb = sample_db(&target("nb", "/run/nb.ctl"), &fake);
        let sb = sample_db(&target("sb", "/run/sb.ctl"), &fake);
        let gone = sample_db(&target("sb", "/run/gone.ctl"), &fake);
        assert!(nb.up && sb.up && !gone.up);
        assert!(sb.raft.is_none());
        let text = render(&[nb.clone(), sb], Some(sample_northd("northd", &fake)));
        for line in [
            "zstack_ovn_db_up{db=\"nb\"} 1",
            "zstack_ovn_db_up{db=\"sb\"} 1",
            "zstack_ovn_db_raft_leader{db=\"nb\"} 1",
            "zstack_ovn_db_raft_role{db=\"nb\",role=\"leader\"} 1",
            "zstack_ovn_db_raft_term{db=\"nb\"} 4",
            "zstack_ovn_db_raft_log_entries{db=\"nb\"} 40",
            "zstack_ovn_db_raft_log_last_index{db=\"nb\"} 41",
            "zstack_ovn_db_raft_uncommitted_entries{db=\"nb\"} 1",
            "zstack_ovn_db_raft_unapplied_entries{db=\"nb\"} 0",
            "zstack_ovn_db_raft_connections{db=\"nb\",direction=\"in\"} 2",
            "zstack_ovn_db_raft_connections{db=\"nb\",direction=\"out\"} 2",
            "zstack_ovn_db_raft_disconnections_total{db=\"nb\"} 3",
            "zstack_ovn_db_raft_servers{db=\"nb\"} 3",
            "zstack_ovn_db_raft_election_timer_seconds{db=\"nb\"} 1",
            "zstack_ovn_northd_up 1",
            "zstack_ovn_northd_active 0",
            "# TYPE zstack_ovn_db_raft_disconnections_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        assert!(
            !text.contains("db=\"sb\",role"),
            "a standalone database has no Raft series:\n{text}"
        );
        let text = render(&[gone], Some(sample_northd("elsewhere", &fake)));
        assert!(text.contains("zstack_ovn_db_up{db=\"sb\"} 0"), "{text}");
        assert!(text.contains("zstack_ovn_northd_up 0"), "{text}");
        assert!(!text.contains("zstack_ovn_northd_active"), "{text}");
        assert!(!text.contains("raft"), "{text}");
    }

    #[test]
    fn the_file_size_is_reported() {
        let d = tempfile::tempdir().expect("dir");
        let f = d.path().join("ovnnb_db.db");
        std::fs::write(&f, vec![0u8; 1234]).expect("write");
        let t = DbTarget {
            file: Some(f),
            ..target("nb", "/run/nb.ctl")
        };
        let text = render(&[sample_db(&t, &fake)], None);
        assert!(
            text.contains("zstack_ovn_db_file_bytes{db=\"nb\"} 1234"),
            "{text}"
        );
        assert!(!text.contains("northd"), "{text}");
    }
}
