//! Atomic file replacement: write a temporary file in the same directory, give it its
//! mode, make it as durable as asked, rename it over the target.
//!
//! A reader (kubelet reading a conflist, QEMU or KubeVirt reading a device-info file, the
//! agent reading its records after a restart) sees the old file or the new one, never a
//! part. What survives a *crash* is the caller's choice, said at each call:
//!
//! | [`Durability`] | after a crash of the host |
//! |---|---|
//! | [`Volatile`](Durability::Volatile) | the old or the new file, or the new one empty (data not flushed): for files rewritten at every start |
//! | [`File`](Durability::File) | the old file or the complete new one (the data is flushed before the rename) |
//! | [`FileAndDir`](Durability::FileAndDir) | the complete new one once this returns (the rename is flushed too) |
//!
//! The temporary name is `.<name>.tmp.<pid>.<n>`: hidden, without the target's suffix (a
//! runtime scanning for `*.conflist` ignores it), unique per process and call; it is
//! removed when anything fails.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How much of a replacement must survive a crash (see the module table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    Volatile,
    File,
    FileAndDir,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn temp_path(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.tmp.{}.{n}", std::process::id()))
}

/// Replaces `path` with `data`, file mode `mode` (the umask does not apply).
pub fn write_atomic(path: &Path, data: &[u8], mode: u32, durability: Durability) -> io::Result<()> {
    write_atomic_with(path, mode, durability, |f| f.write_all(data))
}

/// Replaces `path` with what `fill` writes into the temporary file.
pub fn write_atomic_with(
    path: &Path,
    mode: u32,
    durability: Durability,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let tmp = temp_path(path);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        fill(&mut f)?;
        // explicit: the umask narrowed the mode given at creation
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        if durability != Durability::Volatile {
            f.sync_all()?;
        }
        drop(f);
        fs::rename(&tmp, path)?;
        if durability == Durability::FileAndDir {
            // not every filesystem lets a directory be synced: best effort there
            if let Ok(d) = File::open(path.parent().unwrap_or(Path::new("."))) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .expect("read dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp."))
            .collect()
    }

    #[test]
    fn replaces_with_the_mode_asked_whatever_the_umask() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("10-zstack-ovn.conflist");
        for (body, mode, dur) in [
            (&b"one"[..], 0o600, Durability::Volatile),
            (&b"two"[..], 0o644, Durability::File),
            (&b"three"[..], 0o755, Durability::FileAndDir),
        ] {
            write_atomic(&p, body, mode, dur).expect("write");
            assert_eq!(fs::read(&p).expect("read"), body);
            let m = fs::metadata(&p).expect("stat").permissions().mode() & 0o777;
            assert_eq!(m, mode, "{dur:?}");
        }
        assert!(leftovers(d.path()).is_empty());
    }

    #[test]
    fn a_failed_fill_leaves_the_old_file_and_no_temporary() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("record.json");
        write_atomic(&p, b"old", 0o644, Durability::File).expect("write");
        let e = write_atomic_with(&p, 0o644, Durability::FileAndDir, |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        })
        .expect_err("fill failed");
        assert_eq!(e.to_string(), "disk full");
        assert_eq!(fs::read(&p).expect("read"), b"old");
        assert!(leftovers(d.path()).is_empty(), "{:?}", leftovers(d.path()));
        // a missing directory: an error, nothing created
        let missing = d.path().join("no/such/dir/file");
        assert!(write_atomic(&missing, b"x", 0o644, Durability::Volatile).is_err());
    }

    #[test]
    fn the_temporary_name_hides_the_suffix_and_is_unique() {
        let p = Path::new("/etc/cni/net.d/10-zstack-ovn.conflist");
        let (a, b) = (temp_path(p), temp_path(p));
        assert_ne!(a, b);
        let name = a.file_name().expect("name").to_string_lossy().into_owned();
        assert!(name.starts_with(".10-zstack-ovn.conflist.tmp."), "{name}");
        assert!(!name.ends_with(".conflist"));
        assert_eq!(a.parent(), p.parent());
    }
}
