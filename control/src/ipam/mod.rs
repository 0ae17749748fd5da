//! # IPAM — pod addresses and MACs
//!
//! [`Ipam`] hands out pod addresses from the Subnets ([`ValidSubnet`](crate::model::ValidSubnet)) and MAC addresses
//! unique in the cluster, keeps KubeVirt VMs on the same addresses across pod restarts
//! and live migration, and is rebuilt on controller start from what pods already hold.
//!
//! ## Pod annotations and labels
//!
//! Read by [`annotations::parse_request`] into a [`PodIpRequest`] (kube-ovn's names):
//!
//! | key | kind | value | effect |
//! |---|---|---|---|
//! | `ovn.kubernetes.io/ip_address` | annotation | `10.16.0.15`, or one per family `10.16.0.15,fd00:10:16::15`; a `/len` suffix is accepted and ignored | static address(es): must be inside the subnet, not excluded, not reserved, not held by another pod |
//! | `ovn.kubernetes.io/mac_address` | annotation | `00:00:00:53:6b:b6` (`:` or `-`, unicast) | static MAC, unique in the cluster; not all zeros and not in `0a:…`, the plugin's own range (router ports, derived MACs) |
//! | `ovn.kubernetes.io/ip_pool` | annotation | addresses separated by `,` or `;` (`10.16.0.15,10.16.0.16;fd00::15`) | the pod takes, per family, the first free address of the list inside its subnet |
//! | `kubevirt.io/domain` | annotation | VMI name | KubeVirt sets it on every virt-launcher pod: the pod belongs to that VMI |
//! | `kubevirt.io/vm` | label | VMI name | fallback when the annotation is absent (KubeVirt's `VirtualMachineLabel`, commonly put on the VMI template and copied to the pod) |
//!
//! An empty value counts as absent. A value that does not parse is an error naming the
//! key and the value; the pod gets no address until it is fixed. The label
//! `vm.kubevirt.io/name` is *not* used: KubeVirt sets it to the VMI's sanitized host
//! name, which differs from the VMI name when `spec.hostname` is set.
//!
//! ## Rules
//!
//! - **Never handed out**: the first address of the CIDR (IPv4 network address, IPv6
//!   subnet-router anycast), the IPv4 broadcast, the gateway, and every `excludeIPs`
//!   address. IPv4 /31 and /32 and IPv6 /127 and /128 are point-to-point (RFC 3021,
//!   RFC 6164): they have no network or broadcast address, only the gateway and excludes
//!   are held back.
//! - **Dynamic** addresses are taken round-robin: the search starts after the last
//!   address handed out and wraps, so an address just released is not reused at once.
//! - **Precedence**, per family: `ip_address`, then `ip_pool`, then dynamic. On a
//!   dual-stack subnet a request may pin one family only; the other is dynamic (likewise
//!   an `ip_pool` listing no address of a family). A pool listing no address of the
//!   subnet at all is an error, as is a pool whose addresses of a family are all taken.
//! - **Dual-stack** requests get one address per family, all or nothing: every family is
//!   planned before anything is recorded, so a failing IPv6 leaves no IPv4 behind.
//! - **Idempotent**: asking again for a pod (or VM) that already holds addresses returns
//!   them, provided the request is compatible (same subnet, static IP/MAC among those
//!   held); otherwise the error says what is held and asks for a release first.
//! - **MAC**: the static MAC if requested and not held by anyone else; else
//!   `0a:58:` + the four IPv4 bytes (ovn-kubernetes); IPv6-only pods, or a derived MAC
//!   already taken, get a random locally administered unicast MAC. All are unique in
//!   the cluster.
//! - **KubeVirt**: when a pod belongs to a VMI, the addresses are owned by
//!   `vm:<namespace>/<vmi>` ([`vm_key`]), not by the pod: a new pod of the VMI (restart,
//!   live-migration target) gets the same IPs and MAC. Releasing such a pod frees
//!   nothing; [`Ipam::release_vm`] (on VMI deletion) does.
//! - **Release** of an unknown key is a no-op.
//! - **Restore** on start ([`Ipam::restore`]) records what pods (pod keys) and VMs (VM
//!   keys) already hold, excluded or not; an address or MAC claimed twice is an error
//!   naming both owners, and nothing of the failing claim is recorded.
//! - **Subnets**: [`Ipam::update_subnet`] applies new excludes and gateways at once
//!   (addresses already handed out stay valid and used, they are just not handed out
//!   anew); CIDRs may only change while the subnet is unused. [`Ipam::remove_subnet`]
//!   is **refused while addresses are in use**, with an error listing the owners.
//!   [`Ipam::usage`] gives `availableIPs`/`usedIPs` (both families summed).
//!
//! ## Representation
//!
//! Free space per family is a [`RangeSet`](range_set::RangeSet) of `u128` (sorted
//! disjoint ranges, IPv4 widened): memory is proportional to the number of fragments
//! and allocations, not to the address space. An unused IPv6 /64 is one range.
//!
//! | module | holds |
//! |---|---|
//! | [`range_set`] | the interval set |
//! | [`family`] | one family of a subnet: reserved addresses, excludes, cursor |
//! | [`subnet`] | [`SubnetPool`], the per-subnet allocator |
//! | [`mac`] | MAC generation and cluster-wide uniqueness |
//! | [`annotations`] | pod annotations → [`PodIpRequest`] |
//! | [`error`] | [`IpamError`] |

pub mod annotations;
pub mod error;
pub mod family;
mod hash;
mod lifecycle;
pub mod mac;
pub mod range_set;
mod restore;
pub mod subnet;

#[cfg(test)]
mod proptests;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{Mac, PodAddresses, PodIpRequest};

pub use error::{IpamError, ReservedKind};
pub use family::{Family, Owner};
pub use mac::MacRegistry;
pub use subnet::{SubnetPool, Usage};

/// The owner key of a KubeVirt VMI's addresses: `vm:<namespace>/<vmi>`.
pub fn vm_key(namespace: &str, vmi: &str) -> String {
    format!("vm:{namespace}/{vmi}")
}

/// What an owner holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub subnet: String,
    /// One per family, IPv4 first.
    pub ips: Vec<IpAddr>,
    pub mac: Mac,
}

/// Addresses and MACs of the whole cluster.
#[derive(Clone, Debug, Default)]
pub struct Ipam {
    subnets: BTreeMap<String, SubnetPool>,
    /// Owner key (pod key or VM key) → what it holds.
    leases: HashMap<Owner, Lease>,
    /// Pod key → VM key, for pods of a VMI.
    vm_pods: HashMap<String, Owner>,
    macs: MacRegistry,
}

/// One family's pick while planning an assignment.
struct Pick {
    ip: IpAddr,
    /// A dynamic pick: moves the round-robin cursor.
    advance: bool,
}

impl Ipam {
    pub fn new() -> Self {
        Ipam::default()
    }

    /// Addresses for pod `pod_key` (`<namespace>/<name>`) in `subnet`, as `req` asks.
    ///
    /// Idempotent: a pod (or VM) already holding addresses gets them back.
    pub fn assign(
        &mut self,
        pod_key: &str,
        subnet: &str,
        req: &PodIpRequest,
    ) -> Result<PodAddresses, IpamError> {
        let owner: Owner = match &req.vm {
            Some(vmi) => vm_key(namespace_of(pod_key)?, vmi).into(),
            None => pod_key.into(),
        };
        let Ipam {
            subnets,
            leases,
            vm_pods,
            macs,
        } = self;
        let addrs = match leases.entry(Owner::clone(&owner)) {
            Entry::Occupied(held) => {
                let lease = held.get();
                check_compatible(&owner, lease, subnet, req)?;
                let pool = subnets
                    .get(&lease.subnet)
                    .ok_or_else(|| IpamError::UnknownSubnet(lease.subnet.clone()))?;
                addresses_of(pool, lease)?
            }
            Entry::Vacant(slot) => {
                let pool = subnets
                    .get_mut(subnet)
                    .ok_or_else(|| IpamError::UnknownSubnet(subnet.to_string()))?;
                let picks = plan(pool, req)?;
                let v4 = picks.iter().flatten().find_map(|p| match p.ip {
                    IpAddr::V4(a) => Some(a),
                    IpAddr::V6(_) => None,
                });
                let mac = macs.choose(req.static_mac, v4, &owner)?;

                let mut ips = Vec::with_capacity(picks.iter().flatten().count());
                ips.extend(picks.iter().flatten().map(|p| p.ip));
                let lease = Lease {
                    subnet: subnet.to_string(),
                    ips,
                    mac,
                };
                let addrs = addresses_of(pool, &lease)?;

                // Commit. The plan was made on this very state, so nothing below fails;
                // should it, what was taken is given back.
                for (i, p) in picks.iter().flatten().enumerate() {
                    if let Err(e) = pool.take(p.ip, &owner, p.advance) {
                        for &ip in &lease.ips[..i] {
                            pool.release(ip);
                        }
                        return Err(e);
                    }
                }
                if !macs.claim(mac, &owner) {
                    for &ip in &lease.ips {
                        pool.release(ip);
                    }
                    let holder = macs.owner_of(mac).map(|o| o.to_string());
                    return Err(IpamError::MacInUse {
                        mac,
                        owner: holder.unwrap_or_default(),
                    });
                }
                slot.insert(lease);
                addrs
            }
        };
        if req.vm.is_some() {
            vm_pods.insert(pod_key.to_string(), owner);
        } else if !vm_pods.is_empty() {
            // no longer (if ever) a VM pod
            vm_pods.remove(pod_key);
        }
        Ok(addrs)
    }

    /// Frees what pod `pod_key` holds. A pod of a VMI frees nothing (the VM keeps its
    /// addresses, see [`release_vm`](Self::release_vm)); an unknown key is a no-op.
    /// Returns what was freed.
    pub fn release(&mut self, pod_key: &str) -> Option<Lease> {
        self.vm_pods.remove(pod_key);
        self.release_owner(pod_key)
    }

    /// Frees what VMI `namespace/vmi` holds (the VMI was deleted). No-op if unknown.
    pub fn release_vm(&mut self, namespace: &str, vmi: &str) -> Option<Lease> {
        let key = vm_key(namespace, vmi);
        self.vm_pods.retain(|_, o| **o != *key);
        self.release_owner(&key)
    }

    fn release_owner(&mut self, key: &str) -> Option<Lease> {
        let (owner, lease) = self.leases.remove_entry(key)?;
        if let Some(pool) = self.subnets.get_mut(&lease.subnet) {
            for &ip in &lease.ips {
                pool.release(ip);
            }
        }
        self.macs.release(lease.mac, &owner);
        Some(lease)
    }

    /// The owner keys of every VM lease (`vm:<namespace>/<vmi>`).
    pub fn vm_leases(&self) -> Vec<String> {
        self.leases
            .keys()
            .filter(|k| k.starts_with("vm:"))
            .map(|k| k.to_string())
            .collect()
    }

    /// What pod `pod_key` currently has (through its VMI for a VM pod).
    pub fn addresses(&self, pod_key: &str) -> Option<PodAddresses> {
        let owner: &str = self.vm_pods.get(pod_key).map_or(pod_key, |o| o);
        let lease = self.leases.get(owner)?;
        addresses_of(self.subnets.get(&lease.subnet)?, lease).ok()
    }

    /// What owner `key` (pod key or [`vm_key`]) holds.
    pub fn lease(&self, key: &str) -> Option<&Lease> {
        self.leases.get(key)
    }

    /// Who holds `ip` in `subnet`.
    pub fn owner_of(&self, subnet: &str, ip: IpAddr) -> Option<&str> {
        self.subnets.get(subnet)?.owner_of(ip).map(|o| &**o)
    }

    /// Who holds `mac`.
    pub fn mac_owner(&self, mac: Mac) -> Option<&str> {
        self.macs.owner_of(mac).map(|o| &**o)
    }

    /// The allocator of `subnet`.
    pub fn subnet(&self, name: &str) -> Option<&SubnetPool> {
        self.subnets.get(name)
    }
}

/// The addresses `lease` gives, with `pool`'s prefix lengths and gateways.
fn addresses_of(pool: &SubnetPool, lease: &Lease) -> Result<PodAddresses, IpamError> {
    let ips = lease
        .ips
        .iter()
        .map(|&ip| {
            let len = pool.cidr(Family::of(ip)).map_or(0, |c| c.prefix_len());
            IpNet::new(ip, len).map_err(|_| pool.outside(ip))
        })
        .collect::<Result<_, _>>()?;
    Ok(PodAddresses {
        subnet: lease.subnet.clone(),
        ips,
        mac: lease.mac,
        gateways: pool.spec().gateways.clone(),
    })
}

/// `ns` of `ns/name`.
fn namespace_of(key: &str) -> Result<&str, IpamError> {
    match key.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Ok(ns),
        _ => Err(IpamError::BadKey(key.to_string())),
    }
}

fn ips_text(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(|ip| ip.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// An existing lease satisfies `req` in `subnet`.
fn check_compatible(
    owner: &Owner,
    lease: &Lease,
    subnet: &str,
    req: &PodIpRequest,
) -> Result<(), IpamError> {
    if lease.subnet != subnet {
        return Err(IpamError::SubnetMismatch {
            owner: owner.to_string(),
            held: lease.subnet.clone(),
            requested: subnet.to_string(),
        });
    }
    let mismatch = |held: String, requested: String| IpamError::LeaseMismatch {
        owner: owner.to_string(),
        subnet: subnet.to_string(),
        held,
        requested,
    };
    if let Some(ip) = req.static_ips.iter().find(|ip| !lease.ips.contains(ip)) {
        return Err(mismatch(ips_text(&lease.ips), ip.to_string()));
    }
    match req.static_mac {
        Some(mac) if mac != lease.mac => Err(mismatch(lease.mac.to_string(), mac.to_string())),
        _ => Ok(()),
    }
}

/// Chooses one address per family of `pool` for `req`, recording nothing.
fn plan(pool: &SubnetPool, req: &PodIpRequest) -> Result<[Option<Pick>; 2], IpamError> {
    // static addresses: each in a family of the subnet, at most one per family
    let mut statics: Vec<IpAddr> = Vec::new();
    for &ip in &req.static_ips {
        if pool.cidr(Family::of(ip)).is_none_or(|c| !c.contains(&ip)) {
            return Err(pool.outside(ip));
        }
        if let Some(&first) = statics.iter().find(|s| Family::of(**s) == Family::of(ip)) {
            return Err(IpamError::DuplicateFamily {
                first,
                second: ip,
                family: Family::of(ip),
            });
        }
        statics.push(ip);
    }
    let pool_text = || ips_text(&req.ip_pool);
    if !req.ip_pool.is_empty()
        && !req
            .ip_pool
            .iter()
            .any(|ip| pool.cidr(Family::of(*ip)).is_some_and(|c| c.contains(ip)))
    {
        return Err(IpamError::PoolOutsideSubnet {
            pool: pool_text(),
            subnet: pool.name().to_string(),
            cidrs: pool.cidrs_text().to_string(),
        });
    }

    let mut picks = [None, None];
    for (slot, family) in picks.iter_mut().zip(pool.families()) {
        let cidr = pool.cidr(family);
        let in_family = |ip: &&IpAddr| cidr.is_some_and(|c| c.contains(*ip));
        if let Some(&ip) = statics.iter().find(in_family) {
            pool.check(ip)?;
            *slot = Some(Pick { ip, advance: false });
            continue;
        }
        let mut candidates = req.ip_pool.iter().filter(in_family).peekable();
        if candidates.peek().is_some() {
            let ip = candidates
                .find(|ip| pool.check(**ip).is_ok())
                .ok_or_else(|| IpamError::PoolExhausted {
                    subnet: pool.name().to_string(),
                    family,
                    pool: pool_text(),
                })?;
            *slot = Some(Pick {
                ip: *ip,
                advance: false,
            });
            continue;
        }
        *slot = Some(Pick {
            ip: pool.peek_next(family)?,
            advance: true,
        });
    }
    Ok(picks)
}
