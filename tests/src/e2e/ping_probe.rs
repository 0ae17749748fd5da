//! A traffic probe between two pods of a real cluster for day-2 operations (issue 29):
//! `busybox ping -i 0.1` (10 packets/s) inside the client pod through `kubectl exec`,
//! running while an upgrade or a restart happens, stopped with SIGINT (`killall -INT`: busybox prints its
//! summary) and read as: packets sent and answered, and the longest time without an answer.
//!
//! busybox's ping has no timestamps; it sends on a fixed schedule whatever comes back, so
//! the gaps come from the sequence numbers: a run of `m` unanswered sequence numbers between
//! two answered ones is `(m + 1) × interval` without an answer (resolution: the interval).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The probe's interval (10 packets/s: the "≥ 10 packets/s").
pub const INTERVAL: Duration = Duration::from_millis(100);

/// What one probe saw.
#[derive(Debug, Clone, PartialEq)]
pub struct PingRun {
    pub sent: u64,
    pub answered: u64,
    /// Longest time without an answer between two answered packets, or from the start to
    /// the first answer, or from the last answer to the end.
    pub longest_gap: Duration,
}

impl PingRun {
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.answered)
    }
}

impl std::fmt::Display for PingRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} sent, {} lost, longest gap {} ms",
            self.sent,
            self.lost(),
            self.longest_gap.as_millis()
        )
    }
}

/// Reads busybox ping's output (`64 bytes from A: seq=N ttl=T time=X ms` per answer, and
/// `S packets transmitted, R packets received, ...`). Answers counted once (no DUP!).
pub fn parse(text: &str, interval: Duration) -> Result<PingRun> {
    let seqs: BTreeSet<u64> = text
        .lines()
        .filter(|l| l.contains(" bytes from ") && !l.contains("DUP!"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("seq="))
                .and_then(|n| n.parse().ok())
        })
        .collect();
    let sent = text
        .lines()
        .find_map(|l| l.split_once(" packets transmitted").map(|(n, _)| n.trim()))
        .context("no `packets transmitted` summary in the ping output")?
        .parse::<u64>()
        .context("the transmitted count")?;
    // the last request, sent just before the SIGINT that stopped ping, may still be on its
    // way when ping exits: not a loss when the one before it was answered (a real outage
    // never ends a run: the probes are stopped once every path answers again)
    let sent = if sent >= 2 && !seqs.contains(&(sent - 1)) && seqs.contains(&(sent - 2)) {
        sent - 1
    } else {
        sent
    };
    // missing sequence numbers before the first answer, between answers and after the last
    let mut longest = 0u64;
    let mut prev: Option<u64> = None;
    for &s in seqs.iter().chain(std::iter::once(&sent)) {
        let missing = match prev {
            None => s,
            Some(p) => s.saturating_sub(p + 1),
        };
        let gap = if prev.is_none() || s == sent {
            missing // at either end: only the unanswered packets count
        } else {
            missing + 1
        };
        longest = longest.max(gap);
        prev = Some(s);
    }
    Ok(PingRun {
        sent,
        answered: seqs.len() as u64,
        longest_gap: interval * u32::try_from(longest).unwrap_or(u32::MAX),
    })
}

/// A running probe: `kubectl exec NS/POD -- ping -i 0.1 IP`.
pub struct Probe {
    pub what: String,
    kubeconfig: PathBuf,
    ns: String,
    pod: String,
    ip: String,
    child: Child,
    started: Instant,
    /// What ping printed, read by a thread that owns the pipe.
    output: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: Vec<u8>,
}

impl Probe {
    /// Starts pinging `ip` from pod `ns/pod` and waits (15 s) for the first answer, so a
    /// probe that never worked is an error here, not a gap later.
    pub fn start(kubeconfig: &Path, ns: &str, pod: &str, ip: &str, what: &str) -> Result<Probe> {
        let interval = format!("{:.1}", INTERVAL.as_secs_f64());
        let mut child = Command::new("kubectl")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["exec", "-n", ns, pod, "--", "ping", "-i", &interval, ip])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("start kubectl exec ping")?;
        // a thread reads the pipe; the first answer is waited for here
        let mut out = child.stdout.take().context("ping's stdout")?;
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match out.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let mut seen = Vec::new();
        let t = Instant::now();
        while !String::from_utf8_lossy(&seen).contains(" bytes from ") {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(chunk) => seen.extend(chunk),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("{what}: ping ended before any answer")
                }
            }
            if t.elapsed() > Duration::from_secs(15) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{what}: no answer within 15 s");
            }
        }
        Ok(Probe {
            what: what.to_string(),
            kubeconfig: kubeconfig.to_path_buf(),
            ns: ns.to_string(),
            pod: pod.to_string(),
            ip: ip.to_string(),
            child,
            started: Instant::now(),
            output: rx,
            seen,
        })
    }

    /// The client pod and the address it pings.
    pub fn endpoints(&self) -> (&str, &str) {
        (&self.pod, &self.ip)
    }

    /// Stops the probe (SIGINT to ping in the pod: busybox prints its summary) and reads it.
    pub fn stop(mut self) -> Result<PingRun> {
        // asked again every second: the node may be out of reach for a moment
        let t = Instant::now();
        let mut last_err = String::new();
        let status = 'stopped: loop {
            let out = Command::new("kubectl")
                .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
                .arg("--request-timeout=5s")
                .args(["exec", "-n", &self.ns, &self.pod, "--"])
                .args(["busybox", "killall", "-INT", "ping"])
                .output()?;
            if !out.status.success() {
                last_err = String::from_utf8_lossy(&out.stderr).trim().to_string();
            }
            for _ in 0..10 {
                if let Some(st) = self.child.try_wait()? {
                    break 'stopped st;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if t.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                bail!(
                    "{}: ping did not stop within 30 s (killall: {last_err})",
                    self.what
                );
            }
        };
        let mut text = std::mem::take(&mut self.seen);
        while let Ok(chunk) = self.output.recv_timeout(Duration::from_millis(500)) {
            text.extend(chunk);
        }
        let text = String::from_utf8_lossy(&text).into_owned();
        parse(&text, INTERVAL).with_context(|| {
            let mut err = String::new();
            if let Some(mut e) = self.child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            format!(
                "{} after {:.0} s (kubectl {status}): {}{}",
                self.what,
                self.started.elapsed().as_secs_f64(),
                text.chars()
                    .rev()
                    .take(300)
                    .collect::<String>()
                    .chars()
                    .rev()
                    .collect::<String>(),
                err.trim()
            )
        })
    }
}

impl Drop for Probe {
    /// A step that failed before `stop`: no kubectl left running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64) -> String {
        format!("64 bytes from 10.244.1.5: seq={seq} ttl=63 time=0.512 ms\n")
    }

    fn output(answered: &[u64], sent: u64) -> String {
        let mut s = String::from("PING 10.244.1.5 (10.244.1.5): 56 data bytes\n");
        for &q in answered {
            s.push_str(&line(q));
        }
        s.push_str(&format!(
            "\n--- 10.244.1.5 ping statistics ---\n{sent} packets transmitted, {} packets received, 0% packet loss\n",
            answered.len()
        ));
        s
    }

    #[test]
    fn every_answer_means_one_interval() {
        let r = parse(&output(&[0, 1, 2, 3, 4], 5), INTERVAL).unwrap();
        assert_eq!((r.sent, r.answered, r.lost()), (5, 5, 0));
        assert_eq!(r.longest_gap, INTERVAL);
    }

    #[test]
    fn a_run_of_losses_is_the_gap_between_the_answers_around_it() {
        // 3..=9 unanswered: 8 intervals between the answers to 2 and 10
        let answered: Vec<u64> = (0..=2).chain(10..=14).collect();
        let r = parse(&output(&answered, 15), INTERVAL).unwrap();
        assert_eq!(r.lost(), 7);
        assert_eq!(r.longest_gap, INTERVAL * 8);
    }

    #[test]
    fn losses_at_either_end_count_too() {
        let r = parse(&output(&[5, 6, 7], 8), INTERVAL).unwrap();
        assert_eq!(r.longest_gap, INTERVAL * 5);
        let r = parse(&output(&[0, 1], 12), INTERVAL).unwrap();
        assert_eq!(r.longest_gap, INTERVAL * 10);
        assert_eq!(r.lost(), 10);
    }

    #[test]
    fn the_request_in_flight_at_the_stop_is_not_a_loss() {
        let r = parse(&output(&[0, 1, 2, 3], 5), INTERVAL).unwrap();
        assert_eq!((r.sent, r.answered, r.lost()), (4, 4, 0));
        assert_eq!(r.longest_gap, INTERVAL);
        // two unanswered at the end: both lost
        let r = parse(&output(&[0, 1, 2], 5), INTERVAL).unwrap();
        assert_eq!((r.sent, r.lost()), (5, 2));
    }

    #[test]
    fn duplicates_count_once_and_no_summary_is_an_error() {
        let mut s = output(&[0, 1, 2], 3);
        s.push_str("64 bytes from 10.244.1.5: seq=1 ttl=63 time=0.5 ms (DUP!)\n");
        assert_eq!(parse(&s, INTERVAL).unwrap().answered, 3);
        assert!(parse(&line(0), INTERVAL).is_err());
    }
}
