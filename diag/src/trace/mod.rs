//! `zovn trace SRC DST[:PORT[/PROTO]]`: why a packet from a pod reaches its destination,
//! or not, in Kubernetes terms.
//!
//! - [`target`]: what the operator typed (a pod, a Service, an address; port, protocol);
//! - [`nb_view`]: the Northbound rows the explanation needs;
//! - [`ovn_trace`]: the logical trace (`ovn-trace --detailed` on the Southbound database,
//!   from the source pod's logical port with its MAC and address);
//! - [`explain`]: which NetworkPolicy rule, Service backend, route and port decided;
//! - [`physical`]: `ofproto/trace` on the source node's ovs-vswitchd (the same OpenFlow
//!   tables on every datapath), and the node a tunnel takes the packet to;
//! - [`run`]: one trace, the steps above, on a [`backend::Backend`]:
//!   - the lab's (the `lab` crate's `diag_backends::trace`): where the lab keeps the
//!     databases, pods and nodes;
//!   - [`cluster_backend`]: a real cluster, through the API server and `kubectl exec`
//!     into the release's controller and node agent pods.
//!
//! Read-only: nothing is written to OVN or OVS.

pub mod backend;
pub mod cluster_backend;
pub mod explain;
pub mod nb_view;
pub mod ovn_trace;
pub mod physical;
pub mod render;
pub mod run;
pub mod target;

use serde::Serialize;

pub use target::{Dst, L4, TraceSpec};

/// Why a trace could not be made. [`TraceError::is_input`] errors are the operator's
/// (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{0}")]
    BadInput(String),
    #[error("pod {0} not found")]
    UnknownPod(String),
    #[error("pod {0} has no address yet (not Ready, or its Subnet has no room)")]
    NoAddress(String),
    #[error("Service {0} not found (or it has no load balancer: headless, no ports)")]
    UnknownService(String),
    #[error("{tool}: {detail}")]
    Tool { tool: String, detail: String },
}

impl TraceError {
    /// The operator's mistake, not the system's.
    pub fn is_input(&self) -> bool {
        !matches!(self, TraceError::Tool { .. })
    }
}

/// One end of the traced packet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    /// `namespace/name`, `svc/namespace/name` or the address.
    pub name: String,
    pub ip: std::net::IpAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// `delivered` or `dropped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Delivered,
    Dropped,
}

/// A finished trace.
#[derive(Debug, Clone, Serialize)]
pub struct TraceReport {
    pub source: Endpoint,
    pub destination: Endpoint,
    /// `tcp/8080`, `udp/53`, `icmp`.
    pub packet: String,
    pub verdict: Verdict,
    /// What decided it, as sentences (the first is the verdict's reason).
    pub decided_by: Vec<String>,
    pub findings: Vec<explain::Finding>,
    pub logical: ovn_trace::LogicalTrace,
    pub physical: Vec<physical::NodeTrace>,
}
