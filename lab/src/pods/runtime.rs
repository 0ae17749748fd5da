//! [`PodRuntime`]: the lab's container runtime, run inside the object-store daemon.
//!
//! Every pod of the store that is not hostNetwork and has a node gets one task that does
//! what kubelet + containerd do for a sandbox: wait for the node's CNI config (the agent
//! writes it), create the netns `<prefix>p-<hash>`, call the plugin with `ADD` (retried
//! with backoff; `11`/`100` mean "not yet" and retry fast, other errors are cleaned up
//! with `DEL` and retried slower), start the pod's responder, and report the pod ready.
//! When the pod leaves the store (or comes back with another uid) the task stops the
//! responder, calls `DEL` (with the ADD result as `prevResult`; retried with backoff until
//! it succeeds, as kubelet does) and then deletes the netns.
//!
//! Everything is recorded in `pods.json` before it is created. When the daemon restarts,
//! the records are adopted: a ready pod whose netns still exists is not set up again
//! (its responder is restarted if it died); a pod no longer in the store is torn down.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::cni_exec::{
    CniCall, CniFailure, CniNode, IFNAME, NetworkConfig, load_network_config, summarize,
};
use super::desired::{DesiredPod, PodSource};
use super::naming::{container_id, pod_netns};
use super::record::{PodPhase, PodRecord, PodsFile};
use super::responder;
use super::vm_pod::VmBoot;
use crate::error::{LabError, Result};
use crate::netns;
use crate::process::stop_daemon;
use crate::state::{Layout, NodeState};

/// Annotations (in `get` output only) naming the pod's netns and datapath.
pub use api::pod_json::{
    LAB_DATAPATH_ANNOTATION as DATAPATH_ANNOTATION, LAB_NETNS_ANNOTATION as NETNS_ANNOTATION,
};
/// How often the runtime looks at the store when nothing notifies it.
const RESYNC: Duration = Duration::from_secs(1);
/// How often a running pod's responder is checked.
const HEALTH: Duration = Duration::from_secs(2);

fn from_record(r: &PodRecord) -> DesiredPod {
    let (ns, name) = r.key.split_once('/').unwrap_or(("default", &r.key));
    DesiredPod {
        key: r.key.clone(),
        namespace: ns.to_string(),
        name: name.to_string(),
        uid: r.uid.clone(),
        node: r.node.clone(),
        ports: r.ports.clone(),
        network: None,
        secondary: Vec::new(),
        vm: None,
    }
}

/// Why a setup attempt failed.
struct SetupError {
    /// Retry soon (waiting for the agent/controller), not a failure.
    transient: bool,
    message: String,
}

impl SetupError {
    fn waiting(message: String) -> Self {
        SetupError {
            transient: true,
            message,
        }
    }
    fn failed(message: String) -> Self {
        SetupError {
            transient: false,
            message,
        }
    }
}

/// A pod's helper process that did not start (the pod's message, or a log line).
#[derive(Debug, thiserror::Error)]
enum HelperError {
    #[error("pod {pod}: vhost-user testpmd ({ifname}): {source}")]
    Vhost {
        pod: String,
        ifname: String,
        source: LabError,
    },
    #[error("pod {pod}: QEMU guest: {source}")]
    Vm { pod: String, source: LabError },
    #[error("pod {pod}: start the responder: {source}")]
    Responder { pod: String, source: LabError },
}

/// The runtime (see the module docs).
pub struct PodRuntime {
    layout: Layout,
    prefix: String,
    nodes: Vec<CniNode>,
    /// The `zovn` binary, for responders.
    zovn: PathBuf,
    state: Mutex<PodsFile>,
}

impl PodRuntime {
    /// A runtime for the lab in `dir` (its name prefix and nodes as the manifest records
    /// them), with the records of `pods.json` (if any).
    pub fn new(
        dir: &Path,
        prefix: &str,
        lab_nodes: &[NodeState],
        zovn: PathBuf,
    ) -> Result<Arc<PodRuntime>> {
        let layout = Layout::new(dir);
        let nodes = lab_nodes
            .iter()
            .map(|n| CniNode {
                name: n.system_id.clone(),
                index: n.index,
                netns: n.netns.clone(),
                conf_dir: layout.node_cni_conf(n.index),
                bin_dir: layout.node_cni_bin(n.index),
                socket: layout.node_cni_socket(n.index),
                host_ip: n.encap_ip.clone(),
                ovs_db: n.db_remote.clone(),
            })
            .collect();
        let state = PodsFile::load(&layout.pods_file())?;
        Ok(Arc::new(PodRuntime {
            prefix: prefix.to_string(),
            layout,
            nodes,
            zovn,
            state: Mutex::new(state),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, PodsFile> {
        // every critical section leaves the map consistent
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The record of pod `key`.
    pub fn record(&self, key: &str) -> Option<PodRecord> {
        self.lock().pods.get(key).cloned()
    }

    /// Every record.
    pub fn records(&self) -> BTreeMap<String, PodRecord> {
        self.lock().pods.clone()
    }

    fn save(&self, f: &PodsFile) -> Result<()> {
        f.save(&self.layout.pods_file())
    }

    /// Changes the record of `key` (if present) and saves.
    fn update(&self, key: &str, change: impl FnOnce(&mut PodRecord)) {
        let mut st = self.lock();
        if let Some(r) = st.pods.get_mut(key) {
            change(r);
            if let Err(e) = self.save(&st) {
                warn!(pod = key, error = %e, "saving pods.json failed");
            }
        }
    }

    /// A fast-start port moves to AF_XDP after its ADD: follow it (every 200 ms, at most
    /// 30 s) so that the record shows where the pod's port ended.
    async fn follow_datapath(&self, d: &DesiredPod) {
        let Some(rec) = self.lock().pods.get(&d.key).cloned() else {
            return;
        };
        if rec.datapath.as_deref() != Some(crate::pods::cni_exec::PENDING_AFXDP) {
            return;
        }
        let (Some(node), Some(host)) = (
            self.node(&d.node),
            rec.result
                .as_ref()
                .and_then(crate::pods::cni_exec::host_ifname),
        ) else {
            return;
        };
        for _ in 0..150 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let (db, h) = (node.ovs_db.clone(), host.clone());
            let Ok(Some(dp)) =
                tokio::task::spawn_blocking(move || crate::pods::cni_exec::veth_datapath(&db, &h))
                    .await
            else {
                continue;
            };
            if dp != crate::pods::cni_exec::PENDING_AFXDP {
                self.update(&d.key, |r| r.datapath = Some(dp));
                return;
            }
        }
    }

    fn node(&self, name: &str) -> Option<&CniNode> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Runs until the task is aborted: keeps the pods `store` wants set up.
    pub async fn run(self: Arc<Self>, store: Arc<dyn PodSource>) {
        let mut tasks: HashMap<String, PodTask> = HashMap::new();
        for rec in self.records().values() {
            let d = from_record(rec);
            tasks.insert(d.key.clone(), PodTask::spawn(self.clone(), d));
        }
        loop {
            let desired: BTreeMap<String, DesiredPod> = store
                .desired_pods()
                .into_iter()
                .map(|d| (d.key.clone(), d))
                .collect();
            tasks.retain(|key, t| {
                // a pod waiting for its NAD starts over once the NAD is there (the task
                // has created only its pods.json record: the NAD is resolved before the
                // netns and CNI ADD)
                let nad_came =
                    t.waits_for_nad && desired.get(key).is_some_and(DesiredPod::nads_resolved);
                if nad_came {
                    t.handle.abort();
                }
                !nad_came && !t.handle.is_finished()
            });
            for (key, t) in &tasks {
                if desired.get(key).map(|d| &d.uid) != Some(&t.uid) {
                    let _ = t.gone.send(true);
                }
            }
            for (key, d) in desired {
                tasks
                    .entry(key)
                    .or_insert_with(|| PodTask::spawn(self.clone(), d));
            }
            tokio::select! {
                _ = store.changed().notified() => {}
                _ = tokio::time::sleep(RESYNC) => {}
            }
        }
    }

    /// One attempt at bringing pod `d` up.
    async fn setup(
        &self,
        d: &DesiredPod,
        gone: &mut watch::Receiver<bool>,
    ) -> Result<(), SetupError> {
        let node = self.node(&d.node).ok_or_else(|| {
            SetupError::failed(format!("pod {}: node {} is not a lab node", d.key, d.node))
        })?;
        let mut net = network_config(node, &d.key)?;
        let base = net.clone();
        let ns = pod_netns(&self.prefix, &d.key);
        let rec = {
            let mut st = self.lock();
            if let Some(other) = st.pods.values().find(|r| r.netns == ns && r.key != d.key) {
                return Err(SetupError::failed(format!(
                    "pod {}: netns name {ns} collides with pod {}",
                    d.key, other.key
                )));
            }
            let rec = match st.pods.get(&d.key) {
                Some(r) if r.uid == d.uid => PodRecord {
                    attempts: r.attempts + 1,
                    ..r.clone()
                },
                _ => PodRecord {
                    key: d.key.clone(),
                    uid: d.uid.clone(),
                    node: d.node.clone(),
                    node_index: node.index,
                    netns: ns.clone(),
                    container_id: container_id(&d.uid),
                    ports: d.ports.clone(),
                    phase: PodPhase::Pending,
                    ready: false,
                    ips: Vec::new(),
                    mac: None,
                    datapath: None,
                    message: None,
                    result: None,
                    attempts: 1,
                    responder: None,
                },
            };
            st.pods.insert(d.key.clone(), rec.clone());
            self.save(&st).map_err(|e| {
                SetupError::failed(format!("pod {}: record it in pods.json: {e}", d.key))
            })?;
            rec
        };
        // the pod's NAD, resolved once the record exists (the message shows on the pod)
        // and before anything else is created
        match &d.network {
            None => {}
            Some(Ok(config)) => {
                net = super::cni_exec::delegate_config(&net, config)
                    .map_err(|e| SetupError::failed(format!("pod {}: {e}", d.key)))?;
            }
            Some(Err(e)) => return Err(SetupError::waiting(format!("pod {}: {e}", d.key))),
        }
        let mut secondaries = Vec::with_capacity(d.secondary.len());
        for s in &d.secondary {
            let config = s
                .config
                .as_ref()
                .map_err(|e| SetupError::waiting(format!("pod {}: {e}", d.key)))?;
            let net = super::cni_exec::delegate_config(&base, config).map_err(|e| {
                SetupError::failed(format!("pod {}: network {}: {e}", d.key, s.nad))
            })?;
            secondaries.push((s.clone(), net));
        }
        if !netns::exists(&ns) {
            let name = ns.clone();
            blocking(move || netns::add(&name)).await.map_err(|e| {
                SetupError::failed(format!("pod {}: create netns {ns}: {e}", d.key))
            })?;
        }
        let adopted = rec.ready && rec.result.is_some();
        if !adopted {
            if rec.attempts > 1 {
                // clean up what a failed or interrupted attempt may have left
                let _ = self.del_secondaries(d, node, &base, &rec, true).await;
                let _ = self
                    .call(d, node, &net, &rec, "DEL", rec.result.as_ref(), IFNAME)
                    .await;
            }
            let add = tokio::select! {
                r = self.call(d, node, &net, &rec, "ADD", None, IFNAME) => r,
                _ = deleted(gone) => {
                    return Err(SetupError::waiting(format!("pod {}: deleted during ADD", d.key)));
                }
            };
            match add {
                Ok(result) => {
                    let (ips, mac, mut datapath) = summarize(&result).map_err(|e| {
                        SetupError::failed(format!("pod {}: CNI ADD result: {e}", d.key))
                    })?;
                    if let Some(host) = crate::pods::cni_exec::host_ifname(&result) {
                        let db = node.ovs_db.clone();
                        if let Ok(Some(dp)) = tokio::task::spawn_blocking(move || {
                            crate::pods::cni_exec::veth_datapath(&db, &host)
                        })
                        .await
                        {
                            datapath = dp;
                        }
                    }
                    info!(pod = %d.key, netns = %ns, ?ips, "CNI ADD succeeded");
                    self.update(&d.key, |r| {
                        r.ips = ips;
                        r.mac = mac;
                        r.datapath = Some(datapath);
                        r.result = Some(result);
                    });
                }
                Err(f) => {
                    if !f.transient() {
                        let _ = self.call(d, node, &net, &rec, "DEL", None, IFNAME).await;
                        return Err(SetupError::failed(f.to_string()));
                    }
                    return Err(SetupError::waiting(f.to_string()));
                }
            }
        }
        self.setup_secondaries(d, node, &rec, &secondaries).await?;
        self.ensure_vhost(d)
            .await
            .map_err(|e| SetupError::failed(e.to_string()))?;
        self.ensure_responder(d)
            .await
            .map_err(|e| SetupError::failed(e.to_string()))?;
        self.update(&d.key, |r| {
            r.phase = PodPhase::Running;
            r.ready = true;
            r.message = None;
        });
        Ok(())
    }

    /// One CNI ADD per secondary network not attached yet, in order (see
    /// [`super::networks`]); a failure is cleaned up with DEL of that interface.
    async fn setup_secondaries(
        &self,
        d: &DesiredPod,
        node: &CniNode,
        rec: &PodRecord,
        nets: &[(super::networks::SecondarySpec, NetworkConfig)],
    ) -> Result<(), SetupError> {
        use super::networks::{self, Attachment};
        let recorded = networks::load(&self.layout, &rec.netns);
        for (spec, net) in nets {
            let done = recorded
                .iter()
                .any(|a| a.ifname == spec.ifname && a.nad == spec.nad && a.result.is_some());
            if done {
                continue;
            }
            let mut att = Attachment {
                nad: spec.nad.clone(),
                ifname: spec.ifname.clone(),
                config: spec.config.clone().unwrap_or_default(),
                result: None,
            };
            let save = |att: &Attachment| {
                networks::put(&self.layout, &rec.netns, att.clone()).map_err(|e| {
                    SetupError::failed(format!("pod {}: record network {}: {e}", d.key, att.nad))
                })
            };
            save(&att)?;
            match self
                .call(d, node, net, rec, "ADD", None, &spec.ifname)
                .await
            {
                Ok(result) => {
                    info!(pod = %d.key, network = %spec.nad, ifname = %spec.ifname, "CNI ADD of a secondary network succeeded");
                    att.result = Some(result);
                    save(&att)?;
                }
                Err(f) => {
                    let msg = format!("network {} ({}): {f}", spec.nad, spec.ifname);
                    if !f.transient() {
                        let _ = self
                            .call(d, node, net, rec, "DEL", None, &spec.ifname)
                            .await;
                        return Err(SetupError::failed(msg));
                    }
                    return Err(SetupError::waiting(msg));
                }
            }
        }
        Ok(())
    }

    /// CNI DEL of every recorded secondary network of the pod, last first. A network is
    /// forgotten once its DEL succeeded, and also after a failed one when `forget_failed`
    /// (the cleanup before a new ADD attempt); the first failure is returned.
    async fn del_secondaries(
        &self,
        d: &DesiredPod,
        node: &CniNode,
        base: &NetworkConfig,
        rec: &PodRecord,
        forget_failed: bool,
    ) -> std::result::Result<(), CniFailure> {
        use super::networks;
        let mut first = None;
        for a in networks::load(&self.layout, &rec.netns).iter().rev() {
            let net =
                super::cni_exec::delegate_config(base, &a.config).unwrap_or_else(|_| base.clone());
            let r = self
                .call(d, node, &net, rec, "DEL", a.result.as_ref(), &a.ifname)
                .await;
            if let Err(e) = &r {
                warn!(pod = %d.key, network = %a.nad, ifname = %a.ifname, error = %e, "CNI DEL of a secondary network failed");
            }
            if (r.is_ok() || forget_failed)
                && let Err(e) = networks::forget(&self.layout, &rec.netns, &a.ifname)
            {
                warn!(pod = %d.key, error = %e, "forgetting a secondary network failed");
            }
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The pod's vhost-user interfaces (an ADD result with a `socketPath`, the default
    /// network's or a secondary network's): starts the testpmd "VM" of each unless it runs
    /// (see [`super::vhost_pod`]), with the queue pairs the network config asks for.
    async fn ensure_vhost(&self, d: &DesiredPod) -> std::result::Result<(), HelperError> {
        let Some(rec) = self.record(&d.key) else {
            return Ok(());
        };
        // (its result, its network config, the VM it boots: the default network's only)
        let mut vhost: Vec<(Value, Option<String>, Option<VmBoot>)> = Vec::new();
        if let Some(r) = &rec.result {
            let config = match &d.network {
                Some(Ok(c)) => Some(c.clone()),
                _ => None,
            };
            vhost.push((r.clone(), config, d.vm.clone()));
        }
        for a in super::networks::load(&self.layout, &rec.netns) {
            if let Some(r) = a.result {
                vhost.push((r, Some(a.config), None));
            }
        }
        let db = self.node(&rec.node).map(|n| n.ovs_db.clone());
        for (result, config, vm) in vhost {
            let Some(mut att) = super::vhost_pod::attachment(&result) else {
                continue;
            };
            let running = match vm {
                Some(_) => super::vm_pod::recorded(&self.layout, &rec.netns),
                None => super::vhost_pod::recorded(&self.layout, &rec.netns, &att.ifname),
            }
            .is_some_and(|r| r.is_alive());
            if running {
                continue;
            }
            let (layout, key, ns) = (self.layout.clone(), d.key.clone(), rec.netns.clone());
            let (ifname, db) = (att.ifname.clone(), db.clone().unwrap_or_default());
            let is_vm = vm.is_some();
            blocking(move || {
                att.queues = super::vhost_pod::vm_queues(config.as_deref(), &db, &result);
                match &vm {
                    Some(boot) => super::vm_pod::ensure(&layout, &key, &ns, &att, boot),
                    None => super::vhost_pod::ensure(&layout, &key, &ns, &att),
                }
            })
            .await
            .map_err(|source| match is_vm {
                true => HelperError::Vm {
                    pod: d.key.clone(),
                    source,
                },
                false => HelperError::Vhost {
                    pod: d.key.clone(),
                    ifname,
                    source,
                },
            })?;
        }
        Ok(())
    }

    /// Starts the pod's responder unless it runs (or the pod declares no ports, or is a
    /// VM: its guest serves its ports).
    async fn ensure_responder(&self, d: &DesiredPod) -> std::result::Result<(), HelperError> {
        let Some(rec) = self.record(&d.key) else {
            return Ok(());
        };
        if d.vm.is_some() {
            return Ok(());
        }
        if rec.ports.is_empty() || rec.responder.as_ref().is_some_and(|r| r.is_alive()) {
            return Ok(());
        }
        let (layout, zovn, key, ns, ports) = (
            self.layout.clone(),
            self.zovn.clone(),
            d.key.clone(),
            rec.netns.clone(),
            rec.ports.clone(),
        );
        let spawned = blocking(move || responder::spawn(&layout, &zovn, &key, &ns, &ports))
            .await
            .map_err(|source| HelperError::Responder {
                pod: d.key.clone(),
                source,
            })?;
        info!(pod = %d.key, pid = spawned.pid, "responder started");
        self.update(&d.key, |r| r.responder = Some(spawned));
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn call(
        &self,
        d: &DesiredPod,
        node: &CniNode,
        net: &NetworkConfig,
        rec: &PodRecord,
        command: &str,
        prev: Option<&Value>,
        ifname: &str,
    ) -> std::result::Result<Value, CniFailure> {
        CniCall {
            command,
            node,
            container_id: &rec.container_id,
            netns: &rec.netns,
            ifname,
            namespace: &d.namespace,
            name: &d.name,
            uid: &d.uid,
            net,
            prev_result: prev,
        }
        .run()
        .await
    }

    /// CNI DEL of every network of pod `d` (Multus: the secondary networks first, last
    /// first), retried with backoff until the plugin succeeds, as kubelet keeps a sandbox
    /// until its DEL succeeds: giving up would leave the pod's OVS port, LSP and socket
    /// directory behind. Each failure is logged and shown in the pod's record.
    async fn del_until_done(&self, d: &DesiredPod, node: &CniNode, rec: &PodRecord) {
        let mut delay = Duration::ZERO;
        for attempt in 1u32.. {
            let r = match network_config(node, &d.key) {
                Err(e) => Err((e.transient, e.message)),
                Ok(base) => {
                    let net = match &d.network {
                        Some(Ok(c)) => super::cni_exec::delegate_config(&base, c)
                            .unwrap_or_else(|_| base.clone()),
                        _ => base.clone(),
                    };
                    match self.del_secondaries(d, node, &base, rec, false).await {
                        Err(e) => Err((e.transient(), e.to_string())),
                        Ok(()) => self
                            .call(d, node, &net, rec, "DEL", rec.result.as_ref(), IFNAME)
                            .await
                            .map(drop)
                            .map_err(|e| (e.transient(), e.to_string())),
                    }
                }
            };
            let Err((transient, message)) = r else {
                return;
            };
            delay = next_delay(delay, transient);
            warn!(pod = %d.key, attempt, retry_in = ?delay, error = %message, "CNI DEL failed");
            self.update(&d.key, |r| {
                r.message = Some(format!(
                    "CNI DEL failed (attempt {attempt}, next in {delay:?}): {message}"
                ));
            });
            tokio::time::sleep(delay).await;
        }
    }

    /// Undoes everything for pod `d`: responder, CNI DEL (until it succeeds), netns, record.
    async fn teardown(&self, d: &DesiredPod) {
        let Some(rec) = self.record(&d.key) else {
            return;
        };
        if rec.uid != d.uid {
            return;
        }
        self.update(&d.key, |r| {
            r.phase = PodPhase::Terminating;
            r.ready = false;
        });
        if let Some(resp) = rec.responder.clone() {
            let key = d.key.clone();
            if let Err(e) = blocking(move || stop_daemon(&resp).map(drop)).await {
                warn!(pod = %key, error = %e, "stopping the responder failed");
            }
        }
        let (layout, ns) = (self.layout.clone(), rec.netns.clone());
        if let Err(e) = blocking(move || super::vhost_pod::stop(&layout, &ns)).await {
            warn!(pod = %d.key, error = %e, "stopping the vhost-user testpmd failed");
        }
        let (layout, ns) = (self.layout.clone(), rec.netns.clone());
        if let Err(e) = blocking(move || super::vm_pod::stop(&layout, &ns)).await {
            warn!(pod = %d.key, error = %e, "stopping the QEMU guest failed");
        }
        if let Some(node) = self.node(&rec.node) {
            self.del_until_done(d, node, &rec).await;
        }
        let ns = rec.netns.clone();
        if let Err(e) = blocking(move || netns::delete(&ns)).await {
            warn!(pod = %d.key, netns = %rec.netns, error = %e, "deleting the pod netns failed");
            self.update(&d.key, |r| r.message = Some(format!("delete netns: {e}")));
            return;
        }
        let _ = std::fs::remove_file(responder::pidfile(&self.layout, &rec.netns));
        let mut st = self.lock();
        st.pods.remove(&d.key);
        if let Err(e) = self.save(&st) {
            warn!(pod = %d.key, error = %e, "saving pods.json failed");
        }
        info!(pod = %d.key, netns = %rec.netns, "pod torn down");
    }

    /// The pod as `get` shows it: `status` (phase, hostIP, podIP(s), Ready condition)
    /// and the netns/datapath annotations, from the runtime's record (if its uid matches).
    pub fn decorate(&self, pod: &mut Value) {
        let key = format!(
            "{}/{}",
            pod["metadata"]["namespace"].as_str().unwrap_or("default"),
            pod["metadata"]["name"].as_str().unwrap_or("")
        );
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let Some(obj) = pod.as_object_mut() else {
            return;
        };
        let rec = self.record(&key).filter(|r| r.uid == uid);
        let Some(rec) = rec else {
            return;
        };
        let host_ip = self
            .node(&rec.node)
            .map(|n| n.host_ip.clone())
            .unwrap_or_default();
        let ips: Vec<&str> = rec
            .ips
            .iter()
            .map(|a| a.split('/').next().unwrap_or(a))
            .collect();
        let phase = match rec.phase {
            PodPhase::Running => "Running",
            PodPhase::Pending | PodPhase::Terminating => "Pending",
        };
        let mut status = json!({
            "phase": phase,
            "hostIP": host_ip,
            "conditions": [{
                "type": "Ready",
                "status": if rec.ready { "True" } else { "False" },
                "reason": if rec.ready { "CNIAddSucceeded" } else { "ContainersNotReady" },
                "message": rec.message.clone().unwrap_or_default(),
            }],
        });
        if let Some(first) = ips.first() {
            status["podIP"] = json!(first);
            status["podIPs"] = json!(ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>());
        }
        obj.insert("status".into(), status);
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(meta) = meta {
            let ann = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Some(ann) = ann.as_object_mut() {
                ann.insert(NETNS_ANNOTATION.into(), json!(rec.netns));
                if let Some(dp) = &rec.datapath {
                    ann.insert(DATAPATH_ANNOTATION.into(), json!(dp));
                }
                let ns = key.split_once('/').map_or("default", |(n, _)| n);
                let annotations: BTreeMap<String, String> = ann
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect();
                // Multus names a NAD-based default network `<ns>/<name>`
                let primary = super::networks::default_network(ns, &annotations)
                    .unwrap_or_else(|| cni::conflist::NETWORK_NAME.to_string());
                let secondaries = super::networks::load(&self.layout, &rec.netns);
                if let Some(st) =
                    super::networks::network_status(&primary, rec.result.as_ref(), &secondaries)
                {
                    ann.insert(api::keys::NETWORK_STATUS.into(), json!(st.to_string()));
                }
            }
        }
    }
}

fn network_config(node: &CniNode, key: &str) -> Result<NetworkConfig, SetupError> {
    match load_network_config(&node.conf_dir) {
        Ok(Some(net)) => Ok(net),
        Ok(None) => Err(SetupError::waiting(format!(
            "pod {key}: no CNI config in {} yet (node agent zstack-ovnkube-node not running \
             on {}?)",
            node.conf_dir.display(),
            node.name
        ))),
        Err(e) => Err(SetupError::failed(format!("pod {key}: {e}"))),
    }
}

/// Resolves once `gone` says the pod was deleted; never if the runtime stops (the sender
/// is dropped).
async fn deleted(gone: &mut watch::Receiver<bool>) {
    loop {
        if *gone.borrow_and_update() {
            return;
        }
        if gone.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| LabError::Invalid(format!("a runtime worker failed: {e}")))?
}

/// A pod's task and how to tell it the pod is gone.
struct PodTask {
    uid: String,
    /// Spawned while the pod's NetworkAttachmentDefinition was missing.
    waits_for_nad: bool,
    gone: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

impl PodTask {
    fn spawn(rt: Arc<PodRuntime>, d: DesiredPod) -> PodTask {
        let (tx, rx) = watch::channel(false);
        let uid = d.uid.clone();
        let waits_for_nad = !d.nads_resolved();
        let handle = tokio::spawn(pod_lifecycle(rt, d, rx));
        PodTask {
            uid,
            waits_for_nad,
            gone: tx,
            handle,
        }
    }
}

/// Backoff while waiting for the agent or the controller, and after real failures.
fn next_delay(prev: Duration, transient: bool) -> Duration {
    let (first, max) = if transient {
        (Duration::from_millis(250), Duration::from_secs(5))
    } else {
        (Duration::from_secs(1), Duration::from_secs(30))
    };
    if prev.is_zero() {
        first
    } else {
        (prev * 2).clamp(first, max)
    }
}

async fn pod_lifecycle(rt: Arc<PodRuntime>, d: DesiredPod, mut gone: watch::Receiver<bool>) {
    let mut delay = Duration::ZERO;
    loop {
        if *gone.borrow() {
            return rt.teardown(&d).await;
        }
        match rt.setup(&d, &mut gone).await {
            Ok(()) => {
                rt.follow_datapath(&d).await;
                break;
            }
            Err(e) => {
                delay = next_delay(delay, e.transient);
                if e.transient {
                    tracing::debug!(pod = %d.key, retry_in = ?delay, "{}", e.message);
                } else {
                    warn!(pod = %d.key, retry_in = ?delay, "{}", e.message);
                }
                rt.update(&d.key, |r| {
                    r.ready = false;
                    r.phase = PodPhase::Pending;
                    r.message = Some(e.message.clone());
                });
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = deleted(&mut gone) => {}
                }
            }
        }
    }
    loop {
        tokio::select! {
            r = gone.changed() => {
                if r.is_err() {
                    return; // the runtime stops: leave the pod as it is
                }
                if *gone.borrow() {
                    return rt.teardown(&d).await;
                }
            }
            _ = tokio::time::sleep(HEALTH) => {
                if let Err(e) = rt.ensure_vhost(&d).await {
                    warn!(pod = %d.key, error = %e, "restarting the vhost-user testpmd failed");
                }
                if let Err(e) = rt.ensure_responder(&d).await {
                    warn!(pod = %d.key, error = %e, "restarting the responder failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        let mut d = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..8 {
            d = next_delay(d, true);
            seen.push(d.as_millis());
        }
        assert_eq!(seen, [250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
        assert_eq!(next_delay(Duration::ZERO, false), Duration::from_secs(1));
        assert_eq!(
            next_delay(Duration::from_secs(20), false),
            Duration::from_secs(30)
        );
    }
}
