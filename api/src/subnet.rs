//! The `Subnet` custom resource: `network.zstack.io/v1`, cluster-scoped, short name `sn`.
//!
//! ```yaml
//! apiVersion: network.zstack.io/v1
//! kind: Subnet
//! metadata:
//!   name: blue
//! spec:
//!   cidr: 10.16.0.0/16,fd00:10:16::/64   # one CIDR, or IPv4,IPv6 (IPv4 first) for dual stack
//!   gateway: 10.16.0.1,fd00:10:16::1     # optional: first usable address of each CIDR
//!   excludeIPs: [10.16.0.2, 10.16.0.10..10.16.0.20, 10.16.1.1-10.16.1.9]
//!   namespaces: [team-blue]
//! ```
//!
//! The spec keeps every field as the user wrote it (strings, a wide integer for `vlanID`) so
//! that a bad value never makes the object undecodable: the controller's validator
//! (`control::validate`) turns it into a valid Subnet or into reasons a person can act on,
//! which land in the status. The CRD YAML is written by `control`'s `crdgen` binary.
//!
//! ## Status numbers
//!
//! `availableIPs` and `usedIPs` are JSON numbers (`type: number`, an `f64` here, as kube-ovn's
//! `v4availableIPs`): they sort numerically in `kubectl get sn --sort-by` and print plainly
//! (`253`, `65533`). They are totals over both families of a dual-stack Subnet. Counts below
//! 2^53 are exact, which covers every IPv4 Subnet and IPv6 prefixes of /75 and longer; a /64
//! prints as `1.8446744073709552e+19`, an honest "practically unlimited". The exact
//! per-family capacity is available to code as `u128` from `control::validate::capacity`.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of a Subnet. JSON field names follow kube-ovn where they overlap
/// (`cidr` is kube-ovn's `cidrBlock`, `excludeIPs` its `excludeIps`).
// `printcolumn(...)` repeats keys by design; clippy reads them as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "network.zstack.io",
    version = "v1",
    kind = "Subnet",
    plural = "subnets",
    shortname = "sn",
    status = "SubnetStatus",
    derive = "PartialEq",
    doc = "A pod network: an address range served by an OVN logical switch (own, underlay VLAN, or the platform's in external mode).",
    printcolumn(
        name = "CIDR",
        type_ = "string",
        json_path = ".spec.cidr",
        description = "The Subnet's CIDR(s), IPv4 first"
    ),
    printcolumn(
        name = "Protocol",
        type_ = "string",
        json_path = ".status.protocol",
        description = "IPv4, IPv6 or Dual, as derived from cidr"
    ),
    printcolumn(
        name = "Gateway",
        type_ = "string",
        json_path = ".status.gateway",
        description = "The gateway address(es) in use"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Pending, Active or Failed"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.reason",
        description = "Why the Subnet is Failed, in words"
    ),
    printcolumn(
        name = "Available",
        type_ = "number",
        json_path = ".status.availableIPs",
        description = "Addresses still free for pods"
    ),
    printcolumn(
        name = "Used",
        type_ = "number",
        json_path = ".status.usedIPs",
        description = "Addresses held by pods"
    ),
    printcolumn(
        name = "LogicalSwitch",
        type_ = "string",
        json_path = ".status.logicalSwitch",
        description = "The OVN logical switch serving the Subnet"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct SubnetSpec {
    /// One CIDR (`10.16.0.0/16`, `fd00:10:16::/64`), or an IPv4 and an IPv6 CIDR separated by a
    /// comma, IPv4 first, for dual stack (`10.16.0.0/16,fd00:10:16::/64`).
    pub cidr: String,

    /// The gateway: one address per CIDR, comma-separated in the same order. Default: the first
    /// usable address of each CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,

    /// Addresses IPAM never hands out: single addresses (`10.16.0.5`) and inclusive ranges,
    /// written `a..b` (kube-ovn) or `a-b` (`10.16.0.10..10.16.0.20`, `fd00::10-fd00::20`).
    #[serde(rename = "excludeIPs", default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_ips: Vec<String>,

    /// `IPv4`, `IPv6` or `Dual`. Default: derived from `cidr`; when set it must agree with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["IPv4", "IPv6", "Dual"]))]
    pub protocol: Option<String>,

    /// Underlay: the VLAN (1-4094) the Subnet's switch reaches the physical network on.
    #[serde(rename = "vlanID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4094))]
    pub vlan_id: Option<i64>,

    /// Egress: traffic of the Subnet's pods to addresses outside the cluster leaves through
    /// their node's gateway SNATed to the node's address (`true`, the default), or with the
    /// pod's own address (`false`: the underlay must route the Subnet back to the nodes).
    /// Not used in external mode, where the platform's router carries egress.
    #[serde(
        rename = "natOutgoing",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub nat_outgoing: Option<bool>,

    /// The network provider (`ovn`, or a Multus attachment `<name>.<namespace>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,

    /// External mode: the platform's existing OVN logical switch this Subnet joins instead of
    /// creating its own. Addresses the platform already uses on it are never handed out.
    #[serde(
        rename = "externalLogicalSwitch",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub external_logical_switch: Option<String>,

    /// External mode, with the controller's `--platform-security-groups`: the platform's
    /// security groups (OVN `Port_Group` names on its Northbound) the Subnet's pods join,
    /// so the platform's rules govern them as they govern its VMs. Only the Subnet (an
    /// administrator's object) names them, never a pod.
    #[serde(
        rename = "securityGroups",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub security_groups: Vec<String>,

    /// Namespaces whose pods draw addresses from this Subnet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,

    /// The cluster default Subnet: pods of namespaces no Subnet names. At most one.
    #[serde(default)]
    pub default: bool,
}

/// Where a Subnet is in its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SubnetPhase {
    /// Seen, not yet reconciled.
    #[default]
    Pending,
    /// Valid, and its logical switch exists.
    Active,
    /// The spec is unusable; `reason` says why.
    Failed,
}

impl fmt::Display for SubnetPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SubnetPhase::Pending => "Pending",
            SubnetPhase::Active => "Active",
            SubnetPhase::Failed => "Failed",
        })
    }
}

/// The observed state of a Subnet, written by the controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetStatus {
    #[serde(default)]
    pub phase: SubnetPhase,

    /// Why the Subnet is not Active, in words (problems joined with "; "). Empty when Active.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,

    /// The protocol in use (derived from `spec.cidr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,

    /// The gateway(s) in use, comma-separated like `spec.gateway` (filled in when defaulted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,

    /// Addresses still free for pods, both families together. A JSON number: exact below 2^53,
    /// so a large IPv6 Subnet shows as e.g. 1.8446744073709552e+19.
    #[serde(
        rename = "availableIPs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub available_ips: Option<f64>,

    /// Addresses held by pods, both families together.
    #[serde(rename = "usedIPs", default, skip_serializing_if = "Option::is_none")]
    pub used_ips: Option<f64>,

    /// The OVN logical switch serving the Subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_switch: Option<String>,

    /// External mode: the platform's security groups its pods are in (from
    /// `spec.securityGroups`, once the platform's NB holds each of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<String>,

    /// Standard conditions; `Ready` is True when Active, False with reason `InvalidSpec` when
    /// the spec fails validation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// The condition type this controller maintains.
pub const CONDITION_READY: &str = "Ready";
/// `Ready=False` reason when validation rejected the spec.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
/// `Ready=True` reason.
pub const REASON_ACTIVE: &str = "Active";
/// Condition on the controller-managed default Subnet: True while it is the cluster's
/// default, False while it yields to a user's `default: true` Subnet.
pub const CONDITION_CLUSTER_DEFAULT: &str = "ClusterDefault";
/// `ClusterDefault=True` reason.
pub const REASON_SERVING_DEFAULT: &str = "ServingDefault";
/// `ClusterDefault=False` reason: a user's default Subnet takes precedence.
pub const REASON_YIELDS: &str = "YieldsToUserDefault";
/// Condition on the controller-managed default Subnet: True while its `cidr` is the
/// controller's `--cluster-cidr`, False when they disagree (the Subnet is left as it is).
pub const CONDITION_MATCHES_FLAG: &str = "MatchesClusterCIDR";
/// `MatchesClusterCIDR=True` reason.
pub const REASON_CIDR_MATCHES: &str = "CIDRMatches";
/// `MatchesClusterCIDR=False` reason.
pub const REASON_CIDR_MISMATCH: &str = "CIDRMismatch";

impl SubnetStatus {
    /// The condition of type `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Stamps every condition with the generation it was computed from.
    pub fn with_observed_generation(mut self, generation: Option<i64>) -> Self {
        for c in &mut self.conditions {
            c.observed_generation = generation;
        }
        self
    }

    /// Keeps `lastTransitionTime` from `previous` for every condition whose status did not
    /// change, as the Kubernetes condition convention asks (the time marks a transition, not
    /// the last write). Call before writing a freshly computed status.
    pub fn keep_transition_times(mut self, previous: Option<&SubnetStatus>) -> Self {
        let Some(previous) = previous else {
            return self;
        };
        for c in &mut self.conditions {
            if let Some(old) = previous.condition(&c.type_)
                && old.status == c.status
            {
                c.last_transition_time = old.last_transition_time.clone();
            }
        }
        self
    }
}

/// A `Condition` stamped now.
pub fn condition_now(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
        observed_generation: None,
    }
}

/// The OpenAPI schema of `metav1.Condition` lists, as the apiserver's own types declare them
/// (k8s-openapi is built without its `schemars` feature, so `Condition` has no derived schema).
fn conditions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Standard conditions (metav1.Condition), one per type.",
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {
                    "description": "Type of condition in CamelCase.",
                    "type": "string",
                    "maxLength": 316
                },
                "status": {
                    "description": "Status of the condition: True, False or Unknown.",
                    "type": "string",
                    "enum": ["True", "False", "Unknown"]
                },
                "observedGeneration": {
                    "description": "The .metadata.generation the condition was computed from.",
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0
                },
                "lastTransitionTime": {
                    "description": "When the condition last changed status.",
                    "type": "string",
                    "format": "date-time"
                },
                "reason": {
                    "description": "A CamelCase identifier for the last transition.",
                    "type": "string",
                    "maxLength": 1024,
                    "minLength": 1
                },
                "message": {
                    "description": "Human-readable details of the last transition.",
                    "type": "string",
                    "maxLength": 32768
                }
            }
        }
    })
}

impl SubnetSpec {
    /// A spec with only `cidr` set.
    pub fn with_cidr(cidr: impl Into<String>) -> Self {
        SubnetSpec {
            cidr: cidr.into(),
            ..Default::default()
        }
    }

    /// Whether the Subnet's pods sit on a platform's switch (external mode,
    /// `externalLogicalSwitch`), which no router of ours reaches: hosts reach them through
    /// their management port on that switch (`api::platform_mgmt`), not the join network.
    pub fn on_platform_switch(&self) -> bool {
        self.external_logical_switch
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty())
    }

    /// Whether the node's gateway masquerades this Subnet's egress: `natOutgoing` (default
    /// true) on a Subnet the cluster router serves (VLAN underlays included: their gateway
    /// is the router's port; not the platform's switch, not a secondary network's).
    pub fn masquerades_egress(&self) -> bool {
        self.nat_outgoing.unwrap_or(true)
            && !self.on_platform_switch()
            && self
                .provider
                .as_deref()
                .is_none_or(|p| p.trim().is_empty() || p == "ovn")
    }
}

#[cfg(test)]
mod tests {
    use super::SubnetSpec;

    type Case = (&'static str, fn(&mut SubnetSpec));

    #[test]
    fn egress_is_masqueraded_only_for_routed_subnets_with_nat_outgoing() {
        let base = SubnetSpec::with_cidr("10.16.0.0/16");
        assert!(base.masquerades_egress(), "natOutgoing defaults to true");
        // a VLAN Subnet's pods leave through the cluster router too (its gateway)
        let mut vlan = base.clone();
        vlan.vlan_id = Some(100);
        assert!(vlan.masquerades_egress(), "VLAN underlay");
        let cases: [Case; 4] = [
            ("natOutgoing false", |s| s.nat_outgoing = Some(false)),
            ("the platform's switch", |s| {
                s.external_logical_switch = Some("ls-1".into())
            }),
            ("a secondary network", |s| {
                s.provider = Some("net1.default".into())
            }),
            ("natOutgoing false, provider ovn", |s| {
                s.provider = Some("ovn".into());
                s.nat_outgoing = Some(false);
            }),
        ];
        for (what, f) in cases {
            let mut s = base.clone();
            f(&mut s);
            assert!(!s.masquerades_egress(), "{what}");
        }
        let mut ovn = base.clone();
        ovn.provider = Some("ovn".into());
        assert!(ovn.masquerades_egress());
    }
}
