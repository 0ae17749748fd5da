//! Subnet lifecycle and the memory of the representation.

use std::net::IpAddr;

use crate::ipam::*;
use crate::model::IpRange;

use super::*;

// ---------- subnet lifecycle ----------

#[test]
fn update_excludes_keeps_handed_out_addresses() {
    let mut ipam = ipam_with(&[blue()]);
    let a = ipam
        .assign("ns/a", "blue", &statics(&["10.0.0.10"]))
        .unwrap();
    let mut s = blue();
    s.excludes = vec![IpRange {
        start: ip("10.0.0.2"),
        end: ip("10.0.0.20"),
    }];
    ipam.update_subnet(&s).unwrap();
    // still held, still counted as used; the rest of the range is unavailable
    assert_eq!(ipam.addresses("ns/a"), Some(a.clone()));
    assert_eq!(
        ipam.usage("blue").unwrap(),
        Usage {
            available: 253 - 19,
            used: 1
        }
    );
    assert_eq!(
        addrs(&ipam.assign("ns/b", "blue", &any()).unwrap()),
        vec![ip("10.0.0.21")]
    );
    assert_eq!(
        ipam.assign("ns/c", "blue", &statics(&["10.0.0.11"]))
            .unwrap_err()
            .to_string(),
        "10.0.0.11 is excluded in subnet blue"
    );
    // releasing an excluded address does not make it available
    ipam.release("ns/a");
    assert_eq!(
        ipam.usage("blue").unwrap(),
        Usage {
            available: 253 - 19 - 1,
            used: 1
        }
    );
    // lifting the exclusion makes the range available again
    ipam.update_subnet(&blue()).unwrap();
    assert_eq!(
        ipam.usage("blue").unwrap(),
        Usage {
            available: 252,
            used: 1
        }
    );
    assert!(
        ipam.assign("ns/c", "blue", &statics(&["10.0.0.11"]))
            .is_ok()
    );
}

#[test]
fn update_gateway_and_cidr() {
    let mut ipam = ipam_with(&[blue()]);
    let mut s = blue();
    s.gateways = vec![ip("10.0.0.254")];
    ipam.update_subnet(&s).unwrap();
    assert!(ipam.assign("ns/a", "blue", &statics(&["10.0.0.1"])).is_ok());
    assert!(matches!(
        ipam.assign("ns/b", "blue", &statics(&["10.0.0.254"])),
        Err(IpamError::Reserved {
            kind: ReservedKind::Gateway,
            ..
        })
    ));
    let wider = subnet("blue", &["10.0.0.0/23"], &["10.0.0.1"], &[]);
    assert_eq!(
        ipam.update_subnet(&wider).unwrap_err().to_string(),
        "subnet blue: CIDRs cannot change from 10.0.0.0/24 to 10.0.0.0/23 while 1 addresses are in use"
    );
    ipam.release("ns/a");
    ipam.update_subnet(&wider).unwrap();
    assert_eq!(ipam.usage("blue").unwrap().available, 509);
    assert!(matches!(
        ipam.update_subnet(&subnet("x", &["10.0.0.0/24"], &[], &[])),
        Err(IpamError::UnknownSubnet(_))
    ));
    // a bad update leaves the subnet as it was
    let mut bad = wider.clone();
    bad.gateways = vec![ip("10.7.0.1")];
    assert!(ipam.update_subnet(&bad).is_err());
    assert_eq!(ipam.subnet_spec("blue"), Some(&wider));
}

#[test]
fn remove_subnet_is_refused_while_in_use() {
    let mut ipam = ipam_with(&[blue()]);
    assert_eq!(
        ipam.add_subnet(&blue()).unwrap_err().to_string(),
        "subnet blue already exists"
    );
    ipam.assign("ns/b", "blue", &any()).unwrap();
    ipam.assign("ns/a", "blue", &vm("v")).unwrap();
    assert_eq!(
        ipam.remove_subnet("blue").unwrap_err().to_string(),
        "subnet blue is still used by ns/b, vm:ns/v: release them first"
    );
    ipam.release("ns/b");
    ipam.release("ns/a"); // VM pod: the VM still holds its address
    assert!(ipam.remove_subnet("blue").is_err());
    ipam.release_vm("ns", "v");
    ipam.remove_subnet("blue").unwrap();
    ipam.remove_subnet("blue").unwrap();
    assert!(ipam.subnet_names().next().is_none());
    assert!(matches!(
        ipam.usage("blue"),
        Err(IpamError::UnknownSubnet(_))
    ));
    ipam.apply_subnet(&blue()).unwrap();
    ipam.apply_subnet(&blue()).unwrap();
    assert_eq!(ipam.subnet_names().collect::<Vec<_>>(), ["blue"]);
}

#[test]
fn usage_of_a_slash64_does_not_overflow() {
    let ipam = ipam_with(&[dual()]);
    let u = ipam.usage("dual").unwrap();
    assert_eq!(u.available, 253 + (1u128 << 64) - 2);
    let everything = ipam_with(&[subnet("all", &["::/0"], &[], &[])]);
    assert_eq!(everything.usage("all").unwrap().available, u128::MAX);
}

// ---------- memory ----------

#[test]
fn slash64_representation_is_proportional_to_allocations() {
    let mut p = SubnetPool::new(&subnet("v6", &["fd00:64::/64"], &["fd00:64::1"], &[])).unwrap();
    assert_eq!(p.range_count(), 1);
    assert!(
        p.heap_bytes_estimate() < 1024,
        "{}",
        p.heap_bytes_estimate()
    );
    let o = owner("x");
    let ips: Vec<_> = (0..10_000)
        .map(|_| p.allocate_next(Family::V6, &o).unwrap())
        .collect();
    // sequential allocations only shrink the one free range
    assert_eq!(p.range_count(), 1);
    // freeing every other address: one fragment per hole, never more
    for ip in ips.iter().step_by(2) {
        p.release(*ip);
    }
    assert!(p.range_count() <= 5_000 + 2, "{}", p.range_count());
    // random static addresses scattered over the /64: one split each at most
    let mut q = SubnetPool::new(&subnet("v6", &["fd00:64::/64"], &["fd00:64::1"], &[])).unwrap();
    for i in 0..1_000u128 {
        let x = u128::from("fd00:64::".parse::<std::net::Ipv6Addr>().unwrap())
            + 2
            + i * 0x0123_4567_89ab;
        q.allocate(IpAddr::V6(x.into()), &o).unwrap();
    }
    assert!(q.range_count() <= 1_000 + 1, "{}", q.range_count());
    assert_eq!(q.usage().used, 1_000);
}
