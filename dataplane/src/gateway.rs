//! `shared` gateway mode, the node's side: find the gateway bridge's address, MAC and next
//! hop, report them on the Node ([`api::keys::NODE_GATEWAY`], [`NodeGateway`]) for the
//! controller's gateway router, and split the bridge's traffic between the host and that
//! router ([`crate::gateway_flows`]) once ovn-controller has plugged the router's
//! external switch into the bridge (the patch port [`api::gateway::gateway_patch_port`]).
//!
//! A bridge that does not exist, has no IPv4 address or no next hop is reported in the
//! annotation's `error` (the controller then builds no gateway router, and the node's pods
//! keep leaving through the management port) and as a `GatewayConfigError` Warning event
//! on the Node.

use std::net::Ipv4Addr;
use std::path::Path;

use api::gateway::NodeGateway;
use ipnet::Ipv4Net;

/// The agent's gateway settings (`--gateway-mode shared`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayConfig {
    /// The OVS bridge holding the uplink and the node's address (`--gateway-interface`).
    pub interface: String,
    /// The IPv4 next hop (`--gateway-next-hop`); default: the interface's default route.
    pub next_hop: Option<Ipv4Addr>,
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
/// sysctl: nothing to do).
pub fn keep_kernel_off_uplink(uplink: &str) {
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
    fn a_missing_interface_is_an_error_naming_it() {
        let g = discover(&GatewayConfig {
            interface: "no-such-if9".into(),
            next_hop: None,
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
        });
        assert_eq!(g.error, None, "{g:?}");
    }
}
