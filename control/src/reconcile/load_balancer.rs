//! The diff of Service load balancers ([`DesiredLbs`]) against the replica.
//!
//! - Load_Balancer rows are ours when `external_ids:zstack.io/owner` is our id; they are
//!   matched by name: a desired row that exists is updated in the managed columns that
//!   differ (an endpoint change rewrites only that Service's row), a missing one is inserted
//!   and added to our group in the same transaction, one of ours no longer desired is
//!   removed from the group and deleted.
//! - Our Load_Balancer_Group ([`names::lb_group`]; the table has no `external_ids`, the
//!   name carries the owner) is created once and attached to the desired switches (our
//!   own; matched by name *and* owner mark). A switch created earlier in the same plan is
//!   found by those conditions.
//! - In external mode the group is also attached to the platform switches the Subnets
//!   name ([`DesiredLbs::platform_switches`]): a foreign switch is written only there, by
//!   a `mutate` inserting our group's uuid into `load_balancer_group`, and by a `mutate`
//!   deleting exactly that uuid once no Subnet names it. Its other columns, and any group
//!   of the platform's in that column, are never written.

use std::collections::{BTreeMap, HashMap, HashSet};

use ovsdb::nb::{LoadBalancer, LoadBalancerColumn as LbCol, LoadBalancerGroup, LogicalSwitch};
use ovsdb::typed::Table;
use ovsdb::{Atom, Condition, Mutation, Operation, Uuid, Value};

use super::family::Named;
use super::{Plan, Unit};
use crate::desired::{DesiredLbs, LOAD_BALANCER_COLUMNS};
use crate::names::{self, OWNER};

/// Load balancers per insert/delete unit.
const CHUNK: usize = 500;

impl Named for LoadBalancer {
    fn name(&self) -> &str {
        &self.name
    }
    fn external_ids(&self) -> &BTreeMap<String, String> {
        &self.external_ids
    }
}

fn ours<T: Named>(row: &T, owner: &str) -> bool {
    row.external_ids().get(OWNER).map(String::as_str) == Some(owner)
}

/// The managed columns ([`LOAD_BALANCER_COLUMNS`]) whose values differ, compared on the
/// typed rows (no row serialisation: this runs for every Service on every pass).
fn changed(d: &LoadBalancer, a: &LoadBalancer) -> Vec<LbCol> {
    LOAD_BALANCER_COLUMNS
        .iter()
        .copied()
        .filter(|c| match c {
            LbCol::Vips => d.vips != a.vips,
            LbCol::Protocol => d.protocol != a.protocol,
            LbCol::Options => d.options != a.options,
            LbCol::SelectionFields => d.selection_fields != a.selection_fields,
            LbCol::ExternalIds => d.external_ids != a.external_ids,
            LbCol::HealthCheck => d.health_check != a.health_check,
            LbCol::IpPortMappings => d.ip_port_mappings != a.ip_port_mappings,
            LbCol::Name => d.name != a.name,
        })
        .collect()
}

fn owner_cond(owner: &str) -> Condition {
    Condition::includes("external_ids", Value::string_map([(OWNER, owner)]))
}

/// Plans the load balancer writes into `plan`.
pub fn plan(
    owner: &str,
    desired: &DesiredLbs,
    lbs: &[LoadBalancer],
    groups: &[LoadBalancerGroup],
    switches: &[LogicalSwitch],
    plan: &mut Plan,
) {
    let group_name = names::lb_group(owner);
    let group = groups.iter().find(|g| g.name == group_name);
    let group_cond = vec![Condition::eq("name", Value::string(&group_name))];
    if group.is_none() && desired.rows.is_empty() {
        // no Service yet: no group either (a cluster without Services writes nothing)
        return;
    }

    // The group and its attachment to our switches.
    let ours_by_name: HashMap<&str, &LogicalSwitch> = switches
        .iter()
        .filter(|s| ours(*s, owner))
        .map(|s| (s.name.as_str(), s))
        .collect();
    let attach = |sw: &str, group_ref: Value| {
        Operation::mutate(
            LogicalSwitch::TABLE,
            match ours_by_name.get(sw) {
                Some(s) => vec![Condition::uuid(s.uuid)],
                None => vec![Condition::eq("name", Value::string(sw)), owner_cond(owner)],
            },
            vec![Mutation::insert("load_balancer_group", group_ref)],
        )
    };
    let platform: Vec<&LogicalSwitch> = switches
        .iter()
        .filter(|s| !ours(*s, owner) && desired.platform_switches.contains(&s.name))
        .collect();
    let attach_platform = |s: &LogicalSwitch, group_ref: Value| {
        Operation::mutate(
            LogicalSwitch::TABLE,
            vec![Condition::uuid(s.uuid)],
            vec![Mutation::insert("load_balancer_group", group_ref)],
        )
    };
    match group {
        None => {
            let g = plan.fresh_name();
            let mut ops = vec![
                Operation::insert_typed(&LoadBalancerGroup {
                    name: group_name.clone(),
                    ..Default::default()
                })
                .with_uuid_name(&g),
            ];
            let group_ref = || Value::Atom(Atom::NamedUuid(g.clone()));
            ops.extend(desired.switches.iter().map(|sw| attach(sw, group_ref())));
            ops.extend(platform.iter().map(|s| attach_platform(s, group_ref())));
            plan.inserts += 1;
            plan.units.push(Unit::new(
                format!("create Load_Balancer_Group {group_name}"),
                ops,
            ));
        }
        Some(g) => {
            let ops: Vec<Operation> = desired
                .switches
                .iter()
                .filter(|sw| {
                    ours_by_name
                        .get(sw.as_str())
                        .is_none_or(|s| !s.load_balancer_group.contains(&g.uuid))
                })
                .map(|sw| attach(sw, Value::uuid(g.uuid)))
                .chain(
                    platform
                        .iter()
                        .filter(|s| !s.load_balancer_group.contains(&g.uuid))
                        .map(|s| attach_platform(s, Value::uuid(g.uuid))),
                )
                .collect();
            // ours no longer desired, and platform switches no Subnet names any more: the
            // group's uuid is ours, so deleting it from their column removes only our write
            let detach: Vec<Operation> = switches
                .iter()
                .filter(|s| s.load_balancer_group.contains(&g.uuid))
                .filter(|s| {
                    if ours(*s, owner) {
                        !desired.switches.contains(&s.name)
                    } else {
                        !desired.platform_switches.contains(&s.name)
                    }
                })
                .map(|s| {
                    Operation::mutate(
                        LogicalSwitch::TABLE,
                        vec![Condition::uuid(s.uuid)],
                        vec![Mutation::delete("load_balancer_group", Value::uuid(g.uuid))],
                    )
                })
                .collect();
            // nothing wanted at all (every Subnet and Service gone, or an uninstall): the
            // group goes too, after it left every switch (a switch's reference is strong)
            let remove = desired.rows.is_empty()
                && desired.switches.is_empty()
                && desired.platform_switches.is_empty();
            if !ops.is_empty() || !detach.is_empty() || remove {
                plan.updates += ops.len() + detach.len();
                let n = ops.len() + detach.len();
                let mut all: Vec<Operation> = ops.into_iter().chain(detach).collect();
                let what = if remove {
                    plan.deletes += 1;
                    all.push(Operation::delete(
                        LoadBalancerGroup::TABLE,
                        vec![Condition::uuid(g.uuid)],
                    ));
                    format!("detach {group_name} from {n} switches and delete it")
                } else {
                    format!("attach {group_name} to {n} switches")
                };
                plan.units.push(Unit::new(what, all));
            }
        }
    }

    // The rows.
    let in_group: HashSet<Uuid> = group
        .map(|g| g.load_balancer.iter().copied().collect())
        .unwrap_or_default();
    let mut actual: HashMap<&str, &LoadBalancer> = HashMap::new();
    let mut extra: Vec<&LoadBalancer> = Vec::new();
    for lb in lbs.iter().filter(|l| ours(*l, owner)) {
        if !desired.rows.contains_key(&lb.name) || actual.contains_key(lb.name.as_str()) {
            extra.push(lb);
        } else {
            actual.insert(lb.name.as_str(), lb);
        }
    }
    let mut new: Vec<&LoadBalancer> = Vec::new();
    let mut regroup: Vec<Atom> = Vec::new();
    for (name, d) in &desired.rows {
        match actual.get(name.as_str()) {
            None => new.push(d),
            Some(a) => {
                let cols = changed(d, a);
                if !cols.is_empty() {
                    plan.updates += 1;
                    plan.units.push(Unit::new(
                        format!("update Load_Balancer {name}"),
                        vec![Operation::update_typed(
                            d,
                            &cols,
                            vec![Condition::uuid(a.uuid)],
                        )],
                    ));
                }
                if !in_group.contains(&a.uuid) {
                    regroup.push(Atom::Uuid(a.uuid));
                }
            }
        }
    }
    if !regroup.is_empty() {
        plan.updates += regroup.len();
        plan.units.push(Unit::new(
            format!("add {} Load_Balancer to {group_name}", regroup.len()),
            vec![Operation::mutate(
                LoadBalancerGroup::TABLE,
                group_cond.clone(),
                vec![Mutation::insert("load_balancer", Value::Set(regroup))],
            )],
        ));
    }
    for chunk in new.chunks(CHUNK) {
        let mut ops = Vec::with_capacity(chunk.len() + 1);
        let mut refs = Vec::with_capacity(chunk.len());
        for lb in chunk {
            let n = plan.fresh_name();
            ops.push(Operation::insert_typed(*lb).with_uuid_name(&n));
            refs.push(Atom::NamedUuid(n));
        }
        ops.push(Operation::mutate(
            LoadBalancerGroup::TABLE,
            group_cond.clone(),
            vec![Mutation::insert("load_balancer", Value::Set(refs))],
        ));
        plan.inserts += chunk.len();
        plan.units.push(Unit::new(
            format!("create {} Load_Balancer", chunk.len()),
            ops,
        ));
    }
    for chunk in extra.chunks(CHUNK) {
        let set = Value::Set(chunk.iter().map(|l| Atom::Uuid(l.uuid)).collect());
        let mut ops = Vec::with_capacity(chunk.len() + 1);
        if group.is_some() {
            ops.push(Operation::mutate(
                LoadBalancerGroup::TABLE,
                group_cond.clone(),
                vec![Mutation::delete("load_balancer", set)],
            ));
        }
        ops.extend(
            chunk
                .iter()
                .map(|l| Operation::delete(LoadBalancer::TABLE, vec![Condition::uuid(l.uuid)])),
        );
        plan.deletes += chunk.len();
        plan.units.push(Unit::new(
            format!("delete {} Load_Balancer", chunk.len()),
            ops,
        ));
    }
}

#[cfg(test)]
mod tests;
