//! An in-memory [`NodeOvs`] for unit tests only (compiled under `cfg(test)`): it keeps
//! br-int's ports as plain maps, marks a port `ovn-installed` and opened at once, and lets
//! a test remove a port behind the agent's back, plant a foreign port or make a deletion
//! fail. It is no model of ovs-vswitchd; the real [`super::Ovs`] is what the agent runs,
//! and the real-component tests (`dataplane/tests/`, `tests/`) test that.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use ovsdb::Uuid;
use ovsdb::vswitch::OpenVSwitch;

use super::spec::is_owned;
use super::{IfaceView, NodeOvs, OVN_INSTALLED, OvsError, OwnedPort, PortSpec};

#[derive(Debug, Clone)]
struct MemPort {
    uuid: Uuid,
    port_ids: BTreeMap<String, String>,
    iface: IfaceView,
}

#[derive(Debug, Default)]
struct Inner {
    ports: BTreeMap<String, MemPort>,
    fail_delete: BTreeSet<String>,
    open_vswitch: OpenVSwitch,
    status: BTreeMap<String, BTreeMap<String, String>>,
    writes: usize,
}

/// The in-memory OVS (see the module doc).
#[derive(Debug, Default)]
pub struct MemoryOvs {
    inner: Mutex<Inner>,
}

impl MemoryOvs {
    pub fn new() -> MemoryOvs {
        MemoryOvs::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The names of every port on br-int (ours and foreign).
    pub fn port_names(&self) -> Vec<String> {
        self.lock().ports.keys().cloned().collect()
    }

    /// Removes a port as an ovsdb-server restart with a fresh database would.
    pub fn lose_port(&self, name: &str) {
        self.lock().ports.remove(name);
    }

    /// Adds a port the agent does not own.
    pub fn add_foreign(&self, name: &str) {
        self.lock().ports.insert(
            name.into(),
            MemPort {
                uuid: Uuid::new_v4(),
                port_ids: BTreeMap::new(),
                iface: IfaceView::default(),
            },
        );
    }

    /// Makes every deletion of port `name` fail.
    pub fn fail_deletes_of(&self, name: &str) {
        self.lock().fail_delete.insert(name.into());
    }

    /// Sets the `Open_vSwitch` row.
    pub fn set_open_vswitch(&self, row: OpenVSwitch) {
        self.lock().open_vswitch = row;
    }

    /// Sets the `status` column of an interface.
    pub fn set_status(&self, name: &str, status: BTreeMap<String, String>) {
        self.lock().status.insert(name.into(), status);
    }

    /// Sets the `error` column of an interface (and clears its ofport).
    pub fn set_error(&self, name: &str, error: &str) {
        if let Some(p) = self.lock().ports.get_mut(name) {
            p.iface.error = Some(error.into());
            p.iface.ofport = None;
        }
    }

    /// How many port insertions/updates/deletions were written.
    pub fn writes(&self) -> usize {
        self.lock().writes
    }

    fn ensure(&self, spec: &PortSpec) -> Result<(), OvsError> {
        let mut g = self.lock();
        if let Some(p) = g.ports.get(&spec.name)
            && !is_owned(&p.port_ids)
        {
            return Err(OvsError::Foreign {
                port: spec.name.clone(),
                detail: "exists and is not owned by the node agent".into(),
            });
        }
        let (iface, _) = spec.interface();
        let mut view = IfaceView::from(iface);
        view.uuid = Some(Uuid::new_v4());
        view.ofport = Some(1);
        view.external_ids
            .insert(OVN_INSTALLED.into(), "true".into());
        let new = MemPort {
            uuid: Uuid::new_v4(),
            port_ids: spec.port_ids(),
            iface: view,
        };
        let same = g
            .ports
            .get(&spec.name)
            .is_some_and(|p| p.port_ids == new.port_ids && !spec.iface_differs(&p.iface));
        if !same {
            g.writes += 1;
            g.ports.insert(spec.name.clone(), new);
        }
        Ok(())
    }

    fn delete(&self, name: &str) -> Result<bool, OvsError> {
        let mut g = self.lock();
        let Some(p) = g.ports.get(name) else {
            return Ok(false);
        };
        if !is_owned(&p.port_ids) {
            return Err(OvsError::Foreign {
                port: name.into(),
                detail: "is not owned by the node agent: not deleting it".into(),
            });
        }
        if g.fail_delete.contains(name) {
            return Err(OvsError::Op {
                what: format!("remove port {name}"),
                source: ovsdb::Error::Config("deletion made to fail by the test".into()),
            });
        }
        g.ports.remove(name);
        g.writes += 1;
        Ok(true)
    }
}

impl NodeOvs for MemoryOvs {
    fn ensure_port<'a>(&'a self, spec: &'a PortSpec) -> BoxFuture<'a, Result<(), OvsError>> {
        Box::pin(async move { self.ensure(spec) })
    }

    fn delete_port<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, OvsError>> {
        Box::pin(async move { self.delete(name) })
    }

    fn delete_owned<'a>(&'a self, port: &'a OwnedPort) -> BoxFuture<'a, Result<(), OvsError>> {
        Box::pin(async move { self.delete(&port.name).map(|_| ()) })
    }

    fn owned_ports(&self) -> Vec<OwnedPort> {
        self.lock()
            .ports
            .iter()
            .filter(|(_, p)| is_owned(&p.port_ids))
            .map(|(n, p)| OwnedPort {
                uuid: p.uuid,
                name: n.clone(),
                external_ids: p.port_ids.clone(),
            })
            .collect()
    }

    fn interface(&self, name: &str) -> Option<IfaceView> {
        self.lock().ports.get(name).map(|p| p.iface.clone())
    }

    fn interface_status<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<BTreeMap<String, String>, OvsError>> {
        Box::pin(async move { Ok(self.lock().status.get(name).cloned().unwrap_or_default()) })
    }

    fn wait_installed<'a>(
        &'a self,
        name: &'a str,
        iface_id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), OvsError>> {
        Box::pin(async move {
            let ok = self.interface(name).is_some_and(|i| {
                i.external_ids.get("iface-id").map(String::as_str) == Some(iface_id)
            });
            if ok {
                Ok(())
            } else {
                Err(OvsError::Timeout {
                    what: format!("port {name} (iface-id {iface_id}) {OVN_INSTALLED}"),
                    timeout,
                })
            }
        })
    }

    fn wait_settled<'a>(&'a self, name: &'a str, _timeout: Duration) -> BoxFuture<'a, bool> {
        Box::pin(async move { self.interface(name).is_some_and(|i| i.settled()) })
    }

    fn open_vswitch(&self) -> Option<OpenVSwitch> {
        Some(self.lock().open_vswitch.clone())
    }

    fn wait_applied(&self, _timeout: Duration) -> BoxFuture<'_, Result<bool, OvsError>> {
        // no ovs-vswitchd behind it: everything is applied at once
        Box::pin(async { Ok(true) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ports_of_ours_are_added_updated_and_removed_foreign_ones_never() {
        let ovs = MemoryOvs::new();
        let mut spec = PortSpec::new("veth1");
        spec.iface_external_ids
            .insert("iface-id".into(), "ns_p".into());
        ovs.ensure_port(&spec).await.expect("add");
        ovs.ensure_port(&spec).await.expect("again");
        assert_eq!(ovs.writes(), 1, "an unchanged port is not rewritten");
        ovs.wait_installed("veth1", "ns_p", Duration::ZERO)
            .await
            .expect("installed");
        assert!(
            ovs.wait_installed("veth1", "other", Duration::ZERO)
                .await
                .is_err()
        );
        assert_eq!(ovs.owned_ports().len(), 1);
        ovs.add_foreign("eth9");
        assert!(matches!(
            ovs.ensure_port(&PortSpec::new("eth9")).await,
            Err(OvsError::Foreign { .. })
        ));
        assert!(ovs.delete_port("eth9").await.is_err());
        assert!(ovs.delete_port("veth1").await.expect("delete"));
        assert!(!ovs.delete_port("veth1").await.expect("gone"));
        assert_eq!(ovs.port_names(), vec!["eth9".to_string()]);
    }
}
