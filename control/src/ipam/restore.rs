//! Rebuilding [`Ipam`] on controller start from what pods and VMs already hold.

use std::net::IpAddr;

use crate::model::Mac;

use super::{Family, Ipam, IpamError, Lease, Owner, check_compatible};
use crate::model::PodIpRequest;

impl Ipam {
    /// Records that `key` — a pod key `<namespace>/<pod>` or a [`vm_key`](super::vm_key)
    /// — holds `ips` (at most one per family) and `mac` in `subnet`, as read from pod
    /// annotations or Northbound rows.
    ///
    /// Excluded addresses are accepted (they were handed out before the exclusion);
    /// addresses outside the subnet or reserved (network, broadcast, gateway) are not.
    /// Restoring the same thing twice is a no-op. An address or MAC already held by
    /// another owner is a [`IpamError::RestoreConflict`] naming both owners, and nothing
    /// of this claim is recorded.
    pub fn restore(
        &mut self,
        key: &str,
        subnet: &str,
        ips: &[IpAddr],
        mac: Mac,
    ) -> Result<(), IpamError> {
        if key.is_empty() {
            return Err(IpamError::BadKey(key.to_string()));
        }
        if ips.is_empty() {
            return Err(IpamError::NothingToRestore(key.to_string()));
        }
        let pool = self
            .subnets
            .get(subnet)
            .ok_or_else(|| IpamError::UnknownSubnet(subnet.to_string()))?;

        let mut ips = ips.to_vec();
        ips.sort_by_key(|ip| Family::of(*ip));
        ips.dedup();
        if let Some(w) = ips
            .windows(2)
            .find(|w| Family::of(w[0]) == Family::of(w[1]))
        {
            return Err(IpamError::DuplicateFamily {
                first: w[0],
                second: w[1],
                family: Family::of(w[0]),
            });
        }

        if let Some((owner, lease)) = self.leases.get_key_value(key) {
            let same = PodIpRequest {
                static_ips: ips.clone(),
                static_mac: Some(mac),
                ..PodIpRequest::default()
            };
            check_compatible(owner, lease, subnet, &same)?;
            if lease.ips.len() == ips.len() {
                return Ok(());
            }
            return Err(IpamError::LeaseMismatch {
                owner: key.to_string(),
                subnet: subnet.to_string(),
                held: super::ips_text(&lease.ips),
                requested: super::ips_text(&ips),
            });
        }

        let conflict = |claimed: String, owner: &str| IpamError::RestoreConflict {
            subnet: subnet.to_string(),
            claimed,
            claimant: key.to_string(),
            owner: owner.to_string(),
        };
        for &ip in &ips {
            match pool.check_restorable(ip) {
                Ok(()) => {}
                Err(IpamError::AlreadyAssigned { owner, .. }) => {
                    return Err(conflict(ip.to_string(), &owner));
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(o) = self.macs.owner_of(mac).filter(|o| ***o != *key) {
            return Err(conflict(format!("MAC {mac}"), o));
        }

        let owner: Owner = key.into();
        let pool = self
            .subnets
            .get_mut(subnet)
            .ok_or_else(|| IpamError::UnknownSubnet(subnet.to_string()))?;
        for (i, &ip) in ips.iter().enumerate() {
            if let Err(e) = pool.mark_used(ip, &owner) {
                for &taken in &ips[..i] {
                    pool.release(taken);
                }
                return Err(e);
            }
        }
        self.macs.claim(mac, &owner);
        self.leases.insert(
            owner,
            Lease {
                subnet: subnet.to_string(),
                ips,
                mac,
            },
        );
        Ok(())
    }
}
