//! [`Plumbing`]: the host side of a pod attachment that is not OVS: the veth pair and its
//! addresses inside the pod's netns ([`crate::attach::pod_iface`]), the vhost-user socket
//! directories ([`vhost::socket_dir`]: owner, mode, bind mounts), whether a netns still
//! exists, and the node's free hugepages. [`KernelPlumbing`] does it for real (rtnetlink,
//! tested as root by `dataplane/tests/pod_iface.rs`); the attachments' unit tests use a
//! fake that records the calls.

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use vhost::{SocketLayout, VhostUserConfig, socket_dir};

use crate::attach::pod_iface::{self, PodInterfaceSpec};

/// What the attachments do on the host besides OVS. Errors are sentences naming the step.
pub trait Plumbing: Send + Sync {
    /// Creates (or repairs) the pod's veth pair and configures it inside the netns.
    fn setup(&self, spec: PodInterfaceSpec) -> BoxFuture<'_, Result<(), String>>;
    /// Deletes the host end `host_ifname` (and so the pair); a missing one is Ok.
    fn teardown(&self, host_ifname: String) -> BoxFuture<'_, Result<(), String>>;
    /// Compares the pod interface with `spec` (CNI CHECK).
    fn check(&self, spec: PodInterfaceSpec) -> BoxFuture<'_, Result<(), String>>;
    /// Creates a vhost-user socket directory (owner and mode of `cfg`; `clear_stale`:
    /// removes a socket no one listens on) and bind-mounts it onto `volume_target`.
    fn prepare_socket_dir(
        &self,
        layout: SocketLayout,
        cfg: VhostUserConfig,
        clear_stale: bool,
        volume_target: Option<PathBuf>,
    ) -> BoxFuture<'_, Result<(), String>>;
    /// Unmounts a socket directory from `volume_target` and removes it (unless
    /// `keep_dir`).
    fn remove_socket_dir(
        &self,
        layout: SocketLayout,
        volume_target: Option<PathBuf>,
        keep_dir: bool,
    ) -> BoxFuture<'_, Result<(), String>>;
    /// Whether the directory `dir` exists.
    fn dir_exists(&self, dir: &Path) -> bool;
    /// Whether the netns `path` still exists (a sandbox without one is gone).
    fn netns_exists(&self, path: &Path) -> bool;
    /// The node's `/proc/meminfo` (hugepage counters), `""` when unreadable.
    fn meminfo(&self) -> String;
}

/// The real host: rtnetlink in the pod's netns on blocking threads.
#[derive(Debug, Default, Clone, Copy)]
pub struct KernelPlumbing;

async fn blocking<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("{what} worker: {e}"))?
}

impl Plumbing for KernelPlumbing {
    fn setup(&self, spec: PodInterfaceSpec) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(blocking("pod interface", move || {
            pod_iface::setup(&spec)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }))
    }

    fn teardown(&self, host_ifname: String) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(blocking("teardown", move || {
            pod_iface::teardown(None, &host_ifname)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }))
    }

    fn check(&self, spec: PodInterfaceSpec) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(blocking("check", move || {
            pod_iface::check(&spec).map_err(|e| e.to_string())
        }))
    }

    fn prepare_socket_dir(
        &self,
        layout: SocketLayout,
        cfg: VhostUserConfig,
        clear_stale: bool,
        volume_target: Option<PathBuf>,
    ) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(blocking("socket dir", move || {
            socket_dir::prepare(&layout, &cfg, clear_stale).map_err(|e| e.to_string())?;
            if let Some(t) = volume_target {
                let kubelet = cfg
                    .kubelet_dir
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(vhost::config::DEFAULT_KUBELET_DIR));
                socket_dir::bind_into(&layout, &kubelet, &t).map_err(|e| e.to_string())?;
            }
            Ok(())
        }))
    }

    fn remove_socket_dir(
        &self,
        layout: SocketLayout,
        volume_target: Option<PathBuf>,
        keep_dir: bool,
    ) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(blocking("socket dir", move || {
            if let Some(t) = &volume_target {
                socket_dir::unbind(&layout.dir, t).map_err(|e| e.to_string())?;
            }
            if !keep_dir {
                socket_dir::remove(&layout).map_err(|e| e.to_string())?;
            }
            Ok(())
        }))
    }

    fn dir_exists(&self, dir: &Path) -> bool {
        dir.is_dir()
    }

    fn netns_exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn meminfo(&self) -> String {
        std::fs::read_to_string("/proc/meminfo").unwrap_or_default()
    }
}
