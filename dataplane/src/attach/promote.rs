//! Fast start (`afxdp.fastStart`, on by default): a pod whose port belongs on AF_XDP
//! starts on a kernel (AF_PACKET) port, so its ADD is answered as fast as on the kernel
//! datapath, and this module moves the port to AF_XDP in the background.
//!
//! Why: ovs-vswitchd opens an AF_XDP port (XDP program, a 64 MiB umem per queue, the PMD
//! reconfiguration) in ~110–180 ms, one port at a time; with the open on the ADD's path a
//! 30-pod burst on one node waited 4–8 s for its network. Switching an existing port's
//! `type` costs ovs-vswitchd the same, but nobody waits for it: the ofport stays, so
//! ovn-controller's flows stay, and the pod's own traffic pauses once, for that switch.
//!
//! When: the switches wait until no ADD has been in flight for [`QUIET`] (a burst's ADDs
//! do not queue behind them in ovs-vswitchd), but never longer than [`MAX_DEFER`] for
//! the oldest pending port (steady churn cannot starve them). One port per OVS
//! transaction, oldest first, each under its sandbox lock and re-read under it (a DEL in
//! flight wins). The pending state is in the sandbox record ([`SandboxRecord::promote_to`])
//! and on the port (`external_ids:zstack.io/datapath-pending`): an agent restart picks it
//! up. A port that does not open falls back to the kernel path as at ADD
//! ([`super::veth::confirm_port`]).
//!
//! Reported: a `pod port moved to AF_XDP` log line per port (how long it waited, how long
//! the switch took), `zstack_ovn_port_promotions_total{result}` and
//! `zstack_ovn_port_promotion_wait_seconds` (ADD answered → AF_XDP open).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::common::pod_port_spec;
use crate::datapath::Datapath;
use crate::node::NodeCtx;
use crate::node_datapath::AFXDP_OPEN_WAIT;
use crate::state::SandboxRecord;

/// How long no ADD must have been in flight before a switch starts.
pub const QUIET: Duration = Duration::from_millis(300);
/// The longest a pending port waits for a quiet moment. Long: a switch delays an ADD
/// that arrives meanwhile by up to its own time (ovs-vswitchd's main thread is busy with
/// it), and a pod on the kernel path works, only slower.
pub const MAX_DEFER: Duration = Duration::from_secs(30);
/// How often the records are re-read without a wake-up (after a restart, a failure).
const RESCAN: Duration = Duration::from_secs(2);
/// A switch that failed is retried after this long.
const RETRY: Duration = Duration::from_secs(5);

/// The ADDs in flight and the pending ports' queue times (shared by the ADD path and
/// [`run`]).
#[derive(Debug, Default)]
pub struct Promotions {
    inner: Mutex<Inner>,
    wake: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Inner {
    in_flight: usize,
    last_add: Option<Instant>,
    /// sandbox key → when it was queued (or last failed).
    queued_at: HashMap<String, Instant>,
}

/// Held by an ADD while it runs (see [`Promotions::add_started`]).
pub struct AddInFlight<'a>(&'a Promotions);

impl Drop for AddInFlight<'_> {
    fn drop(&mut self) {
        if let Ok(mut i) = self.0.inner.lock() {
            i.in_flight = i.in_flight.saturating_sub(1);
            i.last_add = Some(Instant::now());
        }
        self.0.wake.notify_one();
    }
}

impl Promotions {
    /// An ADD starts: switches wait until it and its burst are over.
    pub fn add_started(&self) -> AddInFlight<'_> {
        if let Ok(mut i) = self.inner.lock() {
            i.in_flight += 1;
        }
        AddInFlight(self)
    }

    /// A port of sandbox `key` waits for its switch.
    pub fn queued(&self, key: &str) {
        if let Ok(mut i) = self.inner.lock() {
            i.queued_at
                .entry(key.to_string())
                .or_insert_with(Instant::now);
        }
        self.wake.notify_one();
    }

    /// How long no ADD has been in flight (`None`: one is).
    fn quiet_for(&self) -> Option<Duration> {
        let i = self.inner.lock().ok()?;
        if i.in_flight > 0 {
            return None;
        }
        Some(i.last_add.map_or(Duration::MAX, |t| t.elapsed()))
    }

    /// When `key` was queued (now, for one first seen here: a record read after a start).
    fn queued_at(&self, key: &str) -> Instant {
        self.inner
            .lock()
            .map(|mut i| {
                *i.queued_at
                    .entry(key.to_string())
                    .or_insert_with(Instant::now)
            })
            .unwrap_or_else(|_| Instant::now())
    }

    fn set_queued_at(&self, key: &str, at: Option<Instant>) {
        if let Ok(mut i) = self.inner.lock() {
            match at {
                Some(t) => i.queued_at.insert(key.to_string(), t),
                None => i.queued_at.remove(key),
            };
        }
    }

    /// Whether a switch may start now, given the oldest pending port's queue time.
    fn may_start(&self, oldest: Instant) -> bool {
        self.quiet_for().is_some_and(|q| q >= QUIET) || oldest.elapsed() >= MAX_DEFER
    }
}

/// The records whose port still has to move, oldest queued first (with their queue time).
fn pending(ctx: &NodeCtx) -> Vec<(Instant, SandboxRecord)> {
    let mut v: Vec<(Instant, SandboxRecord)> = ctx
        .state()
        .all()
        .into_iter()
        .filter(|r| r.promote_to.is_some())
        .map(|r| (ctx.promotions().queued_at(&r.key()), r))
        .collect();
    v.sort_by_key(|(t, _)| *t);
    v
}

/// Runs forever: moves pending ports to their datapath (see the module doc).
pub async fn run(ctx: &NodeCtx) {
    let p = ctx.promotions();
    loop {
        let queue = pending(ctx);
        let Some((oldest, _)) = queue.first().cloned() else {
            let _ = tokio::time::timeout(RESCAN, p.wake.notified()).await;
            continue;
        };
        if oldest > Instant::now() || !p.may_start(oldest) {
            // an ADD is in flight or just ended: look again shortly
            let _ = tokio::time::timeout(Duration::from_millis(50), p.wake.notified()).await;
            continue;
        }
        let mut did = false;
        for (at, rec) in queue {
            if at > Instant::now() {
                continue; // a failed one waiting for its retry time
            }
            if did && !p.may_start(at) {
                break;
            }
            let lock = ctx.sandbox_lock(&rec.container_id);
            let Ok(_g) = lock.try_lock() else {
                continue; // a request for this sandbox is in flight
            };
            let Some(rec) = ctx.state().get(&rec.container_id, &rec.ifname) else {
                p.set_queued_at(&rec.key(), None);
                continue;
            };
            if rec.promote_to.is_none() {
                p.set_queued_at(&rec.key(), None);
                continue;
            }
            promote_one(ctx, rec, at).await;
            did = true;
        }
        if !did {
            let _ = tokio::time::timeout(RESCAN, p.wake.notified()).await;
        }
    }
}

/// Moves one port (under its sandbox lock). A failed OVS write is retried after
/// [`RETRY`]; a port ovs-vswitchd cannot open falls back to the kernel path.
async fn promote_one(ctx: &NodeCtx, rec: SandboxRecord, queued: Instant) {
    let key = rec.key();
    let pod = format!("{}/{}", rec.pod_namespace, rec.pod_name);
    let start = Instant::now();
    let mut r = rec.clone();
    r.datapath = r.promote_to.take();
    if let Err(e) = ctx.ovs().ensure_port(&pod_port_spec(&r)).await {
        tracing::warn!(%pod, port = %r.host_ifname, error = %e, "moving the pod port to AF_XDP failed; retrying later");
        ctx.metrics().port_promotion("error");
        ctx.promotions()
            .set_queued_at(&key, Some(Instant::now() + RETRY));
        return;
    }
    // the ofport stays through a type switch: only ovs-vswitchd's cur_cfg says it is done
    match ctx.ovs().wait_applied(AFXDP_OPEN_WAIT).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(%pod, port = %r.host_ifname, "ovs-vswitchd did not confirm the switch to AF_XDP in time");
        }
        Err(e) => {
            tracing::warn!(%pod, error = %e, "asking ovs-vswitchd to confirm the switch failed")
        }
    }
    let fell_back =
        r.datapath == Some(Datapath::Afxdp) && super::veth::confirm_port(ctx, &mut r).await;
    if let Err(e) = ctx.state().put_async(&r).await {
        tracing::warn!(sandbox = %key, error = %e, "persisting the moved port failed");
    }
    ctx.promotions().set_queued_at(&key, None);
    let waited = start.saturating_duration_since(queued);
    let switch = start.elapsed();
    let dp = r.datapath.unwrap_or(Datapath::Kernel);
    ctx.metrics()
        .port_promotion(if fell_back { "fallback" } else { "ok" });
    ctx.metrics()
        .port_promotion_wait
        .observe((waited + switch).as_secs_f64());
    tracing::info!(%pod, port = %r.host_ifname, datapath = %dp,
        waited_ms = waited.as_millis() as u64, switch_ms = switch.as_millis() as u64,
        "pod port moved to AF_XDP");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_wait_for_a_quiet_moment_but_not_forever() {
        let p = Promotions::default();
        let now = Instant::now();
        assert!(p.may_start(now), "no ADD ever: quiet");
        let g = p.add_started();
        assert!(!p.may_start(now), "an ADD in flight");
        let long_ago = now.checked_sub(MAX_DEFER).unwrap_or(now);
        assert!(
            p.may_start(long_ago) || long_ago == now,
            "the oldest waited MAX_DEFER"
        );
        drop(g);
        assert!(!p.may_start(Instant::now()), "an ADD just ended");
        p.queued("c/eth0");
        let first = p.queued_at("c/eth0");
        p.queued("c/eth0");
        assert_eq!(p.queued_at("c/eth0"), first, "queued once");
        p.set_queued_at("c/eth0", None);
        assert!(p.queued_at("c/eth0") >= first);
    }
}
