//! The agent's side of the datapath: running a [`crate::datapath`] pass and reporting it
//! (Node annotation, events, metrics). Each veth pod's port type and the per-port
//! AF_XDP → kernel fallback at attach are [`crate::attach::veth`]'s.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::agent::report::EventType;
use crate::attach::node::NodeCtx;
use crate::datapath::STATUS_ANNOTATION;
use crate::datapath::manager::PassOutcome;
use crate::ovs::Ovs;

/// How long an AF_XDP port may take to open (ofport assigned, or an error) before the
/// agent gives up on it and uses the kernel path.
pub const AFXDP_OPEN_WAIT: Duration = Duration::from_secs(5);

/// `external_ids` keys on a pod's OVS Interface ([`api::external_ids`]): the datapath its
/// port runs; why (the pod's request, the node's default, or a fallback); the datapath a
/// fast-start port moves to next (see [`crate::attach::promote`]), absent once it is there.
pub use api::external_ids::ovs::{
    DATAPATH as PORT_DATAPATH_KEY, DATAPATH_PENDING as PORT_PENDING_KEY,
    DATAPATH_REASON as PORT_REASON_KEY,
};

/// One datapath pass (see [`crate::datapath::manager`]), the uplink's (see
/// [`crate::host::uplink`]) and their report; `vswitchd_ctl`: ovs-vswitchd's unixctl socket
/// (its version and PMD threads).
pub async fn pass(
    ctx: &NodeCtx,
    ovs: &Ovs,
    vswitchd_ctl: Option<&Path>,
    uplink: &crate::host::uplink::Uplink,
) -> PassOutcome {
    let ann = match ctx.pods().node_annotations(ctx.node_name()).await {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(error = %e, "datapath: node annotations unavailable; using the agent's config only");
            None
        }
    };
    let mut out = ctx.datapath().pass(ovs, ann.as_ref()).await;
    add_vswitchd_facts(vswitchd_ctl, &mut out.status).await;
    if let Some(d) = ctx.datapath().decision() {
        let (status, events) = uplink.pass(ovs, &d.uplink, d.datapath).await;
        out.status.uplink = status;
        for e in events {
            ctx.node_event(e.kind, e.reason, e.message).await;
        }
    }
    report_datapath(ctx, &out, ann.as_ref()).await;
    out
}

/// What only ovs-vswitchd itself can say (over its unixctl socket): its version when
/// the database does not carry it, and the PMD threads it runs.
async fn add_vswitchd_facts(ctl: Option<&Path>, s: &mut crate::datapath::DatapathStatus) {
    let Some(ctl) = ctl else {
        return;
    };
    let c = crate::ovs::unixctl::Unixctl::new(ctl).with_timeout(Duration::from_secs(2));
    if s.ovs_version.is_none()
        && let Ok(v) = c.call("version", &[]).await
    {
        s.ovs_version = v.lines().next().map(|l| l.trim().to_string());
    }
    match c.call("dpif-netdev/pmd-rxq-show", &[]).await {
        Ok(text) => match ovsdb::pmd_stats::parse_pmd_rxq(&text) {
            Ok(show) => {
                s.pmd_threads = show
                    .pmds
                    .iter()
                    .map(|p| crate::datapath::status::PmdCpu {
                        cpu: p.core,
                        numa: p.numa,
                    })
                    .collect();
            }
            Err(e) => tracing::debug!(error = %e, "pmd-rxq-show unreadable"),
        },
        Err(e) => tracing::debug!(error = %e, "ovs-vswitchd unixctl unavailable"),
    }
}

async fn report_datapath(ctx: &NodeCtx, out: &PassOutcome, ann: Option<&BTreeMap<String, String>>) {
    let s = &out.status;
    ctx.metrics().set_datapath(s.datapath.as_str());
    for f in &out.new_fallbacks {
        if f.designed {
            // what `auto` is for on a node without DPDK: no alarm
            tracing::info!(from = %f.from, to = %f.to, reason = %f.reason, detail = %f.detail, "auto: no DPDK here by design");
            ctx.node_event(
                EventType::Normal,
                "DatapathAuto",
                format!("auto: {} ({})", f.to, f.detail),
            )
            .await;
            continue;
        }
        ctx.metrics().datapath_fallback(&f.reason);
        tracing::warn!(from = %f.from, to = %f.to, reason = %f.reason, detail = %f.detail, "datapath fallback");
        ctx.node_event(
            EventType::Warning,
            "DatapathFallback",
            format!("{} → {}: {}", f.from, f.to, f.detail),
        )
        .await;
    }
    for e in &out.new_errors {
        tracing::warn!(error = %e, "datapath configuration error");
        ctx.node_event(EventType::Warning, "DatapathConfigError", e.clone())
            .await;
    }
    if out.changed {
        tracing::info!(datapath = %s.datapath, reason = %s.reason, pmd_cpus = %s.pmd_cpus,
                dpdk_initialized = s.dpdk_initialized, tso = s.userspace_tso, "datapath decided");
        ctx.node_event(
            EventType::Normal,
            "DatapathSelected",
            format!("{}: {}", s.datapath, s.reason),
        )
        .await;
    }
    if !s.restart_required.is_empty() && out.changed {
        ctx.node_event(
            EventType::Warning,
            "VswitchdRestartRequired",
            format!(
                "ovs-vswitchd must be restarted to apply {}",
                s.restart_required.join(", ")
            ),
        )
        .await;
    }
    let json = s.to_json();
    let current = ann.and_then(|a| a.get(STATUS_ANNOTATION));
    let same = current
        .and_then(|c| serde_json::from_str::<crate::datapath::DatapathStatus>(c).ok())
        .is_some_and(|c| c.same_decision(s));
    if !same || out.changed {
        let a = BTreeMap::from([(STATUS_ANNOTATION.to_string(), json)]);
        if let Err(e) = ctx.pods().annotate_node(ctx.node_name(), &a).await {
            tracing::warn!(error = %e, "could not write the datapath status annotation");
        }
    }
}
