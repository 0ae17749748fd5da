//! A read-only snapshot of the Northbound rows `zovn trace` explains a trace with: the
//! switches and their ports, router ports, ACLs and port groups (NetworkPolicies), load
//! balancers (Services), router policies and routes.

use std::time::Duration;

use ovsdb::nb::{
    Acl, LoadBalancer, LogicalRouter, LogicalRouterPolicy, LogicalRouterPort,
    LogicalRouterStaticRoute, LogicalSwitch, LogicalSwitchPort, PortGroup,
};
use ovsdb::typed::Table;
use ovsdb::{Client, ClientConfig, MonitorRequest, Uuid};

use super::TraceError;

/// The rows, as read once.
#[derive(Debug, Default)]
pub struct NbView {
    pub switches: Vec<LogicalSwitch>,
    pub switch_ports: Vec<LogicalSwitchPort>,
    pub routers: Vec<LogicalRouter>,
    pub router_ports: Vec<LogicalRouterPort>,
    pub acls: Vec<Acl>,
    pub port_groups: Vec<PortGroup>,
    pub load_balancers: Vec<LoadBalancer>,
    pub policies: Vec<LogicalRouterPolicy>,
    pub routes: Vec<LogicalRouterStaticRoute>,
}

fn rows<T: Table>(v: &ovsdb::View<'_>) -> Vec<T> {
    v.iter_typed::<T>().filter_map(Result::ok).collect()
}

/// The tables read, in the order of [`NbView::query_transaction`].
const TABLES: [&str; 9] = [
    LogicalSwitch::TABLE,
    LogicalSwitchPort::TABLE,
    LogicalRouter::TABLE,
    LogicalRouterPort::TABLE,
    Acl::TABLE,
    PortGroup::TABLE,
    LoadBalancer::TABLE,
    LogicalRouterPolicy::TABLE,
    LogicalRouterStaticRoute::TABLE,
];

/// Why one `select` result cannot be read as rows of `table`.
#[derive(Debug, thiserror::Error)]
enum SelectError {
    #[error("{table}: no rows in {result}")]
    NoRows {
        table: &'static str,
        result: serde_json::Value,
    },
    #[error("{table}: a row without _uuid")]
    NoUuid { table: &'static str },
    #[error("{table}: {source}")]
    Row {
        table: &'static str,
        source: ovsdb::Error,
    },
    #[error("{table}: {source}")]
    Value {
        table: &'static str,
        source: ovsdb::ValueError,
    },
}

/// The rows of one `select` result (`{"rows": [...]}`) as `T`s.
fn selected<T: Table>(result: &serde_json::Value) -> Result<Vec<T>, SelectError> {
    let table = T::TABLE;
    let rows = result["rows"]
        .as_array()
        .ok_or_else(|| SelectError::NoRows {
            table,
            result: result.clone(),
        })?;
    rows.iter()
        .map(|r| {
            let uuid: Uuid = r["_uuid"][1]
                .as_str()
                .and_then(|u| u.parse().ok())
                .ok_or(SelectError::NoUuid { table })?;
            let row = ovsdb::ops::row_from_json(r)
                .map_err(|source| SelectError::Row { table, source })?;
            T::from_partial_row(uuid, &row).map_err(|source| SelectError::Value { table, source })
        })
        .collect()
}

impl NbView {
    /// Reads the rows from the Northbound database at `remote` (`unix:PATH`, `tcp:...`).
    pub async fn load(remote: &str) -> Result<NbView, TraceError> {
        let db_err = |e: ovsdb::Error| TraceError::Tool {
            tool: format!("OVN Northbound {remote}"),
            detail: e.to_string(),
        };
        let cfg = ClientConfig::parse(remote)
            .map_err(db_err)?
            .with_connect_timeout(Duration::from_secs(5));
        let client = Client::connect(cfg).await.map_err(db_err)?;
        let replica = client
            .monitor(
                "OVN_Northbound",
                vec![
                    MonitorRequest::of::<LogicalSwitch>(),
                    MonitorRequest::of::<LogicalSwitchPort>(),
                    MonitorRequest::of::<LogicalRouter>(),
                    MonitorRequest::of::<LogicalRouterPort>(),
                    MonitorRequest::of::<Acl>(),
                    MonitorRequest::of::<PortGroup>(),
                    MonitorRequest::of::<LoadBalancer>(),
                    MonitorRequest::of::<LogicalRouterPolicy>(),
                    MonitorRequest::of::<LogicalRouterStaticRoute>(),
                ],
            )
            .await
            .map_err(db_err)?;
        let view = replica.read(|v| NbView {
            switches: rows(v),
            switch_ports: rows(v),
            routers: rows(v),
            router_ports: rows(v),
            acls: rows(v),
            port_groups: rows(v),
            load_balancers: rows(v),
            policies: rows(v),
            routes: rows(v),
        });
        client.close().await;
        Ok(view)
    }

    /// The read-only transaction (`ovsdb-client query`: always aborted) that selects
    /// every row of the tables the view holds.
    pub fn query_transaction() -> String {
        let mut ops = vec![serde_json::json!("OVN_Northbound")];
        ops.extend(
            TABLES
                .iter()
                .map(|t| serde_json::json!({"op": "select", "table": t, "where": []})),
        );
        serde_json::Value::Array(ops).to_string()
    }

    /// The view from the result of [`NbView::query_transaction`] (`ovsdb-client query`'s
    /// output, one result per table).
    pub fn from_query_result(text: &str) -> Result<NbView, TraceError> {
        let bad = |detail: String| TraceError::Tool {
            tool: "ovsdb-client query OVN_Northbound".into(),
            detail,
        };
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let r = v
            .as_array()
            .filter(|a| a.len() >= TABLES.len())
            .ok_or_else(|| bad(format!("not one result per table: {v}")))?;
        let unreadable = |e: SelectError| bad(e.to_string());
        Ok(NbView {
            switches: selected(&r[0]).map_err(unreadable)?,
            switch_ports: selected(&r[1]).map_err(unreadable)?,
            routers: selected(&r[2]).map_err(unreadable)?,
            router_ports: selected(&r[3]).map_err(unreadable)?,
            acls: selected(&r[4]).map_err(unreadable)?,
            port_groups: selected(&r[5]).map_err(unreadable)?,
            load_balancers: selected(&r[6]).map_err(unreadable)?,
            policies: selected(&r[7]).map_err(unreadable)?,
            routes: selected(&r[8]).map_err(unreadable)?,
        })
    }

    pub fn switch_port(&self, name: &str) -> Option<&LogicalSwitchPort> {
        self.switch_ports.iter().find(|p| p.name == name)
    }

    /// The switch holding the port `uuid`.
    pub fn switch_of(&self, port: Uuid) -> Option<&LogicalSwitch> {
        self.switches.iter().find(|s| s.ports.contains(&port))
    }

    /// The MAC of the router port attached to switch `sw` (its `router`-type port).
    pub fn router_mac_on(&self, sw: &LogicalSwitch) -> Option<String> {
        let peer = self
            .switch_ports
            .iter()
            .filter(|p| sw.ports.contains(&p.uuid) && p.type_ == "router")
            .find_map(|p| p.options.get("router-port"))?;
        self.router_ports
            .iter()
            .find(|r| &r.name == peer)
            .map(|r| r.mac.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_result_becomes_the_view() {
        let txn: serde_json::Value =
            serde_json::from_str(&NbView::query_transaction()).expect("JSON");
        assert_eq!(txn[0], "OVN_Northbound");
        assert_eq!(txn[5]["table"], "ACL");
        let empty = serde_json::json!({"rows": []});
        let mut results = vec![empty.clone(); TABLES.len()];
        results[0] = serde_json::json!({"rows": [{
            "_uuid": ["uuid", "6e5e1b5c-6a43-4c3a-9f39-0d8f2a2c1b01"],
            "name": "subnet-web",
            "ports": ["set", [["uuid", "0b0a3c3e-1a2b-4c5d-8e9f-a0b1c2d3e4f5"]]],
            "external_ids": ["map", [["zstack.io/owner", "zstack-ovn"]]]
        }]});
        results[4] = serde_json::json!({"rows": [{
            "_uuid": ["uuid", "1e5e1b5c-6a43-4c3a-9f39-0d8f2a2c1b02"],
            "action": "drop", "direction": "to-lport", "priority": 1000,
            "match": "outport == @pg", "external_ids": ["map", []]
        }]});
        let v = NbView::from_query_result(&serde_json::Value::Array(results).to_string())
            .expect("view");
        assert_eq!(v.switches.len(), 1);
        assert_eq!(v.switches[0].name, "subnet-web");
        assert_eq!(v.switches[0].ports.len(), 1);
        assert_eq!(v.acls[0].action, "drop");
        assert_eq!(v.acls[0].priority, 1000);
        // not one result per table, or not JSON: named
        let e = NbView::from_query_result("[]").expect_err("short");
        assert!(e.to_string().contains("one result per table"), "{e}");
        let e = NbView::from_query_result("ovsdb-client: error").expect_err("text");
        assert!(e.to_string().contains("not JSON"), "{e}");
    }
}
