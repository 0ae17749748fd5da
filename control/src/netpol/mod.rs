//! NetworkPolicy (`networking.k8s.io/v1`) → OVN Port_Groups, Address_Sets and stateful
//! ACLs, in pure functions (the design of ovn-kubernetes).
//!
//! | row | what |
//! |---|---|
//! | Port_Group per policy | the pods its `podSelector` selects; carries the policy's ACLs |
//! | Port_Group `deny ingress` / `deny egress` | every pod selected by a policy of that direction: one `drop` ACL each, priority [`PRIORITY_DEFAULT_DENY`] |
//! | Address_Set per distinct peer (`podSelector` / `namespaceSelector` / both), per family | the peer pods' addresses; identical peers of different policies share one |
//! | ACL per rule | `allow-related` at [`PRIORITY_ALLOW`]: `outport == @pg` (ingress, `to-lport`) or `inport == @pg` (egress, `from-lport`, applied after the load balancer so a Service's traffic is judged on its backend) |
//! | ACL per policy | traffic from the nodes' management ports (kubelet probes) is allowed; as an `allow-related` ACL it also makes the switch stateful, so replies of allowed connections return |
//!
//! With no policy nothing is written and traffic is allowed. Rows are keyed so that a pod
//! or namespace label change rewrites only the sets and groups whose membership changes
//! (the reconciler mutates sets in place).
//!
//! Bad input (an unknown protocol, a named port that matches no container port, an ipBlock
//! that is not a CIDR, an `except` outside its `cidr`) never widens what a policy allows:
//! the entry matches nothing (an `except` outside the `cidr` excludes nothing, as in
//! Kubernetes), and the problem is reported for events and logs.

mod ip_block;
pub mod platform_sg;
#[cfg(test)]
mod platform_sg_tests;
pub mod report;
mod rules;
pub mod selector;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use ovsdb::nb::{Acl, AddressSet, PortGroup};

use crate::model::{NamespaceInfo, PodAddresses, PodInfo};
use crate::names::{OBJECT, owned};

/// Priority of the ACLs of policy rules (the band 1000–2000 is the policies').
pub const PRIORITY_ALLOW: i64 = 1001;
/// Priority of the node management port allow (same band as the rules).
pub const PRIORITY_NODE_ALLOW: i64 = 1001;
/// Priority of the default deny of selected pods (below the allow band).
pub const PRIORITY_DEFAULT_DENY: i64 = 900;
/// `zstack.io/kind` of a policy's port group.
pub use api::external_ids::kind::NETPOL as KIND_POLICY;
/// `zstack.io/kind` of an ACL.
pub use api::external_ids::kind::NETPOL_ACL as KIND_ACL;
/// `zstack.io/kind` of the default-deny port groups.
pub use api::external_ids::kind::NETPOL_DENY as KIND_DENY;
/// `zstack.io/kind` of a peer address set.
pub use api::external_ids::kind::NETPOL_PEER as KIND_PEER;
/// `external_ids` key naming an ACL within its port group.
pub use api::external_ids::nb::ACL as ACL_KEY;

/// A port group with its member ports (by Logical_Switch_Port name) and ACLs (by
/// [`ACL_KEY`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredPortGroup {
    /// `name` and `external_ids` (ports and acls are resolved by the reconciler).
    pub row: PortGroup,
    pub ports: BTreeSet<String>,
    pub acls: BTreeMap<String, Acl>,
}

/// The NetworkPolicy part of the desired NB.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyNb {
    pub port_groups: BTreeMap<String, DesiredPortGroup>,
    pub address_sets: BTreeMap<String, AddressSet>,
}

impl PolicyNb {
    /// Rows: port groups, address sets and ACLs.
    pub fn len(&self) -> usize {
        self.address_sets.len()
            + self
                .port_groups
                .values()
                .map(|p| 1 + p.acls.len())
                .sum::<usize>()
    }
    pub fn is_empty(&self) -> bool {
        self.port_groups.is_empty() && self.address_sets.is_empty()
    }
}

/// Something wrong with a policy (reported as an event and logged; never widens).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// `namespace/name` of the policy.
    pub policy: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NetworkPolicy {}: {}", self.policy, self.message)
    }
}

/// What the translator reads.
#[derive(Clone, Debug)]
pub struct PolicyInput<'a> {
    pub cluster_id: &'a str,
    pub policies: Vec<&'a NetworkPolicy>,
    /// By name (a namespace without an object has no labels but its name label).
    pub namespaces: &'a BTreeMap<String, NamespaceInfo>,
    /// Pods holding addresses (those with a logical switch port).
    pub pods: Vec<(&'a PodInfo, &'a PodAddresses)>,
    /// Where node management ports send from (the join CIDR): always allowed in.
    pub node_cidrs: Vec<IpNet>,
    /// External mode: the platform's security groups our pods are in
    /// ([`platform_sg`]); empty otherwise.
    pub platform_groups: Vec<platform_sg::PlatformGroup>,
}

/// The translation: rows and problems.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Translation {
    pub nb: PolicyNb,
    pub problems: Vec<Problem>,
}

/// An address family, as OVN match fields name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
    /// `ip4` / `ip6`.
    pub fn field(self) -> &'static str {
        match self {
            Family::V4 => "ip4",
            Family::V6 => "ip6",
        }
    }
}

/// Ingress (`to-lport`, source addresses) or egress (`from-lport`, destinations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    fn ovn(self) -> &'static str {
        match self {
            Direction::Ingress => "to-lport",
            Direction::Egress => "from-lport",
        }
    }
    /// `outport` / `inport`: the port of the selected pod.
    fn port_field(self) -> &'static str {
        match self {
            Direction::Ingress => "outport",
            Direction::Egress => "inport",
        }
    }
    /// `src` / `dst`: the peer's address field.
    fn peer_field(self) -> &'static str {
        match self {
            Direction::Ingress => "src",
            Direction::Egress => "dst",
        }
    }
    fn word(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
}

/// The port group name of `key` (a policy `ns/name`, or `deny/ingress`...): an OVN
/// identifier (`@name` in matches), unique per cluster ([`api::names::policy_port_group`]).
pub fn port_group_name(cluster_id: &str, key: &str) -> String {
    // a hash collision cannot be produced on demand: tests force one (tests::collide)
    #[cfg(test)]
    if let Some(name) = tests::forced_name(key) {
        return name;
    }
    api::names::policy_port_group(cluster_id, key)
}

/// The address set name of peer `key` for `family` (`$name` in matches,
/// [`api::names::policy_address_set`]).
pub fn address_set_name(cluster_id: &str, key: &str, family: Family) -> String {
    #[cfg(test)]
    if let Some(name) = tests::forced_name(key) {
        return format!("{name}_{}", family.field());
    }
    api::names::policy_address_set(cluster_id, key, family == Family::V4)
}

/// The key of the default-deny port group of `dir`: `/deny/ingress`, which no policy's
/// `namespace/name` can spell (a namespace is never empty, a name holds no `/`). It was
/// `deny/ingress` until 0.2: the policy `ingress` of a namespace named `deny` shared the
/// cluster's deny group (an upgrade renames the two groups: the new ones are written
/// before the old lose their ACLs, so no pod is unisolated meanwhile).
pub fn deny_key(dir: Direction) -> String {
    format!("/deny/{}", dir.word())
}

/// The OVN names given out in one translation, each with the key it was given to: names
/// are 64-bit hashes of keys, so a second key on a name is a collision, refused (the first
/// holder keeps it) rather than letting two objects share one row.
#[derive(Default)]
pub(crate) struct Claims(BTreeMap<String, String>);

/// A name another key already holds ([`Claims::claim`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the name is already {holder}'s")]
pub(crate) struct NameTaken {
    /// The key holding the name.
    pub holder: String,
}

impl Claims {
    /// Gives `name` to `key`; [`NameTaken`] when another key holds it.
    pub(crate) fn claim(&mut self, name: &str, key: &str) -> Result<(), NameTaken> {
        match self.0.get(name) {
            Some(holder) if holder != key => Err(NameTaken {
                holder: holder.clone(),
            }),
            Some(_) => Ok(()),
            None => {
                self.0.insert(name.to_string(), key.to_string());
                Ok(())
            }
        }
    }
}

/// The port group of policy `ns/name`.
pub fn policy_port_group(cluster_id: &str, namespace: &str, name: &str) -> String {
    port_group_name(cluster_id, &format!("{namespace}/{name}"))
}

/// Translates every policy.
pub fn translate(input: &PolicyInput<'_>) -> Translation {
    let mut t = Translation::default();
    if input.policies.is_empty() {
        platform_sg::add(input, &BTreeMap::new(), &mut t);
        return t;
    }
    let families: BTreeSet<Family> = input
        .pods
        .iter()
        .flat_map(|(_, a)| a.ips.iter().map(|n| Family::of(&n.addr())))
        .chain(input.node_cidrs.iter().map(|n| Family::of(&n.addr())))
        .collect();
    let mut ctx = rules::Ctx::new(input, families);
    let mut deny: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    let mut groups = Claims::default();
    for dir in [Direction::Ingress, Direction::Egress] {
        let key = deny_key(dir);
        // the first claims of an empty set: they cannot fail
        let _ = groups.claim(&port_group_name(input.cluster_id, &key), &key);
    }
    // oldest first: on a name collision the policy that was there first keeps its name
    let mut policies = input.policies.clone();
    policies.sort_by_key(|p| {
        (
            p.metadata.creation_timestamp.clone(),
            p.metadata.namespace.clone(),
            p.metadata.name.clone(),
        )
    });
    for p in policies {
        let Some(pol) = rules::policy(&mut ctx, p, &mut t.problems) else {
            continue;
        };
        // its pods are isolated even when its rules are refused below: fail closed
        for dir in &pol.directions {
            deny.entry(dir.word())
                .or_default()
                .extend(pol.group.ports.iter().cloned());
        }
        let key = object_of(&pol.group.row.external_ids)
            .unwrap_or_default()
            .to_string();
        if let Err(NameTaken { holder }) = groups.claim(&pol.group.row.name, &key) {
            t.problems.push(Problem {
                message: format!(
                    "its OVN port group name {} is already {holder}'s (a hash collision): \
                     its rules are not applied and its pods stay isolated; rename the policy",
                    pol.group.row.name
                ),
                policy: key,
            });
            continue;
        }
        t.nb.port_groups
            .insert(pol.group.row.name.clone(), pol.group);
    }
    platform_sg::add(input, &deny, &mut t);
    for dir in [Direction::Ingress, Direction::Egress] {
        let Some(ports) = deny.remove(dir.word()) else {
            continue;
        };
        let key = deny_key(dir);
        let name = port_group_name(input.cluster_id, &key);
        let m = format!("{} == @{name} && ip", dir.port_field());
        let acl = acl(
            input.cluster_id,
            &key,
            "deny",
            dir,
            PRIORITY_DEFAULT_DENY,
            m,
            "drop",
            &format!("default-deny-{}", dir.word()),
        );
        t.nb.port_groups.insert(
            name.clone(),
            DesiredPortGroup {
                row: PortGroup {
                    name,
                    external_ids: owned(input.cluster_id, KIND_DENY, &key),
                    ..Default::default()
                },
                ports,
                acls: BTreeMap::from([("deny".to_string(), acl)]),
            },
        );
    }
    t.nb.address_sets = ctx.into_address_sets();
    t.problems.sort();
    t.problems.dedup();
    t
}

/// `ip4.src == <cidr> || ...` of the nodes' management addresses; `None` without any.
fn node_sources(node_cidrs: &[IpNet]) -> Option<String> {
    (!node_cidrs.is_empty()).then(|| {
        node_cidrs
            .iter()
            .map(|c| format!("{}.src == {}", Family::of(&c.addr()).field(), c.trunc()))
            .collect::<Vec<_>>()
            .join(" || ")
    })
}

/// An ACL row of ours.
#[allow(clippy::too_many_arguments)]
fn acl(
    cluster_id: &str,
    object: &str,
    key: &str,
    dir: Direction,
    priority: i64,
    match_: String,
    action: &str,
    name: &str,
) -> Acl {
    let mut external_ids = owned(cluster_id, KIND_ACL, object);
    external_ids.insert(ACL_KEY.into(), key.into());
    let mut options = BTreeMap::new();
    if dir == Direction::Egress {
        // judge a Service's traffic on its backend, not on the virtual IP
        options.insert("apply-after-lb".to_string(), "true".to_string());
    }
    Acl {
        action: action.into(),
        direction: dir.ovn().into(),
        external_ids,
        match_,
        name: Some(truncate(name, 63)),
        options,
        priority,
        ..Default::default()
    }
}

fn truncate(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

/// `zstack.io/object` of a row.
pub fn object_of(ids: &BTreeMap<String, String>) -> Option<&str> {
    ids.get(OBJECT).map(String::as_str)
}
