//! The node's datapath: which one runs (dpdk → afxdp → kernel), how OVS is tuned for it,
//! and what the agent tells the operator about it.
//!
//! - [`config`]: what the operator asks for (agent config file, Node annotation override);
//! - [`probe`]: what the node has (CPUs, hugepages, XDP sockets, the ovs-vswitchd build);
//! - [`decide`]: the decision, pure ([`eal_args`]: the allowlist of `extraEalArgs`);
//! - [`apply`]: writing `Open_vSwitch.other_config`, allocating hugepages, restarting
//!   ovs-vswitchd when a start-time setting changed, waiting for DPDK;
//! - [`pm_qos`]: the CPU wake-up latency request (`cpuDmaLatencyUs`);
//! - [`port_budget`]: the AF_XDP port budget the decision chooses;
//! - [`pmd_sleep`]: how idle PMDs sleep, and the tuner switching it with the traffic;
//! - [`status`]: the report (Node annotation, events, metrics);
//! - [`manager`]: the loop that re-decides when the node or the configuration changes.

pub mod apply;
pub mod config;
pub mod cpus;
pub mod decide;
pub mod eal_args;
pub mod manager;
pub mod megaflow;
pub mod megaflow_guard;
pub mod metrics;
pub mod pm_qos;
pub mod pmd_sleep;
pub mod port_budget;
pub mod probe;
pub mod report;
pub mod status;

pub use config::DatapathConfig;
pub use decide::{Datapath, Decision};
pub use manager::DatapathManager;
pub use status::DatapathStatus;

/// Pod annotation: the datapath a pod asks for (`afxdp` or `kernel`); absent = the node's.
pub const POD_DATAPATH_ANNOTATION: &str = api::keys::POD_DATAPATH;
/// Node annotation the agent writes: [`DatapathStatus`] as JSON.
pub const STATUS_ANNOTATION: &str = api::keys::DATAPATH_STATUS;
