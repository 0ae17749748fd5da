//! [`Plumbing`]: the host side of a pod attachment that is not OVS: the veth pair and its
//! addresses inside the pod's netns ([`crate::attach::pod_iface`]), the vhost-user socket
//! directories ([`vhost::socket_dir`]: owner, mode, bind mounts), whether a netns still
//! exists, and the node's free hugepages. [`KernelPlumbing`] does it for real (rtnetlink,
//! tested as root by `dataplane/tests/pod_iface.rs`); the attachments' unit tests use a
//! fake that records the calls.

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use vhost::{SocketLayout, VhostUserConfig, socket_dir};

use crate::attach::pod_iface::{self, CheckError, PlumbError, PodInterfaceSpec};

/// Why a host step of an attachment failed; its text names the step and what it acted
/// on (the attachments put it in the CNI error's message).
#[derive(Debug, thiserror::Error)]
pub enum PlumbingError {
    /// Setting up or deleting the pod's veth pair.
    #[error(transparent)]
    Interface(#[from] PlumbError),
    /// The pod interface differs from its record (CNI CHECK), or could not be read.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// A vhost-user socket directory step: `prepare`, `bind-mount`, `unmount`, `remove`.
    #[error("{step} {}: {source}", path.display())]
    SocketDir {
        step: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The blocking worker running a step died.
    #[error("{what} worker: {source}")]
    Worker {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

impl PlumbingError {
    fn socket_dir(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| PlumbingError::SocketDir { step, path, source }
    }
}

type Plumbed<'a> = BoxFuture<'a, Result<(), PlumbingError>>;

/// What the attachments do on the host besides OVS.
pub trait Plumbing: Send + Sync {
    /// Creates (or repairs) the pod's veth pair and configures it inside the netns.
    fn setup(&self, spec: PodInterfaceSpec) -> Plumbed<'_>;
    /// Deletes the host end `host_ifname` (and so the pair); a missing one is Ok.
    fn teardown(&self, host_ifname: String) -> Plumbed<'_>;
    /// Compares the pod interface with `spec` (CNI CHECK).
    fn check(&self, spec: PodInterfaceSpec) -> Plumbed<'_>;
    /// Creates a vhost-user socket directory (owner and mode of `cfg`; `clear_stale`:
    /// removes a socket no one listens on) and bind-mounts it onto `volume_target`.
    fn prepare_socket_dir(
        &self,
        layout: SocketLayout,
        cfg: VhostUserConfig,
        clear_stale: bool,
        volume_target: Option<PathBuf>,
    ) -> Plumbed<'_>;
    /// Unmounts a socket directory from `volume_target` and removes it (unless
    /// `keep_dir`).
    fn remove_socket_dir(
        &self,
        layout: SocketLayout,
        volume_target: Option<PathBuf>,
        keep_dir: bool,
    ) -> Plumbed<'_>;
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
    f: impl FnOnce() -> Result<T, PlumbingError> + Send + 'static,
) -> Result<T, PlumbingError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|source| PlumbingError::Worker { what, source })?
}

impl Plumbing for KernelPlumbing {
    fn setup(&self, spec: PodInterfaceSpec) -> Plumbed<'_> {
        Box::pin(blocking("pod interface", move || {
            pod_iface::setup(&spec)?;
            Ok(())
        }))
    }

    fn teardown(&self, host_ifname: String) -> Plumbed<'_> {
        Box::pin(blocking("teardown", move || {
            pod_iface::teardown(None, &host_ifname)?;
            Ok(())
        }))
    }

    fn check(&self, spec: PodInterfaceSpec) -> Plumbed<'_> {
        Box::pin(blocking("check", move || Ok(pod_iface::check(&spec)?)))
    }

    fn prepare_socket_dir(
        &self,
        layout: SocketLayout,
        cfg: VhostUserConfig,
        clear_stale: bool,
        volume_target: Option<PathBuf>,
    ) -> Plumbed<'_> {
        Box::pin(blocking("socket dir", move || {
            socket_dir::prepare(&layout, &cfg, clear_stale)
                .map_err(PlumbingError::socket_dir("prepare", &layout.dir))?;
            if let Some(t) = volume_target {
                let kubelet = cfg
                    .kubelet_dir
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(vhost::config::DEFAULT_KUBELET_DIR));
                socket_dir::bind_into(&layout, &kubelet, &t)
                    .map_err(PlumbingError::socket_dir("bind-mount", &t))?;
            }
            Ok(())
        }))
    }

    fn remove_socket_dir(
        &self,
        layout: SocketLayout,
        volume_target: Option<PathBuf>,
        keep_dir: bool,
    ) -> Plumbed<'_> {
        Box::pin(blocking("socket dir", move || {
            if let Some(t) = &volume_target {
                socket_dir::unbind(&layout.dir, t)
                    .map_err(PlumbingError::socket_dir("unmount", t))?;
            }
            if !keep_dir {
                socket_dir::remove(&layout)
                    .map_err(PlumbingError::socket_dir("remove", &layout.dir))?;
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
