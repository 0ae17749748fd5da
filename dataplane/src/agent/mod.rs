//! The node agent: the node-level work around the pod attachments — node setup (br-int,
//! ovn-controller settings), the management port, the host's Service NAT, the datapath
//! pass — and the CNI entry point that hands each request to [`crate::attach`] over the
//! agent's [`NodeCtx`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cni::error::code;
use cni::{CniError, Command, Request, Response};
use ipnet::IpNet;

use crate::agent::metrics::Metrics;
use crate::agent::report::EventType;
use crate::attach::node::{NodeCtx, NodeParts};
use crate::attach::plumbing::KernelPlumbing;
use crate::attach::state::StateStore;
use crate::attach::vhost_state::VhostPorts;
use crate::host::mgmt::{self, MGMT_PORT, MgmtConfig};
use crate::ovs::{OvnConfig, Ovs, capture_mirror};
use crate::source::PodSource;

pub mod chassis_cert;
mod gateway;
pub mod metrics;
pub mod report;
pub mod server;

pub use crate::attach::common::{PodAddrs, cni_result, network_addrs, pod_addrs, pod_port_spec};

/// Settings of the agent.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node_name: String,
    /// Default pod MTU (a config's `mtu` wins).
    pub mtu: u32,
    /// ovn-controller settings to write (`--sb`); `None` leaves OVS as it is.
    pub ovn: Option<OvnConfig>,
    /// How often the management port routes are refreshed from the Subnets, the datapath
    /// decision re-checked, and the Services re-read for the host NAT when the source
    /// cannot watch them.
    pub refresh: Duration,
    /// Datapath configuration and how to restart ovs-vswitchd (see [`crate::datapath`]).
    pub datapath: crate::datapath::manager::ManagerConfig,
    /// The ovs-vswitchd unixctl socket (PMD statistics; its directory holds the bridges'
    /// OpenFlow sockets).
    pub vswitchd_ctl: Option<PathBuf>,
    /// `shared` gateway mode: the gateway bridge ([`crate::host::gateway`]); `None`: not shared.
    pub gateway: Option<crate::host::gateway::GatewayConfig>,
    /// The bridge holding the node's address and uplink (`--gateway-interface`, br-phy),
    /// whose uplink port [`crate::host::uplink`] manages.
    pub uplink_bridge: String,
    /// The `spec.externalIPs` an administrator allows (`--service-external-ip-cidrs`);
    /// the others get no host route and no NAT rule here.
    pub external_ips: api::services::ExternalIpPolicy,
}

/// The agent (see the module doc).
pub struct Agent {
    cfg: AgentConfig,
    ovs: Ovs,
    ctx: NodeCtx,
    /// Poked after each ADD: a new pod may come from a Subnet the management port has no
    /// route for yet.
    mgmt_refresh: tokio::sync::Notify,
    /// The Subnets the management port was last configured with: an ADD whose addresses
    /// they cover needs no refresh (the periodic one still runs).
    mgmt_subnets: Mutex<Vec<IpNet>>,
    /// The host's Service NAT table (see [`crate::host::nat`]).
    host_nat: crate::host::nat::HostNat,
    /// Services' externalIPs and LoadBalancer ingress IPs (host prefixes): routed through
    /// the management port like the Subnets, so the host reaches them.
    service_routes: Mutex<Vec<IpNet>>,
    /// The Service addresses this host refused last ([`crate::host::service_address_guard`]).
    service_refusals: Mutex<Vec<String>>,
    /// The `natOutgoing` Subnets' CIDRs the host NAT table masquerades (pods' egress).
    egress_sources: Mutex<Vec<IpNet>>,
    /// `shared` gateway mode: the last error reported, and the bridge rules last applied.
    gateway_state: Mutex<gateway::GatewayState>,
    /// The uplink port's manager.
    uplink: crate::host::uplink::Uplink,
}

impl Agent {
    /// The agent on the real OVS and host; vhost-user records under the root
    /// [`VhostPorts::from_env`] names.
    pub fn new(
        cfg: AgentConfig,
        ovs: Ovs,
        pods: Box<dyn PodSource>,
        state: StateStore,
        metrics: Arc<Metrics>,
    ) -> Agent {
        Agent::with_vhost(cfg, ovs, pods, state, metrics, VhostPorts::from_env())
    }

    /// As [`Agent::new`], with the vhost-user records of `vhost`.
    pub fn with_vhost(
        cfg: AgentConfig,
        ovs: Ovs,
        pods: Box<dyn PodSource>,
        state: StateStore,
        metrics: Arc<Metrics>,
        vhost: VhostPorts,
    ) -> Agent {
        let ctx = NodeCtx::new(NodeParts {
            node_name: cfg.node_name.clone(),
            mtu: cfg.mtu,
            ovs: Arc::new(ovs.clone()),
            plumbing: Arc::new(KernelPlumbing),
            pods: Arc::from(pods),
            state,
            vhost,
            metrics,
            datapath: crate::datapath::DatapathManager::new(cfg.datapath.clone()),
        });
        let uplink = crate::host::uplink::Uplink::new(&cfg.uplink_bridge);
        Agent {
            cfg,
            ovs,
            ctx,
            mgmt_refresh: tokio::sync::Notify::new(),
            mgmt_subnets: Mutex::new(Vec::new()),
            host_nat: crate::host::nat::HostNat::default(),
            service_routes: Mutex::new(Vec::new()),
            service_refusals: Mutex::new(Vec::new()),
            egress_sources: Mutex::new(Vec::new()),
            gateway_state: Mutex::new(gateway::GatewayState::default()),
            uplink,
        }
    }

    /// What the pod attachments work with.
    pub fn ctx(&self) -> &NodeCtx {
        &self.ctx
    }

    /// The local OVS database.
    pub fn ovs(&self) -> &Ovs {
        &self.ovs
    }

    /// Node setup: ovn-controller settings (when configured) and br-int.
    pub async fn setup_node(&self) -> Result<(), crate::ovs::OvsError> {
        if let Some(ovn) = &self.cfg.ovn {
            self.ovs.set_ovn_config(ovn).await?;
        }
        self.ovs.ensure_br_int("netdev").await
    }

    /// Reads the node annotation and the Subnets and (re)configures the management port,
    /// and the node's ports on platform switches (external mode) first.
    pub async fn ensure_mgmt(&self) -> Result<(), mgmt::MgmtError> {
        let ann = self
            .ctx
            .pods()
            .node_annotations(&self.cfg.node_name)
            .await?
            .ok_or_else(|| mgmt::MgmtError::NoNode(self.cfg.node_name.clone()))?;
        // external mode's ports do not wait for the join network's (which it may not have)
        if let Err(e) = self.ensure_platform_mgmt(&ann).await {
            tracing::warn!(error = %e, "management ports on platform switches not configured");
        }
        // the chassis name, for the controller's per-chassis rows (template variables)
        if let Some(ovn) = &self.cfg.ovn
            && ann.get(api::keys::CHASSIS_ID) != Some(&ovn.system_id)
        {
            let a = BTreeMap::from([(api::keys::CHASSIS_ID.to_string(), ovn.system_id.clone())]);
            if let Err(e) = self.ctx.pods().annotate_node(&self.cfg.node_name, &a).await {
                tracing::warn!(error = %e, "could not write the chassis-id annotation");
            }
        }
        let mut subnets = self.ctx.pods().subnet_cidrs().await?;
        // external mode: the Service routes (and so the external IPs) go through the ports
        // on the platform's switches, which carry them in their annotation
        let platform_serves =
            crate::host::platform_mgmt::from_annotations(&self.cfg.node_name, &ann)
                .is_ok_and(|ports| ports.iter().any(|p| !p.routes.is_empty()));
        if !platform_serves {
            subnets.extend(
                self.service_routes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .copied(),
            );
        }
        let cfg = MgmtConfig::from_annotations(&self.cfg.node_name, &ann, subnets, self.cfg.mtu)?;
        mgmt::ensure(&self.ovs, &cfg).await?;
        *self.mgmt_subnets.lock().unwrap_or_else(|e| e.into_inner()) = cfg.subnets();
        Ok(())
    }

    /// The node's management ports on platform switches, as its annotation names them.
    async fn ensure_platform_mgmt(
        &self,
        ann: &BTreeMap<String, String>,
    ) -> Result<(), mgmt::MgmtError> {
        let ports = crate::host::platform_mgmt::from_annotations(&self.cfg.node_name, ann)?;
        let extra: Vec<ipnet::IpNet> = self
            .service_routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect();
        crate::host::platform_mgmt::ensure(&self.ovs, &ports, self.cfg.mtu, &extra).await?;
        Ok(())
    }

    /// Rebuilds the host's Service NAT rules from the Services (and this node's endpoints of
    /// `externalTrafficPolicy: Local` ones) when they changed, and
    /// asks for a management port refresh when their external IPs changed.
    pub async fn host_nat_pass(&self) {
        let mut services = match self.ctx.pods().services().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "Services not read: host Service NAT unchanged");
                return;
            }
        };
        // externalIPs nobody allowed, and addresses this host must keep, are not taken
        for s in &mut services {
            self.cfg.external_ips.apply(s);
        }
        match crate::host::service_address_guard::read().await {
            Ok(host) => {
                let refused = host.police(&mut services);
                self.report_service_refusals(refused).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "host addresses not read: host Service NAT unchanged");
                return;
            }
        }
        // endpoints matter only to externalTrafficPolicy: Local Services
        let slices = if services.iter().any(|s| s.external_local) {
            match self.ctx.pods().endpoint_slices().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "endpoints not read: host Service NAT unchanged");
                    return;
                }
            }
        } else {
            Vec::new()
        };
        let rules = crate::host::nat::rules(&services, &slices, &self.cfg.node_name);
        let routes = crate::host::nat::external_prefixes(&services);
        let moved = {
            let mut r = self
                .service_routes
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let moved = *r != routes;
            *r = routes;
            moved
        };
        if moved {
            self.mgmt_refresh.notify_one();
        }
        let nat = self.host_nat.clone();
        let egress = self
            .egress_sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let r = tokio::task::spawn_blocking(move || nat.sync(&rules, &egress)).await;
        if let Ok(Err(e)) = r {
            tracing::warn!(error = %e, "host Service NAT not applied");
        }
    }

    /// Logs and reports (a Warning event on this Node) each Service address newly refused
    /// by [`crate::host::service_address_guard`].
    async fn report_service_refusals(&self, now: Vec<String>) {
        let new: Vec<String> = {
            let mut last = self
                .service_refusals
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let new = now.iter().filter(|r| !last.contains(r)).cloned().collect();
            *last = now;
            new
        };
        for r in new {
            tracing::warn!(refusal = %r, "Service address refused on this host: no route, no NAT rule");
            self.ctx
                .node_event(
                    crate::agent::report::EventType::Warning,
                    api::keys::REASON_SERVICE_ADDRESS_REFUSED,
                    format!("{r}: not routed or NATed on this node"),
                )
                .await;
        }
    }

    /// Re-reads the `natOutgoing` Subnets; true when they changed (the host NAT table must
    /// follow). An unreadable list keeps the last one.
    async fn egress_changed(&self) -> bool {
        let mut now = match self.ctx.pods().nat_outgoing_cidrs().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "Subnets not read: egress masquerade unchanged");
                return false;
            }
        };
        now.sort();
        now.dedup();
        let mut have = self
            .egress_sources
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if *have == now {
            return false;
        }
        *have = now;
        true
    }

    /// Whether the management port already routes every one of `addrs`.
    fn mgmt_covers(&self, addrs: &[IpNet]) -> bool {
        let subnets = self.mgmt_subnets.lock().unwrap_or_else(|e| e.into_inner());
        addrs
            .iter()
            .all(|a| subnets.iter().any(|s| s.contains(&a.addr())))
    }

    /// One CNI request → its answer (and metrics).
    pub async fn handle(&self, req: Request) -> Response {
        let start = Instant::now();
        let command = req.command;
        let resp = match command {
            Command::Add => crate::attach::add(&self.ctx, &req).await.map(|r| {
                let addrs: Vec<IpNet> = r.ips.iter().map(|i| i.address).collect();
                if !self.mgmt_covers(&addrs) {
                    self.mgmt_refresh.notify_one();
                }
                Response::Result(r)
            }),
            Command::Del => crate::attach::del(&self.ctx, &req.container_id, &req.ifname)
                .await
                .map(|()| Response::Ok),
            Command::Check => crate::attach::check(&self.ctx, &req)
                .await
                .map(|()| Response::Ok),
            Command::Gc => self.gc(&req).await.map(|()| Response::Ok),
            Command::Status => self.status().await.map(|()| Response::Ok),
            Command::Version => Err(CniError::new(
                code::INVALID_ENV,
                "VERSION is answered by the plugin binary, not the agent",
            )),
        };
        let resp = resp.unwrap_or_else(Response::Error);
        let ok = !matches!(resp, Response::Error(_));
        if let Response::Error(e) = &resp {
            tracing::warn!(command = %command, container = %req.container_id, code = e.code, msg = %e.msg, "CNI request failed");
        } else {
            tracing::info!(command = %command, container = %req.container_id, elapsed_ms = start.elapsed().as_millis() as u64, "CNI request done");
        }
        self.ctx
            .metrics()
            .observe(command.as_str(), ok, start.elapsed());
        resp
    }

    async fn gc(&self, req: &Request) -> Result<(), CniError> {
        let conf = req.net_conf()?;
        let valid: BTreeSet<(String, String)> = conf
            .valid_attachments()
            .iter()
            .map(|a| (a.container_id.clone(), a.ifname.clone()))
            .collect();
        crate::attach::gc(&self.ctx, &valid).await
    }

    async fn status(&self) -> Result<(), CniError> {
        self.ovs.status().await.map_err(|e| {
            CniError::new(
                code::PLUGIN_NOT_AVAILABLE,
                format!("node agent cannot serve ADD: {e}"),
            )
        })
    }

    /// After a start: re-applies every recorded attachment whose netns still exists and
    /// removes the others (see [`crate::attach::restore`]); failures are logged.
    pub async fn restore(&self) {
        if let Err(e) = crate::attach::restore(&self.ctx).await {
            tracing::warn!(error = %e.msg, "restoring the recorded attachments failed in part");
        }
    }

    /// Runs forever: moves fast-start pod ports to AF_XDP (see
    /// [`crate::attach::promote`]).
    pub async fn run_promotions(self: Arc<Self>) {
        crate::attach::promote::run(&self.ctx).await;
    }

    /// One datapath pass and its report (see [`crate::datapath::report`]).
    pub async fn datapath_pass(&self) -> crate::datapath::manager::PassOutcome {
        crate::datapath::report::pass(
            &self.ctx,
            &self.ovs,
            self.cfg.vswitchd_ctl.as_deref(),
            &self.uplink,
        )
        .await
    }

    /// Runs forever: the adaptive PMD sleep (see [`crate::datapath::pmd_sleep`]); returns
    /// at once without `--vswitchd-ctl` (no PMD counters to read).
    pub async fn run_pmd_sleep(self: Arc<Self>) {
        let Some(ctl) = self.cfg.vswitchd_ctl.clone() else {
            return;
        };
        let ctl = crate::ovs::unixctl::Unixctl::new(ctl);
        crate::datapath::pmd_sleep::run(self.ctx.datapath(), &self.ovs, &ctl, self.ctx.metrics())
            .await;
    }

    /// Runs forever: the pinger (see [`crate::pinger`]).
    pub async fn run_pinger(self: Arc<Self>, cfg: crate::pinger::PingerConfig) {
        crate::pinger::run(
            &self.cfg.node_name,
            &self.ovs,
            self.ctx.pods(),
            &self.ctx.metrics().pinger,
            &cfg,
        )
        .await;
    }

    /// Runs forever: every [`capture_mirror::GC_PERIOD`], removes the Mirrors and
    /// temporary ports of `zovn capture`s whose process is gone (see
    /// [`capture_mirror::gc`]), with a Normal event on the node for each capture removed.
    pub async fn run_capture_gc(self: Arc<Self>) {
        let mut tick = tokio::time::interval(capture_mirror::GC_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if !self.ovs.is_synced() {
                continue;
            }
            match capture_mirror::gc(&self.ovs).await {
                Ok(removed) => {
                    for r in removed.iter().filter(|r| r.table == "Port") {
                        let msg = format!(
                            "removed the leftover capture port {} (mirror of {}, pid {}): {}",
                            r.name, r.iface_id, r.pid, r.reason
                        );
                        self.ctx
                            .node_event(EventType::Normal, "CaptureLeftoverRemoved", msg)
                            .await;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "leftover captures not collected"),
            }
        }
    }

    /// Re-adds what is missing in OVS (br-int, our ports) — after an ovsdb-server or
    /// ovs-vswitchd restart — and refreshes the management port.
    pub async fn reconcile_ovs(&self) {
        if !self.ovs.is_synced() {
            return;
        }
        if let Err(e) = self.setup_node().await {
            tracing::warn!(error = %e, "node setup failed");
            return;
        }
        if let Err(e) = self
            .ovs
            .hide_ct_zero_snat(self.cfg.vswitchd_ctl.as_deref())
            .await
        {
            tracing::warn!(error = %e, "ct_zero_snat workaround not applied");
        }
        crate::attach::reconcile(&self.ctx).await;
        if !self.ovs.owned_ports().iter().any(|p| p.name == MGMT_PORT)
            && let Err(e) = self.ensure_mgmt().await
        {
            tracing::warn!(error = %e, "management port not (re)created");
        }
    }

    /// Runs forever: reconciles OVS once at start and on every replica change (debounced),
    /// and the management port every `refresh`; the host's Service NAT on every Service
    /// change when the source watches them (and every [`SERVICE_RESYNC`] in any case),
    /// else every `refresh`.
    pub async fn watch(self: Arc<Self>) {
        let mut changes = self.ovs.replica().subscribe();
        // one pass now, not at the first change after start: on a fresh node that change is
        // the first pod's port, and the `ct_zero_snat` correction would make ovn-controller
        // recompute its flows while the first pods and Services are wired
        self.reconcile_ovs().await;
        let mut tick = tokio::time::interval(self.cfg.refresh);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Services: watched when the source can (then re-read only every SERVICE_RESYNC),
        // else re-read on every tick
        let mut services = self.ctx.pods().service_changes();
        let mut watching = services.is_some();
        let mut nat_at: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                change = next_change(&mut services) => {
                    if change.is_none() {
                        tracing::warn!("Service watch ended: Services re-read on the refresh");
                        services = None;
                        watching = false;
                        continue;
                    }
                    // a burst (many objects applied at once, a watch's initial list) is
                    // one pass
                    tokio::time::sleep(SERVICE_DEBOUNCE).await;
                    while let Some(s) = services.as_mut() {
                        match futures::FutureExt::now_or_never(futures::StreamExt::next(s)) {
                            Some(Some(())) => continue,
                            _ => break,
                        }
                    }
                    self.host_nat_pass().await;
                    nat_at = Some(tokio::time::Instant::now());
                }
                r = changes.changed() => {
                    if r.is_err() {
                        tracing::error!("OVS monitor closed");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    changes.borrow_and_update();
                    self.reconcile_ovs().await;
                    // ovn-controller may just have plugged the gateway router's patch port
                    if self.gateway_pending() {
                        self.gateway_pass().await;
                    }
                }
                _ = self.mgmt_refresh.notified() => {
                    if let Err(e) = self.ensure_mgmt().await {
                        tracing::warn!(error = %e, "management port not configured");
                    }
                    if self.egress_changed().await {
                        self.host_nat_pass().await;
                        nat_at = Some(tokio::time::Instant::now());
                    }
                }
                _ = tick.tick() => {
                    if let Err(e) = self.ensure_mgmt().await {
                        tracing::warn!(error = %e, "management port not configured");
                    }
                    self.gateway_pass().await;
                    let egress = self.egress_changed().await;
                    if egress || !watching || nat_at.is_none_or(|t| t.elapsed() >= SERVICE_RESYNC) {
                        self.host_nat_pass().await;
                        nat_at = Some(tokio::time::Instant::now());
                    }
                    self.datapath_pass().await;
                }
            }
        }
    }
}

/// How long a Service change waits for the rest of its burst before the host NAT pass.
const SERVICE_DEBOUNCE: Duration = Duration::from_millis(100);
/// How often the Services are re-read while they are watched (a level-triggered pass
/// that repairs whatever a missed event or a foreign change left).
pub const SERVICE_RESYNC: Duration = Duration::from_secs(60);

/// The next Service change of a watch; never, without one.
async fn next_change(s: &mut Option<futures::stream::BoxStream<'static, ()>>) -> Option<()> {
    match s {
        Some(s) => futures::StreamExt::next(s).await,
        None => std::future::pending().await,
    }
}
