//! The checks against a fake sysfs tree laid out as the kernel does it.

use std::os::unix::fs::symlink;
use std::path::Path;

use super::*;

/// A PCI device `addr` under `root` bound to `driver` (if any), in IOMMU group `group`
/// (if any), on NUMA node `numa`.
fn device(root: &Path, addr: &str, driver: Option<&str>, group: Option<u32>, numa: i64) {
    let dev = root.join("sys/bus/pci/devices").join(addr);
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("numa_node"), format!("{numa}\n")).unwrap();
    if let Some(d) = driver {
        let target = root.join("sys/bus/pci/drivers").join(d);
        std::fs::create_dir_all(&target).unwrap();
        symlink(&target, dev.join("driver")).unwrap();
    }
    if let Some(g) = group {
        let target = root.join("sys/kernel/iommu_groups").join(g.to_string());
        std::fs::create_dir_all(&target).unwrap();
        symlink(&target, dev.join("iommu_group")).unwrap();
    }
}

fn vfio_dev(root: &Path, name: &str) {
    std::fs::create_dir_all(root.join("dev/vfio")).unwrap();
    std::fs::write(root.join("dev/vfio").join(name), "").unwrap();
}

#[test]
fn devargs_name_a_pci_address_or_a_known_vdev() {
    assert_eq!(
        parse("0000:03:00.0"),
        Ok(Device::Pci("0000:03:00.0".into()))
    );
    assert_eq!(parse("03:00.1"), Ok(Device::Pci("0000:03:00.1".into())));
    assert_eq!(
        parse("0000:AF:00.0,n_rxq=2"),
        Ok(Device::Pci("0000:af:00.0".into()))
    );
    assert_eq!(
        parse("net_af_packet0,iface=eth1"),
        Ok(Device::Vdev {
            driver: "net_af_packet".into()
        })
    );
    assert_eq!(parse(""), Err(NicRefusal::Missing));
    for bad in [
        "eth1",
        "net_af_packet",
        "net_ring0",
        "0000:03:00.8",
        "3:0.0",
        "crypto_aesni0",
    ] {
        let e = parse(bad).unwrap_err();
        assert!(matches!(e, NicRefusal::Unrecognised(_)), "{bad}: {e}");
        assert!(e.to_string().contains(bad), "{e}");
    }
}

#[test]
fn a_vfio_device_with_its_group_is_accepted_with_its_numa_node() {
    let t = tempfile::tempdir().unwrap();
    device(t.path(), "0000:03:00.0", Some("vfio-pci"), Some(17), 1);
    vfio_dev(t.path(), "17");
    let f = check(t.path(), "0000:03:00.0").expect("accepted");
    assert_eq!(f.driver.as_deref(), Some("vfio-pci"));
    assert_eq!((f.iommu_group, f.numa), (Some(17), Some(1)));
}

#[test]
fn each_refusal_names_its_reason() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    // no such device
    let e = check(r, "0000:05:00.0").unwrap_err();
    assert_eq!(e, NicRefusal::NoDevice("0000:05:00.0".into()));
    // no driver
    device(r, "0000:06:00.0", None, None, 0);
    let e = check(r, "0000:06:00.0").unwrap_err();
    assert!(e.to_string().contains("no driver bound"), "{e}");
    // the kernel's own netdev driver
    device(r, "0000:07:00.0", Some("ixgbe"), Some(3), 0);
    let e = check(r, "0000:07:00.0").unwrap_err();
    assert!(
        e.to_string().contains("bound to ixgbe") && e.to_string().contains("vfio-pci"),
        "{e}"
    );
    // vfio-pci without an IOMMU group
    device(r, "0000:08:00.0", Some("vfio-pci"), None, 0);
    let e = check(r, "0000:08:00.0").unwrap_err();
    assert!(e.to_string().contains("no IOMMU group"), "{e}");
    // a group without its /dev/vfio node
    device(r, "0000:09:00.0", Some("vfio-pci"), Some(21), 0);
    let e = check(r, "0000:09:00.0").unwrap_err();
    assert_eq!(
        e,
        NicRefusal::NoVfioDevice {
            addr: "0000:09:00.0".into(),
            group: 21
        }
    );
    assert!(e.to_string().contains("/dev/vfio/21"), "{e}");
}

#[test]
fn noiommu_mode_and_uio_drivers_need_no_group() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    device(r, "0000:0a:00.0", Some("uio_pci_generic"), None, -1);
    let f = check(r, "0a:00.0").expect("uio needs no IOMMU group");
    assert_eq!(f.numa, None, "-1 is unknown");
    device(r, "0000:0b:00.0", Some("vfio-pci"), None, 0);
    std::fs::create_dir_all(r.join("sys/module/vfio/parameters")).unwrap();
    std::fs::write(
        r.join("sys/module/vfio/parameters/enable_unsafe_noiommu_mode"),
        "Y\n",
    )
    .unwrap();
    assert!(check(r, "0000:0b:00.0").is_ok(), "no-IOMMU mode");
    device(r, "0000:0c:00.0", Some("vfio-pci"), Some(4), 0);
    vfio_dev(r, "noiommu-4");
    assert!(check(r, "0000:0c:00.0").is_ok(), "no-IOMMU group device");
}

#[test]
fn a_vdev_needs_no_host_check() {
    let t = tempfile::tempdir().unwrap();
    let f = check(t.path(), "net_af_packet0,iface=eth1").expect("vdev");
    assert_eq!(f.numa, None);
    assert!(matches!(f.device, Device::Vdev { .. }));
}
