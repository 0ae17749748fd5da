//! NetworkPolicy on top of the platform's security groups (external mode): a pod in a
//! platform group is reached only by what its group's rules **and** its policies allow.
//!
//! OVN 23.03 judges every ACL of a pipeline stage in one priority list (no tiers, no
//! `pass`): the platform's rules and our policy ACLs would each let through what the other
//! refuses. So for the pods that are both isolated by a policy and in a platform group, the
//! controller writes, above every platform priority, a mirror of the platform's rules of
//! the same stage, each allow narrowed by the policies' rules:
//!
//! | priority | ACL | on |
//! |---|---|---|
//! | [`PRIORITY_NODE`] | the nodes' management addresses are let in (kubelet probes) | every pod of ours in a platform group |
//! | [`PRIORITY_BASE`] + 1 + rank | each platform rule of the stage in the platform's order: an allow as `(rule) && (policy rule)` for every policy rule, a drop as `(rule) && isolated` | isolated pods in a group |
//! | [`PRIORITY_BASE`] + 1 | each policy rule alone (what no platform rule decides, the platform lets through) | idem |
//! | [`PRIORITY_BASE`] | drop | idem |
//!
//! The highest matching mirror is the platform's own decision, kept only where a policy
//! rule agrees. A stage the platform has no rule in for those pods (typically egress: our
//! egress ACLs run after the load balancer, the platform's before) needs no mirror: each
//! stage decides on its own and a packet must pass both. The platform's rows are only
//! read; a rule it adds or removes changes the mirrors in the next pass (the controller
//! wakes on every NB change).

use std::collections::{BTreeMap, BTreeSet};

use ovsdb::nb::{Acl, PortGroup};

use super::{
    DesiredPortGroup, Direction, KIND_DENY, KIND_POLICY, PolicyInput, Problem, acl, node_sources,
    object_of, port_group_name,
};
use crate::names::{KIND, owned};
use api::external_ids::nb::{PLATFORM_ACL, PLATFORM_GROUP};

/// The management addresses' allow: above everything (ACL priorities end at 32767).
pub const PRIORITY_NODE: i64 = 32767;
/// The catch-all drop of isolated pods in platform groups; mirrors sit above it.
pub const PRIORITY_BASE: i64 = 30000;
/// Distinct platform priorities a stage can mirror (the band up to [`PRIORITY_NODE`]).
pub const MAX_RANKS: usize = (PRIORITY_NODE - PRIORITY_BASE - 2) as usize;
/// The key of the group of every pod of ours in a platform group.
pub const MEMBERS_KEY: &str = "/platform-sg/members";

/// One of the platform's security groups as the translation needs it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlatformGroup {
    pub name: String,
    /// Our switch ports in it (the desired membership).
    pub members: BTreeSet<String>,
    /// Its ACLs as the NB has them.
    pub acls: Vec<Acl>,
    /// The NB could not be read: its pods' mirrors fail closed (only the nodes get in).
    pub unreadable: bool,
}

/// The key of the isolated pods' group for `dir`.
pub fn deny_key(dir: Direction) -> String {
    format!("/platform-sg/deny/{}", dir.word())
}

/// Whether a platform ACL is judged in the stage of our ACLs of `dir`: ingress `to-lport`;
/// egress `from-lport` after the load balancer (where ours are).
fn same_stage(a: &Acl, dir: Direction) -> bool {
    match dir {
        Direction::Ingress => a.direction == "to-lport",
        Direction::Egress => {
            a.direction == "from-lport"
                && a.options.get("apply-after-lb").map(String::as_str) == Some("true")
        }
    }
}

fn is_allow(action: &str) -> bool {
    action.starts_with("allow")
}

/// Adds the groups and ACLs of the module docs to `out`. `isolated`: per direction word,
/// the ports a policy isolates; `out` already holds the policies' groups.
pub(super) fn add(
    input: &PolicyInput<'_>,
    isolated: &BTreeMap<&'static str, BTreeSet<String>>,
    out: &mut super::Translation,
) {
    let members: BTreeSet<String> = input
        .platform_groups
        .iter()
        .flat_map(|g| g.members.iter().cloned())
        .collect();
    if members.is_empty() {
        return;
    }
    let cid = input.cluster_id;
    let name = port_group_name(cid, MEMBERS_KEY);
    let mut acls = BTreeMap::new();
    if let Some(src) = node_sources(&input.node_cidrs) {
        acls.insert(
            "node".to_string(),
            acl(
                cid,
                MEMBERS_KEY,
                "node",
                Direction::Ingress,
                PRIORITY_NODE,
                format!("outport == @{name} && ({src})"),
                "allow-related",
                "platform-sg_node",
            ),
        );
    }
    out.nb.port_groups.insert(
        name.clone(),
        DesiredPortGroup {
            row: PortGroup {
                name,
                external_ids: owned(cid, KIND_DENY, MEMBERS_KEY),
                ..Default::default()
            },
            ports: members.clone(),
            acls,
        },
    );
    for dir in [Direction::Ingress, Direction::Egress] {
        let ports: BTreeSet<String> = isolated
            .get(dir.word())
            .into_iter()
            .flatten()
            .filter(|p| members.contains(*p))
            .cloned()
            .collect();
        if ports.is_empty() {
            continue;
        }
        let group = mirror_group(input, dir, ports, &out.nb.port_groups, &mut out.problems);
        out.nb.port_groups.insert(group.row.name.clone(), group);
    }
}

/// The allow ACLs of `dir` of the policies selecting any of `ports`: (policy key/rule,
/// match). Another policy's rules name its own group, which holds none of these pods.
fn policy_rules(
    groups: &BTreeMap<String, DesiredPortGroup>,
    dir: Direction,
    ports: &BTreeSet<String>,
) -> Vec<(String, String)> {
    groups
        .values()
        .filter(|g| g.row.external_ids.get(KIND).map(String::as_str) == Some(KIND_POLICY))
        .filter(|g| !g.ports.is_disjoint(ports))
        .flat_map(|g| {
            let policy = object_of(&g.row.external_ids)
                .unwrap_or_default()
                .to_string();
            g.acls
                .iter()
                .filter(move |(_, a)| a.direction == dir.ovn() && is_allow(&a.action))
                .map(move |(k, a)| (format!("{policy}/{k}"), a.match_.clone()))
        })
        .collect()
}

/// The group of the isolated pods of `dir` in platform groups, with the mirrors.
fn mirror_group(
    input: &PolicyInput<'_>,
    dir: Direction,
    ports: BTreeSet<String>,
    groups: &BTreeMap<String, DesiredPortGroup>,
    problems: &mut Vec<Problem>,
) -> DesiredPortGroup {
    let cid = input.cluster_id;
    let key = deny_key(dir);
    let name = port_group_name(cid, &key);
    let mut acls = BTreeMap::new();
    let deny = |acls: &mut BTreeMap<String, Acl>| {
        acls.insert(
            "deny".to_string(),
            acl(
                cid,
                &key,
                "deny",
                dir,
                PRIORITY_BASE,
                format!("{} == @{name} && ip", dir.port_field()),
                "drop",
                &format!("platform-sg_default-deny-{}", dir.word()),
            ),
        );
    };
    deny(&mut acls);
    // the platform's rules of this stage on these pods' groups, each once
    let mut platform: BTreeMap<String, (&str, &Acl)> = BTreeMap::new();
    for g in input
        .platform_groups
        .iter()
        .filter(|g| !g.members.is_disjoint(&ports))
    {
        for a in g.acls.iter().filter(|a| same_stage(a, dir)) {
            platform
                .entry(a.uuid.to_string())
                .or_insert((g.name.as_str(), a));
        }
    }
    let ranks: BTreeSet<i64> = platform.values().map(|(_, a)| a.priority).collect();
    let unreadable = input
        .platform_groups
        .iter()
        .any(|g| g.unreadable && !g.members.is_disjoint(&ports));
    if ranks.len() > MAX_RANKS || unreadable {
        let why = if unreadable {
            "their rules could not be read".to_string()
        } else {
            format!(
                "{} distinct ACL priorities, more than the {MAX_RANKS} the mirror band holds",
                ranks.len()
            )
        };
        problems.push(Problem {
            policy: format!("platform security groups ({})", dir.word()),
            message: format!(
                "{why}: the isolated pods in those groups get no {} traffic but their nodes'",
                dir.word()
            ),
        });
        return DesiredPortGroup {
            row: group_row(cid, &key, name),
            ports,
            acls,
        };
    }
    let rank = |p: i64| ranks.range(..p).count() as i64 + 1;
    let rules = policy_rules(groups, dir, &ports);
    for (rule, m) in &rules {
        acls.insert(
            format!("rule/{rule}"),
            acl(
                cid,
                &key,
                &format!("rule/{rule}"),
                dir,
                PRIORITY_BASE + 1,
                m.clone(),
                "allow-related",
                &format!("platform-sg_{rule}"),
            ),
        );
    }
    for (uuid, (group, a)) in &platform {
        let priority = PRIORITY_BASE + 1 + rank(a.priority);
        let mut mirror = |k: String, m: String, name: String| {
            let mut row = acl(cid, &key, &k, dir, priority, m, &a.action, &name);
            row.external_ids
                .insert(PLATFORM_GROUP.into(), (*group).to_string());
            row.external_ids.insert(PLATFORM_ACL.into(), uuid.clone());
            acls.insert(k, row);
        };
        let label = a.name.clone().unwrap_or_else(|| format!("{}", a.priority));
        if is_allow(&a.action) {
            for (rule, m) in &rules {
                mirror(
                    format!("sg/{uuid}/{rule}"),
                    format!("({}) && ({m})", a.match_),
                    format!("sg_{group}_{label}+{rule}"),
                );
            }
        } else {
            mirror(
                format!("sg/{uuid}"),
                format!("({}) && {} == @{name}", a.match_, dir.port_field()),
                format!("sg_{group}_{label}"),
            );
        }
    }
    DesiredPortGroup {
        row: group_row(cid, &key, name),
        ports,
        acls,
    }
}

fn group_row(cid: &str, key: &str, name: String) -> PortGroup {
    PortGroup {
        name,
        external_ids: owned(cid, KIND_DENY, key),
        ..Default::default()
    }
}
