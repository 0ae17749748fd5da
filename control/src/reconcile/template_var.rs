//! The diff of `Chassis_Template_Var` rows (the per-chassis values of the template load
//! balancers, [`crate::translate::service::local`]) against the replica.
//!
//! - A row is ours when `external_ids:zstack.io/owner` is our id; rows are matched by
//!   `chassis` (unique in the table). Every variable of our row is ours.
//! - A desired row that exists is changed with one `mutate`: the variables that went or
//!   changed are deleted by key, the new and changed ones inserted, so an endpoint change
//!   on a node writes only that node's changed variables.
//! - A missing row is inserted; one of ours no longer desired (node gone, or no Service
//!   needs it) is deleted.
//! - A foreign row for the chassis (another CMS uses templates there) is never touched:
//!   the chassis is reported as a conflict.

use std::collections::{BTreeMap, HashMap};

use ovsdb::nb::ChassisTemplateVar;
use ovsdb::typed::Table;
use ovsdb::{Condition, Mutation, Operation, Value};

use super::{Plan, Unit};
use crate::names::{self, OWNER};
use crate::translate::service::local::KIND_TEMPLATE_VARS;

/// Plans the `Chassis_Template_Var` writes into `plan`.
pub fn plan(
    owner: &str,
    desired: &BTreeMap<String, BTreeMap<String, String>>,
    actual: &[ChassisTemplateVar],
    plan: &mut Plan,
) {
    let by_chassis: HashMap<&str, &ChassisTemplateVar> =
        actual.iter().map(|r| (r.chassis.as_str(), r)).collect();
    let ours =
        |r: &ChassisTemplateVar| r.external_ids.get(OWNER).map(String::as_str) == Some(owner);
    for (chassis, vars) in desired {
        match by_chassis.get(chassis.as_str()) {
            None => {
                plan.inserts += 1;
                plan.units.push(Unit::new(
                    format!("create Chassis_Template_Var {chassis}"),
                    vec![Operation::insert_typed(&ChassisTemplateVar {
                        chassis: chassis.clone(),
                        variables: vars.clone(),
                        external_ids: names::owned(owner, KIND_TEMPLATE_VARS, chassis),
                        ..Default::default()
                    })],
                ));
            }
            Some(row) if !ours(row) => plan.conflicts.push(format!(
                "Chassis_Template_Var {chassis} belongs to another owner: \
                 internalTrafficPolicy: Local Services are not node-local there"
            )),
            Some(row) => {
                let stale: Vec<&String> = row
                    .variables
                    .iter()
                    .filter(|(k, v)| vars.get(*k) != Some(*v))
                    .map(|(k, _)| k)
                    .collect();
                let fresh: Vec<(&String, &String)> = vars
                    .iter()
                    .filter(|(k, v)| row.variables.get(*k) != Some(*v))
                    .collect();
                let mut mutations = Vec::new();
                if !stale.is_empty() {
                    mutations.push(Mutation::delete("variables", Value::string_set(stale)));
                }
                if !fresh.is_empty() {
                    mutations.push(Mutation::insert(
                        "variables",
                        Value::string_map(fresh.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
                    ));
                }
                if !mutations.is_empty() {
                    plan.updates += 1;
                    plan.units.push(Unit::new(
                        format!(
                            "update {} variables of Chassis_Template_Var {chassis}",
                            fresh.len().max(1)
                        ),
                        vec![Operation::mutate(
                            ChassisTemplateVar::TABLE,
                            vec![Condition::uuid(row.uuid)],
                            mutations,
                        )],
                    ));
                }
            }
        }
    }
    for row in actual
        .iter()
        .filter(|r| ours(r) && !desired.contains_key(&r.chassis))
    {
        plan.deletes += 1;
        plan.units.push(Unit::new(
            format!("delete Chassis_Template_Var {}", row.chassis),
            vec![Operation::delete(
                ChassisTemplateVar::TABLE,
                vec![Condition::uuid(row.uuid)],
            )],
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovsdb::Uuid;

    const OWNER_ID: &str = "c1";

    fn vars(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn row(chassis: &str, owner: &str, kv: &[(&str, &str)]) -> ChassisTemplateVar {
        ChassisTemplateVar {
            uuid: Uuid::new_v4(),
            chassis: chassis.into(),
            variables: vars(kv),
            external_ids: names::owned(owner, KIND_TEMPLATE_VARS, chassis),
        }
    }

    fn ops(p: &Plan) -> Vec<String> {
        p.units
            .iter()
            .flat_map(|u| u.ops.iter().map(|o| o.to_json().to_string()))
            .collect()
    }

    #[test]
    fn insert_update_by_key_delete_and_foreign() {
        let desired = BTreeMap::from([
            ("n1".to_string(), vars(&[("a", "1"), ("b", "2")])),
            ("n2".to_string(), vars(&[("a", "1")])),
            ("n3".to_string(), vars(&[("a", "1")])),
        ]);
        // nothing there: three inserts
        let mut p = Plan::default();
        plan(OWNER_ID, &desired, &[], &mut p);
        assert_eq!((p.inserts, p.updates, p.deletes), (3, 0, 0));

        // n1: b changed and c stale; n2 equal; n3 foreign; n4 ours and gone
        let actual = [
            row("n1", OWNER_ID, &[("a", "1"), ("b", "9"), ("c", "3")]),
            row("n2", OWNER_ID, &[("a", "1")]),
            row("n3", "someone-else", &[("x", "y")]),
            row("n4", OWNER_ID, &[("a", "1")]),
        ];
        let mut p = Plan::default();
        plan(OWNER_ID, &desired, &actual, &mut p);
        assert_eq!(
            (p.inserts, p.updates, p.deletes),
            (0, 1, 1),
            "{:?}",
            ops(&p)
        );
        assert_eq!(p.conflicts.len(), 1, "{:?}", p.conflicts);
        let o = ops(&p);
        assert!(o[0].contains("\"mutate\""), "{o:?}");
        assert!(
            o[0].contains(r#"["variables","delete",["set",["b","c"]]]"#),
            "{o:?}"
        );
        assert!(
            o[0].contains(r#"["variables","insert",["map",[["b","2"]]]]"#),
            "{o:?}"
        );
        assert!(
            !o[0].contains("\"a\""),
            "unchanged variables are not written: {o:?}"
        );
        assert!(o[1].contains("\"delete\"") && o[1].contains(&actual[3].uuid.to_string()));
        assert!(
            !o.iter().any(|x| x.contains(&actual[2].uuid.to_string())),
            "foreign untouched"
        );

        // converged: nothing
        let actual = [
            row("n1", OWNER_ID, &[("a", "1"), ("b", "2")]),
            row("n2", OWNER_ID, &[("a", "1")]),
            row("n3", OWNER_ID, &[("a", "1")]),
        ];
        let mut p = Plan::default();
        plan(OWNER_ID, &desired, &actual, &mut p);
        assert!(p.is_empty());
    }
}
