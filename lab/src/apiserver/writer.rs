//! The controller's [`Writer`] in the lab: writes land in the [`MemoryStore`] and mark the
//! store for saving (see [`super::persist`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use control::crd::{Subnet, SubnetStatus};
use control::source::memory::MemoryStore;
use control::source::{WriteError, Writer};

use super::persist::Persister;

/// [`MemoryStore`]'s writes, then a save.
pub struct PersistingWriter {
    mem: MemoryStore,
    persister: Arc<Persister>,
}

impl PersistingWriter {
    pub fn new(mem: MemoryStore, persister: Arc<Persister>) -> Self {
        PersistingWriter { mem, persister }
    }

    fn saved(&self, r: Result<(), WriteError>) -> Result<(), WriteError> {
        if r.is_ok() {
            self.persister.mark_dirty();
        }
        r
    }
}

impl Writer for PersistingWriter {
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
