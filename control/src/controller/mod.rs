//! The controller: source events in, NB rows, pod/node annotations and Subnet status out.
//!
//! One level-triggered pass ([`Controller::sync`]) does, in order:
//! 0. create the cluster's default Subnet when it is configured and missing
//!    ([`default_subnet`]);
//! 1. validate every Subnet (oldest first) — a Subnet that turns invalid keeps serving its
//!    last valid spec, and its status says why it is Failed;
//! 2. bring IPAM's subnets in line (a deleted Subnet's addresses are released);
//! 3. on the first pass only, rebuild IPAM from our NB ports first (state only the
//!    controller writes), then from the annotations of scheduled pods that have none
//!    (a lost NB) when their Subnet serves their namespace ([`restore`]) — so no address
//!    is handed out twice, none leaks, and a tenant's forged annotation takes nothing;
//! 4. give addresses to pods and nodes that have none, release those of pods gone;
//! 5. translate and reconcile the NB (only rows we own, batched);
//! 6. write pod/node annotations (after the NB commit) and Subnet status, each only when
//!    it differs from what the object already carries;
//! 7. standalone mode: remove the SB chassis of deleted nodes ([`crate::chassis`]).
//!
//! Passes run after every batch of events, after every change of the NB replica (so rows
//! deleted or altered behind our back are repaired, and a reconnect resyncs), and on a
//! retry timer after an error.

mod bookkeeping;
pub mod context;
pub mod default_subnet;
mod platform_mgmt;
mod platform_sg;
mod restore;
mod secondary;
mod services;
mod settle;
pub mod state;
mod subnet_events;
mod writeback;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use ovsdb::nb::LogicalSwitchPort;
use ovsdb::typed::Table;
use tokio::sync::mpsc;

use crate::annotation::{self, NODE_MGMT_PORT};
use crate::crd::SubnetStatus;
use crate::desired::DesiredNb;
use crate::ipam::{Ipam, annotations::pod_request, vm_key};
use crate::model::{Mac, PodAddresses, PodInfo, PodIpRequest, Protocol, ValidSubnet};
use crate::names::{KIND, OWNER};
use crate::reconcile::{Outcome, ReconcileError, Reconciler};
use crate::source::{Event, Writer};
use crate::translate::{self, ClusterConfig, Input, pod::SUBNET};
use crate::validate::{self, SubnetProblem};
use bookkeeping::{Addressing, ChassisCleanup, Reported};
pub use settle::Settled;
use state::ClusterState;

/// The IPAM name of the join switch's address pool (node management ports). Not a valid
/// Kubernetes name, so it never clashes with a Subnet.
pub const JOIN_POOL: &str = "_join";
/// The IPAM pool of the join network's IPv6 part (its own leases: a node keeps its IPv4
/// address when the IPv6 part is added later).
pub const JOIN6_POOL: &str = "_join6";

/// Errors that end a pass (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
    #[error("the object source closed")]
    SourceClosed,
    #[error(
        "the controller did not settle in {0} passes (each wrote to the NB, a pod or a Subnet)"
    )]
    NotSettled(usize),
}

/// Why a pod gets no address; the text is written to the pod ([`IPAM_ERROR`]).
#[derive(Debug, thiserror::Error)]
enum NoPodAddress {
    #[error(transparent)]
    Request(#[from] crate::ipam::annotations::AnnotationError),
    #[error("no Subnet serves namespace {namespace} and no Subnet is the default")]
    NoSubnet { namespace: String },
    #[error(transparent)]
    Ipam(#[from] crate::ipam::IpamError),
}

/// What one pass did (for logs, tests and benchmarks).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// False when the pass waited for the initial lists.
    pub ran: bool,
    pub nb: Outcome,
    pub pods_assigned: usize,
    pub pods_released: usize,
    pub annotations_written: usize,
    pub statuses_written: usize,
    pub pod_errors: usize,
    /// SB Chassis rows of deleted nodes removed.
    pub chassis_deleted: i64,
}

/// Why a pod has no address (also written to the pod, see [`IPAM_ERROR`]).
pub const IPAM_ERROR: &str = api::keys::IPAM_ERROR;

/// The controller.
pub struct Controller<W: Writer> {
    cfg: ClusterConfig,
    rec: Reconciler,
    writer: W,
    state: ClusterState,
    /// Addresses: the allocator, the Subnets it serves, who holds what.
    addr: Addressing,
    /// Deleted nodes' chassis still to remove from the SB.
    chassis: ChassisCleanup,
    /// Warnings already given (each logged and evented once per change).
    reported: Reported,
    /// Secondary (Multus) networks served ([`secondary`]).
    secondary: secondary::Secondary,
    /// Pass latency, NB transactions, errors, Subnet usage ([`crate::metrics`]).
    metrics: Option<std::sync::Arc<crate::metrics::ControllerMetrics>>,
}

impl<W: Writer> Controller<W> {
    /// A controller writing the NB through `rec` and answers through `writer`.
    pub fn new(cfg: ClusterConfig, rec: Reconciler, writer: W) -> Self {
        let mut ipam = Ipam::new();
        let join = join_subnet(&cfg);
        if let Err(e) = ipam.add_subnet(&join) {
            tracing::error!(error = %e, "join CIDR unusable for node management ports");
        }
        if let Some(join6) = join6_subnet(&cfg)
            && let Err(e) = ipam.add_subnet(&join6)
        {
            tracing::error!(error = %e, "IPv6 join CIDR unusable for node management ports");
        }
        Controller {
            cfg,
            rec,
            writer,
            state: ClusterState::default(),
            addr: Addressing::new(ipam),
            chassis: ChassisCleanup::default(),
            reported: Reported::default(),
            secondary: secondary::Secondary::default(),
            metrics: None,
        }
    }

    /// Gives the controller a Southbound client: a deleted node's chassis is then removed
    /// (standalone mode only).
    pub fn with_southbound(mut self, sb: ovsdb::Client) -> Self {
        self.chassis.sb = Some(crate::chassis::Southbound::Shared(sb));
        self
    }

    /// The Southbound, reached as each deleted chassis in turn (OVN's SB RBAC).
    pub fn with_southbound_as_chassis(mut self, login: crate::chassis::ChassisLogin) -> Self {
        self.chassis.sb = Some(crate::chassis::Southbound::AsChassis(Box::new(login)));
        self
    }

    /// Records each pass of [`Controller::run`] in `metrics`.
    pub fn with_metrics(
        mut self,
        metrics: std::sync::Arc<crate::metrics::ControllerMetrics>,
    ) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Applies a source event (without running a pass).
    pub fn apply(&mut self, ev: Event) {
        self.state.apply(self.police(ev));
    }

    /// A Service loses the externalIPs the administrator's allowlist does not cover (each
    /// becomes one of its problems, reported on it).
    fn police(&self, ev: Event) -> Event {
        match ev {
            Event::Service(mut s) => {
                self.cfg.external_ips.apply(&mut s);
                Event::Service(s)
            }
            ev => ev,
        }
    }

    /// The addresses a pod holds.
    pub fn pod_addresses(&self, key: &str) -> Option<PodAddresses> {
        self.addr.ipam.addresses(key)
    }

    /// Runs until the event stream ends: a pass after each batch of events, after NB
    /// changes, and on retry after errors.
    pub async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Event>,
    ) -> Result<(), ControllerError> {
        let mut nb_changes = self.rec.replica().subscribe();
        let mut backoff = Duration::from_millis(200);
        let mut retry_at: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) => self.apply(ev),
                    None => return Ok(()),
                },
                changed = nb_changes.changed() => {
                    if changed.is_err() {
                        return Err(ControllerError::Reconcile(ReconcileError::Ovsdb(ovsdb::Error::Closed)));
                    }
                }
                _ = sleep_until(retry_at), if retry_at.is_some() => {}
            }
            // Batch whatever else has arrived.
            while let Ok(ev) = rx.try_recv() {
                self.state.apply(ev);
            }
            let started = std::time::Instant::now();
            let result = self.sync().await;
            if let Some(m) = &self.metrics {
                match &result {
                    Ok(r) if r.ran => {
                        m.pass_ok(started.elapsed(), r.nb.transactions);
                        m.set_usage(&self.addr.ipam);
                    }
                    Ok(_) => {}
                    Err(e) => m.pass_failed(
                        started.elapsed(),
                        matches!(e, ControllerError::Reconcile(_)),
                    ),
                }
            }
            match result {
                Ok(report) => {
                    retry_at = None;
                    backoff = Duration::from_millis(200);
                    if report.ran && report_is_interesting(&report) {
                        tracing::info!(?report, "sync");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "sync failed; retrying");
                    retry_at = Some(tokio::time::Instant::now() + backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
            // Our own writes come back through the replica; only later changes should wake us.
            nb_changes.borrow_and_update();
        }
    }

    /// One level-triggered pass (see the module docs).
    pub async fn sync(&mut self) -> Result<SyncReport, ControllerError> {
        let mut report = SyncReport::default();
        if !self.state.is_synced() {
            return Ok(report);
        }
        report.ran = true;
        self.keep_default_subnet().await;
        self.track_chassis();
        self.validate_subnets();
        self.release_unserved_secondary();
        report.pods_released += self.sync_ipam_subnets();
        if !self.addr.restored {
            self.restore();
            self.addr.restored = true;
        }
        report.pods_released += self.release_gone();
        // before the pods: a node's first pod on a platform switch needs the port too
        self.assign_platform_mgmt();
        report.pods_assigned = self.assign_pods();
        report.pods_assigned += self.sync_secondary();
        self.assign_nodes();
        report.pod_errors = self.addr.pod_errors.len();
        let (desired, problems, gateways) = self.desired_with_problems();
        report.nb = self.rec.reconcile(&desired).await?;
        crate::netpol::report::problems(&self.writer, &mut self.reported.policy_problems, problems)
            .await;
        self.report_gateway_problems(gateways).await;
        self.report_service_problems().await;
        self.report_subnet_problems().await;
        for c in &report.nb.conflicts {
            tracing::warn!(conflict = %c, "NB row left untouched");
        }
        let (annotations, statuses) = self.write_back().await;
        report.annotations_written = annotations;
        report.statuses_written = statuses;
        report.chassis_deleted = self.clean_chassis().await;
        Ok(report)
    }

    /// Remembers each node's chassis name; queues the chassis of deleted nodes.
    fn track_chassis(&mut self) {
        for (name, node) in &self.state.nodes {
            let id = node
                .annotations
                .get(crate::chassis::CHASSIS_ID)
                .filter(|v| !v.is_empty())
                .cloned()
                .unwrap_or_else(|| name.clone());
            self.chassis.chassis_of.insert(name.clone(), id);
        }
        let gone: Vec<(String, String)> = self
            .chassis
            .chassis_of
            .iter()
            .filter(|(n, _)| !self.state.nodes.contains_key(*n))
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect();
        for (node, chassis) in gone {
            self.chassis.chassis_of.remove(&node);
            self.chassis.cleanup.insert((node, chassis));
        }
    }

    /// Deletes the chassis of deleted nodes (standalone mode with a Southbound client).
    async fn clean_chassis(&mut self) -> i64 {
        if self.cfg.mode != crate::translate::Mode::Standalone {
            self.chassis.cleanup.clear();
            return 0;
        }
        let Some(sb) = &self.chassis.sb else {
            self.chassis.cleanup.clear();
            return 0;
        };
        let mut deleted = 0;
        for (node, chassis) in std::mem::take(&mut self.chassis.cleanup) {
            match sb.delete_node_chassis(&node, &chassis).await {
                Ok(n) => {
                    if n > 0 {
                        tracing::info!(%node, %chassis, "deleted node's chassis from the SB");
                    }
                    deleted += n;
                }
                Err(e) => {
                    tracing::warn!(%node, error = %e, "SB chassis cleanup failed; will retry");
                    self.chassis.cleanup.insert((node, chassis));
                }
            }
        }
        deleted
    }

    fn validate_subnets(&mut self) {
        let external = self
            .rec
            .replica()
            .read(|v| context::external_context(&self.cfg, v));
        let mut names: Vec<(&String, _)> = self
            .state
            .subnets
            .iter()
            .map(|(n, s)| (n, s.metadata.creation_timestamp.clone()))
            .collect();
        names.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(b.0)));
        let names: Vec<String> = names.into_iter().map(|(n, _)| n.clone()).collect();
        self.addr.problems.clear();
        for name in names {
            let Some(spec) = default_subnet::effective_spec(&self.state, &name) else {
                continue;
            };
            let ctx = context::validation_context(&self.cfg, &self.state, &name, external.as_ref());
            match validate::validate(&name, &spec, &ctx) {
                Ok(valid) => {
                    self.addr.served.insert(name, valid);
                }
                Err(problems) => {
                    let mut reason = joined(&problems);
                    if self.addr.served.contains_key(&name) {
                        reason.push_str(" (still serving the last valid spec)");
                    }
                    self.addr.problems.insert(name, reason);
                }
            }
        }
        let present: BTreeSet<&String> = self.state.subnets.keys().collect();
        self.addr.served.retain(|n, _| present.contains(n));
    }

    /// Adds/updates IPAM subnets; releases and removes deleted ones. Returns pods released.
    fn sync_ipam_subnets(&mut self) -> usize {
        for (name, v) in &self.addr.served {
            if let Err(e) = self.addr.ipam.apply_subnet(v) {
                tracing::warn!(subnet = %name, error = %e, "IPAM refused the Subnet change");
                self.addr
                    .problems
                    .insert(name.clone(), format!("IPAM refused the change: {e}"));
            }
        }
        let gone: Vec<String> = self
            .addr
            .ipam
            .subnet_names()
            .filter(|n| *n != JOIN_POOL && *n != JOIN6_POOL && !self.addr.served.contains_key(*n))
            .map(str::to_string)
            .collect();
        let mut released = 0;
        for name in gone {
            let holders: Vec<String> = self
                .addr
                .assigned
                .iter()
                .filter(|k| {
                    self.addr
                        .ipam
                        .addresses(k)
                        .is_some_and(|a| a.subnet == name)
                })
                .cloned()
                .collect();
            for key in holders {
                self.release_pod(&key);
                released += 1;
            }
            self.release_platform_mgmt_of(&name);
            if let Err(e) = self.addr.ipam.remove_subnet(&name) {
                tracing::warn!(subnet = %name, error = %e, "cannot remove IPAM subnet yet");
            }
        }
        released
    }

    fn release_pod(&mut self, key: &str) {
        self.addr.ipam.release(key);
        self.addr.assigned.remove(key);
    }

    /// Releases pods that are gone or finished. Returns how many.
    fn release_gone(&mut self) -> usize {
        let gone: Vec<String> = self
            .addr
            .assigned
            .iter()
            .filter(|k| {
                self.state
                    .pods
                    .get(*k)
                    .is_none_or(|p| p.completed || p.host_network)
            })
            .cloned()
            .collect();
        for k in &gone {
            self.release_pod(k);
        }
        self.release_gone_vms();
        self.addr
            .pod_errors
            .retain(|k, _| self.state.pods.contains_key(k));
        let nodes_gone: Vec<String> = self
            .addr
            .nodes_assigned
            .iter()
            .filter(|n| !self.state.nodes.contains_key(*n))
            .cloned()
            .collect();
        for n in nodes_gone {
            self.addr.ipam.release(&node_key(&n));
            self.addr.ipam.release(&node6_key(&n));
            self.addr.nodes_assigned.remove(&n);
        }
        gone.len()
    }

    /// A KubeVirt VM's addresses outlive its pods (restart, live migration) while its
    /// VirtualMachine exists; once no pod of it remains and the VirtualMachine is gone (or
    /// never existed: a bare VMI does not come back), they are released.
    fn release_gone_vms(&mut self) {
        let in_use: BTreeSet<String> = self
            .state
            .pods
            .values()
            .filter(|p| !p.completed)
            .filter_map(|p| {
                let vmi = pod_request(p).ok()?.vm?;
                Some(format!("{}/{vmi}", p.namespace))
            })
            .collect();
        for key in self.addr.ipam.vm_leases() {
            let Some(vm) = key.strip_prefix("vm:") else {
                continue;
            };
            // a VM's secondary network lease (`vm:<ns>/<vmi>@<nad>`) goes with the VM
            let base = crate::multus::base_key(vm);
            if in_use.contains(base) || self.state.vms.contains(base) {
                continue;
            }
            if let Some((ns, name)) = vm.split_once('/') {
                tracing::info!(vm = %vm, "VirtualMachine gone: releasing its addresses");
                self.addr.ipam.release_vm(ns, name);
            }
        }
    }

    /// The Subnet a pod draws from: one naming its namespace, else the default Subnet (a
    /// user's before the managed one, which may still serve a last valid `default: true`).
    fn subnet_for(&self, pod: &PodInfo) -> Option<&ValidSubnet> {
        let managed = |s: &ValidSubnet| {
            self.state
                .subnets
                .get(&s.name)
                .is_some_and(default_subnet::is_managed)
        };
        self.addr
            .served
            .values()
            .find(|s| s.namespaces.iter().any(|n| n == &pod.namespace))
            .or_else(|| self.addr.served.values().find(|s| s.default && !managed(s)))
            .or_else(|| self.addr.served.values().find(|s| s.default))
    }

    /// Gives addresses to pods that need them. Returns how many were assigned.
    fn assign_pods(&mut self) -> usize {
        let mut assigned = 0;
        let pods: Vec<PodInfo> = self
            .state
            .pods
            .values()
            .filter(|p| !p.host_network && !p.completed && p.node.is_some())
            .filter(|p| !self.addr.assigned.contains(&p.key()))
            .cloned()
            .collect();
        for pod in pods {
            let key = pod.key();
            let result = self.assign_pod(&pod);
            match result {
                Ok(()) => {
                    self.addr.assigned.insert(key.clone());
                    self.addr.pod_errors.remove(&key);
                    assigned += 1;
                }
                Err(e) => {
                    let msg = e.to_string();
                    if self.addr.pod_errors.get(&key) != Some(&msg) {
                        tracing::warn!(pod = %key, error = %msg, "pod gets no address");
                    }
                    self.addr.pod_errors.insert(key, msg);
                }
            }
        }
        assigned
    }

    fn assign_pod(&mut self, pod: &PodInfo) -> Result<(), NoPodAddress> {
        let req: PodIpRequest = pod_request(pod)?;
        let subnet = self
            .subnet_for(pod)
            .map(|s| s.name.clone())
            .ok_or_else(|| NoPodAddress::NoSubnet {
                namespace: pod.namespace.clone(),
            })?;
        self.addr.ipam.assign(&pod.key(), &subnet, &req)?;
        Ok(())
    }

    fn assign_nodes(&mut self) {
        let names: Vec<String> = self
            .state
            .nodes
            .keys()
            .filter(|n| !self.addr.nodes_assigned.contains(*n))
            .cloned()
            .collect();
        for name in names {
            match self
                .addr
                .ipam
                .assign(&node_key(&name), JOIN_POOL, &PodIpRequest::default())
            {
                Ok(_) => {
                    self.addr.nodes_assigned.insert(name);
                }
                Err(e) => tracing::warn!(node = %name, error = %e, "no join address for node"),
            }
        }
        // then the IPv6 part (the IPv4 lease holds the port's MAC), also for nodes that
        // have their IPv4 address from before it existed
        if self.cfg.join_v6.is_some() {
            let names: Vec<String> = self.state.nodes.keys().cloned().collect();
            for name in names {
                if self.addr.ipam.lease(&node6_key(&name)).is_none()
                    && let Err(e) = self.addr.ipam.assign(
                        &node6_key(&name),
                        JOIN6_POOL,
                        &PodIpRequest::default(),
                    )
                {
                    tracing::warn!(node = %name, error = %e, "no IPv6 join address for node");
                }
            }
        }
    }

    /// A node's join addresses: its IPv4 lease (MAC included) plus its IPv6 one, if any.
    fn node_addresses(&self, node: &str) -> Option<PodAddresses> {
        let mut addrs = self.addr.ipam.addresses(&node_key(node))?;
        if let Some(v6) = self.addr.ipam.addresses(&node6_key(node)) {
            addrs.ips.extend(v6.ips);
        }
        Some(addrs)
    }

    /// The desired NB rows for the current model.
    pub fn desired(&self) -> DesiredNb {
        self.desired_with_problems().0
    }

    /// Reports (Warning event on the Node, log) each node newly without a gateway router
    /// in `shared` mode, and logs those that got one back. A node whose agent has not
    /// reported yet is logged only: every node passes through that.
    async fn report_gateway_problems(&mut self, now: translate::egress::GatewayProblems) {
        for (node, why) in &now {
            if self.reported.gateway_problems.get(node) == Some(why) {
                continue;
            }
            if *why == translate::egress::NoGatewayRouter::NotReported {
                tracing::info!(node = %node, reason = %why, "no gateway router yet: the node's pods leave through its management port");
                continue;
            }
            tracing::warn!(node = %node, reason = %why, "no gateway router: the node's pods leave through its management port");
            let msg = format!(
                "{why}: no gateway router; this node's pods leave through its management port"
            );
            if let Err(e) = self
                .writer
                .node_event(node, api::keys::REASON_GATEWAY_ROUTER_MISSING, &msg)
                .await
            {
                tracing::warn!(node = %node, error = %e, "cannot record the node event");
            }
        }
        for node in self.reported.gateway_problems.keys() {
            if !now.contains_key(node) && self.state.nodes.contains_key(node) {
                tracing::info!(node = %node, "gateway router built: the node's pods leave through it");
            }
        }
        self.reported.gateway_problems = now;
    }

    /// The desired NB rows, with the problems of NetworkPolicies (reported by the pass).
    pub fn desired_and_problems(&self) -> (DesiredNb, Vec<crate::netpol::Problem>) {
        let (nb, problems, _) = self.desired_with_problems();
        (nb, problems)
    }

    /// [`Self::desired_and_problems`], and the nodes left without a gateway router.
    fn desired_with_problems(
        &self,
    ) -> (
        DesiredNb,
        Vec<crate::netpol::Problem>,
        translate::egress::GatewayProblems,
    ) {
        let pods: Vec<(&PodInfo, PodAddresses)> = self
            .addr
            .assigned
            .iter()
            .filter_map(|k| Some((self.state.pods.get(k)?, self.addr.ipam.addresses(k)?)))
            .collect();
        let nodes: Vec<(&crate::model::NodeInfo, PodAddresses)> = self
            .addr
            .nodes_assigned
            .iter()
            .filter_map(|n| Some((self.state.nodes.get(n)?, self.node_addresses(n)?)))
            .collect();
        let input = Input {
            subnets: self.addr.served.values().collect(),
            pods: pods.iter().map(|(p, a)| (*p, a)).collect(),
            nodes: nodes.iter().map(|(n, a)| (*n, a)).collect(),
        };
        let mut nb = translate::translate(&self.cfg, &input);
        self.add_secondary_ports(&mut nb);
        self.add_platform_mgmt_ports(&mut nb);
        if self.cfg.mode == translate::Mode::External {
            // feature off: nothing desired, so ports of ours an earlier run put in a
            // platform group are taken out
            let groups = nb.platform_groups.get_or_insert_with(BTreeMap::new);
            for (pod, addrs) in input
                .pods
                .iter()
                .filter(|_| self.cfg.platform_security_groups)
            {
                let Some(s) = self.addr.served.get(&addrs.subnet) else {
                    continue;
                };
                for g in &s.security_groups {
                    groups.entry(g.clone()).or_default().insert(pod.lsp_name());
                }
            }
        }
        let nodes: Vec<&crate::model::NodeInfo> = self.state.nodes.values().collect();
        translate::service::add(
            &self.cfg,
            self.state.services.values(),
            self.state.endpoint_slices.values(),
            &nodes,
            &mut nb,
        );
        let policies = crate::netpol::translate(&crate::netpol::PolicyInput {
            cluster_id: &self.cfg.cluster_id,
            policies: self.state.policies.values().collect(),
            namespaces: &self.state.namespaces,
            pods: input.pods.clone(),
            // the hosts' management ports: on the join network, and (external mode) on
            // the platform switches, where kubelet's probes come from
            node_cidrs: std::iter::once(self.cfg.join_cidr)
                .chain(self.cfg.join_v6.map(|v| v.cidr))
                .chain(self.platform_mgmt_hosts())
                .collect(),
            platform_groups: match &nb.platform_groups {
                Some(m) => self
                    .rec
                    .replica()
                    .read(|v| platform_sg::platform_groups(v, m)),
                None => Vec::new(),
            },
        });
        nb.netpol = policies.nb;
        let egress = translate::egress::add(&self.cfg, &input, &mut nb);
        let mut slices: BTreeMap<String, Vec<&crate::services::EndpointSliceInfo>> =
            BTreeMap::new();
        for s in self.state.endpoint_slices.values() {
            slices
                .entry(format!("{}/{}", s.namespace, s.service))
                .or_default()
                .push(s);
        }
        translate::gateway_return::add(
            &self.cfg,
            self.state.services.values(),
            &slices,
            &egress.through_router,
            &mut nb,
        );
        (nb, policies.problems, egress.problems)
    }

    /// The status a Subnet should carry now.
    fn subnet_status(&self, name: &str) -> SubnetStatus {
        let mut st = self.validity_status(name);
        if let Some(subnet) = self.state.subnets.get(name)
            && default_subnet::is_managed(subnet)
        {
            st.conditions.extend(default_subnet::conditions(
                &self.state,
                self.cfg.default_subnet.as_ref(),
                subnet,
            ));
        }
        st
    }

    /// The status from validation and IPAM alone.
    fn validity_status(&self, name: &str) -> SubnetStatus {
        if let Some(reason) = self.addr.problems.get(name) {
            let mut st = validate::failed_status(&[]);
            st.reason = reason.clone();
            for c in &mut st.conditions {
                c.message = reason.clone();
            }
            return st;
        }
        match self.addr.served.get(name) {
            Some(v) => {
                let usage = self.addr.ipam.usage(name).ok();
                validate::active_status(v, &translate::switch_of(v), usage)
            }
            None => SubnetStatus::default(),
        }
    }
}

fn report_is_interesting(r: &SyncReport) -> bool {
    r.nb.transactions > 0
        || r.pods_assigned > 0
        || r.pods_released > 0
        || r.statuses_written > 0
        || !r.nb.conflicts.is_empty()
        || r.chassis_deleted > 0
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn joined(problems: &[SubnetProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// IPAM owner key of a node's join address.
pub fn node_key(node: &str) -> String {
    format!("node:{node}")
}

/// IPAM owner key of a node's IPv6 join address.
pub fn node6_key(node: &str) -> String {
    format!("node6:{node}")
}

/// The join network's IPv6 part as a pool, when configured.
pub fn join6_subnet(cfg: &ClusterConfig) -> Option<ValidSubnet> {
    let v6 = cfg.join_v6?;
    Some(ValidSubnet {
        name: JOIN6_POOL.into(),
        protocol: Protocol::IPv6,
        cidrs: vec![v6.cidr],
        gateways: vec![v6.gateway],
        excludes: upper_half_range(v6.cidr),
        ..join_subnet(cfg)
    })
}

/// The upper half of a join network, kept from its pool: the gateway routers' (their
/// addresses are derived, not allocated).
fn upper_half_range(join: ipnet::IpNet) -> Vec<crate::model::IpRange> {
    translate::gateway_router::join_upper_half(join)
        .map(|(start, end)| crate::model::IpRange { start, end })
        .into_iter()
        .collect()
}

/// The join switch's pool as a Subnet.
pub fn join_subnet(cfg: &ClusterConfig) -> ValidSubnet {
    ValidSubnet {
        name: JOIN_POOL.into(),
        protocol: Protocol::IPv4,
        cidrs: vec![cfg.join_cidr],
        gateways: vec![cfg.join_gateway],
        excludes: upper_half_range(cfg.join_cidr),
        vlan_id: None,
        provider: None,
        external_logical_switch: None,
        security_groups: vec![],
        namespaces: vec![],
        default: false,
        nat_outgoing: false,
    }
}

/// An LSP `addresses` entry ("MAC IP [IP]") back to addresses, with the Subnet's prefixes.
fn parse_lsp_addresses(
    entry: &str,
    subnet: &str,
    served: &BTreeMap<String, ValidSubnet>,
) -> Option<PodAddresses> {
    let s = served.get(subnet)?;
    let mut words = entry.split_whitespace();
    let mac: Mac = words.next()?.parse().ok()?;
    let mut ips = Vec::new();
    for w in words {
        let ip: IpAddr = w.parse().ok()?;
        let cidr = s.cidrs.iter().find(|c| c.contains(&ip))?;
        ips.push(ipnet::IpNet::new(ip, cidr.prefix_len()).ok()?);
    }
    Some(PodAddresses {
        subnet: subnet.to_string(),
        ips,
        mac,
        gateways: s.gateways.clone(),
    })
}
