//! The node's local `Open_vSwitch` database.
//!
//! - [`NodeOvs`] ([`node_ovs`]): what the pod attachments need of OVS (br-int, ports of
//!   ours with their interfaces and `external_ids`, `ovn-installed` waits, interface
//!   status/ofport/error, the `Open_vSwitch` row), as a small object-safe trait.
//! - [`Ovs`] ([`client`]): the real implementation, one [`ovsdb`] connection and one
//!   monitor (a live replica of `Open_vSwitch`, `Datapath`, `Bridge`, `Port`, `Interface`),
//!   read and written through the generated typed rows of [`ovsdb::vswitch`] only. It also
//!   carries the node-level operations the attachments do not use (ovn-controller
//!   settings, `Open_vSwitch` map updates, the `ct_zero_snat` correction).
//! - `memory` (unit tests only): an in-memory [`NodeOvs`] for the attachment logic's
//!   tests without root.
//!
//! - [`capture_mirror`]: `zovn capture`'s Mirror of a pod port onto a temporary port, its
//!   marks (`zstack.io/owner=zovn-capture`, never the agent's), and the GC of captures
//!   whose process is gone.
//!
//! Every row the agent creates carries `external_ids:zstack.io/owner=zstack-ovn-node`;
//! rows without that mark are never modified or deleted.

use std::time::Duration;

pub mod capture_mirror;
pub mod client;
mod ct_zero_snat;
#[cfg(test)]
pub mod memory;
pub mod node_ovs;
mod spec;
pub mod ssl;
pub mod unixctl;
pub mod uplink_port;

pub use client::Ovs;
/// Whether an `ovs_version` gets the agent's `ct_zero_snat` correction.
pub use ct_zero_snat::affected as ct_zero_snat_affected;
pub use node_ovs::NodeOvs;
pub use spec::{IfaceView, OvnConfig, OwnedPort, PortSpec, TunnelPort};

/// The local database.
pub const DB: &str = "Open_vSwitch";
/// The integration bridge ovn-controller programs.
pub const BR_INT: &str = "br-int";
/// `external_ids` keys of a pod port: the pod (`namespace/name`), the sandbox (container
/// id), the CNI ifname (GC matches container id + ifname).
pub use api::external_ids::ovs::{IFNAME as IFNAME_KEY, POD as POD_KEY, SANDBOX as SANDBOX_KEY};
/// `external_ids` key marking rows the agent owns, and its value ([`api::external_ids`]).
pub use api::external_ids::{AGENT_OWNER as OWNER, OWNER as OWNER_KEY};
/// Set by ovn-controller on an Interface once its flows are installed.
pub const OVN_INSTALLED: &str = "ovn-installed";

/// Errors talking to the local OVSDB.
#[derive(Debug, thiserror::Error)]
pub enum OvsError {
    #[error("OVSDB {remote}: {source}")]
    Db {
        remote: String,
        #[source]
        source: ovsdb::Error,
    },
    #[error("{what}: {source}")]
    Op {
        what: String,
        #[source]
        source: ovsdb::Error,
    },
    #[error("bridge {0} does not exist")]
    NoBridge(String),
    #[error("port {port}: {detail}")]
    Foreign { port: String, detail: String },
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout { what: String, timeout: Duration },
}
