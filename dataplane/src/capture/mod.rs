//! `zstack-ovnkube-node debug capture`: the node's side of `zovn capture` (the operator's
//! side is the `diag` crate's `capture`). It runs in the network namespace of the node's
//! ovs-vswitchd (the lab: the node's netns; a cluster: the agent's container, host
//! network), mirrors the pod's port onto a temporary internal port
//! ([`crate::ovs::capture_mirror`]), reads that port's tap device with an AF_PACKET socket
//! ([`hostio::netdev::PacketSocket`]: the syscalls and their `unsafe` live there)
//! and writes pcap ([`api::pcap`]) to its output, until the count, the duration, SIGINT,
//! SIGTERM, SIGHUP or a closed output, then removes the Mirror and the port. The node agent
//! owns this because its GC removes what a killed capture leaves.
//!
//! The CLI and the agent are two builds: the CLI names the stream's version
//! ([`api::pcap::CAPTURE_PROTOCOL`], `--protocol`), and a node that speaks another refuses
//! with both numbers instead of sending what the CLI would misread.
//!
//! The kernel never speaks on the tap: IPv6 is disabled on it before ovs-vswitchd brings
//! it up, and it has no IPv4 address; the socket also skips anything the kernel sends
//! (`PACKET_OUTGOING`). What the kernel might send anyway would reach OVS on a mirror
//! output port, which discards received frames (ovs-vswitchd.conf.db(5), `Mirror`
//! `output_port`), and OVN's table 0 has no flow for that port.
//!
//! - [`command`]: the subcommand's flags and exit codes.

pub mod command;

use std::io::{self, Write};
use std::time::{Duration, Instant, SystemTime};

use crate::ovs::Ovs;
use crate::ovs::capture_mirror::{CaptureError, CaptureMirror, CaptureOwner};
use nix::libc;
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{SignalKind, signal};

use api::pcap::{PcapWriter, SNAPLEN};
use hostio::netdev::{self, PacketSocket};

pub use api::pcap::{EXIT_FAILURE, EXIT_INPUT};

/// What to capture.
#[derive(Debug, Clone)]
pub struct NodeCapture {
    /// The node's `Open_vSwitch` database.
    pub db: String,
    /// The pod port's `external_ids:iface-id`.
    pub iface_id: String,
    pub bridge: String,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Stop after this long in any case.
    pub duration: Duration,
    /// Stop when standard input ends: the operator's `kubectl exec -i` went away (its
    /// stream closed) even if no packet comes to find the output closed.
    pub until_stdin_closes: bool,
    /// ovs-vswitchd's control socket: the bridges' OpenFlow management sockets are
    /// beside it (`<bridge>.mgmt`), for [`prepare_tap`].
    pub vswitchd_ctl: String,
}

/// Why the capture stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Count,
    Duration,
    Signal(&'static str),
    /// The output was closed (EPIPE).
    OutputClosed,
    /// Standard input ended (`until_stdin_closes`).
    InputClosed,
}

/// A capture that failed: its message and exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    fn system(message: String) -> Failure {
        Failure {
            code: EXIT_FAILURE,
            message,
        }
    }
}

/// Runs the capture, pcap to `out`: the packets captured and why it stopped, or the
/// failure. Whatever happens after the Mirror is created, it is removed before this
/// returns (a failure to remove it is a failure; the node agent's GC removes it later).
pub async fn run(
    opts: &NodeCapture,
    out: impl Write + Send + 'static,
) -> Result<(u64, Stop), Failure> {
    let deadline = Instant::now() + opts.duration;
    // handlers first: a signal between the Mirror's creation and the loop still stops it
    let mut signals = Signals::new().map_err(|e| Failure::system(format!("signals: {e}")))?;
    let ovs = tokio::time::timeout(Duration::from_secs(10), Ovs::connect(&opts.db))
        .await
        .map_err(|_| Failure::system(format!("OVSDB {}: no answer within 10s", opts.db)))?
        .map_err(|e| Failure::system(e.to_string()))?;
    let owner =
        CaptureOwner::current().map_err(|e| Failure::system(format!("/proc/self/stat: {e}")))?;
    let cap = ovs
        .create_capture(&opts.bridge, &opts.iface_id, owner)
        .await
        .map_err(|e| match e {
            e @ CaptureError::NoBridge(_) | e @ CaptureError::NoPort { .. } => Failure {
                code: EXIT_INPUT,
                message: e.to_string(),
            },
            e => Failure::system(e.to_string()),
        })?;
    eprintln!(
        "capturing port {} (iface-id {}) through {}",
        cap.pod_port, opts.iface_id, cap.port_name
    );
    let r = capture(&ovs, &cap, opts, deadline, &mut signals, out).await;
    let removed = ovs.remove_capture(&cap).await;
    match (r, removed) {
        (r, Ok(())) => r,
        (Ok(_), Err(e)) | (Err(_), Err(e)) => Err(Failure::system(format!(
            "{e}: mirror and port {} left behind (the node agent removes them)",
            cap.port_name
        ))),
    }
}

/// SIGINT, SIGTERM and SIGHUP.
struct Signals(
    tokio::signal::unix::Signal,
    tokio::signal::unix::Signal,
    tokio::signal::unix::Signal,
);

impl Signals {
    fn new() -> io::Result<Signals> {
        Ok(Signals(
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
            signal(SignalKind::hangup())?,
        ))
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.0.recv() => "SIGINT",
            _ = self.1.recv() => "SIGTERM",
            _ = self.2.recv() => "SIGHUP",
        }
    }
}

/// Completes when standard input ends (never, when `watch` is false).
async fn stdin_closed(watch: bool) {
    if !watch {
        return std::future::pending().await;
    }
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        let mut stdin = io::stdin();
        while matches!(std::io::Read::read(&mut stdin, &mut buf), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    let _ = rx.await;
}

async fn capture(
    ovs: &Ovs,
    cap: &CaptureMirror,
    opts: &NodeCapture,
    deadline: Instant,
    signals: &mut Signals,
    out: impl Write,
) -> Result<(u64, Stop), Failure> {
    let until = tokio::time::Instant::from_std(deadline);
    let input = stdin_closed(opts.until_stdin_closes);
    tokio::pin!(input);
    let ifindex = tokio::select! {
        r = wait_tap(ovs, &cap.port_name) => r?,
        s = signals.recv() => return Ok((0, Stop::Signal(s))),
        _ = tokio::time::sleep_until(until) => return Ok((0, Stop::Duration)),
        _ = &mut input => return Ok((0, Stop::InputClosed)),
    };
    prepare_tap(&cap.port_name, &opts.bridge, &opts.vswitchd_ctl)
        .await
        .map_err(|e| Failure::system(format!("bring up {}: {e}", cap.port_name)))?;
    let sock = PacketSocket::open(ifindex)
        .map_err(io::Error::from)
        .and_then(|s| {
            // SAFETY: the socket owns its fd and deregisters on drop (AsyncFd drops the
            // registration before the socket it holds).
            unsafe { AsyncFd::register_with_interest(s, tokio::io::Interest::READABLE) }
                .map_err(|e| e.into_parts().1)
        })
        .map_err(|e| Failure::system(format!("AF_PACKET socket on {}: {e}", cap.port_name)))?;
    let mut w = match PcapWriter::new(out) {
        Ok(w) => w,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok((0, Stop::OutputClosed)),
        Err(e) => return Err(Failure::system(format!("write the pcap header: {e}"))),
    };
    let mut buf = vec![0u8; SNAPLEN as usize + 1];
    let mut n = 0u64;
    if opts.count == Some(0) {
        return Ok((0, Stop::Count));
    }
    loop {
        let mut ready = tokio::select! {
            s = signals.recv() => return Ok((n, Stop::Signal(s))),
            _ = tokio::time::sleep_until(until) => return Ok((n, Stop::Duration)),
            _ = &mut input => return Ok((n, Stop::InputClosed)),
            r = sock.readable() => r.map_err(|e| Failure::system(format!("poll: {e}")))?,
        };
        let (len, outgoing) = match ready.try_io(|s| s.get_ref().recv(&mut buf)) {
            Ok(Ok(r)) => r,
            // a flag change of the tap (OVS setting it) is reported once: read on
            Ok(Err(e)) if e.raw_os_error() == Some(libc::ENETDOWN) => continue,
            Ok(Err(e)) => return Err(Failure::system(format!("recv on {}: {e}", cap.port_name))),
            Err(_would_block) => continue,
        };
        if outgoing {
            continue;
        }
        let ts = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let caplen = len.min(buf.len() - 1);
        match w.write(ts, len as u32, &buf[..caplen]) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                return Ok((n, Stop::OutputClosed));
            }
            Err(e) => return Err(Failure::system(format!("write pcap: {e}"))),
        }
        n += 1;
        if opts.count.is_some_and(|c| n >= c) {
            return Ok((n, Stop::Count));
        }
    }
}

/// Waits (at most 10 s) until ovs-vswitchd has created the tap device of `name`; its
/// ifindex.
async fn wait_tap(ovs: &Ovs, name: &str) -> Result<u32, Failure> {
    let t0 = Instant::now();
    loop {
        if let Ok(i) = nix::net::if_::if_nametoindex(name) {
            return Ok(i);
        }
        if let Some(err) = ovs
            .interface(name)
            .and_then(|i| i.error)
            .filter(|e| !e.is_empty())
        {
            return Err(Failure::system(format!(
                "ovs-vswitchd refused port {name}: {err}"
            )));
        }
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(Failure::system(format!(
                "ovs-vswitchd did not create the tap device {name} within 10s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Silences the kernel on the tap (no IPv6: no router or neighbour solicitations; it has
/// no IPv4 address) and has ovs-vswitchd bring it up (`ovs-ofctl mod-port ... up`), then
/// waits (3 s) until the kernel says it is up. ovs-vswitchd must do it itself: it keeps
/// the tap's flags in a cache and drops what it would send to a tap it believes down; a
/// tap set up behind its back was sometimes still "down" for it (`admin_state` down,
/// `tx_dropped` counting the mirrored packets) for the whole capture. If `ovs-ofctl`
/// fails, the tap is set up directly, with a warning.
async fn prepare_tap(name: &str, bridge: &str, vswitchd_ctl: &str) -> io::Result<()> {
    // absent when the kernel has no IPv6: then there is nothing to silence
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
    let mgmt = std::path::Path::new(vswitchd_ctl)
        .parent()
        .unwrap_or(std::path::Path::new("/var/run/openvswitch"))
        .join(format!("{bridge}.mgmt"));
    let out = tokio::process::Command::new("ovs-ofctl")
        .arg("mod-port")
        .arg(format!("unix:{}", mgmt.display()))
        .args([name, "up"])
        .output()
        .await;
    match out {
        Ok(o) if o.status.success() => {}
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                Err(e) => e.to_string(),
            };
            eprintln!(
                "zstack-ovnkube-node debug capture: ovs-ofctl mod-port {name} up failed ({why}); setting it up directly (ovs-vswitchd may drop what it mirrors)"
            );
            netdev::set_up(name)?;
        }
    }
    let t0 = Instant::now();
    while !netdev::is_up(name)? {
        if t0.elapsed() > Duration::from_secs(3) {
            return Err(io::Error::other(
                "still down 3s after ovs-ofctl mod-port up",
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
