//! The per-subnet allocator: one [`FamilyPool`] per CIDR (IPv4 first when dual-stack),
//! with errors that name the subnet.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::ValidSubnet;

use super::error::IpamError;
use super::family::{Family, FamilyPool, Owner, Refusal};

/// Address counts for a subnet's status (`availableIPs`, `usedIPs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Addresses that can still be handed out.
    pub available: u128,
    /// Addresses handed out (including ones excluded after they were handed out).
    pub used: u128,
}

/// The allocator of one subnet.
#[derive(Clone, Debug)]
pub struct SubnetPool {
    spec: ValidSubnet,
    families: Vec<FamilyPool>,
    /// `10.0.0.0/24, fd00::/64`, for messages.
    cidrs_text: String,
}

fn bad(spec: &ValidSubnet, reason: impl Into<String>) -> IpamError {
    IpamError::BadSubnet {
        subnet: spec.name.clone(),
        reason: reason.into(),
    }
}

fn cidrs_text(cidrs: &[IpNet]) -> String {
    cidrs
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn pools(spec: &ValidSubnet) -> Result<Vec<FamilyPool>, IpamError> {
    match spec.cidrs.as_slice() {
        [] => return Err(bad(spec, "no CIDR")),
        [_] => {}
        [a, b] if Family::of(a.addr()) != Family::of(b.addr()) => {}
        [_, _] => return Err(bad(spec, "two CIDRs of the same family")),
        _ => return Err(bad(spec, "more than one CIDR per family")),
    }
    let mut out = Vec::with_capacity(spec.cidrs.len());
    for (i, cidr) in spec.cidrs.iter().enumerate() {
        let gateway = spec.gateways.get(i).copied();
        if let Some(g) = gateway
            && !cidr.contains(&g)
        {
            return Err(bad(spec, format!("gateway {g} is outside {cidr}")));
        }
        out.push(FamilyPool::new(*cidr, gateway, &spec.excludes));
    }
    out.sort_by_key(FamilyPool::family);
    Ok(out)
}

impl SubnetPool {
    /// An allocator for `spec` with nothing in use.
    pub fn new(spec: &ValidSubnet) -> Result<Self, IpamError> {
        Ok(SubnetPool {
            families: pools(spec)?,
            cidrs_text: cidrs_text(&spec.cidrs),
            spec: spec.clone(),
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn spec(&self) -> &ValidSubnet {
        &self.spec
    }

    /// The families served, IPv4 first.
    pub fn families(&self) -> impl Iterator<Item = Family> + '_ {
        self.families.iter().map(FamilyPool::family)
    }

    /// The CIDR of `family`, if served.
    pub fn cidr(&self, family: Family) -> Option<IpNet> {
        self.pool(family).map(FamilyPool::cidr)
    }

    pub fn pool(&self, family: Family) -> Option<&FamilyPool> {
        self.families.iter().find(|p| p.family() == family)
    }

    fn pool_mut(&mut self, family: Family) -> Option<&mut FamilyPool> {
        self.families.iter_mut().find(|p| p.family() == family)
    }

    pub(crate) fn outside(&self, ip: IpAddr) -> IpamError {
        IpamError::OutsideSubnet {
            ip,
            subnet: self.spec.name.clone(),
            cidrs: self.cidrs_text.clone(),
        }
    }

    pub(crate) fn cidrs_text(&self) -> &str {
        &self.cidrs_text
    }

    fn refusal(&self, ip: IpAddr, r: Refusal<'_>) -> IpamError {
        let subnet = self.spec.name.clone();
        match r {
            Refusal::Outside => self.outside(ip),
            Refusal::Used(owner) => IpamError::AlreadyAssigned {
                ip,
                owner: owner.to_string(),
            },
            Refusal::Reserved(kind) => IpamError::Reserved { ip, subnet, kind },
            Refusal::Excluded => IpamError::Excluded { ip, subnet },
        }
    }

    /// Ok when [`allocate`](Self::allocate) of `ip` would succeed now.
    pub fn check(&self, ip: IpAddr) -> Result<(), IpamError> {
        let pool = self.pool(Family::of(ip)).ok_or_else(|| self.outside(ip))?;
        pool.check(ip).map(|_| ()).map_err(|r| self.refusal(ip, r))
    }

    /// The address [`allocate_next`](Self::allocate_next) would return.
    pub fn peek_next(&self, family: Family) -> Result<IpAddr, IpamError> {
        self.pool(family)
            .and_then(FamilyPool::peek_next)
            .ok_or_else(|| IpamError::Exhausted {
                subnet: self.spec.name.clone(),
                family,
            })
    }

    /// Hands out the next free address of `family` (round-robin from the last one).
    pub fn allocate_next(&mut self, family: Family, owner: &Owner) -> Result<IpAddr, IpamError> {
        self.pool_mut(family)
            .and_then(|p| p.take_next(owner))
            .ok_or_else(|| IpamError::Exhausted {
                subnet: self.spec.name.clone(),
                family,
            })
    }

    /// Hands out `ip` to `owner`; the cursor does not move.
    pub fn allocate(&mut self, ip: IpAddr, owner: &Owner) -> Result<(), IpamError> {
        self.take(ip, owner, false)
    }

    /// Hands out `ip`, moving the cursor past it when `advance` (a dynamic pick).
    pub(crate) fn take(
        &mut self,
        ip: IpAddr,
        owner: &Owner,
        advance: bool,
    ) -> Result<(), IpamError> {
        self.check(ip)?;
        let taken = self
            .pool_mut(Family::of(ip))
            .is_some_and(|p| p.take(ip, owner, advance));
        if taken { Ok(()) } else { Err(self.outside(ip)) }
    }

    /// Ok when `ip` may be recorded as held (restore): like [`check`](Self::check),
    /// but excluded addresses are accepted (they were handed out before the exclusion).
    pub(crate) fn check_restorable(&self, ip: IpAddr) -> Result<(), IpamError> {
        let pool = self.pool(Family::of(ip)).ok_or_else(|| self.outside(ip))?;
        match pool.check(ip) {
            Ok(_) | Err(Refusal::Excluded) => Ok(()),
            Err(r) => Err(self.refusal(ip, r)),
        }
    }

    /// Records `ip` as held by `owner` even if excluded (restore); refuses what
    /// [`check_restorable`](Self::check_restorable) refuses.
    pub(crate) fn mark_used(&mut self, ip: IpAddr, owner: &Owner) -> Result<(), IpamError> {
        self.check_restorable(ip)?;
        let marked = self
            .pool_mut(Family::of(ip))
            .is_some_and(|p| p.mark_used(ip, owner));
        if marked {
            Ok(())
        } else {
            Err(self.outside(ip))
        }
    }

    /// Frees `ip`; returns its owner, or `None` if it was not in use.
    pub fn release(&mut self, ip: IpAddr) -> Option<Owner> {
        self.pool_mut(Family::of(ip))?.release(ip)
    }

    /// Who holds `ip`.
    pub fn owner_of(&self, ip: IpAddr) -> Option<&Owner> {
        self.pool(Family::of(ip))?.owner_of(ip)
    }

    /// True when `ip` is inside the subnet and in its excludes.
    pub fn is_excluded(&self, ip: IpAddr) -> bool {
        self.pool(Family::of(ip)).is_some_and(|p| p.is_excluded(ip))
    }

    /// Applies a changed spec. Excludes and gateways may change at any time (addresses
    /// already handed out stay valid); CIDRs only while nothing is in use.
    pub fn update(&mut self, spec: &ValidSubnet) -> Result<(), IpamError> {
        if spec.cidrs != self.spec.cidrs {
            let used = self.usage().used;
            if used > 0 {
                return Err(IpamError::CidrChangeInUse {
                    subnet: spec.name.clone(),
                    old: self.cidrs_text.clone(),
                    new: cidrs_text(&spec.cidrs),
                    used,
                });
            }
            *self = SubnetPool::new(spec)?;
            return Ok(());
        }
        // Validate the whole spec before touching any family.
        pools(spec)?;
        for (i, cidr) in spec.cidrs.iter().enumerate() {
            let family = Family::of(cidr.addr());
            if let Some(p) = self.pool_mut(family) {
                p.configure(spec.gateways.get(i).copied(), &spec.excludes);
            }
        }
        self.spec = spec.clone();
        Ok(())
    }

    /// Totals over both families (saturating).
    pub fn usage(&self) -> Usage {
        self.families.iter().fold(Usage::default(), |u, p| Usage {
            available: u.available.saturating_add(p.available()),
            used: u.used.saturating_add(p.used()),
        })
    }

    /// Counts for one family.
    pub fn family_usage(&self, family: Family) -> Option<Usage> {
        self.pool(family).map(|p| Usage {
            available: p.available(),
            used: p.used(),
        })
    }

    /// Everyone holding an address here, sorted.
    pub fn owners(&self) -> BTreeSet<Owner> {
        self.families
            .iter()
            .flat_map(|p| p.assignments().map(|(_, o)| Owner::clone(o)))
            .collect()
    }

    /// Ranges making up the free space and excludes of all families.
    pub fn range_count(&self) -> usize {
        self.families.iter().map(FamilyPool::range_count).sum()
    }

    /// Approximate heap bytes of the allocator state (not counting the spec).
    pub fn heap_bytes_estimate(&self) -> usize {
        self.families
            .iter()
            .map(FamilyPool::heap_bytes_estimate)
            .sum::<usize>()
            + self.families.capacity() * size_of::<FamilyPool>()
    }
}
