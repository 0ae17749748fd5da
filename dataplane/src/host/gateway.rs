//! `shared` gateway mode, the node's side: find the gateway bridge's address, MAC and next
//! hop, report them on the Node ([`api::keys::NODE_GATEWAY`], [`NodeGateway`]) for the
//! controller's gateway router, and split the bridge's traffic between the host and that
//! router ([`crate::host::gateway_flows`]) once ovn-controller has plugged the router's
//! external switch into the bridge (the patch port [`api::gateway::gateway_patch_port`]).
//!
//! A bridge that does not exist, has no IPv4 address or no next hop is reported in the
//! annotation's `error` (the controller then builds no gateway router, and the node's pods
//! keep leaving through the management port) and as a `GatewayConfigError` Warning event
//! on the Node.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

use api::gateway::NodeGateway;
use ipnet::{Ipv4Net, Ipv6Net};

/// The agent's gateway settings (`--gateway-mode shared`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayConfig {
    /// The OVS bridge holding the uplink and the node's address (`--gateway-interface`).
    pub interface: String,
    /// The IPv4 next hop (`--gateway-next-hop`); default: the interface's default route.
    pub next_hop: Option<Ipv4Addr>,
    /// The IPv6 next hop (`--gateway-next-hop-v6`); default: the interface's IPv6 default
    /// route. Without one (or without a global IPv6 address) the router has no IPv6 side.
    pub next_hop_v6: Option<Ipv6Addr>,
}

/// What the node offers as its gateway now: the report for the annotation.
pub fn discover(cfg: &GatewayConfig) -> NodeGateway {
    let mut g = NodeGateway {
        interface: cfg.interface.clone(),
        ..NodeGateway::default()
    };
    let dev = Path::new("/sys/class/net").join(&cfg.interface);
    if !dev.exists() {
        g.error = Some(format!(
            "gateway interface {} does not exist on this node",
            cfg.interface
        ));
        return g;
    }
    g.mac = std::fs::read_to_string(dev.join("address"))
        .ok()
        .map(|m| m.trim().to_string());
    g.ipv4 = interface_ipv4_net(&cfg.interface);
    g.next_hop_v4 = cfg
        .next_hop
        .or_else(|| default_route_via(&cfg.interface, &read_proc_route()));
    g.ipv6 = interface_ipv6_net(&cfg.interface);
    g.next_hop_v6 = g.ipv6.and_then(|_| {
        cfg.next_hop_v6.or_else(|| {
            default_route6_via(
                &cfg.interface,
                &std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default(),
            )
        })
    });
    g.error = match (&g.mac, g.ipv4, g.next_hop_v4) {
        (None, _, _) => Some(format!("gateway interface {} has no MAC", cfg.interface)),
        (_, None, _) => Some(format!(
            "gateway interface {} has no IPv4 address",
            cfg.interface
        )),
        (_, _, None) => Some(format!(
            "gateway interface {} has no IPv4 default route; set --gateway-next-hop \
             (chart: gateway.nextHop)",
            cfg.interface
        )),
        _ => None,
    };
    g
}

/// Makes the host's kernel drop IPv4 arriving on the uplink itself (strict reverse-path
/// filter, `rp_filter=1`). A kernel uplink (an AF_PACKET "system" port) hands every frame
/// to ovs-vswitchd AND to the kernel, which accepts one addressed to the node's address
/// on any interface: it would answer the gateway router's connections (SYN-ACKs it never
/// asked for) with resets. Through strict filtering, the kernel takes the node's traffic
/// only from the bridge's own port. DPDK and AF_XDP uplinks have no such path (no
/// sysctl: nothing to do). IPv6 has no reverse-path filter: the uplink's IPv6 is
/// disabled instead (`disable_ipv6=1`; the node's IPv6 address lives on the bridge).
pub fn keep_kernel_off_uplink(uplink: &str) {
    let v6 = Path::new("/proc/sys/net/ipv6/conf")
        .join(uplink)
        .join("disable_ipv6");
    if std::fs::read_to_string(&v6).is_ok_and(|v| v.trim() != "1") {
        match std::fs::write(&v6, "1") {
            Ok(()) => tracing::info!(
                uplink,
                "gateway: IPv6 off on the uplink itself (the kernel must not answer the gateway router's traffic)"
            ),
            Err(e) => {
                tracing::warn!(uplink, error = %e, "gateway: cannot disable IPv6 on the uplink; the kernel may reset the gateway router's IPv6 connections")
            }
        }
    }
    let path = Path::new("/proc/sys/net/ipv4/conf")
        .join(uplink)
        .join("rp_filter");
    match std::fs::read_to_string(&path) {
        Ok(v) if v.trim() == "1" => {}
        Ok(_) => match std::fs::write(&path, "1") {
            Ok(()) => tracing::info!(
                uplink,
                "gateway: strict rp_filter on the uplink (the kernel must not answer the gateway router's traffic)"
            ),
            Err(e) => {
                tracing::warn!(uplink, error = %e, "gateway: cannot set rp_filter on the uplink; the kernel may reset the gateway router's connections")
            }
        },
        Err(_) => {}
    }
}

/// The first IPv4 address of `iface` with its prefix.
fn interface_ipv4_net(iface: &str) -> Option<Ipv4Net> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .filter(|a| a.interface_name == iface)
        .find_map(|a| {
            let ip = a.address?.as_sockaddr_in()?.ip();
            let mask = a.netmask?.as_sockaddr_in()?.ip();
            Ipv4Net::with_netmask(ip, mask).ok()
        })
}

/// The first global IPv6 address of `iface` (not link-local) with its prefix.
fn interface_ipv6_net(iface: &str) -> Option<Ipv6Net> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .filter(|a| a.interface_name == iface)
        .find_map(|a| {
            let ip = a.address?.as_sockaddr_in6()?.ip();
            if (ip.segments()[0] & 0xffc0) == 0xfe80 {
                return None;
            }
            let mask = a.netmask?.as_sockaddr_in6()?.ip();
            let prefix = u128::from(mask).leading_ones();
            Ipv6Net::new(ip, u8::try_from(prefix).ok()?).ok()
        })
}

/// The next hop of the IPv6 default route through `iface` in `/proc/net/ipv6_route`'s
/// text (destination, prefix, source, prefix, next hop, metric, refs, use, flags, device).
pub fn default_route6_via(iface: &str, table: &str) -> Option<Ipv6Addr> {
    table.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[9] != iface || f[1] != "00" || u128::from_str_radix(f[0], 16) != Ok(0)
        {
            return None;
        }
        let hop = u128::from_str_radix(f[4], 16).ok()?;
        (hop != 0).then(|| Ipv6Addr::from(hop))
    })
}

fn read_proc_route() -> String {
    std::fs::read_to_string("/proc/net/route").unwrap_or_default()
}

/// The gateway of the IPv4 default route through `iface` in `/proc/net/route`'s text.
pub fn default_route_via(iface: &str, table: &str) -> Option<Ipv4Addr> {
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[0] != iface || f[1] != "00000000" || f[7] != "00000000" {
            return None;
        }
        let gw = u32::from_str_radix(f[2], 16).ok()?;
        (gw != 0).then(|| Ipv4Addr::from(gw.to_le_bytes()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_route_from_proc_net_route() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            br-phy\t000010AC\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
            br-phy\t00000000\tFE0010AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
        assert_eq!(
            default_route_via("br-phy", table),
            Some(Ipv4Addr::new(172, 16, 0, 254))
        );
        assert_eq!(default_route_via("eth0", table), None);
    }

    #[test]
    fn ipv6_default_route_from_proc_net_ipv6_route() {
        let table = "fd000172001600000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001   br-phy\n\
            00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd0001720016000000000000000000fe 00000400 00000001 00000000 00000003   br-phy\n";
        assert_eq!(
            default_route6_via("br-phy", table),
            Some("fd00:172:16::fe".parse().unwrap())
        );
        assert_eq!(default_route6_via("eth0", table), None);
    }

    #[test]
    fn a_missing_interface_is_an_error_naming_it() {
        let g = discover(&GatewayConfig {
            interface: "no-such-if9".into(),
            next_hop: None,
            next_hop_v6: None,
        });
        assert_eq!(
            g.error.as_deref(),
            Some("gateway interface no-such-if9 does not exist on this node")
        );
        assert!(g.usable_v4().is_err());
    }

    #[test]
    fn loopback_has_an_address_but_no_default_route() {
        let g = discover(&GatewayConfig {
            interface: "lo".into(),
            next_hop: None,
            next_hop_v6: None,
        });
        assert_eq!(
            g.ipv4.map(|n| n.to_string()).as_deref(),
            Some("127.0.0.1/8")
        );
        assert!(
            g.error
                .unwrap_or_default()
                .contains("no IPv4 default route")
        );
        let g = discover(&GatewayConfig {
            interface: "lo".into(),
            next_hop: Some(Ipv4Addr::new(127, 0, 0, 2)),
            next_hop_v6: None,
        });
        assert_eq!(g.error, None, "{g:?}");
    }
}
