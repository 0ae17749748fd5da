//! One CIDR's address space, the one rule IPAM ([`crate::ipam`]) and validation
//! ([`crate::validate`]) both follow: which addresses are never handed out (the first —
//! IPv4 network address, IPv6 subnet-router anycast — and the last of an IPv4 CIDR; none
//! on a point-to-point `/31`, `/32`, `/127`, `/128`), the default gateway (the first
//! address that is not reserved) and the size.
//!
//! Addresses are numbers (`u128`, IPv4 widened), as in the allocator.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// An address of a CIDR that no one gets, whatever the Subnet says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserved {
    /// The first address (IPv4 network address, IPv6 subnet-router anycast).
    Network,
    /// The last address of an IPv4 CIDR.
    Broadcast,
}

impl Reserved {
    /// `network` / `broadcast`, as messages name it.
    pub fn name(self) -> &'static str {
        match self {
            Reserved::Network => "network",
            Reserved::Broadcast => "broadcast",
        }
    }
}

/// The addresses of one CIDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressSpace {
    cidr: IpNet,
    v6: bool,
    first: u128,
    last: u128,
    network: Option<u128>,
    broadcast: Option<u128>,
}

/// `ip` as a number (IPv4 widened).
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

impl AddressSpace {
    /// The space of `cidr` (host bits dropped).
    pub fn new(cidr: IpNet) -> AddressSpace {
        let cidr = cidr.trunc();
        let v6 = matches!(cidr, IpNet::V6(_));
        let (first, last) = (to_u128(cidr.network()), to_u128(cidr.broadcast()));
        let p2p = cidr.prefix_len() + 1 >= cidr.max_prefix_len();
        AddressSpace {
            cidr,
            v6,
            first,
            last,
            network: (!p2p).then_some(first),
            broadcast: (!p2p && !v6).then_some(last),
        }
    }

    pub fn cidr(&self) -> IpNet {
        self.cidr
    }

    /// The first address, as a number.
    pub fn first(&self) -> u128 {
        self.first
    }

    /// The last address, as a number.
    pub fn last(&self) -> u128 {
        self.last
    }

    /// The address numbered `x` in this space's family.
    pub fn addr(&self, x: u128) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(x))
        } else {
            IpAddr::V4(Ipv4Addr::from(u32::try_from(x).unwrap_or(u32::MAX)))
        }
    }

    /// Whether address number `x` is reserved here, and which.
    pub fn reserved_at(&self, x: u128) -> Option<Reserved> {
        if self.network == Some(x) {
            Some(Reserved::Network)
        } else if self.broadcast == Some(x) {
            Some(Reserved::Broadcast)
        } else {
            None
        }
    }

    /// Whether `ip` is reserved here, and which (an address of another CIDR is not).
    pub fn reserved(&self, ip: IpAddr) -> Option<Reserved> {
        self.cidr
            .contains(&ip)
            .then(|| self.reserved_at(to_u128(ip)))
            .flatten()
    }

    /// The reserved addresses, as numbers.
    pub fn reserved_addrs(&self) -> impl Iterator<Item = u128> {
        [self.network, self.broadcast].into_iter().flatten()
    }

    /// The first address that is not reserved: the default gateway.
    pub fn default_gateway(&self) -> IpAddr {
        let x = if self.network.is_some() {
            self.first.saturating_add(1)
        } else {
            self.first
        };
        self.addr(x)
    }

    /// How many addresses the CIDR holds (saturating: an IPv6 `/0` counts `u128::MAX`).
    pub fn size(&self) -> u128 {
        (self.last - self.first).saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(s: &str) -> AddressSpace {
        AddressSpace::new(s.parse().unwrap())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_reserves_network_and_broadcast_except_point_to_point() {
        let s = space("10.0.0.0/24");
        assert_eq!(s.reserved(ip("10.0.0.0")), Some(Reserved::Network));
        assert_eq!(s.reserved(ip("10.0.0.255")), Some(Reserved::Broadcast));
        assert_eq!(s.reserved(ip("10.0.0.1")), None);
        assert_eq!(s.reserved(ip("10.0.1.0")), None, "another CIDR's address");
        assert_eq!(s.default_gateway(), ip("10.0.0.1"));
        assert_eq!(s.size(), 256);
        let s30 = space("10.0.0.0/30");
        assert_eq!(s30.reserved_addrs().count(), 2);
        for p2p in ["10.0.0.0/31", "10.0.0.7/32"] {
            let s = space(p2p);
            assert_eq!(s.reserved_addrs().count(), 0, "{p2p}");
            assert_eq!(s.default_gateway(), s.cidr().network(), "{p2p}");
        }
    }

    #[test]
    fn ipv6_reserves_only_the_subnet_router_anycast() {
        let s = space("fd00::/64");
        assert_eq!(s.reserved(ip("fd00::")), Some(Reserved::Network));
        assert_eq!(s.reserved(ip("fd00::ffff:ffff:ffff:ffff")), None);
        assert_eq!(s.default_gateway(), ip("fd00::1"));
        assert_eq!(space("fd00::/127").reserved_addrs().count(), 0);
        assert_eq!(space("fd00::/126").reserved_addrs().count(), 1);
        assert_eq!(space("::/0").size(), u128::MAX);
    }

    #[test]
    fn host_bits_are_dropped() {
        assert_eq!(space("10.0.0.77/24").cidr(), "10.0.0.0/24".parse().unwrap());
        assert_eq!(space("10.0.0.77/24").first(), to_u128(ip("10.0.0.0")));
    }
}
