//! The diff of our Address_Sets (NetworkPolicy peers) against the replica: a set's
//! `addresses` are mutated in place (only the added and removed addresses travel), so a
//! pod label change rewrites only the sets whose members change.

use std::collections::{BTreeMap, HashMap};

use ovsdb::nb::{AddressSet, AddressSetColumn as Col};
use ovsdb::typed::Table;
use ovsdb::{Atom, Condition, Mutation, Operation, Value};

use super::{Plan, Unit};
use crate::names::OWNER;

fn ours(ids: &BTreeMap<String, String>, owner: &str) -> bool {
    ids.get(OWNER).map(String::as_str) == Some(owner)
}

/// A set of strings as an OVSDB set value.
pub(super) fn string_set<'a>(items: impl Iterator<Item = &'a String>) -> Value {
    Value::Set(items.map(|s| Atom::String(s.clone())).collect())
}

/// Plans the Address_Set writes.
pub fn plan(
    owner: &str,
    desired: &BTreeMap<String, AddressSet>,
    actual: &[AddressSet],
    plan: &mut Plan,
) {
    let by_name: HashMap<&str, &AddressSet> = actual.iter().map(|a| (a.name.as_str(), a)).collect();
    for (name, d) in desired {
        match by_name.get(name.as_str()) {
            None => {
                plan.inserts += 1;
                plan.units.push(Unit::new(
                    format!("create Address_Set {name}"),
                    vec![Operation::insert_typed(d)],
                ));
            }
            Some(a) if !ours(&a.external_ids, owner) => plan.conflicts.push(format!(
                "Address_Set {name} exists but is not ours (external_ids:{OWNER}); left untouched"
            )),
            Some(a) => {
                let mut ops = Vec::new();
                if a.external_ids != d.external_ids {
                    ops.push(Operation::update_typed(
                        d,
                        &[Col::ExternalIds],
                        vec![Condition::uuid(a.uuid())],
                    ));
                }
                let added: Vec<&String> = d.addresses.difference(&a.addresses).collect();
                let removed: Vec<&String> = a.addresses.difference(&d.addresses).collect();
                let mut mutations = Vec::new();
                if !removed.is_empty() {
                    mutations.push(Mutation::delete(
                        "addresses",
                        string_set(removed.into_iter()),
                    ));
                }
                if !added.is_empty() {
                    mutations.push(Mutation::insert("addresses", string_set(added.into_iter())));
                }
                if !mutations.is_empty() {
                    ops.push(Operation::mutate(
                        AddressSet::TABLE,
                        vec![Condition::uuid(a.uuid())],
                        mutations,
                    ));
                }
                if !ops.is_empty() {
                    plan.updates += 1;
                    plan.units
                        .push(Unit::new(format!("update Address_Set {name}"), ops));
                }
            }
        }
    }
    for a in actual {
        if ours(&a.external_ids, owner) && !desired.contains_key(&a.name) {
            plan.deletes += 1;
            plan.units.push(Unit::new(
                format!("delete Address_Set {}", a.name),
                vec![Operation::delete(
                    AddressSet::TABLE,
                    vec![Condition::uuid(a.uuid())],
                )],
            ));
        }
    }
}
