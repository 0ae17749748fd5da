//! What can be wrong with a Subnet spec: each [`SubnetProblem`] a sentence naming the field
//! and the value.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{IpRange, Protocol};

/// One reason a Subnet spec is unusable. `Display` is the sentence shown in `status.reason`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubnetProblem {
    #[error(
        "cidr is empty: give one CIDR like 10.16.0.0/16, or an IPv4 and an IPv6 CIDR separated by a comma"
    )]
    CidrEmpty,
    #[error("cidr {0:?} is not a valid CIDR")]
    CidrInvalid(String),
    #[error("cidr {given} has host bits set (did you mean {network}?)")]
    CidrHostBits { given: IpNet, network: IpNet },
    #[error(
        "cidr {cidr:?} has {count} entries: give one CIDR, or one IPv4 and one IPv6 CIDR separated by a comma"
    )]
    CidrTooMany { cidr: String, count: usize },
    #[error("cidr {cidr:?} has two {family} CIDRs: dual stack needs one IPv4 and one IPv6 CIDR")]
    CidrSameFamily { cidr: String, family: &'static str },
    #[error("cidr {cidr:?} lists IPv6 first: write the IPv4 CIDR first ({suggestion})")]
    CidrOrder { cidr: String, suggestion: String },
    #[error("cidr {cidr} overlaps the {kind} range {range}")]
    CidrReserved {
        cidr: IpNet,
        kind: &'static str,
        range: IpNet,
    },
    #[error("cidr {cidr} overlaps Subnet {other:?} ({other_cidr})")]
    OverlapsSubnet {
        cidr: IpNet,
        other: String,
        other_cidr: IpNet,
    },
    #[error("cidr {cidr} overlaps the service CIDR {service}")]
    OverlapsService { cidr: IpNet, service: IpNet },
    #[error("cidr {cidr} overlaps the join CIDR {join}")]
    OverlapsJoin { cidr: IpNet, join: IpNet },
    #[error(
        "cidr {cidr} overlaps the node network {node} (only an underlay Subnet, with vlanID or externalLogicalSwitch, may)"
    )]
    OverlapsNodes { cidr: IpNet, node: IpNet },
    #[error(
        "cidr {cidr} has no usable addresses: the gateway, excludeIPs and reserved addresses take them all"
    )]
    NoUsableAddresses { cidr: IpNet },

    #[error("protocol {0:?} is not one of IPv4, IPv6, Dual")]
    ProtocolInvalid(String),
    #[error("protocol {protocol} does not match cidr {cidr:?}, which is {actual}")]
    ProtocolMismatch {
        protocol: &'static str,
        cidr: String,
        actual: &'static str,
    },

    #[error("gateway {0:?} is not an IP address")]
    GatewayInvalid(String),
    #[error(
        "gateway {gateway:?} has {gateways} address(es) but cidr {cidr:?} has {cidrs}: give one gateway per CIDR, comma-separated"
    )]
    GatewayCount {
        gateway: String,
        gateways: usize,
        cidr: String,
        cidrs: usize,
    },
    #[error("gateway {gateway:?} lists IPv6 first: write the IPv4 gateway first, as in cidr")]
    GatewayOrder { gateway: String },
    #[error("gateway {gateway} is {family} but cidr {cidr} is not")]
    GatewayFamily {
        gateway: IpAddr,
        family: &'static str,
        cidr: IpNet,
    },
    #[error("gateway {gateway} is outside cidr {cidr}")]
    GatewayOutside { gateway: IpAddr, cidr: IpNet },
    #[error("gateway {gateway} is the network address of cidr {cidr}")]
    GatewayNetwork { gateway: IpAddr, cidr: IpNet },
    #[error("gateway {gateway} is the broadcast address of cidr {cidr}")]
    GatewayBroadcast { gateway: IpAddr, cidr: IpNet },

    #[error(
        "excludeIPs entry {0:?} is not an address or range (like 10.16.0.5, 10.16.0.10..10.16.0.20 or 10.16.0.10-10.16.0.20)"
    )]
    ExcludeInvalid(String),
    #[error("excludeIPs range {start}..{end} is reversed (did you mean {end}..{start}?)")]
    ExcludeReversed { start: IpAddr, end: IpAddr },
    #[error("excludeIPs range {start}..{end} mixes IPv4 and IPv6")]
    ExcludeMixed { start: IpAddr, end: IpAddr },
    #[error("excludeIPs {range} is outside cidr {cidr}")]
    ExcludeOutside { range: RangeText, cidr: String },
    #[error("excludeIPs {range} reaches outside cidr {cidr}")]
    ExcludePartlyOutside { range: RangeText, cidr: IpNet },

    #[error("vlanID {0} is outside 1-4094")]
    VlanOutOfRange(i64),

    #[error("externalLogicalSwitch {0:?} needs external mode; this controller runs standalone")]
    ExternalNeedsExternalMode(String),
    #[error("externalLogicalSwitch {0:?} not found in the OVN Northbound database")]
    ExternalSwitchNotFound(String),
    #[error(
        "externalLogicalSwitch {switch:?} serves {platform} (as the platform declares it: {declared_by}), not cidr {cidr}"
    )]
    ExternalSwitchCidrMismatch {
        switch: String,
        cidr: IpNet,
        platform: IpNet,
        declared_by: String,
    },
    #[error(
        "securityGroups needs external mode and externalLogicalSwitch: they are the platform's"
    )]
    SecurityGroupsNeedPlatformSwitch,
    #[error(
        "securityGroups is off in this controller: start it with --platform-security-groups (Helm: ovn.securityGroups=true)"
    )]
    SecurityGroupsOff,
    #[error(
        "security group {0:?} not found: no Port_Group of that name in the platform's Northbound database"
    )]
    SecurityGroupNotFound(String),
    #[error(
        "natOutgoing does not apply in external mode: the platform's router carries the pods' egress (its NAT rules decide); remove the field"
    )]
    NatOutgoingInExternalMode,

    #[error(
        "namespaces entry {0:?} is not a valid namespace name (lowercase letters, digits and '-', at most 63)"
    )]
    NamespaceInvalid(String),
    #[error("namespace {namespace:?} already belongs to Subnet {other:?}")]
    NamespaceTaken { namespace: String, other: String },

    #[error("default is true but Subnet {0:?} is already the default Subnet")]
    DefaultTaken(String),
}

impl SubnetProblem {
    /// The spec field (JSON name) the problem is about.
    pub fn field(&self) -> &'static str {
        use SubnetProblem::*;
        match self {
            CidrEmpty
            | CidrInvalid(_)
            | CidrHostBits { .. }
            | CidrTooMany { .. }
            | CidrSameFamily { .. }
            | CidrOrder { .. }
            | CidrReserved { .. }
            | OverlapsSubnet { .. }
            | OverlapsService { .. }
            | OverlapsJoin { .. }
            | OverlapsNodes { .. }
            | NoUsableAddresses { .. } => "cidr",
            ProtocolInvalid(_) | ProtocolMismatch { .. } => "protocol",
            GatewayInvalid(_)
            | GatewayCount { .. }
            | GatewayOrder { .. }
            | GatewayFamily { .. }
            | GatewayOutside { .. }
            | GatewayNetwork { .. }
            | GatewayBroadcast { .. } => "gateway",
            ExcludeInvalid(_)
            | ExcludeReversed { .. }
            | ExcludeMixed { .. }
            | ExcludeOutside { .. }
            | ExcludePartlyOutside { .. } => "excludeIPs",
            VlanOutOfRange(_) => "vlanID",
            ExternalNeedsExternalMode(_)
            | ExternalSwitchNotFound(_)
            | ExternalSwitchCidrMismatch { .. } => "externalLogicalSwitch",
            NatOutgoingInExternalMode => "natOutgoing",
            SecurityGroupsNeedPlatformSwitch | SecurityGroupsOff | SecurityGroupNotFound(_) => {
                "securityGroups"
            }
            NamespaceInvalid(_) | NamespaceTaken { .. } => "namespaces",
            DefaultTaken(_) => "default",
        }
    }
}

/// An address range as a person writes it: `10.0.0.5` or `10.0.0.10..10.0.0.20`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeText(pub IpRange);

impl fmt::Display for RangeText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        if r.start == r.end {
            write!(f, "{}", r.start)
        } else {
            write!(f, "{}..{}", r.start, r.end)
        }
    }
}

/// `IPv4`, `IPv6` or `Dual`: the spelling of the `protocol` field.
pub fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::IPv4 => "IPv4",
        Protocol::IPv6 => "IPv6",
        Protocol::Dual => "Dual",
    }
}

/// Parses a `protocol` value (exact spelling, as the CRD's enum).
pub fn parse_protocol(s: &str) -> Option<Protocol> {
    match s {
        "IPv4" => Some(Protocol::IPv4),
        "IPv6" => Some(Protocol::IPv6),
        "Dual" => Some(Protocol::Dual),
        _ => None,
    }
}
