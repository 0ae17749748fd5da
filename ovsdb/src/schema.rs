//! `.ovsschema` parsing (RFC 7047 §3.2): databases, tables, columns and their types.
//!
//! Used by the typed-row generator (`ovsdb-codegen`) and by anyone who wants to validate a
//! table or column name at run time.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value as Json;

/// Errors reading a schema.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("schema is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("table {table}, column {column}: {problem}")]
    Column {
        table: String,
        column: String,
        problem: ColumnTypeError,
    },
}

/// Why a column's `type` is not an RFC 7047 type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ColumnTypeError {
    #[error("unknown atomic type {0:?}")]
    UnknownAtomic(String),
    #[error("base type without \"type\"")]
    BaseWithoutType,
    #[error("bad base type {0}")]
    BadBase(Json),
    #[error("column type without \"key\"")]
    WithoutKey,
    #[error("bad max {0}")]
    BadMax(Json),
    #[error("bad column type {0}")]
    BadColumn(Json),
}

/// A database schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    pub name: String,
    pub version: String,
    pub cksum: Option<String>,
    pub tables: BTreeMap<String, TableSchema>,
}

/// One table of a schema.
#[derive(Clone, Debug, PartialEq)]
pub struct TableSchema {
    pub columns: BTreeMap<String, ColumnType>,
    pub is_root: bool,
    pub max_rows: Option<u64>,
    pub indexes: Vec<Vec<String>>,
}

/// The five atomic types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicType {
    Integer,
    Real,
    Boolean,
    String,
    Uuid,
}

/// A base type: an atomic type plus constraints we care about.
#[derive(Clone, Debug, PartialEq)]
pub struct BaseType {
    pub atomic: AtomicType,
    /// For uuid columns: the table referenced.
    pub ref_table: Option<String>,
    /// `enum` constraint, kept as JSON atoms.
    pub enum_values: Option<Vec<Json>>,
}

/// A column type: key, optional value (a map), and cardinality.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnType {
    pub key: BaseType,
    pub value: Option<BaseType>,
    pub min: u64,
    /// `None` means "unlimited".
    pub max: Option<u64>,
}

impl ColumnType {
    /// Exactly one atom (a plain scalar).
    pub fn is_scalar(&self) -> bool {
        self.value.is_none() && self.min == 1 && self.max == Some(1)
    }
    /// Zero or one atom.
    pub fn is_optional(&self) -> bool {
        self.value.is_none() && self.min == 0 && self.max == Some(1)
    }
    /// A map (key → value).
    pub fn is_map(&self) -> bool {
        self.value.is_some()
    }
}

#[derive(Deserialize)]
struct RawSchema {
    name: String,
    version: String,
    cksum: Option<String>,
    tables: BTreeMap<String, RawTable>,
}

#[derive(Deserialize)]
struct RawTable {
    columns: BTreeMap<String, RawColumn>,
    #[serde(rename = "isRoot", default)]
    is_root: bool,
    #[serde(rename = "maxRows")]
    max_rows: Option<u64>,
    #[serde(default)]
    indexes: Vec<Vec<String>>,
}

#[derive(Deserialize)]
struct RawColumn {
    #[serde(rename = "type")]
    ty: Json,
}

impl Schema {
    /// Parses the text of an `.ovsschema` file.
    pub fn parse(text: &str) -> Result<Schema, SchemaError> {
        let raw: RawSchema = serde_json::from_str(text)?;
        let mut tables = BTreeMap::new();
        for (tname, t) in raw.tables {
            let mut columns = BTreeMap::new();
            for (cname, c) in t.columns {
                let ty = column_type(&c.ty).map_err(|problem| SchemaError::Column {
                    table: tname.clone(),
                    column: cname.clone(),
                    problem,
                })?;
                columns.insert(cname, ty);
            }
            tables.insert(
                tname,
                TableSchema {
                    columns,
                    is_root: t.is_root,
                    max_rows: t.max_rows,
                    indexes: t.indexes,
                },
            );
        }
        Ok(Schema {
            name: raw.name,
            version: raw.version,
            cksum: raw.cksum,
            tables,
        })
    }

    /// The column type of `table.column`, if both exist.
    pub fn column(&self, table: &str, column: &str) -> Option<&ColumnType> {
        self.tables.get(table)?.columns.get(column)
    }
}

fn atomic(s: &str) -> Result<AtomicType, ColumnTypeError> {
    Ok(match s {
        "integer" => AtomicType::Integer,
        "real" => AtomicType::Real,
        "boolean" => AtomicType::Boolean,
        "string" => AtomicType::String,
        "uuid" => AtomicType::Uuid,
        other => return Err(ColumnTypeError::UnknownAtomic(other.to_string())),
    })
}

fn base_type(j: &Json) -> Result<BaseType, ColumnTypeError> {
    match j {
        Json::String(s) => Ok(BaseType {
            atomic: atomic(s)?,
            ref_table: None,
            enum_values: None,
        }),
        Json::Object(o) => {
            let ty = o
                .get("type")
                .and_then(Json::as_str)
                .ok_or(ColumnTypeError::BaseWithoutType)?;
            let enum_values = o.get("enum").map(|e| match e {
                Json::Array(a) if a.len() == 2 && a[0] == "set" => {
                    a[1].as_array().cloned().unwrap_or_default()
                }
                other => vec![other.clone()],
            });
            Ok(BaseType {
                atomic: atomic(ty)?,
                ref_table: o.get("refTable").and_then(Json::as_str).map(String::from),
                enum_values,
            })
        }
        other => Err(ColumnTypeError::BadBase(other.clone())),
    }
}

fn column_type(j: &Json) -> Result<ColumnType, ColumnTypeError> {
    match j {
        Json::String(_) => Ok(ColumnType {
            key: base_type(j)?,
            value: None,
            min: 1,
            max: Some(1),
        }),
        Json::Object(o) => {
            let key = base_type(o.get("key").ok_or(ColumnTypeError::WithoutKey)?)?;
            let value = o.get("value").map(base_type).transpose()?;
            let min = o.get("min").and_then(Json::as_u64).unwrap_or(1);
            let max = match o.get("max") {
                None => Some(1),
                Some(Json::String(s)) if s == "unlimited" => None,
                Some(m) => Some(
                    m.as_u64()
                        .ok_or_else(|| ColumnTypeError::BadMax(m.clone()))?,
                ),
            };
            Ok(ColumnType {
                key,
                value,
                min,
                max,
            })
        }
        other => Err(ColumnTypeError::BadColumn(other.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINI: &str = r#"{
      "name": "Mini", "version": "1.0.0",
      "tables": {
        "T": {
          "columns": {
            "name": {"type": "string"},
            "tag": {"type": {"key": {"type": "integer", "minInteger": 0}, "min": 0, "max": 1}},
            "ports": {"type": {"key": {"type": "uuid", "refTable": "P"}, "min": 0, "max": "unlimited"}},
            "ids": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
            "kind": {"type": {"key": {"type": "string", "enum": ["set", ["a", "b"]]}}}
          },
          "isRoot": true,
          "indexes": [["name"]]
        }
      }
    }"#;

    #[test]
    fn parses_cardinalities_and_refs() {
        let s = Schema::parse(MINI).unwrap();
        let t = &s.tables["T"];
        assert!(t.is_root);
        assert_eq!(t.indexes, vec![vec!["name".to_string()]]);
        assert!(t.columns["name"].is_scalar());
        assert!(t.columns["tag"].is_optional());
        assert_eq!(t.columns["ports"].max, None);
        assert_eq!(t.columns["ports"].key.ref_table.as_deref(), Some("P"));
        assert!(t.columns["ids"].is_map());
        assert_eq!(
            t.columns["kind"].key.enum_values.as_ref().map(Vec::len),
            Some(2)
        );
    }

    #[test]
    fn bad_schema_names_the_column() {
        let bad = r#"{"name":"X","version":"1","tables":{"T":{"columns":{"c":{"type":"float"}}}}}"#;
        let err = Schema::parse(bad).unwrap_err().to_string();
        assert_eq!(err, "table T, column c: unknown atomic type \"float\"");
        let bad = r#"{"name":"X","version":"1","tables":{"T":{"columns":{"c":{"type":{"key":"string","max":-1}}}}}}"#;
        let err = Schema::parse(bad).unwrap_err().to_string();
        assert_eq!(err, "table T, column c: bad max -1");
    }
}
