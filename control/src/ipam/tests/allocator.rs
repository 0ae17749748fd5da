//! The per-subnet allocator and edge prefix lengths.

use crate::ipam::*;

use super::*;

// ---------- the per-subnet allocator ----------

#[test]
fn never_network_broadcast_or_gateway() {
    let mut p = SubnetPool::new(&subnet("s", &["10.0.0.0/29"], &["10.0.0.1"], &[])).unwrap();
    let o = owner("ns/a");
    let got: Vec<_> = (0..5)
        .map(|_| p.allocate_next(Family::V4, &o).unwrap())
        .collect();
    assert_eq!(
        got,
        ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"].map(ip)
    );
    let e = p.allocate_next(Family::V4, &o).unwrap_err();
    assert_eq!(e.to_string(), "subnet s has no free IPv4 address");
    assert_eq!(
        p.usage(),
        Usage {
            available: 0,
            used: 5
        }
    );
}

#[test]
fn gateway_elsewhere_in_the_range_is_skipped() {
    let mut p = SubnetPool::new(&subnet("s", &["10.0.0.0/29"], &["10.0.0.6"], &[])).unwrap();
    let o = owner("x");
    let got: Vec<_> = std::iter::from_fn(|| p.allocate_next(Family::V4, &o).ok()).collect();
    assert_eq!(
        got,
        ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"].map(ip)
    );
}

#[test]
fn ipv6_skips_subnet_router_anycast_but_uses_last_address() {
    let mut p = SubnetPool::new(&subnet("s", &["fd00::/126"], &["fd00::1"], &[])).unwrap();
    let o = owner("x");
    let got: Vec<_> = std::iter::from_fn(|| p.allocate_next(Family::V6, &o).ok()).collect();
    assert_eq!(got, ["fd00::2", "fd00::3"].map(ip));
    assert_eq!(
        p.allocate_next(Family::V6, &o).unwrap_err().to_string(),
        "subnet s has no free IPv6 address"
    );
    assert!(matches!(
        p.allocate_next(Family::V4, &o),
        Err(IpamError::Exhausted {
            family: Family::V4,
            ..
        })
    ));
}

#[test]
fn excludes_are_never_allocated() {
    let s = subnet(
        "s",
        &["10.0.0.0/28"],
        &["10.0.0.1"],
        &[
            ("10.0.0.3", "10.0.0.5"),
            ("10.0.0.9", "10.0.0.9"),
            ("192.168.0.0", "192.168.0.9"),
        ],
    );
    let mut p = SubnetPool::new(&s).unwrap();
    let o = owner("x");
    let got: Vec<_> = std::iter::from_fn(|| p.allocate_next(Family::V4, &o).ok()).collect();
    assert_eq!(
        got,
        [
            "10.0.0.2",
            "10.0.0.6",
            "10.0.0.7",
            "10.0.0.8",
            "10.0.0.10",
            "10.0.0.11",
            "10.0.0.12",
            "10.0.0.13",
            "10.0.0.14"
        ]
        .map(ip)
    );
}

#[test]
fn round_robin_does_not_reuse_a_just_released_address() {
    let mut p = SubnetPool::new(&subnet("s", &["10.0.0.0/29"], &["10.0.0.1"], &[])).unwrap();
    let o = owner("x");
    let a = p.allocate_next(Family::V4, &o).unwrap();
    assert_eq!(p.release(a).as_deref(), Some("x"));
    let b = p.allocate_next(Family::V4, &o).unwrap();
    assert_ne!(a, b);
    assert_eq!(b, ip("10.0.0.3"));
    // ... but wraps around to it once the end is reached
    let rest: Vec<_> = std::iter::from_fn(|| p.allocate_next(Family::V4, &o).ok()).collect();
    assert_eq!(
        rest,
        ["10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.2"].map(ip)
    );
}

#[test]
fn given_address_does_not_move_the_cursor() {
    let mut p = SubnetPool::new(&blue()).unwrap();
    let o = owner("x");
    p.allocate(ip("10.0.0.100"), &o).unwrap();
    assert_eq!(p.allocate_next(Family::V4, &o).unwrap(), ip("10.0.0.2"));
    assert_eq!(p.release(ip("10.0.0.200")), None);
    assert_eq!(p.release(ip("fd00::1")), None);
}

#[test]
fn subnet_pool_rejects_inconsistent_specs_without_panicking() {
    let mut s = blue();
    s.cidrs.clear();
    assert!(matches!(
        SubnetPool::new(&s),
        Err(IpamError::BadSubnet { .. })
    ));
    let s = subnet("s", &["10.0.0.0/24", "10.1.0.0/24"], &[], &[]);
    assert!(matches!(
        SubnetPool::new(&s),
        Err(IpamError::BadSubnet { .. })
    ));
    let s = subnet("s", &["10.0.0.0/24"], &["10.9.0.1"], &[]);
    assert_eq!(
        SubnetPool::new(&s).unwrap_err().to_string(),
        "subnet s: gateway 10.9.0.1 is outside 10.0.0.0/24"
    );
    // excludes of the wrong family or reversed are ignored
    let s = subnet(
        "s",
        &["10.0.0.0/30"],
        &[],
        &[
            ("fd00::", "fd00::9"),
            ("10.0.0.2", "10.0.0.1"),
            ("10.0.0.1", "fd00::1"),
        ],
    );
    assert_eq!(SubnetPool::new(&s).unwrap().usage().available, 2);
}

// ---------- edge prefix lengths ----------

#[test]
fn ipv4_slash31_is_point_to_point() {
    let mut ipam = ipam_with(&[subnet("p2p", &["10.0.0.0/31"], &["10.0.0.0"], &[])]);
    assert_eq!(
        ipam.usage("p2p").unwrap(),
        Usage {
            available: 1,
            used: 0
        }
    );
    let a = ipam.assign("ns/a", "p2p", &any()).unwrap();
    assert_eq!(addrs(&a), vec![ip("10.0.0.1")]);
    assert_eq!(a.ips[0].to_string(), "10.0.0.1/31");
    assert!(matches!(
        ipam.assign("ns/b", "p2p", &any()),
        Err(IpamError::Exhausted { .. })
    ));
}

#[test]
fn ipv4_slash32() {
    let mut ipam = ipam_with(&[
        subnet("gw", &["10.0.0.7/32"], &["10.0.0.7"], &[]),
        subnet("host", &["10.0.0.8/32"], &[], &[]),
    ]);
    assert_eq!(ipam.usage("gw").unwrap().available, 0);
    assert_eq!(
        ipam.assign("ns/a", "gw", &any()).unwrap_err().to_string(),
        "subnet gw has no free IPv4 address"
    );
    let a = ipam.assign("ns/a", "host", &any()).unwrap();
    assert_eq!(a.ips[0].to_string(), "10.0.0.8/32");
    assert_eq!(
        ipam.usage("host").unwrap(),
        Usage {
            available: 0,
            used: 1
        }
    );
}

#[test]
fn ipv6_slash127_and_slash128() {
    let mut ipam = ipam_with(&[
        subnet("p2p", &["fd00::/127"], &["fd00::"], &[]),
        subnet("one", &["fd00::9/128"], &[], &[]),
    ]);
    let a = ipam.assign("ns/a", "p2p", &any()).unwrap();
    assert_eq!(a.ips[0].to_string(), "fd00::1/127");
    assert!(matches!(
        ipam.assign("ns/b", "p2p", &any()),
        Err(IpamError::Exhausted {
            family: Family::V6,
            ..
        })
    ));
    let b = ipam.assign("ns/b", "one", &any()).unwrap();
    assert_eq!(addrs(&b), vec![ip("fd00::9")]);
    // IPv6-only: random locally administered unicast MAC
    assert_eq!(b.mac.0[0] & 0x03, 0x02);
}
