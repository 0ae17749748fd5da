//! The diff of our Port_Groups (NetworkPolicy: one per policy, one default deny per
//! direction) against the replica, and the whole NetworkPolicy plan ([`plan_policy`]).
//!
//! Member ports are named in the desired state and resolved here to the
//! Logical_Switch_Ports' UUIDs (a port not in the NB yet is left out; the next pass adds
//! it). Membership is mutated in place: a label change writes only the groups it changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use ovsdb::nb::{Acl, AddressSet, LogicalSwitchPort, PortGroup, PortGroupColumn as Col};
use ovsdb::replica::View;
use ovsdb::typed::Table;
use ovsdb::{Atom, Condition, Mutation, Operation, Uuid, Value};

use super::{Plan, ReconcileError, Unit, acl, address_set};
use crate::names::OWNER;
use crate::netpol::{DesiredPortGroup, PolicyNb};

fn ours(ids: &BTreeMap<String, String>, owner: &str) -> bool {
    ids.get(OWNER).map(String::as_str) == Some(owner)
}

fn uuid_set(items: impl Iterator<Item = Uuid>) -> Value {
    Value::Set(items.map(Atom::Uuid).collect())
}

/// Plans every NetworkPolicy write: address sets first, then groups and their ACLs (one
/// plan; OVSDB checks references at commit, so the order inside it does not matter).
/// `now`: unix seconds, for the grace period of unused rows
/// ([`address_set::UNUSED_SINCE`]).
pub fn plan_policy(
    view: &View<'_>,
    desired: &PolicyNb,
    owner: &str,
    now: u64,
) -> Result<Plan, ReconcileError> {
    let mut plan = Plan::default();
    address_set::plan(
        owner,
        &desired.address_sets,
        &view.typed::<AddressSet>()?,
        now,
        &mut plan,
    );
    let lsps = view.typed::<LogicalSwitchPort>()?;
    let lsp_uuid: HashMap<&str, Uuid> = lsps.iter().map(|l| (l.name.as_str(), l.uuid())).collect();
    let acls = view.typed::<Acl>()?;
    let acl_by_uuid: HashMap<Uuid, &Acl> = acls.iter().map(|a| (a.uuid(), a)).collect();
    plan_groups(
        owner,
        &desired.port_groups,
        &view.typed::<PortGroup>()?,
        &lsp_uuid,
        &acl_by_uuid,
        now,
        &mut plan,
    );
    Ok(plan)
}

/// Plans the Port_Group writes. A group no policy uses loses its ACLs at once (it
/// enforces nothing) and is deleted after the grace period of
/// [`address_set::UNUSED_SINCE`]; wanted again, it is updated in place.
pub fn plan_groups(
    owner: &str,
    desired: &BTreeMap<String, DesiredPortGroup>,
    actual: &[PortGroup],
    lsp_uuid: &HashMap<&str, Uuid>,
    acls: &HashMap<Uuid, &Acl>,
    now: u64,
    plan: &mut Plan,
) {
    let by_name: HashMap<&str, &PortGroup> = actual.iter().map(|p| (p.name.as_str(), p)).collect();
    for (name, d) in desired {
        let ports: BTreeSet<Uuid> = d
            .ports
            .iter()
            .filter_map(|p| lsp_uuid.get(p.as_str()).copied())
            .collect();
        match by_name.get(name.as_str()) {
            None => {
                let mut ops = Vec::new();
                let refs = acl::insert_all(d.acls.values(), plan, &mut ops);
                let mut row = d.row.to_row();
                row.insert("ports".into(), uuid_set(ports.into_iter()));
                row.insert("acls".into(), Value::Set(refs));
                ops.push(Operation::insert(PortGroup::TABLE, row));
                plan.inserts += 1;
                plan.units
                    .push(Unit::new(format!("create Port_Group {name}"), ops));
            }
            Some(a) if !ours(&a.external_ids, owner) => plan.conflicts.push(format!(
                "Port_Group {name} exists but is not ours (external_ids:{OWNER}); left untouched"
            )),
            Some(a) => {
                let mut ops = Vec::new();
                if a.external_ids != d.row.external_ids {
                    ops.push(Operation::update_typed(
                        &d.row,
                        &[Col::ExternalIds],
                        vec![Condition::uuid(a.uuid())],
                    ));
                }
                let added: Vec<Uuid> = ports.difference(&a.ports).copied().collect();
                let removed: Vec<Uuid> = a.ports.difference(&ports).copied().collect();
                let mut mutations = Vec::new();
                if !removed.is_empty() {
                    mutations.push(Mutation::delete("ports", uuid_set(removed.into_iter())));
                }
                if !added.is_empty() {
                    mutations.push(Mutation::insert("ports", uuid_set(added.into_iter())));
                }
                if !mutations.is_empty() {
                    ops.push(Operation::mutate(
                        PortGroup::TABLE,
                        vec![Condition::uuid(a.uuid())],
                        mutations,
                    ));
                }
                if !ops.is_empty() {
                    plan.updates += 1;
                    plan.units
                        .push(Unit::new(format!("update Port_Group {name}"), ops));
                }
                acl::plan(a, &d.acls, acls, plan);
            }
        }
    }
    for a in actual {
        if !ours(&a.external_ids, owner) || desired.contains_key(&a.name) {
            continue;
        }
        match address_set::unused(&a.external_ids, now) {
            address_set::Unused::Keep => {}
            address_set::Unused::Mark(ids) => {
                // its ACLs are garbage-collected once the group no longer holds them;
                // the ports stay (inert without ACLs), so a comeback changes no membership
                plan.updates += 1;
                plan.deletes += a.acls.len();
                plan.units.push(Unit::new(
                    format!("mark Port_Group {} unused", a.name),
                    vec![Operation::update(
                        PortGroup::TABLE,
                        vec![Condition::uuid(a.uuid())],
                        ovsdb::ops::row([
                            ("external_ids", address_set::string_map(&ids)),
                            ("acls", Value::Set(Vec::new())),
                        ]),
                    )],
                ));
            }
            address_set::Unused::Delete => {
                plan.deletes += 1 + a.acls.len();
                plan.units.push(Unit::new(
                    format!("delete Port_Group {}", a.name),
                    vec![Operation::delete(
                        PortGroup::TABLE,
                        vec![Condition::uuid(a.uuid())],
                    )],
                ));
            }
        }
    }
}

impl super::Reconciler {
    /// The NetworkPolicy pass, after the switch ports exist (groups reference them): plan,
    /// write, and wait until the replica has seen the writes. Counts go into `outcome`.
    pub(super) async fn reconcile_policy(
        &self,
        desired: &PolicyNb,
        outcome: &mut super::Outcome,
    ) -> Result<(), ReconcileError> {
        // one clock reading for the plan and the wait below
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.reconcile_policy_at(desired, outcome, now).await
    }

    /// [`Self::reconcile_policy`] at `now` (unix seconds): the uninstall passes the end of
    /// time, so rows marked unused go without their grace period.
    pub(super) async fn reconcile_policy_at(
        &self,
        desired: &PolicyNb,
        outcome: &mut super::Outcome,
        now: u64,
    ) -> Result<(), ReconcileError> {
        let owner = self.owner.as_str();
        let plan = self.replica.read(|v| plan_policy(v, desired, owner, now))?;
        outcome.inserts += plan.inserts;
        outcome.updates += plan.updates;
        outcome.deletes += plan.deletes;
        outcome.conflicts.extend(plan.conflicts.iter().cloned());
        if plan.is_empty() {
            return Ok(());
        }
        self.write(&plan, outcome).await?;
        self.replica
            .wait_for(Duration::from_secs(30), |v| {
                plan_policy(v, desired, owner, now).is_ok_and(|p| p.is_empty())
            })
            .await?;
        Ok(())
    }
}
