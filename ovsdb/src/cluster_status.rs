//! Parsing `ovs-appctl cluster/status DB`, ovsdb-server's report on a clustered database
//! (Raft role, term, leader, log, lag, connections): `zovn status`, the lab's central and
//! the OVN database exporter (`zstack-ovn-dbexporter`) read it.

/// The fields of `cluster/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterStatus {
    /// `Role: leader|follower|candidate`.
    pub role: Option<String>,
    /// `Status: cluster member`, `joining cluster`...
    pub status: Option<String>,
    /// `Leader: <server id>|self|unknown`.
    pub leader: Option<String>,
    /// `Term: N`.
    pub term: Option<u64>,
    /// `Server ID: xxxx (full uuid)` — the short id.
    pub server_id: Option<String>,
    /// `Log: [first, last]`: the indexes of the first and last entries of the Raft log.
    pub log: Option<(u64, u64)>,
    /// `Entries not yet committed: N`.
    pub uncommitted: Option<u64>,
    /// `Entries not yet applied: N`.
    pub unapplied: Option<u64>,
    /// `Election timer: N` (ms).
    pub election_timer_ms: Option<u64>,
    /// `Connections:` — outgoing (`->`) and incoming (`<-`) Raft connections.
    pub connections_out: Option<u64>,
    pub connections_in: Option<u64>,
    /// `Disconnections: N` since the server started.
    pub disconnections: Option<u64>,
    /// The members listed under `Servers:`.
    pub servers: u64,
}

impl ClusterStatus {
    /// True if this member is the leader.
    pub fn is_leader(&self) -> bool {
        self.role.as_deref() == Some("leader")
    }
}

/// Parses `cluster/status` (unknown lines are ignored; a missing field stays `None`).
pub fn parse_cluster_status(text: &str) -> ClusterStatus {
    let mut st = ClusterStatus::default();
    let mut in_servers = false;
    for line in text.lines() {
        if in_servers {
            if line.starts_with(char::is_whitespace) && !line.trim().is_empty() {
                st.servers += 1;
                continue;
            }
            in_servers = false;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        let number = || v.parse::<u64>().ok();
        match k.trim() {
            "Role" => st.role = Some(v.to_string()),
            "Status" => st.status = Some(v.to_string()),
            "Leader" => st.leader = Some(v.to_string()),
            "Term" => st.term = number(),
            "Server ID" => st.server_id = v.split_whitespace().next().map(str::to_string),
            "Log" => st.log = parse_log(v),
            "Entries not yet committed" => st.uncommitted = number(),
            "Entries not yet applied" => st.unapplied = number(),
            "Election timer" => st.election_timer_ms = number(),
            "Disconnections" => st.disconnections = number(),
            "Connections" => {
                let words = v.split_whitespace();
                let (out, inc) = words.fold((0, 0), |(o, i), w| {
                    if w.starts_with("->") {
                        (o + 1, i)
                    } else if w.starts_with("<-") {
                        (o, i + 1)
                    } else {
                        (o, i)
                    }
                });
                st.connections_out = Some(out);
                st.connections_in = Some(inc);
            }
            "Servers" => in_servers = true,
            _ => {}
        }
    }
    st
}

/// `[2, 6]` → (2, 6).
fn parse_log(v: &str) -> Option<(u64, u64)> {
    let inner = v.trim().strip_prefix('[')?.strip_suffix(']')?;
    let (a, b) = inner.split_once(',')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
b1c9
Name: OVN_Northbound
Cluster ID: 6e2e (6e2e0c4d-1f0a-4d43-9d6e-3d3b7c9f2a11)
Server ID: b1c9 (b1c9a6a4-5f7c-4c3e-8c2a-7b0f5e0d1a22)
Address: unix:/tmp/lab/central/run/ovnnb_db1.raft
Status: cluster member
Role: leader
Term: 2
Leader: self
Vote: self

Last Election started 1105 ms ago, reason: timeout
Election timer: 1000
Log: [2, 6]
Entries not yet committed: 0
Entries not yet applied: 0
Connections: ->0000 ->5d1e <-5d1e <-0f1b
Disconnections: 0
Servers:
    5d1e (5d1e at unix:/tmp/lab/central/run/ovnnb_db2.raft) next_index=6 match_index=5
    b1c9 (b1c9 at unix:/tmp/lab/central/run/ovnnb_db1.raft) (self) next_index=5 match_index=5
";

    #[test]
    fn parses_leader_status() {
        let st = parse_cluster_status(SAMPLE);
        assert!(st.is_leader());
        assert_eq!(st.status.as_deref(), Some("cluster member"));
        assert_eq!(st.leader.as_deref(), Some("self"));
        assert_eq!(st.term, Some(2));
        assert_eq!(st.server_id.as_deref(), Some("b1c9"));
        assert_eq!(st.log, Some((2, 6)));
        assert_eq!((st.uncommitted, st.unapplied), (Some(0), Some(0)));
        assert_eq!(st.election_timer_ms, Some(1000));
        assert_eq!((st.connections_out, st.connections_in), (Some(2), Some(2)));
        assert_eq!(st.disconnections, Some(0));
        assert_eq!(st.servers, 2);
    }

    #[test]
    fn follower_is_not_leader() {
        let st = parse_cluster_status(&SAMPLE.replace("Role: leader", "Role: follower"));
        assert!(!st.is_leader());
        assert_eq!(parse_cluster_status(""), ClusterStatus::default());
    }
}
