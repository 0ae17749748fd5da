//! # lab — the local lab
//!
//! Starts and stops real OVN central daemons and N simulated nodes (each a network
//! namespace with its own ovsdb-server, ovs-vswitchd and ovn-controller) in a private state
//! directory. Used by the tests, the benchmarks and the `zovn lab` CLI.
//!
//! - [`lab`]: [`Lab`] — `up` / `open` / `status` / `down`, test pods.
//! - [`central`]: [`Central`] — OVN NB/SB ovsdb-servers (standalone or Raft) + ovn-northd.
//! - [`node`]: one simulated node (netns, ovsdb-server, ovs-vswitchd[-dpdk], ovn-controller).
//! - [`state`]: state-dir layout and the `lab.json` manifest.
//! - [`process`]: commands with clear errors; daemons started/stopped by pid.
//! - [`netns`], [`names`], [`hugepages`], [`cluster`], [`wait`].
//! - [`ctl`]: the OVS/OVN command-line tools used (to be swapped for the ovsdb client).

pub mod central;
pub mod cluster;
pub mod config;
pub mod ctl;
pub mod error;
pub mod hugepages;
pub mod lab;
pub mod names;
pub mod netns;
pub mod node;
pub mod process;
pub mod state;
pub mod wait;

pub use central::{Central, CentralConfig, CentralState, Db, Member};
pub use config::{Dpdk, Encap, LabConfig};
pub use error::{LabError, Result};
pub use lab::{Lab, LabStatus, PodConfig, Step};
pub use nix::sys::signal::Signal;
pub use state::{Manifest, NodeState, PodState, Timings};
