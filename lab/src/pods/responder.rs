//! The built-in responder of a pod, like the agnhost servers of the Kubernetes netpol
//! e2e tests: for every container port, TCP (accept, write the pod name and a newline,
//! close) or UDP (answer every datagram with the pod name). `zovn lab responder --ports
//! 80/tcp,53/udp --name ns/pod --pidfile P` runs it in the foreground; the pod runtime
//! starts it inside the pod netns ([`spawn`]).

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

/// Binds every port, writes `pidfile` (once everything is bound), then serves forever.
pub fn serve(ports: &[PortSpec], name: &str, pidfile: Option<&Path>) -> anyhow::Result<()> {
    let reply = format!("{name}\n");
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
    eprintln!("responder {name}: serving {}", format_ports(ports));
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

fn serve_tcp(l: TcpListener, reply: &str) {
    for conn in l.incoming() {
        match conn {
            Ok(mut c) => {
                let _ = c.write_all(reply.as_bytes());
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
            Err(e) => eprintln!("accept: {e}"),
        }
    }
}

fn serve_udp(s: UdpSocket, reply: &str) {
    let mut buf = [0u8; 2048];
    loop {
        match s.recv_from(&mut buf) {
            Ok((_, from)) => {
                let _ = s.send_to(reply.as_bytes(), from);
            }
            Err(e) => eprintln!("recv: {e}"),
        }
    }
}

/// The responder's pidfile for pod netns `netns`.
pub fn pidfile(layout: &Layout, netns: &str) -> PathBuf {
    layout.pods_run().join(format!("{netns}.pid"))
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
    let pidfile = pidfile(layout, netns);
    std::fs::create_dir_all(layout.pods_run())
        .map_err(|e| LabError::io("create dir", layout.pods_run(), e))?;
    let _ = std::fs::remove_file(&pidfile);
    let spec = DetachedSpec {
        name: format!("pod {key} responder"),
        program: zovn.to_path_buf(),
        args: vec![
            "lab".into(),
            "responder".into(),
            "--ports".into(),
            format_ports(ports),
            "--name".into(),
            key.into(),
            "--pidfile".into(),
            pidfile.to_string_lossy().into_owned(),
        ],
        netns: Some(netns.to_string()),
        log_file: layout.pods_log().join(format!("{netns}.log")),
        mount_ns: None,
        pidfile: pidfile.clone(),
        ident: None,
        env: Vec::new(),
    };
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
