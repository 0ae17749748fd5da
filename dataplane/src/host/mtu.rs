//! The pod MTU: the underlay MTU minus the tunnel's overhead, so pod packets never need
//! fragmenting inside Geneve/VXLAN.
//!
//! The underlay MTU is that of the interface holding the node's tunnel endpoint address
//! (`external_ids:ovn-encap-ip` of the local Open_vSwitch row, or `--encap-ip`). The
//! overhead follows ovn-kubernetes' conservative figures: Geneve 100 bytes (outer Ethernet,
//! IP, UDP, Geneve header and OVN's options, with room for more options), VXLAN 50; an
//! IPv6 underlay adds 20.

use std::net::IpAddr;
use std::path::Path;

/// Why the MTU could not be derived.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MtuError {
    #[error("unknown encapsulation {0:?} (expected geneve or vxlan)")]
    UnknownEncap(String),
    #[error("no interface in this network namespace has the tunnel endpoint address {0}")]
    NoUplink(IpAddr),
    #[error("reading the MTU of {iface}: {detail}")]
    Read { iface: String, detail: String },
    #[error("the underlay MTU {underlay} leaves no room for the {encap} overhead of {overhead}")]
    TooSmall {
        underlay: u32,
        encap: String,
        overhead: u32,
    },
}

/// Bytes a tunnel adds to every packet.
pub fn encap_overhead(encap: &str, underlay: IpAddr) -> Result<u32, MtuError> {
    let base = match encap {
        "geneve" => 100,
        "vxlan" => 50,
        other => return Err(MtuError::UnknownEncap(other.to_string())),
    };
    Ok(if underlay.is_ipv6() { base + 20 } else { base })
}

/// The pod MTU for an underlay MTU and a tunnel type. Pods below the IPv4 minimum (68)
/// are refused.
pub fn pod_mtu(underlay_mtu: u32, encap: &str, underlay: IpAddr) -> Result<u32, MtuError> {
    let overhead = encap_overhead(encap, underlay)?;
    match underlay_mtu.checked_sub(overhead) {
        Some(m) if m >= 68 => Ok(m),
        _ => Err(MtuError::TooSmall {
            underlay: underlay_mtu,
            encap: encap.to_string(),
            overhead,
        }),
    }
}

/// The name and MTU of the interface (in this network namespace) holding `ip`.
pub fn uplink_mtu(ip: IpAddr) -> Result<(String, u32), MtuError> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| MtuError::Read {
        iface: "*".into(),
        detail: e.to_string(),
    })?;
    let iface = addrs
        .filter_map(|a| {
            let sa = a.address?;
            let found = match ip {
                IpAddr::V4(v4) => sa.as_sockaddr_in().map(|s| s.ip() == v4),
                IpAddr::V6(v6) => sa.as_sockaddr_in6().map(|s| s.ip() == v6),
            };
            found.unwrap_or(false).then_some(a.interface_name)
        })
        .next()
        .ok_or(MtuError::NoUplink(ip))?;
    let path = Path::new("/sys/class/net").join(&iface).join("mtu");
    let text = std::fs::read_to_string(&path).map_err(|e| MtuError::Read {
        iface: iface.clone(),
        detail: e.to_string(),
    })?;
    let mtu = text.trim().parse().map_err(|e| MtuError::Read {
        iface: iface.clone(),
        detail: format!("{e}: {text:?}"),
    })?;
    Ok((iface, mtu))
}

/// The first IPv4 address of interface `iface`, if it has one.
pub fn interface_ipv4(iface: &str) -> Option<std::net::Ipv4Addr> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .filter(|a| a.interface_name == iface)
        .find_map(|a| a.address?.as_sockaddr_in().map(|s| s.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_an_ipv4_address() {
        assert_eq!(interface_ipv4("lo"), Some(std::net::Ipv4Addr::LOCALHOST));
        assert_eq!(interface_ipv4("no-such-if0"), None);
    }

    #[test]
    fn overheads_and_limits() {
        let v4: IpAddr = "172.16.0.1".parse().unwrap();
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(pod_mtu(1500, "geneve", v4), Ok(1400));
        assert_eq!(pod_mtu(1500, "vxlan", v4), Ok(1450));
        assert_eq!(pod_mtu(9000, "geneve", v6), Ok(8880));
        assert!(matches!(
            pod_mtu(150, "geneve", v4),
            Err(MtuError::TooSmall { .. })
        ));
        assert_eq!(
            pod_mtu(1500, "stt", v4),
            Err(MtuError::UnknownEncap("stt".into()))
        );
    }

    #[test]
    fn loopback_is_found_by_its_address() {
        let (iface, mtu) = uplink_mtu("127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(iface, "lo");
        assert!(mtu >= 1500, "{mtu}");
        assert_eq!(
            uplink_mtu("192.0.2.77".parse().unwrap()),
            Err(MtuError::NoUplink("192.0.2.77".parse().unwrap()))
        );
    }
}
