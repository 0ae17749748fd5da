//! NetworkPolicies and Namespaces (their labels) from a real kube-apiserver, and the
//! in-process store's counterparts.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Client;
use kube::api::Api;
use tokio::sync::mpsc;

use super::convert::namespace_info;
use super::memory::MemoryStore;
use super::watch::spawn_watch;
use super::{Event, Kind};
use crate::model::NamespaceInfo;

/// `namespace/name` of a policy.
pub fn policy_key(p: &NetworkPolicy) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or("default"),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Starts the Namespace and NetworkPolicy watches.
pub fn spawn_watchers(client: Client, tx: mpsc::UnboundedSender<Event>) {
    spawn_watch(
        Api::<Namespace>::all(client.clone()),
        Kind::Namespace,
        tx.clone(),
        |n: Namespace| Event::Namespace(Box::new(namespace_info(&n))),
        |n: Namespace| Event::NamespaceDeleted(n.metadata.name.unwrap_or_default()),
    );
    spawn_watch(
        Api::<NetworkPolicy>::all(client),
        Kind::NetworkPolicy,
        tx,
        |p: NetworkPolicy| Event::NetworkPolicy(Box::new(p)),
        |p: NetworkPolicy| Event::NetworkPolicyDeleted(policy_key(&p)),
    );
}

impl MemoryStore {
    /// Creates or replaces a Namespace (its labels).
    pub fn apply_namespace(&self, ns: NamespaceInfo) {
        self.emit(Event::Namespace(Box::new(ns)));
    }

    /// Deletes a Namespace object (its pods are deleted separately).
    pub fn delete_namespace(&self, name: &str) {
        self.emit(Event::NamespaceDeleted(name.to_string()));
    }

    /// Creates or replaces a NetworkPolicy.
    pub fn apply_network_policy(&self, p: NetworkPolicy) {
        self.emit(Event::NetworkPolicy(Box::new(p)));
    }

    /// Deletes a NetworkPolicy (`namespace/name`).
    pub fn delete_network_policy(&self, key: &str) {
        self.emit(Event::NetworkPolicyDeleted(key.to_string()));
    }
}

/// Creates a Warning event on NetworkPolicy `namespace/name`.
pub(super) async fn create_event(
    events: &super::events::Events,
    namespace: &str,
    name: &str,
    message: &str,
) -> Result<(), kube::Error> {
    let object = ("networking.k8s.io/v1", "NetworkPolicy", namespace, name);
    let reason = crate::netpol::report::EVENT_REASON;
    events.warning(object, reason, message).await
}
