//! `kubectl` as the diagnostics' way into a real cluster (`zovn trace`, `zovn status`,
//! `zovn capture` without a lab): every read goes through the API server with the
//! operator's own kubeconfig and RBAC, and every command on a node or on OVN central runs
//! in the release's pods through `pods/exec`, which the API server authenticates and
//! audits. The commands run there are read-only (`ovsdb-client query`, `ovn-trace`,
//! `ovs-vsctl find`, `ovs-appctl ofproto/trace`, `pmd-stats-show`, `cluster/status`).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

/// Why a kubectl call failed: the command and kubectl's (or the remote command's) stderr.
#[derive(Debug, thiserror::Error)]
pub enum KubectlError {
    #[error("cannot run kubectl: {0} (is kubectl on PATH?)")]
    Spawn(std::io::Error),
    #[error("kubectl {args}: {stderr}")]
    Failed { args: String, stderr: String },
    #[error("kubectl {args}: the output is not JSON: {detail}")]
    Json { args: String, detail: String },
}

/// The namespace the chart is installed in when `--release-namespace` does not say
/// (docs/install.md installs it there).
pub const DEFAULT_RELEASE_NAMESPACE: &str = "kube-system";

/// The kubeconfig and context every call uses (kubectl's own defaults when unset), and
/// the namespace of the zstack-ovn release.
#[derive(Debug, Clone, Default)]
pub struct Kubectl {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Where the release's pods and DaemonSets are looked for, and only there: a tenant's
    /// look-alike pod elsewhere is never exec'd into ([`DEFAULT_RELEASE_NAMESPACE`] when
    /// unset).
    pub release_namespace: Option<String>,
}

impl Kubectl {
    /// The release's namespace (an empty one given is the default).
    pub fn release_namespace(&self) -> &str {
        self.release_namespace
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .unwrap_or(DEFAULT_RELEASE_NAMESPACE)
    }

    /// A `kubectl` command with the kubeconfig and context set.
    pub fn command(&self) -> Command {
        let mut c = Command::new("kubectl");
        if let Some(k) = &self.kubeconfig {
            c.arg(format!("--kubeconfig={}", k.display()));
        }
        if let Some(x) = &self.context {
            c.arg(format!("--context={x}"));
        }
        c
    }

    fn output(&self, args: &[String]) -> Result<Output, KubectlError> {
        self.command()
            .args(args)
            .output()
            .map_err(KubectlError::Spawn)
    }

    /// `kubectl ARGS`: stdout, or the error with stderr.
    pub fn run(&self, args: &[String]) -> Result<String, KubectlError> {
        let out = self.output(args)?;
        if !out.status.success() {
            return Err(KubectlError::Failed {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl get ARGS -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> Result<Value, KubectlError> {
        let mut a: Vec<String> = vec!["get".into()];
        a.extend(args.iter().map(|s| s.to_string()));
        a.push("-o".into());
        a.push("json".into());
        let text = self.run(&a)?;
        serde_json::from_str(&text).map_err(|e| KubectlError::Json {
            args: a.join(" "),
            detail: e.to_string(),
        })
    }

    /// The `items` of `kubectl get KIND --all-namespaces -o json`.
    pub fn list_all(&self, kind: &str) -> Result<Vec<Value>, KubectlError> {
        let v = self.get_json(&[kind, "--all-namespaces"])?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    }

    /// The arguments of `kubectl exec -n NS POD -c CONTAINER -- CMD...`.
    pub fn exec_args(ns: &str, pod: &str, container: &str, cmd: &[String]) -> Vec<String> {
        let mut a: Vec<String> = ["exec", "-n", ns, pod, "-c", container, "--"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(cmd.iter().cloned());
        a
    }

    /// `CMD` in a pod's container: its stdout, or the error with its stderr.
    pub fn exec(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        cmd: &[String],
    ) -> Result<String, KubectlError> {
        self.run(&Self::exec_args(ns, pod, container, cmd))
    }

    /// `GET` through the API server's proxy to a pod's port (`pods/proxy`): the node
    /// agent's metrics without reaching the node's network.
    pub fn pod_proxy_get(
        &self,
        ns: &str,
        pod: &str,
        port: u16,
        path: &str,
    ) -> Result<String, KubectlError> {
        self.run(&[
            "get".into(),
            "--raw".into(),
            format!("/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/{path}"),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_namespace_defaults_and_an_empty_one_is_no_namespace() {
        let k = |ns: Option<&str>| Kubectl {
            release_namespace: ns.map(str::to_string),
            ..Default::default()
        };
        assert_eq!(k(None).release_namespace(), DEFAULT_RELEASE_NAMESPACE);
        assert_eq!(k(Some("  ")).release_namespace(), DEFAULT_RELEASE_NAMESPACE);
        assert_eq!(k(Some("net-system")).release_namespace(), "net-system");
    }
}
