//! Monitor requests and the wire forms of monitor replies and update notifications
//! (`table-updates` of RFC 7047 and `table-updates2` of the OVS extensions), plus the bit
//! of the schema the replica needs to apply diffs (which columns are scalars, sets, maps).

use std::collections::HashMap;

use serde_json::{Map, Value as Json, json};

use crate::error::{Error, Result};
use crate::ops::{Condition, row_from_json};
use crate::value::{Atom, Row, Uuid, Value};

/// What to monitor in one table.
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorRequest {
    pub table: String,
    /// Columns to replicate; `None` means all.
    pub columns: Option<Vec<String>>,
    /// Only rows matching all these conditions; `None` means all rows.
    pub r#where: Option<Vec<Condition>>,
}

impl MonitorRequest {
    /// All rows and columns of `table`.
    pub fn table(table: impl Into<String>) -> Self {
        MonitorRequest {
            table: table.into(),
            columns: None,
            r#where: None,
        }
    }
    pub fn with_columns<I: IntoIterator<Item = S>, S: Into<String>>(mut self, cols: I) -> Self {
        self.columns = Some(cols.into_iter().map(Into::into).collect());
        self
    }
    pub fn with_where(mut self, conditions: Vec<Condition>) -> Self {
        self.r#where = Some(conditions);
        self
    }
}

/// The monitor method in use, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MonitorMethod {
    CondSince,
    Cond,
    Plain,
}

impl MonitorMethod {
    pub(crate) fn name(self) -> &'static str {
        match self {
            MonitorMethod::CondSince => crate::rpc::method::MONITOR_COND_SINCE,
            MonitorMethod::Cond => crate::rpc::method::MONITOR_COND,
            MonitorMethod::Plain => crate::rpc::method::MONITOR,
        }
    }
    pub(crate) fn fallback(self) -> Option<Self> {
        match self {
            MonitorMethod::CondSince => Some(MonitorMethod::Cond),
            MonitorMethod::Cond => Some(MonitorMethod::Plain),
            MonitorMethod::Plain => None,
        }
    }
}

/// The `params` of a monitor request.
pub(crate) fn monitor_params(
    method: MonitorMethod,
    db: &str,
    id: &str,
    requests: &[MonitorRequest],
    last_txn_id: Option<&str>,
) -> Json {
    let mut by_table: Map<String, Json> = Map::new();
    for r in requests {
        let mut o = Map::new();
        if let Some(c) = &r.columns {
            o.insert("columns".into(), json!(c));
        }
        if let Some(w) = &r.r#where {
            if method == MonitorMethod::Plain {
                tracing::warn!(table = %r.table, "server lacks monitor_cond: condition ignored");
            } else {
                o.insert(
                    "where".into(),
                    Json::Array(w.iter().map(Condition::to_json).collect()),
                );
            }
        }
        let entry = by_table
            .entry(r.table.clone())
            .or_insert_with(|| Json::Array(Vec::new()));
        if let Json::Array(a) = entry {
            a.push(Json::Object(o));
        }
    }
    let reqs = Json::Object(by_table);
    match method {
        MonitorMethod::CondSince => {
            let last = last_txn_id.map_or_else(|| Uuid::nil().to_string(), str::to_string);
            json!([db, id, reqs, last])
        }
        _ => json!([db, id, reqs]),
    }
}

/// One row's change.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RowUpdate {
    /// `initial`/`insert` (or a plain monitor's `new`): the row's non-default columns.
    Put(Row),
    /// `modify`: a diff (see [`crate::replica`]).
    Modify(Row),
    Delete,
}

/// Updates for several tables, in wire order.
pub(crate) type TableUpdates = Vec<(String, Vec<(Uuid, RowUpdate)>)>;

fn each_row(
    j: &Json,
    mut f: impl FnMut(&Map<String, Json>) -> Result<RowUpdate>,
) -> Result<TableUpdates> {
    let Json::Object(tables) = j else {
        return Err(Error::protocol("table updates are not an object"));
    };
    let mut out = Vec::with_capacity(tables.len());
    for (table, rows) in tables {
        let Json::Object(rows) = rows else {
            return Err(Error::protocol(format!(
                "updates for {table} are not an object"
            )));
        };
        let mut v = Vec::with_capacity(rows.len());
        for (uuid, upd) in rows {
            let uuid: Uuid = uuid.parse()?;
            let Json::Object(upd) = upd else {
                return Err(Error::protocol(format!(
                    "update of {table} {uuid} is not an object"
                )));
            };
            v.push((uuid, f(upd)?));
        }
        out.push((table.clone(), v));
    }
    Ok(out)
}

/// Parses `table-updates2` (`monitor_cond`, `monitor_cond_since`, `update2`, `update3`).
pub(crate) fn parse_updates2(j: &Json) -> Result<TableUpdates> {
    each_row(j, |u| {
        if let Some(r) = u.get("initial").or_else(|| u.get("insert")) {
            Ok(RowUpdate::Put(row_from_json(r)?))
        } else if let Some(r) = u.get("modify") {
            Ok(RowUpdate::Modify(row_from_json(r)?))
        } else if u.contains_key("delete") {
            Ok(RowUpdate::Delete)
        } else {
            Err(Error::protocol(
                "row update2 without initial/insert/modify/delete",
            ))
        }
    })
}

/// Parses RFC 7047 `table-updates` (`monitor`, `update`): `new` is the whole row.
pub(crate) fn parse_updates1(j: &Json) -> Result<TableUpdates> {
    each_row(j, |u| match u.get("new") {
        Some(r) => Ok(RowUpdate::Put(row_from_json(r)?)),
        None => Ok(RowUpdate::Delete),
    })
}

/// How a column's value is shaped, which decides how a `modify` diff applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ColumnKind {
    /// Exactly one atom: a diff replaces it.
    Scalar,
    /// A set of at most one element (an optional value): a diff is the new value
    /// (ovsdb-server diffs only sets with `max` > 1 element-wise, see `ovsdb_datum_diff`).
    Optional,
    /// A set with `max` > 1: a diff toggles elements.
    Set,
    /// A map: a diff adds, removes or replaces keys.
    Map,
}

/// Column shapes and defaults of one table, in schema order.
#[derive(Debug, Clone, Default)]
pub(crate) struct TableShape {
    pub columns: Vec<(String, ColumnKind, Value)>,
}

/// Column shapes of a database, from its `get_schema` JSON.
#[derive(Debug, Clone, Default)]
pub(crate) struct DbShape {
    pub tables: HashMap<String, TableShape>,
}

fn default_atom(key: &Json) -> Atom {
    let ty = match key {
        Json::String(s) => s.as_str(),
        Json::Object(o) => o.get("type").and_then(Json::as_str).unwrap_or("string"),
        _ => "string",
    };
    match ty {
        "integer" => Atom::Integer(0),
        "real" => Atom::Real(0.0),
        "boolean" => Atom::Boolean(false),
        "uuid" => Atom::Uuid(Uuid::nil()),
        _ => Atom::String(String::new()),
    }
}

fn bound(o: &Map<String, Json>, name: &str) -> i64 {
    match o.get(name) {
        None => 1,
        Some(Json::String(s)) if s == "unlimited" => i64::MAX,
        Some(v) => v.as_i64().unwrap_or(1),
    }
}

impl DbShape {
    pub(crate) fn from_schema(schema: &Json) -> Result<Self> {
        let tables = schema
            .get("tables")
            .and_then(Json::as_object)
            .ok_or_else(|| Error::protocol("schema has no tables object"))?;
        let mut out = DbShape::default();
        for (tname, t) in tables {
            let cols = t
                .get("columns")
                .and_then(Json::as_object)
                .ok_or_else(|| Error::protocol(format!("schema table {tname} has no columns")))?;
            let mut shape = TableShape::default();
            for (cname, c) in cols {
                let ty = c.get("type").unwrap_or(&Json::Null);
                let (kind, default) = match ty {
                    Json::Object(o) if o.contains_key("value") => {
                        (ColumnKind::Map, Value::Map(Vec::new()))
                    }
                    Json::Object(o) => {
                        if bound(o, "min") == 1 && bound(o, "max") == 1 {
                            let key = o.get("key").unwrap_or(&Json::Null);
                            (ColumnKind::Scalar, Value::Atom(default_atom(key)))
                        } else if bound(o, "max") == 1 {
                            (ColumnKind::Optional, Value::Set(Vec::new()))
                        } else {
                            (ColumnKind::Set, Value::Set(Vec::new()))
                        }
                    }
                    other => (ColumnKind::Scalar, Value::Atom(default_atom(other))),
                };
                shape.columns.push((cname.clone(), kind, default));
            }
            out.tables.insert(tname.clone(), shape);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_forms() {
        let reqs = [
            MonitorRequest::table("Logical_Switch").with_columns(["name"]),
            MonitorRequest::table("ACL")
                .with_where(vec![Condition::eq("priority", Value::integer(5))]),
        ];
        let p = monitor_params(
            MonitorMethod::CondSince,
            "OVN_Northbound",
            "m1",
            &reqs,
            None,
        );
        assert_eq!(
            p,
            json!(["OVN_Northbound", "m1",
                   {"Logical_Switch":[{"columns":["name"]}],
                    "ACL":[{"where":[["priority","==",5]]}]},
                   "00000000-0000-0000-0000-000000000000"])
        );
        let p = monitor_params(MonitorMethod::Plain, "db", "m1", &reqs, Some("x"));
        assert_eq!(
            p,
            json!(["db", "m1", {"Logical_Switch":[{"columns":["name"]}], "ACL":[{}]}])
        );
    }

    #[test]
    fn parse_update_forms() {
        let u = "36bdd8f4-7e9d-4a0c-9a8e-5f1b0d1c2e3f";
        let j = json!({"T": {u: {"insert": {"a": 1}}}});
        let p = parse_updates2(&j).unwrap();
        assert_eq!(
            p[0].1[0].1,
            RowUpdate::Put(Row::from([("a".into(), Value::integer(1))]))
        );
        let j = json!({"T": {u: {"delete": null}}});
        assert_eq!(parse_updates2(&j).unwrap()[0].1[0].1, RowUpdate::Delete);
        let j = json!({"T": {u: {"old": {"a": 1}}}});
        assert_eq!(parse_updates1(&j).unwrap()[0].1[0].1, RowUpdate::Delete);
        for bad in [
            json!([]),
            json!({"T": []}),
            json!({"T": {"not-a-uuid": {"delete": null}}}),
            json!({"T": {u: {"bogus": 1}}}),
            json!({"T": {u: {"insert": {"a": {}}}}}),
        ] {
            assert!(parse_updates2(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shapes_from_schema() {
        let s = json!({"name":"X","tables":{"T":{"columns":{
            "name":{"type":"string"},
            "tag":{"type":{"key":{"type":"integer"},"min":0,"max":1}},
            "ports":{"type":{"key":{"type":"uuid"},"min":0,"max":"unlimited"}},
            "ids":{"type":{"key":"string","value":"string","min":0,"max":"unlimited"}},
            "up":{"type":{"key":"boolean"}}}}}});
        let shape = DbShape::from_schema(&s).unwrap();
        let cols: HashMap<_, _> = shape.tables["T"]
            .columns
            .iter()
            .map(|(n, k, d)| (n.as_str(), (*k, d.clone())))
            .collect();
        assert_eq!(cols["name"], (ColumnKind::Scalar, Value::string("")));
        assert_eq!(cols["tag"].0, ColumnKind::Optional);
        assert_eq!(cols["ports"].0, ColumnKind::Set);
        assert_eq!(cols["ids"].0, ColumnKind::Map);
        assert_eq!(cols["up"], (ColumnKind::Scalar, Value::boolean(false)));
    }
}
