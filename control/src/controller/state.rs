//! The controller's copy of the cluster objects, fed by source [`Event`]s.

use std::collections::{BTreeMap, BTreeSet};

use crate::crd::Subnet;
use crate::model::{NodeInfo, PodInfo};
use crate::services::{EndpointSliceInfo, ServiceInfo};
use crate::source::{Event, Kind};

/// Objects by key, and which kinds have completed their initial list.
#[derive(Default)]
pub struct ClusterState {
    pub subnets: BTreeMap<String, Subnet>,
    /// By `namespace/name`.
    pub pods: BTreeMap<String, PodInfo>,
    pub nodes: BTreeMap<String, NodeInfo>,
    /// KubeVirt VirtualMachines, `namespace/name`: their addresses outlive their pods.
    pub vms: BTreeSet<String>,
    /// Services by `namespace/name`.
    pub services: BTreeMap<String, ServiceInfo>,
    /// EndpointSlices by `namespace/<slice name>`.
    pub endpoint_slices: BTreeMap<String, EndpointSliceInfo>,
    /// Namespaces by name.
    pub namespaces: BTreeMap<String, crate::model::NamespaceInfo>,
    /// NetworkPolicies by `namespace/name`.
    pub policies: BTreeMap<String, k8s_openapi::api::networking::v1::NetworkPolicy>,
    /// NetworkAttachmentDefinitions by `namespace/name` (secondary networks).
    pub nads: BTreeMap<String, crate::multus::NadInfo>,
    synced: BTreeSet<Kind>,
    /// Keys seen since a re-list of that kind began (a re-list replaces the kind's objects).
    relisting: BTreeMap<Kind, BTreeSet<String>>,
}

impl ClusterState {
    /// True once every kind ([`Kind::ALL`]) has been listed.
    pub fn is_synced(&self) -> bool {
        Kind::ALL.iter().all(|k| self.synced.contains(k))
    }

    fn seen(&mut self, kind: Kind, key: &str) {
        if let Some(keys) = self.relisting.get_mut(&kind) {
            keys.insert(key.to_string());
        }
    }

    /// Applies one event.
    pub fn apply(&mut self, ev: Event) {
        match ev {
            Event::Subnet(s) => {
                let name = s.metadata.name.clone().unwrap_or_default();
                self.seen(Kind::Subnet, &name);
                self.subnets.insert(name, *s);
            }
            Event::SubnetDeleted(name) => {
                self.subnets.remove(&name);
            }
            Event::Pod(p) => {
                let key = p.key();
                self.seen(Kind::Pod, &key);
                self.pods.insert(key, *p);
            }
            Event::PodDeleted(key) => {
                self.pods.remove(&key);
            }
            Event::Node(n) => {
                self.seen(Kind::Node, &n.name.clone());
                self.nodes.insert(n.name.clone(), *n);
            }
            Event::NodeDeleted(name) => {
                self.nodes.remove(&name);
            }
            Event::Vm(key) => {
                self.seen(Kind::Vm, &key);
                self.vms.insert(key);
            }
            Event::VmDeleted(key) => {
                self.vms.remove(&key);
            }
            Event::Service(s) => {
                let key = s.key();
                if !s.problems.is_empty() {
                    tracing::warn!(service = %key, problems = %s.problems.join("; "), "Service partly unusable; those parts are skipped");
                }
                if s.internal_local {
                    tracing::info!(service = %key, "internalTrafficPolicy: Local is served by every endpoint (switches span nodes)");
                }
                self.seen(Kind::Service, &key);
                self.services.insert(key, *s);
            }
            Event::ServiceDeleted(key) => {
                self.services.remove(&key);
            }
            Event::EndpointSlice(s) => {
                let key = s.key();
                self.seen(Kind::EndpointSlice, &key);
                self.endpoint_slices.insert(key, *s);
            }
            Event::EndpointSliceDeleted(key) => {
                self.endpoint_slices.remove(&key);
            }
            Event::Namespace(n) => {
                self.seen(Kind::Namespace, &n.name.clone());
                self.namespaces.insert(n.name.clone(), *n);
            }
            Event::NamespaceDeleted(name) => {
                self.namespaces.remove(&name);
            }
            Event::NetworkPolicy(p) => {
                let key = crate::source::netpol::policy_key(&p);
                self.seen(Kind::NetworkPolicy, &key);
                self.policies.insert(key, *p);
            }
            Event::NetworkPolicyDeleted(key) => {
                self.policies.remove(&key);
            }
            Event::Nad(n) => {
                let key = n.key();
                self.seen(Kind::Nad, &key);
                self.nads.insert(key, *n);
            }
            Event::NadDeleted(key) => {
                self.nads.remove(&key);
            }
            Event::Relist(kind) => {
                self.relisting.insert(kind, BTreeSet::new());
            }
            Event::Synced(kind) => {
                if let Some(keys) = self.relisting.remove(&kind) {
                    match kind {
                        Kind::Subnet => self.subnets.retain(|k, _| keys.contains(k)),
                        Kind::Pod => self.pods.retain(|k, _| keys.contains(k)),
                        Kind::Node => self.nodes.retain(|k, _| keys.contains(k)),
                        Kind::Vm => self.vms.retain(|k| keys.contains(k)),
                        Kind::Service => self.services.retain(|k, _| keys.contains(k)),
                        Kind::EndpointSlice => self.endpoint_slices.retain(|k, _| keys.contains(k)),
                        Kind::Namespace => self.namespaces.retain(|k, _| keys.contains(k)),
                        Kind::NetworkPolicy => self.policies.retain(|k, _| keys.contains(k)),
                        Kind::Nad => self.nads.retain(|k, _| keys.contains(k)),
                    }
                }
                self.synced.insert(kind);
            }
        }
    }
}
