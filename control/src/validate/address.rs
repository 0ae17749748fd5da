//! Address arithmetic of a Subnet: overlaps, ranges (clip, merge) and how many addresses a
//! Subnet can hand out; reserved addresses and the default gateway by the allocator's
//! rule ([`AddressSpace`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use crate::address_space::{AddressSpace, Reserved};
use crate::model::{IpRange, ValidSubnet};

/// Whether `ip` is reserved in `net` (network/broadcast), and which
/// ([`AddressSpace`]'s rule, the allocator's).
pub(super) fn reserved_kind(net: &IpNet, ip: IpAddr) -> Option<&'static str> {
    AddressSpace::new(*net).reserved(ip).map(Reserved::name)
}

/// The first address of `net` that is not reserved: the default gateway.
pub fn default_gateway(net: &IpNet) -> IpAddr {
    AddressSpace::new(*net).default_gateway()
}

/// Whether two networks share an address.
pub fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

// ---- address arithmetic --------------------------------------------------------------------

/// An address as (is IPv6, number).
pub(super) fn bits(ip: IpAddr) -> (bool, u128) {
    (ip.is_ipv6(), crate::address_space::to_u128(ip))
}

pub(super) fn from_bits(v6: bool, n: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(n))
    } else {
        IpAddr::V4(Ipv4Addr::from(u32::try_from(n).unwrap_or(u32::MAX)))
    }
}

/// The part of `r` inside `net`, if any.
pub(super) fn clip(r: IpRange, net: &IpNet) -> Option<IpRange> {
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
pub(super) fn net_size(net: &IpNet) -> u128 {
    AddressSpace::new(*net).size()
}

/// Addresses of `cidr` left for pods: all of them, minus the reserved ones (network and
/// broadcast, see the module docs), the gateway and `excludes`.
pub fn family_capacity(cidr: &IpNet, gateway: IpAddr, excludes: &[IpRange]) -> u128 {
    let space = AddressSpace::new(*cidr);
    let mut taken: Vec<IpRange> = excludes.iter().filter_map(|r| clip(*r, cidr)).collect();
    taken.push(IpRange::single(gateway));
    taken.extend(
        space
            .reserved_addrs()
            .map(|x| IpRange::single(space.addr(x))),
    );
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
