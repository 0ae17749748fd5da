//! Reporting policy problems: each new one is logged and sent as a Warning event on
//! its NetworkPolicy, once (until it goes away and comes back).

use std::collections::BTreeSet;

use super::Problem;
use crate::source::Writer;

/// The reason of the events.
pub const EVENT_REASON: &str = api::keys::REASON_POLICY_PROBLEM;

/// Logs and reports the problems not reported yet; forgets those that are gone.
pub async fn problems<W: Writer>(writer: &W, reported: &mut BTreeSet<Problem>, now: Vec<Problem>) {
    let now: BTreeSet<Problem> = now.into_iter().collect();
    for p in now.difference(reported) {
        tracing::warn!(policy = %p.policy, problem = %p.message, "NetworkPolicy problem");
        let (ns, name) = p
            .policy
            .split_once('/')
            .unwrap_or(("default", p.policy.as_str()));
        if let Err(e) = writer.policy_event(ns, name, &p.message).await {
            tracing::warn!(policy = %p.policy, error = %e, "cannot record the policy event");
        }
    }
    *reported = now;
}
