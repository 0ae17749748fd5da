//! Pure tests of the diff (no database): typed rows in, planned operations out.
#![allow(clippy::cloned_ref_to_slice_refs)] // `&[row.clone()]` reads better in fixtures

use std::collections::{BTreeMap, BTreeSet};

use ovsdb::nb::{LogicalSwitch, LogicalSwitchPort};
use ovsdb::{Operation, Uuid};

use super::Plan;
use super::family::plan;
use crate::desired::{Parent, SWITCH_COLUMNS, SWITCH_PORT_COLUMNS};
use crate::names;

const OWNER: &str = "zstack-ovn";

fn lsp(name: &str, addr: &str, ours: bool) -> LogicalSwitchPort {
    let mut p = LogicalSwitchPort {
        uuid: Uuid::new_v4(),
        name: name.into(),
        ..Default::default()
    };
    p.addresses.insert(addr.into());
    if ours {
        p.external_ids = names::owned(OWNER, "pod", name);
    }
    p
}

fn ls(name: &str, ports: &[&LogicalSwitchPort], ours: bool) -> LogicalSwitch {
    LogicalSwitch {
        uuid: Uuid::new_v4(),
        name: name.into(),
        ports: ports.iter().map(|p| p.uuid).collect::<BTreeSet<_>>(),
        external_ids: if ours {
            names::owned(OWNER, "subnet", name)
        } else {
            BTreeMap::new()
        },
        ..Default::default()
    }
}

fn desired(
    switches: &[(&LogicalSwitch, &[&LogicalSwitchPort], bool)],
) -> BTreeMap<String, Parent<LogicalSwitch, LogicalSwitchPort>> {
    switches
        .iter()
        .map(|(s, ports, owned)| {
            let mut row = (*s).clone();
            row.ports.clear();
            row.uuid = Uuid::nil();
            let mut p = if *owned {
                Parent::owned(row)
            } else {
                Parent::foreign(row)
            };
            for c in *ports {
                let mut c = (*c).clone();
                c.uuid = Uuid::nil();
                p.children.insert(c.name.clone(), c);
            }
            (s.name.clone(), p)
        })
        .collect()
}

fn run(
    want: &BTreeMap<String, Parent<LogicalSwitch, LogicalSwitchPort>>,
    switches: &[LogicalSwitch],
    ports: &[LogicalSwitchPort],
) -> Plan {
    let mut p = Plan::default();
    plan(
        OWNER,
        want,
        switches,
        ports,
        SWITCH_COLUMNS,
        SWITCH_PORT_COLUMNS,
        &mut p,
    );
    p
}

fn deletes(p: &Plan) -> usize {
    p.units
        .iter()
        .flat_map(|u| &u.ops)
        .filter(|o| matches!(o, Operation::Delete { .. }))
        .count()
}

#[test]
fn matching_state_plans_nothing() {
    let a = lsp("ns_a", "0a:58:0a:00:00:05 10.0.0.5", true);
    let s = ls("subnet-x", &[&a], true);
    let p = run(&desired(&[(&s, &[&a], true)]), &[s.clone()], &[a.clone()]);
    assert!(p.is_empty(), "{:?}", p.units);
}

#[test]
fn changed_port_is_updated_only_in_changed_columns() {
    let a = lsp("ns_a", "0a:58:0a:00:00:05 10.0.0.5", true);
    let s = ls("subnet-x", &[&a], true);
    let mut a2 = a.clone();
    a2.addresses = ["0a:58:0a:00:00:06 10.0.0.6".to_string()].into();
    let p = run(&desired(&[(&s, &[&a2], true)]), &[s.clone()], &[a.clone()]);
    assert_eq!((p.updates, p.inserts, p.deletes), (1, 0, 0));
    match &p.units[0].ops[0] {
        Operation::Update { row, .. } => {
            assert_eq!(row.keys().collect::<Vec<_>>(), vec!["addresses"]);
        }
        other => panic!("expected an update, got {other:?}"),
    }
}

#[test]
fn foreign_rows_are_never_updated_or_deleted() {
    let vm = lsp("vm-1", "fa:16:3e:00:00:01 10.0.0.9", false);
    let platform = ls("platform-ls", &[&vm], false);
    let clash = ls("subnet-x", &[], false);
    // We want our own subnet-x (name taken by a foreign row) and nothing on platform-ls.
    let ours = ls("subnet-x", &[], true);
    let p = run(
        &desired(&[(&ours, &[], true)]),
        &[platform.clone(), clash.clone()],
        &[vm.clone()],
    );
    assert!(p.units.is_empty(), "{:?}", p.units);
    assert_eq!(p.conflicts.len(), 1, "{:?}", p.conflicts);
    assert!(p.conflicts[0].contains("subnet-x"));
}

#[test]
fn our_port_on_a_foreign_switch_is_removed_by_mutation_only() {
    let vm = lsp("vm-1", "fa:16:3e:00:00:01 10.0.0.9", false);
    let pod = lsp("ns_a", "0a:58:0a:00:00:05 10.0.0.5", true);
    let platform = ls("platform-ls", &[&vm, &pod], false);
    let p = run(
        &BTreeMap::new(),
        &[platform.clone()],
        &[vm.clone(), pod.clone()],
    );
    let ops: Vec<&Operation> = p.units.iter().flat_map(|u| &u.ops).collect();
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert!(matches!(ops[0], Operation::Mutate { table, .. } if table == "Logical_Switch"));
    assert!(matches!(ops[1], Operation::Delete { table, .. } if table == "Logical_Switch_Port"));
}

#[test]
fn a_moved_port_is_removed_and_reinserted_in_one_unit() {
    let a = lsp("ns_a", "0a:58:0a:00:00:05 10.0.0.5", true);
    let old = ls("subnet-old", &[&a], true);
    let new = ls("subnet-new", &[], true);
    let p = run(
        &desired(&[(&old, &[], true), (&new, &[&a], true)]),
        &[old.clone(), new.clone()],
        &[a.clone()],
    );
    let unit = p
        .units
        .iter()
        .find(|u| u.ops.iter().any(|o| matches!(o, Operation::Insert { .. })))
        .expect("an insert unit");
    assert!(
        unit.ops
            .iter()
            .any(|o| matches!(o, Operation::Delete { .. })),
        "the old row goes in the same unit (names are unique): {:?}",
        unit.ops
    );
    assert_eq!(
        deletes(&p),
        1,
        "deleted once, not again as stale: {:?}",
        p.units
    );
}

#[test]
fn a_new_switch_with_many_ports_is_chunked_and_moves_every_port() {
    let ports: Vec<LogicalSwitchPort> = (0..1200)
        .map(|i| {
            lsp(
                &format!("ns_p{i}"),
                &format!(
                    "0a:58:0a:00:{:02x}:{:02x} 10.0.{}.{}",
                    i / 256,
                    i % 256,
                    i / 256,
                    i % 256
                ),
                true,
            )
        })
        .collect();
    // The last port currently lives on another switch of ours.
    let elsewhere = ls("subnet-old", &[&ports[1199]], true);
    let big = ls("subnet-big", &[], true);
    let refs: Vec<&LogicalSwitchPort> = ports.iter().collect();
    let p = run(
        &desired(&[(&big, &refs, true), (&elsewhere, &[], true)]),
        &[elsewhere.clone()],
        &[ports[1199].clone()],
    );
    assert_eq!(p.inserts, 1 + 1200);
    assert!(p.units.len() >= 3, "1200 ports in units of at most 500");
    assert!(p.units.iter().all(|u| u.ops.len() <= 503));
    assert_eq!(deletes(&p), 1, "the moved port's old row goes once");
    // uuid-names are unique across the plan, so units can share a transaction.
    let mut names = BTreeSet::new();
    for o in p.units.iter().flat_map(|u| &u.ops) {
        if let Operation::Insert {
            uuid_name: Some(n), ..
        } = o
        {
            assert!(names.insert(n.clone()), "duplicate uuid-name {n}");
        }
    }
}
