//! The diff of one parent/child table pair (routers/router ports, switches/switch ports)
//! against the replica, producing units of operations.
//!
//! Rules: a row is ours when `external_ids:zstack.io/owner` is our cluster id. Ours and
//! desired: update the managed columns that differ. Ours and not desired: delete. Not ours:
//! never updated or deleted; a foreign parent only gets our children added to or removed
//! from its `ports`. A name clash with a foreign row is reported as a conflict, not fixed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use ovsdb::nb::{LogicalRouter, LogicalRouterPort, LogicalSwitch, LogicalSwitchPort};
use ovsdb::typed::{Column, Table};
use ovsdb::{Atom, Condition, Mutation, Operation, Uuid, Value};

use super::{Plan, Unit};
use crate::desired::Parent;
use crate::names::OWNER;

/// Children per insert/delete unit: keeps transactions a bounded size.
const CHUNK: usize = 500;

/// What the diff needs of a row type.
pub trait Named: Table {
    fn name(&self) -> &str;
    fn external_ids(&self) -> &BTreeMap<String, String>;
}

/// What the diff needs of a parent row type.
pub trait HasPorts: Named {
    fn ports(&self) -> &BTreeSet<Uuid>;
    fn set_ports(&mut self, ports: BTreeSet<Uuid>);
}

macro_rules! named {
    ($t:ty) => {
        impl Named for $t {
            fn name(&self) -> &str {
                &self.name
            }
            fn external_ids(&self) -> &BTreeMap<String, String> {
                &self.external_ids
            }
        }
    };
}
named!(LogicalRouter);
named!(LogicalRouterPort);
named!(LogicalSwitch);
named!(LogicalSwitchPort);

macro_rules! has_ports {
    ($t:ty) => {
        impl HasPorts for $t {
            fn ports(&self) -> &BTreeSet<Uuid> {
                &self.ports
            }
            fn set_ports(&mut self, ports: BTreeSet<Uuid>) {
                self.ports = ports;
            }
        }
    };
}
has_ports!(LogicalRouter);
has_ports!(LogicalSwitch);

fn is_ours<T: Named>(row: &T, owner: &str) -> bool {
    row.external_ids().get(OWNER).map(String::as_str) == Some(owner)
}

fn by_uuid(u: Uuid) -> Vec<Condition> {
    vec![Condition::uuid(u)]
}

/// The managed columns whose values differ.
fn changed<T: Table>(desired: &T, actual: &T, columns: &[T::Column]) -> Vec<T::Column> {
    let (d, a) = (desired.to_row_of(columns), actual.to_row_of(columns));
    columns
        .iter()
        .copied()
        .filter(|c| d.get(c.name()) != a.get(c.name()))
        .collect()
}

fn ports_mutation(parent_table: &str, parent: Uuid, mutator: Mutation) -> Operation {
    Operation::mutate(parent_table, by_uuid(parent), vec![mutator])
}

/// Plans one family. `actual_parents`/`actual_children` come from the replica.
#[allow(clippy::too_many_arguments)]
pub fn plan<P: HasPorts, C: Named>(
    owner: &str,
    desired: &BTreeMap<String, Parent<P, C>>,
    actual_parents: &[P],
    actual_children: &[C],
    parent_columns: &[P::Column],
    child_columns: &[C::Column],
    plan: &mut Plan,
) {
    let children: HashMap<Uuid, &C> = actual_children.iter().map(|c| (c.uuid(), c)).collect();
    let mut parent_of: HashMap<Uuid, Uuid> = HashMap::new();
    for p in actual_parents {
        for c in p.ports() {
            parent_of.insert(*c, p.uuid());
        }
    }
    let mut index = Index {
        by_name: actual_children.iter().map(|c| (c.name(), c)).collect(),
        parent_of,
        owner,
        handled: HashSet::new(),
    };
    // A name may repeat for parents (Logical_Switch has no name index): prefer ours.
    let mut parent_by_name: HashMap<&str, &P> = HashMap::new();
    for p in actual_parents {
        let slot = parent_by_name.entry(p.name()).or_insert(p);
        if !is_ours(*slot, owner) && is_ours(p, owner) {
            *slot = p;
        }
    }
    let mut kept_parents: HashSet<Uuid> = HashSet::new();

    for (name, dp) in desired {
        let actual = parent_by_name.get(name.as_str()).copied();
        let parent_uuid = match actual {
            None if dp.owned => {
                // New parent with all its children, one unit per CHUNK of children.
                let mut ops = Vec::new();
                let kids: Vec<&C> = dp.children.values().collect();
                let (first, rest) = kids.split_at(kids.len().min(CHUNK));
                let refs = index.insert(P::TABLE, first, plan, &mut ops);
                let pname = plan.fresh_name();
                let mut row = dp.row.to_row();
                row.insert("ports".into(), Value::Set(refs));
                ops.push(Operation::insert(P::TABLE, row).with_uuid_name(&pname));
                plan.inserts += 1;
                plan.units
                    .push(Unit::new(format!("create {} {name}", P::TABLE), ops));
                if !rest.is_empty() {
                    // The parent exists only after the first unit commits; the rest of its
                    // children are added by name.
                    for chunk in rest.chunks(CHUNK) {
                        let mut ops = Vec::new();
                        let refs = index.insert(P::TABLE, chunk, plan, &mut ops);
                        ops.push(Operation::mutate(
                            P::TABLE,
                            vec![Condition::eq("name", Value::string(name))],
                            vec![Mutation::insert("ports", Value::Set(refs))],
                        ));
                        plan.units.push(Unit::new(
                            format!("add {} {} to {name}", chunk.len(), C::TABLE),
                            ops,
                        ));
                    }
                }
                continue;
            }
            None => {
                plan.conflicts.push(format!(
                    "{} {name} does not exist (it is not ours to create)",
                    P::TABLE
                ));
                continue;
            }
            Some(ap) => {
                if dp.owned && !is_ours(ap, owner) {
                    plan.conflicts.push(format!(
                        "{} {name} exists but is not ours (external_ids:{OWNER}); left untouched",
                        P::TABLE
                    ));
                    continue;
                }
                if dp.owned {
                    let cols = changed(&dp.row, ap, parent_columns);
                    if !cols.is_empty() {
                        plan.updates += 1;
                        plan.units.push(Unit::new(
                            format!("update {} {name}", P::TABLE),
                            vec![Operation::update_typed(&dp.row, &cols, by_uuid(ap.uuid()))],
                        ));
                    }
                }
                kept_parents.insert(ap.uuid());
                ap.uuid()
            }
        };

        let mut new_children: Vec<&C> = Vec::new();
        for (cname, dc) in &dp.children {
            match index.by_name.get(cname.as_str()).copied() {
                Some(ac) if !is_ours(ac, owner) => {
                    index.handled.insert(ac.uuid());
                    plan.conflicts.push(format!(
                        "{} {cname} exists but is not ours; left untouched",
                        C::TABLE
                    ));
                }
                Some(ac) if index.parent_of.get(&ac.uuid()) == Some(&parent_uuid) => {
                    index.handled.insert(ac.uuid());
                    let cols = changed(dc, ac, child_columns);
                    if !cols.is_empty() {
                        plan.updates += 1;
                        plan.units.push(Unit::new(
                            format!("update {} {cname}", C::TABLE),
                            vec![Operation::update_typed(dc, &cols, by_uuid(ac.uuid()))],
                        ));
                    }
                }
                _ => new_children.push(dc),
            }
        }
        for chunk in new_children.chunks(CHUNK) {
            let mut ops = Vec::new();
            let refs = index.insert(P::TABLE, chunk, plan, &mut ops);
            ops.push(ports_mutation(
                P::TABLE,
                parent_uuid,
                Mutation::insert("ports", Value::Set(refs)),
            ));
            plan.units.push(Unit::new(
                format!("add {} {} to {name}", chunk.len(), C::TABLE),
                ops,
            ));
        }
    }

    // Our children not desired anywhere, and our parents not desired.
    for ap in actual_parents {
        if is_ours(ap, owner) && !kept_parents.contains(&ap.uuid()) {
            plan.deletes += 1;
            plan.units.push(Unit::new(
                format!("delete {} {}", P::TABLE, ap.name()),
                vec![Operation::delete(P::TABLE, by_uuid(ap.uuid()))],
            ));
            continue;
        }
        let stale: Vec<Uuid> = ap
            .ports()
            .iter()
            .copied()
            .filter(|u| !index.handled.contains(u))
            .filter(|u| children.get(u).is_some_and(|c| is_ours(*c, owner)))
            .collect();
        for chunk in stale.chunks(CHUNK) {
            let set = Value::Set(chunk.iter().map(|u| Atom::Uuid(*u)).collect());
            let mut ops = vec![ports_mutation(
                P::TABLE,
                ap.uuid(),
                Mutation::delete("ports", set),
            )];
            ops.extend(
                chunk
                    .iter()
                    .map(|u| Operation::delete(C::TABLE, by_uuid(*u))),
            );
            plan.deletes += chunk.len();
            plan.units.push(Unit::new(
                format!("remove {} {} from {}", chunk.len(), C::TABLE, ap.name()),
                ops,
            ));
        }
    }
}

/// Our existing children, for finding a desired child's current row.
struct Index<'a, C> {
    by_name: HashMap<&'a str, &'a C>,
    parent_of: HashMap<Uuid, Uuid>,
    owner: &'a str,
    /// Existing children already accounted for (kept, updated, moved or foreign).
    handled: HashSet<Uuid>,
}

impl<C: Named> Index<'_, C> {
    /// Inserts `chunk` (each with a fresh `uuid-name`, returned as refs for the parent's
    /// `ports`). A child whose name is held by one of our rows under another parent (a pod
    /// that moved Subnet) has that row removed in the same unit, since names are unique.
    fn insert(
        &mut self,
        parent_table: &str,
        chunk: &[&C],
        plan: &mut Plan,
        ops: &mut Vec<Operation>,
    ) -> Vec<Atom> {
        let mut refs = Vec::with_capacity(chunk.len());
        for c in chunk {
            if let Some(old) = self.by_name.get(c.name())
                && is_ours(*old, self.owner)
                && self.handled.insert(old.uuid())
            {
                if let Some(p) = self.parent_of.get(&old.uuid()) {
                    ops.push(ports_mutation(
                        parent_table,
                        *p,
                        Mutation::delete("ports", Value::uuid(old.uuid())),
                    ));
                }
                ops.push(Operation::delete(C::TABLE, by_uuid(old.uuid())));
            }
            let n = plan.fresh_name();
            ops.push(Operation::insert_typed(*c).with_uuid_name(&n));
            refs.push(Atom::NamedUuid(n));
        }
        plan.inserts += chunk.len();
        refs
    }
}
