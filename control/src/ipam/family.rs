//! One address family of a subnet: its CIDR, reserved addresses, excludes, the free
//! space as a [`RangeSet`], who holds what, and the round-robin cursor.
//!
//! Addresses are handled as `u128` (IPv4 widened from `u32`), so both families share
//! the interval-set code.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use ipnet::IpNet;

use crate::address_space::{AddressSpace, Reserved};
use crate::model::IpRange;

use super::hash::FxBuild;
use super::range_set::RangeSet;

/// Who holds an address: a pod key `<namespace>/<pod>` or a VM key `vm:<namespace>/<vmi>`.
pub type Owner = Arc<str>;

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// The family of `ip`.
    pub fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// `ip` as a number (IPv4 widened).
    pub fn to_u128(ip: IpAddr) -> u128 {
        crate::address_space::to_u128(ip)
    }

    /// The address numbered `x` in this family (IPv4 keeps the low 32 bits).
    pub fn addr(self, x: u128) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(Ipv4Addr::from(x as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(x)),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

/// Why a family refuses to hand out a given address (the subnet adds names to it).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal<'a> {
    Outside,
    Used(&'a Owner),
    Reserved(ReservedKind),
    Excluded,
}

/// The allocator of one family of one subnet.
#[derive(Clone, Debug)]
pub struct FamilyPool {
    family: Family,
    cidr: IpNet,
    first: u128,
    last: u128,
    /// Its reserved addresses: [`AddressSpace`], validation's rule too.
    space: AddressSpace,
    gateway: Option<u128>,
    /// `excludes`, clipped to the CIDR.
    excludes: RangeSet,
    /// Usable (not reserved, not excluded) and not used.
    free: RangeSet,
    used: HashMap<u128, Owner, FxBuild>,
    /// Where the next dynamic allocation starts looking.
    cursor: u128,
}

impl FamilyPool {
    /// A pool for `cidr` with nothing used. `gateway` and `excludes` outside the CIDR or
    /// of the other family are ignored.
    pub fn new(cidr: IpNet, gateway: Option<IpAddr>, excludes: &[IpRange]) -> Self {
        let space = AddressSpace::new(cidr);
        let cidr = space.cidr();
        let family = Family::of(cidr.network());
        let (first, last) = (space.first(), space.last());
        let mut pool = FamilyPool {
            family,
            cidr,
            first,
            last,
            space,
            gateway: None,
            excludes: RangeSet::new(),
            free: RangeSet::new(),
            used: HashMap::default(),
            cursor: first,
        };
        pool.configure(gateway, excludes);
        pool
    }

    /// Applies a new gateway and excludes and rebuilds the free space; addresses in use
    /// stay in use even if now excluded.
    pub(crate) fn configure(&mut self, gateway: Option<IpAddr>, excludes: &[IpRange]) {
        self.gateway = gateway
            .filter(|g| self.cidr.contains(g))
            .map(Family::to_u128);

        self.excludes = RangeSet::new();
        for r in excludes {
            if Family::of(r.start) != self.family || Family::of(r.end) != self.family {
                continue;
            }
            let (s, e) = (Family::to_u128(r.start), Family::to_u128(r.end));
            self.excludes
                .insert_range(s.max(self.first), e.min(self.last));
        }

        self.free = RangeSet::from_range(self.first, self.last);
        for x in self.space.reserved_addrs().chain(self.gateway) {
            self.free.remove(x);
        }
        for (s, e) in self.excludes.ranges() {
            self.free.remove_range(s, e);
        }
        for &x in self.used.keys() {
            self.free.remove(x);
        }
    }

    pub fn family(&self) -> Family {
        self.family
    }

    pub fn cidr(&self) -> IpNet {
        self.cidr
    }

    /// True when `ip` is of this family and inside the CIDR.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.cidr.contains(&ip)
    }

    /// Network, broadcast or gateway.
    pub(crate) fn reserved_kind(&self, x: u128) -> Option<ReservedKind> {
        if let Some(r) = self.space.reserved_at(x) {
            Some(match r {
                Reserved::Network => ReservedKind::Network,
                Reserved::Broadcast => ReservedKind::Broadcast,
            })
        } else if self.gateway == Some(x) {
            Some(ReservedKind::Gateway)
        } else {
            None
        }
    }

    pub fn is_excluded(&self, ip: IpAddr) -> bool {
        self.contains(ip) && self.excludes.contains(Family::to_u128(ip))
    }

    /// Whether `ip` could be handed out now, and if not, why.
    pub(crate) fn check(&self, ip: IpAddr) -> Result<u128, Refusal<'_>> {
        if !self.contains(ip) {
            return Err(Refusal::Outside);
        }
        let x = Family::to_u128(ip);
        if let Some(owner) = self.used.get(&x) {
            return Err(Refusal::Used(owner));
        }
        if let Some(kind) = self.reserved_kind(x) {
            return Err(Refusal::Reserved(kind));
        }
        if !self.free.contains(x) {
            return Err(Refusal::Excluded);
        }
        Ok(x)
    }

    /// The address the next dynamic allocation would return.
    pub fn peek_next(&self) -> Option<IpAddr> {
        self.free
            .first_at_or_after(self.cursor)
            .or_else(|| self.free.first())
            .map(|x| self.family.addr(x))
    }

    /// Hands out `ip` (which [`check`](Self::check) accepted) to `owner`; a dynamic
    /// allocation (`advance`) moves the cursor past it.
    pub(crate) fn take(&mut self, ip: IpAddr, owner: &Owner, advance: bool) -> bool {
        if !self.contains(ip) {
            return false;
        }
        let x = Family::to_u128(ip);
        if !self.free.remove(x) {
            return false;
        }
        self.used.insert(x, Owner::clone(owner));
        if advance {
            self.cursor = if x >= self.last { self.first } else { x + 1 };
        }
        true
    }

    /// The next free address, handed out to `owner` (round-robin).
    pub fn take_next(&mut self, owner: &Owner) -> Option<IpAddr> {
        let ip = self.peek_next()?;
        self.take(ip, owner, true).then_some(ip)
    }

    /// Marks `ip` used by `owner` even if excluded (restore of an existing assignment).
    /// Refuses (false) addresses outside the CIDR, reserved, or used by anyone.
    pub(crate) fn mark_used(&mut self, ip: IpAddr, owner: &Owner) -> bool {
        if !self.contains(ip) {
            return false;
        }
        let x = Family::to_u128(ip);
        if self.reserved_kind(x).is_some() || self.used.contains_key(&x) {
            return false;
        }
        self.free.remove(x);
        self.used.insert(x, Owner::clone(owner));
        true
    }

    /// Frees `ip`, returning who held it. Excluded or reserved addresses do not go back
    /// into the free space.
    pub fn release(&mut self, ip: IpAddr) -> Option<Owner> {
        if !self.contains(ip) {
            return None;
        }
        let x = Family::to_u128(ip);
        let owner = self.used.remove(&x)?;
        if self.reserved_kind(x).is_none() && !self.excludes.contains(x) {
            self.free.insert(x);
        }
        Some(owner)
    }

    pub fn owner_of(&self, ip: IpAddr) -> Option<&Owner> {
        if !self.contains(ip) {
            return None;
        }
        self.used.get(&Family::to_u128(ip))
    }

    /// Addresses that can still be handed out.
    pub fn available(&self) -> u128 {
        self.free.len()
    }

    /// Addresses handed out.
    pub fn used(&self) -> u128 {
        self.used.len() as u128
    }

    /// Who holds what, in no particular order.
    pub fn assignments(&self) -> impl Iterator<Item = (IpAddr, &Owner)> + '_ {
        self.used.iter().map(|(&x, o)| (self.family.addr(x), o))
    }

    /// Fragments of the free space and the excludes: the size of the representation.
    pub fn range_count(&self) -> usize {
        self.free.range_count() + self.excludes.range_count()
    }

    /// Approximate heap bytes of this pool (free/exclude ranges and the used map).
    pub fn heap_bytes_estimate(&self) -> usize {
        let per_used = size_of::<u128>() + size_of::<Owner>() + 1;
        self.free.heap_bytes_estimate()
            + self.excludes.heap_bytes_estimate()
            + self.used.capacity() * per_used
    }
}

/// An address a subnet never hands out, whatever its excludes say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReservedKind {
    /// The first address of the CIDR (IPv4 network address, IPv6 subnet-router anycast).
    Network,
    /// The last address of an IPv4 CIDR.
    Broadcast,
    /// The subnet's gateway.
    Gateway,
}

impl fmt::Display for ReservedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReservedKind::Network => "network address",
            ReservedKind::Broadcast => "broadcast address",
            ReservedKind::Gateway => "gateway",
        })
    }
}
