//! Keeps OVS 3.1's userspace datapath from serving a stale verdict after a flow-table
//! change (a NetworkPolicy's old "allow" or "drop" kept for as long as traffic hits it).
//!
//! The fault (see [`crate::datapath::megaflow`]): a revalidator "modify" can land on an overlapping
//! broader megaflow instead of the one it was meant for, which then keeps its old actions
//! while OVS believes it revalidated it. Nothing in OVS ever looks at it again.
//!
//! The guard: whenever ovs-vswitchd's flow tables changed (its `rev_flow_table` coverage
//! counter moved) and at least every [`FULL_CHECK`], wait for two revalidator rounds, dump
//! the datapath flows and look for stale ones three ways:
//! - two flows of one thread's table that overlap with different actions (the shape the
//!   fault leaves while the broader flow lives);
//! - flows (those after a recirculation, then the most hit since the last check, first;
//!   at most [`MAX_TRACES`]) whose actions differ from what
//!   `ofproto/trace` of their key gives now, recirculation ids aside (the broader flow may
//!   be gone already);
//! - flows whose actions continue at a recirculation id ovs-vswitchd no longer knows
//!   (`ofproto/trace recirc_id(N)` answers "no recirculation data"): every packet they
//!   pass on misses, and its upcall drops it for want of the frozen state. Corpus runs find
//!   such flows after policy changes (the likely cause of one run losing all traffic
//!   between two pods, both ways, for 42 s). The counter of failed upcalls,
//!   `datapath_drop_upcall_error`, which those drops move, also starts a check.
//!
//! What the first look finds is looked at again after two more revalidator rounds (the
//! tables may have changed again meanwhile, and a flow the revalidators had not reached
//! yet is fixed by then); only a flow still there, unchanged and still wrong counts.
//!
//! When one does, the datapath flows are purged (`revalidator/purge`, which also
//! drops the revalidator's records of them): the next packets are translated from the
//! current tables. Each purge is logged with the flows that caused it and counted in
//! `zstack_ovn_stale_megaflow_purges_total`.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::datapath::megaflow::{
    Megaflow, conflicting_overlaps, is_slow_path, parse_dump, recirc_targets, same_actions,
    traced_actions,
};
use crate::ovs::unixctl::{Unixctl, UnixctlError};

/// How often the datapath counters (`COUNTERS`) are read.
pub const POLL: Duration = Duration::from_millis(500);
/// The longest time between two checks, changes or not.
pub const FULL_CHECK: Duration = Duration::from_secs(30);
/// The most flows traced in one check (each trace is one unixctl call, ~0.1–1 ms of
/// ovs-vswitchd's main thread).
pub const MAX_TRACES: usize = 1024;
/// The shortest time between two checks (flow tables change often in a busy cluster).
pub const MIN_INTERVAL: Duration = Duration::from_secs(2);
/// The coverage counters that start a check when they move: a flow-table change that makes
/// ovs-vswitchd revalidate, and a packet dropped because its upcall failed (as it does for
/// an unknown recirculation id).
const COUNTERS: [&str; 2] = ["rev_flow_table", "datapath_drop_upcall_error"];

/// What one check found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Datapath flows dumped.
    pub flows: usize,
    /// Overlapping pairs with different actions: `(ufid, actions)` of each.
    pub conflicts: Vec<((String, String), (String, String))>,
    /// Flows whose actions differ from their trace now: `(ufid, actions, traced actions)`.
    pub stale: Vec<(String, String, String)>,
    /// Flows whose actions continue at a recirculation id ovs-vswitchd no longer knows:
    /// `(ufid, actions, id)`.
    pub dangling: Vec<(String, String, String)>,
    /// Flows traced.
    pub traced: usize,
    /// What the first look found that the second did not confirm (fixed by the
    /// revalidators meanwhile, or gone): overlapping pairs, stale flows and unknown
    /// recirculation ids.
    pub unconfirmed: usize,
    /// Whether the datapath flows were purged (the second look confirmed something).
    pub purged: bool,
}

/// The guard of one ovs-vswitchd.
#[derive(Debug)]
pub struct MegaflowGuard {
    ctl: Unixctl,
    seen: [Option<u64>; 2],
    last_check: Option<Instant>,
    /// Each flow's packet count at the last check (by ufid).
    packets: std::collections::HashMap<String, u64>,
}

impl MegaflowGuard {
    /// A guard speaking to ovs-vswitchd's control socket (`ctl`'s timeout must cover two
    /// revalidator rounds: 5 s is plenty).
    pub fn new(ctl: Unixctl) -> MegaflowGuard {
        MegaflowGuard {
            ctl,
            seen: [None; 2],
            last_check: None,
            packets: Default::default(),
        }
    }

    /// Checks when the flow tables changed since the last check, or [`FULL_CHECK`] has
    /// passed; `None` when there was nothing to check.
    pub async fn pass(&mut self) -> Result<Option<Check>, UnixctlError> {
        let mut n = [None; 2];
        for (v, c) in n.iter_mut().zip(COUNTERS) {
            *v = self
                .ctl
                .call("coverage/read-counter", &[c])
                .await?
                .trim()
                .parse()
                .ok();
        }
        let since = self.last_check.map(|t| t.elapsed());
        let due = since.is_none_or(|t| t >= FULL_CHECK);
        let changed = n.contains(&None) || n != self.seen;
        if !due && (!changed || since.is_some_and(|t| t < MIN_INTERVAL)) {
            return Ok(None);
        }
        self.seen = n;
        self.check().await.map(Some)
    }

    /// Waits for the revalidators to finish with the current tables, looks for stale
    /// flows, and purges when a second look after two more revalidator rounds confirms
    /// any (the flow tables may have changed again meanwhile: a flow the revalidators
    /// simply had not reached yet is fixed by then).
    pub async fn check(&mut self) -> Result<Check, UnixctlError> {
        self.last_check = Some(Instant::now());
        let flows = self.settled_dump().await?;
        let suspects = self.suspects(&flows);
        self.packets = flows.iter().map(|f| (f.ufid.clone(), f.packets)).collect();
        let traced = suspects.len();
        let first = Findings {
            conflicts: conflicting_overlaps(&flows)
                .into_iter()
                .map(|(i, j)| (brief(&flows[i]), brief(&flows[j])))
                .collect(),
            stale: self.stale(suspects).await,
            unknown_ids: self.unknown_recirc_ids(&flows).await,
        };
        let found =
            |c: &Check| !c.conflicts.is_empty() || !c.stale.is_empty() || !c.dangling.is_empty();
        let mut check = Check {
            flows: flows.len(),
            conflicts: Vec::new(),
            stale: Vec::new(),
            dangling: Vec::new(),
            traced,
            unconfirmed: 0,
            purged: false,
        };
        if first.is_empty() {
            return Ok(check);
        }
        // the second look: only what is still there, unchanged, and still wrong
        let again = self.settled_dump().await?;
        let now: HashMap<&str, &Megaflow> = again.iter().map(|f| (f.ufid.as_str(), f)).collect();
        let kept = |(ufid, actions): &(String, String)| {
            now.get(ufid.as_str())
                .is_some_and(|f| &f.actions == actions)
        };
        check.conflicts = first
            .conflicts
            .iter()
            .filter(|(a, b)| kept(a) && kept(b))
            .cloned()
            .collect();
        let still: Vec<&Megaflow> = first
            .stale
            .iter()
            .filter_map(|(ufid, actions, _)| {
                now.get(ufid.as_str())
                    .filter(|f| &f.actions == actions)
                    .copied()
            })
            .collect();
        check.stale = self.stale(still).await;
        check.dangling = again
            .iter()
            .filter_map(|f| {
                let id = recirc_targets(&f.actions).find(|id| first.unknown_ids.contains(*id))?;
                Some((f.ufid.clone(), f.actions.clone(), id.to_string()))
            })
            .collect();
        let confirmed_ids: BTreeSet<&str> = check.dangling.iter().map(|d| d.2.as_str()).collect();
        check.unconfirmed = (first.conflicts.len() + first.stale.len() + first.unknown_ids.len())
            .saturating_sub(check.conflicts.len() + check.stale.len() + confirmed_ids.len());
        check.purged = found(&check);
        if check.purged {
            self.ctl.call("revalidator/purge", &[]).await?;
        }
        Ok(check)
    }

    /// The datapath flows once the revalidators have been through the current tables (a
    /// round may have started before a change: the next one too).
    async fn settled_dump(&self) -> Result<Vec<Megaflow>, UnixctlError> {
        self.ctl.call("revalidator/wait", &[]).await?;
        self.ctl.call("revalidator/wait", &[]).await?;
        let dump = self
            .ctl
            .call("dpctl/dump-flows", &["-m", "--no-names"])
            .await?;
        Ok(parse_dump(&dump))
    }

    /// The flows to trace, at most [`MAX_TRACES`]: those after a recirculation first
    /// (where conntrack verdicts, and so NetworkPolicy ACLs, are decided), then the most
    /// hit since the last check (a stale verdict does its harm by being hit: a client
    /// retrying what it should no longer reach, or the reverse). A `slow_path` flow
    /// caches nothing.
    fn suspects<'a>(&self, flows: &'a [Megaflow]) -> Vec<&'a Megaflow> {
        let delta = |f: &Megaflow| {
            f.packets
                .saturating_sub(self.packets.get(&f.ufid).copied().unwrap_or(0))
        };
        let first_pass = |f: &Megaflow| f.recirc_id().is_none_or(|r| r == "0" || r == "0x0");
        let mut suspects: Vec<&Megaflow> =
            flows.iter().filter(|f| !is_slow_path(&f.actions)).collect();
        suspects.sort_by_key(|f| (first_pass(f), std::cmp::Reverse(delta(f))));
        suspects.truncate(MAX_TRACES);
        suspects
    }

    /// Those of `flows` whose actions differ from `ofproto/trace` of their key now:
    /// `(ufid, actions, traced actions)`.
    async fn stale(&self, flows: Vec<&Megaflow>) -> Vec<(String, String, String)> {
        let mut stale = Vec::new();
        for f in flows {
            // a flow that vanished meanwhile, or a key the tracer refuses, proves nothing
            let Ok(trace) = self.ctl.call("ofproto/trace", &[&f.trace_key()]).await else {
                continue;
            };
            if let Some(now) = traced_actions(&trace)
                && !same_actions(&f.actions, now)
            {
                stale.push((f.ufid.clone(), f.actions.clone(), now.to_string()));
            }
        }
        stale
    }

    /// The recirculation ids the flows' actions continue at that ovs-vswitchd does not
    /// know (`ofproto/trace recirc_id(N)` answers "no recirculation data"); each distinct
    /// id traced once, at most [`MAX_TRACES`]. An id is freed legitimately once its flows
    /// are deleted, so only a flow that still holds one at the second look counts.
    async fn unknown_recirc_ids(&self, flows: &[Megaflow]) -> BTreeSet<String> {
        let ids: BTreeSet<&str> = flows
            .iter()
            .flat_map(|f| recirc_targets(&f.actions))
            .collect();
        let mut unknown = BTreeSet::new();
        for id in ids.into_iter().take(MAX_TRACES) {
            match self
                .ctl
                .call("ofproto/trace", &[&format!("recirc_id({id})")])
                .await
            {
                Err(UnixctlError::Command { message, .. })
                    if message
                        .to_ascii_lowercase()
                        .contains("no recirculation data") =>
                {
                    unknown.insert(id.to_string());
                }
                _ => {}
            }
        }
        unknown
    }
}

/// What a first look found, before the second.
struct Findings {
    conflicts: Vec<((String, String), (String, String))>,
    stale: Vec<(String, String, String)>,
    unknown_ids: BTreeSet<String>,
}

impl Findings {
    fn is_empty(&self) -> bool {
        self.conflicts.is_empty() && self.stale.is_empty() && self.unknown_ids.is_empty()
    }
}

fn brief(f: &Megaflow) -> (String, String) {
    (f.ufid.clone(), f.actions.clone())
}

/// Runs the guard forever: a purge is logged (with up to three of the conflicting pairs)
/// and counted; an unreachable ovs-vswitchd is logged once per outage.
pub async fn run(ctl: Unixctl, metrics: std::sync::Arc<crate::agent::metrics::Metrics>) {
    let mut guard = MegaflowGuard::new(ctl);
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        match guard.pass().await {
            Ok(Some(c)) if c.purged => {
                metrics.stale_megaflow_purges.inc();
                tracing::warn!(
                    flows = c.flows,
                    conflicts = c.conflicts.len(),
                    stale = c.stale.len(),
                    dangling = c.dangling.len(),
                    unconfirmed = c.unconfirmed,
                    overlapping = ?c.conflicts.iter().take(3).collect::<Vec<_>>(),
                    traced_stale = ?c.stale.iter().take(3).collect::<Vec<_>>(),
                    unknown_recirculation = ?c.dangling.iter().take(3).collect::<Vec<_>>(),
                    "datapath flows purged: stale datapath flows (overlapping megaflows with \
                     different actions, actions a fresh translation no longer gives, or a \
                     recirculation id ovs-vswitchd no longer knows; a fault of OVS 3.1's \
                     userspace revalidator)"
                );
                failing = false;
            }
            Ok(Some(c)) => {
                if c.unconfirmed > 0 {
                    tracing::debug!(
                        flows = c.flows,
                        unconfirmed = c.unconfirmed,
                        "megaflow guard: suspects the revalidators fixed by the second look"
                    );
                }
                failing = false;
            }
            Ok(None) => failing = false,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "megaflow guard: check failed");
                }
                failing = true;
            }
        }
    }
}
