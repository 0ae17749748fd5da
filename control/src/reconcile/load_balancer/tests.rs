//! Pure tests of the load balancer diff: typed rows in, planned operations out.

use std::collections::{BTreeMap, BTreeSet};

use ovsdb::nb::{LoadBalancer, LoadBalancerGroup, LogicalSwitch};
use ovsdb::{Operation, Uuid};

use super::plan;
use crate::desired::DesiredLbs;
use crate::names;
use crate::reconcile::Plan;

const OWNER: &str = "zstack-ovn";

fn lb(name: &str, backends: &str, ours: bool) -> LoadBalancer {
    LoadBalancer {
        uuid: Uuid::new_v4(),
        name: name.into(),
        protocol: Some("tcp".into()),
        vips: BTreeMap::from([("10.96.0.10:80".to_string(), backends.to_string())]),
        external_ids: if ours {
            names::owned(OWNER, "service", name)
        } else {
            BTreeMap::new()
        },
        ..Default::default()
    }
}

fn switch(name: &str, groups: &[Uuid]) -> LogicalSwitch {
    LogicalSwitch {
        uuid: Uuid::new_v4(),
        name: name.into(),
        load_balancer_group: groups.iter().copied().collect(),
        external_ids: names::owned(OWNER, "subnet", name),
        ..Default::default()
    }
}

fn desired(rows: &[LoadBalancer], switches: &[&str]) -> DesiredLbs {
    DesiredLbs {
        rows: rows
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.uuid = Uuid::nil();
                (r.name.clone(), r)
            })
            .collect(),
        switches: switches.iter().map(|s| s.to_string()).collect(),
        platform_switches: Default::default(),
        template_vars: Default::default(),
    }
}

fn kinds(p: &Plan) -> Vec<String> {
    p.units
        .iter()
        .flat_map(|u| u.ops.iter().map(Operation::describe))
        .collect()
}

#[test]
fn nothing_without_services() {
    let mut p = Plan::default();
    plan(
        OWNER,
        &desired(&[], &["join"]),
        &[],
        &[],
        &[switch("join", &[])],
        &mut p,
    );
    assert!(p.is_empty(), "no Service, no group: {:?}", kinds(&p));
}

#[test]
fn first_service_creates_group_attaches_switches_and_inserts_rows() {
    let want = lb("Service_d/web_TCP", "10.16.0.5:8080", true);
    let mut p = Plan::default();
    // `subnet-new` is being created earlier in the same plan: found by name + owner
    plan(
        OWNER,
        &desired(&[want], &["join", "subnet-new"]),
        &[],
        &[],
        &[switch("join", &[])],
        &mut p,
    );
    assert_eq!(
        kinds(&p),
        [
            "insert into Load_Balancer_Group",
            "mutate Logical_Switch",
            "mutate Logical_Switch",
            "insert into Load_Balancer",
            "mutate Load_Balancer_Group",
        ]
    );
    assert_eq!((p.inserts, p.updates, p.deletes), (2, 0, 0));
}

#[test]
fn steady_state_plans_nothing_and_changes_are_one_row() {
    let web = lb("Service_d/web_TCP", "10.16.0.5:8080", true);
    let db = lb("Service_d/db_TCP", "10.16.0.6:5432", true);
    let group = LoadBalancerGroup {
        uuid: Uuid::new_v4(),
        name: names::lb_group(OWNER),
        load_balancer: BTreeSet::from([web.uuid, db.uuid]),
    };
    let sw = switch("join", &[group.uuid]);
    let actual = [web.clone(), db.clone()];
    let mut p = Plan::default();
    plan(
        OWNER,
        &desired(&actual, &["join"]),
        &actual,
        std::slice::from_ref(&group),
        std::slice::from_ref(&sw),
        &mut p,
    );
    assert!(p.is_empty(), "{:?}", kinds(&p));

    // an endpoint change of web: one update of that row, nothing else
    let mut web2 = web.clone();
    web2.vips.insert(
        "10.96.0.10:80".into(),
        "10.16.0.5:8080,10.16.0.7:8080".into(),
    );
    let mut p = Plan::default();
    plan(
        OWNER,
        &desired(&[web2, db.clone()], &["join"]),
        &actual,
        std::slice::from_ref(&group),
        std::slice::from_ref(&sw),
        &mut p,
    );
    assert_eq!(kinds(&p), ["update Load_Balancer"]);
    assert_eq!((p.inserts, p.updates, p.deletes), (0, 1, 0));
}

#[test]
fn stale_rows_go_foreign_rows_stay_and_new_switches_get_the_group() {
    let web = lb("Service_d/web_TCP", "10.16.0.5:8080", true);
    let stale = lb("Service_d/gone_TCP", "", true);
    let foreign = lb("Service_d/web_TCP", "192.0.2.1:80", false);
    let group = LoadBalancerGroup {
        uuid: Uuid::new_v4(),
        name: names::lb_group(OWNER),
        load_balancer: BTreeSet::from([web.uuid, stale.uuid]),
    };
    let join = switch("join", &[group.uuid]);
    let fresh = switch("subnet-b", &[]);
    let mut p = Plan::default();
    plan(
        OWNER,
        &desired(std::slice::from_ref(&web), &["join", "subnet-b"]),
        &[web.clone(), stale.clone(), foreign.clone()],
        std::slice::from_ref(&group),
        &[join, fresh],
        &mut p,
    );
    assert_eq!(
        kinds(&p),
        [
            "mutate Logical_Switch",
            "mutate Load_Balancer_Group",
            "delete from Load_Balancer",
        ]
    );
    let deleted = format!("{:?}", p.units.last().map(|u| &u.ops));
    assert!(deleted.contains(&stale.uuid.to_string()), "{deleted}");
    assert!(
        !deleted.contains(&foreign.uuid.to_string()),
        "foreign row untouched"
    );
}

/// A platform's switch (external mode): no owner mark, maybe a group of the platform's.
fn platform_switch(name: &str, groups: &[Uuid]) -> LogicalSwitch {
    LogicalSwitch {
        external_ids: BTreeMap::from([("zstack.io/platform".to_string(), "zstack".to_string())]),
        ..switch(name, groups)
    }
}

/// The operations' JSON, to see which uuid a mutate names.
fn ops_json(p: &Plan) -> String {
    format!("{:?}", p.units.iter().map(|u| &u.ops).collect::<Vec<_>>())
}

#[test]
fn platform_switch_gets_only_our_group_by_uuid_and_loses_only_it() {
    let web = lb("Service_d/web_TCP", "10.99.0.5:8080", true);
    let group = LoadBalancerGroup {
        uuid: Uuid::new_v4(),
        name: names::lb_group(OWNER),
        load_balancer: BTreeSet::from([web.uuid]),
    };
    let platform_group = Uuid::new_v4();
    let named = platform_switch("platform-ls", &[platform_group]);
    let other = platform_switch("platform-other", &[platform_group]);
    let mut want = desired(std::slice::from_ref(&web), &[]);
    want.platform_switches.insert("platform-ls".into());

    // attach: one mutate of the named platform switch, by its uuid, inserting our group
    let mut p = Plan::default();
    plan(
        OWNER,
        &want,
        std::slice::from_ref(&web),
        std::slice::from_ref(&group),
        &[named.clone(), other.clone()],
        &mut p,
    );
    assert_eq!(kinds(&p), ["mutate Logical_Switch"]);
    let ops = ops_json(&p);
    assert!(ops.contains(&named.uuid.to_string()), "{ops}");
    assert!(ops.contains(&group.uuid.to_string()), "{ops}");
    assert!(!ops.contains(&other.uuid.to_string()), "{ops}");
    assert!(!ops.contains(&platform_group.to_string()), "{ops}");

    // attached: nothing to do
    let attached = platform_switch("platform-ls", &[platform_group, group.uuid]);
    let mut p = Plan::default();
    plan(
        OWNER,
        &want,
        std::slice::from_ref(&web),
        std::slice::from_ref(&group),
        &[attached.clone(), other.clone()],
        &mut p,
    );
    assert!(p.is_empty(), "{:?}", kinds(&p));

    // no Subnet names it any more: delete exactly our uuid from its column
    let mut p = Plan::default();
    plan(
        OWNER,
        &desired(std::slice::from_ref(&web), &[]),
        std::slice::from_ref(&web),
        std::slice::from_ref(&group),
        &[attached.clone(), other],
        &mut p,
    );
    assert_eq!(kinds(&p), ["mutate Logical_Switch"]);
    let ops = ops_json(&p);
    assert!(ops.contains("Delete"), "{ops}");
    assert!(ops.contains(&attached.uuid.to_string()), "{ops}");
    assert!(ops.contains(&group.uuid.to_string()), "{ops}");
    assert!(!ops.contains(&platform_group.to_string()), "{ops}");
}

#[test]
fn first_service_attaches_the_new_group_to_platform_switches() {
    let web = lb("Service_d/web_TCP", "10.99.0.5:8080", true);
    let named = platform_switch("platform-ls", &[]);
    let mut want = desired(std::slice::from_ref(&web), &[]);
    want.platform_switches.insert("platform-ls".into());
    // a platform switch that does not exist (yet) is not written at all
    want.platform_switches.insert("platform-missing".into());
    let mut p = Plan::default();
    plan(OWNER, &want, &[], &[], std::slice::from_ref(&named), &mut p);
    assert_eq!(
        kinds(&p),
        [
            "insert into Load_Balancer_Group",
            "mutate Logical_Switch",
            "insert into Load_Balancer",
            "mutate Load_Balancer_Group",
        ]
    );
    assert!(ops_json(&p).contains(&named.uuid.to_string()));
}
