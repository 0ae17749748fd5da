//! Typed rows: the [`Table`] trait implemented by the structs generated from the
//! `.ovsschema` files ([`crate::nb`], [`crate::sb`], [`crate::vswitch`]).
//!
//! A generated struct has one field per column with a proper Rust type (`String`, `i64`,
//! `bool`, `f64`, [`Uuid`], `Option<T>` for 0..1 columns, `BTreeSet<T>` for sets,
//! `BTreeMap<K, V>` for maps) and a column enum, so a misspelled table or column is a
//! compile error:
//!
//! ```
//! use ovsdb::nb::{LogicalSwitchPort, LogicalSwitchPortColumn as C};
//! use ovsdb::typed::{Column, Table};
//!
//! let mut lsp = LogicalSwitchPort::default();
//! lsp.name = "default_pod1".into();
//! lsp.addresses.insert("0a:58:0a:00:00:05 10.0.0.5".into());
//! let row = lsp.to_row();
//! assert_eq!(LogicalSwitchPort::TABLE, "Logical_Switch_Port");
//! assert_eq!(C::Addresses.name(), "addresses");
//! let back = LogicalSwitchPort::from_row(ovsdb::Uuid::nil(), &row).unwrap();
//! assert_eq!(back, lsp);
//! ```

use crate::monitor::MonitorRequest;
use crate::ops::{Condition, Function, Mutation, Mutator, Operation};
use crate::replica::{Replica, View};
use crate::value::{Row, Uuid, Value, ValueError};

/// A column of a generated table.
pub trait Column: Copy + Eq + std::fmt::Debug + 'static {
    /// The column's name in the schema.
    fn name(self) -> &'static str;
    /// Every column of the table, in schema order.
    fn all() -> &'static [Self];
}

/// A table row type generated from a schema.
pub trait Table: Sized + Clone + std::fmt::Debug + PartialEq + Default {
    /// The table's name in the schema.
    const TABLE: &'static str;
    /// The table's column enum.
    type Column: Column;
    /// Builds the typed row from a replica/select row (absent columns read as empty).
    fn from_row(uuid: Uuid, row: &Row) -> Result<Self, ValueError>;
    /// Every column of this row as a [`Row`] (for insert/update). The uuid is not included.
    fn to_row(&self) -> Row;
    /// This row's `_uuid` (nil for a row not read from a database).
    fn uuid(&self) -> Uuid;
    /// Builds the typed row from a row holding some columns only (a `select` with
    /// columns, a monitor of some columns): the columns it lacks read as `Self::default()`'s.
    fn from_partial_row(uuid: Uuid, row: &Row) -> Result<Self, ValueError> {
        let mut all = Self::default().to_row();
        all.extend(row.iter().map(|(k, v)| (k.clone(), v.clone())));
        Self::from_row(uuid, &all)
    }

    /// The columns named, as a [`Row`] (for an update of only those columns).
    fn to_row_of(&self, columns: &[Self::Column]) -> Row {
        let mut all = self.to_row();
        let mut out = Row::new();
        for c in columns {
            if let Some(v) = all.remove(c.name()) {
                out.insert(c.name().to_string(), v);
            }
        }
        out
    }
}

impl Operation {
    /// `insert` of a typed row (every column; the row's uuid is ignored).
    pub fn insert_typed<T: Table>(row: &T) -> Self {
        Operation::insert(T::TABLE, row.to_row())
    }

    /// `update` of the named columns of a typed row, on the rows matching `where`.
    pub fn update_typed<T: Table>(row: &T, columns: &[T::Column], r#where: Vec<Condition>) -> Self {
        Operation::update(T::TABLE, r#where, row.to_row_of(columns))
    }
}

impl Condition {
    /// A condition on a typed column: `Condition::on(LogicalSwitchColumn::Name, Function::Eq, v)`.
    pub fn on<C: Column>(column: C, function: Function, value: Value) -> Self {
        Condition::new(column.name(), function, value)
    }
}

impl Mutation {
    /// A mutation of a typed column: `Mutation::on(BridgeColumn::Ports, Mutator::Insert, v)`.
    pub fn on<C: Column>(column: C, mutator: Mutator, value: Value) -> Self {
        Mutation::new(column.name(), mutator, value)
    }
}

impl MonitorRequest {
    /// Monitors every column of the typed table `T`.
    pub fn of<T: Table>() -> Self {
        MonitorRequest::table(T::TABLE)
    }

    /// Monitors the named columns of the typed table `T` (the others read as empty in
    /// the typed rows built from the replica).
    pub fn of_columns<T: Table>(columns: &[T::Column]) -> Self {
        MonitorRequest::table(T::TABLE).with_columns(columns.iter().map(|c| c.name()))
    }
}

impl View<'_> {
    /// Every row of `T`'s table as typed rows (a row that does not fit the type is an error
    /// naming the column).
    pub fn typed<T: Table>(&self) -> Result<Vec<T>, ValueError> {
        self.rows(T::TABLE)
            .map(|r| T::from_row(r.uuid(), &r.to_row()))
            .collect()
    }
}

impl<'a> View<'a> {
    /// `T`'s rows one by one, each as a typed row or the error naming the column that does
    /// not fit (lazy: a search that stops early converts only what it visited). Made for
    /// a replica that monitors some columns only: a column not replicated reads as its
    /// type's default (`""`, `0`, `false`, empty), where [`View::typed`] fails on a
    /// missing scalar.
    pub fn iter_typed<T: Table>(&self) -> impl Iterator<Item = Result<T, ValueError>> + 'a {
        self.rows(T::TABLE).map(|r| partial::<T>(&r))
    }

    /// One row of `T`'s table by uuid, typed as [`View::iter_typed`] does.
    pub fn get_typed<T: Table>(&self, uuid: &Uuid) -> Option<Result<T, ValueError>> {
        self.get(T::TABLE, uuid).map(|r| partial::<T>(&r))
    }
}

/// `r` as a `T`, the columns it lacks taken from `T::default()`.
fn partial<T: Table>(r: &crate::replica::RowView<'_>) -> Result<T, ValueError> {
    T::from_partial_row(r.uuid(), &r.to_row())
}

impl Replica {
    /// A snapshot of `T`'s table as typed rows.
    pub fn typed<T: Table>(&self) -> Result<Vec<T>, ValueError> {
        self.read(|v| v.typed::<T>())
    }
}
