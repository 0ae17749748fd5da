//! A sender-timestamped UDP echo probe, run at real-time priority (`chrt -f`) in two pods'
//! namespaces, that tells a datapath stall from the probe not being scheduled.
//!
//! The sender sends `seq, sent_ns` every interval (on an absolute schedule); the echo
//! answers `seq, sent_ns, echo_ns`; the sender notes `recv_ns`. All clocks are the
//! machine's own (`CLOCK_REALTIME`, the same in every namespace). From those:
//! - the longest gap between two replies (what `ping` shows);
//! - the longest gap between two sends (the sender's own scheduling: large means the probe,
//!   not the datapath, paused);
//! - the longest round trip and one-way times of any datagram (how long the datapath held
//!   a packet: a stall), and the datagrams lost.
//!
//! Both ends run as `zovn-perf udp-echo` / `zovn-perf udp-send` (hidden subcommands).

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::phase_log::finite;

const MSG: usize = 24;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i * 8..i * 8 + 8]);
    u64::from_le_bytes(w)
}

/// Answers every datagram on `port` with its own receive time, for `seconds`.
pub fn echo(port: u16, seconds: u32) -> Result<()> {
    let sock = UdpSocket::bind(("::", port))
        .or_else(|_| UdpSocket::bind(("0.0.0.0", port)))
        .with_context(|| format!("bind UDP port {port}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))?;
    let end = Instant::now() + Duration::from_secs(u64::from(seconds));
    let mut buf = [0u8; 64];
    while Instant::now() < end {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        if n < 16 {
            continue;
        }
        buf[16..24].copy_from_slice(&now_ns().to_le_bytes());
        let _ = sock.send_to(&buf[..MSG], from);
    }
    Ok(())
}

/// One datagram's times (ns since the epoch); `echo`/`recv` are 0 when it was lost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Record {
    pub seq: u64,
    pub sent: u64,
    pub echo: u64,
    pub recv: u64,
}

/// Sends to `to` every `interval` for `seconds` and writes one line per datagram
/// (`seq sent echo recv`) to `out`.
pub fn send(to: SocketAddr, interval: Duration, seconds: u32, out: &Path) -> Result<()> {
    let bind: SocketAddr = if to.is_ipv6() {
        "[::]:0".parse()?
    } else {
        "0.0.0.0:0".parse()?
    };
    let sock = UdpSocket::bind(bind).context("bind the probe socket")?;
    sock.connect(to)
        .with_context(|| format!("connect to {to}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let count =
        (Duration::from_secs(u64::from(seconds)).as_nanos() / interval.as_nanos().max(1)) as usize;
    let mut records = vec![Record::default(); count];
    let done = Arc::new(AtomicBool::new(false));
    let rx = {
        let sock = sock.try_clone()?;
        let done = done.clone();
        std::thread::spawn(move || {
            let mut got = Vec::with_capacity(count);
            let mut buf = [0u8; 64];
            loop {
                match sock.recv(&mut buf) {
                    Ok(n) if n >= MSG => {
                        got.push((word(&buf, 0), word(&buf, 2), now_ns()));
                    }
                    Ok(_) => {}
                    Err(_) if done.load(Ordering::Relaxed) => return got,
                    Err(_) => {}
                }
            }
        })
    };
    let start = Instant::now();
    for (i, r) in records.iter_mut().enumerate() {
        let due = start + interval * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        r.seq = i as u64;
        r.sent = now_ns();
        let mut msg = [0u8; MSG];
        msg[..8].copy_from_slice(&r.seq.to_le_bytes());
        msg[8..16].copy_from_slice(&r.sent.to_le_bytes());
        // a refused send (no route during a switch) is a lost datagram
        let _ = sock.send(&msg);
    }
    // the last replies
    std::thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::Relaxed);
    let got = rx
        .join()
        .map_err(|_| anyhow::anyhow!("receiver thread panicked"))?;
    for (seq, echo, recv) in got {
        if let Some(r) = records.get_mut(seq as usize)
            && r.recv == 0
        {
            r.echo = echo;
            r.recv = recv;
        }
    }
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(out).with_context(|| format!("create {}", out.display()))?,
    );
    for r in &records {
        writeln!(f, "{} {} {} {}", r.seq, r.sent, r.echo, r.recv)?;
    }
    f.flush()?;
    Ok(())
}

/// Reads what [`send`] wrote.
pub fn parse(text: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace().map(|x| x.parse::<u64>().ok());
            Some(Record {
                seq: w.next()??,
                sent: w.next()??,
                echo: w.next()??,
                recv: w.next()??,
            })
        })
        .collect()
}

/// What a UDP probe showed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UdpGaps {
    pub sent: u64,
    pub received: u64,
    /// Longest time without a reply arriving (ms), as ping would show it.
    pub longest_reply_gap_ms: f64,
    /// Longest time between two sends (ms): the sender's own scheduling.
    pub longest_send_gap_ms: f64,
    /// Longest round trip of any answered datagram (ms): how long the path held one.
    pub max_rtt_ms: f64,
    /// Longest sender → echo time (ms).
    pub max_forward_ms: f64,
    /// Longest echo → sender time (ms).
    pub max_back_ms: f64,
    /// Longest run of consecutive lost datagrams, as ms of sending.
    pub longest_loss_ms: f64,
}

impl UdpGaps {
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }

    pub fn of(records: &[Record]) -> UdpGaps {
        let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6;
        let mut g = UdpGaps {
            sent: records.len() as u64,
            ..UdpGaps::default()
        };
        let mut recvs: Vec<u64> = Vec::new();
        let mut loss_start: Option<u64> = None;
        for (i, r) in records.iter().enumerate() {
            if i > 0 {
                g.longest_send_gap_ms = g.longest_send_gap_ms.max(ms(records[i - 1].sent, r.sent));
            }
            if r.recv == 0 {
                loss_start.get_or_insert(r.sent);
                continue;
            }
            if let Some(s) = loss_start.take() {
                g.longest_loss_ms = g.longest_loss_ms.max(ms(s, r.sent));
            }
            g.received += 1;
            recvs.push(r.recv);
            g.max_rtt_ms = g.max_rtt_ms.max(ms(r.sent, r.recv));
            g.max_forward_ms = g.max_forward_ms.max(ms(r.sent, r.echo));
            g.max_back_ms = g.max_back_ms.max(ms(r.echo, r.recv));
        }
        if let (Some(s), Some(last)) = (loss_start, records.last()) {
            g.longest_loss_ms = g.longest_loss_ms.max(ms(s, last.sent));
        }
        recvs.sort_unstable();
        // the gaps at either end count too (first send → first reply, last reply → last send)
        let bounds = records.first().map(|r| r.sent).into_iter();
        let ends = records.last().map(|r| r.sent);
        let mut prev: Option<u64> = None;
        for t in bounds.chain(recvs.iter().copied()).chain(ends) {
            if let Some(p) = prev {
                g.longest_reply_gap_ms = g.longest_reply_gap_ms.max(ms(p, t));
            }
            prev = Some(prev.map_or(t, |p| p.max(t)));
        }
        g
    }

    pub fn to_json(&self) -> Value {
        json!({
            "sent": self.sent, "received": self.received, "lost": self.lost(),
            "longest_reply_gap_ms": finite(self.longest_reply_gap_ms),
            "longest_send_gap_ms": finite(self.longest_send_gap_ms),
            "max_rtt_ms": finite(self.max_rtt_ms),
            "max_forward_ms": finite(self.max_forward_ms),
            "max_back_ms": finite(self.max_back_ms),
            "longest_loss_ms": finite(self.longest_loss_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(seq: u64, sent_ms: u64, echo_ms: u64, recv_ms: u64) -> Record {
        Record {
            seq,
            sent: sent_ms * 1_000_000,
            echo: echo_ms * 1_000_000,
            recv: recv_ms * 1_000_000,
        }
    }

    #[test]
    fn a_held_packet_shows_as_rtt_and_a_late_sender_as_send_gap() {
        let recs = vec![
            r(0, 0, 0, 1),
            r(1, 2, 3, 3),
            // held by the path for 150 ms
            r(2, 4, 150, 154),
            r(3, 6, 150, 154),
            // the sender paused 40 ms
            r(4, 46, 46, 47),
            Record {
                seq: 5,
                sent: 48_000_000,
                ..Record::default()
            },
            Record {
                seq: 6,
                sent: 50_000_000,
                ..Record::default()
            },
            r(7, 52, 52, 160),
        ];
        let g = UdpGaps::of(&recs);
        assert_eq!((g.sent, g.received, g.lost()), (8, 6, 2));
        assert_eq!(g.max_rtt_ms, 150.0);
        assert_eq!(g.max_forward_ms, 146.0);
        assert_eq!(g.max_back_ms, 108.0);
        assert_eq!(g.longest_send_gap_ms, 40.0);
        // replies at 1, 3, 47, 154, 154, 160 → the longest gap is 47 → 154
        assert_eq!(g.longest_reply_gap_ms, 107.0);
        assert_eq!(g.longest_loss_ms, 4.0);
    }

    #[test]
    fn parse_reads_what_send_writes_and_skips_junk() {
        let recs = parse("0 1 2 3\n1 5 0 0\nbad line\n");
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].recv, 0);
        let g = UdpGaps::of(&recs);
        assert_eq!((g.sent, g.received), (2, 1));
    }
}
