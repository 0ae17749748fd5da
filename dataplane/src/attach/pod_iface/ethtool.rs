//! Legacy ethtool ioctls (`SIOCETHTOOL`) for the tx checksum offload flag.
//!
//! `ETHTOOL_STXCSUM` with value 0 is what `ethtool -K IFACE tx off` does: the kernel clears
//! every checksum feature (and, through feature dependencies, TSO/GSO-partial), so the
//! veth hands fully checksummed packets to the other end — which the OVS userspace
//! datapath needs (see LAB.md). Must run on a thread inside the interface's netns: the
//! socket used for the ioctl is bound to the namespace it is created in.

use std::io;
use std::os::fd::AsRawFd;

use nix::libc;
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};

const ETHTOOL_GTXCSUM: u32 = 0x0000_0016;
const ETHTOOL_STXCSUM: u32 = 0x0000_0017;

/// `struct ethtool_value` from `<linux/ethtool.h>`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

nix::ioctl_readwrite_bad!(siocethtool, libc::SIOCETHTOOL, libc::ifreq);

fn ethtool_value(ifname: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let name = ifname.as_bytes();
    // the ifreq buffer below holds IFNAMSIZ bytes with the NUL
    if !api::ifname::is_valid(ifname) || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {ifname:?}"),
        ));
    }
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let mut value = EthtoolValue { cmd, data };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name) {
        *dst = *src as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&raw mut value).cast::<libc::c_char>();
    // SAFETY: `req` names the interface and points at `value`, which outlives the call;
    // the kernel reads/writes exactly one `struct ethtool_value` through it.
    unsafe { siocethtool(sock.as_raw_fd(), &mut req) }?;
    Ok(value.data)
}

/// Whether tx checksum offload is on (`ethtool -k IFACE` "tx-checksumming").
pub fn tx_checksum_enabled(ifname: &str) -> io::Result<bool> {
    ethtool_value(ifname, ETHTOOL_GTXCSUM, 0).map(|v| v != 0)
}

/// Turns tx checksum offload on or off (`ethtool -K IFACE tx on|off`).
pub fn set_tx_checksum(ifname: &str, on: bool) -> io::Result<()> {
    ethtool_value(ifname, ETHTOOL_STXCSUM, u32::from(on)).map(|_| ())
}
