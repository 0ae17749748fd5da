//! Pod requests: static addresses, IP pool, dual-stack, MAC, KubeVirt.

use crate::ipam::*;
use crate::model::{IpRange, Mac, PodIpRequest};

use super::*;

// ---------- static addresses ----------

#[test]
fn static_ip_inside_outside_excluded_reserved_taken() {
    let mut s = blue();
    s.excludes.push(IpRange::single(ip("10.0.0.7")));
    let mut ipam = ipam_with(&[s]);
    let a = ipam
        .assign("ns/pod-a", "blue", &statics(&["10.0.0.9"]))
        .unwrap();
    assert_eq!(a.ips[0].to_string(), "10.0.0.9/24");
    assert_eq!(a.gateways, vec![ip("10.0.0.1")]);
    assert_eq!(a.mac, Mac([0x0a, 0x58, 10, 0, 0, 9]));

    let err = |req: PodIpRequest| {
        ipam.clone()
            .assign("ns/pod-b", "blue", &req)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(statics(&["10.1.0.5"])),
        "10.1.0.5 is outside subnet blue (10.0.0.0/24)"
    );
    assert_eq!(
        err(statics(&["fd00::5"])),
        "fd00::5 is outside subnet blue (10.0.0.0/24)"
    );
    assert_eq!(
        err(statics(&["10.0.0.7"])),
        "10.0.0.7 is excluded in subnet blue"
    );
    assert_eq!(
        err(statics(&["10.0.0.9"])),
        "10.0.0.9 is already assigned to ns/pod-a"
    );
    assert_eq!(
        err(statics(&["10.0.0.1"])),
        "10.0.0.1 is the gateway of subnet blue"
    );
    assert_eq!(
        err(statics(&["10.0.0.0"])),
        "10.0.0.0 is the network address of subnet blue"
    );
    assert_eq!(
        err(statics(&["10.0.0.255"])),
        "10.0.0.255 is the broadcast address of subnet blue"
    );
    assert_eq!(
        err(statics(&["10.0.0.5", "10.0.0.6"])),
        "10.0.0.5 and 10.0.0.6 are both IPv4: request at most one address per family"
    );
    // nothing of the failed requests was recorded
    assert_eq!(ipam.usage("blue").unwrap().used, 1);
    assert_eq!(ipam.lease("ns/pod-b"), None);
}

#[test]
fn static_ip_is_idempotent_for_the_same_pod() {
    let mut ipam = ipam_with(&[blue()]);
    let first = ipam
        .assign("ns/a", "blue", &statics(&["10.0.0.9"]))
        .unwrap();
    let again = ipam
        .assign("ns/a", "blue", &statics(&["10.0.0.9"]))
        .unwrap();
    assert_eq!(first, again);
    // a dynamic re-ask also returns what is held
    assert_eq!(ipam.assign("ns/a", "blue", &any()).unwrap(), first);
    assert_eq!(ipam.usage("blue").unwrap().used, 1);
    assert_eq!(
        ipam.assign("ns/a", "blue", &statics(&["10.0.0.10"]))
            .unwrap_err()
            .to_string(),
        "ns/a already holds 10.0.0.9 in subnet blue, not the requested 10.0.0.10; release it first"
    );
    ipam.add_subnet(&subnet("red", &["10.9.0.0/24"], &[], &[]))
        .unwrap();
    assert!(matches!(
        ipam.assign("ns/a", "red", &any()),
        Err(IpamError::SubnetMismatch { .. })
    ));
    assert_eq!(
        ipam.assign("ns/a", "nope", &any()).unwrap_err(),
        IpamError::SubnetMismatch {
            owner: "ns/a".into(),
            held: "blue".into(),
            requested: "nope".into()
        }
    );
    assert_eq!(
        ipam.assign("ns/b", "nope", &any()).unwrap_err().to_string(),
        "unknown subnet nope"
    );
}

#[test]
fn release_then_reuse_and_unknown_release_is_noop() {
    let mut ipam = ipam_with(&[blue()]);
    ipam.assign("ns/a", "blue", &statics(&["10.0.0.9"]))
        .unwrap();
    let lease = ipam.release("ns/a").unwrap();
    assert_eq!(lease.ips, vec![ip("10.0.0.9")]);
    assert_eq!(ipam.release("ns/a"), None);
    assert_eq!(ipam.release("never/seen"), None);
    assert_eq!(
        ipam.usage("blue").unwrap(),
        Usage {
            available: 253,
            used: 0
        }
    );
    let b = ipam
        .assign("ns/b", "blue", &statics(&["10.0.0.9"]))
        .unwrap();
    assert_eq!(b.mac, Mac([0x0a, 0x58, 10, 0, 0, 9]));
    assert_eq!(ipam.mac_owner(b.mac), Some("ns/b"));
}

// ---------- IP pool ----------

#[test]
fn pool_takes_the_first_free_address_of_the_list_in_the_subnet() {
    let mut s = blue();
    s.excludes.push(IpRange::single(ip("10.0.0.21")));
    let mut ipam = ipam_with(&[s]);
    let req = pool(&["192.168.0.1", "10.0.0.21", "10.0.0.20", "10.0.0.22"]);
    let a = ipam.assign("ns/a", "blue", &req).unwrap();
    assert_eq!(addrs(&a), vec![ip("10.0.0.20")]);
    let b = ipam.assign("ns/b", "blue", &req).unwrap();
    assert_eq!(addrs(&b), vec![ip("10.0.0.22")]);
    assert_eq!(
        ipam.assign("ns/c", "blue", &req).unwrap_err().to_string(),
        "subnet blue has no free IPv4 address left in ip_pool (192.168.0.1,10.0.0.21,10.0.0.20,10.0.0.22)"
    );
    ipam.release("ns/a");
    let c = ipam.assign("ns/c", "blue", &req).unwrap();
    assert_eq!(addrs(&c), vec![ip("10.0.0.20")]);
    // a pool with nothing in the subnet is an error, not a silent dynamic address
    assert_eq!(
        ipam.assign("ns/d", "blue", &pool(&["192.168.0.1"]))
            .unwrap_err()
            .to_string(),
        "no address of ip_pool (192.168.0.1) is inside subnet blue (10.0.0.0/24)"
    );
    // the pool does not move the dynamic cursor
    assert_eq!(
        addrs(&ipam.assign("ns/e", "blue", &any()).unwrap()),
        vec![ip("10.0.0.2")]
    );
}

#[test]
fn static_ip_wins_over_pool() {
    let mut ipam = ipam_with(&[blue()]);
    let mut req = pool(&["10.0.0.20"]);
    req.static_ips = vec![ip("10.0.0.30")];
    assert_eq!(
        addrs(&ipam.assign("ns/a", "blue", &req).unwrap()),
        vec![ip("10.0.0.30")]
    );
}

// ---------- dual-stack ----------

#[test]
fn dual_stack_gets_one_address_per_family() {
    let mut ipam = ipam_with(&[dual()]);
    let a = ipam.assign("ns/a", "dual", &any()).unwrap();
    assert_eq!(
        a.ips.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        ["10.1.0.2/24", "fd00:1::2/64"]
    );
    assert_eq!(a.gateways, vec![ip("10.1.0.1"), ip("fd00:1::1")]);
    assert_eq!(a.mac.to_string(), "0a:58:0a:01:00:02");
    // static v6 only: v4 dynamic; pool v4 only: v6 dynamic
    let b = ipam
        .assign("ns/b", "dual", &statics(&["fd00:1::99"]))
        .unwrap();
    assert_eq!(addrs(&b), vec![ip("10.1.0.3"), ip("fd00:1::99")]);
    let c = ipam.assign("ns/c", "dual", &pool(&["10.1.0.50"])).unwrap();
    assert_eq!(addrs(&c), vec![ip("10.1.0.50"), ip("fd00:1::3")]);
    let d = ipam
        .assign("ns/d", "dual", &statics(&["fd00:1::77", "10.1.0.77"]))
        .unwrap();
    assert_eq!(addrs(&d), vec![ip("10.1.0.77"), ip("fd00:1::77")]);
    assert_eq!(ipam.usage("dual").unwrap().used, 8);
    assert_eq!(
        ipam.subnet("dual")
            .unwrap()
            .family_usage(Family::V4)
            .unwrap()
            .used,
        4
    );
}

#[test]
fn dual_stack_is_atomic_when_ipv6_fails() {
    // the only IPv6 address is taken: the IPv4 address must not leak
    let s = subnet(
        "d",
        &["10.2.0.0/24", "fd00:2::/127"],
        &["10.2.0.1", "fd00:2::"],
        &[],
    );
    let mut ipam = ipam_with(&[s]);
    let a = ipam.assign("ns/a", "d", &any()).unwrap();
    assert_eq!(addrs(&a), vec![ip("10.2.0.2"), ip("fd00:2::1")]);
    let before = ipam.usage("d").unwrap();
    assert_eq!(
        ipam.assign("ns/b", "d", &any()).unwrap_err().to_string(),
        "subnet d has no free IPv6 address"
    );
    assert_eq!(ipam.usage("d").unwrap(), before);
    assert_eq!(ipam.owner_of("d", ip("10.2.0.3")), None);
    assert_eq!(ipam.lease("ns/b"), None);
    // static v4 + taken v6: same
    let e = ipam
        .assign("ns/b", "d", &statics(&["10.2.0.50", "fd00:2::1"]))
        .unwrap_err();
    assert_eq!(e.to_string(), "fd00:2::1 is already assigned to ns/a");
    assert_eq!(ipam.owner_of("d", ip("10.2.0.50")), None);
    // and the MAC was not recorded either
    assert_eq!(ipam.mac_owner(Mac([0x0a, 0x58, 10, 2, 0, 50])), None);
    // the failure did not move the cursor: once v6 frees up, the next v4 is .3
    ipam.release("ns/a");
    let b = ipam.assign("ns/b", "d", &any()).unwrap();
    assert_eq!(addrs(&b), vec![ip("10.2.0.3"), ip("fd00:2::1")]);
}

#[test]
fn dual_stack_mac_failure_is_atomic() {
    let mut ipam = ipam_with(&[dual(), blue()]);
    let taken = Mac([0x02, 0, 0, 0, 0, 1]);
    ipam.assign(
        "ns/x",
        "blue",
        &PodIpRequest {
            static_mac: Some(taken),
            ..any()
        },
    )
    .unwrap();
    let e = ipam
        .assign(
            "ns/a",
            "dual",
            &PodIpRequest {
                static_mac: Some(taken),
                ..any()
            },
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "MAC 02:00:00:00:00:01 is already assigned to ns/x"
    );
    assert_eq!(ipam.usage("dual").unwrap().used, 0);
}

// ---------- MAC ----------

#[test]
fn static_mac_is_unique_across_the_cluster() {
    let mut ipam = ipam_with(&[blue(), dual()]);
    let m: Mac = "00:00:00:53:6b:b6".parse().unwrap();
    let a = ipam
        .assign(
            "ns/a",
            "blue",
            &PodIpRequest {
                static_mac: Some(m),
                ..any()
            },
        )
        .unwrap();
    assert_eq!(a.mac, m);
    let e = ipam
        .assign(
            "other/b",
            "dual",
            &PodIpRequest {
                static_mac: Some(m),
                ..any()
            },
        )
        .unwrap_err();
    assert_eq!(
        e,
        IpamError::MacInUse {
            mac: m,
            owner: "ns/a".into()
        }
    );
    // the same pod asking again is fine; asking another MAC is a mismatch
    assert_eq!(
        ipam.assign(
            "ns/a",
            "blue",
            &PodIpRequest {
                static_mac: Some(m),
                ..any()
            }
        )
        .unwrap(),
        a
    );
    let other = Mac([2, 0, 0, 0, 0, 2]);
    assert!(matches!(
        ipam.assign(
            "ns/a",
            "blue",
            &PodIpRequest {
                static_mac: Some(other),
                ..any()
            }
        ),
        Err(IpamError::LeaseMismatch { .. })
    ));
    ipam.release("ns/a");
    assert!(
        ipam.assign(
            "other/b",
            "dual",
            &PodIpRequest {
                static_mac: Some(m),
                ..any()
            }
        )
        .is_ok()
    );
}

#[test]
fn derived_mac_taken_falls_back_to_random_unique() {
    let mut ipam = ipam_with(&[blue()]);
    let derived = Mac([0x0a, 0x58, 10, 0, 0, 2]);
    ipam.assign(
        "ns/x",
        "blue",
        &PodIpRequest {
            static_mac: Some(derived),
            static_ips: vec![ip("10.0.0.50")],
            ..any()
        },
    )
    .unwrap();
    let a = ipam.assign("ns/a", "blue", &any()).unwrap();
    assert_eq!(addrs(&a), vec![ip("10.0.0.2")]);
    assert_ne!(a.mac, derived);
    assert_eq!(
        a.mac.0[0] & 0x03,
        0x02,
        "locally administered unicast: {}",
        a.mac
    );
    assert_ne!(a.mac.0[..2], [0x0a, 0x58]);
}

#[test]
fn random_macs_are_local_unicast_and_unique() {
    let mut ipam = ipam_with(&[subnet("v6", &["fd00:6::/112"], &["fd00:6::1"], &[])]);
    let mut seen = std::collections::HashSet::new();
    for i in 0..2000 {
        let a = ipam.assign(&format!("ns/p{i}"), "v6", &any()).unwrap();
        assert_eq!(a.mac.0[0] & 0x03, 0x02, "{}", a.mac);
        assert!(seen.insert(a.mac));
    }
    for _ in 0..1000 {
        let m = mac::random_mac();
        assert_eq!(m.0[0] & 0x03, 0x02);
        assert!(m.to_string().parse::<Mac>().is_ok());
    }
}

// ---------- KubeVirt ----------

#[test]
fn vm_keeps_ips_and_mac_across_pod_delete_and_recreate() {
    let mut ipam = ipam_with(&[dual()]);
    let first = ipam
        .assign("ns/virt-launcher-vm1-abcde", "dual", &vm("vm1"))
        .unwrap();
    assert_eq!(ipam.lease("vm:ns/vm1").map(|l| l.ips.len()), Some(2));
    assert_eq!(
        ipam.owner_of("dual", first.ips[0].addr()),
        Some("vm:ns/vm1")
    );
    // the pod goes away: nothing is freed
    assert_eq!(ipam.release("ns/virt-launcher-vm1-abcde"), None);
    assert_eq!(ipam.usage("dual").unwrap().used, 2);
    // another pod takes the next address; the VM's new pod gets its old ones
    ipam.assign("ns/other", "dual", &any()).unwrap();
    let again = ipam
        .assign("ns/virt-launcher-vm1-fghij", "dual", &vm("vm1"))
        .unwrap();
    assert_eq!(again, first);
    // live migration: source and target pods coexist with the same addresses
    let target = ipam
        .assign("ns/virt-launcher-vm1-zzzzz", "dual", &vm("vm1"))
        .unwrap();
    assert_eq!(target, first);
    assert_eq!(
        ipam.addresses("ns/virt-launcher-vm1-zzzzz"),
        Some(first.clone())
    );
    ipam.release("ns/virt-launcher-vm1-fghij");
    assert_eq!(
        ipam.addresses("ns/virt-launcher-vm1-zzzzz"),
        Some(first.clone())
    );
    // same VMI name in another namespace is another VM
    let other_ns = ipam
        .assign("ns2/virt-launcher-vm1-q", "dual", &vm("vm1"))
        .unwrap();
    assert_ne!(other_ns.ips, first.ips);
    // VMI deleted: freed
    let freed = ipam.release_vm("ns", "vm1").unwrap();
    assert_eq!(freed.mac, first.mac);
    assert_eq!(ipam.addresses("ns/virt-launcher-vm1-zzzzz"), None);
    assert_eq!(ipam.owner_of("dual", first.ips[0].addr()), None);
    assert_eq!(ipam.mac_owner(first.mac), None);
    assert_eq!(ipam.release_vm("ns", "vm1"), None);
    assert_eq!(ipam.release_vm("ns", "never"), None);
}

#[test]
fn vm_with_static_ip() {
    let mut ipam = ipam_with(&[blue()]);
    let req = PodIpRequest {
        vm: Some("v".into()),
        ..statics(&["10.0.0.40"])
    };
    let a = ipam.assign("ns/p1", "blue", &req).unwrap();
    ipam.release("ns/p1");
    assert_eq!(ipam.assign("ns/p2", "blue", &req).unwrap(), a);
    assert_eq!(
        ipam.assign("ns/p3", "blue", &statics(&["10.0.0.40"]))
            .unwrap_err()
            .to_string(),
        "10.0.0.40 is already assigned to vm:ns/v"
    );
    assert_eq!(
        ipam.assign("no-namespace", "blue", &req)
            .unwrap_err()
            .to_string(),
        "invalid owner key \"no-namespace\": expected <namespace>/<name>"
    );
}

#[test]
fn pod_that_stops_being_a_vm_pod_releases_its_own_lease() {
    let mut ipam = ipam_with(&[blue()]);
    let v = ipam.assign("ns/p", "blue", &vm("v")).unwrap();
    let own = ipam.assign("ns/p", "blue", &any()).unwrap();
    assert_ne!(v.ips, own.ips);
    assert_eq!(ipam.addresses("ns/p"), Some(own.clone()));
    assert_eq!(ipam.release("ns/p").map(|l| l.mac), Some(own.mac));
    assert!(ipam.lease(&vm_key("ns", "v")).is_some());
}

#[test]
fn annotations_to_addresses() {
    use crate::ipam::annotations::{IP_ADDRESS, KUBEVIRT_DOMAIN, MAC_ADDRESS, parse_request};
    let mut ipam = ipam_with(&[dual()]);
    let ann = [
        (IP_ADDRESS, "10.1.0.20/24,fd00:1::20"),
        (MAC_ADDRESS, "02:00:00:00:00:20"),
        (KUBEVIRT_DOMAIN, "vm20"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into_iter()
    .collect();
    let req = parse_request(&ann, &Default::default()).unwrap();
    let a = ipam
        .assign("ns/virt-launcher-vm20-x", "dual", &req)
        .unwrap();
    assert_eq!(
        a.ips.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        ["10.1.0.20/24", "fd00:1::20/64"]
    );
    assert_eq!(a.mac.to_string(), "02:00:00:00:00:20");
    assert_eq!(ipam.owner_of("dual", ip("10.1.0.20")), Some("vm:ns/vm20"));
}
