//! The pods of a zstack-ovn Helm release in a cluster, found by the chart's labels
//! (`app.kubernetes.io/name=zstack-ovn`, `app.kubernetes.io/component`): the controller
//! (it holds the OVN database remotes and TLS files), OVN central (`central`, or `nbdb` /
//! `sbdb` with Raft), and the node agents (`node`, `node-<pool>`), one per node.

use serde_json::Value;

use crate::kubectl::{Kubectl, KubectlError};

/// The chart's name label.
pub const NAME_LABEL: &str = "app.kubernetes.io/name=zstack-ovn";

/// One pod of the release.
#[derive(Debug, Clone)]
pub struct ReleasePod {
    pub namespace: String,
    pub name: String,
    /// `controller`, `central`, `nbdb`, `sbdb`, `node`, `node-<pool>`.
    pub component: String,
    pub node: Option<String>,
    pub ready: bool,
    /// Why it is not Ready (the Ready condition's message, or the phase).
    pub not_ready_why: Option<String>,
    /// Each container's name and its `args`.
    pub containers: Vec<(String, Vec<String>)>,
    /// Each container's name and whether it is ready.
    pub container_ready: Vec<(String, bool)>,
}

impl ReleasePod {
    fn from_json(p: &Value) -> Option<ReleasePod> {
        let meta = &p["metadata"];
        let ready = p["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
        let is_ready = ready.is_some_and(|c| c["status"] == "True");
        let containers = p["spec"]["containers"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        let args = c["args"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(|s| s.as_str().map(str::to_string))
                                    .collect()
                            })
                            .unwrap_or_default();
                        (c["name"].as_str().unwrap_or("").to_string(), args)
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(ReleasePod {
            namespace: meta["namespace"].as_str()?.to_string(),
            name: meta["name"].as_str()?.to_string(),
            component: meta["labels"]["app.kubernetes.io/component"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            node: p["spec"]["nodeName"].as_str().map(str::to_string),
            ready: is_ready,
            not_ready_why: (!is_ready).then(|| {
                ready
                    .and_then(|c| c["message"].as_str())
                    .or_else(|| p["status"]["phase"].as_str())
                    .unwrap_or("not Ready")
                    .to_string()
            }),
            containers,
            container_ready: p["status"]["containerStatuses"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .filter_map(|c| Some((c["name"].as_str()?.to_string(), c["ready"] == true)))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// Whether `container` is ready.
    pub fn container_is_ready(&self, container: &str) -> bool {
        self.container_ready
            .iter()
            .any(|(n, r)| n == container && *r)
    }

    /// The value of `--flag=VALUE` in the args of `container`.
    pub fn arg(&self, container: &str, flag: &str) -> Option<String> {
        let prefix = format!("{flag}=");
        self.containers
            .iter()
            .find(|(n, _)| n == container)?
            .1
            .iter()
            .find_map(|a| a.strip_prefix(&prefix).map(str::to_string))
    }

    /// `value` with Kubernetes' `$(NAME)` references (args naming the container's
    /// environment, e.g. a Service's `*_SERVICE_HOST`) replaced by their values in the
    /// running container (`printenv` there: the spec does not hold service variables).
    pub fn expand(
        &self,
        k: &Kubectl,
        container: &str,
        value: &str,
    ) -> Result<String, KubectlError> {
        let mut out = String::new();
        let mut rest = value;
        while let Some(i) = rest.find("$(") {
            let Some(j) = rest[i..].find(')') else {
                break;
            };
            let name = &rest[i + 2..i + j];
            out.push_str(&rest[..i]);
            let v = k.exec(
                &self.namespace,
                &self.name,
                container,
                &["printenv".into(), name.into()],
            )?;
            out.push_str(v.trim());
            rest = &rest[i + j + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    pub fn is_agent(&self) -> bool {
        self.component == "node" || self.component.starts_with("node-")
    }
}

/// The release's pods.
#[derive(Debug, Clone)]
pub struct Release {
    pub pods: Vec<ReleasePod>,
}

/// No release found, or not the parts a command needs.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error(transparent)]
    Kubectl(#[from] KubectlError),
    #[error(
        "no zstack-ovn release in namespace {0} (no pod labelled {NAME_LABEL} there); install the chart (docs/install.md), or name its namespace with --release-namespace"
    )]
    NotInstalled(String),
    #[error("no {0} of the zstack-ovn release is Ready")]
    Missing(String),
}

impl Release {
    /// The pods labelled as the chart's in the release's namespace only
    /// ([`Kubectl::release_namespace`]): anyone who may create pods somewhere can label
    /// them so, and the diagnostics exec into what they find.
    pub fn discover(k: &Kubectl) -> Result<Release, ReleaseError> {
        let ns = k.release_namespace();
        let v = k.get_json(&["pods", "-n", ns, "-l", NAME_LABEL])?;
        let pods: Vec<ReleasePod> = v["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(ReleasePod::from_json)
                    .filter(|p| p.namespace == ns)
                    .collect()
            })
            .unwrap_or_default();
        if pods.is_empty() {
            return Err(ReleaseError::NotInstalled(ns.to_string()));
        }
        Ok(Release { pods })
    }

    /// A Ready controller replica (any: they all hold the same remotes).
    pub fn controller(&self) -> Result<&ReleasePod, ReleaseError> {
        self.pods
            .iter()
            .find(|p| p.component == "controller" && p.ready)
            .ok_or_else(|| ReleaseError::Missing("controller pod".into()))
    }

    /// The node agent's pod on `node`.
    pub fn agent_on(&self, node: &str) -> Result<&ReleasePod, ReleaseError> {
        self.pods
            .iter()
            .find(|p| p.is_agent() && p.node.as_deref() == Some(node))
            .ok_or_else(|| ReleaseError::Missing(format!("node agent pod on node {node}")))
    }

    /// Every node agent pod.
    pub fn agents(&self) -> impl Iterator<Item = &ReleasePod> {
        self.pods.iter().filter(|p| p.is_agent())
    }

    /// OVN central's pods (one `central`, or the Raft members `nbdb-N` / `sbdb-N`).
    pub fn central(&self) -> impl Iterator<Item = &ReleasePod> {
        self.pods
            .iter()
            .filter(|p| matches!(p.component.as_str(), "central" | "nbdb" | "sbdb"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_read_with_its_args_and_readiness() {
        let p = serde_json::json!({
            "metadata": {"namespace": "kube-system", "name": "zs-node-x",
                         "labels": {"app.kubernetes.io/component": "node-dpdk"}},
            "spec": {"nodeName": "node1", "containers": [
                {"name": "agent", "args": ["--sb=ssl:10.0.0.1:6642", "--mtu=1400"]}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "False", "message": "containers with unready status: [agent]"}]}
        });
        let r = ReleasePod::from_json(&p).expect("parsed");
        assert!(r.is_agent());
        assert!(!r.ready);
        assert_eq!(r.arg("agent", "--sb").as_deref(), Some("ssl:10.0.0.1:6642"));
        assert_eq!(r.arg("agent", "--nb"), None);
        assert_eq!(r.arg("other", "--sb"), None);
        assert!(r.not_ready_why.as_deref().unwrap_or("").contains("agent"));
    }
}
