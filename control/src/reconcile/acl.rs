//! The diff of one port group's ACLs: desired ACLs by [`ACL_KEY`] against the ACLs the
//! group references (every one of them is ours: the group is), through
//! [`super::children`].

use std::collections::{BTreeMap, HashMap};

use ovsdb::nb::{Acl, AclColumn as Col, PortGroup};
use ovsdb::{Atom, Operation, Uuid};

use super::Plan;
use super::children::{self, Child, Parent};
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

impl Child for Acl {
    fn ids(&self) -> &BTreeMap<String, String> {
        &self.external_ids
    }
}

/// Inserts `acls` with fresh `uuid-name`s into `ops`; returns the references.
pub fn insert_all<'a>(
    acls: impl Iterator<Item = &'a Acl>,
    plan: &mut Plan,
    ops: &mut Vec<Operation>,
) -> Vec<Atom> {
    children::insert_all(acls, plan, ops)
}

/// Plans the ACL writes of existing group `pg` (ours) towards `desired`.
pub fn plan(
    pg: &PortGroup,
    desired: &BTreeMap<String, Acl>,
    acls: &HashMap<Uuid, &Acl>,
    plan: &mut Plan,
) {
    let parent = Parent {
        row: pg,
        name: &pg.name,
        column: "acls",
        what: "ACLs",
        key: ACL_KEY,
    };
    children::plan(
        &parent,
        &pg.acls,
        acls,
        desired,
        ACL_COLUMNS,
        |_| true,
        plan,
    );
}
