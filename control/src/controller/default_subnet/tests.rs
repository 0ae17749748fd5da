//! The default Subnet's rules: the object created, yielding to a user's default (in
//! validation and in serving), the flag mismatch, the conditions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::controller::context::validation_context;
use crate::source::Event;
use crate::translate::ClusterConfig;
use crate::validate::{SubnetProblem, validate};

fn t(secs: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
}

fn flag() -> DefaultSubnet {
    DefaultSubnet {
        name: "cluster-default".into(),
        cidrs: vec!["10.244.0.0/16".parse().unwrap()],
    }
}

fn managed(created: i64) -> Subnet {
    let mut s = object(&flag());
    s.metadata.creation_timestamp = Some(t(created));
    s
}

fn user(name: &str, cidr: &str, default: bool, created: Option<i64>) -> Subnet {
    let mut s = Subnet::new(
        name,
        SubnetSpec {
            cidr: cidr.into(),
            default,
            ..SubnetSpec::default()
        },
    );
    s.metadata.creation_timestamp = created.map(t);
    s
}

fn state(subnets: Vec<Subnet>) -> ClusterState {
    let mut st = ClusterState::default();
    for s in subnets {
        st.apply(Event::Subnet(Box::new(s)));
    }
    st
}

/// Validates `name` as the controller does (effective spec, context with `yields`).
fn check(st: &ClusterState, name: &str) -> Result<crate::model::ValidSubnet, Vec<SubnetProblem>> {
    let cfg = ClusterConfig::default();
    let ctx = validation_context(&cfg, st, name, None);
    let spec = effective_spec(st, name).unwrap();
    validate(name, &spec, &ctx)
}

#[test]
fn the_created_object_is_labelled_and_default() {
    let s = object(&flag());
    assert_eq!(s.metadata.name.as_deref(), Some("cluster-default"));
    assert_eq!(s.spec.cidr, "10.244.0.0/16");
    assert!(s.spec.default);
    assert!(is_managed(&s));
    assert!(!is_managed(&user(
        "cluster-default",
        "10.244.0.0/16",
        true,
        None
    )));
    let dual = DefaultSubnet {
        name: "x".into(),
        cidrs: vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:10:244::/56".parse().unwrap(),
        ],
    };
    assert_eq!(object(&dual).spec.cidr, "10.244.0.0/16,fd00:10:244::/56");
}

#[test]
fn alone_the_managed_subnet_is_the_default() {
    let st = state(vec![
        managed(1),
        user("blue", "10.16.0.0/16", false, Some(0)),
    ]);
    assert_eq!(user_default(&st), None);
    let v = check(&st, "cluster-default").unwrap();
    assert!(v.default);
    let c = conditions(&st, Some(&flag()), &st.subnets["cluster-default"]);
    assert_eq!(c[0].type_, CONDITION_CLUSTER_DEFAULT);
    assert_eq!(
        (c[0].status.as_str(), c[0].reason.as_str()),
        ("True", REASON_SERVING_DEFAULT)
    );
    assert_eq!(
        (c[1].status.as_str(), c[1].reason.as_str()),
        ("True", REASON_CIDR_MATCHES)
    );
}

#[test]
fn a_user_default_created_later_wins_and_the_managed_one_yields() {
    // the managed Subnet is older, yet the user's default does not fail because of it
    let st = state(vec![
        managed(1),
        user("ovn-default", "10.16.0.0/16", true, Some(50)),
    ]);
    let theirs = check(&st, "ovn-default").unwrap();
    assert!(theirs.default);
    assert_eq!(user_default(&st), Some("ovn-default"));
    // ours stays valid (pods holding addresses keep them) but is not the default any more
    let ours = check(&st, "cluster-default").unwrap();
    assert!(!ours.default);
    let c = conditions(&st, Some(&flag()), &st.subnets["cluster-default"]);
    assert_eq!(
        (c[0].status.as_str(), c[0].reason.as_str()),
        ("False", REASON_YIELDS)
    );
    assert!(
        c[0].message.contains("yields to Subnet ovn-default"),
        "{}",
        c[0].message
    );
}

#[test]
fn yielding_does_not_depend_on_names_or_unknown_timestamps() {
    // a user Subnet with no timestamp (counts as newest among users) whose name sorts after
    // ours still wins
    let st = state(vec![managed(1), user("zzz", "10.16.0.0/16", true, None)]);
    assert!(check(&st, "zzz").unwrap().default);
    assert!(!check(&st, "cluster-default").unwrap().default);
}

#[test]
fn an_overlapping_user_subnet_wins_and_ours_reports_the_overlap() {
    let st = state(vec![
        managed(1),
        user("red", "10.244.8.0/24", false, Some(100)),
    ]);
    assert!(check(&st, "red").is_ok());
    let problems = check(&st, "cluster-default").unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, SubnetProblem::OverlapsSubnet { other, .. } if other == "red")),
        "{problems:?}"
    );
}

#[test]
fn two_user_defaults_keep_the_old_rule_and_ours_yields_to_the_oldest() {
    let st = state(vec![
        managed(0),
        user("a", "10.16.0.0/16", true, Some(20)),
        user("b", "10.17.0.0/16", true, Some(10)),
    ]);
    assert!(check(&st, "b").is_ok());
    assert!(matches!(
        check(&st, "a").unwrap_err().as_slice(),
        [SubnetProblem::DefaultTaken(other)] if other == "b"
    ));
    assert_eq!(user_default(&st), Some("b"));
}

#[test]
fn a_different_cidr_is_reported_not_changed() {
    let mut ours = managed(1);
    ours.spec.cidr = "10.10.0.0/16".into();
    let st = state(vec![ours]);
    let s = &st.subnets["cluster-default"];
    let why = mismatch(&flag(), s).unwrap();
    assert!(why.contains("--cluster-cidr is 10.244.0.0/16"), "{why}");
    assert!(why.contains("\"10.10.0.0/16\""), "{why}");
    let c = conditions(&st, Some(&flag()), s);
    assert_eq!(
        (c[1].status.as_str(), c[1].reason.as_str()),
        ("False", REASON_CIDR_MISMATCH)
    );
    // the same network written differently is no mismatch
    let mut same = managed(1);
    same.spec.cidr = " 10.244.0.0/16".into();
    assert_eq!(mismatch(&flag(), &same), None);
}

#[test]
fn a_user_subnet_with_our_name_is_an_ordinary_subnet() {
    let theirs = user("cluster-default", "10.244.0.0/16", true, Some(5));
    let st = state(vec![theirs, user("blue", "10.16.0.0/16", true, Some(9))]);
    // no yielding: the older user default (theirs) keeps the default, blue fails
    assert!(check(&st, "cluster-default").unwrap().default);
    assert!(check(&st, "blue").is_err());
}

#[test]
fn without_the_flag_a_managed_subnet_still_yields_but_reports_no_flag() {
    let st = state(vec![
        managed(1),
        user("ovn-default", "10.16.0.0/16", true, Some(2)),
    ]);
    let c = conditions(&st, None, &st.subnets["cluster-default"]);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].reason, REASON_YIELDS);
}
