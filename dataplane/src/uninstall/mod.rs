//! Leaving a node clean when the plugin is uninstalled (`helm uninstall`), and only then.
//!
//! The agent cannot tell a pod restart (rolling update, eviction, `kubectl delete pod`,
//! even `--force`) from an uninstall by the SIGTERM, nor by what the API server says about
//! its DaemonSet at that moment: a force-deleted pod's token is invalid (401), a node pool
//! renamed in the values replaces its DaemonSet (404), an operator may delete and recreate
//! one. The signal is explicit instead, and only `helm uninstall` produces it:
//!
//! | module | what |
//! |---|---|
//! | [`hook`] | the chart's `pre-delete` hook: creates the marker ConfigMap, waits (bounded) until every agent pod's node acknowledged it, deletes it |
//! | [`marker`] | the agent: watches the marker (one that was there at start is stale), writes the flag file, acknowledges |
//! | [`decide`] | at SIGTERM, pure: clean only with a marker seen during this run, and not while the DaemonSet is still there |
//! | [`client`] | the Kubernetes client, the errors, the DaemonSet question |
//! | [`stop_controller`] | external mode: the hook scales the controller to 0 and waits for its pods, so the NB can be cleaned after it |
//!
//! [`cleanup`] then removes what the plugin put on the node: the conflist first (kubelet
//! stops calling the shim), the shim, the nf_tables table `inet zstack-ovn`, and — when OVS
//! runs in the node pod — waits for ovs-vswitchd to exit and deletes the tap devices the
//! userspace datapath leaves behind (br-int, br-phy, ovs-netdev, ovn-k8s-mp0, the `zpm*`
//! ports on platform switches of external mode), then empties
//! the given directories (OVS database, run dirs, vhost-user socket root, agent state).
//! The node's chassis certificate directory goes, and the OVS `SSL` row of ours pointing
//! ovn-controller at it (what stays otherwise when the host runs OVS).
//! Each step is logged with what it removed; a failing step is logged and the next runs.

pub mod client;
pub mod decide;
pub mod hook;
pub mod marker;
pub mod stop_controller;

pub use client::{UninstallError, client, read_daemonset};
pub use decide::{DaemonSetState, Decision, daemonset_state, decide};
pub use marker::{FLAG_FILE, MarkerWatch, UninstallRequest, UninstallSignal, watch_marker};

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
    /// The node's chassis key and certificate directory, removed with its contents, and
    /// the OVS database whose `SSL` row (ours) points ovn-controller at them: on a node
    /// whose host runs OVS (`ovs.hostManaged`) neither is otherwise emptied.
    pub chassis_cert_dir: Option<PathBuf>,
    pub ovs: Option<crate::ovs::Ovs>,
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
    match crate::host::nat::delete_table() {
        Ok(true) => done.push(format!("nft table {}", crate::host::nat::TABLE)),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "uninstall: nft table not removed"),
    }
    if let Some(ovs) = &plan.ovs {
        match tokio::time::timeout(Duration::from_secs(5), ovs.clear_ovn_ssl()).await {
            Ok(Ok(true)) => done.push("OVS SSL row".into()),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "uninstall: OVS SSL row not removed"),
            Err(_) => tracing::warn!("uninstall: OVS SSL row not removed: no answer in 5 s"),
        }
    }
    if let Some(dir) = &plan.chassis_cert_dir {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => done.push(dir.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %dir.display(), error = %e, "uninstall: not removed"),
        }
    }
    if let Some(ctl) = &plan.pod_vswitchd_ctl {
        wait_gone(ctl, Duration::from_secs(20)).await;
        // and the management ports on platform switches (external mode, `zpm*`)
        let platform: Vec<String> = std::fs::read_dir("/sys/class/net")
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| api::platform_mgmt::is_device_name(n))
                    .collect()
            })
            .unwrap_or_default();
        for tap in DATAPATH_TAPS
            .iter()
            .copied()
            .chain(platform.iter().map(String::as_str))
        {
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
