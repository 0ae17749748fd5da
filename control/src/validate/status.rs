//! The Subnet status the controller writes: failed with the problems, or active with the
//! address counts.

use crate::crd::{CONDITION_READY, REASON_ACTIVE, REASON_INVALID_SPEC, condition_now};
use crate::crd::{SubnetPhase, SubnetStatus};
use crate::ipam::Usage;
use crate::model::ValidSubnet;

use super::address::*;
use super::problem::*;

// ---- status ---------------------------------------------------------------------------------

/// The status of a Subnet that failed validation: phase `Failed`, `reason` the problems joined
/// with "; ", and `Ready=False` (reason `InvalidSpec`). Stamped now; see
/// [`SubnetStatus::keep_transition_times`] and [`SubnetStatus::with_observed_generation`].
pub fn failed_status(problems: &[SubnetProblem]) -> SubnetStatus {
    let reason = if problems.is_empty() {
        "the spec is invalid".to_string()
    } else {
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    SubnetStatus {
        phase: SubnetPhase::Failed,
        conditions: vec![condition_now(
            CONDITION_READY,
            false,
            REASON_INVALID_SPEC,
            reason.clone(),
        )],
        reason,
        ..Default::default()
    }
}

/// The status of a valid Subnet served by `logical_switch`: phase `Active`, effective
/// protocol and gateway, address counts, `Ready=True`. The counts are the allocator's own
/// (`usage`: what it can still hand out and what it handed out), so `availableIPs` is the
/// number a pod can still get; without an allocator yet, the Subnet's [`capacity`].
pub fn active_status(
    subnet: &ValidSubnet,
    logical_switch: &str,
    usage: Option<Usage>,
) -> SubnetStatus {
    let usage = usage.unwrap_or(Usage {
        available: capacity(subnet),
        used: 0,
    });
    let (available, used_ips) = (usage.available, usage.used);
    let cidrs = subnet
        .cidrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let gateway = subnet
        .gateways
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    SubnetStatus {
        phase: SubnetPhase::Active,
        reason: String::new(),
        protocol: Some(protocol_name(subnet.protocol).to_string()),
        gateway: Some(gateway),
        available_ips: Some(available as f64),
        used_ips: Some(used_ips as f64),
        logical_switch: Some(logical_switch.to_string()),
        security_groups: subnet.security_groups.clone(),
        conditions: vec![condition_now(
            CONDITION_READY,
            true,
            REASON_ACTIVE,
            if subnet.security_groups.is_empty() {
                format!("logical switch {logical_switch} serves {cidrs}")
            } else {
                format!(
                    "logical switch {logical_switch} serves {cidrs}; its pods are in the \
                     platform's security groups {}",
                    subnet.security_groups.join(", ")
                )
            },
        )],
    }
}
