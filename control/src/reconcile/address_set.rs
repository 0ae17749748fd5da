//! The diff of our Address_Sets (NetworkPolicy peers) against the replica: a set's
//! `addresses` are mutated in place (only the added and removed addresses travel), so a
//! pod label change rewrites only the sets whose members change.
//!
//! A set no policy uses any more is not deleted at once: it is marked
//! [`UNUSED_SINCE`] and deleted [`UNUSED_GRACE`] later (Port_Groups too, see
//! `port_group`). The same name comes back often (a policy deleted and re-applied, the
//! same peer in the next policy) and then the row is updated in place. Deleting a row and
//! creating its namesake right after gives ovn-controller a delete and an insert of one
//! name, which it may see in one batch of updates; once in the NetworkPolicy corpus that
//! left an allow ACL without its flows for over a minute. An in-place update is the path
//! its incremental processing handles routinely.

use std::collections::{BTreeMap, HashMap};

use ovsdb::nb::{AddressSet, AddressSetColumn as Col};
use ovsdb::typed::Table;
use ovsdb::{Atom, Condition, Mutation, Operation, Value};

use super::{Plan, Unit};
use crate::names::OWNER;

fn ours(ids: &BTreeMap<String, String>, owner: &str) -> bool {
    ids.get(OWNER).map(String::as_str) == Some(owner)
}

/// `external_ids` key on a set or group of ours that no policy uses: since when (unix
/// seconds).
pub use api::external_ids::nb::UNUSED_SINCE;
/// How long an unused set or group is kept before it is deleted (seconds).
pub const UNUSED_GRACE: u64 = 60;

/// What to do with a row of ours that nothing desires, at `now` (unix seconds).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unused {
    /// Not marked yet: mark it (these `external_ids`).
    Mark(BTreeMap<String, String>),
    /// Marked less than [`UNUSED_GRACE`] ago: leave it.
    Keep,
    /// Marked long enough ago (or unreadably): delete it.
    Delete,
}

pub(super) fn unused(ids: &BTreeMap<String, String>, now: u64) -> Unused {
    match ids.get(UNUSED_SINCE) {
        None => {
            let mut ids = ids.clone();
            ids.insert(UNUSED_SINCE.into(), now.to_string());
            Unused::Mark(ids)
        }
        Some(t) => match t.parse::<u64>() {
            Ok(t) if now < t.saturating_add(UNUSED_GRACE) => Unused::Keep,
            _ => Unused::Delete,
        },
    }
}

/// A set of strings as an OVSDB set value.
pub(super) fn string_set<'a>(items: impl Iterator<Item = &'a String>) -> Value {
    Value::Set(items.map(|s| Atom::String(s.clone())).collect())
}

/// Plans the Address_Set writes at `now` (unix seconds; see [`UNUSED_SINCE`]).
pub fn plan(
    owner: &str,
    desired: &BTreeMap<String, AddressSet>,
    actual: &[AddressSet],
    now: u64,
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
        if !ours(&a.external_ids, owner) || desired.contains_key(&a.name) {
            continue;
        }
        match unused(&a.external_ids, now) {
            Unused::Keep => {}
            Unused::Mark(ids) => {
                plan.updates += 1;
                plan.units.push(Unit::new(
                    format!("mark Address_Set {} unused", a.name),
                    vec![Operation::update(
                        AddressSet::TABLE,
                        vec![Condition::uuid(a.uuid())],
                        ovsdb::ops::row([("external_ids", string_map(&ids))]),
                    )],
                ));
            }
            Unused::Delete => {
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
}

/// A string map as an OVSDB map value.
pub(super) fn string_map(m: &BTreeMap<String, String>) -> Value {
    Value::string_map(m.iter().map(|(k, v)| (k.clone(), v.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, ids: &[(&str, &str)], addrs: &[&str]) -> AddressSet {
        AddressSet {
            name: name.into(),
            external_ids: ids
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            addresses: addrs.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        }
    }

    fn plan_at(desired: &[AddressSet], actual: &[AddressSet], now: u64) -> Plan {
        let desired = desired
            .iter()
            .map(|d| (d.name.clone(), d.clone()))
            .collect();
        let mut p = Plan::default();
        plan("me", &desired, actual, now, &mut p);
        p
    }

    #[test]
    fn an_unused_set_is_marked_kept_then_deleted() {
        let a = set("as1", &[(OWNER, "me")], &["10.0.0.1"]);
        let p = plan_at(&[], std::slice::from_ref(&a), 1000);
        assert_eq!((p.inserts, p.updates, p.deletes), (0, 1, 0));
        assert!(p.units[0].what.contains("unused"), "{:?}", p.units[0].what);
        let marked = set(
            "as1",
            &[(OWNER, "me"), (UNUSED_SINCE, "1000")],
            &["10.0.0.1"],
        );
        let p = plan_at(&[], std::slice::from_ref(&marked), 1000 + UNUSED_GRACE - 1);
        assert!(p.units.is_empty(), "kept during the grace period");
        let p = plan_at(&[], std::slice::from_ref(&marked), 1000 + UNUSED_GRACE);
        assert_eq!((p.inserts, p.updates, p.deletes), (0, 0, 1));
        // wanted again: updated in place (mark dropped, addresses diffed), never re-created
        let want = set("as1", &[(OWNER, "me")], &["10.0.0.2"]);
        let p = plan_at(&[want], &[marked], 5000);
        assert_eq!((p.inserts, p.updates, p.deletes), (0, 1, 0));
    }

    #[test]
    fn foreign_sets_are_never_marked() {
        let f = set("as1", &[(OWNER, "someone-else")], &[]);
        assert!(plan_at(&[], &[f], 1000).units.is_empty());
        assert_eq!(
            unused(&BTreeMap::from([(UNUSED_SINCE.into(), "x".into())]), 1),
            Unused::Delete
        );
    }
}
