//! The lab's external network: a host outside every node, behind a router.
//!
//! - netns `<prefix>x` ([`Names::external_netns`]) holds the external host:
//!   `198.51.100.10/24` and `2001:db8:5100::10/64` on `<prefix>xh`, default routes via the
//!   router `198.51.100.1` / `2001:db8:5100::1`; it sends complete TCP/UDP checksums
//!   (tx checksum offload off, as from a real wire), so its packets survive OVS in userspace
//!   when a gateway on a node's br-phy receives them;
//! - the underlay netns is that router: its end of the veth (`<prefix>xr`) has the router
//!   addresses, the underlay bridge has `172.16.0.254/24` and `fd00:172:16::254/64`, and
//!   forwarding is on (sysctls of the underlay netns only);
//! - each node's host netns routes `198.51.100.0/24` and `2001:db8:5100::/64` via the
//!   router's underlay addresses (no default route: the node's other routes stay), from its
//!   br-phy addresses `172.16.0.<i>` and `fd00:172:16::<i>` ([`route_node`]);
//! - a responder in the external netns ([`start_server`]) answers TCP 8080 and UDP 5353
//!   with `external <source address>:<port>` — what the outside sees of a client.
//!
//! Deleting the two namespaces (and the nodes') removes all of it; the server is a daemon
//! of the lab's manifest, stopped by `down` like the others.

use std::path::PathBuf;

use crate::error::{LabError, Result};
use crate::names::Names;
use crate::netns;
use crate::pods::record::{PortSpec, Proto};
use crate::pods::responder::{ResponderDaemon, spawn_daemon};
use crate::process::DaemonRecord;
use crate::state::{ExternalState, Layout};

/// The external host's IPv4 address.
pub const HOST_V4: &str = "198.51.100.10";
/// The external host's IPv6 address.
pub const HOST_V6: &str = "2001:db8:5100::10";
/// The external network, IPv4.
pub const NET_V4: &str = "198.51.100.0/24";
/// The external network, IPv6.
pub const NET_V6: &str = "2001:db8:5100::/64";
/// The router's address on the external network, IPv4.
pub const ROUTER_V4: &str = "198.51.100.1";
/// The router's address on the external network, IPv6.
pub const ROUTER_V6: &str = "2001:db8:5100::1";
/// The router's address on the underlay, IPv4 (the nodes' next hop).
pub const UNDERLAY_ROUTER_V4: &str = "172.16.0.254";
/// The router's address on the underlay, IPv6 (the nodes' next hop).
pub const UNDERLAY_ROUTER_V6: &str = "fd00:172:16::254";
/// The server's TCP port.
pub const TCP_PORT: u16 = 8080;
/// The server's UDP port.
pub const UDP_PORT: u16 = 5353;
/// The first word of the server's replies.
pub const SERVER_NAME: &str = "external";
/// The server's name in the manifest and `zovn lab status`.
pub const DAEMON_NAME: &str = "external-server";

/// The server's pidfile (under `<dir>/run`, so a stale-state cleanup finds it too).
pub fn pidfile(layout: &Layout) -> PathBuf {
    layout.dir.join(format!("run/{DAEMON_NAME}.pid"))
}

/// The server's log.
pub fn log_file(layout: &Layout) -> PathBuf {
    layout.dir.join(format!("log/{DAEMON_NAME}.log"))
}

/// The ports the server answers on.
pub fn server_ports() -> [PortSpec; 2] {
    [
        PortSpec {
            port: TCP_PORT,
            proto: Proto::Tcp,
        },
        PortSpec {
            port: UDP_PORT,
            proto: Proto::Udp,
        },
    ]
}

/// Wires the external netns (already created) to the underlay netns and makes the latter
/// a router. `underlay_netns` holds `underlay_bridge`.
pub fn create(names: &Names, underlay_netns: &str, underlay_bridge: &str) -> Result<ExternalState> {
    let ext = names.external_netns();
    let (host_if, router_if) = (names.external_host_if(), names.external_router_if());
    netns::add_veth(&router_if, underlay_netns, &host_if, &ext)?;

    // the router: both networks, forwarding on inside the underlay netns only
    netns::addr_add(underlay_netns, &router_if, &format!("{ROUTER_V4}/24"))?;
    netns::addr_add_nodad(underlay_netns, &router_if, &format!("{ROUTER_V6}/64"))?;
    netns::link_up(underlay_netns, &router_if)?;
    netns::addr_add(
        underlay_netns,
        underlay_bridge,
        &format!("{UNDERLAY_ROUTER_V4}/24"),
    )?;
    netns::addr_add_nodad(
        underlay_netns,
        underlay_bridge,
        &format!("{UNDERLAY_ROUTER_V6}/64"),
    )?;
    netns::exec(
        underlay_netns,
        &[
            "sysctl",
            "-q",
            "-w",
            "net.ipv4.ip_forward=1",
            "-w",
            "net.ipv6.conf.all.forwarding=1",
        ],
    )?;

    // the external host
    netns::addr_add(&ext, &host_if, &format!("{HOST_V4}/24"))?;
    netns::addr_add_nodad(&ext, &host_if, &format!("{HOST_V6}/64"))?;
    netns::link_up(&ext, &host_if)?;
    // what a remote host's packets look like on a wire: with their TCP/UDP checksums
    // (a veth would pass them on "partial" through the router to a node's uplink, and OVS
    // in userspace — a gateway on br-phy — would find them invalid and drop them)
    netns::exec(&ext, &["ethtool", "-K", &host_if, "tx", "off"])?;
    netns::route_add(&ext, "default", ROUTER_V4)?;
    netns::route_add(&ext, "default", ROUTER_V6)?;
    Ok(ExternalState {
        netns: ext,
        host_v4: HOST_V4.into(),
        host_v6: HOST_V6.into(),
        router_v4: ROUTER_V4.into(),
        router_v6: ROUTER_V6.into(),
        underlay_router_v4: UNDERLAY_ROUTER_V4.into(),
        underlay_router_v6: UNDERLAY_ROUTER_V6.into(),
        server: None,
    })
}

/// Routes the external network from a node's host netns via the router (br-phy holds the
/// node's underlay addresses).
pub fn route_node(node_netns: &str) -> Result<()> {
    netns::route_add(node_netns, NET_V4, UNDERLAY_ROUTER_V4)?;
    netns::route_add(node_netns, NET_V6, UNDERLAY_ROUTER_V6)
}

/// Starts the server (`<zovn> lab responder --echo-source`) in the external netns and
/// waits until it has bound its ports.
pub fn start_server(
    layout: &Layout,
    zovn: &std::path::Path,
    state: &ExternalState,
) -> Result<DaemonRecord> {
    let pf = pidfile(layout);
    if let Some(dir) = pf.parent() {
        std::fs::create_dir_all(dir).map_err(|e| LabError::io("create dir", dir, e))?;
    }
    spawn_daemon(
        zovn,
        &ResponderDaemon {
            daemon_name: DAEMON_NAME.into(),
            reply_name: SERVER_NAME,
            echo_source: true,
            netns: &state.netns,
            ports: &server_ports(),
            pidfile: pf,
            log_file: log_file(layout),
        },
    )
}

/// One line for `zovn lab status` / `up`.
pub fn describe(state: &ExternalState) -> String {
    let server = match &state.server {
        Some(s) => format!(
            "server tcp/{TCP_PORT} udp/{UDP_PORT} pid {} {}",
            s.pid,
            if s.is_alive() { "alive" } else { "DEAD" }
        ),
        None => "no server".into(),
    };
    format!(
        "netns {} host {} {} via router {} {} (underlay {} {}), {server}",
        state.netns,
        state.host_v4,
        state.host_v6,
        state.router_v4,
        state.router_v6,
        state.underlay_router_v4,
        state.underlay_router_v6
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_sit_in_their_networks() {
        use std::net::{Ipv4Addr, Ipv6Addr};
        let h4: Ipv4Addr = HOST_V4.parse().expect("v4");
        let r4: Ipv4Addr = ROUTER_V4.parse().expect("v4");
        assert_eq!(h4.octets()[..3], r4.octets()[..3]);
        assert!(NET_V4.starts_with("198.51.100."));
        let h6: Ipv6Addr = HOST_V6.parse().expect("v6");
        let r6: Ipv6Addr = ROUTER_V6.parse().expect("v6");
        assert_eq!(h6.segments()[..4], r6.segments()[..4]);
        assert!(NET_V6.starts_with("2001:db8:5100::"));
        let u6: Ipv6Addr = UNDERLAY_ROUTER_V6.parse().expect("v6");
        let n6: Ipv6Addr = crate::node::underlay_v6(3).parse().expect("v6");
        assert_eq!(u6.segments()[..4], n6.segments()[..4]);
        assert!(UNDERLAY_ROUTER_V4.starts_with(crate::node::UNDERLAY_NET));
    }

    #[test]
    fn layout_of_the_server() {
        let l = Layout::new("/tmp/lab");
        assert_eq!(
            pidfile(&l),
            PathBuf::from("/tmp/lab/run/external-server.pid")
        );
        assert_eq!(server_ports().len(), 2);
    }
}
