//! Property tests against a shadow model: random allocate / allocate-given / release /
//! update-excludes sequences on small IPv4 and IPv6 subnets, and random pod assignments
//! on small dual-stack subnets.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use crate::model::{IpRange, PodIpRequest};

use super::tests::subnet;
use super::*;

/// A small subnet, described by offsets from its network address.
#[derive(Clone, Debug)]
struct Shape {
    v6: bool,
    base: u128,
    prefix: u8,
    gateway: Option<u128>,
}

impl Shape {
    fn size(&self) -> u128 {
        1u128 << ((if self.v6 { 128 } else { 32 }) - self.prefix)
    }
    fn family(&self) -> Family {
        if self.v6 { Family::V6 } else { Family::V4 }
    }
    fn addr(&self, off: u128) -> IpAddr {
        self.family().addr(self.base + off)
    }
    fn cidr(&self) -> String {
        format!("{}/{}", self.addr(0), self.prefix)
    }
    fn p2p(&self) -> bool {
        self.prefix >= if self.v6 { 127 } else { 31 }
    }
    fn reserved(&self, off: u128) -> bool {
        let last = self.size() - 1;
        (!self.p2p() && off == 0)
            || (!self.p2p() && !self.v6 && off == last)
            || self.gateway == Some(off)
    }
    fn spec(&self, excludes: &[(u128, u128)]) -> crate::model::ValidSubnet {
        let gw: Vec<String> = self
            .gateway
            .iter()
            .map(|g| self.addr(*g).to_string())
            .collect();
        let gw: Vec<&str> = gw.iter().map(String::as_str).collect();
        let mut s = subnet("s", &[&self.cidr()], &gw, &[]);
        s.excludes = excludes
            .iter()
            .map(|&(a, b)| IpRange {
                start: self.addr(a),
                end: self.addr(b),
            })
            .collect();
        // a range of the other family is ignored
        s.excludes.push(IpRange::single(if self.v6 {
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))
        } else {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        }));
        s
    }
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        any::<bool>(),
        0u8..=8,
        any::<u32>(),
        any::<bool>(),
        any::<u16>(),
    )
        .prop_map(|(v6, host_bits, seed, has_gw, gw)| {
            let prefix = if v6 { 128 - host_bits } else { 32 - host_bits };
            let size = 1u128 << host_bits;
            let raw = if v6 {
                (0xfd00u128 << 112) | (u128::from(seed) << 16)
            } else {
                u128::from(seed)
            };
            Shape {
                v6,
                base: raw & !(size - 1),
                prefix,
                gateway: has_gw.then_some(u128::from(gw) % size),
            }
        })
}

#[derive(Clone, Debug)]
enum Op {
    Next,
    Given(u16),
    Release(usize),
    /// offsets may run past the CIDR (clipped)
    Excludes(Vec<(u16, u16)>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Next),
        2 => any::<u16>().prop_map(Op::Given),
        3 => any::<usize>().prop_map(Op::Release),
        1 => proptest::collection::vec((any::<u16>(), 0u16..6), 0..3).prop_map(Op::Excludes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn allocator_matches_shadow_model(shape in shape(), ops in proptest::collection::vec(op(), 1..120)) {
        let size = shape.size();
        let mut excludes: Vec<(u128, u128)> = vec![];
        let mut pool = SubnetPool::new(&shape.spec(&excludes)).unwrap();
        let family = shape.family();
        let mut used: BTreeMap<u128, String> = BTreeMap::new();
        let mut n = 0usize;
        let excluded = |ex: &[(u128, u128)], off: u128| ex.iter().any(|&(a, b)| a <= off && off <= b);

        for op in ops {
            match op {
                Op::Next => {
                    n += 1;
                    let who: Owner = format!("ns/p{n}").into();
                    match pool.allocate_next(family, &who) {
                        Ok(ip) => {
                            let off = Family::to_u128(ip).wrapping_sub(shape.base);
                            prop_assert!(off < size, "{ip} outside {}", shape.cidr());
                            prop_assert!(!used.contains_key(&off), "{ip} handed out twice");
                            prop_assert!(!shape.reserved(off), "{ip} is reserved");
                            prop_assert!(!excluded(&excludes, off), "{ip} is excluded");
                            used.insert(off, who.to_string());
                        }
                        Err(IpamError::Exhausted { .. }) => {
                            let free = (0..size).find(|o| !used.contains_key(o) && !shape.reserved(*o) && !excluded(&excludes, *o));
                            prop_assert_eq!(free, None);
                        }
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::Given(o) => {
                    n += 1;
                    let who: Owner = format!("ns/p{n}").into();
                    let off = u128::from(o) % (size + 4);
                    let ip = shape.addr(off);
                    let got = pool.allocate(ip, &who);
                    let expected = if off >= size {
                        "outside"
                    } else if used.contains_key(&off) {
                        "assigned"
                    } else if shape.reserved(off) {
                        "reserved"
                    } else if excluded(&excludes, off) {
                        "excluded"
                    } else {
                        "ok"
                    };
                    let kind = match &got {
                        Ok(()) => "ok",
                        Err(IpamError::OutsideSubnet { .. }) => "outside",
                        Err(IpamError::AlreadyAssigned { owner, .. }) => {
                            prop_assert_eq!(Some(owner), used.get(&off));
                            "assigned"
                        }
                        Err(IpamError::Reserved { .. }) => "reserved",
                        Err(IpamError::Excluded { .. }) => "excluded",
                        Err(_) => "other",
                    };
                    prop_assert_eq!(kind, expected, "{} {:?}", ip, got);
                    if got.is_ok() {
                        used.insert(off, who.to_string());
                    }
                }
                Op::Release(i) => {
                    if used.is_empty() {
                        prop_assert_eq!(pool.release(shape.addr(0)), None);
                        continue;
                    }
                    let off = *used.keys().nth(i % used.len()).unwrap();
                    let ip = shape.addr(off);
                    let owner = used.remove(&off);
                    prop_assert_eq!(pool.release(ip).map(|o| o.to_string()), owner);
                    prop_assert_eq!(pool.release(ip), None);
                    // release then reuse
                    if !excluded(&excludes, off) && !shape.reserved(off) {
                        prop_assert_eq!(pool.check(ip), Ok(()));
                    }
                }
                Op::Excludes(ranges) => {
                    excludes = ranges
                        .iter()
                        .map(|&(a, len)| {
                            let a = u128::from(a) % (size + 4);
                            (a, a + u128::from(len))
                        })
                        .collect();
                    pool.update(&shape.spec(&excludes)).unwrap();
                }
            }

            // accounting: used + available is conserved over usable ∪ used
            let usable = |o: &u128| !shape.reserved(*o) && !excluded(&excludes, *o);
            let available = (0..size).filter(|o| usable(o) && !used.contains_key(o)).count() as u128;
            let u = pool.usage();
            prop_assert_eq!(u.used, used.len() as u128);
            prop_assert_eq!(u.available, available);
            let usable_or_used = (0..size).filter(|o| usable(o) || used.contains_key(o)).count() as u128;
            prop_assert_eq!(u.used + u.available, usable_or_used);
            for (off, who) in &used {
                prop_assert_eq!(pool.owner_of(shape.addr(*off)).map(|o| o.to_string()), Some(who.clone()));
            }
            // representation: fragments bounded by allocations and excludes
            prop_assert!(pool.range_count() <= 2 * (used.len() + excludes.len()) + 4);
        }
    }
}

#[derive(Clone, Debug)]
enum PodOp {
    Any(u8),
    Static(u8, u16, u16),
    Pool(u8, Vec<u16>),
    Release(u8),
    Vm(u8, u8),
    ReleaseVm(u8),
}

fn pod_op() -> impl Strategy<Value = PodOp> {
    prop_oneof![
        4 => (0u8..24).prop_map(PodOp::Any),
        2 => (0u8..24, any::<u16>(), any::<u16>()).prop_map(|(p, a, b)| PodOp::Static(p, a, b)),
        2 => (0u8..24, proptest::collection::vec(any::<u16>(), 1..5)).prop_map(|(p, v)| PodOp::Pool(p, v)),
        3 => (0u8..24).prop_map(PodOp::Release),
        2 => (0u8..24, 0u8..4).prop_map(|(p, v)| PodOp::Vm(p, v)),
        1 => (0u8..4).prop_map(PodOp::ReleaseVm),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Dual-stack: no address or MAC is ever held twice, every lease has one address per
    /// family, a failed request changes nothing, and usage matches the leases.
    #[test]
    fn pod_assignments_never_double_allocate(
        v4_bits in 2u8..=5, v6_bits in 1u8..=5,
        ops in proptest::collection::vec(pod_op(), 1..80),
    ) {
        let v4 = format!("10.9.0.0/{}", 32 - v4_bits);
        let v6 = format!("fd00:9::/{}", 128 - v6_bits);
        let mut ipam = Ipam::new();
        ipam.add_subnet(&subnet("d", &[&v4, &v6], &["10.9.0.1", "fd00:9::1"], &[("10.9.0.3", "10.9.0.3")])).unwrap();
        let (n4, n6) = (1u128 << v4_bits, 1u128 << v6_bits);
        let mut vm_pods: HashMap<String, String> = HashMap::new();
        for op in ops {
            let before = ipam.usage("d").unwrap();
            let (key, req, fresh) = match op {
                PodOp::Any(p) => (format!("ns/p{p}"), PodIpRequest::default(), true),
                PodOp::Static(p, a, b) => (format!("ns/p{p}"), PodIpRequest {
                    static_ips: vec![
                        IpAddr::V4(Ipv4Addr::from(0x0a09_0000 + (u32::from(a) % n4 as u32))),
                        IpAddr::V6(Ipv6Addr::from((0xfd00_0009u128 << 96) + u128::from(b) % n6)),
                    ],
                    ..PodIpRequest::default()
                }, true),
                PodOp::Pool(p, v) => (format!("ns/p{p}"), PodIpRequest {
                    ip_pool: v.iter().map(|a| IpAddr::V4(Ipv4Addr::from(0x0a09_0000 + (u32::from(*a) % (n4 as u32 + 2))))).collect(),
                    ..PodIpRequest::default()
                }, true),
                PodOp::Vm(p, v) => (format!("ns/vp{p}"), PodIpRequest { vm: Some(format!("v{v}")), ..PodIpRequest::default() }, true),
                PodOp::Release(p) => {
                    ipam.release(&format!("ns/p{p}"));
                    if let Some(vm) = vm_pods.remove(&format!("ns/vp{p}")) {
                        prop_assert_eq!(ipam.release(&format!("ns/vp{p}")), None);
                        prop_assert!(ipam.lease(&vm).is_some());
                    }
                    (String::new(), PodIpRequest::default(), false)
                }
                PodOp::ReleaseVm(v) => {
                    ipam.release_vm("ns", &format!("v{v}"));
                    vm_pods.retain(|_, vm| *vm != vm_key("ns", &format!("v{v}")));
                    (String::new(), PodIpRequest::default(), false)
                }
            };
            if fresh {
                let owner = req.vm.as_ref().map_or(key.clone(), |v| vm_key("ns", v));
                let held = ipam.lease(&owner).cloned();
                match ipam.assign(&key, "d", &req) {
                    Ok(a) => {
                        prop_assert_eq!(a.ips.len(), 2);
                        prop_assert!(a.ips[0].addr().is_ipv4() && a.ips[1].addr().is_ipv6());
                        if let Some(h) = held {
                            prop_assert_eq!(a.ips.iter().map(|n| n.addr()).collect::<Vec<_>>(), h.ips);
                        }
                        if req.vm.is_some() {
                            vm_pods.insert(key.clone(), owner);
                        }
                    }
                    Err(_) => prop_assert_eq!(ipam.usage("d").unwrap(), before),
                }
            }
            // invariants over every lease
            let mut ips = BTreeSet::new();
            let mut macs = BTreeSet::new();
            let mut count = 0u128;
            for owner in (0..24).flat_map(|p| [format!("ns/p{p}"), format!("ns/vp{p}")])
                .chain((0..4).map(|v| vm_key("ns", &format!("v{v}"))))
            {
                if let Some(l) = ipam.lease(&owner) {
                    for ip in &l.ips {
                        prop_assert!(ips.insert(*ip), "{} held twice", ip);
                        prop_assert_eq!(ipam.owner_of("d", *ip), Some(owner.as_str()));
                        prop_assert_ne!(*ip, "10.9.0.3".parse::<IpAddr>().unwrap());
                    }
                    prop_assert!(macs.insert(l.mac), "{} held twice", l.mac);
                    prop_assert_eq!(ipam.mac_owner(l.mac), Some(owner.as_str()));
                    count += l.ips.len() as u128;
                }
            }
            let u = ipam.usage("d").unwrap();
            prop_assert_eq!(u.used, count);
            // v4: network, broadcast, gateway, one exclude (when inside); v6: network, gateway
            let v4_usable = n4 - 3 - u128::from(n4 > 4);
            let v6_usable = n6 - if n6 > 2 { 2 } else { 1 };
            prop_assert_eq!(u.used + u.available, v4_usable + v6_usable);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Validation's capacity (what a new Subnet's status says) and a fresh allocator's
    /// free count (what pods can get) are one number: both follow
    /// [`crate::address_space::AddressSpace`].
    #[test]
    fn validation_capacity_is_a_fresh_allocators_free_count(
        shape in shape(),
        excludes in proptest::collection::vec((0u16..300, 0u16..300), 0..4),
    ) {
        let size = shape.size();
        let ex: Vec<(u128, u128)> = excludes
            .iter()
            .map(|&(a, b)| {
                let (a, b) = (u128::from(a.min(b)), u128::from(a.max(b)));
                (a.min(size - 1), b.min(size - 1))
            })
            .collect();
        let mut spec = shape.spec(&ex);
        // validation gives every valid Subnet a gateway: the default one when none is set
        if spec.gateways.is_empty() {
            spec.gateways = spec.cidrs.iter().map(crate::validate::default_gateway).collect();
        }
        let pool = SubnetPool::new(&spec).expect("pool");
        prop_assert_eq!(pool.usage().available, crate::validate::capacity(&spec));
    }
}
