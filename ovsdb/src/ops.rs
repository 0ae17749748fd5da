//! Transaction operations (RFC 7047 §5.2), conditions, mutations, and the mapping of a
//! `transact` result array onto [`OpResult`]s or an [`Error::Transaction`].

use serde_json::{Map, Value as Json, json};

use crate::error::{Error, Result};
use crate::value::{Row, Uuid, Value};

/// A condition function (`<`, `<=`, `==`, `!=`, `>=`, `>`, `includes`, `excludes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    Lt,
    Le,
    Eq,
    Ne,
    Ge,
    Gt,
    Includes,
    Excludes,
}

impl Function {
    pub fn as_str(self) -> &'static str {
        match self {
            Function::Lt => "<",
            Function::Le => "<=",
            Function::Eq => "==",
            Function::Ne => "!=",
            Function::Ge => ">=",
            Function::Gt => ">",
            Function::Includes => "includes",
            Function::Excludes => "excludes",
        }
    }
}

/// A `where` clause element: `[column, function, value]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub column: String,
    pub function: Function,
    pub value: Value,
}

impl Condition {
    pub fn new(column: impl Into<String>, function: Function, value: Value) -> Self {
        Condition {
            column: column.into(),
            function,
            value,
        }
    }
    pub fn eq(column: impl Into<String>, value: Value) -> Self {
        Self::new(column, Function::Eq, value)
    }
    pub fn ne(column: impl Into<String>, value: Value) -> Self {
        Self::new(column, Function::Ne, value)
    }
    pub fn includes(column: impl Into<String>, value: Value) -> Self {
        Self::new(column, Function::Includes, value)
    }
    pub fn excludes(column: impl Into<String>, value: Value) -> Self {
        Self::new(column, Function::Excludes, value)
    }
    /// `_uuid == uuid`.
    pub fn uuid(uuid: Uuid) -> Self {
        Self::eq("_uuid", Value::uuid(uuid))
    }
    pub fn to_json(&self) -> Json {
        json!([self.column, self.function.as_str(), self.value.to_json()])
    }
}

/// A mutator (`+=`, `-=`, `*=`, `/=`, `%=`, `insert`, `delete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutator {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Insert,
    Delete,
}

impl Mutator {
    pub fn as_str(self) -> &'static str {
        match self {
            Mutator::Add => "+=",
            Mutator::Sub => "-=",
            Mutator::Mul => "*=",
            Mutator::Div => "/=",
            Mutator::Mod => "%=",
            Mutator::Insert => "insert",
            Mutator::Delete => "delete",
        }
    }
}

/// A `mutations` element: `[column, mutator, value]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    pub column: String,
    pub mutator: Mutator,
    pub value: Value,
}

impl Mutation {
    pub fn new(column: impl Into<String>, mutator: Mutator, value: Value) -> Self {
        Mutation {
            column: column.into(),
            mutator,
            value,
        }
    }
    /// Adds set elements / map pairs.
    pub fn insert(column: impl Into<String>, value: Value) -> Self {
        Self::new(column, Mutator::Insert, value)
    }
    /// Removes set elements / map pairs (or, given a set of keys, map keys).
    pub fn delete(column: impl Into<String>, value: Value) -> Self {
        Self::new(column, Mutator::Delete, value)
    }
    pub fn to_json(&self) -> Json {
        json!([self.column, self.mutator.as_str(), self.value.to_json()])
    }
}

/// The `until` of a `wait` operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitUntil {
    Eq,
    Ne,
}

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    Insert {
        table: String,
        row: Row,
        uuid_name: Option<String>,
    },
    Select {
        table: String,
        r#where: Vec<Condition>,
        columns: Option<Vec<String>>,
    },
    Update {
        table: String,
        r#where: Vec<Condition>,
        row: Row,
    },
    Mutate {
        table: String,
        r#where: Vec<Condition>,
        mutations: Vec<Mutation>,
    },
    Delete {
        table: String,
        r#where: Vec<Condition>,
    },
    Wait {
        table: String,
        r#where: Vec<Condition>,
        columns: Vec<String>,
        until: WaitUntil,
        rows: Vec<Row>,
        /// Milliseconds; `None` waits forever.
        timeout: Option<u64>,
    },
    Commit {
        durable: bool,
    },
    Abort,
    Comment(String),
    Assert {
        lock: String,
    },
}

impl Operation {
    pub fn insert(table: impl Into<String>, row: Row) -> Self {
        Operation::Insert {
            table: table.into(),
            row,
            uuid_name: None,
        }
    }
    /// Names the inserted row so later operations can refer to it with
    /// [`Value::named_uuid`]. No effect on other operations.
    pub fn with_uuid_name(mut self, name: impl Into<String>) -> Self {
        if let Operation::Insert { uuid_name, .. } = &mut self {
            *uuid_name = Some(name.into());
        }
        self
    }
    pub fn select(table: impl Into<String>, r#where: Vec<Condition>) -> Self {
        Operation::Select {
            table: table.into(),
            r#where,
            columns: None,
        }
    }
    /// Restricts a `select` to these columns. No effect on other operations.
    pub fn with_columns<I: IntoIterator<Item = S>, S: Into<String>>(mut self, cols: I) -> Self {
        if let Operation::Select { columns, .. } = &mut self {
            *columns = Some(cols.into_iter().map(Into::into).collect());
        }
        self
    }
    pub fn update(table: impl Into<String>, r#where: Vec<Condition>, row: Row) -> Self {
        Operation::Update {
            table: table.into(),
            r#where,
            row,
        }
    }
    pub fn mutate(
        table: impl Into<String>,
        r#where: Vec<Condition>,
        mutations: Vec<Mutation>,
    ) -> Self {
        Operation::Mutate {
            table: table.into(),
            r#where,
            mutations,
        }
    }
    pub fn delete(table: impl Into<String>, r#where: Vec<Condition>) -> Self {
        Operation::Delete {
            table: table.into(),
            r#where,
        }
    }
    pub fn wait(
        table: impl Into<String>,
        r#where: Vec<Condition>,
        columns: Vec<String>,
        until: WaitUntil,
        rows: Vec<Row>,
        timeout: Option<u64>,
    ) -> Self {
        Operation::Wait {
            table: table.into(),
            r#where,
            columns,
            until,
            rows,
            timeout,
        }
    }
    pub fn commit(durable: bool) -> Self {
        Operation::Commit { durable }
    }
    pub fn abort() -> Self {
        Operation::Abort
    }
    pub fn comment(text: impl Into<String>) -> Self {
        Operation::Comment(text.into())
    }
    pub fn assert(lock: impl Into<String>) -> Self {
        Operation::Assert { lock: lock.into() }
    }

    /// A short description for error messages, e.g. `insert into Logical_Switch_Port`.
    pub fn describe(&self) -> String {
        match self {
            Operation::Insert { table, .. } => format!("insert into {table}"),
            Operation::Select { table, .. } => format!("select from {table}"),
            Operation::Update { table, .. } => format!("update {table}"),
            Operation::Mutate { table, .. } => format!("mutate {table}"),
            Operation::Delete { table, .. } => format!("delete from {table}"),
            Operation::Wait { table, .. } => format!("wait on {table}"),
            Operation::Commit { .. } => "commit".into(),
            Operation::Abort => "abort".into(),
            Operation::Comment(_) => "comment".into(),
            Operation::Assert { lock } => format!("assert lock {lock}"),
        }
    }

    /// The JSON wire form.
    pub fn to_json(&self) -> Json {
        match self {
            Operation::Insert {
                table,
                row,
                uuid_name,
            } => {
                let mut o = json!({"op": "insert", "table": table, "row": row_json(row)});
                if let Some(n) = uuid_name {
                    o["uuid-name"] = json!(n);
                }
                o
            }
            Operation::Select {
                table,
                r#where,
                columns,
            } => {
                let mut o = json!({"op": "select", "table": table, "where": where_json(r#where)});
                if let Some(c) = columns {
                    o["columns"] = json!(c);
                }
                o
            }
            Operation::Update {
                table,
                r#where,
                row,
            } => json!({"op": "update", "table": table, "where": where_json(r#where),
                        "row": row_json(row)}),
            Operation::Mutate {
                table,
                r#where,
                mutations,
            } => json!({"op": "mutate", "table": table, "where": where_json(r#where),
                        "mutations": mutations.iter().map(Mutation::to_json).collect::<Vec<_>>()}),
            Operation::Delete { table, r#where } => {
                json!({"op": "delete", "table": table, "where": where_json(r#where)})
            }
            Operation::Wait {
                table,
                r#where,
                columns,
                until,
                rows,
                timeout,
            } => {
                let mut o = json!({"op": "wait", "table": table, "where": where_json(r#where),
                    "columns": columns,
                    "until": match until { WaitUntil::Eq => "==", WaitUntil::Ne => "!=" },
                    "rows": rows.iter().map(row_json).collect::<Vec<_>>()});
                if let Some(t) = timeout {
                    o["timeout"] = json!(t);
                }
                o
            }
            Operation::Commit { durable } => json!({"op": "commit", "durable": durable}),
            Operation::Abort => json!({"op": "abort"}),
            Operation::Comment(c) => json!({"op": "comment", "comment": c}),
            Operation::Assert { lock } => json!({"op": "assert", "lock": lock}),
        }
    }
}

/// Builds a [`Row`] from `(column, value)` pairs.
pub fn row<I, K>(items: I) -> Row
where
    I: IntoIterator<Item = (K, Value)>,
    K: Into<String>,
{
    items.into_iter().map(|(k, v)| (k.into(), v)).collect()
}

/// The wire form of a row.
pub fn row_json(row: &Row) -> Json {
    Json::Object(
        row.iter()
            .map(|(k, v)| (k.clone(), v.to_json()))
            .collect::<Map<_, _>>(),
    )
}

/// Parses a row object (`{"col": value, ...}`, including `_uuid`/`_version` if present).
pub fn row_from_json(j: &Json) -> Result<Row> {
    let Json::Object(o) = j else {
        return Err(Error::protocol("row is not a JSON object"));
    };
    o.iter()
        .map(|(k, v)| {
            Value::from_json(v)
                .map(|v| (k.clone(), v))
                .map_err(|e| Error::Value(e.in_column(k)))
        })
        .collect()
}

fn where_json(w: &[Condition]) -> Json {
    Json::Array(w.iter().map(Condition::to_json).collect())
}

/// The result of one successful operation.
#[derive(Debug, Clone, PartialEq)]
pub enum OpResult {
    /// `insert`: the new row's UUID.
    Inserted(Uuid),
    /// `select`: the matching rows.
    Rows(Vec<Row>),
    /// `update`, `mutate`, `delete`: the number of rows matched.
    Count(i64),
    /// Everything else.
    Empty,
}

impl OpResult {
    pub fn uuid(&self) -> Option<Uuid> {
        match self {
            OpResult::Inserted(u) => Some(*u),
            _ => None,
        }
    }
    pub fn rows(&self) -> &[Row] {
        match self {
            OpResult::Rows(r) => r,
            _ => &[],
        }
    }
    pub fn count(&self) -> Option<i64> {
        match self {
            OpResult::Count(c) => Some(*c),
            _ => None,
        }
    }

    fn from_json(j: &Json) -> Result<Self> {
        let Json::Object(o) = j else {
            return Err(Error::protocol("operation result is not an object"));
        };
        if let Some(u) = o.get("uuid") {
            let v = Value::from_json(u)?;
            return match v.atoms() {
                [crate::Atom::Uuid(u)] => Ok(OpResult::Inserted(*u)),
                _ => Err(Error::protocol("insert result uuid is not a uuid")),
            };
        }
        if let Some(rows) = o.get("rows") {
            let Json::Array(rows) = rows else {
                return Err(Error::protocol("select result rows is not an array"));
            };
            return rows
                .iter()
                .map(row_from_json)
                .collect::<Result<_>>()
                .map(OpResult::Rows);
        }
        if let Some(c) = o.get("count") {
            return c
                .as_i64()
                .map(OpResult::Count)
                .ok_or_else(|| Error::protocol("count is not an integer"));
        }
        Ok(OpResult::Empty)
    }
}

/// Maps a `transact` result array onto per-operation results, or the first error.
///
/// An error object at index `i < ops.len()` names operation `i`; an extra trailing error
/// element (index `ops.len()`) is a commit-time failure such as a referential integrity or
/// unique index violation.
pub fn parse_results(ops: &[Operation], result: &Json) -> Result<Vec<OpResult>> {
    let Json::Array(items) = result else {
        return Err(Error::protocol("transact result is not an array"));
    };
    for (index, item) in items.iter().enumerate() {
        if let Some(err) = item.get("error").filter(|e| !e.is_null()) {
            let op = match ops.get(index) {
                Some(op) => op.describe(),
                None => "commit (constraint checks)".to_string(),
            };
            let error = err.as_str().map_or_else(|| err.to_string(), str::to_string);
            let details = item.get("details").and_then(|d| match d {
                Json::Null => None,
                Json::String(s) => Some(s.clone()),
                other => Some(other.to_string()),
            });
            return Err(Error::Transaction {
                index,
                op,
                error,
                details,
            });
        }
    }
    if items.len() < ops.len() {
        return Err(Error::protocol(format!(
            "transact returned {} results for {} operations",
            items.len(),
            ops.len()
        )));
    }
    items
        .iter()
        .take(ops.len())
        .map(OpResult::from_json)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_json() {
        let lsp = Operation::insert(
            "Logical_Switch_Port",
            row([
                ("name", Value::string("p1")),
                (
                    "addresses",
                    Value::string_set(["00:00:00:00:00:01 10.0.0.2"]),
                ),
            ]),
        )
        .with_uuid_name("newport");
        assert_eq!(
            lsp.to_json(),
            json!({"op":"insert","table":"Logical_Switch_Port","uuid-name":"newport",
                   "row":{"name":"p1","addresses":["set",["00:00:00:00:00:01 10.0.0.2"]]}})
        );
        let m = Operation::mutate(
            "Logical_Switch",
            vec![Condition::eq("name", Value::string("ls1"))],
            vec![Mutation::insert("ports", Value::named_uuid("newport"))],
        );
        assert_eq!(
            m.to_json(),
            json!({"op":"mutate","table":"Logical_Switch","where":[["name","==","ls1"]],
                   "mutations":[["ports","insert",["named-uuid","newport"]]]})
        );
        let s = Operation::select("ACL", vec![]).with_columns(["priority"]);
        assert_eq!(
            s.to_json(),
            json!({"op":"select","table":"ACL","where":[],"columns":["priority"]})
        );
        let w = Operation::wait(
            "LS",
            vec![Condition::includes("ports", Value::Set(vec![]))],
            vec!["name".into()],
            WaitUntil::Ne,
            vec![row([("name", Value::string("x"))])],
            Some(100),
        );
        assert_eq!(
            w.to_json(),
            json!({"op":"wait","table":"LS","where":[["ports","includes",["set",[]]]],
                   "columns":["name"],"until":"!=","rows":[{"name":"x"}],"timeout":100})
        );
        assert_eq!(
            Operation::commit(true).to_json(),
            json!({"op":"commit","durable":true})
        );
        assert_eq!(
            Operation::assert("l").to_json(),
            json!({"op":"assert","lock":"l"})
        );
        assert_eq!(
            Operation::comment("hi").to_json(),
            json!({"op":"comment","comment":"hi"})
        );
        assert_eq!(
            Operation::update("T", vec![], row([("a", Value::integer(1))])).to_json(),
            json!({"op":"update","table":"T","where":[],"row":{"a":1}})
        );
        assert_eq!(
            Operation::delete("T", vec![Condition::ne("a", Value::boolean(true))]).to_json(),
            json!({"op":"delete","table":"T","where":[["a","!=",true]]})
        );
    }

    #[test]
    fn results_parse() {
        let u = "36bdd8f4-7e9d-4a0c-9a8e-5f1b0d1c2e3f";
        let ops = [
            Operation::insert("T", Row::new()),
            Operation::select("T", vec![]),
            Operation::delete("T", vec![]),
            Operation::comment("c"),
        ];
        let res = json!([{"uuid":["uuid",u]},
                         {"rows":[{"_uuid":["uuid",u],"name":"a"}]},
                         {"count":2}, {}]);
        let out = parse_results(&ops, &res).unwrap();
        assert_eq!(out[0].uuid(), Some(u.parse().unwrap()));
        assert_eq!(out[1].rows()[0]["name"], Value::string("a"));
        assert_eq!(out[2].count(), Some(2));
        assert_eq!(out[3], OpResult::Empty);
    }

    #[test]
    fn per_op_error_names_the_op() {
        let ops = [
            Operation::insert("Logical_Switch", Row::new()),
            Operation::insert("Logical_Switch_Port", row([("bogus", Value::integer(1))])),
            Operation::commit(false),
        ];
        let res = json!([{"uuid":["uuid","36bdd8f4-7e9d-4a0c-9a8e-5f1b0d1c2e3f"]},
            {"error":"unknown column","details":"No column bogus in table Logical_Switch_Port."},
            null]);
        match parse_results(&ops, &res) {
            Err(Error::Transaction {
                index,
                op,
                error,
                details,
            }) => {
                assert_eq!(index, 1);
                assert_eq!(op, "insert into Logical_Switch_Port");
                assert_eq!(error, "unknown column");
                assert!(details.unwrap().contains("bogus"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn commit_time_error_is_the_extra_element() {
        let ops = [Operation::insert(
            "Address_Set",
            row([("name", Value::string("as1"))]),
        )];
        let res = json!([{"uuid":["uuid","36bdd8f4-7e9d-4a0c-9a8e-5f1b0d1c2e3f"]},
            {"error":"constraint violation",
             "details":"Transaction causes multiple rows in \"Address_Set\" table to have identical values (\"as1\") for index on column \"name\"."}]);
        let err = parse_results(&ops, &res).unwrap_err();
        match &err {
            Error::Transaction {
                index, op, error, ..
            } => {
                assert_eq!(*index, 1);
                assert!(op.starts_with("commit"));
                assert_eq!(error, "constraint violation");
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("identical values"), "{err}");
    }

    #[test]
    fn malformed_results_are_errors() {
        let ops = [Operation::insert("T", Row::new())];
        for bad in [
            json!({}),
            json!([]),
            json!([{"uuid":"x"}]),
            json!([{"rows":3}]),
        ] {
            assert!(parse_results(&ops, &bad).is_err(), "{bad}");
        }
    }
}
