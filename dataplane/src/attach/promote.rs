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
//! When: the switches wait until no ADD has been in flight for
//! [`crate::attach::promote_queue::QUIET`] (a burst's ADDs do not queue behind them in
//! ovs-vswitchd), but never longer than [`crate::attach::promote_queue::MAX_DEFER`] for the
//! oldest pending port (steady churn cannot starve them). One port per OVS
//! transaction, oldest first, each under its sandbox lock and re-read under it (a DEL in
//! flight wins). The pending state is in the sandbox record ([`SandboxRecord::promote_to`])
//! and on the port (`external_ids:zstack.io/datapath-pending`): an agent restart picks it
//! up. A port that does not open falls back to the kernel path as at ADD
//! ([`super::veth::confirm_port`]).
//!
//! Reported: a `pod port moved to AF_XDP` log line per port (how long it waited, how long
//! the switch took), `zstack_ovn_port_promotions_total{result}` and
//! `zstack_ovn_port_promotion_wait_seconds` (ADD answered → AF_XDP open).

use std::time::{Duration, Instant};

use super::common::pod_port_spec;
use crate::attach::node::NodeCtx;
use crate::attach::state::SandboxRecord;
use crate::datapath::Datapath;
use crate::datapath::report::AFXDP_OPEN_WAIT;

pub use crate::attach::promote_queue::Promotions;

/// How often the records are re-read without a wake-up (after a restart, a failure).
const RESCAN: Duration = Duration::from_secs(2);
/// A switch that failed is retried after this long.
const RETRY: Duration = Duration::from_secs(5);

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

/// A waiting port the budget has no room for (it was lowered): it stays on the kernel
/// path, and the pod is told why.
async fn stay_on_kernel(ctx: &NodeCtx, mut r: SandboxRecord, full: &super::afxdp_budget::Full) {
    let key = r.key();
    let detail = format!("{full}: the pod stays on its kernel port");
    tracing::info!(pod = %format!("{}/{}", r.pod_namespace, r.pod_name), %detail, "AF_XDP budget");
    r.promote_to = None;
    r.datapath_reason = Some(format!("budget: {full}"));
    if let Err(e) = ctx.ovs().ensure_port(&pod_port_spec(&r)).await {
        tracing::warn!(port = %r.host_ifname, error = %e, "clearing datapath-pending failed");
    }
    if let Err(e) = ctx.state().put_async(&r).await {
        tracing::warn!(sandbox = %key, error = %e, "persisting the port's kernel path failed");
    }
    ctx.promotions().set_queued_at(&key, None);
    ctx.metrics().port_promotion("budget");
    ctx.metrics().datapath_fallback("afxdp_budget");
    ctx.pod_event(
        &r.pod_namespace,
        &r.pod_name,
        crate::agent::report::EventType::Normal,
        "AfxdpBudgetReached",
        detail,
    )
    .await;
    super::veth::report_budget(ctx);
}

/// Moves one port (under its sandbox lock). A failed OVS write is retried after
/// [`RETRY`]; a port ovs-vswitchd cannot open falls back to the kernel path.
async fn promote_one(ctx: &NodeCtx, rec: SandboxRecord, queued: Instant) {
    let key = rec.key();
    let pod = format!("{}/{}", rec.pod_namespace, rec.pod_name);
    let start = Instant::now();
    let mut r = rec.clone();
    let budget = ctx.datapath().decision().and_then(|d| d.afxdp.budget);
    if r.promote_to == Some(Datapath::Afxdp)
        && let Some(full) = budget
            .as_ref()
            .and_then(|b| super::afxdp_budget::spent_before_move(b, &key, &ctx.state().all()))
    {
        stay_on_kernel(ctx, r, &full).await;
        return;
    }
    // the type changes now; `datapath-pending` stays on the port until ovs-vswitchd has
    // confirmed the switch (a reader of the port sees it done only when it is)
    r.datapath = r.promote_to;
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
    if r.promote_to.take().is_some()
        && let Err(e) = ctx.ovs().ensure_port(&pod_port_spec(&r)).await
    {
        // the port runs AF_XDP; only the marker stays until the next reconcile
        tracing::warn!(%pod, port = %r.host_ifname, error = %e, "clearing datapath-pending failed");
    }
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
