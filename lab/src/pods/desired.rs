//! What the object store asks of the pod runtime, and the one way the runtime reads it:
//! [`PodSource`]. The runtime ([`super::runtime`]) knows nothing else of the store; the
//! store ([`crate::apiserver::store`]) implements the trait.

use tokio::sync::Notify;

use super::networks::{NadUnresolved, SecondarySpec};
use super::record::PortSpec;

/// The pods a store wants running, and a signal when that may have changed.
pub trait PodSource: Send + Sync + 'static {
    /// The pods to run: not hostNetwork, not completed, on a node; with their uid,
    /// container ports and networks.
    fn desired_pods(&self) -> Vec<DesiredPod>;
    /// Notified after every change of the store (the runtime also looks every second).
    fn changed(&self) -> &Notify;
}

/// A pod the store wants running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredPod {
    /// `namespace/name`.
    pub key: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Node name.
    pub node: String,
    pub ports: Vec<PortSpec>,
    /// The config of the NetworkAttachmentDefinition the pod names as its default network
    /// (`Err`: named but not found); `None`: the node's network.
    pub network: Option<Result<String, NadUnresolved>>,
    /// Its Multus secondary networks, in order ([`super::networks`]).
    pub secondary: Vec<SecondarySpec>,
    /// A virt-launcher pod whose VMI has a boot source: the runtime runs QEMU behind its
    /// vhost-user `eth0` instead of testpmd ([`super::vm_pod`]).
    pub vm: Option<super::vm_pod::VmBoot>,
}

impl DesiredPod {
    /// Whether every NAD the pod names is there.
    pub fn nads_resolved(&self) -> bool {
        !matches!(self.network, Some(Err(_))) && self.secondary.iter().all(|s| s.config.is_ok())
    }
}
