//! Traffic of running pods while others are added: a fast ping (`ping -D -i 0.002`), a
//! sender-timestamped UDP echo ([`crate::udp_probe`]) and an iperf3 TCP stream between two
//! pods, started before a burst and read after it. ping and the UDP probe run at real-time
//! priority (`chrt -f 50`): on the lab's 2 vCPUs, shared by both nodes and the burst's
//! runc/containerd work, a normal-priority ping was itself not scheduled for up to ~200 ms
//! while the datapath was answering (the UDP probe's send gap and round trips show which).
//!
//! The figures: the longest gap between two consecutive ping replies (also the gap from
//! the probe's start to the first reply and from the last reply to its end, so a probe
//! that lost everything at the end still shows it), packets lost, and whether iperf3
//! finished without error (a reset connection or a stall past its timeout is an error).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::phase_log::finite;
use crate::udp_probe::{self, UdpGaps};

/// The UDP echo probe's port in the destination pod.
const UDP_PORT: u16 = 7777;
/// Real-time priority of ping and both ends of the UDP probe (`chrt -f`).
const UDP_PRIO: &str = "50";

/// What one ping run showed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PingGaps {
    pub sent: u64,
    pub received: u64,
    /// Longest time without a reply, ms (between replies, and at either end).
    pub longest_gap_ms: f64,
    /// When the longest gap ended (wall clock, seconds since the epoch).
    pub gap_end_at: f64,
}

impl PingGaps {
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }
}

/// Parses `ping -D` output (`[<epoch>.<us>] 64 bytes from ...: icmp_seq=N ...` per reply
/// and the `N packets transmitted, M received` summary). `start`/`end` bound the probe
/// (wall clock) for the gaps at either end.
pub fn parse_ping(text: &str, start: f64, end: f64) -> PingGaps {
    let mut replies: Vec<f64> = text
        .lines()
        .filter(|l| l.contains(" bytes from ") && l.contains("icmp_seq=") && !l.contains("DUP!"))
        .filter_map(|l| {
            l.strip_prefix('[')?
                .split(']')
                .next()?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .collect();
    replies.sort_by(f64::total_cmp);
    let mut g = PingGaps {
        received: replies.len() as u64,
        ..PingGaps::default()
    };
    for l in text.lines() {
        if let Some((tx, rest)) = l.split_once(" packets transmitted, ") {
            g.sent = tx.trim().parse().unwrap_or(0);
            g.received = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(g.received);
        }
    }
    let mut prev = start;
    for t in replies.iter().copied().chain([end]) {
        let gap = (t - prev) * 1e3;
        if gap > g.longest_gap_ms {
            g.longest_gap_ms = gap;
            g.gap_end_at = t;
        }
        prev = t.max(prev);
    }
    g
}

/// iperf3's verdict from its `-J` output.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IperfResult {
    /// Finished with no error reported.
    pub ok: bool,
    pub error: Option<String>,
    pub gbit_s: f64,
    pub retransmits: u64,
}

/// Reads iperf3 `-J` output (the client's) and its exit status.
pub fn parse_iperf(text: &str, exit_ok: bool) -> IperfResult {
    let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let error = v["error"]
        .as_str()
        .map(str::to_string)
        .or_else(|| (v.is_null()).then(|| format!("no JSON from iperf3: {:.200}", text.trim())));
    let sum = &v["end"]["sum_sent"];
    IperfResult {
        ok: exit_ok && error.is_none(),
        error,
        gbit_s: sum["bits_per_second"].as_f64().unwrap_or(0.0) / 1e9,
        retransmits: sum["retransmits"].as_u64().unwrap_or(0),
    }
}

/// What the probe measured during one burst.
#[derive(Debug, Clone, Default)]
pub struct ProbeReport {
    pub ping: PingGaps,
    pub iperf: IperfResult,
    pub seconds: f64,
    /// The burst (apply → all Ready and moved) ended before the probe did.
    pub covered: bool,
    /// The real-time UDP echo probe beside ping (`None` when it could not run).
    pub udp: Option<UdpGaps>,
}

impl ProbeReport {
    pub fn to_json(&self) -> Value {
        json!({"ping_sent": self.ping.sent, "ping_lost": self.ping.lost(),
               "longest_gap_ms": finite(self.ping.longest_gap_ms),
               "iperf3_ok": self.iperf.ok, "iperf3_error": self.iperf.error,
               "iperf3_gbit_s": finite(self.iperf.gbit_s), "iperf3_retransmits": self.iperf.retransmits,
               "probe_seconds": self.seconds, "burst_inside_probe": self.covered,
               "udp": self.udp.as_ref().map(UdpGaps::to_json)})
    }
}

/// A running ping (and optionally iperf3) between two pod netns; [`Probe::finish`] reads
/// them, drop kills whatever still runs.
pub struct Probe {
    ping: Option<Child>,
    ping_out: PathBuf,
    server: Option<Child>,
    client: Option<Child>,
    client_out: PathBuf,
    udp_echo: Option<Child>,
    udp_send: Option<Child>,
    udp_out: PathBuf,
    start: f64,
    seconds: u32,
}

impl Drop for Probe {
    fn drop(&mut self) {
        for c in [
            &mut self.ping,
            &mut self.client,
            &mut self.server,
            &mut self.udp_send,
            &mut self.udp_echo,
        ]
        .into_iter()
        .flatten()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Probe {
    /// Starts `ping -D -i 0.002 -w seconds` from `from` to `to_ip` and, when `iperf_rate`
    /// is given (iperf3 `-b`, e.g. `100M`), an iperf3 TCP stream for `seconds` with its
    /// server in `to`. Output files go to `dir` (named after `tag`).
    pub fn start(
        dir: &Path,
        tag: &str,
        from: &str,
        to: &str,
        to_ip: &str,
        seconds: u32,
        iperf_rate: Option<&str>,
    ) -> Result<Probe> {
        let file = |name: &str| -> Result<(PathBuf, std::fs::File)> {
            let p = dir.join(format!("{tag}-{name}"));
            let f = std::fs::File::create(&p).with_context(|| format!("create {}", p.display()))?;
            Ok((p, f))
        };
        let (ping_out, ping_f) = file("ping.txt")?;
        let (client_out, client_f) = file("iperf3.json")?;
        let mut probe = Probe {
            ping: None,
            ping_out,
            server: None,
            client: None,
            client_out,
            udp_echo: None,
            udp_send: None,
            udp_out: dir.join(format!("{tag}-udp.txt")),
            start: 0.0,
            seconds,
        };
        // the real-time UDP probe (a pod pair only: `to` names the echo's netns)
        if !to.is_empty() {
            let exe = std::env::current_exe().context("own executable")?;
            let addr = if to_ip.contains(':') {
                format!("[{to_ip}]:{UDP_PORT}")
            } else {
                format!("{to_ip}:{UDP_PORT}")
            };
            let rt = |ns: &str| {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "chrt", "-f", UDP_PRIO])
                    .arg(&exe)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                c
            };
            probe.udp_echo = Some(
                rt(to)
                    .args(["udp-echo", "--port", &UDP_PORT.to_string()])
                    .args(["--seconds", &(seconds + 5).to_string()])
                    .spawn()
                    .context("start the UDP echo")?,
            );
            probe.udp_send = Some(
                rt(from)
                    .args(["udp-send", "--to", &addr, "--interval-us", "2000"])
                    .args(["--seconds", &seconds.to_string(), "--out"])
                    .arg(&probe.udp_out)
                    .spawn()
                    .context("start the UDP probe")?,
            );
        }
        if let Some(rate) = iperf_rate {
            let (_, server_log) = file("iperf3-server.txt")?;
            probe.server = Some(
                Command::new("ip")
                    .args(["netns", "exec", to, "iperf3", "-s", "-1", "-p", "5201"])
                    .stdin(Stdio::null())
                    .stdout(server_log)
                    .stderr(Stdio::null())
                    .spawn()
                    .context("start the iperf3 server")?,
            );
            wait_listening(to, 5201)?;
            probe.client = Some(
                Command::new("ip")
                    .args([
                        "netns", "exec", from, "iperf3", "-c", to_ip, "-p", "5201", "-J",
                    ])
                    .args(["-t", &seconds.to_string(), "-b", rate])
                    .stdin(Stdio::null())
                    .stdout(client_f)
                    .stderr(Stdio::null())
                    .spawn()
                    .context("start the iperf3 client")?,
            );
        }
        probe.start = now();
        probe.ping = Some(
            Command::new("ip")
                .args(["netns", "exec", from, "chrt", "-f", UDP_PRIO])
                .args(["ping", "-D", "-n", "-i", "0.002"])
                .args(["-w", &seconds.to_string(), to_ip])
                .stdin(Stdio::null())
                .stdout(ping_f)
                .stderr(Stdio::null())
                .spawn()
                .context("start ping")?,
        );
        Ok(probe)
    }

    /// When the probe started (wall clock).
    pub fn started_at(&self) -> f64 {
        self.start
    }

    /// Waits for ping and iperf3 to end (bounded: their duration + 15 s) and reads them.
    pub fn finish(mut self) -> Result<(PingGaps, Option<IperfResult>)> {
        let bound = Instant::now() + Duration::from_secs(u64::from(self.seconds) + 15);
        // ping's exit status is 1 when replies were lost: the output tells
        wait_child(self.ping.take(), bound);
        let end = now();
        let iperf = if self.client.is_some() {
            let ok = wait_child(self.client.take(), bound);
            let text = std::fs::read_to_string(&self.client_out).unwrap_or_default();
            Some(parse_iperf(&text, ok))
        } else {
            None
        };
        let text = std::fs::read_to_string(&self.ping_out)
            .with_context(|| format!("read {}", self.ping_out.display()))?;
        let end = end.min(self.start + f64::from(self.seconds));
        Ok((parse_ping(&text, self.start, end), iperf))
    }

    /// After [`Probe::finish`]-like waiting: the UDP probe's figures (`None` when it did not
    /// write its records, e.g. `chrt` refused).
    pub fn finish_all(mut self) -> Result<(PingGaps, Option<IperfResult>, Option<UdpGaps>)> {
        let bound = Instant::now() + Duration::from_secs(u64::from(self.seconds) + 15);
        let sent = wait_child(self.udp_send.take(), bound);
        if let Some(mut e) = self.udp_echo.take() {
            let _ = e.kill();
            let _ = e.wait();
        }
        let udp = sent
            .then(|| std::fs::read_to_string(&self.udp_out).ok())
            .flatten()
            .map(|t| UdpGaps::of(&udp_probe::parse(&t)))
            .filter(|g| g.sent > 0);
        let (ping, iperf) = self.finish()?;
        Ok((ping, iperf, udp))
    }
}

/// Waits for `c` until `bound`, then kills it; true if it exited successfully.
fn wait_child(c: Option<Child>, bound: Instant) -> bool {
    let Some(mut c) = c else { return false };
    loop {
        match c.try_wait() {
            Ok(Some(st)) => return st.success(),
            Ok(None) if Instant::now() < bound => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = c.kill();
                let _ = c.wait();
                return false;
            }
        }
    }
}

/// Waits until something listens on TCP `port` in netns `ns` (bounded).
fn wait_listening(ns: &str, port: u16) -> Result<()> {
    let t = Instant::now();
    loop {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "ss", "-Htln"])
            .arg(format!("sport = :{port}"))
            .stdin(Stdio::null())
            .output()
            .context("ss")?;
        if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(10) {
            bail!("iperf3 server in {ns} does not listen on {port} after 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PING: &str = "PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.
[100.000] 64 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.1 ms
[100.002] 64 bytes from 10.0.0.2: icmp_seq=2 ttl=64 time=0.1 ms
[100.150] 64 bytes from 10.0.0.2: icmp_seq=76 ttl=64 time=0.1 ms
[100.150] 64 bytes from 10.0.0.2: icmp_seq=76 ttl=64 time=0.1 ms (DUP!)
[100.152] 64 bytes from 10.0.0.2: icmp_seq=77 ttl=64 time=0.1 ms

--- 10.0.0.2 ping statistics ---
80 packets transmitted, 4 received, 95% packet loss, time 160ms
";

    #[test]
    fn longest_gap_between_replies_and_loss() {
        let g = parse_ping(PING, 99.999, 100.153);
        assert_eq!((g.sent, g.received, g.lost()), (80, 4, 76));
        assert!((g.longest_gap_ms - 148.0).abs() < 1e-6, "{g:?}");
        assert!((g.gap_end_at - 100.150).abs() < 1e-9);
    }

    #[test]
    fn silence_at_the_end_counts_as_a_gap() {
        let g = parse_ping(PING, 99.999, 101.0);
        assert!((g.longest_gap_ms - 848.0).abs() < 1e-6, "{g:?}");
        let none = parse_ping("", 10.0, 12.0);
        assert_eq!((none.received, none.longest_gap_ms), (0, 2000.0));
    }

    #[test]
    fn iperf_errors_and_resets_fail() {
        let ok = r#"{"end": {"sum_sent": {"bits_per_second": 1.0e8, "retransmits": 3}}}"#;
        let r = parse_iperf(ok, true);
        assert!(r.ok && r.error.is_none());
        assert_eq!(r.retransmits, 3);
        assert!((r.gbit_s - 0.1).abs() < 1e-9);
        let reset = r#"{"end": {}, "error": "error - unable to receive results: Connection reset by peer"}"#;
        assert!(!parse_iperf(reset, false).ok);
        assert!(!parse_iperf(ok, false).ok, "a failed exit fails");
        assert!(parse_iperf("", true).error.is_some());
    }
}
