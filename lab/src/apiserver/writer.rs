//! The controller's [`Writer`] in the lab: writes land in the [`MemoryStore`] and mark the
//! store for saving (see [`super::persist`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use control::crd::{Subnet, SubnetStatus};
use control::source::memory::MemoryStore;
use control::source::{WriteError, Writer};

use super::persist::Persister;

/// The lab's event log (`zovn lab get events`), shared with the server.
pub type EventLog = Arc<std::sync::Mutex<std::collections::VecDeque<Value>>>;

/// [`MemoryStore`]'s writes, then a save; Node events into the lab's event log.
pub struct PersistingWriter {
    mem: MemoryStore,
    persister: Arc<Persister>,
    events: EventLog,
}

impl PersistingWriter {
    pub fn new(mem: MemoryStore, persister: Arc<Persister>, events: EventLog) -> Self {
        PersistingWriter {
            mem,
            persister,
            events,
        }
    }

    fn saved(&self, r: Result<(), WriteError>) -> Result<(), WriteError> {
        if r.is_ok() {
            self.persister.mark_dirty();
        }
        r
    }
}

impl PersistingWriter {
    /// A Warning event of the controller about `object` into the lab's event log.
    fn warning(&self, object: Value, reason: &str, message: &str) {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let mut log = self.events.lock().unwrap_or_else(|e| e.into_inner());
        log.push_back(json!({
            "apiVersion": "v1", "kind": "Event",
            "involvedObject": object,
            "reason": reason, "message": message, "type": "Warning",
            "source": {"component": "zstack-ovnkube-controller"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }));
        while log.len() > super::protocol::MAX_EVENTS {
            log.pop_front();
        }
    }
}

impl Writer for PersistingWriter {
    async fn subnet_event(&self, name: &str, message: &str) -> Result<(), WriteError> {
        self.warning(
            json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet", "name": name}),
            control::validate::SUBNET_INVALID,
            message,
        );
        self.mem.subnet_event(name, message).await
    }

    async fn node_event(&self, name: &str, reason: &str, message: &str) -> Result<(), WriteError> {
        self.warning(json!({"kind": "Node", "name": name}), reason, message);
        Ok(())
    }

    async fn service_event(
        &self,
        namespace: &str,
        name: &str,
        message: &str,
    ) -> Result<(), WriteError> {
        self.warning(
            json!({"kind": "Service", "namespace": namespace, "name": name}),
            control::services::SERVICE_PROBLEM,
            message,
        );
        self.mem.service_event(namespace, name, message).await
    }

    async fn policy_event(
        &self,
        namespace: &str,
        name: &str,
        message: &str,
    ) -> Result<(), WriteError> {
        self.mem.policy_event(namespace, name, message).await
    }

    async fn annotate_pod(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), WriteError> {
        let r = self.mem.annotate_pod(namespace, name, annotations).await;
        self.saved(r)
    }

    async fn annotate_node(
        &self,
        name: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), WriteError> {
        let r = self.mem.annotate_node(name, annotations).await;
        self.saved(r)
    }

    async fn create_subnet(&self, subnet: &Subnet) -> Result<Subnet, WriteError> {
        let r = self.mem.create_subnet(subnet).await;
        if r.is_ok() {
            self.persister.mark_dirty();
        }
        r
    }

    async fn subnet_status(&self, name: &str, status: &SubnetStatus) -> Result<(), WriteError> {
        let r = self.mem.subnet_status(name, status).await;
        self.saved(r)
    }
}
