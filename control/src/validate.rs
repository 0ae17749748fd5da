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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::{CONDITION_READY, REASON_ACTIVE, REASON_INVALID_SPEC, condition_now};
use crate::crd::{SubnetPhase, SubnetSpec, SubnetStatus};
use crate::model::{IpRange, Protocol, ValidSubnet};

/// Everything validation checks a Subnet against, gathered by the caller.
#[derive(Clone, Debug, Default)]
pub struct ValidationContext {
    /// `metadata.creationTimestamp` of the Subnet being validated (`None`: not stored yet,
    /// which counts as newest).
    pub created: Option<Time>,
    /// All other Subnets by name (an entry with the validated Subnet's own name is ignored).
    pub others: BTreeMap<String, OtherSubnet>,
    /// The cluster's service CIDR(s).
    pub service_cidrs: Vec<IpNet>,
    /// The join (node-to-pod) CIDR(s).
    pub join_cidrs: Vec<IpNet>,
    /// The node/underlay networks, when known (host prefixes like `/32` are fine).
    pub node_networks: Vec<IpNet>,
    /// `Some` in external mode (the controller shares the platform's OVN), `None` standalone.
    pub external: Option<ExternalContext>,
    /// The validated Subnet is the controller-managed default: it counts as newest.
    pub yields: bool,
}

/// Another Subnet, as far as conflicts go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OtherSubnet {
    pub cidrs: Vec<IpNet>,
    pub created: Option<Time>,
    pub default: bool,
    pub namespaces: Vec<String>,
    /// The controller-managed default Subnet: it counts as newest.
    pub yields: bool,
}

impl OtherSubnet {
    /// Reads another Subnet's spec leniently: every CIDR entry that parses counts (host bits
    /// cleared), whether or not that Subnet is itself valid.
    pub fn from_spec(spec: &SubnetSpec, created: Option<Time>) -> Self {
        OtherSubnet {
            cidrs: spec
                .cidr
                .split(',')
                .filter_map(|c| c.trim().parse::<IpNet>().ok())
                .map(|c| c.trunc())
                .collect(),
            created,
            default: spec.default,
            namespaces: spec.namespaces.clone(),
            yields: false,
        }
    }
}

/// External mode: what the platform's Northbound database holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExternalContext {
    /// Names of the Logical_Switch rows in the Northbound database.
    pub switches: BTreeSet<String>,
    /// Per switch: addresses already used by the platform's own ports.
    pub platform_excludes: BTreeMap<String, Vec<IpRange>>,
}

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
            ExternalNeedsExternalMode(_) | ExternalSwitchNotFound(_) => "externalLogicalSwitch",
            NatOutgoingInExternalMode => "natOutgoing",
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

fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

/// Checks `spec` (the Subnet called `name`) against itself and `ctx`. Returns every problem
/// found, in field order, or the Subnet ready for IPAM and the translators.
pub fn validate(
    name: &str,
    spec: &SubnetSpec,
    ctx: &ValidationContext,
) -> Result<ValidSubnet, Vec<SubnetProblem>> {
    let mut problems = Vec::new();

    let cidrs = parse_cidr_field(&spec.cidr, &mut problems);
    let protocol = cidrs
        .as_deref()
        .and_then(|c| check_protocol(spec.protocol.as_deref(), &spec.cidr, c, &mut problems));
    if cidrs.is_none()
        && let Some(p) = non_empty(spec.protocol.as_deref())
        && parse_protocol(p).is_none()
    {
        problems.push(SubnetProblem::ProtocolInvalid(p.to_string()));
    }
    let gateways = parse_gateway_field(
        non_empty(spec.gateway.as_deref()),
        &spec.cidr,
        cidrs.as_deref(),
        &mut problems,
    );
    let excludes = parse_excludes(
        &spec.exclude_ips,
        &spec.cidr,
        cidrs.as_deref(),
        &mut problems,
    );

    let vlan_id = match spec.vlan_id {
        None => None,
        Some(v) => match u16::try_from(v) {
            Ok(v16) if (1..=4094).contains(&v16) => Some(v16),
            _ => {
                problems.push(SubnetProblem::VlanOutOfRange(v));
                None
            }
        },
    };
    let provider = non_empty(spec.provider.as_deref()).map(str::to_string);
    let external_logical_switch =
        non_empty(spec.external_logical_switch.as_deref()).map(str::to_string);
    let mut platform = Vec::new();
    if let Some(ls) = &external_logical_switch {
        match &ctx.external {
            None => problems.push(SubnetProblem::ExternalNeedsExternalMode(ls.clone())),
            Some(ext) if !ext.switches.contains(ls) => {
                problems.push(SubnetProblem::ExternalSwitchNotFound(ls.clone()))
            }
            Some(ext) => platform = ext.platform_excludes.get(ls).cloned().unwrap_or_default(),
        }
    }
    if ctx.external.is_some() && spec.nat_outgoing.is_some() {
        problems.push(SubnetProblem::NatOutgoingInExternalMode);
    }

    // Conflicts with other Subnets: only those older than this one count (see module docs).
    let me = order_key(ctx.yields, ctx.created.as_ref(), name);
    let older: Vec<(&String, &OtherSubnet)> = ctx
        .others
        .iter()
        .filter(|(other, o)| *other != name && order_key(o.yields, o.created.as_ref(), other) < me)
        .collect();

    if let Some(cidrs) = &cidrs {
        let underlay = vlan_id.is_some() || external_logical_switch.is_some();
        check_overlaps(cidrs, &older, ctx, underlay, &mut problems);
    }

    let mut namespaces: Vec<String> = Vec::new();
    for ns in &spec.namespaces {
        if !is_dns1123_label(ns) {
            problems.push(SubnetProblem::NamespaceInvalid(ns.clone()));
        } else if !namespaces.contains(ns) {
            if let Some((other, _)) = older.iter().find(|(_, o)| o.namespaces.contains(ns)) {
                problems.push(SubnetProblem::NamespaceTaken {
                    namespace: ns.clone(),
                    other: (*other).clone(),
                });
            }
            namespaces.push(ns.clone());
        }
    }
    if spec.default
        && let Some((other, _)) = older.iter().find(|(_, o)| o.default)
    {
        problems.push(SubnetProblem::DefaultTaken((*other).clone()));
    }

    let (Some(cidrs), Some(protocol), Some(gateways), Some(mut excludes)) =
        (cidrs, protocol, gateways, excludes)
    else {
        return Err(problems);
    };
    for r in platform {
        if let Some(clipped) = cidrs.iter().find_map(|c| clip(r, c)) {
            excludes.push(clipped);
        }
    }
    let excludes = merge_ranges(excludes);
    for (cidr, gw) in cidrs.iter().zip(&gateways) {
        if family_capacity(cidr, *gw, &excludes) == 0 {
            problems.push(SubnetProblem::NoUsableAddresses { cidr: *cidr });
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(ValidSubnet {
        name: name.to_string(),
        protocol,
        cidrs,
        gateways,
        excludes,
        vlan_id,
        provider,
        external_logical_switch,
        namespaces,
        default: spec.default,
        nat_outgoing: spec.nat_outgoing.unwrap_or(true),
    })
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// Creation order: the managed default Subnet after every other; then known timestamps
/// first (oldest first), unknown last; ties by name.
fn order_key<'a>(
    yields: bool,
    created: Option<&'a Time>,
    name: &'a str,
) -> (bool, bool, Option<&'a Time>, &'a str) {
    (yields, created.is_none(), created, name)
}

/// `cidr` → one CIDR per family, IPv4 first, for the cross-checks; `None` when the field is
/// unusable. Host bits are a problem, but the checks go on with the network so that the other
/// fields' problems are reported in the same pass (the result is an error either way).
fn parse_cidr_field(field: &str, problems: &mut Vec<SubnetProblem>) -> Option<Vec<IpNet>> {
    if field.trim().is_empty() {
        problems.push(SubnetProblem::CidrEmpty);
        return None;
    }
    let parts: Vec<&str> = field.split(',').map(str::trim).collect();
    let mut unusable = false;
    let mut nets = Vec::new();
    for part in &parts {
        match part.parse::<IpNet>() {
            Err(_) => {
                problems.push(SubnetProblem::CidrInvalid((*part).to_string()));
                unusable = true;
            }
            Ok(net) if net.trunc() != net => {
                problems.push(SubnetProblem::CidrHostBits {
                    given: net,
                    network: net.trunc(),
                });
                nets.push(net.trunc());
            }
            Ok(net) => nets.push(net),
        }
    }
    if parts.len() > 2 {
        problems.push(SubnetProblem::CidrTooMany {
            cidr: field.to_string(),
            count: parts.len(),
        });
        unusable = true;
    }
    if unusable {
        return None;
    }
    if let [a, b] = nets[..] {
        match (a, b) {
            (IpNet::V4(_), IpNet::V4(_)) | (IpNet::V6(_), IpNet::V6(_)) => {
                problems.push(SubnetProblem::CidrSameFamily {
                    cidr: field.to_string(),
                    family: family(a.addr()),
                });
                return None;
            }
            (IpNet::V6(_), IpNet::V4(_)) => {
                problems.push(SubnetProblem::CidrOrder {
                    cidr: field.to_string(),
                    suggestion: format!("{b},{a}"),
                });
                return None;
            }
            _ => {}
        }
    }
    Some(nets)
}

fn derived_protocol(cidrs: &[IpNet]) -> Protocol {
    match cidrs {
        [IpNet::V4(_)] => Protocol::IPv4,
        [IpNet::V6(_)] => Protocol::IPv6,
        _ => Protocol::Dual,
    }
}

fn check_protocol(
    given: Option<&str>,
    field: &str,
    cidrs: &[IpNet],
    problems: &mut Vec<SubnetProblem>,
) -> Option<Protocol> {
    let derived = derived_protocol(cidrs);
    let Some(given) = non_empty(given) else {
        return Some(derived);
    };
    match parse_protocol(given) {
        None => {
            problems.push(SubnetProblem::ProtocolInvalid(given.to_string()));
            None
        }
        Some(p) if p != derived => {
            problems.push(SubnetProblem::ProtocolMismatch {
                protocol: protocol_name(p),
                cidr: field.trim().to_string(),
                actual: match derived {
                    Protocol::IPv4 => "IPv4 only",
                    Protocol::IPv6 => "IPv6 only",
                    Protocol::Dual => "dual-stack (IPv4 and IPv6)",
                },
            });
            None
        }
        Some(p) => Some(p),
    }
}

/// Whether `ip` is reserved in `net` (network/broadcast), and which.
fn reserved_kind(net: &IpNet, ip: IpAddr) -> Option<&'static str> {
    match net {
        IpNet::V4(n) if n.prefix_len() <= 30 => {
            if ip == IpAddr::V4(n.network()) {
                Some("network")
            } else if ip == IpAddr::V4(n.broadcast()) {
                Some("broadcast")
            } else {
                None
            }
        }
        IpNet::V6(n) if n.prefix_len() <= 126 && ip == IpAddr::V6(n.network()) => Some("network"),
        _ => None,
    }
}

/// The first address of `net` that is not reserved: the default gateway.
pub fn default_gateway(net: &IpNet) -> IpAddr {
    match net {
        IpNet::V4(n) if n.prefix_len() <= 30 => {
            IpAddr::V4(Ipv4Addr::from(u32::from(n.network()).wrapping_add(1)))
        }
        IpNet::V6(n) if n.prefix_len() <= 126 => {
            IpAddr::V6(Ipv6Addr::from(u128::from(n.network()).wrapping_add(1)))
        }
        _ => net.network(),
    }
}

fn parse_gateway_field(
    field: Option<&str>,
    cidr_field: &str,
    cidrs: Option<&[IpNet]>,
    problems: &mut Vec<SubnetProblem>,
) -> Option<Vec<IpAddr>> {
    let Some(field) = field else {
        return cidrs.map(|c| c.iter().map(default_gateway).collect());
    };
    let mut addrs = Vec::new();
    let mut bad = false;
    for part in field.split(',').map(str::trim) {
        match part.parse::<IpAddr>() {
            Ok(ip) => addrs.push(ip),
            Err(_) => {
                problems.push(SubnetProblem::GatewayInvalid(part.to_string()));
                bad = true;
            }
        }
    }
    let cidrs = cidrs?;
    if bad {
        return None;
    }
    if addrs.len() != cidrs.len() {
        problems.push(SubnetProblem::GatewayCount {
            gateway: field.to_string(),
            gateways: addrs.len(),
            cidr: cidr_field.trim().to_string(),
            cidrs: cidrs.len(),
        });
        return None;
    }
    if let ([IpAddr::V6(_), IpAddr::V4(_)], [IpNet::V4(_), IpNet::V6(_)]) = (&addrs[..], cidrs) {
        problems.push(SubnetProblem::GatewayOrder {
            gateway: field.to_string(),
        });
        return None;
    }
    let before = problems.len();
    for (gw, cidr) in addrs.iter().zip(cidrs) {
        let gw = *gw;
        if gw.is_ipv4() != cidr.addr().is_ipv4() {
            problems.push(SubnetProblem::GatewayFamily {
                gateway: gw,
                family: family(gw),
                cidr: *cidr,
            });
        } else if !cidr.contains(&gw) {
            problems.push(SubnetProblem::GatewayOutside {
                gateway: gw,
                cidr: *cidr,
            });
        } else {
            match reserved_kind(cidr, gw) {
                Some("broadcast") => problems.push(SubnetProblem::GatewayBroadcast {
                    gateway: gw,
                    cidr: *cidr,
                }),
                Some(_) => problems.push(SubnetProblem::GatewayNetwork {
                    gateway: gw,
                    cidr: *cidr,
                }),
                None => {}
            }
        }
    }
    (problems.len() == before).then_some(addrs)
}

/// Parses one `excludeIPs` entry: `a`, `a..b` or `a-b`.
fn parse_exclude(entry: &str) -> Result<IpRange, SubnetProblem> {
    let invalid = || SubnetProblem::ExcludeInvalid(entry.to_string());
    let trimmed = entry.trim();
    let (start, end) = match trimmed.split_once("..") {
        Some(pair) => pair,
        // IPv6 addresses never contain '-', so `a-b` is unambiguous
        None => trimmed.split_once('-').unwrap_or((trimmed, trimmed)),
    };
    let start: IpAddr = start.trim().parse().map_err(|_| invalid())?;
    let end: IpAddr = end.trim().parse().map_err(|_| invalid())?;
    if start.is_ipv4() != end.is_ipv4() {
        return Err(SubnetProblem::ExcludeMixed { start, end });
    }
    if start > end {
        return Err(SubnetProblem::ExcludeReversed { start, end });
    }
    Ok(IpRange { start, end })
}

fn parse_excludes(
    entries: &[String],
    cidr_field: &str,
    cidrs: Option<&[IpNet]>,
    problems: &mut Vec<SubnetProblem>,
) -> Option<Vec<IpRange>> {
    let before = problems.len();
    let mut out = Vec::new();
    for entry in entries {
        let range = match parse_exclude(entry) {
            Ok(r) => r,
            Err(p) => {
                problems.push(p);
                continue;
            }
        };
        let Some(cidrs) = cidrs else { continue };
        match cidrs
            .iter()
            .find(|c| c.addr().is_ipv4() == range.start.is_ipv4())
        {
            Some(c) if c.contains(&range.start) && c.contains(&range.end) => out.push(range),
            Some(c) if clip(range, c).is_some() => {
                problems.push(SubnetProblem::ExcludePartlyOutside {
                    range: RangeText(range),
                    cidr: *c,
                })
            }
            Some(c) => problems.push(SubnetProblem::ExcludeOutside {
                range: RangeText(range),
                cidr: c.to_string(),
            }),
            None => problems.push(SubnetProblem::ExcludeOutside {
                range: RangeText(range),
                cidr: cidr_field.trim().to_string(),
            }),
        }
    }
    (cidrs.is_some() && problems.len() == before).then_some(out)
}

/// Address ranges no pod network may touch.
fn reserved_ranges() -> [(&'static str, IpNet); 9] {
    let net = |a: IpAddr, p: u8| IpNet::new(a, p).unwrap_or(IpNet::V4(Default::default()));
    [
        ("\"this network\"", net(Ipv4Addr::UNSPECIFIED.into(), 8)),
        ("loopback", net(Ipv4Addr::new(127, 0, 0, 0).into(), 8)),
        ("link-local", net(Ipv4Addr::new(169, 254, 0, 0).into(), 16)),
        ("multicast", net(Ipv4Addr::new(224, 0, 0, 0).into(), 4)),
        ("broadcast", net(Ipv4Addr::BROADCAST.into(), 32)),
        ("unspecified", net(Ipv6Addr::UNSPECIFIED.into(), 128)),
        ("loopback", net(Ipv6Addr::LOCALHOST.into(), 128)),
        (
            "link-local",
            net(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0).into(), 10),
        ),
        (
            "multicast",
            net(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0).into(), 8),
        ),
    ]
}

/// Whether two networks share an address.
pub fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

fn check_overlaps(
    cidrs: &[IpNet],
    older: &[(&String, &OtherSubnet)],
    ctx: &ValidationContext,
    underlay: bool,
    problems: &mut Vec<SubnetProblem>,
) {
    for cidr in cidrs {
        let cidr = *cidr;
        for (kind, range) in reserved_ranges() {
            if overlaps(&cidr, &range) {
                problems.push(SubnetProblem::CidrReserved { cidr, kind, range });
            }
        }
        for (other, o) in older {
            for other_cidr in o.cidrs.iter().filter(|c| overlaps(&cidr, c)) {
                problems.push(SubnetProblem::OverlapsSubnet {
                    cidr,
                    other: (*other).clone(),
                    other_cidr: *other_cidr,
                });
            }
        }
        for service in ctx.service_cidrs.iter().filter(|c| overlaps(&cidr, c)) {
            problems.push(SubnetProblem::OverlapsService {
                cidr,
                service: *service,
            });
        }
        for join in ctx.join_cidrs.iter().filter(|c| overlaps(&cidr, c)) {
            problems.push(SubnetProblem::OverlapsJoin { cidr, join: *join });
        }
        if !underlay {
            for node in ctx.node_networks.iter().filter(|c| overlaps(&cidr, c)) {
                problems.push(SubnetProblem::OverlapsNodes { cidr, node: *node });
            }
        }
    }
}

/// A DNS-1123 label: what Kubernetes accepts as a namespace name.
fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| ok(c) || *c == b'-')
        && b.first().is_some_and(ok)
        && b.last().is_some_and(ok)
}

// ---- address arithmetic --------------------------------------------------------------------

/// An address as (is IPv6, number).
fn bits(ip: IpAddr) -> (bool, u128) {
    match ip {
        IpAddr::V4(a) => (false, u128::from(u32::from(a))),
        IpAddr::V6(a) => (true, u128::from(a)),
    }
}

fn from_bits(v6: bool, n: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(n))
    } else {
        IpAddr::V4(Ipv4Addr::from(u32::try_from(n).unwrap_or(u32::MAX)))
    }
}

/// The part of `r` inside `net`, if any.
fn clip(r: IpRange, net: &IpNet) -> Option<IpRange> {
    let (v6, s) = bits(r.start);
    let (v6e, e) = bits(r.end);
    let (nv6, lo) = bits(net.network());
    let (_, hi) = bits(net.broadcast());
    if v6 != v6e || v6 != nv6 || s > e {
        return None;
    }
    let (s, e) = (s.max(lo), e.min(hi));
    (s <= e).then(|| IpRange {
        start: from_bits(v6, s),
        end: from_bits(v6, e),
    })
}

/// Sorts `ranges` and merges overlapping or adjacent ones of the same family; drops malformed.
pub fn merge_ranges(ranges: Vec<IpRange>) -> Vec<IpRange> {
    let mut v: Vec<(bool, u128, u128)> = ranges
        .into_iter()
        .filter_map(|r| {
            let (f, s) = bits(r.start);
            let (fe, e) = bits(r.end);
            (f == fe && s <= e).then_some((f, s, e))
        })
        .collect();
    v.sort_unstable();
    let mut out: Vec<(bool, u128, u128)> = Vec::with_capacity(v.len());
    for (f, s, e) in v {
        match out.last_mut() {
            Some((lf, _, le)) if *lf == f && s <= le.saturating_add(1) => *le = (*le).max(e),
            _ => out.push((f, s, e)),
        }
    }
    out.into_iter()
        .map(|(f, s, e)| IpRange {
            start: from_bits(f, s),
            end: from_bits(f, e),
        })
        .collect()
}

/// Addresses in `net` (saturating: an IPv6 /0 counts `u128::MAX`).
fn net_size(net: &IpNet) -> u128 {
    let host_bits = u32::from(net.max_prefix_len().saturating_sub(net.prefix_len()));
    1u128.checked_shl(host_bits).unwrap_or(u128::MAX)
}

/// Addresses of `cidr` left for pods: all of them, minus the reserved ones (network and
/// broadcast, see the module docs), the gateway and `excludes`.
pub fn family_capacity(cidr: &IpNet, gateway: IpAddr, excludes: &[IpRange]) -> u128 {
    let mut taken: Vec<IpRange> = excludes.iter().filter_map(|r| clip(*r, cidr)).collect();
    taken.push(IpRange::single(gateway));
    for ip in [cidr.network(), cidr.broadcast()] {
        if reserved_kind(cidr, ip).is_some() {
            taken.push(IpRange::single(ip));
        }
    }
    let taken = merge_ranges(taken)
        .into_iter()
        .filter_map(|r| clip(r, cidr))
        .fold(0u128, |acc, r| {
            let len = (bits(r.end).1 - bits(r.start).1).saturating_add(1);
            acc.saturating_add(len)
        });
    net_size(cidr).saturating_sub(taken)
}

/// Addresses of the Subnet left for pods, both families together (saturating).
pub fn capacity(subnet: &ValidSubnet) -> u128 {
    subnet
        .cidrs
        .iter()
        .zip(&subnet.gateways)
        .fold(0u128, |acc, (c, g)| {
            acc.saturating_add(family_capacity(c, *g, &subnet.excludes))
        })
}

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

/// The status of a valid Subnet served by `logical_switch` with `used_ips` addresses held by
/// pods: phase `Active`, effective protocol and gateway, address counts, `Ready=True`.
pub fn active_status(subnet: &ValidSubnet, logical_switch: &str, used_ips: u128) -> SubnetStatus {
    let available = capacity(subnet).saturating_sub(used_ips);
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
        conditions: vec![condition_now(
            CONDITION_READY,
            true,
            REASON_ACTIVE,
            format!("logical switch {logical_switch} serves {cidrs}"),
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    fn t(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }
    fn spec(cidr: &str) -> SubnetSpec {
        SubnetSpec::with_cidr(cidr)
    }
    /// The reasons, as a person reads them.
    fn reasons(spec: &SubnetSpec, ctx: &ValidationContext) -> Vec<String> {
        match validate("red", spec, ctx) {
            Ok(v) => panic!("expected problems, got {v:?}"),
            Err(p) => p.iter().map(ToString::to_string).collect(),
        }
    }
    fn reasons_of(spec: &SubnetSpec) -> Vec<String> {
        reasons(spec, &ValidationContext::default())
    }
    fn valid(spec: &SubnetSpec, ctx: &ValidationContext) -> ValidSubnet {
        match validate("red", spec, ctx) {
            Ok(v) => v,
            Err(p) => panic!("expected valid, got {p:?}"),
        }
    }
    fn valid_of(spec: &SubnetSpec) -> ValidSubnet {
        valid(spec, &ValidationContext::default())
    }
    fn other(cidr: &str, created: Option<i64>) -> OtherSubnet {
        OtherSubnet::from_spec(&spec(cidr), created.map(t))
    }
    fn range(a: &str, b: &str) -> IpRange {
        IpRange {
            start: ip(a),
            end: ip(b),
        }
    }

    // ---- cidr ----------------------------------------------------------------------------

    #[test]
    fn cidr_invalid() {
        assert_eq!(
            reasons_of(&spec("10.0.0.0/33")),
            [r#"cidr "10.0.0.0/33" is not a valid CIDR"#]
        );
        assert_eq!(
            reasons_of(&spec("10.0.0.0")),
            [r#"cidr "10.0.0.0" is not a valid CIDR"#]
        );
        assert_eq!(
            reasons_of(&spec("10.0.0.0/24,banana")),
            [r#"cidr "banana" is not a valid CIDR"#]
        );
    }

    #[test]
    fn cidr_empty() {
        for c in ["", "  "] {
            assert_eq!(
                reasons_of(&spec(c)),
                [
                    "cidr is empty: give one CIDR like 10.16.0.0/16, or an IPv4 and an IPv6 CIDR separated by a comma"
                ]
            );
        }
    }

    #[test]
    fn cidr_host_bits_rejected_with_suggestion() {
        assert_eq!(
            reasons_of(&spec("10.0.0.5/24")),
            ["cidr 10.0.0.5/24 has host bits set (did you mean 10.0.0.0/24?)"]
        );
        assert_eq!(
            reasons_of(&spec("fd00::1/64")),
            ["cidr fd00::1/64 has host bits set (did you mean fd00::/64?)"]
        );
        // the other fields are still checked, against the network
        let mut s = spec("10.0.0.5/24");
        s.gateway = Some("10.1.0.1".into());
        s.exclude_ips = vec!["10.0.0.7".into()];
        assert_eq!(
            reasons_of(&s),
            [
                "cidr 10.0.0.5/24 has host bits set (did you mean 10.0.0.0/24?)",
                "gateway 10.1.0.1 is outside cidr 10.0.0.0/24"
            ]
        );
    }

    #[test]
    fn cidr_too_many_same_family_and_order() {
        assert_eq!(
            reasons_of(&spec("10.0.0.0/24,10.1.0.0/24,fd00::/64")),
            [
                r#"cidr "10.0.0.0/24,10.1.0.0/24,fd00::/64" has 3 entries: give one CIDR, or one IPv4 and one IPv6 CIDR separated by a comma"#
            ]
        );
        assert_eq!(
            reasons_of(&spec("10.0.0.0/24,10.1.0.0/24")),
            [
                r#"cidr "10.0.0.0/24,10.1.0.0/24" has two IPv4 CIDRs: dual stack needs one IPv4 and one IPv6 CIDR"#
            ]
        );
        assert_eq!(
            reasons_of(&spec("fd00::/64,fd01::/64")),
            [
                r#"cidr "fd00::/64,fd01::/64" has two IPv6 CIDRs: dual stack needs one IPv4 and one IPv6 CIDR"#
            ]
        );
        assert_eq!(
            reasons_of(&spec("fd00::/64,10.0.0.0/24")),
            [
                r#"cidr "fd00::/64,10.0.0.0/24" lists IPv6 first: write the IPv4 CIDR first (10.0.0.0/24,fd00::/64)"#
            ]
        );
    }

    #[test]
    fn cidr_reserved_ranges() {
        assert_eq!(
            reasons_of(&spec("127.0.0.0/8")),
            ["cidr 127.0.0.0/8 overlaps the loopback range 127.0.0.0/8"]
        );
        assert_eq!(
            reasons_of(&spec("169.254.1.0/24")),
            ["cidr 169.254.1.0/24 overlaps the link-local range 169.254.0.0/16"]
        );
        assert_eq!(
            reasons_of(&spec("fe80::/64")),
            ["cidr fe80::/64 overlaps the link-local range fe80::/10"]
        );
        assert_eq!(
            reasons_of(&spec("239.0.0.0/24")),
            ["cidr 239.0.0.0/24 overlaps the multicast range 224.0.0.0/4"]
        );
    }

    #[test]
    fn cidr_whitespace_tolerated() {
        let v = valid_of(&spec(" 10.0.0.0/24 , fd00::/64 "));
        assert_eq!(v.cidrs, [net("10.0.0.0/24"), net("fd00::/64")]);
    }

    // ---- protocol ------------------------------------------------------------------------

    #[test]
    fn protocol_derived() {
        assert_eq!(valid_of(&spec("10.0.0.0/24")).protocol, Protocol::IPv4);
        assert_eq!(valid_of(&spec("fd00::/64")).protocol, Protocol::IPv6);
        assert_eq!(
            valid_of(&spec("10.0.0.0/24,fd00::/64")).protocol,
            Protocol::Dual
        );
        let mut s = spec("10.0.0.0/24,fd00::/64");
        s.protocol = Some("Dual".into());
        assert_eq!(valid_of(&s).protocol, Protocol::Dual);
        s.protocol = Some(String::new());
        assert_eq!(valid_of(&s).protocol, Protocol::Dual);
    }

    #[test]
    fn protocol_mismatch() {
        let mut s = spec("10.0.0.0/24");
        s.protocol = Some("Dual".into());
        assert_eq!(
            reasons_of(&s),
            [r#"protocol Dual does not match cidr "10.0.0.0/24", which is IPv4 only"#]
        );
        let mut s = spec("fd00::/64");
        s.protocol = Some("IPv4".into());
        assert_eq!(
            reasons_of(&s),
            [r#"protocol IPv4 does not match cidr "fd00::/64", which is IPv6 only"#]
        );
        let mut s = spec("10.0.0.0/24,fd00::/64");
        s.protocol = Some("IPv6".into());
        assert_eq!(
            reasons_of(&s),
            [
                r#"protocol IPv6 does not match cidr "10.0.0.0/24,fd00::/64", which is dual-stack (IPv4 and IPv6)"#
            ]
        );
    }

    #[test]
    fn protocol_invalid_even_when_cidr_is_bad() {
        let mut s = spec("10.0.0.0/24");
        s.protocol = Some("ipv4".into());
        assert_eq!(
            reasons_of(&s),
            [r#"protocol "ipv4" is not one of IPv4, IPv6, Dual"#]
        );
        s.cidr = "nope".into();
        assert_eq!(
            reasons_of(&s),
            [
                r#"cidr "nope" is not a valid CIDR"#,
                r#"protocol "ipv4" is not one of IPv4, IPv6, Dual"#
            ]
        );
    }

    // ---- gateway -------------------------------------------------------------------------

    #[test]
    fn gateway_default_is_first_usable() {
        let cases = [
            ("10.0.0.0/24", "10.0.0.1"),
            ("10.0.0.0/30", "10.0.0.1"),
            ("10.0.0.0/31", "10.0.0.0"),
            ("fd00::/64", "fd00::1"),
            ("fd00::/127", "fd00::"),
        ];
        for (c, g) in cases {
            assert_eq!(valid_of(&spec(c)).gateways, [ip(g)], "{c}");
        }
        let v = valid_of(&spec("10.16.0.0/16,fd00:10:16::/64"));
        assert_eq!(v.gateways, [ip("10.16.0.1"), ip("fd00:10:16::1")]);
        let mut s = spec("10.0.0.0/24");
        s.gateway = Some(" ".into());
        assert_eq!(valid_of(&s).gateways, [ip("10.0.0.1")]);
    }

    #[test]
    fn gateway_explicit() {
        let mut s = spec("10.0.0.0/24,fd00::/64");
        s.gateway = Some("10.0.0.254, fd00::fe".into());
        assert_eq!(valid_of(&s).gateways, [ip("10.0.0.254"), ip("fd00::fe")]);
        // /31 and /32: every address usable, the gateway may be any of them
        let mut s = spec("10.0.0.0/31");
        s.gateway = Some("10.0.0.1".into());
        assert_eq!(valid_of(&s).gateways, [ip("10.0.0.1")]);
    }

    #[test]
    fn gateway_outside_network_broadcast() {
        let mut s = spec("10.0.0.0/24");
        s.gateway = Some("10.1.0.1".into());
        assert_eq!(
            reasons_of(&s),
            ["gateway 10.1.0.1 is outside cidr 10.0.0.0/24"]
        );
        s.gateway = Some("10.0.0.0".into());
        assert_eq!(
            reasons_of(&s),
            ["gateway 10.0.0.0 is the network address of cidr 10.0.0.0/24"]
        );
        s.gateway = Some("10.0.0.255".into());
        assert_eq!(
            reasons_of(&s),
            ["gateway 10.0.0.255 is the broadcast address of cidr 10.0.0.0/24"]
        );
        let mut s = spec("fd00::/64");
        s.gateway = Some("fd00::".into());
        assert_eq!(
            reasons_of(&s),
            ["gateway fd00:: is the network address of cidr fd00::/64"]
        );
    }

    #[test]
    fn gateway_invalid() {
        let mut s = spec("10.0.0.0/24");
        s.gateway = Some("10.0.0.x".into());
        assert_eq!(
            reasons_of(&s),
            [r#"gateway "10.0.0.x" is not an IP address"#]
        );
        // reported even when cidr is broken too
        s.cidr = "10.0.0.0/99".into();
        assert_eq!(
            reasons_of(&s),
            [
                r#"cidr "10.0.0.0/99" is not a valid CIDR"#,
                r#"gateway "10.0.0.x" is not an IP address"#
            ]
        );
    }

    #[test]
    fn gateway_count_family_order() {
        let mut s = spec("10.0.0.0/24,fd00::/64");
        s.gateway = Some("10.0.0.1".into());
        assert_eq!(
            reasons_of(&s),
            [
                r#"gateway "10.0.0.1" has 1 address(es) but cidr "10.0.0.0/24,fd00::/64" has 2: give one gateway per CIDR, comma-separated"#
            ]
        );
        s.gateway = Some("fd00::1,10.0.0.1".into());
        assert_eq!(
            reasons_of(&s),
            [
                r#"gateway "fd00::1,10.0.0.1" lists IPv6 first: write the IPv4 gateway first, as in cidr"#
            ]
        );
        s.gateway = Some("10.0.0.1,10.0.0.2".into());
        assert_eq!(
            reasons_of(&s),
            ["gateway 10.0.0.2 is IPv4 but cidr fd00::/64 is not"]
        );
        let mut s = spec("10.0.0.0/24");
        s.gateway = Some("fd00::1".into());
        assert_eq!(
            reasons_of(&s),
            ["gateway fd00::1 is IPv6 but cidr 10.0.0.0/24 is not"]
        );
    }

    // ---- excludeIPs ----------------------------------------------------------------------

    #[test]
    fn excludes_both_range_syntaxes() {
        let mut s = spec("10.0.0.0/24,fd00::/64");
        s.exclude_ips = vec![
            "10.0.0.50".into(),
            "10.0.0.10..10.0.0.20".into(),
            " 10.0.0.30-10.0.0.40 ".into(),
            "fd00::10-fd00::20".into(),
            "fd00::30..fd00::40".into(),
        ];
        assert_eq!(
            valid_of(&s).excludes,
            [
                range("10.0.0.10", "10.0.0.20"),
                range("10.0.0.30", "10.0.0.40"),
                range("10.0.0.50", "10.0.0.50"),
                range("fd00::10", "fd00::20"),
                range("fd00::30", "fd00::40"),
            ]
        );
    }

    #[test]
    fn excludes_merged() {
        let mut s = spec("10.0.0.0/24");
        s.exclude_ips = vec![
            "10.0.0.5..10.0.0.9".into(),
            "10.0.0.10".into(),
            "10.0.0.8-10.0.0.12".into(),
            "10.0.0.5".into(),
        ];
        assert_eq!(valid_of(&s).excludes, [range("10.0.0.5", "10.0.0.12")]);
    }

    #[test]
    fn excludes_invalid_reversed_mixed() {
        let mut s = spec("10.0.0.0/24");
        s.exclude_ips = vec![
            "10.0.0.x".into(),
            "10.0.0.9..10.0.0.3".into(),
            "10.0.0.1..fd00::1".into(),
            "".into(),
            "10.0.0.1..".into(),
        ];
        assert_eq!(
            reasons_of(&s),
            [
                r#"excludeIPs entry "10.0.0.x" is not an address or range (like 10.16.0.5, 10.16.0.10..10.16.0.20 or 10.16.0.10-10.16.0.20)"#,
                "excludeIPs range 10.0.0.9..10.0.0.3 is reversed (did you mean 10.0.0.3..10.0.0.9?)",
                "excludeIPs range 10.0.0.1..fd00::1 mixes IPv4 and IPv6",
                r#"excludeIPs entry "" is not an address or range (like 10.16.0.5, 10.16.0.10..10.16.0.20 or 10.16.0.10-10.16.0.20)"#,
                r#"excludeIPs entry "10.0.0.1.." is not an address or range (like 10.16.0.5, 10.16.0.10..10.16.0.20 or 10.16.0.10-10.16.0.20)"#,
            ]
        );
    }

    #[test]
    fn excludes_outside() {
        let mut s = spec("10.0.0.0/24");
        s.exclude_ips = vec![
            "10.1.0.5".into(),
            "10.0.0.250..10.0.1.5".into(),
            "fd00::1".into(),
        ];
        assert_eq!(
            reasons_of(&s),
            [
                "excludeIPs 10.1.0.5 is outside cidr 10.0.0.0/24",
                "excludeIPs 10.0.0.250..10.0.1.5 reaches outside cidr 10.0.0.0/24",
                "excludeIPs fd00::1 is outside cidr 10.0.0.0/24",
            ]
        );
        let mut s = spec("10.0.0.0/24,fd00::/64");
        s.exclude_ips = vec!["fd01::1".into(), "10.0.1.1".into()];
        assert_eq!(
            reasons_of(&s),
            [
                "excludeIPs fd01::1 is outside cidr fd00::/64",
                "excludeIPs 10.0.1.1 is outside cidr 10.0.0.0/24",
            ]
        );
    }

    // ---- vlanID, provider ----------------------------------------------------------------

    #[test]
    fn vlan_range() {
        for bad in [0, 4095, 5000, -1, i64::MAX, i64::MIN] {
            let mut s = spec("10.0.0.0/24");
            s.vlan_id = Some(bad);
            assert_eq!(reasons_of(&s), [format!("vlanID {bad} is outside 1-4094")]);
        }
        for good in [1, 100, 4094] {
            let mut s = spec("10.0.0.0/24");
            s.vlan_id = Some(good);
            assert_eq!(valid_of(&s).vlan_id, Some(good as u16));
        }
    }

    #[test]
    fn provider_and_namespaces_carried() {
        let mut s = spec("10.0.0.0/24");
        s.provider = Some(" ovn ".into());
        s.namespaces = vec!["a".into(), "team-b".into(), "a".into()];
        s.default = true;
        let v = valid_of(&s);
        assert_eq!(v.provider.as_deref(), Some("ovn"));
        assert_eq!(v.namespaces, ["a", "team-b"]);
        assert!(v.default);
        assert_eq!(v.name, "red");
        s.provider = Some(String::new());
        assert_eq!(valid_of(&s).provider, None);
    }

    #[test]
    fn namespace_invalid() {
        let mut s = spec("10.0.0.0/24");
        s.namespaces = vec!["Team_A".into(), "-x".into(), "ok".into(), "a".repeat(64)];
        assert_eq!(
            reasons_of(&s),
            [
                r#"namespaces entry "Team_A" is not a valid namespace name (lowercase letters, digits and '-', at most 63)"#.to_string(),
                r#"namespaces entry "-x" is not a valid namespace name (lowercase letters, digits and '-', at most 63)"#.to_string(),
                format!(r#"namespaces entry "{}" is not a valid namespace name (lowercase letters, digits and '-', at most 63)"#, "a".repeat(64)),
            ]
        );
    }

    // ---- external mode -------------------------------------------------------------------

    fn external_ctx() -> ValidationContext {
        ValidationContext {
            external: Some(ExternalContext {
                switches: ["ls-zstack-1".to_string()].into(),
                platform_excludes: [(
                    "ls-zstack-1".to_string(),
                    vec![
                        range("10.0.0.1", "10.0.0.1"),
                        range("10.0.0.200", "10.0.1.10"), // clipped to the cidr
                        range("192.168.0.1", "192.168.0.9"), // outside: dropped
                        range("10.0.0.9", "10.0.0.3"),    // malformed: dropped
                    ],
                )]
                .into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn external_switch_needs_external_mode() {
        let mut s = spec("10.0.0.0/24");
        s.external_logical_switch = Some("ls-zstack-1".into());
        assert_eq!(
            reasons_of(&s),
            [
                r#"externalLogicalSwitch "ls-zstack-1" needs external mode; this controller runs standalone"#
            ]
        );
    }

    #[test]
    fn nat_outgoing_is_refused_in_external_mode_and_kept_standalone() {
        for v in [true, false] {
            let mut s = spec("10.0.0.0/24");
            s.external_logical_switch = Some("ls-zstack-1".into());
            s.nat_outgoing = Some(v);
            assert_eq!(
                reasons(&s, &external_ctx()),
                [
                    "natOutgoing does not apply in external mode: the platform's router carries the pods' egress (its NAT rules decide); remove the field"
                ]
            );
            let problems = validate("x", &s, &external_ctx()).unwrap_err();
            assert_eq!(problems[0].field(), "natOutgoing");
        }
        let mut s = spec("10.0.0.0/24");
        assert!(
            validate("x", &s, &ValidationContext::default())
                .unwrap()
                .nat_outgoing
        );
        s.nat_outgoing = Some(false);
        assert!(
            !validate("x", &s, &ValidationContext::default())
                .unwrap()
                .nat_outgoing
        );
    }

    #[test]
    fn external_switch_not_found() {
        let mut s = spec("10.0.0.0/24");
        s.external_logical_switch = Some("ls-zstack-2".into());
        assert_eq!(
            reasons(&s, &external_ctx()),
            [r#"externalLogicalSwitch "ls-zstack-2" not found in the OVN Northbound database"#]
        );
    }

    #[test]
    fn external_switch_platform_excludes_merged() {
        let mut s = spec("10.0.0.0/24");
        s.external_logical_switch = Some("ls-zstack-1".into());
        s.gateway = Some("10.0.0.1".into());
        s.exclude_ips = vec!["10.0.0.2..10.0.0.5".into()];
        let v = valid(&s, &external_ctx());
        assert_eq!(v.external_logical_switch.as_deref(), Some("ls-zstack-1"));
        assert_eq!(
            v.excludes,
            [
                range("10.0.0.1", "10.0.0.5"),
                range("10.0.0.200", "10.0.0.255")
            ]
        );
        // without a switch, external mode changes nothing
        let v = valid(&spec("10.0.0.0/24"), &external_ctx());
        assert!(v.excludes.is_empty());
    }

    // ---- conflicts with the cluster ------------------------------------------------------

    #[test]
    fn overlaps_older_subnet() {
        let ctx = ValidationContext {
            created: Some(t(200)),
            others: [("blue".to_string(), other("10.0.0.0/16", Some(100)))].into(),
            ..Default::default()
        };
        assert_eq!(
            reasons(&spec("10.0.0.0/24"), &ctx),
            [r#"cidr 10.0.0.0/24 overlaps Subnet "blue" (10.0.0.0/16)"#]
        );
        // the older one stays valid: the newcomer is the one that fails
        let older_ctx = ValidationContext {
            created: Some(t(100)),
            others: [("blue".to_string(), other("10.0.0.0/24", Some(200)))].into(),
            ..Default::default()
        };
        valid(&spec("10.0.0.0/16"), &older_ctx);
    }

    #[test]
    fn overlap_order_ties_and_unknown_times() {
        // same timestamp: the name decides ("blue" < "red", so red fails)
        let ctx = ValidationContext {
            created: Some(t(100)),
            others: [("blue".to_string(), other("10.0.0.0/24", Some(100)))].into(),
            ..Default::default()
        };
        assert_eq!(
            reasons(&spec("10.0.0.0/24"), &ctx),
            [r#"cidr 10.0.0.0/24 overlaps Subnet "blue" (10.0.0.0/24)"#]
        );
        let ctx = ValidationContext {
            created: Some(t(100)),
            others: [("zed".to_string(), other("10.0.0.0/24", Some(100)))].into(),
            ..Default::default()
        };
        valid(&spec("10.0.0.0/24"), &ctx);
        // not yet stored (no timestamp): newest
        let ctx = ValidationContext {
            created: None,
            others: [("zed".to_string(), other("10.0.0.0/24", Some(100)))].into(),
            ..Default::default()
        };
        assert_eq!(
            reasons(&spec("10.0.0.0/24"), &ctx),
            [r#"cidr 10.0.0.0/24 overlaps Subnet "zed" (10.0.0.0/24)"#]
        );
        // its own entry is ignored
        let ctx = ValidationContext {
            created: Some(t(100)),
            others: [("red".to_string(), other("10.0.0.0/24", Some(1)))].into(),
            ..Default::default()
        };
        valid(&spec("10.0.0.0/24"), &ctx);
    }

    #[test]
    fn overlaps_dual_stack_only_same_family() {
        let ctx = ValidationContext {
            created: Some(t(200)),
            others: [
                (
                    "blue".to_string(),
                    other("10.1.0.0/16,fd00::/48", Some(100)),
                ),
                ("green".to_string(), other("10.2.0.0/16", Some(100))),
            ]
            .into(),
            ..Default::default()
        };
        assert_eq!(
            reasons(&spec("10.0.0.0/16,fd00:0:0:1::/64"), &ctx),
            [r#"cidr fd00:0:0:1::/64 overlaps Subnet "blue" (fd00::/48)"#]
        );
    }

    #[test]
    fn other_subnet_from_spec_is_lenient() {
        let o = OtherSubnet::from_spec(&spec("10.0.0.5/24, junk, fd00::/64"), None);
        assert_eq!(o.cidrs, [net("10.0.0.0/24"), net("fd00::/64")]);
    }

    #[test]
    fn overlaps_service_join_nodes() {
        let ctx = ValidationContext {
            service_cidrs: vec![net("10.96.0.0/16")],
            join_cidrs: vec![net("100.64.0.0/16")],
            node_networks: vec![net("192.168.1.0/24")],
            ..Default::default()
        };
        assert_eq!(
            reasons(&spec("10.96.0.0/12"), &ctx),
            ["cidr 10.96.0.0/12 overlaps the service CIDR 10.96.0.0/16"]
        );
        assert_eq!(
            reasons(&spec("100.64.0.0/24"), &ctx),
            ["cidr 100.64.0.0/24 overlaps the join CIDR 100.64.0.0/16"]
        );
        assert_eq!(
            reasons(&spec("192.168.0.0/16"), &ctx),
            [
                "cidr 192.168.0.0/16 overlaps the node network 192.168.1.0/24 (only an underlay Subnet, with vlanID or externalLogicalSwitch, may)"
            ]
        );
        // an underlay Subnet lives on the node network
        let mut s = spec("192.168.1.0/24");
        s.vlan_id = Some(10);
        valid(&s, &ctx);
        valid(&spec("10.16.0.0/16"), &ctx);
    }

    #[test]
    fn default_taken_by_older() {
        let mut blue = other("10.1.0.0/16", Some(1));
        blue.default = true;
        let ctx = ValidationContext {
            created: Some(t(2)),
            others: [("blue".to_string(), blue.clone())].into(),
            ..Default::default()
        };
        let mut s = spec("10.0.0.0/16");
        s.default = true;
        assert_eq!(
            reasons(&s, &ctx),
            [r#"default is true but Subnet "blue" is already the default Subnet"#]
        );
        s.default = false;
        valid(&s, &ctx);
        // the older default stays
        let ctx = ValidationContext {
            created: Some(t(0)),
            others: [("blue".to_string(), blue)].into(),
            ..Default::default()
        };
        s.default = true;
        valid(&s, &ctx);
    }

    #[test]
    fn namespace_taken_by_older() {
        let mut blue = other("10.1.0.0/16", Some(1));
        blue.namespaces = vec!["team-a".into()];
        let ctx = ValidationContext {
            created: Some(t(2)),
            others: [("blue".to_string(), blue)].into(),
            ..Default::default()
        };
        let mut s = spec("10.0.0.0/16");
        s.namespaces = vec!["team-a".into(), "team-b".into()];
        assert_eq!(
            reasons(&s, &ctx),
            [r#"namespace "team-a" already belongs to Subnet "blue""#]
        );
    }

    // ---- capacity ------------------------------------------------------------------------

    #[test]
    fn no_usable_addresses() {
        assert_eq!(
            reasons_of(&spec("10.0.0.1/32")),
            [
                "cidr 10.0.0.1/32 has no usable addresses: the gateway, excludeIPs and reserved addresses take them all"
            ]
        );
        assert_eq!(
            reasons_of(&spec("fd00::1/128")),
            [
                "cidr fd00::1/128 has no usable addresses: the gateway, excludeIPs and reserved addresses take them all"
            ]
        );
        let mut s = spec("10.0.0.0/30");
        s.exclude_ips = vec!["10.0.0.2".into()];
        assert_eq!(
            reasons_of(&s),
            [
                "cidr 10.0.0.0/30 has no usable addresses: the gateway, excludeIPs and reserved addresses take them all"
            ]
        );
        // the platform can use the last addresses up too
        let mut s = spec("10.0.0.0/30");
        s.external_logical_switch = Some("ls-zstack-1".into());
        let mut ctx = external_ctx();
        if let Some(e) = ctx.external.as_mut() {
            e.platform_excludes
                .insert("ls-zstack-1".into(), vec![range("10.0.0.2", "10.0.0.2")]);
        }
        assert_eq!(
            reasons(&s, &ctx),
            [
                "cidr 10.0.0.0/30 has no usable addresses: the gateway, excludeIPs and reserved addresses take them all"
            ]
        );
        // one address left is enough
        valid_of(&spec("10.0.0.0/30"));
        valid_of(&spec("10.0.0.0/31"));
    }

    #[test]
    fn capacity_counts() {
        assert_eq!(capacity(&valid_of(&spec("10.0.0.0/24"))), 253);
        assert_eq!(capacity(&valid_of(&spec("10.0.0.0/31"))), 1);
        assert_eq!(capacity(&valid_of(&spec("fd00::/120"))), 254);
        assert_eq!(capacity(&valid_of(&spec("fd00::/64"))), (1u128 << 64) - 2);
        let mut s = spec("10.0.0.0/24,fd00::/120");
        s.exclude_ips = vec!["10.0.0.1..10.0.0.10".into(), "fd00::ff".into()];
        // v4: 256 - net - bcast - 10 (gateway inside the excludes); v6: 256 - net - gw - 1
        assert_eq!(capacity(&valid_of(&s)), 244 + 253);
        assert_eq!(family_capacity(&net("::/0"), ip("::1"), &[]), u128::MAX - 2);
    }

    // ---- everything at once --------------------------------------------------------------

    #[test]
    fn all_problems_collected() {
        let s = SubnetSpec {
            cidr: "10.0.0.0/24".into(),
            gateway: Some("10.1.0.1".into()),
            exclude_ips: vec!["nope".into()],
            protocol: Some("IPv6".into()),
            vlan_id: Some(5000),
            provider: None,
            external_logical_switch: Some("ls".into()),
            namespaces: vec!["BAD".into()],
            default: false,
            nat_outgoing: None,
        };
        let p = validate("red", &s, &ValidationContext::default()).unwrap_err();
        let fields: Vec<&str> = p.iter().map(SubnetProblem::field).collect();
        assert_eq!(
            fields,
            [
                "protocol",
                "gateway",
                "excludeIPs",
                "vlanID",
                "externalLogicalSwitch",
                "namespaces"
            ]
        );
        for problem in &p {
            assert!(
                problem.to_string().starts_with(problem.field())
                    || problem.to_string().starts_with("namespace"),
                "{problem}"
            );
        }
    }

    // ---- status --------------------------------------------------------------------------

    #[test]
    fn failed_status_joins_reasons() {
        let mut s = spec("10.0.0.0/24");
        s.vlan_id = Some(5000);
        s.gateway = Some("10.1.0.1".into());
        let p = validate("red", &s, &ValidationContext::default()).unwrap_err();
        let st = failed_status(&p);
        let want = "gateway 10.1.0.1 is outside cidr 10.0.0.0/24; vlanID 5000 is outside 1-4094";
        assert_eq!(st.phase, SubnetPhase::Failed);
        assert_eq!(st.reason, want);
        assert_eq!(st.available_ips, None);
        let c = st.condition("Ready").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "InvalidSpec")
        );
        assert_eq!(c.message, want);
        assert_eq!(failed_status(&[]).reason, "the spec is invalid");
    }

    #[test]
    fn active_status_numbers() {
        let v = valid_of(&spec("10.0.0.0/24,fd00::/120"));
        let st = active_status(&v, "red", 3);
        assert_eq!(st.phase, SubnetPhase::Active);
        assert_eq!(st.reason, "");
        assert_eq!(st.protocol.as_deref(), Some("Dual"));
        assert_eq!(st.gateway.as_deref(), Some("10.0.0.1,fd00::1"));
        assert_eq!(st.available_ips, Some(253.0 + 254.0 - 3.0));
        assert_eq!(st.used_ips, Some(3.0));
        assert_eq!(st.logical_switch.as_deref(), Some("red"));
        let c = st.condition("Ready").unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Active"));
        assert_eq!(
            c.message,
            "logical switch red serves 10.0.0.0/24,fd00::/120"
        );
        // JSON: numbers, printed plainly by kubectl
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(json["availableIPs"], serde_json::json!(504.0));
        assert_eq!(json["usedIPs"], serde_json::json!(3.0));
        assert!(json.get("reason").is_none());
        // more used than capacity: no underflow
        assert_eq!(active_status(&v, "red", 10_000).available_ips, Some(0.0));
    }

    #[test]
    fn transition_times_kept_when_status_unchanged() {
        let v = valid_of(&spec("10.0.0.0/24"));
        let mut old = active_status(&v, "red", 0);
        old.conditions[0].last_transition_time = t(5);
        let new = active_status(&v, "red", 1)
            .keep_transition_times(Some(&old))
            .with_observed_generation(Some(7));
        assert_eq!(new.conditions[0].last_transition_time, t(5));
        assert_eq!(new.conditions[0].observed_generation, Some(7));
        let failed =
            failed_status(&[SubnetProblem::VlanOutOfRange(0)]).keep_transition_times(Some(&old));
        assert_ne!(failed.conditions[0].last_transition_time, t(5));
        let fresh = active_status(&v, "red", 1).keep_transition_times(None);
        assert_ne!(fresh.conditions[0].last_transition_time, t(5));
    }

    // ---- properties ----------------------------------------------------------------------

    /// Strings that look like addresses often enough to reach deep into the parsers.
    fn addressish() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[0-9a-f:./,\\- ]{0,40}",
            "([0-9]{1,3}\\.){3}[0-9]{1,3}(/[0-9]{1,3})?(,[0-9a-f:]{2,20}(/[0-9]{1,3})?)?",
            "([0-9]{1,3}\\.){3}[0-9]{1,3}(\\.\\.|-)([0-9]{1,3}\\.){3}[0-9]{1,3}",
        ]
    }

    fn any_spec() -> impl Strategy<Value = SubnetSpec> {
        (
            addressish(),
            proptest::option::of(addressish()),
            proptest::collection::vec(addressish(), 0..4),
            proptest::option::of(prop_oneof![
                any::<String>(),
                Just("IPv4".to_string()),
                Just("IPv6".to_string()),
                Just("Dual".to_string())
            ]),
            proptest::option::of(any::<i64>()),
            proptest::option::of(any::<String>()),
            proptest::option::of(prop_oneof![
                any::<String>(),
                Just("ls-zstack-1".to_string())
            ]),
            proptest::collection::vec(any::<String>(), 0..3),
            any::<bool>(),
        )
            .prop_map(
                |(
                    cidr,
                    gateway,
                    exclude_ips,
                    protocol,
                    vlan_id,
                    provider,
                    ext,
                    namespaces,
                    default,
                )| {
                    SubnetSpec {
                        cidr,
                        gateway,
                        exclude_ips,
                        protocol,
                        vlan_id,
                        provider,
                        external_logical_switch: ext,
                        namespaces,
                        default,
                        nat_outgoing: None,
                    }
                },
            )
    }

    fn v4_net() -> impl Strategy<Value = IpNet> {
        (any::<u32>(), 8u8..=30)
            .prop_map(|(a, p)| {
                IpNet::new(IpAddr::V4(Ipv4Addr::from(a)), p)
                    .unwrap()
                    .trunc()
            })
            .prop_filter("not reserved", |n| {
                reserved_ranges().iter().all(|(_, r)| !overlaps(n, r))
            })
    }

    fn v6_net() -> impl Strategy<Value = IpNet> {
        (any::<u128>(), 48u8..=126)
            .prop_map(|(a, p)| {
                IpNet::new(IpAddr::V6(Ipv6Addr::from(a)), p)
                    .unwrap()
                    .trunc()
            })
            .prop_filter("not reserved", |n| {
                reserved_ranges().iter().all(|(_, r)| !overlaps(n, r))
            })
    }

    /// A gateway inside `n` that is not reserved, or `None` for the default.
    fn gateway_in(n: IpNet) -> impl Strategy<Value = Option<IpAddr>> {
        let (v6, lo) = bits(n.network());
        let (_, hi) = bits(n.broadcast());
        proptest::option::of((lo + 1..hi).prop_map(move |b| from_bits(v6, b)))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn random_specs_never_panic(s in any_spec(), created in proptest::option::of(0i64..10)) {
            let ctx = ValidationContext {
                created: created.map(t),
                others: [("blue".to_string(), OtherSubnet {
                    cidrs: vec![net("10.0.0.0/8"), net("fd00::/16")],
                    created: Some(t(5)),
                    default: true,
                    namespaces: vec!["a".into()],
                    yields: false,
                })].into(),
                service_cidrs: vec![net("10.96.0.0/16")],
                join_cidrs: vec![net("100.64.0.0/16")],
                node_networks: vec![net("192.168.0.0/16")],
                external: created.map(|_| external_ctx().external.unwrap_or_default()),
                yields: false,
            };
            match validate("red", &s, &ctx) {
                Ok(v) => {
                    prop_assert_eq!(v.cidrs.len(), v.gateways.len());
                    prop_assert!(capacity(&v) > 0);
                    let _ = active_status(&v, "red", 1);
                }
                Err(p) => {
                    prop_assert!(!p.is_empty());
                    let st = failed_status(&p);
                    prop_assert!(!st.reason.is_empty());
                }
            }
            let _ = OtherSubnet::from_spec(&s, None);
        }

        #[test]
        fn valid_single_stack_round_trips(
            (n, gw) in prop_oneof![v4_net(), v6_net()].prop_flat_map(|n| (Just(n), gateway_in(n))),
            with_protocol in any::<bool>(),
        ) {
            let mut s = spec(&n.to_string());
            s.gateway = gw.map(|g| g.to_string());
            if with_protocol {
                s.protocol = Some(if n.addr().is_ipv4() { "IPv4" } else { "IPv6" }.into());
            }
            let v = valid_of(&s);
            prop_assert_eq!(&v.cidrs, &vec![n]);
            prop_assert_eq!(v.protocol, if n.addr().is_ipv4() { Protocol::IPv4 } else { Protocol::IPv6 });
            prop_assert_eq!(v.gateways.clone(), vec![gw.unwrap_or_else(|| default_gateway(&n))]);
            prop_assert!(n.contains(&v.gateways[0]));
            prop_assert!(reserved_kind(&n, v.gateways[0]).is_none());
            prop_assert!(capacity(&v) > 0);
        }

        #[test]
        fn valid_dual_stack_round_trips(
            (n4, g4) in v4_net().prop_flat_map(|n| (Just(n), gateway_in(n))),
            (n6, g6) in v6_net().prop_flat_map(|n| (Just(n), gateway_in(n))),
            with_protocol in any::<bool>(),
        ) {
            let mut s = spec(&format!("{n4},{n6}"));
            let g4v = g4.unwrap_or_else(|| default_gateway(&n4));
            let g6v = g6.unwrap_or_else(|| default_gateway(&n6));
            if g4.is_some() || g6.is_some() {
                s.gateway = Some(format!("{g4v},{g6v}"));
            }
            if with_protocol {
                s.protocol = Some("Dual".into());
            }
            let v = valid_of(&s);
            prop_assert_eq!(v.protocol, Protocol::Dual);
            prop_assert_eq!(v.cidrs, vec![n4, n6]);
            prop_assert_eq!(v.gateways, vec![g4v, g6v]);
        }
    }
}
