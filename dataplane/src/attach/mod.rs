//! Pod attachments: how a pod's interface is joined to br-int, and its whole life —
//! ADD, DEL, CHECK, GC, restore after an agent start, and the OVS reconcile — over a
//! [`NodeCtx`].
//!
//! Three kinds of ADD ([`add`] picks one): the primary interface ([`primary`]) as a veth
//! on a kernel or AF_XDP port ([`veth`]) or as a vhost-user socket ([`vhost`], KubeVirt
//! VMs and DPDK pods), or a Multus secondary network ([`secondary`], vhost-user bound to
//! the pod's LSP on that network); [`common`] holds what they share. Once added, each is an [`Attachment`]: a veth sandbox record or
//! a vhost-user record, and everything after the ADD goes through that one type, so the
//! rules live here once:
//! - every request and reconcile of a sandbox holds its lock ([`NodeCtx::sandbox_lock`]);
//! - the OVS reconcile re-adds a recorded attachment's missing port only when it gets
//!   the lock at once (`try_lock`: a request in flight finishes the job itself) and the
//!   record and the missing port are still so when re-read under it — so it never undoes
//!   a DEL in flight, which removes the port first and the record last;
//! - DEL, GC and restore keep going past a failure and report every error
//!   ([`errors::ErrorList`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use cni::error::code;
use cni::{CniError, CniResult, Request};

use crate::attach::node::NodeCtx;
use crate::attach::pod_iface::host_ifname_for;
use crate::attach::state::SandboxRecord;
use crate::attach::vhost_state::VhostRecord;
use crate::ovs::{IFNAME_KEY, SANDBOX_KEY};

pub mod afxdp_budget;
pub mod common;
pub mod errors;
pub mod node;
pub mod phases;
pub mod plumbing;
pub mod pod_iface;
pub mod primary;
pub mod promote;
pub mod promote_queue;
pub mod secondary;
pub mod state;
#[cfg(test)]
mod tests;
pub mod veth;
pub mod vhost;
pub mod vhost_state;

use errors::ErrorList;

/// One pod interface the agent set up and recorded.
// both variants are records a few hundred bytes large, read for one pass: no boxing
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attachment {
    /// A veth pair, its host end an OVS port (kernel or AF_XDP).
    Veth(SandboxRecord),
    /// A vhost-user socket and its `dpdkvhostuserclient` port (primary or secondary
    /// network).
    Vhost(VhostRecord),
}

impl Attachment {
    fn sandbox(&self) -> &SandboxRecord {
        match self {
            Attachment::Veth(r) => r,
            Attachment::Vhost(v) => &v.sandbox,
        }
    }

    /// `container_id/ifname`.
    pub fn key(&self) -> String {
        self.sandbox().key()
    }

    pub fn container_id(&self) -> &str {
        &self.sandbox().container_id
    }

    pub fn ifname(&self) -> &str {
        &self.sandbox().ifname
    }

    /// The OVS port's name.
    pub fn port(&self) -> &str {
        &self.sandbox().host_ifname
    }

    pub fn netns(&self) -> &Path {
        &self.sandbox().netns
    }

    /// Removes everything of it (see [`veth::remove`], [`vhost::remove_record`]).
    pub async fn remove(&self, ctx: &NodeCtx) -> Result<(), CniError> {
        match self {
            Attachment::Veth(r) => {
                veth::remove(ctx, &r.container_id, &r.ifname, &r.host_ifname).await
            }
            Attachment::Vhost(v) => vhost::remove_record(ctx, v, false).await,
        }
    }

    /// Re-applies it after an agent start.
    pub async fn restore(&self, ctx: &NodeCtx) -> Result<(), CniError> {
        match self {
            Attachment::Veth(r) => veth::restore(ctx, r).await,
            Attachment::Vhost(v) => vhost::restore(ctx, v).await,
        }
    }

    /// Adds its OVS port again.
    pub async fn readd_port(&self, ctx: &NodeCtx) -> Result<(), CniError> {
        match self {
            Attachment::Veth(r) => veth::readd_port(ctx, r).await,
            Attachment::Vhost(v) => vhost::readd_port(ctx, v).await,
        }
    }

    /// CNI CHECK.
    pub async fn check(&self, ctx: &NodeCtx, req: &Request) -> Result<(), CniError> {
        match self {
            Attachment::Veth(r) => veth::check(ctx, r, &req.netns).await,
            Attachment::Vhost(v) => vhost::check(ctx, v).await,
        }
    }
}

/// The recorded attachment of (`container_id`, `ifname`), read now.
pub fn lookup(ctx: &NodeCtx, container_id: &str, ifname: &str) -> Option<Attachment> {
    if let Some(v) = ctx.vhost().get(container_id, ifname) {
        return Some(Attachment::Vhost(v));
    }
    ctx.state().get(container_id, ifname).map(Attachment::Veth)
}

/// Every recorded attachment, vhost-user ones first.
pub fn recorded(ctx: &NodeCtx) -> Vec<Attachment> {
    let mut all: Vec<Attachment> = ctx
        .vhost()
        .all()
        .into_iter()
        .map(Attachment::Vhost)
        .collect();
    all.extend(ctx.state().all().into_iter().map(Attachment::Veth));
    all
}

/// The time an ADD may take: the request's timeout less a margin for the answer.
fn budget(req: &Request) -> Duration {
    let t = req.timeout();
    let margin = (t / 10).clamp(Duration::from_millis(500), Duration::from_secs(3));
    t.saturating_sub(margin).max(Duration::from_millis(500))
}

/// CNI ADD: under the sandbox lock, a secondary network the pod names, else the primary
/// interface (vhost-user when asked, else a veth).
pub async fn add(ctx: &NodeCtx, req: &Request) -> Result<CniResult, CniError> {
    let conf = req.net_conf()?;
    let start = Instant::now();
    let budget = budget(req);
    if req.netns.is_empty() {
        return Err(CniError::new(code::INVALID_ENV, "CNI_NETNS is empty"));
    }
    let (Some(ns), Some(name)) = (
        req.args.pod_namespace.clone().filter(|s| !s.is_empty()),
        req.args.pod_name.clone().filter(|s| !s.is_empty()),
    ) else {
        return Err(common::refused(
            "CNI_ARGS lacks K8S_POD_NAMESPACE and K8S_POD_NAME: the agent serves Kubernetes pods only",
        ));
    };
    // fast-start switches to AF_XDP wait while ADDs are in flight (see [`promote`])
    let _in_flight = ctx.promotions().add_started();
    let lock = ctx.sandbox_lock(&req.container_id);
    let _guard = lock.lock().await;
    let mut phases = phases::AddPhases::new(start);
    let result = match secondary::selection(ctx, req, &ns, &name).await? {
        Some(sel) => secondary::add(ctx, req, &conf, sel, budget, start, &mut phases).await,
        None => primary::add(ctx, req, &conf, &ns, &name, budget, &mut phases).await,
    };
    if result.is_ok() {
        phases.report(ctx, &format!("{ns}/{name}"), &req.container_id);
    }
    result
}

/// CNI DEL: removes the attachment of (`container_id`, `ifname`); without a record, the
/// veth and OVS ports a primary interface would have (a DEL after a lost record).
pub async fn del(ctx: &NodeCtx, container_id: &str, ifname: &str) -> Result<(), CniError> {
    let lock = ctx.sandbox_lock(container_id);
    let _guard = lock.lock().await;
    match lookup(ctx, container_id, ifname) {
        Some(a) => a.remove(ctx).await,
        // a secondary interface has no veth: the host veth named after the container
        // belongs to the primary interface, which stays
        None if secondary::is_secondary_ifname(ifname) => Ok(()),
        None => veth::remove(ctx, container_id, ifname, &host_ifname_for(container_id)).await,
    }
}

/// CNI CHECK of a recorded attachment.
pub async fn check(ctx: &NodeCtx, req: &Request) -> Result<(), CniError> {
    req.net_conf()?;
    let a = lookup(ctx, &req.container_id, &req.ifname).ok_or_else(|| {
        CniError::new(
            code::UNKNOWN_CONTAINER,
            format!(
                "container {} (ifname {}) is unknown to this agent",
                req.container_id, req.ifname
            ),
        )
    })?;
    a.check(ctx, req).await
}

/// CNI GC: removes every attachment and every port of ours whose (container id, ifname)
/// is not in `valid`, each under its sandbox lock and re-read under it (a DEL may have
/// removed it meanwhile). Keeps going past a failure; reports every error.
pub async fn gc(ctx: &NodeCtx, valid: &BTreeSet<(String, String)>) -> Result<(), CniError> {
    let mut errors = ErrorList::default();
    let is_valid = |cid: &str, ifname: &str| valid.contains(&(cid.to_string(), ifname.to_string()));
    for a in recorded(ctx) {
        if is_valid(a.container_id(), a.ifname()) {
            continue;
        }
        let lock = ctx.sandbox_lock(a.container_id());
        let _g = lock.lock().await;
        let Some(a) = lookup(ctx, a.container_id(), a.ifname()) else {
            continue;
        };
        tracing::info!(sandbox = %a.key(), "GC: removing stale attachment");
        errors.record(a.remove(ctx).await);
    }
    // ports of ours without a record (a record lost with a crash)
    let mut orphans: BTreeMap<(String, String), String> = BTreeMap::new();
    for p in ctx.ovs().owned_ports() {
        let Some(cid) = p.external_ids.get(SANDBOX_KEY) else {
            continue; // br-int, the management port
        };
        let ifname = p.external_ids.get(IFNAME_KEY).cloned().unwrap_or_default();
        if !is_valid(cid, &ifname) {
            orphans.insert((cid.clone(), ifname), p.name.clone());
        }
    }
    for ((cid, ifname), port) in orphans {
        let lock = ctx.sandbox_lock(&cid);
        let _g = lock.lock().await;
        tracing::info!(container = %cid, %ifname, %port, "GC: removing a port of ours without a record");
        errors.record(veth::remove(ctx, &cid, &ifname, &port).await);
    }
    errors.into_result()
}

/// After an agent start: re-applies every recorded attachment whose netns still exists
/// and removes the others. Idempotent; keeps going past a failure and reports every
/// error (the agent logs them and serves anyway).
pub async fn restore(ctx: &NodeCtx) -> Result<(), CniError> {
    let mut errors = ErrorList::default();
    for a in recorded(ctx) {
        let lock = ctx.sandbox_lock(a.container_id());
        let _g = lock.lock().await;
        let Some(a) = lookup(ctx, a.container_id(), a.ifname()) else {
            continue;
        };
        if !ctx.plumbing().netns_exists(a.netns()) {
            tracing::info!(sandbox = %a.key(), netns = %a.netns().display(), "netns gone: removing the attachment");
            errors.record(a.remove(ctx).await);
            continue;
        }
        match a.restore(ctx).await {
            Ok(()) => tracing::info!(sandbox = %a.key(), port = a.port(), "attachment restored"),
            Err(e) => errors.push(e),
        }
    }
    errors.into_result()
}

/// Re-adds the OVS port of every recorded attachment that lacks one (after an
/// ovsdb-server restart with a fresh database), never one a request in flight removed
/// (see the module doc). Returns how many it re-added; failures are logged.
pub async fn reconcile(ctx: &NodeCtx) -> usize {
    let present = |ctx: &NodeCtx| -> BTreeSet<String> {
        ctx.ovs()
            .owned_ports()
            .into_iter()
            .map(|p| p.name)
            .collect()
    };
    let before = present(ctx);
    let mut readded = 0;
    for a in recorded(ctx) {
        if before.contains(a.port()) {
            continue;
        }
        // a request in flight for this sandbox holds its lock and does the job itself: a
        // DEL has removed the port before it removes the record, and re-adding the port in
        // between would leave it behind for good
        let lock = ctx.sandbox_lock(a.container_id());
        let Ok(_g) = lock.try_lock() else {
            continue;
        };
        // re-read under the lock: a request that finished meanwhile removed the record or
        // added the port
        let Some(a) = lookup(ctx, a.container_id(), a.ifname()) else {
            continue;
        };
        if present(ctx).contains(a.port()) {
            continue;
        }
        tracing::warn!(sandbox = %a.key(), port = a.port(), "OVS port missing: re-adding");
        match a.readd_port(ctx).await {
            Ok(()) => readded += 1,
            Err(e) => {
                tracing::warn!(sandbox = %a.key(), error = %e.msg, "re-adding the OVS port failed")
            }
        }
    }
    readded
}
