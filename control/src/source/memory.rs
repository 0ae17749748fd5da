//! An in-process object store: the lab's and the tests' stand-in for the Kubernetes API.
//!
//! Applying or deleting an object emits the same [`Event`]s a watch would; the controller's
//! writes (annotations, Subnet status) land in the stored objects and are emitted again as
//! updates, as the API server's watch does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use super::{Event, Kind, WriteError, Writer};
use crate::crd::{Subnet, SubnetStatus};
use crate::model::{NodeInfo, PodInfo};
use crate::services::{EndpointSliceInfo, ServiceInfo};

#[derive(Default)]
struct Objects {
    subnets: BTreeMap<String, Subnet>,
    pods: BTreeMap<String, PodInfo>,
    nodes: BTreeMap<String, NodeInfo>,
    vms: std::collections::BTreeSet<String>,
    /// Warning events on NetworkPolicies: `namespace/name: message`.
    policy_events: Vec<String>,
    service_events: Vec<String>,
    node_events: Vec<String>,
    subnet_events: Vec<String>,
    services: BTreeMap<String, ServiceInfo>,
    endpoint_slices: BTreeMap<String, EndpointSliceInfo>,
    nads: BTreeMap<String, crate::multus::NadInfo>,
}

/// The store. Cheap to clone; every clone sees the same objects.
#[derive(Clone)]
pub struct MemoryStore {
    objects: Arc<Mutex<Objects>>,
    tx: mpsc::UnboundedSender<Event>,
}

impl MemoryStore {
    /// A new empty store and the event stream the controller consumes.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            MemoryStore {
                objects: Arc::new(Mutex::new(Objects::default())),
                tx,
            },
            rx,
        )
    }

    fn lock(&self) -> MutexGuard<'_, Objects> {
        // A panic while holding the lock cannot leave the maps half-updated (each
        // critical section is a single insert/remove), so a poisoned lock is still usable.
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn emit(&self, ev: Event) {
        // The controller is gone only at shutdown; nothing to tell then.
        let _ = self.tx.send(ev);
    }

    /// Says every kind has been listed (what a watch's initial list ends with).
    pub fn mark_synced(&self) {
        for k in Kind::ALL {
            self.emit(Event::Synced(*k));
        }
    }

    pub fn apply_subnet(&self, subnet: Subnet) {
        let name = subnet.metadata.name.clone().unwrap_or_default();
        let mut objs = self.lock();
        // Like the API server: a spec update keeps the status the controller wrote.
        let mut subnet = subnet;
        if subnet.status.is_none() {
            subnet.status = objs.subnets.get(&name).and_then(|s| s.status.clone());
        }
        objs.subnets.insert(name, subnet.clone());
        drop(objs);
        self.emit(Event::Subnet(Box::new(subnet)));
    }

    pub fn delete_subnet(&self, name: &str) {
        if self.lock().subnets.remove(name).is_some() {
            self.emit(Event::SubnetDeleted(name.to_string()));
        }
    }

    pub fn apply_pod(&self, pod: PodInfo) {
        let key = pod.key();
        let mut objs = self.lock();
        // Keep annotations the controller wrote unless the new object sets them.
        let mut pod = pod;
        if let Some(old) = objs.pods.get(&key) {
            for (k, v) in &old.annotations {
                pod.annotations
                    .entry(k.clone())
                    .or_insert_with(|| v.clone());
            }
        }
        objs.pods.insert(key, pod.clone());
        drop(objs);
        self.emit(Event::Pod(Box::new(pod)));
    }

    pub fn delete_pod(&self, key: &str) {
        if self.lock().pods.remove(key).is_some() {
            self.emit(Event::PodDeleted(key.to_string()));
        }
    }

    pub fn apply_node(&self, node: NodeInfo) {
        let name = node.name.clone();
        self.lock().nodes.insert(name, node.clone());
        self.emit(Event::Node(Box::new(node)));
    }

    pub fn delete_node(&self, name: &str) {
        if self.lock().nodes.remove(name).is_some() {
            self.emit(Event::NodeDeleted(name.to_string()));
        }
    }

    /// A KubeVirt VirtualMachine `namespace/name` exists (its pods keep their addresses
    /// while it does).
    pub fn apply_vm(&self, key: &str) {
        self.lock().vms.insert(key.to_string());
        self.emit(Event::Vm(key.to_string()));
    }

    pub fn delete_vm(&self, key: &str) {
        if self.lock().vms.remove(key) {
            self.emit(Event::VmDeleted(key.to_string()));
        }
    }

    /// Creates or replaces a NetworkAttachmentDefinition; an identical one emits nothing.
    pub fn apply_nad(&self, nad: crate::multus::NadInfo) {
        let key = nad.key();
        let mut objs = self.lock();
        if objs.nads.get(&key) == Some(&nad) {
            return;
        }
        objs.nads.insert(key, nad.clone());
        drop(objs);
        self.emit(Event::Nad(Box::new(nad)));
    }

    /// Deletes a NetworkAttachmentDefinition (`namespace/name`).
    pub fn delete_nad(&self, key: &str) {
        if self.lock().nads.remove(key).is_some() {
            self.emit(Event::NadDeleted(key.to_string()));
        }
    }

    /// Creates or replaces a Service.
    pub fn apply_service(&self, svc: ServiceInfo) {
        self.lock().services.insert(svc.key(), svc.clone());
        self.emit(Event::Service(Box::new(svc)));
    }

    /// Deletes a Service (`namespace/name`).
    pub fn delete_service(&self, key: &str) {
        if self.lock().services.remove(key).is_some() {
            self.emit(Event::ServiceDeleted(key.to_string()));
        }
    }

    /// Creates or replaces an EndpointSlice; an identical one emits nothing.
    pub fn apply_endpoint_slice(&self, slice: EndpointSliceInfo) {
        let key = slice.key();
        let mut objs = self.lock();
        if objs.endpoint_slices.get(&key) == Some(&slice) {
            return;
        }
        objs.endpoint_slices.insert(key, slice.clone());
        drop(objs);
        self.emit(Event::EndpointSlice(Box::new(slice)));
    }

    /// Deletes an EndpointSlice (`namespace/<slice name>`).
    pub fn delete_endpoint_slice(&self, key: &str) {
        if self.lock().endpoint_slices.remove(key).is_some() {
            self.emit(Event::EndpointSliceDeleted(key.to_string()));
        }
    }

    /// Every stored Service.
    pub fn services(&self) -> Vec<ServiceInfo> {
        self.lock().services.values().cloned().collect()
    }

    /// Every stored EndpointSlice.
    pub fn endpoint_slices(&self) -> Vec<EndpointSliceInfo> {
        self.lock().endpoint_slices.values().cloned().collect()
    }

    /// The stored pod (with the annotations the controller wrote).
    pub fn pod(&self, key: &str) -> Option<PodInfo> {
        self.lock().pods.get(key).cloned()
    }

    /// Every stored pod.
    pub fn pods(&self) -> Vec<PodInfo> {
        self.lock().pods.values().cloned().collect()
    }

    /// The stored Subnet (with the status the controller wrote).
    pub fn subnet(&self, name: &str) -> Option<Subnet> {
        self.lock().subnets.get(name).cloned()
    }

    /// Every stored Subnet.
    pub fn subnets(&self) -> Vec<Subnet> {
        self.lock().subnets.values().cloned().collect()
    }

    /// The stored node.
    pub fn node(&self, name: &str) -> Option<NodeInfo> {
        self.lock().nodes.get(name).cloned()
    }

    /// Replays every stored object followed by `Synced` (what a fresh watch sees): used
    /// when a controller restarts against the same store.
    pub fn replay(&self) -> mpsc::UnboundedReceiver<Event> {
        let (tx, rx) = mpsc::unbounded_channel();
        let objs = self.lock();
        for s in objs.subnets.values() {
            let _ = tx.send(Event::Subnet(Box::new(s.clone())));
        }
        for n in objs.nodes.values() {
            let _ = tx.send(Event::Node(Box::new(n.clone())));
        }
        for p in objs.pods.values() {
            let _ = tx.send(Event::Pod(Box::new(p.clone())));
        }
        for v in &objs.vms {
            let _ = tx.send(Event::Vm(v.clone()));
        }
        for s in objs.services.values() {
            let _ = tx.send(Event::Service(Box::new(s.clone())));
        }
        for s in objs.endpoint_slices.values() {
            let _ = tx.send(Event::EndpointSlice(Box::new(s.clone())));
        }
        for n in objs.nads.values() {
            let _ = tx.send(Event::Nad(Box::new(n.clone())));
        }
        for k in Kind::ALL {
            let _ = tx.send(Event::Synced(*k));
        }
        rx
    }
}

impl MemoryStore {
    /// The Warning events recorded on NetworkPolicies (`namespace/name: message`).
    pub fn policy_events(&self) -> Vec<String> {
        self.lock().policy_events.clone()
    }

    /// The Warning events recorded on Services (`namespace/name: message`).
    pub fn service_events(&self) -> Vec<String> {
        self.lock().service_events.clone()
    }

    /// The Warning events recorded on Nodes (`name: reason: message`).
    pub fn node_events(&self) -> Vec<String> {
        self.lock().node_events.clone()
    }

    /// The Warning events recorded on Subnets (`name: message`).
    pub fn subnet_events(&self) -> Vec<String> {
        self.lock().subnet_events.clone()
    }
}

impl Writer for MemoryStore {
    async fn subnet_event(&self, name: &str, message: &str) -> Result<(), WriteError> {
        self.lock().subnet_events.push(format!("{name}: {message}"));
        Ok(())
    }

    async fn node_event(&self, name: &str, reason: &str, message: &str) -> Result<(), WriteError> {
        self.lock()
            .node_events
            .push(format!("{name}: {reason}: {message}"));
        Ok(())
    }

    async fn service_event(
        &self,
        namespace: &str,
        name: &str,
        message: &str,
    ) -> Result<(), WriteError> {
        self.lock()
            .service_events
            .push(format!("{namespace}/{name}: {message}"));
        Ok(())
    }

    async fn policy_event(
        &self,
        namespace: &str,
        name: &str,
        message: &str,
    ) -> Result<(), WriteError> {
        self.lock()
            .policy_events
            .push(format!("{namespace}/{name}: {message}"));
        Ok(())
    }

    async fn annotate_pod(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), WriteError> {
        let key = format!("{namespace}/{name}");
        let pod = {
            let mut objs = self.lock();
            let pod = objs
                .pods
                .get_mut(&key)
                .ok_or_else(|| WriteError::NotFound {
                    object: format!("pod {key}"),
                })?;
            pod.annotations
                .extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
            pod.clone()
        };
        self.emit(Event::Pod(Box::new(pod)));
        Ok(())
    }

    async fn annotate_node(
        &self,
        name: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), WriteError> {
        let node = {
            let mut objs = self.lock();
            let node = objs
                .nodes
                .get_mut(name)
                .ok_or_else(|| WriteError::NotFound {
                    object: format!("node {name}"),
                })?;
            node.annotations
                .extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
            node.clone()
        };
        self.emit(Event::Node(Box::new(node)));
        Ok(())
    }

    async fn create_subnet(&self, subnet: &Subnet) -> Result<Subnet, WriteError> {
        let name = subnet.metadata.name.clone().unwrap_or_default();
        let created = {
            let mut objs = self.lock();
            if let Some(old) = objs.subnets.get(&name) {
                return Ok(old.clone());
            }
            let mut s = subnet.clone();
            s.metadata.creation_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ));
            objs.subnets.insert(name, s.clone());
            s
        };
        self.emit(Event::Subnet(Box::new(created.clone())));
        Ok(created)
    }

    async fn subnet_status(&self, name: &str, status: &SubnetStatus) -> Result<(), WriteError> {
        let subnet = {
            let mut objs = self.lock();
            let s = objs
                .subnets
                .get_mut(name)
                .ok_or_else(|| WriteError::NotFound {
                    object: format!("subnet {name}"),
                })?;
            s.status = Some(status.clone());
            s.clone()
        };
        self.emit(Event::Subnet(Box::new(subnet)));
        Ok(())
    }
}
