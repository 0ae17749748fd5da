//! The lab's external network through the real `zovn` CLI: after `zovn lab up --nodes 2`
//! each node's host netns reaches the external host (`198.51.100.10`,
//! `2001:db8:5100::10`) on TCP 8080 and UDP 5353 through the underlay router, and the
//! server names the node's underlay address (and the client's port) as the source;
//! `zovn lab exec --external` runs in the external netns; `zovn lab status` shows it;
//! `zovn lab down` leaves no server process and no netns.
//!
//! Needs `zovn` in `target/<profile>/`.

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use lab::external::{HOST_V4, HOST_V6, SERVER_NAME, TCP_PORT, UDP_PORT};
use lab::pods::responder::parse_source_reply;
use tests::zovn::{DownOnDrop, Zovn, alive, wait_until};

const TIMEOUT: Duration = Duration::from_secs(2);

/// TCP: connect, read to EOF. (our local address, the reply)
fn ask_tcp(to: SocketAddr) -> std::io::Result<(SocketAddr, String)> {
    let mut s = TcpStream::connect_timeout(&to, TIMEOUT)?;
    s.set_read_timeout(Some(TIMEOUT))?;
    let local = s.local_addr()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    Ok((local, reply))
}

/// UDP: send one datagram, wait for the answer. (our local address, the reply)
fn ask_udp(to: SocketAddr) -> std::io::Result<(SocketAddr, String)> {
    let bind: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0".parse().expect("any v4")
    } else {
        "[::]:0".parse().expect("any v6")
    };
    let s = UdpSocket::bind(bind)?;
    s.set_read_timeout(Some(TIMEOUT))?;
    s.connect(to)?;
    s.send(b"hello\n")?;
    let mut buf = [0u8; 512];
    let n = s.recv(&mut buf)?;
    Ok((
        s.local_addr()?,
        String::from_utf8_lossy(&buf[..n]).into_owned(),
    ))
}

/// From netns `ns`, asks `to` (bounded retries: neighbour discovery on a fresh underlay)
/// and checks the server saw `want` and our port.
fn check(ns: &str, to: SocketAddr, udp: bool, want: IpAddr) {
    let what = format!("{} {to} from {ns}", if udp { "udp" } else { "tcp" });
    let mut last = String::new();
    let mut got = None;
    wait_until(&what, Duration::from_secs(15), || {
        let r = lab::netns::run_in(ns, || if udp { ask_udp(to) } else { ask_tcp(to) })
            .expect("enter the node netns");
        match r {
            Ok(ok) => {
                got = Some(ok);
                true
            }
            Err(e) => {
                last = e.to_string();
                false
            }
        }
    });
    let (local, reply) = got.unwrap_or_else(|| panic!("{what}: {last}"));
    assert!(reply.ends_with('\n'), "{what}: one line: {reply:?}");
    let (name, from) =
        parse_source_reply(&reply).unwrap_or_else(|| panic!("{what}: reply {reply:?}"));
    assert_eq!(name, SERVER_NAME, "{what}");
    assert_eq!(from.ip(), want, "{what}: the source the server saw");
    assert_eq!(from.port(), local.port(), "{what}: the source port");
    eprintln!("{what}: {}", reply.trim());
}

#[test]
fn external_host_sees_the_nodes_underlay_addresses() {
    if !tests::require_real(
        "lab_external::external_host_sees_the_nodes_underlay_addresses",
        tests::LAB_BINS,
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("lex");
    let dir = s.dir.path().join("lab");
    let z = Zovn::new(&dir);
    let _down = DownOnDrop(dir.clone());
    let out = z.ok(&["up", "--nodes", "2", "--prefix", &s.prefix]);
    assert!(out.contains("external: netns"), "{out}");

    let lab = lab::Lab::open(&dir).expect("open the lab");
    let ext = lab.external().expect("the external network").clone();
    assert_eq!(ext.netns, format!("{}x", s.prefix));
    let server = ext.server.clone().expect("the server is recorded");
    assert!(server.is_alive(), "server {server:?}");

    let v4: IpAddr = HOST_V4.parse().expect("v4");
    let v6: IpAddr = HOST_V6.parse().expect("v6");
    for node in lab.nodes() {
        let i = node.index;
        let want4: IpAddr = format!("172.16.0.{i}").parse().expect("v4");
        let want6: IpAddr = format!("fd00:172:16::{i}").parse().expect("v6");
        for (host, want) in [(v4, want4), (v6, want6)] {
            check(&node.netns, SocketAddr::new(host, TCP_PORT), false, want);
            check(&node.netns, SocketAddr::new(host, UDP_PORT), true, want);
        }
        // a route, not a default route: the node's own routes stay as they were
        let routes = tests::sh(&["ip", "-n", &node.netns, "route", "show", "default"]);
        assert!(
            routes.trim().is_empty(),
            "node{i} got a default route: {routes}"
        );
    }

    let addrs = z.ok(&["exec", "--external", "--", "ip", "-br", "addr"]);
    assert!(addrs.contains("198.51.100.10/24"), "{addrs}");
    assert!(addrs.contains("2001:db8:5100::10/64"), "{addrs}");
    let (code, _, err) = z.run(&["exec", "default/p", "--external", "--", "true"]);
    assert_ne!(code, 0, "a pod and --external at once: {err}");
    let status = z.ok(&["status"]);
    assert!(
        status.contains(&format!("external: netns {}", ext.netns)) && status.contains("alive"),
        "{status}"
    );

    z.ok(&["down"]);
    wait_until("the external server gone", Duration::from_secs(5), || {
        !alive(server.pid.into())
    });
    let left: Vec<String> = lab::netns::list()
        .into_iter()
        .filter(|n| n.starts_with(&s.prefix))
        .collect();
    assert!(left.is_empty(), "netns left: {left:?}");
    assert!(!dir.exists(), "state dir left");
}
