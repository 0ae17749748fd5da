//! What a container really uses, read from its cgroup v1 directories as kubelet's cAdvisor
//! does: CPU time (`cpuacct.usage`) and the working set (`memory.usage_in_bytes` minus
//! `total_inactive_file`, the figure kubelet evicts on and the scheduler's memory request
//! should cover). Hugepages are not in it (hugetlb cgroup; the chart requests those).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// One reading of a container's cgroup.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Cumulative CPU time, ns.
    pub cpu_ns: u64,
    /// Working set, bytes.
    pub working_set: u64,
}

/// The cgroup directory named `id` (a containerd container id) under `root` in hierarchy
/// `controller` (`cpuacct`, `memory`), e.g. below `/sys/fs/cgroup/memory/<node's
/// --cgroup-root>/kubepods/…/pod<uid>/<id>`.
pub fn find_container_dir(controller: &Path, id: &str) -> Result<PathBuf> {
    fn walk(d: &Path, id: &str, depth: usize) -> Option<PathBuf> {
        if d.file_name().is_some_and(|n| n == id) {
            return Some(d.to_path_buf());
        }
        if depth == 0 {
            return None;
        }
        let rd = std::fs::read_dir(d).ok()?;
        rd.flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .find_map(|e| walk(&e.path(), id, depth - 1))
    }
    walk(controller, id, 6)
        .with_context(|| format!("no cgroup of container {id} under {}", controller.display()))
}

fn read_u64(p: &Path) -> Result<u64> {
    let s = std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?;
    s.trim()
        .parse()
        .with_context(|| format!("{}: not a number: {s:?}", p.display()))
}

/// The working set from a memory cgroup's `memory.usage_in_bytes` and `memory.stat`.
pub fn working_set(usage: u64, stat: &str) -> Result<u64> {
    let inactive = stat
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .context("memory.stat without total_inactive_file")?
        .trim()
        .parse::<u64>()
        .context("total_inactive_file")?;
    Ok(usage.saturating_sub(inactive))
}

/// A container's cgroup pair: `cpuacct` and `memory` directories.
#[derive(Debug, Clone)]
pub struct ContainerCgroup {
    pub cpu: PathBuf,
    pub memory: PathBuf,
}

impl ContainerCgroup {
    /// Finds container `id`'s directories below `cgroup_root` (kubelet's `--cgroup-root`,
    /// e.g. `/ce2e-node1`) in the host's hierarchies.
    pub fn find(cgroup_root: &str, id: &str) -> Result<Self> {
        let rel = cgroup_root.trim_start_matches('/');
        let base = Path::new("/sys/fs/cgroup");
        // cpuacct is its own hierarchy on some hosts (this machine), joined with cpu on others
        let cpuacct = ["cpuacct", "cpu,cpuacct"]
            .iter()
            .map(|c| base.join(c))
            .find(|d| d.join("cpuacct.usage").exists())
            .context("no cpuacct cgroup v1 hierarchy under /sys/fs/cgroup")?;
        Ok(Self {
            cpu: find_container_dir(&cpuacct.join(rel), id)?,
            memory: find_container_dir(&base.join("memory").join(rel), id)?,
        })
    }

    pub fn read(&self) -> Result<Reading> {
        let usage = read_u64(&self.memory.join("memory.usage_in_bytes"))?;
        let stat_path = self.memory.join("memory.stat");
        let stat = std::fs::read_to_string(&stat_path)
            .with_context(|| format!("read {}", stat_path.display()))?;
        Ok(Reading {
            cpu_ns: read_u64(&self.cpu.join("cpuacct.usage"))?,
            working_set: working_set(usage, &stat)?,
        })
    }
}

/// Cores used between two readings `secs` apart.
pub fn cores(a: &Reading, b: &Reading, secs: f64) -> Result<f64> {
    if secs <= 0.0 || b.cpu_ns < a.cpu_ns {
        bail!("readings out of order ({a:?} then {b:?} over {secs} s)");
    }
    Ok((b.cpu_ns - a.cpu_ns) as f64 / 1e9 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_set_leaves_out_inactive_file_pages() {
        let stat = "cache 100\nrss 50\ntotal_inactive_file 30\ntotal_active_file 70\n";
        assert_eq!(working_set(200, stat).ok(), Some(170));
        assert!(working_set(200, "rss 1\n").is_err());
    }

    #[test]
    fn cores_over_an_interval() {
        let a = Reading {
            cpu_ns: 1_000_000_000,
            working_set: 0,
        };
        let b = Reading {
            cpu_ns: 1_500_000_000,
            working_set: 0,
        };
        assert_eq!(cores(&a, &b, 10.0).ok(), Some(0.05));
        assert!(cores(&b, &a, 10.0).is_err());
    }

    #[test]
    fn finds_a_container_directory_by_id() {
        let dir = std::env::temp_dir().join(format!("zovn-usage-{}", std::process::id()));
        let leaf = dir.join("kubepods/besteffort/podabc/0123abcd");
        std::fs::create_dir_all(&leaf).expect("mkdir");
        assert_eq!(find_container_dir(&dir, "0123abcd").ok(), Some(leaf));
        assert!(find_container_dir(&dir, "ffff").is_err());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
