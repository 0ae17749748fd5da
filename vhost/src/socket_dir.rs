//! The socket directory on the host: created for the workload's uid/gid and mode,
//! optionally bind-mounted onto a kubelet `emptyDir` volume (so the pod sees it at its
//! own mount path, however long), and removed on DEL.
//!
//! Idempotent: preparing twice or removing what is gone is fine. The bind mount needs the
//! agent in the host mount namespace (or one with `rshared` propagation to it).

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::mount::{MntFlags, MsFlags};
use nix::unistd::{Gid, Uid};

use crate::config::VhostUserConfig;
use crate::layout::SocketLayout;

fn io_err(what: &str, p: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what} {}: {e}", p.display()))
}

/// Creates the root (0755) and the interface directory (owner and mode from `cfg`). With
/// `clear_stale` (a new sandbox, before its workload starts) it removes a socket file left
/// by an earlier workload: the new one creates its own, being the vhost-user server. A
/// restore of a running sandbox passes `false`, keeping the live socket.
pub fn prepare(layout: &SocketLayout, cfg: &VhostUserConfig, clear_stale: bool) -> io::Result<()> {
    if let Some(root) = layout.dir.parent()
        && !root.exists()
    {
        std::fs::create_dir_all(root).map_err(|e| io_err("create", root, e))?;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| io_err("chmod", root, e))?;
    }
    match std::fs::create_dir(&layout.dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err("create", &layout.dir, e)),
    }
    nix::unistd::chown(
        &layout.dir,
        Some(Uid::from_raw(cfg.owner.uid)),
        Some(Gid::from_raw(cfg.owner.gid)),
    )
    .map_err(|e| io_err("chown", &layout.dir, e))?;
    std::fs::set_permissions(&layout.dir, std::fs::Permissions::from_mode(cfg.mode))
        .map_err(|e| io_err("chmod", &layout.dir, e))?;
    if !clear_stale {
        return Ok(());
    }
    match std::fs::remove_file(&layout.socket) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(io_err("remove stale socket", &layout.socket, e))
        }
        _ => Ok(()),
    }
}

/// Whether `target` already shows `dir` (same device and inode).
pub fn is_bound(dir: &Path, target: &Path) -> bool {
    match (std::fs::metadata(dir), std::fs::metadata(target)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Bind-mounts `dir` onto `target` (an existing directory, e.g. the pod's `emptyDir`),
/// unless it is there already.
pub fn bind_into(dir: &Path, target: &Path) -> io::Result<()> {
    if is_bound(dir, target) {
        return Ok(());
    }
    if !target.is_dir() {
        return Err(io_err(
            "bind the socket dir onto",
            target,
            "no such directory (is the volume an emptyDir of this pod?)",
        ));
    }
    nix::mount::mount(
        Some(dir),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| io_err("bind-mount onto", target, e))
}

/// Undoes [`bind_into`] (lazy unmount; not bound is fine).
pub fn unbind(dir: &Path, target: &Path) -> io::Result<()> {
    if !is_bound(dir, target) {
        return Ok(());
    }
    nix::mount::umount2(target, MntFlags::MNT_DETACH).map_err(|e| io_err("unmount", target, e))
}

/// Removes the socket and the interface directory (missing is fine).
pub fn remove(layout: &SocketLayout) -> io::Result<()> {
    match std::fs::remove_dir_all(&layout.dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("remove", &layout.dir, e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Owner;

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn prepare_sets_owner_mode_and_clears_stale_socket() {
        if !is_root() {
            eprintln!("skipped: chown needs root");
            return;
        }
        let root = tempfile::tempdir().expect("dir");
        let l = SocketLayout::new(&root.path().join("v"), "ns", "vm", "eth0", None).expect("ok");
        let cfg = VhostUserConfig {
            owner: Owner { uid: 107, gid: 108 },
            mode: 0o770,
            ..Default::default()
        };
        prepare(&l, &cfg, true).expect("prepare");
        std::fs::write(&l.socket, b"stale").expect("stale");
        prepare(&l, &cfg, false).expect("restore keeps the socket");
        assert!(l.socket.exists());
        prepare(&l, &cfg, true).expect("again");
        let m = std::fs::metadata(&l.dir).expect("dir");
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (107, 108, 0o770));
        assert!(!l.socket.exists(), "stale socket removed");
        remove(&l).expect("remove");
        assert!(!l.dir.exists());
        remove(&l).expect("remove twice");
    }

    #[test]
    fn bind_and_unbind() {
        if !is_root() {
            eprintln!("skipped: mount needs root");
            return;
        }
        let root = tempfile::tempdir().expect("dir");
        let l = SocketLayout::new(&root.path().join("v"), "ns", "vm", "eth0", None).expect("ok");
        prepare(&l, &VhostUserConfig::default(), true).expect("prepare");
        let vol = root
            .path()
            .join("pods/uid/volumes/kubernetes.io~empty-dir/vhost");
        assert!(bind_into(&l.dir, &vol).is_err(), "missing volume dir");
        std::fs::create_dir_all(&vol).expect("vol");
        bind_into(&l.dir, &vol).expect("bind");
        bind_into(&l.dir, &vol).expect("bind twice");
        std::fs::write(l.dir.join("probe"), b"x").expect("write");
        assert!(
            vol.join("probe").exists(),
            "the pod's view shows the socket dir"
        );
        unbind(&l.dir, &vol).expect("unbind");
        assert!(!vol.join("probe").exists());
        unbind(&l.dir, &vol).expect("unbind twice");
        remove(&l).expect("remove");
    }
}
