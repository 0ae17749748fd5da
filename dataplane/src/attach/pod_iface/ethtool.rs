//! Legacy ethtool ioctls (`SIOCETHTOOL`) for the tx checksum offload flag.
//!
//! `ETHTOOL_STXCSUM` with value 0 is what `ethtool -K IFACE tx off` does: the kernel clears
//! every checksum feature (and, through feature dependencies, TSO/GSO-partial), so the
//! veth hands fully checksummed packets to the other end — which the OVS userspace
//! datapath needs (see LAB.md). Must run on a thread inside the interface's netns: the
//! socket used for the ioctl is bound to the namespace it is created in.

use std::io;

const ETHTOOL_GTXCSUM: u32 = 0x0000_0016;
const ETHTOOL_STXCSUM: u32 = 0x0000_0017;

/// The ioctl ([`hostio::netdev::ethtool_value`]) for an interface name that is valid by
/// the CNI rule ([`api::ifname`]).
fn ethtool_value(ifname: &str, cmd: u32, data: u32) -> io::Result<u32> {
    if !api::ifname::is_valid(ifname) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {ifname:?}"),
        ));
    }
    Ok(hostio::netdev::ethtool_value(ifname, cmd, data)?)
}

/// Whether tx checksum offload is on (`ethtool -k IFACE` "tx-checksumming").
pub fn tx_checksum_enabled(ifname: &str) -> io::Result<bool> {
    ethtool_value(ifname, ETHTOOL_GTXCSUM, 0).map(|v| v != 0)
}

/// Turns tx checksum offload on or off (`ethtool -K IFACE tx on|off`).
pub fn set_tx_checksum(ifname: &str, on: bool) -> io::Result<()> {
    ethtool_value(ifname, ETHTOOL_STXCSUM, u32::from(on)).map(|_| ())
}
