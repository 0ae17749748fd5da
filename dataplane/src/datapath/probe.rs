//! What the node has: CPUs, hugepages, hugetlbfs mounts, XDP sockets (from sysfs/procfs),
//! and what its ovs-vswitchd is (from the `Open_vSwitch` row).
//!
//! Reading is separate from deciding ([`crate::datapath::decide`]): the facts are plain data,
//! so every decision is unit-testable, and the status shows the facts it was made from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::cpus;
use crate::ovs::Ovs;

/// One hugepage size on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HugepageFacts {
    pub size_kb: u64,
    pub total: u64,
    pub free: u64,
    /// Free pages per NUMA node.
    pub free_per_numa: BTreeMap<u32, u64>,
    /// A hugetlbfs of this page size is mounted (DPDK needs one).
    pub mounted: bool,
}

/// The host side of the facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostFacts {
    pub online_cpus: BTreeSet<u32>,
    /// `isolcpus`: the scheduler never puts the agent (or OVS) there on its own.
    pub isolated_cpus: BTreeSet<u32>,
    /// The CPUs this agent may run on (its affinity; a cgroup cpuset shows here).
    pub allowed_cpus: BTreeSet<u32>,
    /// NUMA node of each CPU (empty on a kernel without NUMA info: all on node 0).
    pub cpu_numa: BTreeMap<u32, u32>,
    /// Hugepages by page size in kB.
    pub hugepages: BTreeMap<u64, HugepageFacts>,
    /// NUMA node of the configured NIC (`None`: unknown or no NIC configured).
    pub nic_numa: Option<u32>,
    /// The kernel can create AF_XDP sockets.
    pub xdp_sockets: bool,
    /// `MemTotal` of `/proc/meminfo` (kB); `None` when unreadable.
    pub mem_total_kib: Option<u64>,
    /// `uplink: dpdk`: why the host refuses the device (then DPDK is not asked to probe
    /// it); see [`crate::host::dpdk_nic::check`].
    pub uplink_refusal: Option<String>,
}

impl HostFacts {
    /// NUMA node of `cpu` (0 when unknown).
    pub fn numa_of(&self, cpu: u32) -> u32 {
        self.cpu_numa.get(&cpu).copied().unwrap_or(0)
    }
}

/// The ovs-vswitchd side of the facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OvsFacts {
    /// `Open_vSwitch.dpdk_version` is set: the DPDK build of ovs-vswitchd runs (or ran).
    pub dpdk_version: Option<String>,
    pub ovs_version: Option<String>,
    pub dpdk_initialized: bool,
    /// `iface_types` (empty until ovs-vswitchd has started once).
    pub iface_types: BTreeSet<String>,
    pub other_config: BTreeMap<String, String>,
    pub external_ids: BTreeMap<String, String>,
}

impl OvsFacts {
    /// ovs-vswitchd has reported in (`iface_types` filled).
    pub fn vswitchd_seen(&self) -> bool {
        !self.iface_types.is_empty()
    }

    /// The DPDK build (it lists `dpdk` interface types).
    pub fn dpdk_build(&self) -> bool {
        // the plain build reports dpdk_version "none" and no dpdk interface types
        self.iface_types.contains("dpdk")
            || self
                .dpdk_version
                .as_deref()
                .is_some_and(|v| v.starts_with("DPDK"))
    }

    pub fn afxdp_build(&self) -> bool {
        self.iface_types.contains("afxdp")
    }

    /// Reads the facts from the replica.
    pub fn read(ovs: &Ovs) -> OvsFacts {
        ovs.open_vswitch()
            .map(|r| OvsFacts::of(&r))
            .unwrap_or_default()
    }

    /// The facts of an `Open_vSwitch` row.
    pub fn of(r: &ovsdb::vswitch::OpenVSwitch) -> OvsFacts {
        let opt = |v: &Option<String>| v.clone().filter(|s| !s.is_empty() && s != "none");
        OvsFacts {
            dpdk_version: opt(&r.dpdk_version),
            ovs_version: opt(&r.ovs_version),
            dpdk_initialized: r.dpdk_initialized,
            iface_types: r.iface_types.iter().cloned().collect(),
            other_config: r.other_config.clone(),
            external_ids: r.external_ids.clone(),
        }
    }
}

/// Where sysfs and procfs are (`/` on a node; a directory tree in unit tests).
#[derive(Debug, Clone)]
pub struct Sysfs {
    pub root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs { root: "/".into() }
    }
}

impl Sysfs {
    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(rel))
            .ok()
            .map(|s| s.trim().to_string())
    }

    fn cpulist(&self, rel: &str) -> BTreeSet<u32> {
        self.read(rel)
            .and_then(|s| cpus::parse_list(&s).ok())
            .unwrap_or_default()
    }

    /// Reads the host facts; `nic` is the configured NIC (for its NUMA node).
    pub fn host_facts(&self, nic: Option<&str>) -> HostFacts {
        let online_cpus = self.cpulist("sys/devices/system/cpu/online");
        let mut cpu_numa = BTreeMap::new();
        let mut numa_nodes = Vec::new();
        if let Ok(rd) = std::fs::read_dir(self.root.join("sys/devices/system/node")) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(id) = name
                    .strip_prefix("node")
                    .and_then(|n| n.parse::<u32>().ok())
                {
                    numa_nodes.push(id);
                    for c in self.cpulist(&format!("sys/devices/system/node/{name}/cpulist")) {
                        cpu_numa.insert(c, id);
                    }
                }
            }
        }
        let mounts = self.hugetlbfs_page_sizes();
        let mut hugepages = BTreeMap::new();
        if let Ok(rd) = std::fs::read_dir(self.root.join("sys/kernel/mm/hugepages")) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(kb) = name
                    .strip_prefix("hugepages-")
                    .and_then(|s| s.strip_suffix("kB"))
                    .and_then(|s| s.parse::<u64>().ok())
                else {
                    continue;
                };
                let num = |f: &str| {
                    self.read(&format!("sys/kernel/mm/hugepages/{name}/{f}"))
                        .and_then(|s| s.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                let mut free_per_numa = BTreeMap::new();
                for n in &numa_nodes {
                    if let Some(f) = self
                        .read(&format!(
                            "sys/devices/system/node/node{n}/hugepages/{name}/free_hugepages"
                        ))
                        .and_then(|s| s.parse::<u64>().ok())
                    {
                        free_per_numa.insert(*n, f);
                    }
                }
                let free = num("free_hugepages");
                if free_per_numa.is_empty() {
                    free_per_numa.insert(0, free);
                }
                hugepages.insert(
                    kb,
                    HugepageFacts {
                        size_kb: kb,
                        total: num("nr_hugepages"),
                        free,
                        free_per_numa,
                        mounted: mounts.contains(&kb),
                    },
                );
            }
        }
        let nic_numa = nic.and_then(|n| {
            self.read(&format!("sys/class/net/{n}/device/numa_node"))
                .and_then(|s| s.parse::<i64>().ok())
                .and_then(|v| u32::try_from(v).ok())
        });
        HostFacts {
            allowed_cpus: if self.root == Path::new("/") {
                affinity().unwrap_or_else(|| online_cpus.clone())
            } else {
                self.read("proc/self/affinity")
                    .and_then(|s| cpus::parse_list(&s).ok())
                    .unwrap_or_else(|| online_cpus.clone())
            },
            isolated_cpus: self.cpulist("sys/devices/system/cpu/isolated"),
            online_cpus,
            cpu_numa,
            hugepages,
            nic_numa,
            uplink_refusal: None,
            mem_total_kib: self.read("proc/meminfo").and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            }),
            xdp_sockets: if self.root == Path::new("/") {
                xdp_sockets_supported()
            } else {
                self.read("proc/xdp_sockets").is_some_and(|s| s == "1")
            },
        }
    }

    /// Page sizes (kB) with a hugetlbfs mount, from `/proc/mounts`.
    fn hugetlbfs_page_sizes(&self) -> BTreeSet<u64> {
        let default_kb = self
            .read("proc/meminfo")
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("Hugepagesize:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .unwrap_or(2048);
        let Some(mounts) = self.read("proc/mounts") else {
            return BTreeSet::new();
        };
        mounts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(2) == Some(&"hugetlbfs")).then(|| {
                    f.get(3)
                        .and_then(|o| o.split(',').find_map(|o| o.strip_prefix("pagesize=")))
                        .and_then(parse_size_kb)
                        .unwrap_or(default_kb)
                })
            })
            .collect()
    }
}

/// `2M` / `1G` / `2048k` / `2Mi` / `1Gi` → kB.
pub fn parse_size_kb(s: &str) -> Option<u64> {
    let s = s.trim().trim_end_matches('i').trim_end_matches('B');
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1),
        'm' | 'M' => (&s[..s.len() - 1], 1024),
        'g' | 'G' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// This thread's CPU affinity.
fn affinity() -> Option<BTreeSet<u32>> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
    let n = nix::sched::CpuSet::count();
    Some(
        (0..n)
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .map(|c| c as u32)
            .collect(),
    )
}

/// Whether `socket(AF_XDP, SOCK_RAW)` works here.
fn xdp_sockets_supported() -> bool {
    use nix::libc;
    // SAFETY: plain socket(2) with constant arguments; the fd is closed right away.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: fd was returned by socket(2) above and is not used again.
    unsafe { libc::close(fd) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, c).unwrap();
        }
        d
    }

    #[test]
    fn reads_a_two_numa_node_tree() {
        let d = tree(&[
            ("sys/devices/system/cpu/online", "0-7\n"),
            ("sys/devices/system/cpu/isolated", "6-7\n"),
            ("sys/devices/system/node/node0/cpulist", "0-3\n"),
            ("sys/devices/system/node/node1/cpulist", "4-7\n"),
            (
                "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
                "1024\n",
            ),
            (
                "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
                "1000\n",
            ),
            (
                "sys/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages",
                "488\n",
            ),
            (
                "sys/devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages",
                "512\n",
            ),
            (
                "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages",
                "0\n",
            ),
            (
                "sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages",
                "0\n",
            ),
            ("sys/class/net/ens1/device/numa_node", "1\n"),
            ("proc/meminfo", "Hugepagesize:       2048 kB\n"),
            (
                "proc/mounts",
                "proc /proc proc rw 0 0\nnodev /dev/hugepages hugetlbfs rw,relatime 0 0\n",
            ),
            ("proc/self/affinity", "0-5"),
            ("proc/xdp_sockets", "1"),
        ]);
        let f = Sysfs {
            root: d.path().into(),
        }
        .host_facts(Some("ens1"));
        assert_eq!(f.online_cpus.len(), 8);
        assert_eq!(f.isolated_cpus, [6, 7].into());
        assert_eq!(f.allowed_cpus, (0..6).collect());
        assert_eq!(f.numa_of(5), 1);
        assert_eq!(f.nic_numa, Some(1));
        let h = &f.hugepages[&2048];
        assert_eq!((h.total, h.free, h.mounted), (1024, 1000, true));
        assert_eq!(h.free_per_numa, BTreeMap::from([(0, 488), (1, 512)]));
        assert!(!f.hugepages[&1048576].mounted);
        assert!(f.xdp_sockets);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size_kb("2M"), Some(2048));
        assert_eq!(parse_size_kb("2Mi"), Some(2048));
        assert_eq!(parse_size_kb("1Gi"), Some(1048576));
        assert_eq!(parse_size_kb("1G"), Some(1048576));
        assert_eq!(parse_size_kb("x"), None);
    }

    #[test]
    fn this_machine_has_its_default_page_size_and_cpus() {
        // the real /sys and /proc (counts change under other tests: only shape is checked)
        let f = Sysfs::default().host_facts(None);
        assert!(!f.online_cpus.is_empty());
        assert!(f.allowed_cpus.is_subset(&f.online_cpus));
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let size: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("Hugepagesize:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        assert!(f.hugepages.contains_key(&size), "{:?}", f.hugepages.keys());
        assert!(f.xdp_sockets, "this kernel has AF_XDP (LAB.md)");
    }
}
