//! The diff of one port group's ACLs: desired ACLs by [`ACL_KEY`] against the ACLs the
//! group references. A changed ACL is updated in place (only its changed columns); a new
//! one is inserted and referenced; one no longer desired is unreferenced (ACL is not a
//! root table: OVSDB garbage-collects it).

use std::collections::{BTreeMap, HashMap};

use ovsdb::nb::{Acl, AclColumn as Col, PortGroup};
use ovsdb::typed::{Column, Table};
use ovsdb::{Atom, Condition, Mutation, Operation, Uuid, Value};

use super::{Plan, Unit};
use crate::netpol::ACL_KEY;

/// The ACL columns we manage.
pub const ACL_COLUMNS: &[Col] = &[
    Col::Action,
    Col::Direction,
    Col::ExternalIds,
    Col::Match,
    Col::Name,
    Col::Options,
    Col::Priority,
];

fn changed(d: &Acl, a: &Acl) -> Vec<Col> {
    let (dr, ar) = (d.to_row_of(ACL_COLUMNS), a.to_row_of(ACL_COLUMNS));
    ACL_COLUMNS
        .iter()
        .copied()
        .filter(|c| dr.get(c.name()) != ar.get(c.name()))
        .collect()
}

/// Inserts `acls` with fresh `uuid-name`s into `ops`; returns the references.
pub fn insert_all<'a>(
    acls: impl Iterator<Item = &'a Acl>,
    plan: &mut Plan,
    ops: &mut Vec<Operation>,
) -> Vec<Atom> {
    let mut refs = Vec::new();
    for acl in acls {
        let n = plan.fresh_name();
        ops.push(Operation::insert_typed(acl).with_uuid_name(&n));
        refs.push(Atom::NamedUuid(n));
        plan.inserts += 1;
    }
    refs
}

/// Plans the ACL writes of existing group `pg` (ours) towards `desired`.
pub fn plan(
    pg: &PortGroup,
    desired: &BTreeMap<String, Acl>,
    acls: &HashMap<Uuid, &Acl>,
    plan: &mut Plan,
) {
    let mut actual: HashMap<&str, &Acl> = HashMap::new();
    let mut stale: Vec<Uuid> = Vec::new();
    for u in &pg.acls {
        match acls.get(u) {
            Some(a) => match a.external_ids.get(ACL_KEY) {
                Some(k) if desired.contains_key(k) && !actual.contains_key(k.as_str()) => {
                    actual.insert(k.as_str(), a);
                }
                _ => stale.push(*u),
            },
            None => stale.push(*u),
        }
    }
    let mut ops = Vec::new();
    let mut new = Vec::new();
    for (key, d) in desired {
        match actual.get(key.as_str()) {
            Some(a) => {
                let cols = changed(d, a);
                if !cols.is_empty() {
                    plan.updates += 1;
                    ops.push(Operation::update_typed(
                        d,
                        &cols,
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
            "acls",
            Value::Set(stale.iter().map(|u| Atom::Uuid(*u)).collect()),
        ));
    }
    if !new.is_empty() {
        let refs = insert_all(new.into_iter(), plan, &mut ops);
        mutations.push(Mutation::insert("acls", Value::Set(refs)));
    }
    if !mutations.is_empty() {
        ops.push(Operation::mutate(
            PortGroup::TABLE,
            vec![Condition::uuid(pg.uuid())],
            mutations,
        ));
    }
    if !ops.is_empty() {
        plan.units
            .push(Unit::new(format!("ACLs of Port_Group {}", pg.name), ops));
    }
}
