//! 2 MiB hugepages and a hugetlbfs mount for OVS-DPDK nodes. [`ensure`] records exactly
//! what it changed (page count, mount) so [`restore`] undoes only that.

use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::error::{LabError, Result};

/// The 2 MiB page pool.
pub const NR_2M: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
/// Pages an OVS-DPDK node needs (socket-mem 256 MiB, limit 512 MiB).
pub const MIN_PAGES_2M: u64 = 512;

/// What the lab changed; `None` fields were left as found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugepageChange {
    /// `(previous, set)` 2 MiB page counts if the lab raised the pool.
    pub pages: Option<(u64, u64)>,
    /// hugetlbfs mount point the lab created (none existed).
    pub mounted: Option<PathBuf>,
}

impl HugepageChange {
    /// True if nothing was changed.
    pub fn is_empty(&self) -> bool {
        self.pages.is_none() && self.mounted.is_none()
    }
}

/// Current number of 2 MiB pages.
pub fn nr_pages_2m() -> Result<u64> {
    let s = std::fs::read_to_string(NR_2M).map_err(|e| LabError::io("read", NR_2M, e))?;
    s.trim()
        .parse()
        .map_err(|_| LabError::Invalid(format!("{NR_2M}: unexpected content {s:?}")))
}

/// Sets the 2 MiB pool to `n` pages.
pub fn set_nr_pages_2m(n: u64) -> Result<()> {
    std::fs::write(NR_2M, n.to_string()).map_err(|e| LabError::io("write", NR_2M, e))
}

/// hugetlbfs mount points (from `/proc/mounts`).
pub fn hugetlbfs_mounts() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    parse_hugetlbfs_mounts(&mounts)
}

/// The mount points of `hugetlbfs` lines in a `/proc/mounts` text.
pub fn parse_hugetlbfs_mounts(mounts: &str) -> Vec<PathBuf> {
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[2] == "hugetlbfs").then(|| PathBuf::from(f[1]))
        })
        .collect()
}

/// Ensures ≥ [`MIN_PAGES_2M`] 2 MiB pages and a hugetlbfs mount (mounting one at
/// `mount_dir` if none exists). Updates `change` as it goes, so a failure half-way still
/// leaves an accurate record for [`restore`].
pub fn ensure(mount_dir: &Path, change: &mut HugepageChange) -> Result<()> {
    if let Some(raised) = raise_pages_2m(MIN_PAGES_2M)? {
        change.pages = Some(raised);
    }
    if hugetlbfs_mounts().is_empty() {
        std::fs::create_dir_all(mount_dir).map_err(|e| LabError::io("create dir", mount_dir, e))?;
        mount(
            Some("nodev"),
            mount_dir,
            Some("hugetlbfs"),
            MsFlags::empty(),
            Some("pagesize=2M"),
        )
        .map_err(|e| LabError::io("mount hugetlbfs at", mount_dir, e.into()))?;
        change.mounted = Some(mount_dir.to_path_buf());
        info!(dir = %mount_dir.display(), "mounted hugetlbfs");
    }
    Ok(())
}

/// Raises the 2 MiB pool to at least `want` pages; returns `(previous, want)` if it
/// changed it (for [`set_nr_pages_2m`] to restore), `None` if there were enough.
pub fn raise_pages_2m(want: u64) -> Result<Option<(u64, u64)>> {
    let before = nr_pages_2m()?;
    if before >= want {
        return Ok(None);
    }
    set_nr_pages_2m(want)?;
    let mut now = nr_pages_2m()?;
    if now < want {
        // memory full of page cache is fragmented: free clean cache, compact, retry
        warn!(
            now,
            want, "short of 2 MiB pages: dropping clean page cache and compacting"
        );
        let _ = std::fs::write("/proc/sys/vm/drop_caches", "1\n");
        let _ = std::fs::write("/proc/sys/vm/compact_memory", "1\n");
        set_nr_pages_2m(want)?;
        now = nr_pages_2m()?;
    }
    if now < want {
        let _ = set_nr_pages_2m(before);
        return Err(LabError::Invalid(format!(
            "asked the kernel for {want} 2 MiB hugepages, got {now}"
        )));
    }
    info!(before, now, "raised 2 MiB hugepages");
    Ok(Some((before, want)))
}

/// Undoes `change`: unmounts the lab's hugetlbfs mount and restores the page count.
pub fn restore(change: &HugepageChange) -> Result<()> {
    if let Some(dir) = &change.mounted
        && hugetlbfs_mounts().iter().any(|m| m == dir)
    {
        umount2(dir.as_path(), MntFlags::empty())
            .map_err(|e| LabError::io("unmount hugetlbfs at", dir, e.into()))?;
        let _ = std::fs::remove_dir(dir);
        info!(dir = %dir.display(), "unmounted hugetlbfs");
    }
    if let Some((previous, _)) = change.pages {
        set_nr_pages_2m(previous)?;
        wait_released(previous)?;
        info!(previous, "restored 2 MiB hugepages");
    }
    Ok(())
}

/// How long [`restore`] waits for pages still mapped by an exiting process.
const RELEASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until the pool is down to `target` pages. A multi-threaded DPDK process reads as
/// a zombie while its last threads still hold its memory: the kernel keeps those pages as
/// surplus and frees them when the process's memory goes, so the count drops by itself.
fn wait_released(target: u64) -> Result<()> {
    let deadline = std::time::Instant::now() + RELEASE_TIMEOUT;
    loop {
        let now = nr_pages_2m()?;
        if now <= target {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            // a last write for pages freed since, then report what is still held
            set_nr_pages_2m(target)?;
            let now = nr_pages_2m()?;
            if now <= target {
                return Ok(());
            }
            return Err(LabError::Invalid(format!(
                "2 MiB hugepages: set back to {target}, but {now} are still held after {}s \
                 (a process still maps them: see HugePages_Surp in /proc/meminfo)",
                RELEASE_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_hugetlbfs_mounts() {
        let m = "proc /proc proc rw 0 0\nnodev /tmp/l/hugepages hugetlbfs rw,pagesize=2M 0 0\n";
        assert_eq!(
            parse_hugetlbfs_mounts(m),
            vec![PathBuf::from("/tmp/l/hugepages")]
        );
        assert!(parse_hugetlbfs_mounts("proc /proc proc rw 0 0").is_empty());
    }
}
