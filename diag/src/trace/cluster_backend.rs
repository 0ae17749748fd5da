//! `zovn trace` on a real cluster: pods from the API server, and OVN's and OVS's
//! read-only tools run in the release's pods through `kubectl exec` (see
//! [`crate::kubectl`]):
//!
//! - in a Ready controller replica (it holds the Northbound and Southbound remotes and
//!   their TLS files): `ovsdb-client query` (a transaction OVSDB always aborts) for the
//!   Northbound rows and the tunnel endpoints, `ovn-trace` on the Southbound database;
//! - in the node agent's pod of the node (the node's OVS sockets are mounted there):
//!   `ovs-vsctl find` and `ovs-appctl ofproto/trace`.
//!
//! Nothing else is reached: no database port and no node address has to be open to the
//! operator's machine, and RBAC decides who may trace (`pods/exec` in the release's
//! namespace, `get`/`list` of pods).

use serde_json::Value;

use super::TraceError;
use super::backend::{Backend, TraceNode};
use super::nb_view::NbView;
use crate::kubectl::Kubectl;
use crate::release::{Release, ReleaseError, ReleasePod};

/// The controller's container, and the node agent's.
const CONTROLLER: &str = "controller";
const AGENT: &str = "agent";
/// The agent's ovs-vswitchd control socket when its args do not name one.
const VSWITCHD_CTL: &str = "/var/run/openvswitch/ovs-vswitchd.ctl";

/// A cluster reached through kubectl.
pub struct ClusterBackend {
    k: Kubectl,
    release: Release,
    controller: ReleasePod,
    nb: String,
    sb: String,
    /// `--private-key=... --certificate=... --ca-cert=...` for `ssl:` remotes.
    tls: Vec<String>,
}

fn release_err(e: ReleaseError) -> TraceError {
    TraceError::Tool {
        tool: "cluster".into(),
        detail: e.to_string(),
    }
}

impl ClusterBackend {
    /// Finds the release and its controller's database remotes.
    pub fn connect(k: Kubectl) -> Result<ClusterBackend, TraceError> {
        let release = Release::discover(&k).map_err(release_err)?;
        let controller = release.controller().map_err(release_err)?.clone();
        let arg = |flag: &str| {
            controller
                .arg(CONTROLLER, flag)
                .ok_or_else(|| TraceError::Tool {
                    tool: "cluster".into(),
                    detail: format!(
                        "the controller pod {} has no {flag} argument",
                        controller.name
                    ),
                })
        };
        let expand = |v: String| {
            controller
                .expand(&k, CONTROLLER, &v)
                .map_err(|e| TraceError::Tool {
                    tool: "cluster".into(),
                    detail: e.to_string(),
                })
        };
        let nb = expand(arg("--nb")?)?;
        let sb = expand(arg("--sb")?)?;
        let tls = [
            ("--nb-key", "--private-key"),
            ("--nb-cert", "--certificate"),
            ("--nb-ca", "--ca-cert"),
        ]
        .iter()
        .filter_map(|(ours, ovs)| {
            controller
                .arg(CONTROLLER, ours)
                .map(|v| format!("{ovs}={v}"))
        })
        .collect();
        Ok(ClusterBackend {
            k,
            release,
            controller,
            nb,
            sb,
            tls,
        })
    }

    fn exec(
        &self,
        pod: &ReleasePod,
        container: &str,
        cmd: Vec<String>,
    ) -> Result<String, TraceError> {
        let tool = cmd.first().cloned().unwrap_or_default();
        self.k
            .exec(&pod.namespace, &pod.name, container, &cmd)
            .map_err(|e| TraceError::Tool {
                tool: format!("{tool} in pod {}/{}", pod.namespace, pod.name),
                detail: e.to_string(),
            })
    }

    /// `ovsdb-client query REMOTE TXN` in the controller's pod.
    fn query(&self, remote: &str, txn: String) -> Result<String, TraceError> {
        let mut cmd = vec!["ovsdb-client".to_string()];
        cmd.extend(self.tls.iter().cloned());
        cmd.extend(["query".into(), remote.into(), txn]);
        self.exec(&self.controller, CONTROLLER, cmd)
    }

    fn agent(&self, node: &str) -> Result<&ReleasePod, TraceError> {
        self.release.agent_on(node).map_err(release_err)
    }
}

impl Backend for ClusterBackend {
    fn pods(&mut self) -> Result<Vec<Value>, TraceError> {
        self.k.list_all("pods").map_err(|e| TraceError::Tool {
            tool: "kubectl get pods".into(),
            detail: e.to_string(),
        })
    }

    fn nb(&mut self) -> Result<NbView, TraceError> {
        let text = self.query(&self.nb, NbView::query_transaction())?;
        NbView::from_query_result(&text)
    }

    fn nodes(&mut self) -> Result<Vec<TraceNode>, TraceError> {
        let txn = serde_json::json!(["OVN_Southbound", {
            "op": "select", "table": "Encap", "where": [], "columns": ["chassis_name", "ip"]
        }]);
        let text = self.query(&self.sb, txn.to_string())?;
        let v: Value = serde_json::from_str(&text).map_err(|e| TraceError::Tool {
            tool: "ovsdb-client query OVN_Southbound".into(),
            detail: e.to_string(),
        })?;
        // the chart names each chassis (OVS system-id) after its node
        Ok(v[0]["rows"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .filter_map(|r| {
                        Some(TraceNode {
                            name: r["chassis_name"].as_str()?.to_string(),
                            encap_ip: r["ip"].as_str()?.to_string(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    fn ovn_trace(&mut self, args: &[String]) -> Result<String, TraceError> {
        let mut cmd = vec!["ovn-trace".to_string(), format!("--db={}", self.sb)];
        cmd.extend(self.tls.iter().cloned());
        cmd.extend(args.iter().cloned());
        self.exec(&self.controller, CONTROLLER, cmd)
    }

    fn ovs_vsctl(&mut self, node: &str, args: &[String]) -> Result<String, TraceError> {
        let pod = self.agent(node)?;
        let mut cmd = vec!["ovs-vsctl".to_string(), "--timeout=10".into()];
        cmd.extend(args.iter().cloned());
        self.exec(pod, AGENT, cmd)
    }

    fn vswitchd_appctl(&mut self, node: &str, args: &[String]) -> Result<String, TraceError> {
        let pod = self.agent(node)?;
        let ctl = pod
            .arg(AGENT, "--vswitchd-ctl")
            .unwrap_or_else(|| VSWITCHD_CTL.into());
        let mut cmd = vec!["ovs-appctl".to_string(), "-t".into(), ctl];
        cmd.extend(args.iter().cloned());
        self.exec(pod, AGENT, cmd)
    }
}
