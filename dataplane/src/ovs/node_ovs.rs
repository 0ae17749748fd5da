//! [`NodeOvs`]: what the pod attachments ([`crate::attach`]) need of the local OVS, so
//! their ADD/DEL/CHECK/GC/restore/reconcile logic runs on the real database
//! ([`super::Ovs`]) and, in unit tests, on an in-memory one (`super::memory`).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use ovsdb::vswitch::OpenVSwitch;

use super::{IfaceView, OvsError, OwnedPort, PortSpec};

/// The node's OVS as the attachments use it. Reads come from a local view (a replica),
/// writes are transactions; a row that is not ours is never changed.
pub trait NodeOvs: Send + Sync {
    /// Adds (or updates in place) a port of ours on br-int. A port of that name that is not
    /// ours is an error ([`OvsError::Foreign`]).
    fn ensure_port<'a>(&'a self, spec: &'a PortSpec) -> BoxFuture<'a, Result<(), OvsError>>;

    /// Removes a port of ours by name; a missing port is Ok (false), a foreign one an error.
    fn delete_port<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, OvsError>>;

    /// Removes one of our ports (as [`NodeOvs::owned_ports`] listed it).
    fn delete_owned<'a>(&'a self, port: &'a OwnedPort) -> BoxFuture<'a, Result<(), OvsError>>;

    /// Every Port of ours.
    fn owned_ports(&self) -> Vec<OwnedPort>;

    /// The Interface `name`.
    fn interface(&self, name: &str) -> Option<IfaceView>;

    /// The Interface `status` column read fresh (ovs-vswitchd rewrites it often, so no
    /// replica carries it).
    fn interface_status<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<BTreeMap<String, String>, OvsError>>;

    /// Waits until ovn-controller sets `external_ids:ovn-installed="true"` on the
    /// Interface `name` bound to `iface_id`.
    fn wait_installed<'a>(
        &'a self,
        name: &'a str,
        iface_id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), OvsError>>;

    /// Waits until ovs-vswitchd opened the Interface `name` (an ofport) or refused it (an
    /// error); false on timeout.
    fn wait_settled<'a>(&'a self, name: &'a str, timeout: Duration) -> BoxFuture<'a, bool>;

    /// Asks ovs-vswitchd to confirm that it has applied every change committed so far
    /// (`next_cfg` += 1, then `cur_cfg` reaching it) and waits for that; false on
    /// timeout. A changed port `type` keeps its ofport, so only this says the switch is done.
    fn wait_applied(&self, timeout: Duration) -> BoxFuture<'_, Result<bool, OvsError>>;

    /// The `Open_vSwitch` row (what ovs-vswitchd offers: DPDK, interface types, …).
    fn open_vswitch(&self) -> Option<OpenVSwitch>;
}
