//! The node agent: CNI command handlers, restart reconciliation and the OVS watch.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::keys::{CHASSIS_ID, IPAM_ERROR};
use api::pod_networks::{POD_NETWORKS, PodNetwork, decode_pod_networks};
use cni::error::code;
use cni::{CniError, CniResult, Command, Interface, IpConfig, Request, Response, Route};
use ipnet::IpNet;

use crate::metrics::Metrics;
use crate::mgmt::{self, MGMT_PORT, MgmtConfig};
use crate::node_datapath::{PORT_DATAPATH_KEY, PORT_REASON_KEY};
use crate::ovs::{IFNAME_KEY, OvnConfig, Ovs, POD_KEY, PortSpec, SANDBOX_KEY};
use crate::pod_iface::{self, PodInterfaceSpec, host_ifname_for};
use crate::pods::{PodInfo, PodSource};
use crate::state::{SandboxRecord, StateStore};

/// How long an ADD keeps waiting when the pod carries an IPAM error, in case the error
/// was transient (the controller saw the pod before its Subnet) and addresses follow.
const IPAM_ERROR_GRACE: Duration = Duration::from_secs(2);

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
    /// The ovs-vswitchd unixctl socket (PMD statistics).
    pub vswitchd_ctl: Option<PathBuf>,
}

/// The agent's shared state.
pub struct Agent {
    pub cfg: AgentConfig,
    pub ovs: Ovs,
    pub pods: Box<dyn PodSource>,
    pub state: StateStore,
    pub metrics: Arc<Metrics>,
    /// The node's datapath decision (see [`crate::node_datapath`]).
    pub datapath: crate::datapath::DatapathManager,
    /// vhost-user interfaces (see [`crate::vhost_port`]).
    pub vhost: crate::vhost_port::VhostPorts,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Poked after each ADD: a new pod may come from a Subnet the management port has no
    /// route for yet.
    mgmt_refresh: tokio::sync::Notify,
    /// The Subnets the management port was last configured with: an ADD whose addresses
    /// they cover needs no refresh (the periodic one still runs).
    mgmt_subnets: Mutex<Vec<IpNet>>,
    /// The host's Service NAT table (see [`crate::host_nat`]).
    host_nat: crate::host_nat::HostNat,
    /// Services' externalIPs and LoadBalancer ingress IPs (host prefixes): routed through
    /// the management port like the Subnets, so the host reaches them.
    service_routes: Mutex<Vec<IpNet>>,
}

fn refused(msg: impl Into<String>) -> CniError {
    CniError::new(code::AGENT_REFUSED, msg)
}

/// The pod's addresses as the annotation gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAddrs {
    pub mac: [u8; 6],
    pub addresses: Vec<IpNet>,
    pub gateways: Vec<IpAddr>,
    pub routes: Vec<(IpNet, Option<IpAddr>)>,
}

/// Reads `k8s.ovn.org/pod-networks`; errors name the pod and what is wrong.
pub fn pod_addrs(pod: &PodInfo) -> Result<PodAddrs, CniError> {
    let key = pod.key();
    let raw = pod
        .annotation(POD_NETWORKS)
        .ok_or_else(|| refused(format!("pod {key} has no {POD_NETWORKS} annotation")))?;
    let pn = decode_pod_networks(raw).map_err(|e| refused(format!("pod {key}: {e}")))?;
    network_addrs(&key, &pn)
}

/// The addresses of one entry of `k8s.ovn.org/pod-networks` (of pod `key`), typed by the
/// contract's codec ([`PodNetwork::typed`]).
pub fn network_addrs(key: &str, pn: &PodNetwork) -> Result<PodAddrs, CniError> {
    let t = pn.typed().map_err(|e| refused(format!("pod {key}: {e}")))?;
    Ok(PodAddrs {
        mac: t.mac.octets(),
        addresses: t.ips,
        gateways: t.gateways,
        routes: t.routes,
    })
}

/// The OVS port of a sandbox.
pub fn pod_port_spec(r: &SandboxRecord) -> PortSpec {
    let ips: Vec<String> = r.addresses.iter().map(ToString::to_string).collect();
    let pod = format!("{}/{}", r.pod_namespace, r.pod_name);
    let mut iface = BTreeMap::from([
        ("iface-id".to_string(), r.iface_id()),
        ("attached_mac".to_string(), r.mac.clone()),
        ("ip_addresses".to_string(), ips.join(",")),
        ("sandbox".to_string(), r.container_id.clone()),
        (POD_KEY.to_string(), pod.clone()),
        (SANDBOX_KEY.to_string(), r.container_id.clone()),
        (IFNAME_KEY.to_string(), r.ifname.clone()),
    ]);
    if let Some(first) = ips.first() {
        iface.insert("ip_address".to_string(), first.clone());
    }
    let dp = r.datapath.unwrap_or(crate::datapath::Datapath::Kernel);
    iface.insert(PORT_DATAPATH_KEY.to_string(), dp.to_string());
    if let Some(why) = &r.datapath_reason {
        iface.insert(PORT_REASON_KEY.to_string(), why.clone());
    }
    let (iface_type, options, other_config) = match (&r.afxdp, dp) {
        (Some(a), crate::datapath::Datapath::Afxdp) => (
            "afxdp".to_string(),
            BTreeMap::from([
                ("xdp-mode".to_string(), a.mode.clone()),
                ("n_rxq".to_string(), a.queues.to_string()),
            ]),
            a.rxq_affinity
                .iter()
                .map(|x| ("pmd-rxq-affinity".to_string(), x.clone()))
                .collect(),
        ),
        _ => (String::new(), BTreeMap::new(), BTreeMap::new()),
    };
    PortSpec {
        name: r.host_ifname.clone(),
        iface_type,
        options,
        other_config,
        mac: None,
        iface_external_ids: iface,
        port_external_ids: BTreeMap::from([
            (POD_KEY.to_string(), pod),
            (SANDBOX_KEY.to_string(), r.container_id.clone()),
            (IFNAME_KEY.to_string(), r.ifname.clone()),
        ]),
        ..PortSpec::new(r.host_ifname.clone())
    }
}

/// The CNI result for a sandbox.
pub fn cni_result(r: &SandboxRecord, host_mac: Option<String>) -> CniResult {
    let interfaces = vec![
        Interface {
            name: r.host_ifname.clone(),
            mac: host_mac,
            mtu: Some(r.mtu),
            ..Default::default()
        },
        Interface {
            name: r.ifname.clone(),
            mac: Some(r.mac.clone()),
            mtu: Some(r.mtu),
            sandbox: Some(r.netns.display().to_string()),
            ..Default::default()
        },
    ];
    let ips = r
        .addresses
        .iter()
        .map(|a| IpConfig {
            address: *a,
            gateway: r
                .gateways
                .iter()
                .find(|g| g.is_ipv4() == a.addr().is_ipv4())
                .copied(),
            interface: Some(1),
        })
        .collect();
    let mut routes: Vec<Route> = r
        .gateways
        .iter()
        .map(|g| {
            let any = if g.is_ipv4() { "0.0.0.0/0" } else { "::/0" };
            Route::new(any.parse().unwrap_or_default(), Some(*g))
        })
        .collect();
    routes.extend(r.routes.iter().map(|(d, v)| Route::new(*d, *v)));
    CniResult {
        interfaces,
        ips,
        routes,
        dns: Default::default(),
    }
}

impl Agent {
    pub fn new(
        cfg: AgentConfig,
        ovs: Ovs,
        pods: Box<dyn PodSource>,
        state: StateStore,
        metrics: Arc<Metrics>,
    ) -> Agent {
        Agent {
            datapath: crate::datapath::DatapathManager::new(cfg.datapath.clone()),
            cfg,
            ovs,
            pods,
            state,
            metrics,
            vhost: crate::vhost_port::VhostPorts::from_env(),
            locks: Mutex::new(HashMap::new()),
            mgmt_refresh: tokio::sync::Notify::new(),
            mgmt_subnets: Mutex::new(Vec::new()),
            host_nat: crate::host_nat::HostNat::default(),
            service_routes: Mutex::new(Vec::new()),
        }
    }

    /// The lock every request and reconcile of `container_id`'s sandbox holds while it
    /// changes that sandbox's ports and records.
    pub fn sandbox_lock(&self, container_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, l| Arc::strong_count(l) > 1);
        m.entry(container_id.to_string()).or_default().clone()
    }

    /// Node setup: ovn-controller settings (when configured) and br-int.
    pub async fn setup_node(&self) -> Result<(), crate::ovs::OvsError> {
        if let Some(ovn) = &self.cfg.ovn {
            self.ovs.set_ovn_config(ovn).await?;
        }
        self.ovs.ensure_br_int("netdev").await
    }

    /// Reads the node annotation and the Subnets and (re)configures the management port.
    pub async fn ensure_mgmt(&self) -> Result<(), String> {
        let ann = self
            .pods
            .node_annotations(&self.cfg.node_name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("Node {} does not exist", self.cfg.node_name))?;
        // the chassis name, for the controller's per-chassis rows (template variables)
        if let Some(ovn) = &self.cfg.ovn
            && ann.get(CHASSIS_ID) != Some(&ovn.system_id)
        {
            let a = BTreeMap::from([(CHASSIS_ID.to_string(), ovn.system_id.clone())]);
            if let Err(e) = self.pods.annotate_node(&self.cfg.node_name, &a).await {
                tracing::warn!(error = %e, "could not write the chassis-id annotation");
            }
        }
        let mut subnets = self.pods.subnet_cidrs().await.map_err(|e| e.to_string())?;
        subnets.extend(
            self.service_routes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .copied(),
        );
        let cfg = MgmtConfig::from_annotations(&self.cfg.node_name, &ann, subnets, self.cfg.mtu)
            .map_err(|e| e.to_string())?;
        mgmt::ensure(&self.ovs, &cfg)
            .await
            .map_err(|e| e.to_string())?;
        *self.mgmt_subnets.lock().unwrap_or_else(|e| e.into_inner()) = cfg.subnets;
        Ok(())
    }

    /// Rebuilds the host's Service NAT rules from the Services (when they changed) and
    /// asks for a management port refresh when their external IPs changed.
    pub async fn host_nat_pass(&self) {
        let services = match self.pods.services().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "Services not read: host Service NAT unchanged");
                return;
            }
        };
        let routes = crate::host_nat::external_prefixes(&services);
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
        let r = tokio::task::spawn_blocking(move || nat.sync(&services)).await;
        if let Ok(Err(e)) = r {
            tracing::warn!(error = %e, "host Service NAT not applied");
        }
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
            Command::Add => self.add(&req).await.map(Response::Result),
            Command::Del => self.del(&req).await.map(|()| Response::Ok),
            Command::Check => self.check(&req).await.map(|()| Response::Ok),
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
        self.metrics.observe(command.as_str(), ok, start.elapsed());
        resp
    }

    async fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = req.net_conf()?;
        let start = Instant::now();
        let budget = {
            let t = req.timeout();
            let margin = (t / 10).clamp(Duration::from_millis(500), Duration::from_secs(3));
            t.saturating_sub(margin).max(Duration::from_millis(500))
        };
        if req.netns.is_empty() {
            return Err(CniError::new(code::INVALID_ENV, "CNI_NETNS is empty"));
        }
        let (Some(ns), Some(name)) = (
            req.args.pod_namespace.clone().filter(|s| !s.is_empty()),
            req.args.pod_name.clone().filter(|s| !s.is_empty()),
        ) else {
            return Err(refused(
                "CNI_ARGS lacks K8S_POD_NAMESPACE and K8S_POD_NAME: the agent serves Kubernetes pods only",
            ));
        };
        let key = format!("{ns}/{name}");
        let lock = self.sandbox_lock(&req.container_id);
        let _guard = lock.lock().await;
        if let Some(sel) = crate::secondary::selection(self, req, &ns, &name).await? {
            return crate::secondary::add(self, req, &conf, sel, budget, start).await;
        }

        // 1. the controller's annotation (or its IPAM error)
        let ready = |p: &PodInfo| {
            p.annotation(POD_NETWORKS).is_some() || p.annotation(IPAM_ERROR).is_some()
        };
        let (pod, done) = self
            .pods
            .wait_pod(&ns, &name, budget, &ready)
            .await
            .map_err(|e| CniError::new(code::TRY_AGAIN_LATER, format!("pod {key}: {e}")))?;
        let pod = match (pod, done) {
            (Some(p), true) => p,
            (seen, _) => {
                return Err(CniError::new(
                    code::ANNOTATION_TIMEOUT,
                    format!(
                        "timed out after {:.1} s waiting for the controller to write {POD_NETWORKS} on pod {key}{}",
                        budget.as_secs_f64(),
                        if seen.is_none() {
                            " (the pod does not exist)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        };
        let mut pod = pod;
        if pod.annotation(POD_NETWORKS).is_none() && pod.annotation(IPAM_ERROR).is_some() {
            // An IPAM error can be transient (the controller saw the pod before its Subnet):
            // give it a short grace to be replaced by addresses before refusing.
            let grace = IPAM_ERROR_GRACE.min(budget.saturating_sub(start.elapsed()));
            tracing::info!(pod = %key, error = pod.annotation(IPAM_ERROR).unwrap_or(""), ?grace,
                "the pod has an IPAM error; waiting briefly for addresses");
            let addressed = |p: &PodInfo| p.annotation(POD_NETWORKS).is_some();
            if let Ok((Some(p), _)) = self.pods.wait_pod(&ns, &name, grace, &addressed).await {
                pod = p;
            }
        }
        if pod.annotation(POD_NETWORKS).is_none()
            && let Some(msg) = pod.annotation(IPAM_ERROR)
        {
            return Err(refused(format!("pod {key}: IPAM error: {msg}")));
        }
        if let Some(n) = &pod.node_name
            && *n != self.cfg.node_name
        {
            return Err(refused(format!(
                "pod {key} is scheduled on node {n}, not on this node ({})",
                self.cfg.node_name
            )));
        }
        let addrs = pod_addrs(&pod)?;
        if let Some(v) = crate::vhost_port::requested(&conf, &pod)? {
            let left = budget
                .saturating_sub(start.elapsed())
                .max(Duration::from_millis(200));
            return crate::vhost_port::add(self, req, &conf, &pod, addrs, v, None, left).await;
        }

        // 2. the pod interface
        let decided_mtu = self.datapath.decision().and_then(|d| d.mtu);
        let mut rec = SandboxRecord {
            container_id: req.container_id.clone(),
            ifname: req.ifname.clone(),
            pod_namespace: ns.clone(),
            pod_name: name.clone(),
            netns: PathBuf::from(&req.netns),
            host_ifname: host_ifname_for(&req.container_id),
            mac: api::mac::format_bytes(&addrs.mac),
            addresses: addrs.addresses,
            gateways: addrs.gateways,
            routes: addrs.routes,
            mtu: conf.mtu.or(decided_mtu).unwrap_or(self.cfg.mtu),
            datapath: None,
            datapath_reason: None,
            afxdp: None,
        };
        self.choose_port(&mut rec, &pod.annotations).await;
        self.plumb(&rec).await?;
        self.state.put_async(&rec).await.map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("persist state of sandbox {}: {e}", rec.key()),
            )
        })?;

        // 3. the OVS port, then ovn-controller's confirmation
        self.ovs
            .ensure_port(&pod_port_spec(&rec))
            .await
            .map_err(|e| {
                CniError::new(code::TRY_AGAIN_LATER, format!("pod {key}: OVS port: {e}"))
            })?;
        if self.confirm_port(&mut rec).await
            && let Err(e) = self.state.put_async(&rec).await
        {
            tracing::warn!(sandbox = %rec.key(), error = %e, "persisting the port's fallback failed");
        }
        let left = budget
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(200));
        self.ovs
            .wait_installed(&rec.host_ifname, &rec.iface_id(), left)
            .await
            .map_err(|e| CniError::new(code::PORT_NOT_READY, format!("pod {key}: {e}")))?;
        if !self.mgmt_covers(&rec.addresses) {
            self.mgmt_refresh.notify_one();
        }
        Ok(cni_result(&rec, None))
    }

    async fn plumb(&self, rec: &SandboxRecord) -> Result<(), CniError> {
        let spec = rec
            .spec()
            .ok_or_else(|| refused(format!("bad MAC {}", rec.mac)))?;
        tokio::task::spawn_blocking(move || pod_iface::setup(&spec))
            .await
            .map_err(|e| CniError::new(code::IO_FAILURE, format!("pod interface worker: {e}")))?
            .map(|_| ())
            .map_err(|e| {
                CniError::new(
                    code::IO_FAILURE,
                    format!(
                        "pod {}/{}: set up {} in {}: {e}",
                        rec.pod_namespace,
                        rec.pod_name,
                        rec.ifname,
                        rec.netns.display()
                    ),
                )
            })
    }

    async fn del(&self, req: &Request) -> Result<(), CniError> {
        let lock = self.sandbox_lock(&req.container_id);
        let _guard = lock.lock().await;
        crate::vhost_port::del(self, &req.container_id, &req.ifname).await?;
        if crate::secondary::is_secondary_ifname(&req.ifname)
            && self.state.get(&req.container_id, &req.ifname).is_none()
        {
            // a secondary interface has no veth: the host veth named after the container
            // belongs to the primary interface, which stays
            return Ok(());
        }
        let host_ifname = self
            .state
            .get(&req.container_id, &req.ifname)
            .map(|r| r.host_ifname)
            .unwrap_or_else(|| host_ifname_for(&req.container_id));
        self.remove_sandbox(&req.container_id, &req.ifname, &host_ifname)
            .await
    }

    /// Removes every trace of a sandbox: our OVS ports for it, the host veth, the record.
    async fn remove_sandbox(
        &self,
        container_id: &str,
        ifname: &str,
        host_ifname: &str,
    ) -> Result<(), CniError> {
        let ovs_err = |e: crate::ovs::OvsError| {
            CniError::new(
                code::TRY_AGAIN_LATER,
                format!("sandbox {container_id}: remove OVS port: {e}"),
            )
        };
        for p in self.ovs.owned_ports() {
            let same_sandbox = p.external_ids.get(SANDBOX_KEY).map(String::as_str)
                == Some(container_id)
                && p.external_ids.get(IFNAME_KEY).is_none_or(|i| i == ifname);
            if same_sandbox || p.name == host_ifname {
                self.ovs.delete_owned(&p).await.map_err(ovs_err)?;
            }
        }
        let name = host_ifname.to_string();
        tokio::task::spawn_blocking(move || pod_iface::teardown(None, &name))
            .await
            .map_err(|e| CniError::new(code::IO_FAILURE, format!("teardown worker: {e}")))?
            .map_err(|e| {
                CniError::new(
                    code::IO_FAILURE,
                    format!("sandbox {container_id}: delete {host_ifname}: {e}"),
                )
            })?;
        self.state.remove(container_id, ifname).map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("sandbox {container_id}: remove state: {e}"),
            )
        })
    }

    async fn check(&self, req: &Request) -> Result<(), CniError> {
        req.net_conf()?;
        if let Some(v) = self.vhost.get(&req.container_id, &req.ifname) {
            return crate::vhost_port::check(self, &v).await;
        }
        let rec = self
            .state
            .get(&req.container_id, &req.ifname)
            .ok_or_else(|| {
                CniError::new(
                    code::UNKNOWN_CONTAINER,
                    format!(
                        "container {} (ifname {}) is unknown to this agent",
                        req.container_id, req.ifname
                    ),
                )
            })?;
        let spec = rec
            .spec()
            .ok_or_else(|| refused(format!("bad MAC {}", rec.mac)))?;
        let spec = PodInterfaceSpec {
            netns_path: if req.netns.is_empty() {
                spec.netns_path
            } else {
                PathBuf::from(&req.netns)
            },
            ..spec
        };
        tokio::task::spawn_blocking(move || pod_iface::check(&spec))
            .await
            .map_err(|e| CniError::new(code::IO_FAILURE, format!("check worker: {e}")))?
            .map_err(|e| refused(format!("check failed: {e}")))?;
        let ids = self
            .ovs
            .iface_external_ids(&rec.host_ifname)
            .ok_or_else(|| {
                refused(format!(
                    "check failed: OVS port {} is missing",
                    rec.host_ifname
                ))
            })?;
        for (k, want) in [
            ("iface-id", rec.iface_id()),
            ("attached_mac", rec.mac.clone()),
        ] {
            let have = ids.get(k).cloned().unwrap_or_default();
            if have != want {
                return Err(refused(format!(
                    "check failed: OVS interface {} external_ids:{k} is {have:?}, expected {want:?}",
                    rec.host_ifname
                )));
            }
        }
        Ok(())
    }

    async fn gc(&self, req: &Request) -> Result<(), CniError> {
        let conf = req.net_conf()?;
        let valid: BTreeSet<(String, String)> = conf
            .valid_attachments()
            .iter()
            .map(|a| (a.container_id.clone(), a.ifname.clone()))
            .collect();
        crate::vhost_port::gc(self, &valid).await?;
        let mut stale: BTreeMap<(String, String), String> = BTreeMap::new();
        for p in self.ovs.owned_ports() {
            let Some(cid) = p.external_ids.get(SANDBOX_KEY) else {
                continue; // br-int, the management port
            };
            let ifname = p.external_ids.get(IFNAME_KEY).cloned().unwrap_or_default();
            if !valid.contains(&(cid.clone(), ifname.clone())) {
                stale.insert((cid.clone(), ifname), p.name.clone());
            }
        }
        for r in self.state.all() {
            if !valid.contains(&(r.container_id.clone(), r.ifname.clone())) {
                stale.insert((r.container_id.clone(), r.ifname.clone()), r.host_ifname);
            }
        }
        for ((cid, ifname), host) in stale {
            tracing::info!(container = %cid, %ifname, "GC: removing stale attachment");
            let lock = self.sandbox_lock(&cid);
            let _g = lock.lock().await;
            self.remove_sandbox(&cid, &ifname, &host).await?;
        }
        Ok(())
    }

    async fn status(&self) -> Result<(), CniError> {
        self.ovs.status().await.map_err(|e| {
            CniError::new(
                code::PLUGIN_NOT_AVAILABLE,
                format!("node agent cannot serve ADD: {e}"),
            )
        })
    }

    /// After a start: re-apply every recorded sandbox whose netns still exists; forget
    /// the others (and remove their OVS ports).
    pub async fn restore(&self) {
        crate::vhost_port::restore(self).await;
        for rec in self.state.all() {
            let lock = self.sandbox_lock(&rec.container_id);
            let _g = lock.lock().await;
            if !Path::new(&rec.netns).exists() {
                tracing::info!(sandbox = %rec.key(), netns = %rec.netns.display(), "netns gone: dropping sandbox");
                if let Err(e) = self
                    .remove_sandbox(&rec.container_id, &rec.ifname, &rec.host_ifname)
                    .await
                {
                    tracing::warn!(sandbox = %rec.key(), error = %e.msg, "cleanup failed");
                }
                continue;
            }
            match self.plumb(&rec).await {
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(sandbox = %rec.key(), error = %e.msg, "re-applying the pod interface failed");
                    continue;
                }
            }
            if let Err(e) = self.ovs.ensure_port(&pod_port_spec(&rec)).await {
                tracing::warn!(sandbox = %rec.key(), error = %e, "re-adding the OVS port failed");
            } else {
                tracing::info!(sandbox = %rec.key(), "sandbox restored");
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
        crate::vhost_port::reconcile(self).await;
        let present: BTreeSet<String> =
            self.ovs.owned_ports().into_iter().map(|p| p.name).collect();
        for rec in self.state.all() {
            if present.contains(&rec.host_ifname) {
                continue;
            }
            // a request in flight for this sandbox finishes the job itself
            let lock = self.sandbox_lock(&rec.container_id);
            let Ok(_g) = lock.try_lock() else {
                continue;
            };
            if self.state.get(&rec.container_id, &rec.ifname).is_none()
                || self
                    .ovs
                    .owned_ports()
                    .iter()
                    .any(|p| p.name == rec.host_ifname)
            {
                continue;
            }
            tracing::warn!(sandbox = %rec.key(), port = %rec.host_ifname, "OVS port missing: re-adding");
            if let Err(e) = self.ovs.ensure_port(&pod_port_spec(&rec)).await {
                tracing::warn!(sandbox = %rec.key(), error = %e, "re-adding the OVS port failed");
            }
        }
        if !present.contains(MGMT_PORT)
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
        let mut services = self.pods.service_changes();
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
                }
                _ = self.mgmt_refresh.notified() => {
                    if let Err(e) = self.ensure_mgmt().await {
                        tracing::warn!(error = %e, "management port not configured");
                    }
                }
                _ = tick.tick() => {
                    if let Err(e) = self.ensure_mgmt().await {
                        tracing::warn!(error = %e, "management port not configured");
                    }
                    if !watching || nat_at.is_none_or(|t| t.elapsed() >= SERVICE_RESYNC) {
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
