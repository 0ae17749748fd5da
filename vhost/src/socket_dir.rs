//! The socket directory on the host: created for the workload's uid/gid and mode,
//! optionally bind-mounted onto a kubelet `emptyDir` volume (so the pod sees it at its
//! own mount path, however long), and removed on DEL.
//!
//! Idempotent: preparing twice or removing what is gone is fine. The bind mount needs the
//! agent in the host mount namespace (or one with `rshared` propagation to it).
//!
//! The agent is privileged and these paths end in directories a workload writes, so every
//! path below a trusted root (the socket root, kubelet's directory: the administrator's
//! configuration, resolved as given) is resolved with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`, and the owner, mode, stale socket and bind mount are applied
//! through the file descriptors: a symlink planted on the way is refused (`ELOOP`), never
//! followed to chown, chmod, unlink or mount something else.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::mount::{MntFlags, MsFlags};
use nix::sys::stat::{Mode, fchmod};
use nix::unistd::{Gid, Uid, UnlinkatFlags, fchown, unlinkat};

use crate::config::VhostUserConfig;
use crate::layout::SocketLayout;

fn io_err(what: &str, p: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what} {}: {e}", p.display()))
}

/// Opens directory `rel` beneath `root` without following any symlink below `root`
/// (`O_PATH` when `path_only`: enough to mount on or compare, not to chown).
fn open_beneath(root: &Path, rel: &Path, path_only: bool) -> io::Result<OwnedFd> {
    let rootfd = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err("open", root, e))?;
    let rel_ok = rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !rel_ok {
        return Err(io_err(
            "open",
            &root.join(rel),
            "not a plain path below its root",
        ));
    }
    let mode = if path_only {
        OFlag::O_PATH
    } else {
        OFlag::O_RDONLY
    };
    let how = OpenHow::new()
        .flags(mode | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    let target = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    openat2(rootfd.as_fd(), target, how).map_err(|e| {
        let full = root.join(rel);
        match e {
            Errno::ELOOP | Errno::EXDEV => io_err(
                "open",
                &full,
                "a symlink on the way (refused: paths below the root are never followed through symlinks)",
            ),
            Errno::ENOTDIR => io_err("open", &full, "not a directory"),
            e => io_err("open", &full, e),
        }
    })
}

/// `/proc/self/fd/N` of `fd`: a path naming exactly that file for mount(2).
fn fd_path(fd: &OwnedFd) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The parent (the socket root) and the name of the interface directory.
fn split(layout: &SocketLayout) -> io::Result<(&Path, &Path)> {
    match (layout.dir.parent(), layout.dir.file_name()) {
        (Some(root), Some(name)) => Ok((root, Path::new(name))),
        _ => Err(io_err("socket dir", &layout.dir, "has no parent directory")),
    }
}

/// Creates the root (0755) and the interface directory (owner and mode from `cfg`). With
/// `clear_stale` (a new sandbox, before its workload starts) it removes a socket file left
/// by an earlier workload: the new one creates its own, being the vhost-user server. A
/// restore of a running sandbox passes `false`, keeping the live socket.
pub fn prepare(layout: &SocketLayout, cfg: &VhostUserConfig, clear_stale: bool) -> io::Result<()> {
    let (root, name) = split(layout)?;
    if !root.exists() {
        std::fs::create_dir_all(root).map_err(|e| io_err("create", root, e))?;
        std::fs::set_permissions(root, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| io_err("chmod", root, e))?;
    }
    let rootfd = open_beneath(root, Path::new(""), false)?;
    match nix::sys::stat::mkdirat(rootfd.as_fd(), name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(io_err("create", &layout.dir, e)),
    }
    let dir = open_beneath(root, name, false)?;
    fchown(
        dir.as_fd(),
        Some(Uid::from_raw(cfg.owner.uid)),
        Some(Gid::from_raw(cfg.owner.gid)),
    )
    .map_err(|e| io_err("chown", &layout.dir, e))?;
    fchmod(dir.as_fd(), Mode::from_bits_truncate(cfg.mode))
        .map_err(|e| io_err("chmod", &layout.dir, e))?;
    if !clear_stale {
        return Ok(());
    }
    let Some(sock) = layout.socket.file_name() else {
        return Ok(());
    };
    // unlinkat in the directory's fd: a symlink there is removed, never followed
    match unlinkat(dir.as_fd(), sock, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(io_err("remove stale socket", &layout.socket, e)),
    }
}

/// Whether `target` already shows `dir` (same device and inode).
pub fn is_bound(dir: &Path, target: &Path) -> bool {
    match (
        std::fs::symlink_metadata(dir),
        std::fs::symlink_metadata(target),
    ) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Bind-mounts the interface directory of `layout` onto `target` (an existing directory
/// below `target_root`, kubelet's directory: the pod's `emptyDir`), unless it is there
/// already. Both are opened without following symlinks and mounted by file descriptor.
pub fn bind_into(layout: &SocketLayout, target_root: &Path, target: &Path) -> io::Result<()> {
    let rel = target.strip_prefix(target_root).map_err(|_| {
        io_err(
            "bind the socket dir onto",
            target,
            format!("not below {}", target_root.display()),
        )
    })?;
    if is_bound(&layout.dir, target) {
        return Ok(());
    }
    let (root, name) = split(layout)?;
    let src = open_beneath(root, name, true)?;
    let dst = open_beneath(target_root, rel, true).map_err(|e| {
        io_err(
            "bind the socket dir onto",
            target,
            format!("{e} (is the volume an emptyDir of this pod?)"),
        )
    })?;
    nix::mount::mount(
        Some(&fd_path(&src)),
        &fd_path(&dst),
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| io_err("bind-mount onto", target, e))
}

/// Undoes [`bind_into`] (lazy unmount, never through a symlink; not bound is fine).
pub fn unbind(dir: &Path, target: &Path) -> io::Result<()> {
    if !is_bound(dir, target) {
        return Ok(());
    }
    nix::mount::umount2(target, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW)
        .map_err(|e| io_err("unmount", target, e))
}

/// Removes the socket and the interface directory (missing is fine; `remove_dir_all`
/// removes symlinks inside, never what they point to).
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
        assert!(
            bind_into(&l, root.path(), &vol).is_err(),
            "missing volume dir"
        );
        std::fs::create_dir_all(&vol).expect("vol");
        bind_into(&l, root.path(), &vol).expect("bind");
        bind_into(&l, root.path(), &vol).expect("bind twice");
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

    /// A workload that plants symlinks where the agent works gets a refusal naming it,
    /// and nothing outside is chowned, chmodded, unlinked or mounted on.
    #[test]
    fn symlinks_on_the_way_are_refused_not_followed() {
        if !is_root() {
            eprintln!("skipped: chown and mount need root");
            return;
        }
        use std::os::unix::fs::{PermissionsExt, symlink};
        let root = tempfile::tempdir().expect("dir");
        let outside = root.path().join("outside");
        std::fs::create_dir(&outside).expect("outside");
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::write(outside.join("precious"), b"x").expect("file");
        let l = SocketLayout::new(&root.path().join("v"), "ns", "vm", "eth0", None).expect("ok");
        std::fs::create_dir_all(root.path().join("v")).expect("socket root");
        // the interface directory replaced by a symlink to a directory outside
        symlink(&outside, &l.dir).expect("symlink");
        let e = prepare(&l, &VhostUserConfig::default(), true).expect_err("refused");
        assert!(e.to_string().contains("symlink on the way"), "{e}");
        let m = std::fs::metadata(&outside).expect("outside");
        assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o700), "outside untouched");
        std::fs::remove_file(&l.dir).expect("unlink");

        // the stale socket replaced by a symlink: removed itself, its target kept
        prepare(&l, &VhostUserConfig::default(), true).expect("prepare");
        symlink(outside.join("precious"), &l.socket).expect("symlink");
        prepare(&l, &VhostUserConfig::default(), true).expect("prepare again");
        assert!(outside.join("precious").exists(), "the link's target kept");
        assert!(
            std::fs::symlink_metadata(&l.socket).is_err(),
            "the link removed"
        );

        // the pod's volume directory reached through a symlink: no mount
        let kubelet = root.path().join("kubelet");
        let vol_parent = kubelet.join("pods/uid/volumes/kubernetes.io~empty-dir");
        std::fs::create_dir_all(&vol_parent).expect("volumes");
        symlink(&outside, vol_parent.join("vhost")).expect("symlink");
        let e = bind_into(&l, &kubelet, &vol_parent.join("vhost")).expect_err("refused");
        assert!(e.to_string().contains("symlink on the way"), "{e}");
        assert!(
            !is_bound(&l.dir, &outside),
            "nothing mounted on the link's target"
        );
        // a target outside kubelet's directory
        let e = bind_into(&l, &kubelet, &outside).expect_err("refused");
        assert!(e.to_string().contains("not below"), "{e}");
        remove(&l).expect("remove");
    }
}
