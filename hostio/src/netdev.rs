//! Network-device syscalls written once, each behind a safe function with a typed error
//! ([`SysError`]: the call, the device and the OS error): interface flags
//! (`SIOCGIFFLAGS`/`SIOCSIFFLAGS`), the legacy ethtool ioctl (`SIOCETHTOOL` with a
//! `struct ethtool_value`) and an `AF_PACKET` socket bound to one interface. The
//! workspace's host code keeps its `unsafe` here, where each block states why it is sound.
//!
//! The ioctls act in the network namespace of the calling thread (their socket is created
//! there).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A failed system call on a network device.
#[derive(Debug, thiserror::Error)]
#[error("{call} on {device}: {source}")]
pub struct SysError {
    /// The call: `SIOCGIFFLAGS`, `socket(AF_PACKET)`, `bind(AF_PACKET)`...
    pub call: &'static str,
    /// The interface (a name, or `ifindex N`).
    pub device: String,
    #[source]
    pub source: io::Error,
}

impl SysError {
    fn last(call: &'static str, device: &str) -> SysError {
        SysError {
            call,
            device: device.to_string(),
            source: io::Error::last_os_error(),
        }
    }

    /// The OS error number, if the kernel gave one.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }
}

impl From<SysError> for io::Error {
    fn from(e: SysError) -> io::Error {
        io::Error::new(e.source.kind(), e.to_string())
    }
}

/// A datagram socket for a device's ioctls, and an `ifreq` naming the device.
fn ifreq(name: &str) -> Result<(OwnedFd, libc::ifreq), SysError> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(SysError {
            call: "ifreq",
            device: name.to_string(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not an interface name (1 to {} bytes)", libc::IFNAMSIZ - 1),
            ),
        });
    }
    // SAFETY: a plain socket(2); the fd is owned at once below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(SysError::last("socket(AF_INET)", name));
    }
    // SAFETY: fd was just returned by socket(2) and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok((fd, ifr))
}

/// The device's flags (`IFF_*`).
fn flags(name: &str) -> Result<(OwnedFd, libc::ifreq), SysError> {
    let (fd, mut ifr) = ifreq(name)?;
    // SAFETY: SIOCGIFFLAGS writes the flags into the ifreq we own.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut ifr) } < 0 {
        return Err(SysError::last("SIOCGIFFLAGS", name));
    }
    Ok((fd, ifr))
}

/// Whether the kernel has `name` up.
pub fn is_up(name: &str) -> Result<bool, SysError> {
    let (_fd, ifr) = flags(name)?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    Ok(unsafe { ifr.ifr_ifru.ifru_flags } & libc::IFF_UP as libc::c_short != 0)
}

/// Sets `name` up (its other flags kept).
pub fn set_up(name: &str) -> Result<(), SysError> {
    let (fd, mut ifr) = flags(name)?;
    // SAFETY: SIOCGIFFLAGS filled the flags member; SIOCSIFFLAGS reads the ifreq we own.
    unsafe {
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCSIFFLAGS, &ifr) < 0 {
            return Err(SysError::last("SIOCSIFFLAGS", name));
        }
    }
    Ok(())
}

/// `struct ethtool_value` from `<linux/ethtool.h>`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// One legacy ethtool command with a value (`ETHTOOL_GTXCSUM`, `ETHTOOL_STXCSUM`...):
/// the value the kernel returns.
pub fn ethtool_value(name: &str, cmd: u32, data: u32) -> Result<u32, SysError> {
    let (fd, mut ifr) = ifreq(name)?;
    let mut value = EthtoolValue { cmd, data };
    ifr.ifr_ifru.ifru_data = (&raw mut value).cast::<libc::c_char>();
    // SAFETY: `ifr` names the device and points at `value`, which outlives the call; the
    // kernel reads and writes exactly one `struct ethtool_value` through it.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) } < 0 {
        return Err(SysError::last("SIOCETHTOOL", name));
    }
    Ok(value.data)
}

/// A non-blocking `AF_PACKET` socket bound to one interface, every protocol (needs
/// `CAP_NET_RAW`).
#[derive(Debug)]
pub struct PacketSocket(OwnedFd);

impl PacketSocket {
    /// Opens the socket on interface number `ifindex`.
    pub fn open(ifindex: u32) -> Result<PacketSocket, SysError> {
        let device = format!("ifindex {ifindex}");
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: a plain socket(2); the fd is owned at once below.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                i32::from(proto),
            )
        };
        if fd < 0 {
            return Err(SysError::last("socket(AF_PACKET)", &device));
        }
        // SAFETY: fd was just returned by socket(2) and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = i32::try_from(ifindex).unwrap_or(i32::MAX);
        // SAFETY: bind(2) reads `size_of::<sockaddr_ll>()` bytes of `sll`.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(SysError::last("bind(AF_PACKET)", &device));
        }
        Ok(PacketSocket(fd))
    }

    /// One frame into `buf`: its length on the wire (`MSG_TRUNC`: may exceed `buf`) and
    /// whether the kernel sent it rather than received it. An `io::Error` (the hot path:
    /// `WouldBlock` and `ENETDOWN` are the caller's to read on).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<(usize, bool)> {
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: recvfrom(2) writes at most buf.len() bytes into buf and at most `len`
        // bytes into sll.
        let n = unsafe {
            libc::recvfrom(
                self.0.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
                (&mut sll as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((n as usize, sll.sll_pkttype == libc::PACKET_OUTGOING))
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_up_and_a_missing_device_is_named_with_its_errno() {
        assert!(
            is_up("lo").expect("lo flags"),
            "lo is up in every netns we run in"
        );
        let e = is_up("zovn-none0").expect_err("no such device");
        assert_eq!(e.call, "SIOCGIFFLAGS");
        assert_eq!(e.errno(), Some(libc::ENODEV), "{e}");
        assert!(
            e.to_string().starts_with("SIOCGIFFLAGS on zovn-none0: "),
            "{e}"
        );
        let e = ethtool_value("zovn-none0", 0x16, 0).expect_err("no such device");
        assert_eq!((e.call, e.errno()), ("SIOCETHTOOL", Some(libc::ENODEV)));
    }

    #[test]
    fn names_that_cannot_be_devices_are_refused_before_any_call() {
        for bad in ["", "a-name-of-sixteen", "nul\0inside"] {
            let e = is_up(bad).expect_err(bad);
            assert_eq!(e.call, "ifreq", "{bad:?}");
            assert_eq!(e.source.kind(), io::ErrorKind::InvalidInput);
        }
        let as_io: io::Error = is_up("").expect_err("empty").into();
        assert_eq!(as_io.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_packet_socket_on_no_interface_names_the_failing_call() {
        // as root: bind() finds no such interface; without CAP_NET_RAW: socket() refuses
        let e = PacketSocket::open(0x7fff_fff0).expect_err("no such ifindex");
        assert!(
            matches!(
                (e.call, e.errno()),
                ("bind(AF_PACKET)", Some(libc::ENODEV)) | ("socket(AF_PACKET)", Some(libc::EPERM))
            ),
            "{e}"
        );
        assert_eq!(e.device, "ifindex 2147483632");
    }
}
