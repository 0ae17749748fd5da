//! [`validate`]: a Subnet spec field by field, then against the others (the decisions are
//! in the module above).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::SubnetSpec;
use crate::model::{IpRange, Protocol, ValidSubnet};

use super::address::*;
use super::context::*;
use super::problem::*;

pub(super) fn family(ip: IpAddr) -> &'static str {
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
            Some(ext) => {
                platform = ext.platform_excludes.get(ls).cloned().unwrap_or_default();
                if let (Some(cidrs), Some(declared)) = (&cidrs, ext.switch_networks.get(ls)) {
                    check_platform_networks(ls, cidrs, declared, &mut problems);
                }
            }
        }
    }
    let mut security_groups: Vec<String> = Vec::new();
    for g in spec.security_groups.iter().map(|g| g.trim()) {
        if !g.is_empty() && !security_groups.iter().any(|s| s == g) {
            security_groups.push(g.to_string());
        }
    }
    if !security_groups.is_empty() {
        match (&ctx.external, &external_logical_switch) {
            (Some(ext), Some(_)) if !ext.security_groups => {
                problems.push(SubnetProblem::SecurityGroupsOff)
            }
            (Some(ext), Some(_)) => problems.extend(
                security_groups
                    .iter()
                    .filter(|g| !ext.port_groups.contains(*g))
                    .map(|g| SubnetProblem::SecurityGroupNotFound(g.clone())),
            ),
            _ => problems.push(SubnetProblem::SecurityGroupsNeedPlatformSwitch),
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
        security_groups,
        namespaces,
        default: spec.default,
        nat_outgoing: spec.nat_outgoing.unwrap_or(true),
    })
}

pub(super) fn non_empty(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// Creation order: the managed default Subnet after every other; then known timestamps
/// first (oldest first), unknown last; ties by name.
pub(super) fn order_key<'a>(
    yields: bool,
    created: Option<&'a Time>,
    name: &'a str,
) -> (bool, bool, Option<&'a Time>, &'a str) {
    (yields, created.is_none(), created, name)
}

/// `cidr` → one CIDR per family, IPv4 first, for the cross-checks; `None` when the field is
/// unusable. Host bits are a problem, but the checks go on with the network so that the other
/// fields' problems are reported in the same pass (the result is an error either way).
pub(super) fn parse_cidr_field(
    field: &str,
    problems: &mut Vec<SubnetProblem>,
) -> Option<Vec<IpNet>> {
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

pub(super) fn derived_protocol(cidrs: &[IpNet]) -> Protocol {
    match cidrs {
        [IpNet::V4(_)] => Protocol::IPv4,
        [IpNet::V6(_)] => Protocol::IPv6,
        _ => Protocol::Dual,
    }
}

pub(super) fn check_protocol(
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

pub(super) fn parse_gateway_field(
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
pub(super) fn parse_exclude(entry: &str) -> Result<IpRange, SubnetProblem> {
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

pub(super) fn parse_excludes(
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
pub(super) fn reserved_ranges() -> [(&'static str, IpNet); 9] {
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

pub(super) fn check_overlaps(
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
pub(super) fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| ok(c) || *c == b'-')
        && b.first().is_some_and(ok)
        && b.last().is_some_and(ok)
}

/// A platform switch whose declared network of a family (its router port's, its
/// `other_config:subnet`) is not the Subnet's CIDR of that family: the pods would get
/// addresses the platform's router does not route. A switch that declares nothing for a
/// family is taken as the Subnet says.
fn check_platform_networks(
    switch: &str,
    cidrs: &[IpNet],
    declared: &[(IpNet, String)],
    problems: &mut Vec<SubnetProblem>,
) {
    for cidr in cidrs {
        let same_family: Vec<&(IpNet, String)> = declared
            .iter()
            .filter(|(n, _)| n.addr().is_ipv4() == cidr.addr().is_ipv4())
            .collect();
        if let Some((platform, source)) = same_family.first()
            && !same_family.iter().any(|(n, _)| n.trunc() == *cidr)
        {
            problems.push(SubnetProblem::ExternalSwitchCidrMismatch {
                switch: switch.to_string(),
                cidr: *cidr,
                platform: platform.trunc(),
                declared_by: source.clone(),
            });
        }
    }
}
