//! Acting from inside a pod: `zovn lab exec NS/POD -- CMD...` and `zovn lab probe NS/POD
//! HOST:PORT [--udp]`, the pod found through `pods.json`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sched::{CloneFlags, setns};

use super::record::{PodRecord, PodsFile};
use crate::state::Layout;

/// The runtime's record of pod `ns/name` (`name` alone means namespace `default`), with
/// an error that says why a pod has no netns.
pub fn find_pod(dir: &Path, pod: &str) -> anyhow::Result<PodRecord> {
    let key = if pod.contains('/') {
        pod.to_string()
    } else {
        format!("default/{pod}")
    };
    let layout = Layout::new(dir);
    if !layout.manifest().exists() {
        bail!("the lab is not up in {} (run `zovn lab up`)", dir.display());
    }
    let file = PodsFile::load(&layout.pods_file())?;
    let Some(rec) = file.pod(&key) else {
        bail!(
            "pod {key} has no network namespace in the lab in {}: not applied, hostNetwork, \
             or not scheduled yet (`zovn lab get pods`)",
            dir.display()
        );
    };
    if !crate::netns::exists(&rec.netns) {
        bail!("pod {key}: its netns {} does not exist (yet)", rec.netns);
    }
    Ok(rec.clone())
}

/// What a probe got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// Connected (TCP) / answered (UDP), with the reply.
    Reachable(String),
    /// Why not.
    Unreachable(String),
}

/// Connects from inside netns `netns` to `target` (`HOST:PORT`): TCP connect and read
/// the reply until EOF, or UDP send and wait for one datagram back; bounded by `timeout`.
pub fn probe(
    netns: &str,
    target: &str,
    udp: bool,
    timeout: Duration,
) -> anyhow::Result<ProbeOutcome> {
    let addr: SocketAddr = target
        .to_socket_addrs()
        .with_context(|| format!("target {target:?}: expected HOST:PORT"))?
        .next()
        .with_context(|| format!("target {target:?} resolves to no address"))?;
    let path = Path::new("/run/netns").join(netns);
    let ns = std::fs::File::open(&path).with_context(|| format!("open {}", path.display()))?;
    // setns is per thread: do the whole probe on a thread of its own
    let worker = std::thread::spawn(move || -> anyhow::Result<ProbeOutcome> {
        setns(ns.as_fd(), CloneFlags::CLONE_NEWNET).context("enter the pod netns")?;
        Ok(if udp {
            probe_udp(addr, timeout)
        } else {
            probe_tcp(addr, timeout)
        })
    });
    worker
        .join()
        .map_err(|_| anyhow::anyhow!("the probe thread panicked"))?
        .with_context(|| format!("probe from netns {netns}"))
}

fn probe_tcp(addr: SocketAddr, timeout: Duration) -> ProbeOutcome {
    let mut s = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) => return ProbeOutcome::Unreachable(format!("tcp connect {addr}: {e}")),
    };
    if let Err(e) = s.set_read_timeout(Some(timeout)) {
        return ProbeOutcome::Unreachable(format!("tcp {addr}: {e}"));
    }
    let mut reply = Vec::new();
    match s.read_to_end(&mut reply) {
        Ok(_) => ProbeOutcome::Reachable(String::from_utf8_lossy(&reply).trim().to_string()),
        // connected: reachable, even if the peer sends nothing (not our responder)
        Err(e)
            if !reply.is_empty()
                || matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
        {
            ProbeOutcome::Reachable(String::from_utf8_lossy(&reply).trim().to_string())
        }
        Err(e) => ProbeOutcome::Unreachable(format!("tcp read from {addr}: {e}")),
    }
}

fn probe_udp(addr: SocketAddr, timeout: Duration) -> ProbeOutcome {
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse().unwrap_or(addr)
    } else {
        "[::]:0".parse().unwrap_or(addr)
    };
    let r = (|| -> std::io::Result<String> {
        let s = UdpSocket::bind(bind)?;
        s.set_read_timeout(Some(timeout))?;
        s.connect(addr)?;
        s.send(b"probe\n")?;
        let mut buf = [0u8; 2048];
        let n = s.recv(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).trim().to_string())
    })();
    match r {
        Ok(reply) => ProbeOutcome::Reachable(reply),
        Err(e) => ProbeOutcome::Unreachable(format!("udp {addr}: no answer ({e})")),
    }
}

/// Runs `argv` inside netns `netns` (`ip netns exec`), stdio inherited; its exit code
/// (128 + signal when killed).
pub fn exec(netns: &str, argv: &[String]) -> anyhow::Result<i32> {
    if argv.is_empty() {
        bail!("no command to run");
    }
    let status = std::process::Command::new("ip")
        .args(["netns", "exec", netns])
        .args(argv)
        .status()
        .with_context(|| format!("run `ip netns exec {netns} {}`", argv.join(" ")))?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1))
}

/// A duration `zovn lab probe` cannot use; `given`: as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("duration {given:?}: expected e.g. 2s, 500ms")]
    NotADuration { given: String },
    #[error("duration {given:?} must be positive")]
    NotPositive { given: String },
}

/// `2s`, `500ms`, `1.5` (seconds).
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    let (num, unit) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| DurationError::NotADuration {
            given: s.to_string(),
        })?;
    Duration::try_from_secs_f64(v * unit)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| DurationError::NotPositive {
            given: s.to_string(),
        })
}

/// Flushes stdout (before `std::process::exit`).
pub fn flush() {
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(
            parse_duration("0s").map_err(|e| e.to_string()),
            Err("duration \"0s\" must be positive".to_string())
        );
        assert_eq!(
            parse_duration("x").map_err(|e| e.to_string()),
            Err("duration \"x\": expected e.g. 2s, 500ms".to_string())
        );
    }
}
