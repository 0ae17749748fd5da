//! [`LabStore`]: the objects of a lab — what the controller sees through
//! [`MemoryStore`] (Subnets, Pods as [`PodInfo`], Nodes), plus what only the lab keeps
//! (Namespaces, each Pod's full spec such as container ports).
//!
//! Apply follows `kubectl apply`: a new object is created; a changed one is updated
//! (annotations the controller wrote are kept, a Subnet's status too); an identical one is
//! left alone. The store stamps `metadata.creationTimestamp` and `uid` on creation, and a
//! Subnet's `generation` (1, +1 on each spec change). A Pod without `spec.nodeName` is
//! placed on the lab's nodes round-robin (deterministic: the n-th such new pod of a store
//! holding k pods goes to node `(k + n) mod N`); `nodeName: node<i>` is shorthand for the
//! lab's node i (`<prefix>-node<i>`). A pod's node cannot change.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

use control::crd::Subnet;
use control::model::{NodeInfo, PodInfo};
use control::source::convert::pod_info;
use control::source::memory::MemoryStore;
use k8s_openapi::api::core::v1::{Namespace, NamespaceStatus, Node, NodeAddress, NodeStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::objects::{DEFAULT_NAMESPACE, LabObject};
use super::protocol::{Action, Change, ObjectRef, ResourceKind};
use crate::pods::networks::NadUnresolved;
use crate::pods::{DesiredPod, PodSource, PortSpec, Proto};

mod refusal;
pub use refusal::{ApplyError, ApplyProblem, PlacementError, UnknownNode};

/// A lab node as registered in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabNode {
    /// The Node name: the chassis name / hostname the lab sets (`<prefix>-node<i>`).
    pub name: String,
    /// 1-based lab node index.
    pub index: usize,
    /// The node's underlay (tunnel endpoint) address.
    pub address: IpAddr,
}

/// Everything the store holds, as saved to `store.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub namespaces: Vec<Namespace>,
    pub subnets: Vec<Subnet>,
    /// With every annotation (the user's and the controller's).
    pub pods: Vec<Pod>,
    /// Node name → annotations the controller wrote (management port addresses).
    pub node_annotations: BTreeMap<String, BTreeMap<String, String>>,
    /// Services (with their allocated cluster IPs and node ports).
    #[serde(default)]
    pub services: Vec<k8s_openapi::api::core::v1::Service>,
    /// NetworkPolicies.
    #[serde(default)]
    pub policies: Vec<k8s_openapi::api::networking::v1::NetworkPolicy>,
    /// NetworkAttachmentDefinitions.
    #[serde(default)]
    pub nads: Vec<crate::multus::NetworkAttachmentDefinition>,
}

#[derive(Default)]
struct Extra {
    namespaces: BTreeMap<String, Namespace>,
    /// By `namespace/name`; annotations as last applied (the controller's are in `mem`).
    pods: BTreeMap<String, Pod>,
    /// Services by `namespace/name`.
    services: BTreeMap<String, k8s_openapi::api::core::v1::Service>,
    /// NetworkPolicies by `namespace/name`.
    policies: BTreeMap<String, k8s_openapi::api::networking::v1::NetworkPolicy>,
    /// NetworkAttachmentDefinitions by `namespace/name`.
    nads: BTreeMap<String, crate::multus::NetworkAttachmentDefinition>,
}

/// The store (see the module docs).
pub struct LabStore {
    mem: MemoryStore,
    nodes: Vec<LabNode>,
    extra: Mutex<Extra>,
    /// Signalled after every apply/delete (the pod runtime waits on it).
    changed: tokio::sync::Notify,
}

impl LabStore {
    /// A store over `mem` for a lab with `nodes`.
    pub fn new(mem: MemoryStore, nodes: Vec<LabNode>) -> LabStore {
        LabStore {
            mem,
            nodes,
            extra: Mutex::new(Extra::default()),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Extra> {
        // every critical section leaves the maps consistent
        self.extra.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notified after every apply and delete.
    pub fn changed(&self) -> &tokio::sync::Notify {
        &self.changed
    }

    /// The pods the pod runtime should run: not hostNetwork, not completed, on a node;
    /// with their uid and container ports.
    pub fn runtime_pods(&self) -> Vec<DesiredPod> {
        let extra = self.lock();
        self.network_pods()
            .into_iter()
            .filter_map(|info| {
                let pod = extra.pods.get(&info.key())?;
                let mut ports: Vec<PortSpec> = pod
                    .spec
                    .iter()
                    .flat_map(|s| s.containers.iter())
                    .flat_map(|c| c.ports.iter().flatten())
                    .filter_map(|p| {
                        let proto = match p.protocol.as_deref().unwrap_or("TCP") {
                            "TCP" => Proto::Tcp,
                            "UDP" => Proto::Udp,
                            _ => return None,
                        };
                        Some(PortSpec {
                            port: u16::try_from(p.container_port).ok().filter(|p| *p > 0)?,
                            proto,
                        })
                    })
                    .collect();
                ports.sort();
                ports.dedup();
                let network = crate::multus::default_network(&info.namespace, &info.annotations)
                    .map(|key| match extra.nads.get(&key) {
                        Some(n) => Ok(n.spec.config.clone()),
                        None => Err(NadUnresolved::NotFound { nad: key }),
                    });
                let secondary = crate::multus::secondary_networks(&extra.nads, &info);
                Some(DesiredPod {
                    key: info.key(),
                    namespace: info.namespace.clone(),
                    name: info.name.clone(),
                    uid: info.uid.clone(),
                    node: info.node.clone()?,
                    ports,
                    network,
                    secondary,
                    vm: crate::pods::vm_pod::VmBoot::of_annotations(&info.annotations),
                })
            })
            .collect()
    }

    /// The lab's nodes.
    pub fn nodes(&self) -> &[LabNode] {
        &self.nodes
    }

    /// The store the controller reads and writes.
    pub fn memory(&self) -> &MemoryStore {
        &self.mem
    }

    /// Loads a saved snapshot and registers the lab's nodes (with the annotations the
    /// snapshot kept). Call once, before [`MemoryStore::mark_synced`].
    pub fn restore(&self, snap: Snapshot) {
        let mut extra = self.lock();
        for ns in snap.namespaces {
            let name = ns.metadata.name.clone().unwrap_or_default();
            self.mem
                .apply_namespace(control::source::convert::namespace_info(&ns));
            extra.namespaces.insert(name, ns);
        }
        for p in snap.policies {
            extra
                .policies
                .insert(control::source::netpol::policy_key(&p), p.clone());
            self.mem.apply_network_policy(p);
        }
        for n in snap.nads {
            self.mem.apply_nad(crate::multus::nad_info(&n));
            extra.nads.insert(n.key(), n);
        }
        for sn in snap.subnets {
            self.mem.apply_subnet(sn);
        }
        for pod in snap.pods {
            let info = pod_info(&pod);
            extra.pods.insert(info.key(), pod);
            self.mem.apply_pod(info);
        }
        for svc in snap.services {
            let info = control::services::convert::service_info(&svc);
            extra.services.insert(info.key(), svc);
            self.mem.apply_service(info);
        }
        drop(extra);
        for n in &self.nodes {
            let mut labels = BTreeMap::new();
            labels.insert("kubernetes.io/hostname".to_string(), n.name.clone());
            self.mem.apply_node(NodeInfo {
                name: n.name.clone(),
                addresses: vec![n.address],
                labels,
                annotations: snap
                    .node_annotations
                    .get(&n.name)
                    .cloned()
                    .unwrap_or_default(),
            });
        }
    }

    /// Everything, for `store.json`.
    pub fn snapshot(&self) -> Snapshot {
        let extra = self.lock();
        Snapshot {
            namespaces: extra.namespaces.values().cloned().collect(),
            subnets: self.mem.subnets(),
            pods: extra
                .pods
                .values()
                .map(|p| self.with_annotations(p))
                .collect(),
            node_annotations: self
                .nodes
                .iter()
                .filter_map(|n| Some((n.name.clone(), self.mem.node(&n.name)?.annotations)))
                .filter(|(_, a)| !a.is_empty())
                .collect(),
            services: extra.services.values().cloned().collect(),
            policies: extra.policies.values().cloned().collect(),
            nads: extra.nads.values().cloned().collect(),
        }
    }

    /// A stored pod with every annotation it carries now (the controller's included).
    fn with_annotations(&self, pod: &Pod) -> Pod {
        let mut pod = pod.clone();
        if let Some(info) = self.mem.pod(&pod_key(&pod)) {
            pod.metadata.annotations = (!info.annotations.is_empty()).then_some(info.annotations);
        }
        pod
    }

    /// Applies `objects` in order. Every object is checked first (node names, immutable
    /// fields); on any problem nothing is applied and the error lists every problem.
    pub fn apply(&self, objects: Vec<LabObject>) -> Result<Vec<Change>, ApplyError> {
        let mut extra = self.lock();
        let mut next_slot = extra.pods.len();
        let mut planned = Vec::with_capacity(objects.len());
        let mut problems = Vec::new();
        let mut batch: Vec<k8s_openapi::api::core::v1::Service> = Vec::new();
        for o in objects {
            match o {
                LabObject::Pod(pod) => match self.place_pod(&extra, *pod, &mut next_slot) {
                    Ok(p) => planned.push(LabObject::Pod(Box::new(p))),
                    Err(e) => problems.push(e),
                },
                LabObject::Service(mut svc) => {
                    let key = pod_key_of(&svc.metadata);
                    let old = extra.services.get(&key);
                    // allocations of earlier Services of this batch count as taken
                    let others: Vec<_> = extra
                        .services
                        .iter()
                        .filter(|(k, _)| **k != key)
                        .map(|(_, v)| v)
                        .chain(batch.iter().filter(|s| pod_key_of(&s.metadata) != key))
                        .collect();
                    match super::services::allocate(&mut svc, old, &others) {
                        Ok(()) => {
                            batch.push((*svc).clone());
                            planned.push(LabObject::Service(svc));
                        }
                        Err(reason) => problems.push(ApplyProblem::Service {
                            service: key,
                            reason,
                        }),
                    }
                }
                other => planned.push(other),
            }
        }
        if !problems.is_empty() {
            return Err(ApplyError(problems));
        }
        let changes = planned
            .into_iter()
            .map(|o| {
                let object = o.object_ref().to_string();
                let action = match o {
                    LabObject::Namespace(ns) => {
                        let info = control::source::convert::namespace_info(&ns);
                        let action = apply_namespace(&mut extra, *ns);
                        if action != Action::Unchanged {
                            self.mem.apply_namespace(info);
                        }
                        action
                    }
                    LabObject::NetworkPolicy(p) => {
                        super::netpol::apply(&mut extra.policies, &self.mem, *p)
                    }
                    LabObject::Subnet(sn) => self.apply_subnet(*sn),
                    LabObject::NetworkAttachmentDefinition(n) => {
                        let info = crate::multus::nad_info(&n);
                        let action = apply_nad(&mut extra, *n);
                        self.mem.apply_nad(info);
                        action
                    }
                    LabObject::Pod(pod) => self.apply_pod(&mut extra, *pod),
                    LabObject::Service(svc) => self.apply_service(&mut extra, *svc),
                };
                Change { object, action }
            })
            .collect();
        drop(extra);
        self.changed.notify_one();
        Ok(changes)
    }

    /// Resolves the pod's node (given, shorthand, kept, or round-robin) and checks it.
    fn place_pod(
        &self,
        extra: &Extra,
        mut pod: Pod,
        next_slot: &mut usize,
    ) -> Result<Pod, ApplyProblem> {
        let key = pod_key(&pod);
        let refuse = |reason: PlacementError| ApplyProblem::Pod {
            pod: key.clone(),
            reason,
        };
        let current = extra
            .pods
            .get(&key)
            .and_then(|p| p.spec.as_ref()?.node_name.clone());
        let spec = pod.spec.get_or_insert_with(Default::default);
        let node = match spec.node_name.as_deref() {
            Some(n) => self.resolve_node(n).map_err(|e| refuse(e.into()))?,
            None => match &current {
                Some(c) => c.clone(),
                None => {
                    let Some(n) = self.nodes.get(*next_slot % self.nodes.len().max(1)) else {
                        return Err(refuse(PlacementError::NoNodes));
                    };
                    *next_slot += 1;
                    n.name.clone()
                }
            },
        };
        if let Some(c) = current
            && c != node
        {
            return Err(refuse(PlacementError::NodeChange {
                current: c,
                wanted: node,
            }));
        }
        spec.node_name = Some(node);
        Ok(pod)
    }

    /// A node name as given, or `node<i>` as shorthand for lab node i.
    fn resolve_node(&self, name: &str) -> Result<String, UnknownNode> {
        if self.nodes.iter().any(|n| n.name == name) {
            return Ok(name.to_string());
        }
        let by_index = name
            .strip_prefix("node")
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| self.nodes.iter().find(|n| n.index == i));
        match by_index {
            Some(n) => Ok(n.name.clone()),
            None => Err(UnknownNode {
                name: name.to_string(),
                nodes: self.nodes.iter().map(|n| n.name.clone()).collect(),
            }),
        }
    }

    fn apply_subnet(&self, mut sn: Subnet) -> Action {
        let name = sn.metadata.name.clone().unwrap_or_default();
        let old = self.mem.subnet(&name);
        let meta = &mut sn.metadata;
        let action = match &old {
            None => {
                meta.generation = Some(1);
                stamp_new(meta);
                Action::Created
            }
            Some(old) => {
                let same_spec = old.spec == sn.spec;
                if same_spec
                    && old.metadata.labels == meta.labels
                    && old.metadata.annotations == meta.annotations
                {
                    return Action::Unchanged;
                }
                let generation = old.metadata.generation.unwrap_or(1);
                meta.generation = Some(if same_spec {
                    generation
                } else {
                    generation + 1
                });
                keep_stamps(meta, &old.metadata);
                Action::Configured
            }
        };
        // status None: the store keeps the status the controller wrote
        sn.status = None;
        self.mem.apply_subnet(sn);
        action
    }

    fn apply_pod(&self, extra: &mut Extra, mut pod: Pod) -> Action {
        let key = pod_key(&pod);
        let action = match extra.pods.get(&key) {
            None => {
                stamp_new(&mut pod.metadata);
                Action::Created
            }
            Some(old) => {
                let live = self
                    .mem
                    .pod(&key)
                    .map(|p| p.annotations)
                    .unwrap_or_default();
                let same_annotations = pod
                    .metadata
                    .annotations
                    .iter()
                    .flatten()
                    .all(|(k, v)| live.get(k) == Some(v));
                if same_annotations
                    && old.spec == pod.spec
                    && old.metadata.labels == pod.metadata.labels
                {
                    return Action::Unchanged;
                }
                keep_stamps(&mut pod.metadata, &old.metadata);
                Action::Configured
            }
        };
        self.mem.apply_pod(pod_info(&pod));
        extra.pods.insert(key, pod);
        action
    }

    fn apply_service(
        &self,
        extra: &mut Extra,
        mut svc: k8s_openapi::api::core::v1::Service,
    ) -> Action {
        let key = pod_key_of(&svc.metadata);
        let action = match extra.services.get(&key) {
            None => {
                stamp_new(&mut svc.metadata);
                Action::Created
            }
            Some(old)
                if old.spec == svc.spec
                    && old.status == svc.status
                    && old.metadata.labels == svc.metadata.labels =>
            {
                return Action::Unchanged;
            }
            Some(old) => {
                keep_stamps(&mut svc.metadata, &old.metadata);
                Action::Configured
            }
        };
        self.mem
            .apply_service(control::services::convert::service_info(&svc));
        extra.services.insert(key, svc);
        action
    }

    /// Recomputes every Service's EndpointSlices ([`super::endpoints`]) and hands the
    /// changed ones to the controller (unchanged ones emit nothing). `ready` says whether
    /// a pod (`namespace/name`) is Ready.
    pub fn sync_endpoint_slices(&self, ready: &dyn Fn(&str) -> bool) {
        let extra = self.lock();
        let pods: Vec<Pod> = extra
            .pods
            .values()
            .map(|p| self.with_annotations(p))
            .collect();
        let refs: Vec<&Pod> = pods.iter().collect();
        let mut want = BTreeMap::new();
        for svc in extra.services.values() {
            for s in super::endpoints::slices_for(svc, &refs, ready) {
                want.insert(s.key(), s);
            }
        }
        drop(extra);
        for old in self.mem.endpoint_slices() {
            if !want.contains_key(&old.key()) {
                self.mem.delete_endpoint_slice(&old.key());
            }
        }
        for (_, s) in want {
            self.mem.apply_endpoint_slice(s);
        }
    }

    /// Deletes objects (a Namespace takes its pods with it).
    pub fn delete(&self, refs: &[ObjectRef]) -> Vec<Change> {
        let mut extra = self.lock();
        let mut out = Vec::new();
        for r in refs {
            let found = match r.kind {
                ResourceKind::Pod => {
                    let ns = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
                    self.delete_pod(&mut extra, &format!("{ns}/{}", r.name))
                }
                ResourceKind::Subnet => {
                    let found = self.mem.subnet(&r.name).is_some();
                    self.mem.delete_subnet(&r.name);
                    found
                }
                ResourceKind::Namespace => {
                    let found = extra.namespaces.remove(&r.name).is_some();
                    if found {
                        self.mem.delete_namespace(&r.name);
                    }
                    for key in
                        super::netpol::delete_namespace(&mut extra.policies, &self.mem, &r.name)
                    {
                        out.push(Change {
                            object: format!("networkpolicy/{key}"),
                            action: Action::Deleted,
                        });
                    }
                    let prefix = format!("{}/", r.name);
                    let pods: Vec<String> = extra
                        .pods
                        .keys()
                        .filter(|k| k.starts_with(&prefix))
                        .cloned()
                        .collect();
                    for key in pods {
                        if self.delete_pod(&mut extra, &key) {
                            out.push(Change {
                                object: format!("pod/{key}"),
                                action: Action::Deleted,
                            });
                        }
                    }
                    found
                }
                ResourceKind::Service => {
                    let ns = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
                    let key = format!("{ns}/{}", r.name);
                    self.mem.delete_service(&key);
                    extra.services.remove(&key).is_some()
                }
                ResourceKind::NetworkPolicy => {
                    let ns = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
                    super::netpol::delete(
                        &mut extra.policies,
                        &self.mem,
                        &format!("{ns}/{}", r.name),
                    )
                }
                ResourceKind::NetworkAttachmentDefinition => {
                    let ns = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
                    let key = format!("{ns}/{}", r.name);
                    self.mem.delete_nad(&key);
                    extra.nads.remove(&key).is_some()
                }
                // a lab node's Node object goes (as `kubectl delete node` after a node
                // is drained): the controller removes what it built for it, while the
                // lab's processes for that node keep running; a restarted object store
                // registers it again. Slices come and go with their Services.
                ResourceKind::Node => {
                    let found = self.mem.node(&r.name).is_some();
                    self.mem.delete_node(&r.name);
                    found
                }
                ResourceKind::EndpointSlice => false,
            };
            out.push(Change {
                object: r.to_string(),
                action: if found {
                    Action::Deleted
                } else {
                    Action::NotFound
                },
            });
        }
        drop(extra);
        self.changed.notify_one();
        out
    }

    fn delete_pod(&self, extra: &mut Extra, key: &str) -> bool {
        let found = extra.pods.remove(key).is_some();
        self.mem.delete_pod(key);
        found
    }

    /// Every object of `kind`, as Kubernetes JSON, sorted by namespace and name.
    pub fn get(&self, kind: ResourceKind) -> Vec<Value> {
        let to_json = |v: Result<Value, serde_json::Error>| v.unwrap_or(Value::Null);
        match kind {
            ResourceKind::Namespace => {
                let extra = self.lock();
                extra
                    .namespaces
                    .values()
                    .map(|n| to_json(serde_json::to_value(n)))
                    .collect()
            }
            ResourceKind::Subnet => self
                .mem
                .subnets()
                .iter()
                .map(|s| to_json(serde_json::to_value(s)))
                .collect(),
            ResourceKind::Pod => {
                let extra = self.lock();
                extra
                    .pods
                    .values()
                    .map(|p| to_json(serde_json::to_value(self.with_annotations(p))))
                    .collect()
            }
            ResourceKind::Service => {
                let extra = self.lock();
                extra
                    .services
                    .values()
                    .map(|s| to_json(serde_json::to_value(s)))
                    .collect()
            }
            ResourceKind::NetworkPolicy => {
                let extra = self.lock();
                extra
                    .policies
                    .values()
                    .map(|p| to_json(serde_json::to_value(p)))
                    .collect()
            }
            ResourceKind::NetworkAttachmentDefinition => {
                let extra = self.lock();
                extra
                    .nads
                    .values()
                    .map(|n| to_json(serde_json::to_value(n)))
                    .collect()
            }
            ResourceKind::EndpointSlice => self
                .mem
                .endpoint_slices()
                .iter()
                .map(super::endpoints::to_json)
                .collect(),
            ResourceKind::Node => self
                .nodes
                .iter()
                .filter_map(|n| self.mem.node(&n.name))
                .map(|n| to_json(serde_json::to_value(node_object(&n))))
                .collect(),
        }
    }

    /// The pods the controller should give an address: not hostNetwork, on a node.
    pub fn network_pods(&self) -> Vec<PodInfo> {
        self.mem
            .pods()
            .into_iter()
            .filter(|p| !p.host_network && !p.completed && p.node.is_some())
            .collect()
    }
}

/// The pod runtime's view of the store.
impl PodSource for LabStore {
    fn desired_pods(&self) -> Vec<DesiredPod> {
        self.runtime_pods()
    }

    fn changed(&self) -> &tokio::sync::Notify {
        LabStore::changed(self)
    }
}

/// Creates or updates a NAD (an identical one is left alone).
fn apply_nad(extra: &mut Extra, mut n: crate::multus::NetworkAttachmentDefinition) -> Action {
    let key = n.key();
    let action = match extra.nads.get(&key) {
        None => {
            stamp_new(&mut n.metadata);
            Action::Created
        }
        Some(old) if old.spec == n.spec && old.metadata.labels == n.metadata.labels => {
            return Action::Unchanged;
        }
        Some(old) => {
            keep_stamps(&mut n.metadata, &old.metadata);
            Action::Configured
        }
    };
    extra.nads.insert(key, n);
    action
}

fn apply_namespace(extra: &mut Extra, mut ns: Namespace) -> Action {
    let name = ns.metadata.name.clone().unwrap_or_default();
    let action = match extra.namespaces.get(&name) {
        None => {
            stamp_new(&mut ns.metadata);
            Action::Created
        }
        Some(old)
            if old.metadata.labels == ns.metadata.labels
                && old.metadata.annotations == ns.metadata.annotations
                && old.spec == ns.spec =>
        {
            return Action::Unchanged;
        }
        Some(old) => {
            keep_stamps(&mut ns.metadata, &old.metadata);
            Action::Configured
        }
    };
    ns.status = Some(NamespaceStatus {
        phase: Some("Active".into()),
        ..Default::default()
    });
    extra.namespaces.insert(name, ns);
    action
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata
            .namespace
            .as_deref()
            .unwrap_or(DEFAULT_NAMESPACE),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// `namespace/name` of a namespaced object.
fn pod_key_of(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE),
        meta.name.as_deref().unwrap_or("")
    )
}

fn stamp_new(meta: &mut ObjectMeta) {
    meta.creation_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    meta.uid = Some(uuid::Uuid::new_v4().to_string());
}

fn keep_stamps(meta: &mut ObjectMeta, old: &ObjectMeta) {
    meta.creation_timestamp = old.creation_timestamp.clone();
    meta.uid = old.uid.clone();
}

fn node_object(n: &NodeInfo) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(n.name.clone()),
            labels: Some(n.labels.clone()),
            annotations: (!n.annotations.is_empty()).then(|| n.annotations.clone()),
            ..Default::default()
        },
        spec: None,
        status: Some(NodeStatus {
            addresses: Some(
                n.addresses
                    .iter()
                    .map(|a| NodeAddress {
                        type_: "InternalIP".into(),
                        address: a.to_string(),
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests;
