//! Leaving a node clean when the plugin is uninstalled (`helm uninstall`).
//!
//! The agent cannot tell a pod restart (rolling update, eviction, `kubectl delete pod`)
//! from an uninstall by the SIGTERM alone. It asks the API server for its own DaemonSet
//! ([`is_uninstalling`]): gone, being deleted, or no longer readable by the agent's
//! ServiceAccount (Helm deletes the RBAC objects right after the DaemonSet) means the plugin
//! is leaving; anything else — the DaemonSet is there, or the API cannot be reached — keeps
//! everything in place, as a restart must.
//!
//! [`cleanup`] then removes what the plugin put on the node: the conflist first (kubelet
//! stops calling the shim), the shim, the nf_tables table `inet zstack-ovn`, and — when OVS
//! runs in the node pod — waits for ovs-vswitchd to exit and deletes the tap devices the
//! userspace datapath leaves behind (br-int, br-phy, ovs-netdev, ovn-k8s-mp0), then empties
//! the given directories (OVS database, run dirs, vhost-user socket root, agent state).
//! Each step is logged with what it removed; a failing step is logged and the next runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The tap devices the userspace datapath creates for bridges' internal ports.
pub const DATAPATH_TAPS: &[&str] = &["br-int", "br-phy", "ovs-netdev", "ovn-k8s-mp0"];

/// What to remove.
#[derive(Debug, Clone, Default)]
pub struct CleanupPlan {
    /// The conflist directory and the shim's directory.
    pub cni_conf_dir: Option<PathBuf>,
    pub cni_bin_dir: Option<PathBuf>,
    /// ovs-vswitchd's control socket when OVS runs in the node pod: wait for it to go,
    /// then delete [`DATAPATH_TAPS`]. `None` (the host's OVS): leave OVS alone.
    pub pod_vswitchd_ctl: Option<PathBuf>,
    /// Directories whose contents are removed (the directories stay: they are mounts).
    pub empty_dirs: Vec<PathBuf>,
}

/// The outcome of the API question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The DaemonSet is gone, being deleted, or hidden from us: clean up. The reason says which.
    Uninstalling(String),
    /// Keep everything (a restart); the reason says why.
    Staying(String),
}

/// Classifies the answer to `GET daemonsets/<name>`.
pub fn verdict(answer: Result<bool, kube::Error>) -> Verdict {
    match answer {
        Ok(true) => Verdict::Uninstalling("the DaemonSet is being deleted".into()),
        Ok(false) => Verdict::Staying("the DaemonSet exists".into()),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            Verdict::Uninstalling("the DaemonSet is gone".into())
        }
        Err(kube::Error::Api(s)) if s.code == 401 || s.code == 403 => {
            Verdict::Uninstalling(format!(
                "the agent may no longer read its DaemonSet (HTTP {}): its RBAC was removed with it",
                s.code
            ))
        }
        Err(e) => Verdict::Staying(format!("the API server did not answer ({e})")),
    }
}

/// Asks whether the DaemonSet `namespace/name` is gone or going (5 s at most).
pub async fn is_uninstalling(kubeconfig: Option<&Path>, namespace: &str, name: &str) -> Verdict {
    let client = match client(kubeconfig).await {
        Ok(c) => c,
        Err(e) => return Verdict::Staying(format!("no API client ({e})")),
    };
    let api: kube::Api<k8s_openapi::api::apps::v1::DaemonSet> =
        kube::Api::namespaced(client, namespace);
    let answer = tokio::time::timeout(Duration::from_secs(5), api.get(name)).await;
    match answer {
        Ok(r) => verdict(r.map(|ds| ds.metadata.deletion_timestamp.is_some())),
        Err(_) => Verdict::Staying("the API server did not answer within 5 s".into()),
    }
}

async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| e.to_string())?
        }
        None => kube::Config::infer().await.map_err(|e| e.to_string())?,
    };
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

/// Removes what `plan` names; returns what was removed (for the log and the tests).
pub async fn cleanup(plan: &CleanupPlan) -> Vec<String> {
    let mut done = Vec::new();
    if let Some(dir) = &plan.cni_conf_dir {
        remove_file(&dir.join(cni::conflist::CONFLIST_NAME), &mut done);
    }
    if let Some(dir) = &plan.cni_bin_dir {
        remove_file(&dir.join(cni::conflist::BINARY_NAME), &mut done);
    }
    match crate::host_nat::delete_table() {
        Ok(true) => done.push(format!("nft table {}", crate::host_nat::TABLE)),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "uninstall: nft table not removed"),
    }
    if let Some(ctl) = &plan.pod_vswitchd_ctl {
        wait_gone(ctl, Duration::from_secs(20)).await;
        for tap in DATAPATH_TAPS {
            if delete_tap(tap) {
                done.push(format!("tap {tap}"));
            }
        }
    }
    for dir in &plan.empty_dirs {
        empty_dir(dir, &mut done);
    }
    done
}

fn remove_file(p: &Path, done: &mut Vec<String>) {
    match std::fs::remove_file(p) {
        Ok(()) => done.push(p.display().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %p.display(), error = %e, "uninstall: not removed"),
    }
}

/// Removes everything inside `dir` (not `dir` itself, a mount point in the pod).
pub fn empty_dir(dir: &Path, done: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let r = if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        match r {
            Ok(()) => done.push(p.display().to_string()),
            Err(err) => tracing::warn!(path = %p.display(), error = %err, "uninstall: not removed"),
        }
    }
}

/// Waits until nothing listens on the unix socket `ctl` any more (the daemon exited).
async fn wait_gone(ctl: &Path, timeout: Duration) {
    let t0 = Instant::now();
    while tokio::net::UnixStream::connect(ctl).await.is_ok() {
        if t0.elapsed() >= timeout {
            tracing::warn!(ctl = %ctl.display(), "uninstall: ovs-vswitchd still answers; deleting its taps anyway");
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes `name` if it is a tun/tap device (never another kind of link); true if deleted.
fn delete_tap(name: &str) -> bool {
    let sys = Path::new("/sys/class/net").join(name);
    if !sys.join("tun_flags").exists() {
        return false;
    }
    match std::process::Command::new("ip")
        .args(["link", "del", name])
        .output()
    {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            tracing::warn!(tap = name, stderr = %String::from_utf8_lossy(&o.stderr).trim(), "uninstall: tap not deleted");
            false
        }
        Err(e) => {
            tracing::warn!(tap = name, error = %e, "uninstall: cannot run ip");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", "y")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn only_a_missing_or_hidden_daemonset_means_uninstall() {
        assert!(matches!(verdict(Ok(true)), Verdict::Uninstalling(_)));
        assert!(matches!(verdict(Ok(false)), Verdict::Staying(_)));
        for code in [404, 401, 403] {
            assert!(
                matches!(verdict(Err(api_error(code))), Verdict::Uninstalling(_)),
                "{code}"
            );
        }
        for code in [500, 503, 429] {
            assert!(
                matches!(verdict(Err(api_error(code))), Verdict::Staying(_)),
                "{code}"
            );
        }
    }

    #[test]
    fn empties_a_directory_but_keeps_it() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("vhost")).unwrap();
        std::fs::write(d.path().join("vhost/sock"), b"").unwrap();
        std::fs::write(d.path().join("cni-server.sock"), b"").unwrap();
        let mut done = Vec::new();
        empty_dir(d.path(), &mut done);
        assert_eq!(done.len(), 2, "{done:?}");
        assert!(d.path().exists());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn never_deletes_a_link_that_is_not_a_tap() {
        assert!(!delete_tap("lo"));
        assert!(!delete_tap("no-such-link0"));
    }
}
