//! The `_Server` database: which databases a server holds, whether each clustered one is
//! connected to its Raft cluster and whether this server is its leader.

use std::collections::HashMap;

use serde_json::{Value as Json, json};

use crate::error::{Error, Result};
use crate::monitor::{RowUpdate, TableUpdates};
use crate::transport::Remote;
use crate::value::{Atom, Row, Uuid};

/// The monitor id the client uses for `_Server`.
pub(crate) const MONITOR_ID: &str = "_Server";

/// `monitor_cond` params for the `Database` table.
pub(crate) fn monitor_params() -> Json {
    json!(["_Server", MONITOR_ID, {"Database": [{"columns":
        ["name", "model", "connected", "leader", "index", "cid", "sid"]}]}])
}

/// One row of `_Server.Database` (the columns the client needs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerDb {
    pub name: String,
    /// `standalone`, `clustered` or `relay`.
    pub model: String,
    pub connected: bool,
    pub leader: bool,
}

impl ServerDb {
    fn set(&mut self, row: &Row) {
        for (col, v) in row {
            match (col.as_str(), v.atoms()) {
                ("name", [Atom::String(s)]) => self.name = s.clone(),
                ("model", [Atom::String(s)]) => self.model = s.clone(),
                ("connected", [Atom::Boolean(b)]) => self.connected = *b,
                ("leader", [Atom::Boolean(b)]) => self.leader = *b,
                _ => {}
            }
        }
    }
}

/// The server's databases as seen through the `_Server` monitor.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerDbs {
    rows: HashMap<Uuid, ServerDb>,
}

impl ServerDbs {
    pub(crate) fn apply(&mut self, updates: TableUpdates) {
        for (table, rows) in updates {
            if table != "Database" {
                continue;
            }
            for (uuid, u) in rows {
                match u {
                    RowUpdate::Put(row) => {
                        // "initial"/"insert" omit columns at their defaults (false, "")
                        let mut db = ServerDb::default();
                        db.set(&row);
                        self.rows.insert(uuid, db);
                    }
                    RowUpdate::Modify(diff) => {
                        // these columns are scalars: the diff carries the new value
                        self.rows.entry(uuid).or_default().set(&diff);
                    }
                    RowUpdate::Delete => {
                        self.rows.remove(&uuid);
                    }
                }
            }
        }
    }

    /// Fails when a clustered database is disconnected from its cluster, or (with
    /// `leader_only`) when this server is not its leader.
    pub(crate) fn check(&self, leader_only: bool, remote: &Remote) -> Result<()> {
        for db in self.rows.values().filter(|d| d.model == "clustered") {
            if !db.connected {
                return Err(Error::NotLeader(format!(
                    "{remote} ({} is not connected to its cluster)",
                    db.name
                )));
            }
            if leader_only && !db.leader {
                return Err(Error::NotLeader(format!("{remote} ({})", db.name)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::parse_updates2;

    #[test]
    fn leadership_checks() {
        let u = "36bdd8f4-7e9d-4a0c-9a8e-5f1b0d1c2e3f";
        let r = Remote::Unix("/x".into());
        let mut s = ServerDbs::default();
        s.apply(
            parse_updates2(&json!({"Database":{u:{"initial":
                {"name":"OVN_Northbound","model":"clustered","connected":true,"leader":true}}}}))
            .unwrap(),
        );
        assert!(s.check(true, &r).is_ok());
        s.apply(parse_updates2(&json!({"Database":{u:{"modify":{"leader":false}}}})).unwrap());
        assert!(matches!(s.check(true, &r), Err(Error::NotLeader(_))));
        assert!(s.check(false, &r).is_ok());
        s.apply(parse_updates2(&json!({"Database":{u:{"modify":{"connected":false}}}})).unwrap());
        assert!(s.check(false, &r).is_err());
        let mut st = ServerDbs::default();
        st.apply(
            parse_updates2(&json!({"Database":{u:{"initial":
                {"name":"OVN_Northbound","model":"standalone","connected":true}}}}))
            .unwrap(),
        );
        assert!(st.check(true, &r).is_ok());
    }
}
