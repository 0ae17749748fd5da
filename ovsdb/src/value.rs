//! The OVSDB data model of RFC 7047 §5.1: atoms, sets, maps, uuids, rows, and their JSON
//! wire forms (`["uuid", ..]`, `["named-uuid", ..]`, `["set", [..]]`, `["map", [[k, v], ..]]`).
//!
//! Conversion traits [`FromValue`] / [`IntoValue`] map these onto ordinary Rust types
//! (`String`, `i64`, `bool`, `f64`, [`Uuid`], `Option<T>`, `BTreeSet<T>`, `BTreeMap<K, V>`),
//! which is what the generated typed rows use.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value as Json;

/// A row's UUID (`_uuid`) or a reference to another row.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Uuid(pub uuid::Uuid);

impl Uuid {
    /// A fresh random (v4) UUID, used for `uuid-name`s and the client's `monitor` ids.
    pub fn new_v4() -> Self {
        Uuid(uuid::Uuid::new_v4())
    }
    /// The all-zero UUID (what `monitor_cond_since` sends when it has no last id).
    pub fn nil() -> Self {
        Uuid(uuid::Uuid::nil())
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

impl FromStr for Uuid {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        uuid::Uuid::parse_str(s)
            .map(Uuid)
            .map_err(|_| ValueError::BadUuid(s.to_string()))
    }
}

/// One OVSDB atom.
#[derive(Clone, Debug, PartialEq)]
pub enum Atom {
    Integer(i64),
    Real(f64),
    Boolean(bool),
    String(String),
    Uuid(Uuid),
    /// A reference to a row inserted earlier in the same transaction (`uuid-name`).
    NamedUuid(String),
}

/// A column value: an atom, a set of atoms, or a map of atom pairs.
///
/// A set with exactly one element may arrive on the wire as a bare atom; readers should use
/// [`Value::atoms`], which treats both forms alike.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Atom(Atom),
    Set(Vec<Atom>),
    Map(Vec<(Atom, Atom)>),
}

/// A row as column name → value (only the columns present).
pub type Row = BTreeMap<String, Value>;

/// Errors converting between JSON, [`Value`] and Rust types.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ValueError {
    #[error("not a valid OVSDB atom: {0}")]
    BadAtom(String),
    #[error("not a valid UUID: {0:?}")]
    BadUuid(String),
    #[error("expected {expected}, found {found}")]
    Type {
        expected: &'static str,
        found: String,
    },
    #[error("column {column}: {source}")]
    Column {
        column: String,
        #[source]
        source: Box<ValueError>,
    },
}

impl ValueError {
    fn ty(expected: &'static str, found: impl fmt::Debug) -> Self {
        let mut found = format!("{found:?}");
        found.truncate(120);
        ValueError::Type { expected, found }
    }
    /// Wraps this error with the column it came from.
    pub fn in_column(self, column: &str) -> Self {
        ValueError::Column {
            column: column.to_string(),
            source: Box::new(self),
        }
    }
}

impl Atom {
    pub fn string(s: impl Into<String>) -> Self {
        Atom::String(s.into())
    }

    /// The JSON wire form of this atom.
    pub fn to_json(&self) -> Json {
        match self {
            Atom::Integer(i) => Json::from(*i),
            Atom::Real(r) => serde_json::Number::from_f64(*r)
                .map(Json::Number)
                .unwrap_or(Json::Null),
            Atom::Boolean(b) => Json::Bool(*b),
            Atom::String(s) => Json::String(s.clone()),
            Atom::Uuid(u) => serde_json::json!(["uuid", u.to_string()]),
            Atom::NamedUuid(n) => serde_json::json!(["named-uuid", n]),
        }
    }

    /// Parses an atom from its JSON wire form.
    pub fn from_json(j: &Json) -> Result<Self, ValueError> {
        match j {
            Json::Bool(b) => Ok(Atom::Boolean(*b)),
            Json::String(s) => Ok(Atom::String(s.clone())),
            Json::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Ok(Atom::Integer(i))
                } else if let Some(f) = n.as_f64() {
                    Ok(Atom::Real(f))
                } else {
                    Err(ValueError::BadAtom(n.to_string()))
                }
            }
            Json::Array(a) if a.len() == 2 => match (&a[0], &a[1]) {
                (Json::String(tag), Json::String(s)) if tag == "uuid" => Ok(Atom::Uuid(s.parse()?)),
                (Json::String(tag), Json::String(s)) if tag == "named-uuid" => {
                    Ok(Atom::NamedUuid(s.clone()))
                }
                _ => Err(ValueError::BadAtom(short(j))),
            },
            _ => Err(ValueError::BadAtom(short(j))),
        }
    }
}

fn short(j: &Json) -> String {
    let mut s = j.to_string();
    if s.len() > 120 {
        let mut cut = 120;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

impl Value {
    /// The empty set, which is also how an absent optional value is written.
    pub fn empty() -> Self {
        Value::Set(Vec::new())
    }

    pub fn string(s: impl Into<String>) -> Self {
        Value::Atom(Atom::String(s.into()))
    }

    pub fn integer(i: i64) -> Self {
        Value::Atom(Atom::Integer(i))
    }

    pub fn boolean(b: bool) -> Self {
        Value::Atom(Atom::Boolean(b))
    }

    pub fn uuid(u: Uuid) -> Self {
        Value::Atom(Atom::Uuid(u))
    }

    /// A reference to a row named by `uuid-name` in the same transaction.
    pub fn named_uuid(name: impl Into<String>) -> Self {
        Value::Atom(Atom::NamedUuid(name.into()))
    }

    /// A set of string atoms.
    pub fn string_set<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> Self {
        Value::Set(items.into_iter().map(|s| Atom::String(s.into())).collect())
    }

    /// A string → string map.
    pub fn string_map<I, K, V>(items: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Value::Map(
            items
                .into_iter()
                .map(|(k, v)| (Atom::String(k.into()), Atom::String(v.into())))
                .collect(),
        )
    }

    /// The atoms of this value viewed as a set (a bare atom is a one-element set).
    pub fn atoms(&self) -> &[Atom] {
        match self {
            Value::Atom(a) => std::slice::from_ref(a),
            Value::Set(s) => s,
            Value::Map(_) => &[],
        }
    }

    /// The pairs of a map value (empty for anything else, including the empty set).
    pub fn pairs(&self) -> &[(Atom, Atom)] {
        match self {
            Value::Map(m) => m,
            _ => &[],
        }
    }

    /// The JSON wire form.
    pub fn to_json(&self) -> Json {
        match self {
            Value::Atom(a) => a.to_json(),
            Value::Set(s) => Json::Array(vec!["set".into(), s.iter().map(Atom::to_json).collect()]),
            Value::Map(m) => Json::Array(vec![
                "map".into(),
                m.iter()
                    .map(|(k, v)| Json::Array(vec![k.to_json(), v.to_json()]))
                    .collect(),
            ]),
        }
    }

    /// Parses a value from its JSON wire form.
    pub fn from_json(j: &Json) -> Result<Self, ValueError> {
        if let Json::Array(a) = j
            && a.len() == 2
            && let (Json::String(tag), Json::Array(items)) = (&a[0], &a[1])
        {
            match tag.as_str() {
                "set" => {
                    return items
                        .iter()
                        .map(Atom::from_json)
                        .collect::<Result<_, _>>()
                        .map(Value::Set);
                }
                "map" => {
                    return items
                        .iter()
                        .map(|p| match p {
                            Json::Array(kv) if kv.len() == 2 => {
                                Ok((Atom::from_json(&kv[0])?, Atom::from_json(&kv[1])?))
                            }
                            _ => Err(ValueError::BadAtom(short(p))),
                        })
                        .collect::<Result<_, _>>()
                        .map(Value::Map);
                }
                _ => {}
            }
        }
        Atom::from_json(j).map(Value::Atom)
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let j = Json::deserialize(d)?;
        Value::from_json(&j).map_err(D::Error::custom)
    }
}

impl Serialize for Atom {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Atom {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let j = Json::deserialize(d)?;
        Atom::from_json(&j).map_err(D::Error::custom)
    }
}

impl Serialize for Uuid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Uuid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(D::Error::custom)
    }
}

/// Converts an [`Atom`] into a Rust scalar.
pub trait FromAtom: Sized {
    fn from_atom(a: &Atom) -> Result<Self, ValueError>;
}

/// Converts a Rust scalar into an [`Atom`].
pub trait IntoAtom {
    fn into_atom(self) -> Atom;
}

macro_rules! scalar {
    ($t:ty, $variant:ident, $name:literal) => {
        impl FromAtom for $t {
            fn from_atom(a: &Atom) -> Result<Self, ValueError> {
                match a {
                    Atom::$variant(v) => Ok(v.clone()),
                    other => Err(ValueError::ty($name, other)),
                }
            }
        }
        impl IntoAtom for $t {
            fn into_atom(self) -> Atom {
                Atom::$variant(self)
            }
        }
    };
}
scalar!(i64, Integer, "integer");
scalar!(bool, Boolean, "boolean");
scalar!(String, String, "string");
scalar!(Uuid, Uuid, "uuid");

impl FromAtom for f64 {
    fn from_atom(a: &Atom) -> Result<Self, ValueError> {
        match a {
            Atom::Real(v) => Ok(*v),
            // A real column may carry an integral JSON number.
            Atom::Integer(i) => Ok(*i as f64),
            other => Err(ValueError::ty("real", other)),
        }
    }
}
impl IntoAtom for f64 {
    fn into_atom(self) -> Atom {
        Atom::Real(self)
    }
}

/// Converts a column [`Value`] into a Rust type.
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> Result<Self, ValueError>;
}

/// Converts a Rust type into a column [`Value`].
pub trait IntoValue {
    fn into_value(self) -> Value;
}

impl<T: FromAtom> FromValue for T {
    fn from_value(v: &Value) -> Result<Self, ValueError> {
        match v.atoms() {
            [a] => T::from_atom(a),
            _ => Err(ValueError::ty("exactly one atom", v)),
        }
    }
}

impl<T: IntoAtom> IntoValue for T {
    fn into_value(self) -> Value {
        Value::Atom(self.into_atom())
    }
}

/// An optional column (set of 0 or 1 atoms).
impl<T: FromAtom> FromValue for Option<T> {
    fn from_value(v: &Value) -> Result<Self, ValueError> {
        match v.atoms() {
            [] => Ok(None),
            [a] => T::from_atom(a).map(Some),
            _ => Err(ValueError::ty("at most one atom", v)),
        }
    }
}

impl<T: IntoAtom> IntoValue for Option<T> {
    fn into_value(self) -> Value {
        Value::Set(self.into_iter().map(IntoAtom::into_atom).collect())
    }
}

impl<T: FromAtom + Ord> FromValue for BTreeSet<T> {
    fn from_value(v: &Value) -> Result<Self, ValueError> {
        v.atoms().iter().map(T::from_atom).collect()
    }
}

impl<T: IntoAtom> IntoValue for BTreeSet<T> {
    fn into_value(self) -> Value {
        Value::Set(self.into_iter().map(IntoAtom::into_atom).collect())
    }
}

impl<T: FromAtom> FromValue for Vec<T> {
    fn from_value(v: &Value) -> Result<Self, ValueError> {
        v.atoms().iter().map(T::from_atom).collect()
    }
}

impl<T: IntoAtom> IntoValue for Vec<T> {
    fn into_value(self) -> Value {
        Value::Set(self.into_iter().map(IntoAtom::into_atom).collect())
    }
}

impl<K: FromAtom + Ord, V: FromAtom> FromValue for BTreeMap<K, V> {
    fn from_value(v: &Value) -> Result<Self, ValueError> {
        match v {
            Value::Map(m) => m
                .iter()
                .map(|(k, v)| Ok((K::from_atom(k)?, V::from_atom(v)?)))
                .collect(),
            // An empty map may be written as an empty set by some writers.
            Value::Set(s) if s.is_empty() => Ok(BTreeMap::new()),
            other => Err(ValueError::ty("map", other)),
        }
    }
}

impl<K: IntoAtom, V: IntoAtom> IntoValue for BTreeMap<K, V> {
    fn into_value(self) -> Value {
        Value::Map(
            self.into_iter()
                .map(|(k, v)| (k.into_atom(), v.into_atom()))
                .collect(),
        )
    }
}

/// Reads column `name` of `row` as `T`; an absent column reads as the empty set, so
/// optional, set and map columns come back empty and scalar columns report the column.
pub fn column<T: FromValue>(row: &Row, name: &str) -> Result<T, ValueError> {
    static EMPTY: Value = Value::Set(Vec::new());
    T::from_value(row.get(name).unwrap_or(&EMPTY)).map_err(|e| e.in_column(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_forms_round_trip() {
        let u: Uuid = "36bdd8f4-7e9d-4a0c-9a8e-5f1b0d1c2e3f".parse().unwrap();
        let cases = [
            (Value::integer(-5), json!(-5)),
            (Value::boolean(true), json!(true)),
            (Value::string("x"), json!("x")),
            (Value::uuid(u), json!(["uuid", u.to_string()])),
            (Value::named_uuid("row1"), json!(["named-uuid", "row1"])),
            (Value::string_set(["a", "b"]), json!(["set", ["a", "b"]])),
            (
                Value::string_map([("k", "v")]),
                json!(["map", [["k", "v"]]]),
            ),
        ];
        for (v, j) in cases {
            assert_eq!(v.to_json(), j);
            assert_eq!(Value::from_json(&j).unwrap(), v);
        }
    }

    #[test]
    fn bad_atoms_are_errors_not_panics() {
        for j in [
            json!(null),
            json!({}),
            json!(["uuid", "nope"]),
            json!(["set", [{}]]),
            json!(["map", [["a"]]]),
            json!(["weird", "x"]),
        ] {
            assert!(Value::from_json(&j).is_err(), "{j} should fail");
        }
    }

    #[test]
    fn typed_columns() {
        let mut row = Row::new();
        row.insert("name".into(), Value::string("ls1"));
        row.insert("ids".into(), Value::string_map([("a", "1")]));
        row.insert("tag".into(), Value::Set(vec![Atom::Integer(7)]));
        let name: String = column(&row, "name").unwrap();
        let ids: BTreeMap<String, String> = column(&row, "ids").unwrap();
        let tag: Option<i64> = column(&row, "tag").unwrap();
        let missing: BTreeSet<String> = column(&row, "absent").unwrap();
        assert_eq!(name, "ls1");
        assert_eq!(ids["a"], "1");
        assert_eq!(tag, Some(7));
        assert!(missing.is_empty());
        let err = column::<i64>(&row, "name").unwrap_err();
        assert!(err.to_string().contains("column name"), "{err}");
    }
}
