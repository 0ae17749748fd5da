//! # ovsdb — an RFC 7047 OVSDB client on tokio
//!
//! Both the control plane (OVN Northbound) and the node agent (local `Open_vSwitch`) speak
//! OVSDB; no maintained Rust client exists, so this crate is ours:
//!
//! - [`value`]: the data model (atoms, sets, maps, uuids) and its JSON wire form.
//! - [`schema`]: `.ovsschema` parsing (used by the typed-row generator and for validation).
//! - [`typed`]: the [`typed::Table`] trait and the generated typed rows for `OVN_Northbound`,
//!   `OVN_Southbound` and `Open_vSwitch` (`nb`, `sb`, `vswitch`).
//! - [`client`]: [`Client`], the connection (unix/tcp/ssl, reconnect with backoff, Raft
//!   leader awareness, echo/inactivity probe) with `transact`, `monitor`, `echo`,
//!   `list_dbs`, `get_schema`.
//! - [`ops`]: transaction operations, conditions, mutations and results.
//! - [`replica`]: the in-memory copy a monitor keeps current, with bounded `wait_for`.
//! - [`monitor`], [`rpc`], [`codec`], [`transport`], [`server`], [`error`]: the layers below.
//! - [`cluster_status`]: the parser of ovsdb-server's `cluster/status` report (Raft role,
//!   term, log, lag, connections).
//! - [`pmd_stats`]: parsers of ovs-vswitchd's `dpif-netdev/pmd-stats-show` and
//!   `pmd-rxq-show` reports (the agent's metrics and `zovn status` read them).
//!
//! Every fallible entry point returns an error; nothing panics on server input.

pub mod cluster_status;
pub mod codegen;
#[rustfmt::skip]
pub mod nb;
pub mod pmd_stats;
#[rustfmt::skip]
pub mod sb;
pub mod schema;
pub mod typed;
pub mod value;
#[rustfmt::skip]
pub mod vswitch;

pub mod client;
pub mod codec;
pub mod error;
pub mod monitor;
pub mod ops;
pub mod replica;
pub mod rpc;
pub mod server;
pub mod transport;

pub use client::{Client, ClientConfig, Status};
pub use error::{Error, Result};
pub use monitor::MonitorRequest;
pub use ops::{Condition, Function, Mutation, Mutator, OpResult, Operation, WaitUntil};
pub use replica::{Replica, RowView, SyncStats, View};
pub use transport::{Remote, TlsConfig};
pub use value::{Atom, FromValue, IntoValue, Row, Uuid, Value, ValueError};
