//! Where objects come from and where the controller's answers go.
//!
//! A source turns Kubernetes objects into [`Event`]s on a channel; a [`Writer`] patches pod
//! and node annotations and Subnet status. Two implementations:
//!
//! - [`kube`]: kube-runtime watchers and patches against a real kube-apiserver (production);
//! - [`memory`]: an in-process object store (the local lab, tests, benchmarks).

pub mod convert;
mod events;
pub mod kube;
pub mod memory;
pub mod nad;
pub mod netpol;
pub mod services;
mod watch;

/// The field manager name on our patches (and the reporting controller of our events).
pub const FIELD_MANAGER: &str = "zstack-ovnkube-controller";

use std::collections::BTreeMap;
use std::future::Future;

use crate::crd::{Subnet, SubnetStatus};
use crate::model::{NodeInfo, PodInfo};
use crate::services::{EndpointSliceInfo, ServiceInfo};

/// Which kind of object an [`Event::Synced`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Subnet,
    Pod,
    Node,
    /// KubeVirt `VirtualMachine`s (an empty list where KubeVirt is not installed).
    Vm,
    /// Services.
    Service,
    /// EndpointSlices (or core v1 Endpoints on servers without discovery.k8s.io/v1).
    EndpointSlice,
    /// Namespaces (their labels: NetworkPolicy namespaceSelectors).
    Namespace,
    /// networking.k8s.io/v1 NetworkPolicies.
    NetworkPolicy,
    /// Multus NetworkAttachmentDefinitions (an empty list where Multus is not installed).
    Nad,
}

impl Kind {
    /// Every kind: the controller runs once each has been listed.
    pub const ALL: &[Kind] = &[
        Kind::Subnet,
        Kind::Pod,
        Kind::Node,
        Kind::Vm,
        Kind::Service,
        Kind::EndpointSlice,
        Kind::Namespace,
        Kind::NetworkPolicy,
        Kind::Nad,
    ];
}

/// A change of the cluster, as the controller sees it.
#[derive(Clone, Debug)]
pub enum Event {
    Subnet(Box<Subnet>),
    SubnetDeleted(String),
    Pod(Box<PodInfo>),
    /// `namespace/name`.
    PodDeleted(String),
    Node(Box<NodeInfo>),
    NodeDeleted(String),
    /// A KubeVirt VirtualMachine exists: `namespace/name`.
    Vm(String),
    /// `namespace/name`.
    VmDeleted(String),
    Service(Box<ServiceInfo>),
    /// `namespace/name`.
    ServiceDeleted(String),
    EndpointSlice(Box<EndpointSliceInfo>),
    /// `namespace/name` of the slice.
    EndpointSliceDeleted(String),
    Namespace(Box<crate::model::NamespaceInfo>),
    NamespaceDeleted(String),
    NetworkPolicy(Box<k8s_openapi::api::networking::v1::NetworkPolicy>),
    /// `namespace/name`.
    NetworkPolicyDeleted(String),
    /// A NetworkAttachmentDefinition (secondary networks, [`crate::multus`]).
    Nad(Box<crate::multus::NadInfo>),
    /// `namespace/name`.
    NadDeleted(String),
    /// Every object of this kind has been listed once (start-up, or a re-list after a
    /// watch error: objects not re-listed since the previous `Synced` are gone).
    Synced(Kind),
    /// A re-list of this kind starts: the objects that follow up to `Synced` are all there is.
    Relist(Kind),
}

/// Why a write to the object store failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{object} not found")]
    NotFound { object: String },
    #[error("writing {object}: {detail}")]
    Failed { object: String, detail: String },
}

/// Where the controller writes its answers.
pub trait Writer: Send + Sync + 'static {
    /// Merges `annotations` into the pod's annotations.
    fn annotate_pod(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Merges `annotations` into the node's annotations.
    fn annotate_node(
        &self,
        name: &str,
        annotations: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;

    /// Reports a problem of NetworkPolicy `namespace/name` (a Warning event). Writers
    /// without events log only.
    fn policy_event(
        &self,
        namespace: &str,
        name: &str,
        message: &str,
    ) -> impl Future<Output = Result<(), WriteError>> + Send {
        let _ = (namespace, name, message);
        async { Ok(()) }
    }

    /// Reports a problem of Service `namespace/name` (a Warning event). Writers without
    /// events log only.
    fn service_event(
        &self,
        namespace: &str,
        name: &str,
        message: &str,
    ) -> impl Future<Output = Result<(), WriteError>> + Send {
        let _ = (namespace, name, message);
        async { Ok(()) }
    }

    /// Reports something about Node `name` the operator must know (a Warning event,
    /// `reason` e.g. `GatewayRouterMissing`). Writers without events log only.
    fn node_event(
        &self,
        name: &str,
        reason: &str,
        message: &str,
    ) -> impl Future<Output = Result<(), WriteError>> + Send {
        let _ = (name, reason, message);
        async { Ok(()) }
    }

    /// Reports a problem of Subnet `name` (a Warning event, reason
    /// [`crate::validate::SUBNET_INVALID`]: what its status condition says, for `kubectl
    /// get events` and alerting). Writers without events log only.
    fn subnet_event(
        &self,
        name: &str,
        message: &str,
    ) -> impl Future<Output = Result<(), WriteError>> + Send {
        let _ = (name, message);
        async { Ok(()) }
    }

    /// Creates a Subnet (the cluster's default, [`crate::controller::default_subnet`]) and
    /// returns it as stored; one of that name already stored is returned as it is.
    fn create_subnet(
        &self,
        subnet: &Subnet,
    ) -> impl Future<Output = Result<Subnet, WriteError>> + Send;

    /// Replaces the Subnet's status.
    fn subnet_status(
        &self,
        name: &str,
        status: &SubnetStatus,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;
}
