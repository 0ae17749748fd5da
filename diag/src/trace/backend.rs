//! Where a trace reads the cluster's state and runs OVN's and OVS's read-only tools: the
//! lab (the `lab` crate's `diag_backends::trace`: local sockets) or a real cluster
//! ([`super::cluster_backend`]: the API server and `kubectl exec` into the release's
//! pods).

use serde_json::Value;

use super::TraceError;
use super::nb_view::NbView;

/// A node as the trace needs it: its name and tunnel endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceNode {
    pub name: String,
    pub encap_ip: String,
}

/// The reads and tools of one trace. Every method is read-only.
pub trait Backend {
    /// Every pod, as the API's JSON (`metadata`, `spec.nodeName`, annotations).
    fn pods(&mut self) -> Result<Vec<Value>, TraceError>;
    /// The Northbound rows the explanation needs.
    fn nb(&mut self) -> Result<NbView, TraceError>;
    /// Every node with its tunnel endpoint.
    fn nodes(&mut self) -> Result<Vec<TraceNode>, TraceError>;
    /// `ovn-trace ARGS` against the Southbound database: its stdout.
    fn ovn_trace(&mut self, args: &[String]) -> Result<String, TraceError>;
    /// `ovs-vsctl ARGS` against `node`'s Open_vSwitch database: its stdout.
    fn ovs_vsctl(&mut self, node: &str, args: &[String]) -> Result<String, TraceError>;
    /// `ovs-appctl ARGS` to `node`'s ovs-vswitchd: its stdout.
    fn vswitchd_appctl(&mut self, node: &str, args: &[String]) -> Result<String, TraceError>;
}

/// The stdout of a finished tool, or a [`TraceError::Tool`] with its stderr.
pub fn tool_output(
    tool: &str,
    out: std::io::Result<std::process::Output>,
) -> Result<String, TraceError> {
    let out = out.map_err(|e| TraceError::Tool {
        tool: tool.into(),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(TraceError::Tool {
            tool: tool.into(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
