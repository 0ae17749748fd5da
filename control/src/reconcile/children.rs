//! The diff of a parent row's child rows that have no name of their own (a port group's
//! ACLs, a router's policies and static routes): desired children keyed by an
//! `external_ids` key, against the children the parent references. A changed child is
//! updated in place (only its changed columns); a new one is inserted and referenced; one
//! of ours no longer desired is unreferenced (none of these tables is a root table: OVSDB
//! garbage-collects it). A child `ours` rejects is left alone.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ovsdb::typed::{Column, Table};
use ovsdb::{Atom, Condition, Mutation, Operation, Uuid, Value};

use super::{Plan, Unit};

/// A child row with `external_ids`.
pub trait Child: Table {
    fn ids(&self) -> &BTreeMap<String, String>;
}

/// Where the children hang and how they are told apart.
pub struct Parent<'a, P: Table> {
    pub row: &'a P,
    /// The parent's name, for the unit's description.
    pub name: &'a str,
    /// The parent column referencing the children (`acls`, `policies`, ...).
    pub column: &'static str,
    /// What the children are, for the unit's description (`ACLs`, `policies`, ...).
    pub what: &'static str,
    /// The children's `external_ids` key naming them.
    pub key: &'static str,
}

fn changed<T: Table>(cols: &[T::Column], d: &T, a: &T) -> Vec<T::Column> {
    let (dr, ar) = (d.to_row_of(cols), a.to_row_of(cols));
    cols.iter()
        .copied()
        .filter(|c| dr.get(c.name()) != ar.get(c.name()))
        .collect()
}

/// Inserts `rows` with fresh `uuid-name`s into `ops`; returns the references.
pub fn insert_all<'a, T: Table + 'a>(
    rows: impl Iterator<Item = &'a T>,
    plan: &mut Plan,
    ops: &mut Vec<Operation>,
) -> Vec<Atom> {
    let mut refs = Vec::new();
    for row in rows {
        let n = plan.fresh_name();
        ops.push(Operation::insert_typed(row).with_uuid_name(&n));
        refs.push(Atom::NamedUuid(n));
        plan.inserts += 1;
    }
    refs
}

/// Plans the writes that make `parent`'s children (`refs`, looked up in `rows`) that
/// `ours` accepts match `desired` (by `parent.key`), comparing `cols`.
#[allow(clippy::too_many_arguments)]
pub fn plan<P: Table, T: Child>(
    parent: &Parent<'_, P>,
    refs: &BTreeSet<Uuid>,
    rows: &HashMap<Uuid, &T>,
    desired: &BTreeMap<String, T>,
    cols: &[T::Column],
    ours: impl Fn(&T) -> bool,
    plan: &mut Plan,
) {
    let mut actual: HashMap<&str, &T> = HashMap::new();
    let mut stale: Vec<Uuid> = Vec::new();
    for u in refs {
        let Some(row) = rows.get(u) else {
            stale.push(*u); // a dangling reference
            continue;
        };
        if !ours(row) {
            continue;
        }
        match row.ids().get(parent.key) {
            Some(k) if desired.contains_key(k) && !actual.contains_key(k.as_str()) => {
                actual.insert(k.as_str(), row);
            }
            _ => stale.push(*u),
        }
    }
    let mut ops = Vec::new();
    let mut new = Vec::new();
    for (key, d) in desired {
        match actual.get(key.as_str()) {
            Some(a) => {
                let c = changed(cols, d, *a);
                if !c.is_empty() {
                    plan.updates += 1;
                    ops.push(Operation::update_typed(
                        d,
                        &c,
                        vec![Condition::uuid(a.uuid())],
                    ));
                }
            }
            None => new.push(d),
        }
    }
    let mut mutations = Vec::new();
    if !stale.is_empty() {
        plan.deletes += stale.len();
        mutations.push(Mutation::delete(
            parent.column,
            Value::Set(stale.iter().map(|u| Atom::Uuid(*u)).collect()),
        ));
    }
    if !new.is_empty() {
        let refs = insert_all(new.into_iter(), plan, &mut ops);
        mutations.push(Mutation::insert(parent.column, Value::Set(refs)));
    }
    if !mutations.is_empty() {
        ops.push(Operation::mutate(
            P::TABLE,
            vec![Condition::uuid(parent.row.uuid())],
            mutations,
        ));
    }
    if !ops.is_empty() {
        plan.units.push(Unit::new(
            format!("{} of {} {}", parent.what, P::TABLE, parent.name),
            ops,
        ));
    }
}
