//! Parsing `ovs-appctl cluster/status DB` output (Raft role, term, leader): `zovn status`
//! and the lab's central read it.

/// The fields of `cluster/status` the lab uses.
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
}

impl ClusterStatus {
    /// True if this member is the leader.
    pub fn is_leader(&self) -> bool {
        self.role.as_deref() == Some("leader")
    }
}

/// Parses the `Key: value` lines of `cluster/status` (the server list is ignored).
pub fn parse_cluster_status(text: &str) -> ClusterStatus {
    let mut st = ClusterStatus::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim().to_string();
        match k.trim() {
            "Role" => st.role = Some(v),
            "Status" => st.status = Some(v),
            "Leader" => st.leader = Some(v),
            "Term" => st.term = v.parse().ok(),
            "Server ID" => st.server_id = v.split_whitespace().next().map(str::to_string),
            _ => {}
        }
    }
    st
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
    }

    #[test]
    fn follower_is_not_leader() {
        let st = parse_cluster_status(&SAMPLE.replace("Role: leader", "Role: follower"));
        assert!(!st.is_leader());
        assert_eq!(parse_cluster_status(""), ClusterStatus::default());
    }
}
