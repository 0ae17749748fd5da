//! External mode: our pods' ports in the platform's security groups (its `Port_Group`
//! rows, named by a Subnet's `securityGroups`), so the platform's ACLs govern them as they
//! govern its VMs.
//!
//! A platform group is written only in its `ports` column, by `mutate`: our ports that
//! should be in it are inserted, ours that should not (the Subnet no longer names the
//! group, the feature is off, the pod moved) are deleted; the platform's own ports and
//! every other column are never touched. A port of ours that a pod's deletion removes
//! leaves the group by itself (`ports` is a weak reference). A port created in this pass
//! joins on the next (its uuid is known once it exists). Our own port groups
//! (NetworkPolicies) are not looked at.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use ovsdb::nb::{LogicalSwitchPort, PortGroup};
use ovsdb::replica::View;
use ovsdb::typed::Table;
use ovsdb::{Atom, Condition, Mutation, Operation, Uuid, Value};

use super::{Plan, ReconcileError, Reconciler, Unit};
use crate::names::OWNER;

/// The writes for `desired` against `view`.
fn plan_view(
    view: &View<'_>,
    desired: &BTreeMap<String, BTreeSet<String>>,
    owner: &str,
) -> Result<Plan, ReconcileError> {
    let mut p = Plan::default();
    plan(
        owner,
        desired,
        &view.typed::<PortGroup>()?,
        &view.typed::<LogicalSwitchPort>()?,
        &mut p,
    );
    Ok(p)
}

impl Reconciler {
    /// The membership of our ports in the platform's groups, after the ports exist (a
    /// port's uuid is known only then). `None` (standalone mode): nothing is looked at.
    pub(super) async fn reconcile_platform_groups(
        &self,
        desired: Option<&BTreeMap<String, BTreeSet<String>>>,
        outcome: &mut super::Outcome,
    ) -> Result<(), ReconcileError> {
        let Some(desired) = desired else {
            return Ok(());
        };
        let owner = self.owner.as_str();
        let p = self.replica.read(|v| plan_view(v, desired, owner))?;
        outcome.updates += p.updates;
        if p.is_empty() {
            return Ok(());
        }
        self.write(&p, outcome).await?;
        self.replica
            .wait_for(Duration::from_secs(30), |v| {
                plan_view(v, desired, owner).is_ok_and(|p| p.is_empty())
            })
            .await?;
        Ok(())
    }
}

fn ours(ids: &BTreeMap<String, String>, owner: &str) -> bool {
    ids.get(OWNER).map(String::as_str) == Some(owner)
}

fn set(uuids: &BTreeSet<Uuid>) -> Value {
    Value::Set(uuids.iter().map(|u| Atom::Uuid(*u)).collect())
}

/// Plans the membership of our ports in the platform's groups: `desired` maps a group's
/// name to the names of our ports that belong in it.
pub fn plan(
    owner: &str,
    desired: &BTreeMap<String, BTreeSet<String>>,
    groups: &[PortGroup],
    ports: &[LogicalSwitchPort],
    plan: &mut Plan,
) {
    let our_ports: HashMap<&str, Uuid> = ports
        .iter()
        .filter(|p| ours(&p.external_ids, owner))
        .map(|p| (p.name.as_str(), p.uuid))
        .collect();
    let our_uuids: BTreeSet<Uuid> = our_ports.values().copied().collect();
    for g in groups.iter().filter(|g| !ours(&g.external_ids, owner)) {
        let have: BTreeSet<Uuid> = g.ports.intersection(&our_uuids).copied().collect();
        let want: BTreeSet<Uuid> = desired
            .get(&g.name)
            .into_iter()
            .flatten()
            .filter_map(|n| our_ports.get(n.as_str()).copied())
            .collect();
        let add: BTreeSet<Uuid> = want.difference(&have).copied().collect();
        let del: BTreeSet<Uuid> = have.difference(&want).copied().collect();
        if add.is_empty() && del.is_empty() {
            continue;
        }
        let mut mutations = Vec::new();
        if !add.is_empty() {
            mutations.push(Mutation::insert("ports", set(&add)));
        }
        if !del.is_empty() {
            mutations.push(Mutation::delete("ports", set(&del)));
        }
        plan.updates += 1;
        plan.units.push(Unit::new(
            format!(
                "platform security group {}: {} of our ports in, {} out",
                g.name,
                add.len(),
                del.len()
            ),
            vec![Operation::mutate(
                PortGroup::TABLE,
                vec![Condition::uuid(g.uuid)],
                mutations,
            )],
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: &str = "zstack-ovn";

    fn port(name: &str, ours: bool) -> LogicalSwitchPort {
        LogicalSwitchPort {
            uuid: Uuid::new_v4(),
            name: name.into(),
            external_ids: if ours {
                crate::names::owned(OWNER, "pod", name)
            } else {
                BTreeMap::new()
            },
            ..Default::default()
        }
    }

    fn group(name: &str, ports: &[&LogicalSwitchPort], ours: bool) -> PortGroup {
        PortGroup {
            uuid: Uuid::new_v4(),
            name: name.into(),
            ports: ports.iter().map(|p| p.uuid).collect(),
            external_ids: if ours {
                crate::names::owned(OWNER, "netpol", name)
            } else {
                BTreeMap::new()
            },
            ..Default::default()
        }
    }

    fn ops(p: &Plan) -> String {
        format!("{:?}", p.units.iter().map(|u| &u.ops).collect::<Vec<_>>())
    }

    #[test]
    fn only_our_ports_move_and_only_in_platform_groups() {
        let (web, db, vm) = (
            port("ns_web", true),
            port("ns_db", true),
            port("vm-1", false),
        );
        let sg = group("sg-web", &[&vm, &db], false);
        let mine = group("pg-netpol", &[&web], true);
        let desired = BTreeMap::from([
            ("sg-web".to_string(), BTreeSet::from(["ns_web".to_string()])),
            // our own group is not managed here
            ("pg-netpol".to_string(), BTreeSet::new()),
        ]);
        let mut p = Plan::default();
        plan(
            OWNER,
            &desired,
            &[sg.clone(), mine.clone()],
            &[web.clone(), db.clone(), vm.clone()],
            &mut p,
        );
        assert_eq!(p.units.len(), 1, "{}", ops(&p));
        let o = ops(&p);
        assert!(o.contains(&sg.uuid.to_string()), "{o}");
        assert!(o.contains(&web.uuid.to_string()), "web joins: {o}");
        assert!(o.contains(&db.uuid.to_string()), "db leaves: {o}");
        assert!(
            !o.contains(&vm.uuid.to_string()),
            "the VM's port untouched: {o}"
        );
        assert!(
            !o.contains(&mine.uuid.to_string()),
            "our group untouched: {o}"
        );

        // in place: nothing
        let sg = group("sg-web", &[&vm, &web], false);
        let mut p = Plan::default();
        plan(
            OWNER,
            &desired,
            std::slice::from_ref(&sg),
            &[web.clone(), vm.clone()],
            &mut p,
        );
        assert!(p.units.is_empty(), "{}", ops(&p));

        // the feature off (nothing desired): ours leave, the VM stays
        let mut p = Plan::default();
        plan(
            OWNER,
            &BTreeMap::new(),
            &[sg],
            &[web.clone(), vm.clone()],
            &mut p,
        );
        let o = ops(&p);
        assert!(
            o.contains(&web.uuid.to_string()) && !o.contains(&vm.uuid.to_string()),
            "{o}"
        );
    }
}
