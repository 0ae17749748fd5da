//! MAC addresses: cluster-wide uniqueness and generation.
//!
//! A pod with an IPv4 address gets `0a:58:` followed by the four address bytes (the
//! ovn-kubernetes convention: the MAC is readable from the IP and vice versa); an
//! IPv6-only pod gets a random locally administered unicast MAC. Either is checked
//! against every MAC in use; a derived MAC that is taken (a static MAC chose it, or two
//! overlapping subnets share the IPv4 address) falls back to a random one.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::Ipv4Addr;

use crate::model::Mac;

use super::error::IpamError;
use super::family::Owner;
use super::hash::FxBuild;

/// Random draws before giving up; a collision among 2^46 values is already unlikely.
const RANDOM_TRIES: usize = 32;

/// `0a:58:` + the IPv4 address.
pub fn derived_mac(ip: Ipv4Addr) -> Mac {
    let [a, b, c, d] = ip.octets();
    Mac([0x0a, 0x58, a, b, c, d])
}

/// A random locally administered (`0x02` set) unicast (`0x01` clear) MAC, never in the
/// `0a:58:` range the derived MACs use.
pub fn random_mac() -> Mac {
    loop {
        let mut b: [u8; 6] = rand::random();
        b[0] = (b[0] | 0x02) & !0x01;
        if b[..2] != [0x0a, 0x58] {
            return Mac(b);
        }
    }
}

/// Every MAC in use in the cluster and its owner.
#[derive(Clone, Debug, Default)]
pub struct MacRegistry {
    by_mac: HashMap<Mac, Owner, FxBuild>,
}

impl MacRegistry {
    pub fn owner_of(&self, mac: Mac) -> Option<&Owner> {
        self.by_mac.get(&mac)
    }

    fn free_for(&self, mac: Mac, owner: &Owner) -> bool {
        self.by_mac.get(&mac).is_none_or(|o| o == owner)
    }

    /// The MAC `owner` should get: `requested` if free, else derived from `v4`, else
    /// random; nothing is recorded (see [`claim`](Self::claim)).
    pub fn choose(
        &self,
        requested: Option<Mac>,
        v4: Option<Ipv4Addr>,
        owner: &Owner,
    ) -> Result<Mac, IpamError> {
        if let Some(mac) = requested {
            return match self.by_mac.get(&mac) {
                Some(o) if o != owner => Err(IpamError::MacInUse {
                    mac,
                    owner: o.to_string(),
                }),
                _ => Ok(mac),
            };
        }
        if let Some(ip) = v4 {
            let mac = derived_mac(ip);
            if self.free_for(mac, owner) {
                return Ok(mac);
            }
            tracing::warn!(%mac, %owner, "derived MAC already in use; using a random one");
        }
        (0..RANDOM_TRIES)
            .map(|_| random_mac())
            .find(|&m| self.free_for(m, owner))
            .ok_or(IpamError::MacExhausted)
    }

    /// Records `mac` as `owner`'s; false (and no change) if someone else holds it.
    pub fn claim(&mut self, mac: Mac, owner: &Owner) -> bool {
        match self.by_mac.entry(mac) {
            Entry::Occupied(o) => o.get() == owner,
            Entry::Vacant(v) => {
                v.insert(Owner::clone(owner));
                true
            }
        }
    }

    /// Forgets `mac` if `owner` holds it.
    pub fn release(&mut self, mac: Mac, owner: &Owner) {
        if self.by_mac.get(&mac).is_some_and(|o| o == owner) {
            self.by_mac.remove(&mac);
        }
    }

    pub fn len(&self) -> usize {
        self.by_mac.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_mac.is_empty()
    }
}
