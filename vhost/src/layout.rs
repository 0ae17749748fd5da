//! Where a vhost-user socket lives: `<root>/<id>/<ifname>.sock`, where `<id>` is a
//! stable hash of (namespace, owner, ifname) ([`api::names::vhost_socket_id`], pinned by
//! the contract crate's golden tests). The owner is the VMI (or the name the pod
//! asks for), not the sandbox: a restarted or migrated VM gets the same path.
//!
//! A unix socket path must fit `sun_path` (108 bytes with the NUL). The host root is short
//! by design (`/var/run/zstack-ovn/vhost/<16 hex>/eth0.sock` is 46 bytes); a pod that
//! wants the socket at a long place (a kubelet `emptyDir`) gets the short directory
//! bind-mounted there (see [`crate::socket_dir`]). A path that is still too long is
//! refused with the numbers.

use std::path::{Path, PathBuf};

/// Longest socket path: `sun_path` is 108 bytes including the terminating NUL.
pub const SUN_PATH_MAX: usize = 107;
/// Prefix of the OVS port names of vhost-user interfaces.
pub use api::names::VHOST_PORT_PREFIX as PORT_PREFIX;

/// Why no socket path can be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error(
        "vhost-user socket path {path} is {len} bytes, over the {SUN_PATH_MAX}-byte unix socket \
         limit (sun_path); {hint}"
    )]
    TooLong {
        path: String,
        len: usize,
        hint: &'static str,
    },
    #[error("interface name {0:?} is not usable for a socket (1-15 chars, no '/')")]
    BadIfname(String),
    #[error("pod uid {0:?} is not usable in a kubelet path")]
    BadUid(String),
}

/// The socket of one pod interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketLayout {
    /// 16 hex digits, stable per (namespace, owner, ifname).
    pub id: String,
    /// Host directory holding the socket (shared into the pod).
    pub dir: PathBuf,
    /// Host socket path (OVS `options:vhost-server-path`).
    pub socket: PathBuf,
    /// The socket path as the pod sees it (its `podSocketDir`), when it differs.
    pub pod_socket: Option<PathBuf>,
    /// OVS Port/Interface name (`vhu` + 12 hex digits of the id).
    pub port_name: String,
}

fn check_len(p: &Path, hint: &'static str) -> Result<(), LayoutError> {
    let len = p.as_os_str().len();
    if len > SUN_PATH_MAX {
        return Err(LayoutError::TooLong {
            path: p.display().to_string(),
            len,
            hint,
        });
    }
    Ok(())
}

impl SocketLayout {
    /// The layout under host `root` for `ifname` of `owner` in `namespace`; `pod_dir` is
    /// where the pod mounts the directory (if not at the host path).
    pub fn new(
        root: &Path,
        namespace: &str,
        owner: &str,
        ifname: &str,
        pod_dir: Option<&Path>,
    ) -> Result<SocketLayout, LayoutError> {
        if !api::ifname::is_valid(ifname) {
            return Err(LayoutError::BadIfname(ifname.to_string()));
        }
        let id = api::names::vhost_socket_id(namespace, owner, ifname);
        let dir = root.join(&id);
        let file = format!("{ifname}.sock");
        let socket = dir.join(&file);
        check_len(
            &socket,
            "use a shorter socket root (socketDir in the NetworkAttachmentDefinition, or the \
             agent's ZSTACK_OVN_VHOST_DIR)",
        )?;
        let pod_socket = pod_dir.map(|d| d.join(&file));
        if let Some(p) = &pod_socket {
            check_len(p, "use a shorter podSocketDir")?;
        }
        Ok(SocketLayout {
            port_name: api::names::vhost_port_name(&id),
            id,
            dir,
            socket,
            pod_socket,
        })
    }

    /// The path the workload uses (device-info): the pod's view when it mounts the
    /// directory elsewhere, else the host path (a hostPath volume at the same place).
    pub fn device_path(&self) -> &Path {
        self.pod_socket.as_deref().unwrap_or(&self.socket)
    }
}

/// kubelet's directory of the pod's `emptyDir` volume `volume`.
pub fn kubelet_volume_dir(
    kubelet_dir: &Path,
    pod_uid: &str,
    volume: &str,
) -> Result<PathBuf, LayoutError> {
    let ok = !pod_uid.is_empty()
        && pod_uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !ok {
        return Err(LayoutError::BadUid(pod_uid.to_string()));
    }
    Ok(kubelet_dir
        .join("pods")
        .join(pod_uid)
        .join("volumes/kubernetes.io~empty-dir")
        .join(volume))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_per_interface_not_per_sandbox() {
        let root = Path::new("/var/run/zstack-ovn/vhost");
        let a = SocketLayout::new(root, "vms", "vm1", "eth0", None).expect("fits");
        let b = SocketLayout::new(root, "vms", "vm1", "eth0", None).expect("fits");
        assert_eq!(a, b);
        assert_eq!(a.socket, a.dir.join("eth0.sock"));
        assert!(a.socket.starts_with(root));
        assert_eq!(a.port_name.len(), 15);
        assert!(a.port_name.starts_with("vhu"));
        // every input matters, and the separator keeps ("ab","c") apart from ("a","bc")
        let others = [
            SocketLayout::new(root, "vms", "vm2", "eth0", None),
            SocketLayout::new(root, "other", "vm1", "eth0", None),
            SocketLayout::new(root, "vms", "vm1", "net1", None),
            SocketLayout::new(root, "vmsv", "m1", "eth0", None),
        ];
        for o in others {
            assert_ne!(o.expect("fits").id, a.id);
        }
        // the value is pinned: a change would move every VM's socket on upgrade
        assert_eq!(a.id, "6450589695b2d2da");
        assert_eq!(a.port_name, "vhu6450589695b2");
    }

    #[test]
    fn too_long_is_refused_with_numbers() {
        let long = PathBuf::from(format!("/{}", "d".repeat(90)));
        let e = SocketLayout::new(&long, "ns", "vm", "eth0", None).expect_err("long");
        let msg = e.to_string();
        assert!(msg.contains("is 118 bytes, over the 107-byte"), "{msg}");
        assert!(msg.contains("socketDir"), "{msg}");
        // exactly at the limit fits: root + '/' + 16 + '/' + 9 = 107
        let root = PathBuf::from(format!("/{}", "r".repeat(107 - 27 - 1)));
        let ok = SocketLayout::new(&root, "ns", "vm", "eth0", None).expect("fits");
        assert_eq!(ok.socket.as_os_str().len(), 107);
        let pod = PathBuf::from(format!("/{}", "p".repeat(100)));
        let e = SocketLayout::new(Path::new("/r"), "ns", "vm", "eth0", Some(&pod));
        assert!(
            e.expect_err("pod path")
                .to_string()
                .contains("podSocketDir")
        );
        assert!(matches!(
            SocketLayout::new(Path::new("/r"), "ns", "vm", "", None),
            Err(LayoutError::BadIfname(_))
        ));
    }

    #[test]
    fn device_path_is_the_pods_view() {
        let pod = Path::new("/var/run/kubevirt/sockets");
        let l = SocketLayout::new(Path::new("/r"), "ns", "vm", "eth0", Some(pod)).expect("ok");
        assert_eq!(l.device_path(), pod.join("eth0.sock"));
        let h = SocketLayout::new(Path::new("/r"), "ns", "vm", "eth0", None).expect("ok");
        assert_eq!(h.device_path(), h.socket);
    }

    #[test]
    fn kubelet_volume_path() {
        let p = kubelet_volume_dir(Path::new("/var/lib/kubelet"), "0b1c-2d", "vhost").expect("ok");
        assert_eq!(
            p,
            Path::new("/var/lib/kubelet/pods/0b1c-2d/volumes/kubernetes.io~empty-dir/vhost")
        );
        assert!(kubelet_volume_dir(Path::new("/k"), "../x", "v").is_err());
    }
}
