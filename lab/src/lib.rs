//! # lab — the local lab
//!
//! Starts and stops real OVN central daemons and N simulated nodes (each a network
//! namespace with its own ovsdb-server, ovs-vswitchd and ovn-controller) in a private state
//! directory. Used by the tests, the benchmarks and the `zovn lab` CLI.
//!
//! - [`process`]: commands with clear errors; daemons started/stopped by pid.
//! - [`central`]: [`Central`] — OVN NB/SB ovsdb-servers (standalone or Raft) + ovn-northd.
//! - [`cluster`]: `cluster/status` parsing.
//! - [`ctl`]: the OVS/OVN command-line tools used (to be swapped for the ovsdb client).

pub mod central;
pub mod cluster;
pub mod ctl;
pub mod error;
pub mod process;
pub mod wait;

pub use central::{Central, CentralConfig, CentralState, Db, Member};
pub use error::{LabError, Result};
pub use nix::sys::signal::Signal;
