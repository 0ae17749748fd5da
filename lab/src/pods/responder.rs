//! The built-in responder of a pod, like the agnhost servers of the Kubernetes netpol
//! e2e tests: for every container port, TCP (accept, write the pod name and a newline,
//! close) or UDP (answer every datagram with the pod name). `zovn lab responder --ports
//! 80/tcp,53/udp --name ns/pod --pidfile P` runs it in the foreground; the pod runtime
//! starts it inside the pod netns ([`spawn`]).
//!
//! With `--echo-source` the reply also names the source address and port the responder
//! saw (`external 172.16.0.1:41234`, IPv4-mapped addresses shown as IPv4): the lab's
//! external host serves that way ([`crate::external`]); [`parse_source_reply`] reads it.

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::record::{PortSpec, Proto, format_ports};
use crate::error::{LabError, Result};
use crate::process::{DaemonRecord, DetachedSpec, spawn_detached};
use crate::state::Layout;

/// How long [`spawn`] waits for the responder to bind its ports.
pub const BIND_TIMEOUT: Duration = Duration::from_secs(10);

/// The reply to a client: `name`, and with `echo_source` the client's address as seen
/// (`name 10.36.0.5:41234`, `name [2001:db8::5]:41234`), one line.
pub fn reply_to(name: &str, echo_source: bool, from: SocketAddr) -> String {
    if echo_source {
        format!("{name} {}\n", canonical(from))
    } else {
        format!("{name}\n")
    }
}

/// `::ffff:a.b.c.d` (an IPv4 client of a dual-stack socket) as `a.b.c.d`.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => addr,
        },
        v4 => v4,
    }
}

/// Parses a reply of an `--echo-source` responder: (its name, the source it saw).
pub fn parse_source_reply(reply: &str) -> Option<(&str, SocketAddr)> {
    let mut words = reply.split_whitespace();
    let name = words.next()?;
    let from = words.next()?.parse().ok()?;
    words.next().is_none().then_some((name, from))
}

/// Binds every port, writes `pidfile` (once everything is bound), then serves forever.
/// Every reply is [`reply_to`]`(name, echo_source, client)`.
pub fn serve(
    ports: &[PortSpec],
    name: &str,
    echo_source: bool,
    pidfile: Option<&Path>,
) -> anyhow::Result<()> {
    let reply = Reply {
        name: name.to_string(),
        echo_source,
    };
    let mut threads = Vec::new();
    for p in ports {
        // `[::]` serves IPv4 and IPv6 (dual-stack pods); IPv4 only where IPv6 is off
        let any6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, p.port));
        let any4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, p.port));
        let reply = reply.clone();
        match p.proto {
            Proto::Tcp => {
                let l = TcpListener::bind(any6)
                    .or_else(|_| TcpListener::bind(any4))
                    .with_context(|| format!("bind {p}"))?;
                threads.push(std::thread::spawn(move || serve_tcp(l, &reply)));
            }
            Proto::Udp => {
                let s = UdpSocket::bind(any6)
                    .or_else(|_| UdpSocket::bind(any4))
                    .with_context(|| format!("bind {p}"))?;
                threads.push(std::thread::spawn(move || serve_udp(s, &reply)));
            }
        }
    }
    if let Some(pf) = pidfile {
        std::fs::write(pf, format!("{}\n", std::process::id()))
            .with_context(|| format!("write pidfile {}", pf.display()))?;
    }
    eprintln!(
        "responder {name}: serving {}{}",
        format_ports(ports),
        if echo_source {
            " (replies name the source)"
        } else {
            ""
        }
    );
    if threads.is_empty() {
        // nothing to serve: stay around like a container's pause process
        loop {
            std::thread::park();
        }
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

/// What a responder answers.
#[derive(Debug, Clone)]
struct Reply {
    name: String,
    echo_source: bool,
}

impl Reply {
    fn to(&self, from: SocketAddr) -> String {
        reply_to(&self.name, self.echo_source, from)
    }
}

fn serve_tcp(l: TcpListener, reply: &Reply) {
    for conn in l.incoming() {
        match conn {
            Ok(mut c) => {
                let text = match c.peer_addr() {
                    Ok(from) => reply.to(from),
                    Err(_) => format!("{}\n", reply.name),
                };
                let _ = c.write_all(text.as_bytes());
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
            Err(e) => eprintln!("accept: {e}"),
        }
    }
}

fn serve_udp(s: UdpSocket, reply: &Reply) {
    let mut buf = [0u8; 2048];
    loop {
        match s.recv_from(&mut buf) {
            Ok((_, from)) => {
                let _ = s.send_to(reply.to(from).as_bytes(), from);
            }
            Err(e) => eprintln!("recv: {e}"),
        }
    }
}

/// The responder's pidfile for pod netns `netns`.
pub fn pidfile(layout: &Layout, netns: &str) -> PathBuf {
    layout.pods_run().join(format!("{netns}.pid"))
}

/// A responder to run as a daemon of the lab (see [`spawn_daemon`]).
#[derive(Debug, Clone)]
pub struct ResponderDaemon<'a> {
    /// Its name in the manifest and `zovn lab status`.
    pub daemon_name: String,
    /// What it answers with (`--name`).
    pub reply_name: &'a str,
    /// `--echo-source`.
    pub echo_source: bool,
    pub netns: &'a str,
    pub ports: &'a [PortSpec],
    pub pidfile: PathBuf,
    pub log_file: PathBuf,
}

/// Starts `<zovn> lab responder` inside `netns` for pod `key` and waits until it has
/// bound its ports (it writes its pidfile then).
pub fn spawn(
    layout: &Layout,
    zovn: &Path,
    key: &str,
    netns: &str,
    ports: &[PortSpec],
) -> Result<DaemonRecord> {
    std::fs::create_dir_all(layout.pods_run())
        .map_err(|e| LabError::io("create dir", layout.pods_run(), e))?;
    spawn_daemon(
        zovn,
        &ResponderDaemon {
            daemon_name: format!("pod {key} responder"),
            reply_name: key,
            echo_source: false,
            netns,
            ports,
            pidfile: pidfile(layout, netns),
            log_file: layout.pods_log().join(format!("{netns}.log")),
        },
    )
}

/// Starts `<zovn> lab responder` as `d` says (the pidfile's directory must exist) and
/// waits until it has bound its ports (it writes its pidfile then).
pub fn spawn_daemon(zovn: &Path, d: &ResponderDaemon) -> Result<DaemonRecord> {
    let (netns, ports) = (d.netns, d.ports);
    let _ = std::fs::remove_file(&d.pidfile);
    let mut args = vec![
        "lab".into(),
        "responder".into(),
        "--ports".into(),
        format_ports(ports),
        "--name".into(),
        d.reply_name.into(),
        "--pidfile".into(),
        d.pidfile.to_string_lossy().into_owned(),
    ];
    if d.echo_source {
        args.push("--echo-source".into());
    }
    let spec = DetachedSpec {
        name: d.daemon_name.clone(),
        program: zovn.to_path_buf(),
        args,
        netns: Some(netns.to_string()),
        log_file: d.log_file.clone(),
        mount_ns: None,
        pidfile: d.pidfile.clone(),
        ident: None,
        env: Vec::new(),
    };
    let pidfile = &d.pidfile;
    let rec = spawn_detached(&spec)?;
    let t0 = Instant::now();
    while !pidfile.exists() {
        if !rec.is_alive() || t0.elapsed() >= BIND_TIMEOUT {
            let _ = crate::process::stop_daemon(&rec);
            return Err(LabError::Daemon {
                name: spec.name,
                program: rec.program,
                detail: format!(
                    "did not bind {} in netns {netns}{}",
                    format_ports(ports),
                    crate::process::log_tail(&spec.log_file)
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_name_the_source_when_asked() {
        let v4: SocketAddr = "10.36.0.5:41234".parse().expect("v4");
        let mapped: SocketAddr = "[::ffff:172.16.0.1]:5000".parse().expect("mapped");
        let v6: SocketAddr = "[fd00:172:16::2]:6000".parse().expect("v6");
        assert_eq!(reply_to("a/b", false, v4), "a/b\n");
        assert_eq!(reply_to("external", true, v4), "external 10.36.0.5:41234\n");
        assert_eq!(
            reply_to("external", true, mapped),
            "external 172.16.0.1:5000\n"
        );
        assert_eq!(
            reply_to("external", true, v6),
            "external [fd00:172:16::2]:6000\n"
        );
        for from in [v4, v6] {
            let r = reply_to("external", true, from);
            assert_eq!(parse_source_reply(&r), Some(("external", from)));
        }
        assert_eq!(
            parse_source_reply("external 172.16.0.1:5000").map(|(_, a)| a),
            Some(canonical(mapped))
        );
        for bad in [
            "",
            "external",
            "external 172.16.0.1",
            "a 1.2.3.4:5 x",
            "a/b",
        ] {
            assert_eq!(parse_source_reply(bad), None, "{bad:?}");
        }
    }
}
