//! # lab — the local lab
//!
//! Starts and stops real OVN central daemons and N simulated nodes (each a network
//! namespace with its own ovsdb-server, ovs-vswitchd and ovn-controller) in a private state
//! directory. Used by the tests, the benchmarks and the `zovn lab` CLI (the `zovn` crate, feature
//! `lab`).
//!
//! - [`lab`]: [`Lab`] — `up` / `open` / `status` / `down`, test pods.
//! - [`central`]: [`Central`] — OVN NB/SB ovsdb-servers (standalone or Raft; unix, TCP, SSL) +
//!   ovn-northd.
//! - [`node`]: one simulated node (netns, ovsdb-server, ovs-vswitchd[-dpdk], ovn-controller).
//! - [`external`]: the external network — a host outside every node behind the underlay
//!   netns as router, with a server naming the source address it saw.
//! - [`state`]: state-dir layout and the `lab.json` manifest.
//! - [`process`]: commands with clear errors; daemons started/stopped by pid.
//! - [`netns`], [`names`], [`hugepages`], [`wait`].
//! - [`config`]: the lab's configuration ([`LabConfig`]); [`error`]: its error type.
//! - [`ovs_daemons`]: a bare ovsdb-server + ovs-vswitchd (no OVN), stopped on drop.
//! - [`bare_ovs`]: those daemons with a bridge joining two namespaces, for the megaflow
//!   guard's test and benchmark.
//! - [`vlan_host`]: a host on a VLAN of the underlay, outside every node (OVS tags in
//!   userspace), for the VLAN underlay's tests.
//! - [`ctl`]: the OVS/OVN command-line tools used (to be swapped for the ovsdb client).
//! - [`apiserver`]: the lab's object store daemon (Namespaces, Subnets, Pods, Nodes) with
//!   the real controller on it, and the client behind `zovn lab apply/delete/get`.
//! - [`agent`]: the node agents (`zstack-ovnkube-node`, one per node, in its netns).
//! - [`pods`]: the pod runtime inside the object-store daemon — pods become network
//!   namespaces wired by the real CNI shim, each with a responder on its container ports;
//!   `zovn lab exec/probe`. It reads the store only through [`pods::PodSource`].
//! - [`multus`]: NetworkAttachmentDefinitions and what a pod's Multus annotations ask of
//!   the runtime (default network, secondary networks, the NAD config over the node's).
//! - [`kubevirt`]: VirtualMachineInstances → the virt-launcher pods KubeVirt would create.
//! - [`kubecluster`]: a real Kubernetes cluster (kubelet + containerd per node in a netns and
//!   mount namespace, control plane on the host) — `zovn cluster`.
//! - [`object_names`]: the default namespace and the DNS-1123 name checks of every kind.
//! - [`diag_backends`]: the lab's side of the operator's tools (the `diag` crate):
//!   `zovn trace`, `zovn status` and `zovn capture` read the lab's sockets, store and
//!   node namespaces through it.
//!
//! Layers, each using only those below it: [`apiserver`] (the store) → [`kubevirt`] →
//! [`multus`] → [`pods`] (the runtime) → [`object_names`], [`state`], [`process`]…;
//! `tests/tests/module_cycles` checks that no import cycle joins the files.
//!
//! ```no_run
//! use lab::{Central, CentralConfig, Db, Lab, LabConfig, Signal};
//!
//! # fn main() -> Result<(), lab::LabError> {
//! // just the OVN databases (a Raft cluster each), e.g. for OVSDB client tests
//! let mut central = Central::start(CentralConfig {
//!     dir: "/tmp/my-test/central".into(),
//!     raft: true,
//!     northd: false,
//!     tcp: false,
//! })?;
//! let leader = central.nb_leader()?;
//! central.kill_member(Db::Nb, leader, Signal::SIGKILL)?;
//! central.restart_member(Db::Nb, leader)?;
//! central.stop()?;
//!
//! // a whole lab: central + 2 nodes in network namespaces
//! let mut cfg = LabConfig::new("/tmp/my-lab", "mylab");
//! cfg.nodes = 2;
//! let lab = Lab::up(cfg)?; // returns once both chassis are in the SB
//! println!("{:?}", lab.timings());
//! lab.down()?; // every pid stopped, every netns deleted, state dir removed
//! # Ok(())
//! # }
//! ```

pub mod agent;
pub mod apiserver;
pub mod bare_ovs;
pub mod central;
pub mod config;
pub mod ctl;
pub mod diag_backends;
pub mod error;
pub mod external;
pub mod hugepages;
pub mod kubecluster;
pub mod kubevirt;
pub mod lab;
pub mod multus;
pub mod names;
pub mod netns;
pub mod node;
pub mod object_names;
pub mod ovs_daemons;
pub mod pods;
pub mod process;
pub mod state;
pub mod vlan_host;
pub mod wait;
pub mod wire_cpus;

pub use central::{Central, CentralConfig, CentralState, Db, Member, SslFiles};
pub use config::{
    ControllerMode, DEFAULT_CLUSTER_CIDR, Dpdk, Encap, Gateway, LabConfig, default_cluster_cidr,
    parse_cluster_cidr,
};
pub use error::{LabError, Result};
pub use lab::{Lab, LabStatus, PodConfig, Step};
pub use nix::sys::signal::Signal;
pub use state::{ExternalState, Manifest, NodeState, PodState, Timings};
