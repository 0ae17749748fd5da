//! How long an idle PMD thread sleeps (`Open_vSwitch other_config:pmd-maxsleep`), and
//! the agent's tuner that switches it with the traffic.
//!
//! A PMD thread polls its queues in a loop. Without a sleep it owns its core whether
//! packets come or not: on an ordinary node (the chart's default pool, AF_XDP ports) that
//! is one core burnt per node for nothing. OVS 3.1's `pmd-maxsleep` lets an idle PMD
//! sleep, growing its sleep by 1 µs per idle iteration up to the maximum, but it counts
//! as idle every iteration that brings fewer than 16 packets per queue: request/response
//! traffic then waits about the maximum sleep for every packet (measured with 50 µs:
//! qperf `tcp_lat` 83 µs against 25 µs busy, docs/performance.md). A static value cannot
//! be both cheap when idle and fast under traffic.
//!
//! So by default ([`PmdSleep::Adaptive`]) the agent switches it: every [`TUNE_PERIOD`]
//! it reads the PMD threads' `packets received` (`dpif-netdev/pmd-stats-show`); at
//! [`BUSY_PPS`] or more it writes 0 (busy polling), and after [`QUIET_FOR`] below that
//! it writes the idle value back ([`IDLE_SLEEP_US`]). `pmd-maxsleep` is read by
//! ovs-vswitchd at run time: no restart, no queue reassignment. A trickle of packets
//! (probes, DNS) stays under the threshold and pays at most the idle sleep.
//!
//! `pmdMaxSleep: <µs>` sets a static value instead; a node whose `pmdCpus` dedicates
//! cores busy-polls unless `pmdMaxSleep` says otherwise (those cores are the PMDs' own).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::config::PmdMaxSleep;

/// The `other_config` key.
pub const KEY: &str = "pmd-maxsleep";
/// The largest value OVS accepts (µs).
pub const MAX_US: u32 = 10_000;
/// The adaptive mode's sleep while idle (µs).
pub const IDLE_SLEEP_US: u32 = 1_000;
/// Packets per second (all PMDs together) from which the PMDs busy-poll.
pub const BUSY_PPS: u64 = 1_000;
/// How long the rate must stay below [`BUSY_PPS`] before the PMDs sleep again.
pub const QUIET_FOR: Duration = Duration::from_secs(3);
/// How often the tuner reads the PMD counters.
pub const TUNE_PERIOD: Duration = Duration::from_millis(100);

/// The policy the decision chose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "mode")]
pub enum PmdSleep {
    /// No sleep (OVS's default): the PMDs own their cores.
    #[default]
    Busy,
    /// `pmd-maxsleep` set once to this many µs.
    Static { us: u32 },
    /// The agent switches between `idle_us` (no traffic) and 0 (traffic).
    #[serde(rename_all = "camelCase")]
    Adaptive { idle_us: u32 },
}

impl PmdSleep {
    /// The value the decision writes (the adaptive mode starts idle; the tuner changes it).
    pub fn initial_us(&self) -> Option<u32> {
        match *self {
            PmdSleep::Busy => None,
            PmdSleep::Static { us } => Some(us),
            PmdSleep::Adaptive { idle_us } => Some(idle_us),
        }
    }

    /// The operator's one-line account (status, `zovn status`).
    pub fn describe(&self) -> String {
        match *self {
            PmdSleep::Busy => "busy polling (pmd-maxsleep 0)".into(),
            PmdSleep::Static { us } => format!("static: idle PMDs sleep up to {us} µs"),
            PmdSleep::Adaptive { idle_us } => format!(
                "adaptive: up to {idle_us} µs while the PMDs see under {BUSY_PPS} packets/s, busy polling above"
            ),
        }
    }
}

/// The policy for `pmdMaxSleep` (`cfg`), on a node whose PMDs poll (`polls`: the dpdk and
/// afxdp datapaths) with cores dedicated by `pmdCpus` or not. A bad value is reported in
/// `errors` and the default used.
pub fn choose(
    cfg: Option<&PmdMaxSleep>,
    dedicated_cores: bool,
    polls: bool,
    errors: &mut Vec<String>,
) -> PmdSleep {
    let default = if dedicated_cores {
        PmdSleep::Busy
    } else {
        PmdSleep::Adaptive {
            idle_us: IDLE_SLEEP_US,
        }
    };
    let chosen = match cfg {
        None => default,
        Some(PmdMaxSleep::Us(0)) => PmdSleep::Busy,
        Some(PmdMaxSleep::Us(us)) if *us <= MAX_US => PmdSleep::Static { us: *us },
        Some(PmdMaxSleep::Us(us)) => {
            errors.push(format!(
                "pmdMaxSleep {us} µs is above the OVS maximum of {MAX_US}: using {}",
                default.describe()
            ));
            default
        }
        Some(PmdMaxSleep::Word(w)) if w == "auto" => PmdSleep::Adaptive {
            idle_us: IDLE_SLEEP_US,
        },
        Some(PmdMaxSleep::Word(w)) => {
            errors.push(format!(
                "pmdMaxSleep {w:?} is neither a number of µs nor \"auto\": using {}",
                default.describe()
            ));
            default
        }
    };
    if polls { chosen } else { PmdSleep::Busy }
}

/// The adaptive mode's state: the last counter reading and since when the rate is low.
#[derive(Debug, Default)]
pub struct Tuner {
    last: Option<(Instant, u64)>,
    quiet_since: Option<Instant>,
    busy: bool,
}

impl Tuner {
    /// Feeds one reading of the PMDs' total `packets received` at `now`; returns the
    /// `pmd-maxsleep` wanted now. A counter that went back (ovs-vswitchd restarted, or
    /// `pmd-stats-clear`) starts a new baseline.
    pub fn observe(&mut self, now: Instant, packets: u64, idle_us: u32) -> u32 {
        let rate = match self.last {
            Some((t, p)) if packets >= p && now > t => {
                let secs = now.duration_since(t).as_secs_f64();
                Some((packets - p) as f64 / secs)
            }
            _ => None,
        };
        self.last = Some((now, packets));
        match rate {
            Some(r) if r >= BUSY_PPS as f64 => {
                self.busy = true;
                self.quiet_since = None;
            }
            Some(_) => {
                let since = *self.quiet_since.get_or_insert(now);
                if self.busy && now.duration_since(since) >= QUIET_FOR {
                    self.busy = false;
                }
            }
            None => {}
        }
        if self.busy { 0 } else { idle_us }
    }

    /// Whether the PMDs are in their busy phase.
    pub fn busy(&self) -> bool {
        self.busy
    }
}

/// The PMD threads' total `packets received` (the main thread's excluded) from
/// `pmd-stats-show` output; `None` when the text holds no PMD thread.
pub fn pmd_packets(stats: &[ovsdb::pmd_stats::PmdThreadStats]) -> Option<u64> {
    let pmds: Vec<_> = stats
        .iter()
        .filter(|t| matches!(t.thread, ovsdb::pmd_stats::PmdThread::Pmd { .. }))
        .collect();
    (!pmds.is_empty()).then(|| pmds.iter().map(|t| t.packets_received).sum())
}

/// Runs forever: while the node's decision is [`PmdSleep::Adaptive`], reads the PMD
/// counters through `ctl` every [`TUNE_PERIOD`] and writes `pmd-maxsleep` when the
/// [`Tuner`] wants another value. It writes only a key the datapath pass has written
/// (the pass owns the mode; the tuner only the live value), and reports each switch in
/// the log and `metrics`.
pub async fn run(
    dp: &super::DatapathManager,
    ovs: &crate::ovs::Ovs,
    ctl: &crate::ovs::unixctl::Unixctl,
    metrics: &crate::agent::metrics::Metrics,
) {
    let mut tuner = Tuner::default();
    let mut tick = tokio::time::interval(TUNE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        let Some(PmdSleep::Adaptive { idle_us }) = dp.pmd_sleep() else {
            tuner = Tuner::default();
            continue;
        };
        if !ovs.is_synced() {
            continue;
        }
        let read = ctl
            .call("dpif-netdev/pmd-stats-show", &[])
            .await
            .map_err(|e| e.to_string())
            .and_then(|t| ovsdb::pmd_stats::parse_pmd_stats(&t).map_err(|e| e.to_string()));
        let packets = match read {
            // no PMD thread (no port needs one yet): nothing moves, idle
            Ok(stats) => pmd_packets(&stats).unwrap_or(0),
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "adaptive PMD sleep: PMD counters unreadable; pmd-maxsleep left as it is");
                }
                failing = true;
                continue;
            }
        };
        failing = false;
        let want = tuner.observe(Instant::now(), packets, idle_us);
        let have = ovs
            .open_vswitch()
            .and_then(|r| r.other_config.get(KEY).cloned());
        let Some(have) = have else { continue };
        if have == want.to_string() {
            continue;
        }
        let set = std::collections::BTreeMap::from([(KEY.to_string(), want.to_string())]);
        match ovs
            .update_open_vswitch_maps(&set, &[], &Default::default(), &[])
            .await
        {
            Ok(()) => {
                tracing::info!(
                    pmd_maxsleep_us = want,
                    busy = tuner.busy(),
                    "adaptive PMD sleep: {}",
                    if want == 0 {
                        format!("traffic at {BUSY_PPS}+ packets/s, busy polling")
                    } else {
                        format!("quiet for {} s, PMDs sleep again", QUIET_FOR.as_secs())
                    }
                );
                metrics.pmd_sleep_switch(want);
            }
            Err(e) => tracing::warn!(error = %e, "adaptive PMD sleep: pmd-maxsleep not written"),
        }
    }
}

#[cfg(test)]
mod tests;
