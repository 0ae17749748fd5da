//! Receive packet steering (RPS) of the pod end of a veth.
//!
//! On a userspace datapath an AF_XDP port transmits into the pod's veth from the PMD
//! thread's `sendto`, and without steering the kernel runs the pod's whole TCP/IP input
//! there, on the PMD's core, before the syscall returns. RPS on the pod end moves that
//! work to the CPUs in the mask.
//!
//! `rps_cpus` exists only in sysfs, and a sysfs mount shows the devices of the network
//! namespace that mounted it. So, as `ip netns exec` does, a worker thread enters the pod
//! netns, unshares its mount namespace (the thread's own: it goes away with the thread),
//! makes it private, mounts a fresh sysfs on `/sys` and writes `queues/rx-*/rps_cpus`.

use std::path::Path;

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

use super::{PlumbError, StepExt, netns};

/// Sets `rps_cpus` of every rx queue of `ifname` in the netns at `netns_path` to `mask`
/// (sysfs bitmap format, e.g. `00000001`). Returns how many queues were changed (0: all
/// already had it).
pub fn set_rps(netns_path: &Path, ifname: &str, mask: &str) -> Result<usize, PlumbError> {
    let (ifname, mask) = (ifname.to_string(), mask.to_string());
    netns::run_blocking_in_netns(Some(netns_path), move || {
        unshare(CloneFlags::CLONE_NEWNS).step(|| "unshare the mount namespace".to_string())?;
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .step(|| "make the thread's mounts private".to_string())?;
        mount(
            Some("sysfs"),
            "/sys",
            Some("sysfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .step(|| "mount sysfs in the pod netns".to_string())?;
        let dir = Path::new("/sys/class/net").join(&ifname).join("queues");
        let entries = std::fs::read_dir(&dir).step(|| format!("list {}", dir.display()))?;
        let mut changed = 0;
        for e in entries {
            let e = e.step(|| format!("list {}", dir.display()))?;
            if !e.file_name().to_string_lossy().starts_with("rx-") {
                continue;
            }
            let f = e.path().join("rps_cpus");
            let now = std::fs::read_to_string(&f).step(|| format!("read {}", f.display()))?;
            if same_mask(&now, &mask) {
                continue;
            }
            std::fs::write(&f, &mask).step(|| format!("write {mask} to {}", f.display()))?;
            changed += 1;
        }
        Ok(changed)
    })
}

/// Whether two sysfs bitmaps name the same CPUs (`1` = `00000001` = `00000000,00000001`).
fn same_mask(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        s.trim()
            .replace(',', "")
            .trim_start_matches('0')
            .to_ascii_lowercase()
    };
    norm(a) == norm(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_compare_by_value() {
        assert!(same_mask("1\n", "00000001"));
        assert!(same_mask("00000000,00000001", "00000001"));
        assert!(same_mask("0\n", "00000000"));
        assert!(same_mask("ff,ffffffff", "000000ff,ffffffff"));
        assert!(!same_mask("1", "00000002"));
        assert!(!same_mask("0", "00000001"));
    }
}
