//! `zovn trace` on the lab: the pods from the lab's object store, the Northbound and
//! Southbound databases of its central, each node's database and ovs-vswitchd through
//! their sockets in the node's state directory.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::Lab;
use crate::apiserver::ApiClient;
use crate::apiserver::protocol::ResourceKind;
use crate::state::NodeState;
use diag::trace::TraceError;
use diag::trace::backend::{Backend, TraceNode, tool_output};
use diag::trace::nb_view::NbView;

/// The lab in a state directory.
pub struct LabBackend {
    dir: std::path::PathBuf,
    lab: Lab,
}

fn tool(what: &str, e: &dyn std::fmt::Display) -> TraceError {
    TraceError::Tool {
        tool: what.into(),
        detail: e.to_string(),
    }
}

impl LabBackend {
    /// The lab in `dir`.
    pub fn open(dir: &Path) -> Result<LabBackend, TraceError> {
        let lab = Lab::open(dir).map_err(|e| tool("lab", &e))?;
        Ok(LabBackend {
            dir: dir.to_path_buf(),
            lab,
        })
    }

    /// The lab itself (its nodes).
    pub fn lab(&self) -> &Lab {
        &self.lab
    }

    fn node(&self, name: &str) -> Result<&NodeState, TraceError> {
        self.lab
            .nodes()
            .iter()
            .find(|n| n.system_id == name)
            .ok_or_else(|| tool("lab", &format!("no node {name}")))
    }
}

impl Backend for LabBackend {
    fn pods(&mut self) -> Result<Vec<Value>, TraceError> {
        ApiClient::connect(&self.dir)
            .and_then(|mut c| c.get(ResourceKind::Pod))
            .map_err(|e| tool("the lab's object store", &e))
    }

    fn nb(&mut self) -> Result<NbView, TraceError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| tool("tokio", &e))?;
        rt.block_on(NbView::load(&self.lab.nb_remote()))
    }

    fn nodes(&mut self) -> Result<Vec<TraceNode>, TraceError> {
        Ok(self
            .lab
            .nodes()
            .iter()
            .map(|n| TraceNode {
                name: n.system_id.clone(),
                encap_ip: n.encap_ip.clone(),
            })
            .collect())
    }

    fn ovn_trace(&mut self, args: &[String]) -> Result<String, TraceError> {
        tool_output(
            "ovn-trace",
            Command::new("ovn-trace")
                .arg(format!("--db={}", self.lab.sb_remote()))
                .args(args)
                .output(),
        )
    }

    fn ovs_vsctl(&mut self, node: &str, args: &[String]) -> Result<String, TraceError> {
        let db = self.node(node)?.db_remote.clone();
        tool_output(
            "ovs-vsctl",
            Command::new("ovs-vsctl")
                .arg(format!("--db={db}"))
                .args(args)
                .output(),
        )
    }

    fn vswitchd_appctl(&mut self, node: &str, args: &[String]) -> Result<String, TraceError> {
        let ctl = self.node(node)?.dir.join("run/ovs-vswitchd.ctl");
        tool_output(
            "ovs-appctl",
            Command::new("ovs-appctl")
                .arg("-t")
                .arg(ctl)
                .args(args)
                .output(),
        )
    }
}
