//! Rebuilding state on controller start.

use crate::ipam::*;
use crate::model::{IpRange, Mac};

use super::*;

// ---------- restore ----------

#[test]
fn restore_marks_used_and_is_idempotent() {
    let mut ipam = ipam_with(&[dual()]);
    let m = Mac([0x0a, 0x58, 10, 1, 0, 2]);
    ipam.restore("ns/a", "dual", &[ip("fd00:1::2"), ip("10.1.0.2")], m)
        .unwrap();
    ipam.restore("ns/a", "dual", &[ip("10.1.0.2"), ip("fd00:1::2")], m)
        .unwrap();
    assert_eq!(ipam.usage("dual").unwrap().used, 2);
    // the pod asking (again) after the restart gets what it had
    let a = ipam.assign("ns/a", "dual", &any()).unwrap();
    assert_eq!(addrs(&a), vec![ip("10.1.0.2"), ip("fd00:1::2")]);
    assert_eq!(a.mac, m);
    // a new pod gets something else
    let b = ipam.assign("ns/b", "dual", &any()).unwrap();
    assert_eq!(addrs(&b), vec![ip("10.1.0.3"), ip("fd00:1::3")]);
}

#[test]
fn restore_conflicts_name_both_owners_and_do_not_corrupt_state() {
    let mut ipam = ipam_with(&[dual()]);
    let m1 = Mac([2, 0, 0, 0, 0, 1]);
    let m2 = Mac([2, 0, 0, 0, 0, 2]);
    ipam.restore("ns/pod-a", "dual", &[ip("10.1.0.9"), ip("fd00:1::9")], m1)
        .unwrap();
    let snapshot = ipam.subnet("dual").unwrap().usage();

    // v4 is fresh but v6 is claimed: nothing of the claim is recorded
    let e = ipam
        .restore("ns/pod-b", "dual", &[ip("10.1.0.10"), ip("fd00:1::9")], m2)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "restore conflict in subnet dual: fd00:1::9 claimed by ns/pod-b is already assigned to ns/pod-a"
    );
    assert_eq!(ipam.subnet("dual").unwrap().usage(), snapshot);
    assert_eq!(ipam.owner_of("dual", ip("10.1.0.10")), None);
    assert_eq!(ipam.mac_owner(m2), None);
    assert_eq!(ipam.owner_of("dual", ip("fd00:1::9")), Some("ns/pod-a"));

    let e = ipam
        .restore("vm:ns/v", "dual", &[ip("10.1.0.10")], m1)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "restore conflict in subnet dual: MAC 02:00:00:00:00:01 claimed by vm:ns/v is already assigned to ns/pod-a"
    );
    assert_eq!(ipam.owner_of("dual", ip("10.1.0.10")), None);

    // same owner, different addresses
    assert!(matches!(
        ipam.restore("ns/pod-a", "dual", &[ip("10.1.0.11")], m1),
        Err(IpamError::LeaseMismatch { .. })
    ));
    // bad claims
    assert!(matches!(
        ipam.restore("ns/c", "dual", &[ip("10.1.0.1")], m2),
        Err(IpamError::Reserved {
            kind: ReservedKind::Gateway,
            ..
        })
    ));
    assert!(matches!(
        ipam.restore("ns/c", "dual", &[ip("10.9.0.1")], m2),
        Err(IpamError::OutsideSubnet { .. })
    ));
    assert!(matches!(
        ipam.restore("ns/c", "nope", &[ip("10.1.0.3")], m2),
        Err(IpamError::UnknownSubnet(_))
    ));
    assert!(matches!(
        ipam.restore("ns/c", "dual", &[], m2),
        Err(IpamError::NothingToRestore(_))
    ));
    assert!(matches!(
        ipam.restore("ns/c", "dual", &[ip("10.1.0.3"), ip("10.1.0.4")], m2),
        Err(IpamError::DuplicateFamily { .. })
    ));
    assert_eq!(ipam.subnet("dual").unwrap().usage(), snapshot);
    assert_eq!(ipam.mac_owner(m2), None);
}

#[test]
fn restore_accepts_excluded_addresses_and_vm_keys() {
    let mut s = blue();
    s.excludes.push(IpRange {
        start: ip("10.0.0.100"),
        end: ip("10.0.0.199"),
    });
    let mut ipam = ipam_with(&[s]);
    let m = Mac([0x0a, 0x58, 10, 0, 0, 150]);
    ipam.restore(&vm_key("ns", "v"), "blue", &[ip("10.0.0.150")], m)
        .unwrap();
    assert_eq!(
        ipam.usage("blue").unwrap(),
        Usage {
            available: 153,
            used: 1
        }
    );
    let a = ipam
        .assign("ns/virt-launcher-v-1", "blue", &vm("v"))
        .unwrap();
    assert_eq!(addrs(&a), vec![ip("10.0.0.150")]);
    assert_eq!(a.mac, m);
    // once freed, an excluded address is not handed out again
    ipam.release_vm("ns", "v");
    assert_eq!(
        ipam.usage("blue").unwrap(),
        Usage {
            available: 153,
            used: 0
        }
    );
    assert!(matches!(
        ipam.assign("ns/x", "blue", &statics(&["10.0.0.150"])),
        Err(IpamError::Excluded { .. })
    ));
}
