//! A DPDK NIC as the node's uplink (`uplink: dpdk`, `uplinkDevargs`): what the agent
//! checks on the host before it asks ovs-vswitchd to take the device, and what each
//! refusal says.
//!
//! `uplinkDevargs` is what OVS puts in `options:dpdk-devargs`: a PCI address
//! (`0000:03:00.0`, or `03:00.0` for domain 0) for a NIC an administrator bound to a
//! userspace driver, or a DPDK virtual device (`net_af_packet0,iface=eth1`,
//! `net_tap0,...`, `net_af_xdp0,iface=eth1`) — the lab's stand-in for a NIC, taking the
//! same path through the agent. For a PCI device the agent checks, under the sysfs root:
//!
//! - the device exists (`/sys/bus/pci/devices/<addr>`);
//! - its driver is a userspace one DPDK can drive (`vfio-pci`, `uio_pci_generic`,
//!   `igb_uio`), not a kernel netdev driver (then DPDK cannot take it: bind it first);
//! - with `vfio-pci`, its IOMMU group (`iommu_group` link) and that group's character
//!   device (`/dev/vfio/<group>`), unless VFIO's no-IOMMU mode is on
//!   (`/sys/module/vfio/parameters/enable_unsafe_noiommu_mode` = `Y`);
//! - its NUMA node (`numa_node`; -1 = unknown), which the datapath decision then uses for
//!   the socket memory and the PMD CPUs, as it does for `nic`.
//!
//! Hugepages and DPDK's initialisation are the datapath decision's checks (an uplink on
//! DPDK needs the `dpdk` datapath).

use std::path::Path;

/// Userspace PCI drivers DPDK can drive.
pub const USERSPACE_DRIVERS: &[&str] = &["vfio-pci", "uio_pci_generic", "igb_uio"];
/// DPDK virtual devices accepted as an uplink.
pub const VDEV_DRIVERS: &[&str] = &["net_af_packet", "net_tap", "net_af_xdp"];

/// What `uplinkDevargs` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// A PCI address, normalised to `DDDD:BB:DD.F`.
    Pci(String),
    /// A virtual device (its driver, e.g. `net_af_packet`).
    Vdev { driver: String },
}

/// What the checks found of an accepted device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicFacts {
    pub device: Device,
    /// The PCI device's driver.
    pub driver: Option<String>,
    pub iommu_group: Option<u32>,
    /// NUMA node (`None`: unknown, or a vdev).
    pub numa: Option<u32>,
}

/// Why the device cannot be the uplink.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NicRefusal {
    #[error(
        "uplinkDevargs {0:?} is neither a PCI address (0000:03:00.0) nor a DPDK virtual device ({vdevs})",
        vdevs = VDEV_DRIVERS.join(", ")
    )]
    Unrecognised(String),
    #[error("uplinkDevargs is empty: uplink dpdk needs the device (a PCI address or a DPDK vdev)")]
    Missing,
    #[error("PCI device {0} does not exist on this node (/sys/bus/pci/devices/{0})")]
    NoDevice(String),
    #[error(
        "PCI device {addr} has no driver bound: bind it to vfio-pci (docs/datapath.md, \"A DPDK NIC as the uplink\")"
    )]
    NoDriver { addr: String },
    #[error(
        "PCI device {addr} is bound to {driver}, a kernel driver DPDK cannot take it from: bind it to vfio-pci (or {others})",
        others = USERSPACE_DRIVERS[1..].join(", ")
    )]
    KernelDriver { addr: String, driver: String },
    #[error(
        "PCI device {addr} is bound to vfio-pci but has no IOMMU group: enable the IOMMU (intel_iommu=on or amd_iommu=on, iommu=pt) or VFIO's no-IOMMU mode"
    )]
    NoIommuGroup { addr: String },
    #[error(
        "PCI device {addr}'s IOMMU group {group} has no /dev/vfio/{group}: is the vfio-pci module loaded and the device bound through it?"
    )]
    NoVfioDevice { addr: String, group: u32 },
}

/// Parses `uplinkDevargs` (the first comma-separated field names the device).
pub fn parse(devargs: &str) -> Result<Device, NicRefusal> {
    let first = devargs.split(',').next().unwrap_or("").trim();
    if first.is_empty() {
        return Err(NicRefusal::Missing);
    }
    if let Some(addr) = pci_address(first) {
        return Ok(Device::Pci(addr));
    }
    // a vdev's name is its driver followed by an instance number: net_af_packet0
    let driver = first.trim_end_matches(|c: char| c.is_ascii_digit());
    if VDEV_DRIVERS.contains(&driver) && driver.len() < first.len() {
        return Ok(Device::Vdev {
            driver: driver.to_string(),
        });
    }
    Err(NicRefusal::Unrecognised(devargs.to_string()))
}

/// `DDDD:BB:DD.F` or `BB:DD.F` (hex), normalised to the long form in lower case.
pub fn pci_address(s: &str) -> Option<String> {
    let s = s.to_ascii_lowercase();
    let full = if s.matches(':').count() == 1 {
        format!("0000:{s}")
    } else {
        s
    };
    let (head, func) = full.split_once('.')?;
    let parts: Vec<&str> = head.split(':').collect();
    let hex = |p: &str, n: usize| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit());
    let ok = parts.len() == 3
        && hex(parts[0], 4)
        && hex(parts[1], 2)
        && hex(parts[2], 2)
        && func.len() == 1
        && func.chars().all(|c| ('0'..='7').contains(&c));
    ok.then_some(full)
}

/// Checks `devargs` against the host under `root` (`/` on a node).
pub fn check(root: &Path, devargs: &str) -> Result<NicFacts, NicRefusal> {
    let device = parse(devargs)?;
    let addr = match &device {
        Device::Vdev { .. } => {
            return Ok(NicFacts {
                device,
                driver: None,
                iommu_group: None,
                numa: None,
            });
        }
        Device::Pci(a) => a.clone(),
    };
    let dev = root.join("sys/bus/pci/devices").join(&addr);
    if !dev.exists() {
        return Err(NicRefusal::NoDevice(addr));
    }
    let link_name = |p: &Path| {
        std::fs::read_link(p)
            .ok()
            .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
    };
    let driver = link_name(&dev.join("driver"))
        .ok_or_else(|| NicRefusal::NoDriver { addr: addr.clone() })?;
    if !USERSPACE_DRIVERS.contains(&driver.as_str()) {
        return Err(NicRefusal::KernelDriver { addr, driver });
    }
    let iommu_group = link_name(&dev.join("iommu_group")).and_then(|g| g.parse::<u32>().ok());
    if driver == "vfio-pci" {
        let noiommu = std::fs::read_to_string(
            root.join("sys/module/vfio/parameters/enable_unsafe_noiommu_mode"),
        )
        .is_ok_and(|v| v.trim() == "Y");
        match iommu_group {
            None if !noiommu => return Err(NicRefusal::NoIommuGroup { addr }),
            Some(group) => {
                // in no-IOMMU mode the device node is /dev/vfio/noiommu-<group>
                let plain = root.join(format!("dev/vfio/{group}"));
                let noio = root.join(format!("dev/vfio/noiommu-{group}"));
                let present = plain.exists() || (noiommu && noio.exists());
                if !present {
                    return Err(NicRefusal::NoVfioDevice { addr, group });
                }
            }
            None => {}
        }
    }
    let numa = std::fs::read_to_string(dev.join("numa_node"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|n| u32::try_from(n).ok());
    Ok(NicFacts {
        device,
        driver: Some(driver),
        iommu_group,
        numa,
    })
}

#[cfg(test)]
mod tests;
