//! Subnet validation: a [`SubnetSpec`] as the user wrote it becomes a [`ValidSubnet`], or the
//! complete list of [`SubnetProblem`]s, each a sentence naming the field and the value.
//!
//! [`validate`] is pure (no I/O, no clock) and total (never panics, whatever the strings hold).
//! Everything it cross-checks against comes in through a [`ValidationContext`].
//!
//! ## Decisions
//!
//! * **Host bits**: `cidr: 10.0.0.5/24` is *rejected* ("has host bits set (did you mean
//!   10.0.0.0/24?)"), not silently normalised: the value may be a typo for either the network
//!   or a gateway, and the spec should show what the Subnet really is. The other checks still
//!   run against the network, so one pass reports every problem.
//! * **Dual stack** follows kube-ovn: `cidr` is `v4,v6`, IPv4 first; `gateway` gives one
//!   address per CIDR in the same order.
//! * **Reserved addresses**: IPv4 prefixes up to /30 reserve the network and broadcast
//!   addresses, IPv6 prefixes up to /126 the network (subnet-router anycast) address; /31, /32,
//!   /127 and /128 use every address (RFC 3021, RFC 6164). A gateway may not be a reserved
//!   address; the default gateway is the first non-reserved address.
//! * **Conflicts between Subnets** (overlapping CIDRs, a namespace claimed twice, two
//!   `default: true`) are symmetric, but only the *newer* Subnet of the pair fails: the one
//!   created later (`metadata.creationTimestamp`; unknown counts as newest), ties broken by
//!   name. An existing working Subnet is therefore never broken by a newcomer. Every other
//!   Subnet counts, valid or not, so the outcome does not flap as others change state.
//!   The controller-managed default Subnet (`yields`) counts as newer than every user
//!   Subnet, whenever it was created: a user's Subnet never fails because of it.
//! * **Node networks** may only overlap Subnets that reach the physical network themselves
//!   (`vlanID` or `externalLogicalSwitch` set); an overlay Subnet overlapping them is an error.
//! * **`excludes`** in the result are `excludeIPs` plus, in external mode, the platform's ranges
//!   on the switch (clipped to the CIDRs), merged and sorted. The gateway is not added to them.
//! * Empty strings in optional fields (`gateway: ""`, `provider: ""`) mean "unset".
//!
//! | module | holds |
//! |---|---|
//! | [`context`] | what a Subnet is checked against ([`ValidationContext`]) |
//! | [`problem`] | the problems ([`SubnetProblem`]) and how they read |
//! | [`spec`] | [`validate`]: the fields, then the other Subnets |
//! | [`address`] | address arithmetic: reserved addresses, gateways, ranges, capacity |
//! | [`status`] | the status written for a failed or an active Subnet |

pub mod address;
pub mod context;
pub mod problem;
pub mod spec;
pub mod status;
#[cfg(test)]
mod tests;

pub use address::{capacity, default_gateway, family_capacity, merge_ranges, overlaps};
pub use context::{ExternalContext, OtherSubnet, ValidationContext};
pub use problem::{RangeText, SubnetProblem, parse_protocol, protocol_name};
pub use spec::validate;

/// Event reason of a Subnet the controller refuses ([`crate::source::Writer::subnet_event`]).
pub const SUBNET_INVALID: &str = api::keys::REASON_SUBNET_INVALID;
pub use status::{active_status, failed_status};
