//! CNI ADD of a pod's primary interface: waits for the controller's addresses (or its
//! IPAM error), then makes a vhost-user interface ([`super::vhost`]) when the pod or its
//! network config asks for one, a veth ([`super::veth`]) otherwise.

use std::time::Duration;

use api::keys::IPAM_ERROR;
use api::pod_networks::POD_NETWORKS;
use cni::{CniError, CniResult, NetConf, Request};

use super::common::{pod_addrs, refused};
use crate::attach::node::NodeCtx;
use crate::source::PodInfo;

/// How long an ADD keeps waiting when the pod carries an IPAM error, in case the error
/// was transient (the controller saw the pod before its Subnet) and addresses follow.
const IPAM_ERROR_GRACE: Duration = Duration::from_secs(2);

/// CNI ADD of the primary interface (under the sandbox lock).
pub async fn add(
    ctx: &NodeCtx,
    req: &Request,
    conf: &NetConf,
    ns: &str,
    name: &str,
    budget: Duration,
    phases: &mut super::phases::AddPhases,
) -> Result<CniResult, CniError> {
    let start = phases.started();
    let key = format!("{ns}/{name}");
    // 1. the controller's annotation (or its IPAM error)
    let ready =
        |p: &PodInfo| p.annotation(POD_NETWORKS).is_some() || p.annotation(IPAM_ERROR).is_some();
    let what = format!("write {POD_NETWORKS} on pod {key}");
    let mut pod = ctx.wait_for_pod(ns, name, budget, &ready, &what).await?;
    if pod.annotation(POD_NETWORKS).is_none() && pod.annotation(IPAM_ERROR).is_some() {
        // An IPAM error can be transient (the controller saw the pod before its Subnet):
        // give it a short grace to be replaced by addresses before refusing.
        let grace = IPAM_ERROR_GRACE.min(budget.saturating_sub(start.elapsed()));
        tracing::info!(pod = %key, error = pod.annotation(IPAM_ERROR).unwrap_or(""), ?grace,
            "the pod has an IPAM error; waiting briefly for addresses");
        let addressed = |p: &PodInfo| p.annotation(POD_NETWORKS).is_some();
        if let Ok((Some(p), _)) = ctx.pods().wait_pod(ns, name, grace, &addressed).await {
            pod = p;
        }
    }
    if pod.annotation(POD_NETWORKS).is_none()
        && let Some(msg) = pod.annotation(IPAM_ERROR)
    {
        return Err(refused(format!("pod {key}: IPAM error: {msg}")));
    }
    let addrs = pod_addrs(&pod)?;
    phases.lap("annotation");
    if let Some(v) = super::vhost::requested(conf, &pod)? {
        let left = budget
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(200));
        return super::vhost::add(ctx, req, conf, &pod, addrs, v, None, left, phases).await;
    }

    let left = budget.saturating_sub(start.elapsed());
    super::veth::add(ctx, req, conf, &pod, addrs, left, phases).await
}
