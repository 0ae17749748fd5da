//! The in-memory replica a monitor keeps current: table → row UUID → row.
//!
//! Rows are stored compactly as a slice of values in the table's column order (column names
//! are stored once per table). Columns the server omitted hold the schema default.
//!
//! A `modify` diff applies per column shape: scalars and optional values (sets of at most
//! one element) are replaced; for larger sets, the elements present in the diff are toggled
//! (symmetric difference); for maps, a key with the same
//! value is removed, a new key is added, and a key with a different value is replaced.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::monitor::{ColumnKind, DbShape, RowUpdate, TableUpdates};
use crate::value::{Atom, FromValue, Row, Uuid, Value, ValueError};

/// One replicated table.
#[derive(Debug, Default)]
pub(crate) struct TableData {
    columns: Vec<String>,
    index: HashMap<String, usize>,
    kinds: Vec<Option<ColumnKind>>,
    defaults: Vec<Value>,
    rows: HashMap<Uuid, Box<[Value]>>,
}

impl TableData {
    /// A table replicating `columns` (all schema columns when `None`).
    pub(crate) fn new(
        shape: Option<&crate::monitor::TableShape>,
        columns: Option<&[String]>,
    ) -> Self {
        let mut t = TableData::default();
        let schema_cols = shape.map(|s| &s.columns[..]).unwrap_or(&[]);
        match columns {
            Some(cols) => {
                for c in cols {
                    let found = schema_cols.iter().find(|(n, ..)| n == c);
                    t.add_column(c, found.map(|(_, k, d)| (*k, d.clone())));
                }
            }
            None => {
                for (n, k, d) in schema_cols {
                    t.add_column(n, Some((*k, d.clone())));
                }
            }
        }
        t
    }

    fn add_column(&mut self, name: &str, shape: Option<(ColumnKind, Value)>) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.columns.len();
        self.columns.push(name.to_string());
        self.index.insert(name.to_string(), i);
        let (kind, default) = match shape {
            Some((k, d)) => (Some(k), d),
            None => (None, Value::empty()),
        };
        self.kinds.push(kind);
        self.defaults.push(default);
        i
    }

    fn slot(&mut self, name: &str) -> usize {
        match self.index.get(name) {
            Some(&i) => i,
            // Not in the schema we know (e.g. a newer server): keep it, shape by value form.
            None => self.add_column(name, None),
        }
    }

    fn normalize(kind: Option<ColumnKind>, v: Value) -> Value {
        match (kind, v) {
            (Some(ColumnKind::Set | ColumnKind::Optional), Value::Atom(a)) => Value::Set(vec![a]),
            (Some(ColumnKind::Map), Value::Set(s)) if s.is_empty() => Value::Map(Vec::new()),
            (Some(ColumnKind::Scalar), Value::Set(mut s)) if s.len() == 1 => {
                Value::Atom(s.remove(0))
            }
            (_, v) => v,
        }
    }

    fn fresh_values(&self) -> Vec<Value> {
        self.defaults.clone()
    }

    pub(crate) fn put(&mut self, uuid: Uuid, row: Row) {
        let mut vals = self.fresh_values();
        for (col, v) in row {
            if col == "_uuid" {
                continue;
            }
            let i = self.slot(&col);
            while vals.len() < self.columns.len() {
                vals.push(self.defaults[vals.len()].clone());
            }
            vals[i] = Self::normalize(self.kinds[i], v);
        }
        self.rows.insert(uuid, vals.into_boxed_slice());
    }

    pub(crate) fn modify(&mut self, uuid: Uuid, diff: Row) {
        let mut vals = match self.rows.remove(&uuid) {
            Some(v) => v.into_vec(),
            None => {
                tracing::warn!(%uuid, "modify of a row not in the replica");
                self.fresh_values()
            }
        };
        for (col, d) in diff {
            if col == "_uuid" {
                continue;
            }
            let i = self.slot(&col);
            while vals.len() < self.columns.len() {
                vals.push(self.defaults[vals.len()].clone());
            }
            let old = std::mem::replace(&mut vals[i], Value::empty());
            vals[i] = apply_diff(self.kinds[i], old, d);
        }
        self.rows.insert(uuid, vals.into_boxed_slice());
    }

    pub(crate) fn delete(&mut self, uuid: &Uuid) {
        self.rows.remove(uuid);
    }

    pub(crate) fn clear(&mut self) {
        self.rows.clear();
    }
}

/// Applies one column's `modify` diff to its old value.
pub(crate) fn apply_diff(kind: Option<ColumnKind>, old: Value, diff: Value) -> Value {
    let kind = kind.unwrap_or(match (&old, &diff) {
        (Value::Map(_), _) | (_, Value::Map(_)) => ColumnKind::Map,
        (Value::Set(_), _) | (_, Value::Set(_)) => ColumnKind::Set,
        _ => ColumnKind::Scalar,
    });
    match kind {
        ColumnKind::Scalar | ColumnKind::Optional => TableData::normalize(Some(kind), diff),
        ColumnKind::Set => {
            let mut set: Vec<Atom> = match old {
                Value::Atom(a) => vec![a],
                Value::Set(s) => s,
                Value::Map(_) => Vec::new(),
            };
            for a in diff.atoms() {
                match set.iter().position(|x| x == a) {
                    Some(p) => {
                        set.swap_remove(p);
                    }
                    None => set.push(a.clone()),
                }
            }
            Value::Set(set)
        }
        ColumnKind::Map => {
            let mut map = match old {
                Value::Map(m) => m,
                _ => Vec::new(),
            };
            for (k, v) in diff.pairs() {
                match map.iter().position(|(mk, _)| mk == k) {
                    Some(p) if &map[p].1 == v => {
                        map.swap_remove(p);
                    }
                    Some(p) => map[p].1 = v.clone(),
                    None => map.push((k.clone(), v.clone())),
                }
            }
            Value::Map(map)
        }
    }
}

/// All replicated tables of one monitor.
#[derive(Debug, Default)]
pub(crate) struct ReplicaData {
    tables: BTreeMap<String, TableData>,
}

impl ReplicaData {
    pub(crate) fn new(shape: &DbShape, requests: &[crate::monitor::MonitorRequest]) -> Self {
        let mut tables = BTreeMap::new();
        for r in requests {
            tables.entry(r.table.clone()).or_insert_with(|| {
                TableData::new(shape.tables.get(&r.table), r.columns.as_deref())
            });
        }
        ReplicaData { tables }
    }

    /// Applies updates; with `replace`, the monitored tables are first emptied (a fresh
    /// initial snapshot).
    pub(crate) fn apply(&mut self, updates: TableUpdates, replace: bool) {
        if replace {
            self.tables.values_mut().for_each(TableData::clear);
        }
        for (table, rows) in updates {
            let t = self.tables.entry(table).or_default();
            for (uuid, u) in rows {
                match u {
                    RowUpdate::Put(row) => t.put(uuid, row),
                    RowUpdate::Modify(diff) => t.modify(uuid, diff),
                    RowUpdate::Delete => t.delete(&uuid),
                }
            }
        }
    }
}

/// The state shared between the connection task and the [`Replica`] handles.
#[derive(Debug)]
pub(crate) struct ReplicaShared {
    pub(crate) db: String,
    data: RwLock<ReplicaData>,
    version: watch::Sender<u64>,
    synced: AtomicBool,
    /// Monitor (re-)establishments that sent the whole contents.
    full_syncs: AtomicU64,
    /// Re-establishments answered with only the missed changes (`monitor_cond_since`
    /// found our last transaction id).
    resumes: AtomicU64,
}

/// How a replica's monitor was (re-)established so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// The server sent the full contents (first monitor, or history not found).
    pub full_syncs: u64,
    /// The server sent only what was missed since our last transaction id.
    pub resumes: u64,
}

impl ReplicaShared {
    pub(crate) fn new(db: &str, data: ReplicaData) -> Self {
        ReplicaShared {
            db: db.to_string(),
            data: RwLock::new(data),
            version: watch::Sender::new(0),
            synced: AtomicBool::new(false),
            full_syncs: AtomicU64::new(0),
            resumes: AtomicU64::new(0),
        }
    }

    /// Counts one monitor establishment.
    pub(crate) fn count_sync(&self, resumed: bool) {
        let c = if resumed {
            &self.resumes
        } else {
            &self.full_syncs
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn apply(&self, updates: TableUpdates, replace: bool) {
        {
            let mut d = self.data.write().unwrap_or_else(|e| e.into_inner());
            d.apply(updates, replace);
        }
        self.version.send_modify(|v| *v += 1);
    }

    pub(crate) fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::Release);
        self.version.send_modify(|v| *v += 1);
    }

    fn read(&self) -> RwLockReadGuard<'_, ReplicaData> {
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// A read-only, live copy of the monitored tables of one database.
///
/// Cheap to clone. The monitor is cancelled when the last clone is dropped. While the
/// connection is down the replica keeps its last contents ([`Replica::is_synced`] is false)
/// and catches up after the reconnection.
#[derive(Clone)]
pub struct Replica {
    pub(crate) shared: Arc<ReplicaShared>,
    pub(crate) _handle: Arc<dyn Send + Sync>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("db", &self.shared.db)
            .field("version", &self.version())
            .finish()
    }
}

impl Replica {
    /// The database this replica copies.
    pub fn db(&self) -> &str {
        &self.shared.db
    }

    /// Incremented on every change (and on sync state changes).
    pub fn version(&self) -> u64 {
        *self.shared.version.borrow()
    }

    /// A receiver that is notified on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.version.subscribe()
    }

    /// How often the monitor was established with full contents vs resumed.
    pub fn sync_stats(&self) -> SyncStats {
        SyncStats {
            full_syncs: self.shared.full_syncs.load(Ordering::Relaxed),
            resumes: self.shared.resumes.load(Ordering::Relaxed),
        }
    }

    /// True while the monitor is established on a live connection.
    pub fn is_synced(&self) -> bool {
        self.shared.synced.load(Ordering::Acquire)
    }

    /// Runs `f` on a consistent view (hold it briefly: updates wait for it).
    pub fn read<R>(&self, f: impl FnOnce(&View<'_>) -> R) -> R {
        let guard = self.shared.read();
        f(&View { data: &guard })
    }

    /// A snapshot of a table's rows (each with `_uuid`).
    pub fn rows(&self, table: &str) -> Vec<(Uuid, Row)> {
        self.read(|v| v.rows(table).map(|r| (r.uuid(), r.to_row())).collect())
    }

    /// One row by UUID (with `_uuid`).
    pub fn get(&self, table: &str, uuid: &Uuid) -> Option<Row> {
        self.read(|v| v.get(table, uuid).map(|r| r.to_row()))
    }

    /// Number of rows in a table.
    pub fn len(&self, table: &str) -> usize {
        self.read(|v| v.len(table))
    }

    /// True when the table has no rows.
    pub fn is_empty(&self, table: &str) -> bool {
        self.len(table) == 0
    }

    /// Waits until `condition` holds on the replica, at most `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut condition: impl FnMut(&View<'_>) -> bool,
    ) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.shared.version.subscribe();
        loop {
            rx.borrow_and_update();
            if self.read(&mut condition) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Err(_) => return Err(Error::Timeout(timeout)),
                Ok(Err(_)) => return Err(Error::Closed),
                Ok(Ok(())) => {}
            }
        }
    }
}

/// A consistent read view of a replica.
pub struct View<'a> {
    data: &'a ReplicaData,
}

impl<'a> View<'a> {
    /// The names of the replicated tables.
    pub fn tables(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.data.tables.keys().map(String::as_str)
    }

    /// Iterates a table's rows (nothing for an unknown table).
    pub fn rows(&self, table: &str) -> impl Iterator<Item = RowView<'a>> + 'a {
        self.data
            .tables
            .get(table)
            .into_iter()
            .flat_map(|t| t.rows.iter().map(move |(u, v)| RowView::new(t, *u, v)))
    }

    /// One row by UUID.
    pub fn get(&self, table: &str, uuid: &Uuid) -> Option<RowView<'a>> {
        let t = self.data.tables.get(table)?;
        t.rows.get(uuid).map(|v| RowView::new(t, *uuid, v))
    }

    /// The first row satisfying `pred`.
    pub fn find(
        &self,
        table: &str,
        mut pred: impl FnMut(&RowView<'a>) -> bool,
    ) -> Option<RowView<'a>> {
        self.rows(table).find(|r| pred(r))
    }

    pub fn len(&self, table: &str) -> usize {
        self.data.tables.get(table).map_or(0, |t| t.rows.len())
    }

    pub fn is_empty(&self, table: &str) -> bool {
        self.len(table) == 0
    }
}

/// One row inside a [`View`].
#[derive(Clone, Copy)]
pub struct RowView<'a> {
    table: &'a TableData,
    uuid: Uuid,
    values: &'a [Value],
}

impl<'a> RowView<'a> {
    fn new(table: &'a TableData, uuid: Uuid, values: &'a [Value]) -> Self {
        RowView {
            table,
            uuid,
            values,
        }
    }

    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// A replicated column's value (the schema default if the server omitted it).
    pub fn get(&self, column: &str) -> Option<&'a Value> {
        let &i = self.table.index.get(column)?;
        self.values.get(i).or_else(|| self.table.defaults.get(i))
    }

    /// A column converted to a Rust type (an absent column reads as the empty set).
    pub fn get_as<T: FromValue>(&self, column: &str) -> Result<T, ValueError> {
        static EMPTY: Value = Value::Set(Vec::new());
        T::from_value(self.get(column).unwrap_or(&EMPTY)).map_err(|e| e.in_column(column))
    }

    /// A string column, or `""`.
    pub fn str(&self, column: &str) -> &'a str {
        match self.get(column).map(Value::atoms) {
            Some([Atom::String(s)]) => s,
            _ => "",
        }
    }

    /// A value of a string→string map column.
    pub fn map_get(&self, column: &str, key: &str) -> Option<&'a str> {
        self.get(column)?
            .pairs()
            .iter()
            .find_map(|(k, v)| match (k, v) {
                (Atom::String(k), Atom::String(v)) if k == key => Some(v.as_str()),
                _ => None,
            })
    }

    /// The row as a [`Row`] (all replicated columns plus `_uuid`).
    pub fn to_row(&self) -> Row {
        let mut row: Row = self
            .table
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let v = self.values.get(i).unwrap_or(&self.table.defaults[i]);
                (c.clone(), v.clone())
            })
            .collect();
        row.insert("_uuid".into(), Value::uuid(self.uuid));
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::{MonitorRequest, parse_updates2};
    use serde_json::json;

    fn shape() -> DbShape {
        DbShape::from_schema(&json!({"tables":{"LS":{"columns":{
            "name":{"type":"string"},
            "ports":{"type":{"key":{"type":"uuid"},"min":0,"max":"unlimited"}},
            "addresses":{"type":{"key":"string","min":0,"max":"unlimited"}},
            "tag":{"type":{"key":"integer","min":0,"max":1}},
            "other":{"type":{"key":"string","value":"string","min":0,"max":"unlimited"}},
            "n":{"type":"integer"}}}}}))
        .unwrap()
    }

    const U1: &str = "36bdd8f4-7e9d-4a0c-9a8e-5f1b0d1c2e3f";

    #[test]
    fn update2_diffs() {
        let mut d = ReplicaData::new(&shape(), &[MonitorRequest::table("LS")]);
        let up = |d: &mut ReplicaData, j| d.apply(parse_updates2(&j).unwrap(), false);
        up(
            &mut d,
            json!({"LS":{U1:{"initial":{"name":"ls1","addresses":"a","tag":5,
                "other":["map",[["k1","v1"],["k2","v2"]]]}}}}),
        );
        let view = View { data: &d };
        let r = view.get("LS", &U1.parse().unwrap()).unwrap();
        assert_eq!(r.str("name"), "ls1");
        // a one-element set arrives as a bare atom but is stored as a set
        assert_eq!(r.get("addresses"), Some(&Value::string_set(["a"])));
        // omitted columns hold the schema default
        assert_eq!(r.get("n"), Some(&Value::integer(0)));
        assert_eq!(r.get("ports"), Some(&Value::empty()));

        // set diff toggles: "a" removed, "b" added; optional 5 -> 6 arrives as the new
        // value (ovsdb-server diffs only sets of max > 1); map: k1 same value removed, k2
        // replaced, k3 added; scalar replaced
        up(
            &mut d,
            json!({"LS":{U1:{"modify":{"addresses":["set",["a","b"]],"tag":6,
                "other":["map",[["k1","v1"],["k2","x"],["k3","v3"]]],"name":"ls2","n":7}}}}),
        );
        let view = View { data: &d };
        let r = view.get("LS", &U1.parse().unwrap()).unwrap();
        assert_eq!(r.str("name"), "ls2");
        assert_eq!(r.get("addresses"), Some(&Value::string_set(["b"])));
        assert_eq!(r.get_as::<Option<i64>>("tag").unwrap(), Some(6));
        assert_eq!(r.get_as::<i64>("n").unwrap(), 7);
        let other: BTreeMap<String, String> = r.get_as("other").unwrap();
        assert_eq!(
            other,
            BTreeMap::from([("k2".into(), "x".into()), ("k3".into(), "v3".into())])
        );
        // an optional value cleared: the new (empty) value
        up(&mut d, json!({"LS":{U1:{"modify":{"tag":["set",[]]}}}}));
        let view = View { data: &d };
        let r = view.get("LS", &U1.parse().unwrap()).unwrap();
        assert_eq!(r.get_as::<Option<i64>>("tag").unwrap(), None);
        // adding one element arrives as a bare atom
        up(&mut d, json!({"LS":{U1:{"modify":{"addresses":"c"}}}}));
        let view = View { data: &d };
        let r = view.get("LS", &U1.parse().unwrap()).unwrap();
        let mut a: Vec<String> = r.get_as("addresses").unwrap();
        a.sort();
        assert_eq!(a, ["b", "c"]);
        assert_eq!(r.to_row()["_uuid"], Value::uuid(U1.parse().unwrap()));

        up(&mut d, json!({"LS":{U1:{"delete":null}}}));
        assert_eq!(View { data: &d }.len("LS"), 0);
    }

    #[test]
    fn typed_rows_of_a_partial_monitor() {
        use crate::vswitch::Bridge;
        // a replica of two of Bridge's columns: the typed row reads the rest as defaults
        let shape = DbShape::from_schema(&json!({"tables":{"Bridge":{"columns":{
            "name":{"type":"string"},
            "ports":{"type":{"key":{"type":"uuid"},"min":0,"max":"unlimited"}}}}}}))
        .unwrap();
        let mut d = ReplicaData::new(&shape, &[MonitorRequest::table("Bridge")]);
        d.apply(
            parse_updates2(&json!({"Bridge":{U1:{"initial":{"name":"br-int"}}}})).unwrap(),
            false,
        );
        let view = View { data: &d };
        let all: Vec<Bridge> = view
            .iter_typed::<Bridge>()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].name, "br-int");
        assert!(!all[0].mcast_snooping_enable);
        let u = U1.parse().unwrap();
        assert_eq!(all[0].uuid, u);
        assert_eq!(view.get_typed::<Bridge>(&u).unwrap().unwrap(), all[0]);
        assert!(
            view.typed::<Bridge>().is_err(),
            "the strict read needs every scalar"
        );
    }

    #[test]
    fn replace_drops_rows_gone_meanwhile() {
        let u2 = "46bdd8f4-7e9d-4a0c-9a8e-5f1b0d1c2e3f";
        let mut d = ReplicaData::new(&shape(), &[MonitorRequest::table("LS")]);
        d.apply(
            parse_updates2(
                &json!({"LS":{U1:{"initial":{"name":"a"}},u2:{"initial":{"name":"b"}}}}),
            )
            .unwrap(),
            false,
        );
        d.apply(
            parse_updates2(&json!({"LS":{u2:{"initial":{"name":"b2"}}}})).unwrap(),
            true,
        );
        let v = View { data: &d };
        assert_eq!(v.len("LS"), 1);
        assert_eq!(v.rows("LS").next().unwrap().str("name"), "b2");
    }

    #[test]
    fn unknown_columns_and_tables_are_kept() {
        let mut d = ReplicaData::new(&DbShape::default(), &[MonitorRequest::table("X")]);
        d.apply(
            parse_updates2(
                &json!({"X":{U1:{"insert":{"s":["set",["a"]],"m":["map",[["k","v"]]]}}}}),
            )
            .unwrap(),
            false,
        );
        d.apply(
            parse_updates2(
                &json!({"X":{U1:{"modify":{"s":["set",["a","b"]],"m":["map",[["k","v"]]]}}}}),
            )
            .unwrap(),
            false,
        );
        let v = View { data: &d };
        let r = v.rows("X").next().unwrap();
        assert_eq!(r.get("s"), Some(&Value::string_set(["b"])));
        assert_eq!(r.get("m"), Some(&Value::Map(vec![])));
        assert_eq!(r.map_get("m", "k"), None);
    }

    #[tokio::test]
    async fn wait_for_is_bounded_and_wakes() {
        let shared = Arc::new(ReplicaShared::new(
            "db",
            ReplicaData::new(&shape(), &[MonitorRequest::table("LS")]),
        ));
        let replica = Replica {
            shared: shared.clone(),
            _handle: Arc::new(()),
        };
        let err = replica
            .wait_for(Duration::from_millis(20), |v| v.len("LS") == 1)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Timeout(_)));
        let s2 = shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            s2.apply(
                parse_updates2(&json!({"LS":{U1:{"insert":{"name":"x"}}}})).unwrap(),
                false,
            );
        });
        replica
            .wait_for(Duration::from_secs(5), |v| {
                v.find("LS", |r| r.str("name") == "x").is_some()
            })
            .await
            .unwrap();
        assert_eq!(replica.rows("LS").len(), 1);
    }

    proptest::proptest! {
        /// Arbitrary (even inconsistent) update sequences never panic the replica.
        #[test]
        fn random_updates_never_panic(ops in proptest::collection::vec(
            (0usize..3, 0u8..4, proptest::sample::select(vec![
                json!("x"), json!(["set", ["a", "b"]]), json!(["map", [["k", "v"]]]),
                json!(5), json!(["set", []]), json!(["uuid", U1]), json!(true),
            ]), proptest::sample::select(vec!["name", "ports", "addresses", "tag", "other", "n", "zz"])),
            0..40)) {
            let uuids = [U1, "46bdd8f4-7e9d-4a0c-9a8e-5f1b0d1c2e3f", "56bdd8f4-7e9d-4a0c-9a8e-5f1b0d1c2e3f"];
            let mut d = ReplicaData::new(&shape(), &[MonitorRequest::table("LS")]);
            for (row, kind, value, col) in ops {
                let body = match kind {
                    0 => json!({"initial": {col: value}}),
                    1 => json!({"insert": {col: value}}),
                    2 => json!({"modify": {col: value}}),
                    _ => json!({"delete": null}),
                };
                if let Ok(u) = parse_updates2(&json!({"LS": {uuids[row]: body}})) {
                    d.apply(u, false);
                }
                let v = View { data: &d };
                for r in v.rows("LS") {
                    let _ = r.to_row();
                    let _ = r.get_as::<Vec<String>>("addresses");
                }
            }
        }
    }
}
