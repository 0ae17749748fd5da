//! The decision: which datapath this node runs and the OVS settings for it, from the
//! configuration and the node's facts. Pure: no I/O, every branch unit-tested.
//!
//! The chain is dpdk → afxdp → kernel. `auto` starts at dpdk; a named datapath starts
//! there. Each step down records a [`Fallback`] with a reason code (the metric label) and
//! a sentence for the operator. A bad configuration value is an [`Decision::errors`] entry
//! and its default is used: the node always ends with a working datapath.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::config::DatapathConfig;
use super::cpus;
use super::pmd_sleep::{self, PmdSleep};
use super::probe::{HostFacts, OvsFacts, parse_size_kb};

/// The datapath a node (or a port) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Datapath {
    /// OVS-DPDK: PMD threads, hugepages; veth pods on AF_XDP ports, VMs on vhost-user.
    Dpdk,
    /// OVS userspace datapath with AF_XDP ports polled by PMD threads, no DPDK.
    Afxdp,
    /// AF_PACKET ports on the netdev bridge (no OVS kernel module exists here).
    Kernel,
}

impl Datapath {
    pub fn as_str(self) -> &'static str {
        match self {
            Datapath::Dpdk => "dpdk",
            Datapath::Afxdp => "afxdp",
            Datapath::Kernel => "kernel",
        }
    }

    /// Parses `dpdk|afxdp|kernel`.
    pub fn parse(s: &str) -> Option<Datapath> {
        match s.trim() {
            "dpdk" => Some(Datapath::Dpdk),
            "afxdp" => Some(Datapath::Afxdp),
            "kernel" => Some(Datapath::Kernel),
            _ => None,
        }
    }

    /// The next one down the chain.
    pub fn next(self) -> Option<Datapath> {
        match self {
            Datapath::Dpdk => Some(Datapath::Afxdp),
            Datapath::Afxdp => Some(Datapath::Kernel),
            Datapath::Kernel => None,
        }
    }

    /// Whether veth pods get AF_XDP ports on this datapath.
    pub fn veth_on_afxdp(self) -> bool {
        matches!(self, Datapath::Dpdk | Datapath::Afxdp)
    }
}

impl std::fmt::Display for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step down the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fallback {
    pub from: Datapath,
    pub to: Datapath,
    /// Short code, the `reason` label of `zstack_ovn_datapath_fallbacks_total`.
    pub reason: String,
    /// What an operator reads.
    pub detail: String,
    /// The outcome `auto` is designed for, not a problem: an OVS without DPDK (the chart's
    /// default node pool runs one by choice). Reported as a Normal event, not counted in
    /// `zstack_ovn_datapath_fallbacks_total`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub designed: bool,
}

/// Runtime knowledge the facts do not show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runtime {
    /// DPDK initialisation was tried with these settings and failed (`Some(detail)`).
    pub dpdk_init_failed: Option<String>,
    /// The node sends pod traffic into tunnels (Geneve/VXLAN).
    pub tunnels: bool,
}

/// Settings for the AF_XDP pod ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AfxdpPorts {
    pub queues: u32,
    pub mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rxq_affinity: Option<String>,
    /// CPUs the pods' receive processing is steered to (RPS on the pod end of the veth),
    /// as a cpulist; `None`: left to the kernel (the PMD's core does it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_cpus: Option<String>,
    /// New pods start on a kernel port and move to AF_XDP in the background
    /// (`afxdp.fastStart`, see [`crate::attach::promote`]).
    #[serde(default)]
    pub fast_start: bool,
    /// The node's AF_XDP port budget (`None` in records written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<super::port_budget::PortBudget>,
}

/// What the node's uplink port should be (config `uplink`; carried out by
/// [`crate::host::uplink`], which knows the port).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UplinkPlan {
    /// `auto`, `afxdp` or `kernel`.
    pub pref: String,
    /// The `xdp-mode` of an AF_XDP uplink: `afxdp.mode` when set, else `best-effort`
    /// (native XDP where the NIC's driver has it, generic otherwise).
    pub xdp_mode: String,
    /// `uplink: dpdk`: the device (`uplinkDevargs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devargs: Option<String>,
}

/// Hugepages the agent should allocate before applying (when `allocate` is on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HugepageAllocation {
    pub size_kb: u64,
    /// The new `nr_hugepages`.
    pub total: u64,
}

/// What the agent will run and write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// The configured datapath (`auto`, or one of the three).
    pub requested: String,
    pub datapath: Datapath,
    /// Why this datapath, in one sentence.
    pub reason: String,
    pub fallbacks: Vec<Fallback>,
    /// Configuration problems (each names the key and what was used instead).
    pub errors: Vec<String>,
    /// The `Open_vSwitch.other_config` keys the agent manages, with their wanted values.
    pub other_config: BTreeMap<String, String>,
    pub pmd_cpus: BTreeSet<u32>,
    /// How idle PMDs sleep; in the adaptive mode [`super::pmd_sleep`]'s tuner owns the
    /// live value of `pmd-maxsleep` (a pass writes it only when it is missing).
    #[serde(default)]
    pub pmd_sleep: PmdSleep,
    pub userspace_tso: bool,
    pub tso_reason: String,
    pub afxdp: AfxdpPorts,
    pub uplink: UplinkPlan,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocate_hugepages: Option<HugepageAllocation>,
    /// Hugepage size (kB) DPDK uses.
    pub hugepage_size_kb: u64,
}

/// `other_config` keys ovs-vswitchd reads only when it starts (or when DPDK initialises):
/// a change needs a restart.
pub const RESTART_KEYS: &[&str] = &[
    "dpdk-socket-mem",
    "dpdk-socket-limit",
    "dpdk-lcore-mask",
    "dpdk-extra",
    "userspace-tso-enable",
    "hw-offload",
];

/// The largest MTU native XDP supports on a veth with 4 KiB pages.
pub const VETH_NATIVE_XDP_MAX_MTU: u32 = 3498;

const DEFAULT_SOCKET_MEM_MB: u32 = 256;

/// Decides. `cfg` is the merged configuration; `pre_errors` are problems found while
/// merging it (a bad annotation), carried into the decision.
pub fn decide(
    cfg: &DatapathConfig,
    pre_errors: Vec<String>,
    host: &HostFacts,
    ovs: &OvsFacts,
    rt: &Runtime,
) -> Decision {
    let mut errors = pre_errors;
    let requested = cfg.datapath.clone().unwrap_or_else(|| "auto".into());
    let start = match requested.as_str() {
        "auto" => None,
        other => match Datapath::parse(other) {
            Some(d) => Some(d),
            None => {
                errors.push(format!(
                    "datapath {other:?} is unknown (one of auto, dpdk, afxdp, kernel): using auto"
                ));
                None
            }
        },
    };

    let pmd_cpus = pmd_cpus(cfg, host, &mut errors);
    let lcore = lcore_mask(cfg, host, &pmd_cpus, &mut errors);
    let numa = host.nic_numa.unwrap_or(0);

    // hugepages and socket memory
    let size_kb = match cfg.hugepages.as_ref().and_then(|h| h.size.as_deref()) {
        None => 2048,
        Some(s) => match parse_size_kb(s).filter(|kb| host.hugepages.contains_key(kb)) {
            Some(kb) => kb,
            None => {
                errors.push(format!(
                    "hugepages.size {s:?} is not a page size of this node ({}): using 2Mi",
                    host.hugepages
                        .keys()
                        .map(|k| format!("{}Mi", k / 1024))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                2048
            }
        },
    };
    let numa_nodes: BTreeSet<u32> = host
        .hugepages
        .get(&size_kb)
        .map(|h| h.free_per_numa.keys().copied().collect())
        .filter(|s: &BTreeSet<u32>| !s.is_empty())
        .unwrap_or_else(|| [0].into());
    let default_mem = || {
        let mut v = vec![0; numa as usize + 1];
        v[numa as usize] = DEFAULT_SOCKET_MEM_MB;
        v
    };
    let socket_mem = match &cfg.socket_mem {
        Some(v) if v.is_empty() || v.iter().all(|m| *m == 0) => {
            errors.push("socketMem has no memory on any NUMA node: using the default".into());
            default_mem()
        }
        Some(v) => match v
            .iter()
            .enumerate()
            .find(|(i, m)| **m > 0 && !numa_nodes.contains(&(*i as u32)))
        {
            Some((i, _)) => {
                errors.push(format!(
                    "socketMem asks for memory on NUMA node {i}, which this node does not have: using the default"
                ));
                default_mem()
            }
            None => v.clone(),
        },
        None => default_mem(),
    };
    let socket_limit = match &cfg.socket_limit {
        Some(v)
            if v.len() == socket_mem.len()
                && v.iter().zip(&socket_mem).all(|(l, m)| *l == 0 || l >= m) =>
        {
            v.clone()
        }
        Some(v) => {
            errors.push(format!(
                "socketLimit {v:?} must have one entry per socketMem entry, each 0 (no limit) or ≥ socketMem: using twice socketMem"
            ));
            socket_mem.iter().map(|m| m * 2).collect()
        }
        None => socket_mem.iter().map(|m| m * 2).collect(),
    };
    let pages_needed = |mb: u32| (u64::from(mb) * 1024).div_ceil(size_kb);
    let hp = host.hugepages.get(&size_kb).cloned().unwrap_or_default();
    let want_count = cfg.hugepages.as_ref().and_then(|h| h.count).map(u64::from);
    let allocate = cfg
        .hugepages
        .as_ref()
        .and_then(|h| h.allocate)
        .unwrap_or(false);
    // socket-mem larger than the hugepages the node is configured to have: a config error
    let socket_mem_str = join(&socket_mem);
    let mut socket_mem_too_big = None;
    let total_needed: u64 = socket_mem.iter().map(|m| pages_needed(*m)).sum();
    if let Some(c) = want_count
        && total_needed > c
    {
        socket_mem_too_big = Some(format!(
            "socketMem {socket_mem_str} MiB needs {total_needed} × {} pages but hugepages.count is {c}",
            size_name(size_kb)
        ));
    } else if want_count.is_none() && !allocate && hp.total > 0 && total_needed > hp.total {
        socket_mem_too_big = Some(format!(
            "socketMem {socket_mem_str} MiB needs {total_needed} × {} pages but the node has {} in total",
            size_name(size_kb),
            hp.total
        ));
    }
    if let Some(e) = &socket_mem_too_big {
        errors.push(format!("{e}: DPDK is not used"));
    }
    // what DPDK would find free now (its own pages count as free while it runs with
    // the same memory settings)
    let running_same =
        ovs.dpdk_initialized && ovs.other_config.get("dpdk-socket-mem") == Some(&socket_mem_str);
    let mut allocate_hugepages = None;
    let short_numa: Option<(u32, u64, u64)> = if running_same {
        None
    } else {
        socket_mem
            .iter()
            .enumerate()
            .filter(|(_, m)| **m > 0)
            .map(|(i, m)| {
                let n = i as u32;
                (
                    n,
                    pages_needed(*m),
                    hp.free_per_numa.get(&n).copied().unwrap_or(0),
                )
            })
            .find(|(_, need, free)| free < need)
    };
    let short_numa = match short_numa {
        Some((_, need, free)) if allocate && socket_mem_too_big.is_none() => {
            let total = want_count.unwrap_or(0).max(hp.total + (need - free));
            allocate_hugepages = Some(HugepageAllocation { size_kb, total });
            None
        }
        other => other,
    };

    // walk the chain
    let mut fallbacks = Vec::new();
    let mut at = start.unwrap_or(Datapath::Dpdk);
    let chosen = loop {
        let blocker: Option<(&str, String)> = match at {
            Datapath::Dpdk => {
                if !ovs.vswitchd_seen() {
                    Some((
                        "vswitchd_unknown",
                        "ovs-vswitchd has not reported its interface types yet".into(),
                    ))
                } else if !ovs.dpdk_build() {
                    Some((
                        "no_dpdk_build",
                        "ovs-vswitchd is not the DPDK build (no dpdk interface type)".into(),
                    ))
                } else if let Some(e) = &socket_mem_too_big {
                    Some(("config", e.clone()))
                } else if !hp.mounted && !running_same {
                    Some((
                        "hugepages",
                        format!("no hugetlbfs is mounted for {} pages", size_name(size_kb)),
                    ))
                } else if let Some((n, need, free)) = short_numa {
                    Some((
                        "hugepages",
                        format!(
                            "dpdk-socket-mem {socket_mem_str} needs {need} free {} hugepages on NUMA node {n}, {free} are free (total {})",
                            size_name(size_kb),
                            hp.total
                        ),
                    ))
                } else {
                    rt.dpdk_init_failed
                        .as_ref()
                        .map(|d| ("dpdk_init", format!("DPDK initialisation failed: {d}")))
                }
            }
            Datapath::Afxdp => {
                if !host.xdp_sockets {
                    Some((
                        "no_xdp_sockets",
                        "the kernel cannot create AF_XDP sockets".into(),
                    ))
                } else if !ovs.vswitchd_seen() {
                    Some((
                        "vswitchd_unknown",
                        "ovs-vswitchd has not reported its interface types yet".into(),
                    ))
                } else if !ovs.afxdp_build() {
                    Some((
                        "no_afxdp_build",
                        "ovs-vswitchd was built without AF_XDP (no afxdp interface type)".into(),
                    ))
                } else {
                    None
                }
            }
            Datapath::Kernel => None,
        };
        match (blocker, at.next()) {
            (Some((code, detail)), Some(next)) => {
                fallbacks.push(Fallback {
                    from: at,
                    to: next,
                    reason: code.to_string(),
                    detail,
                    designed: start.is_none() && code == "no_dpdk_build",
                });
                at = next;
            }
            _ => break at,
        }
    };
    let reason = match (fallbacks.last(), start) {
        (Some(f), _) if fallbacks.iter().all(|f| f.designed) => {
            format!("auto: {chosen} ({})", f.detail)
        }
        (Some(f), _) => format!("fell back from {} to {}: {}", f.from, f.to, f.detail),
        (None, Some(d)) => format!("{d} as configured"),
        (None, None) => match chosen {
            Datapath::Dpdk => "auto: DPDK build, hugepages and CPUs available".into(),
            d => format!("auto: {d}"),
        },
    };

    // TSO
    let (userspace_tso, tso_reason) = match cfg.userspace_tso.as_deref().unwrap_or("auto") {
        "on" => (true, "on as configured".to_string()),
        "off" => (false, "off as configured".to_string()),
        other => {
            if other != "auto" {
                errors.push(format!(
                    "userspaceTso {other:?} is not one of auto, on, off: using auto"
                ));
            }
            if rt.tunnels {
                (
                    false,
                    "auto: off, pod traffic goes into tunnels and OVS 3.1 drops TSO packets there"
                        .to_string(),
                )
            } else {
                (true, "auto: on, no tunnel on this node".to_string())
            }
        }
    };

    // other_config
    let mut oc = BTreeMap::new();
    let set = |oc: &mut BTreeMap<String, String>, k: &str, v: String| {
        oc.insert(k.to_string(), v);
    };
    set(
        &mut oc,
        "dpdk-init",
        if chosen == Datapath::Dpdk {
            "try"
        } else {
            "false"
        }
        .into(),
    );
    set(&mut oc, "dpdk-socket-mem", socket_mem_str.clone());
    set(&mut oc, "dpdk-socket-limit", join(&socket_limit));
    if let Some(l) = lcore {
        set(&mut oc, "dpdk-lcore-mask", l);
    }
    let (uplink_pref, uplink_devargs) = uplink_choice(cfg, &mut errors);
    // a PCI uplink must be probed by DPDK: no `--no-pci`, and only that device allowed
    // (a device the host refuses is not passed to DPDK: the uplink pass reports why)
    let uplink_pci = uplink_devargs
        .as_deref()
        .filter(|_| host.uplink_refusal.is_none())
        .and_then(|d| match crate::host::dpdk_nic::parse(d) {
            Ok(crate::host::dpdk_nic::Device::Pci(a)) => Some(a),
            _ => None,
        });
    let no_pci = cfg.no_pci.unwrap_or(uplink_pci.is_none());
    let extra_eal = match cfg
        .extra_eal_args
        .as_deref()
        .filter(|s| !s.trim().is_empty())
    {
        None => None,
        Some(a) => match super::eal_args::check(a) {
            Ok(a) => Some(a),
            Err(e) => {
                errors.push(format!(
                    "extraEalArgs: {e}: no extra argument passed to DPDK"
                ));
                None
            }
        },
    };
    let allow_uplink = uplink_pci
        .filter(|a| !extra_eal.as_deref().is_some_and(|e| e.contains(a.as_str())))
        .map(|a| format!("-a {a}"));
    let extra = [
        no_pci.then(|| "--no-pci".to_string()),
        allow_uplink,
        extra_eal,
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ");
    if !extra.is_empty() {
        set(&mut oc, "dpdk-extra", extra);
    }
    if !pmd_cpus.is_empty() {
        set(&mut oc, "pmd-cpu-mask", cpus::to_mask(&pmd_cpus));
    }
    if let Some(a) = &cfg.pmd_rxq_assign {
        if ["cycles", "roundrobin", "group"].contains(&a.as_str()) {
            set(&mut oc, "pmd-rxq-assign", a.clone());
        } else {
            errors.push(format!(
                "pmdRxqAssign {a:?} is not one of cycles, roundrobin, group: left at the OVS default"
            ));
        }
    }
    if let Some(b) = cfg.pmd_auto_lb {
        set(&mut oc, "pmd-auto-lb", b.to_string());
    }
    let pmd_sleep = pmd_sleep::choose(
        cfg.pmd_max_sleep.as_ref(),
        cfg.pmd_cpus.is_some(),
        chosen != Datapath::Kernel,
        &mut errors,
    );
    if let Some(us) = pmd_sleep.initial_us() {
        set(&mut oc, pmd_sleep::KEY, us.to_string());
    }
    set(&mut oc, "userspace-tso-enable", userspace_tso.to_string());
    if let Some(h) = cfg.hw_offload {
        set(&mut oc, "hw-offload", h.to_string());
    }

    // pod ports
    let mtu = match cfg.mtu {
        Some(m) if (68..=65535).contains(&m) => Some(m),
        Some(m) => {
            errors.push(format!(
                "mtu {m} is out of range 68..=65535: using the derived MTU"
            ));
            None
        }
        None => None,
    };
    let ax = cfg.afxdp.clone().unwrap_or_default();
    let queues = match ax.queues {
        None => 1,
        Some(q) if (1..=64).contains(&q) => q,
        Some(q) => {
            errors.push(format!("afxdp.queues {q} is out of range 1..=64: using 1"));
            1
        }
    };
    let mut mode = match ax.mode.as_deref() {
        None => "native".to_string(),
        Some(m @ ("native" | "native-with-zerocopy" | "generic" | "best-effort")) => m.to_string(),
        Some(m) => {
            errors.push(format!(
                "afxdp.mode {m:?} is not one of native, native-with-zerocopy, generic, best-effort: using native"
            ));
            "native".into()
        }
    };
    if mode == "native"
        && let Some(m) = mtu
        && m > VETH_NATIVE_XDP_MAX_MTU
    {
        if ax.mode.is_none() {
            errors.push(format!(
                "mtu {m} is above what native XDP supports on a veth ({VETH_NATIVE_XDP_MAX_MTU}): AF_XDP ports use generic mode"
            ));
            mode = "generic".into();
        } else {
            errors.push(format!(
                "mtu {m} is above what native XDP supports on a veth ({VETH_NATIVE_XDP_MAX_MTU}) and afxdp.mode is native: new AF_XDP ports will fail and fall back to the kernel path"
            ));
        }
    }
    let rxq_affinity =
        cfg.pmd_rxq_affinity
            .as_ref()
            .and_then(|a| match check_affinity(a, &pmd_cpus, queues) {
                Ok(()) => Some(a.clone()),
                Err(e) => {
                    errors.push(format!("pmdRxqAffinity {a:?}: {e}: not set"));
                    None
                }
            });

    let rx_cpus = rx_cpus(ax.rx_cpus.as_deref(), host, &pmd_cpus, &mut errors);
    let uplink = UplinkPlan {
        pref: uplink_pref,
        devargs: uplink_devargs,
        xdp_mode: ax
            .mode
            .as_ref()
            .map_or_else(|| "best-effort".to_string(), |_| mode.clone()),
    };

    Decision {
        requested: start.map_or_else(|| "auto".to_string(), |d| d.to_string()),
        datapath: chosen,
        reason,
        fallbacks,
        errors,
        other_config: oc,
        pmd_cpus,
        pmd_sleep,
        userspace_tso,
        tso_reason,
        afxdp: AfxdpPorts {
            queues,
            mode,
            rxq_affinity,
            rx_cpus,
            fast_start: ax.fast_start.unwrap_or(true),
            budget: Some(super::port_budget::PortBudget::decide(
                ax.max_ports,
                queues,
                host.mem_total_kib,
            )),
        },
        uplink,
        mtu,
        allocate_hugepages,
        hugepage_size_kb: size_kb,
    }
}

/// `uplink` and `uplinkDevargs`: the uplink's preference, and its DPDK device for `dpdk`.
fn uplink_choice(cfg: &DatapathConfig, errors: &mut Vec<String>) -> (String, Option<String>) {
    let devargs = cfg
        .uplink_devargs
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty());
    match cfg.uplink.as_deref() {
        None => ("auto".into(), None),
        Some("dpdk") => match devargs {
            Some(d) => ("dpdk".into(), Some(d.to_string())),
            None => {
                errors.push(
                    "uplink dpdk needs uplinkDevargs (a PCI address or a DPDK vdev): using auto"
                        .into(),
                );
                ("auto".into(), None)
            }
        },
        Some(u @ ("auto" | "afxdp" | "kernel")) => (u.to_string(), None),
        Some(u) => {
            errors.push(format!(
                "uplink {u:?} is not one of auto, afxdp, kernel, dpdk: using auto"
            ));
            ("auto".into(), None)
        }
    }
}

/// `afxdp.rxCpus`: the CPUs the pods' receive processing goes to. Without steering, an
/// AF_XDP port's transmit syscall runs the receiving pod's whole TCP/IP input (and the
/// ACK-clocked sends it triggers) on the PMD's core. Default `off` (measured: with a PMD
/// core of its own, steering costs single-stream throughput ~10 %; it pays where the PMD
/// core is contended: -P4 ×1.4–1.5, tcp_lat −15 %). `auto`: every online CPU that is
/// neither a PMD CPU nor isolated (none left: no steering).
fn rx_cpus(
    setting: Option<&str>,
    host: &HostFacts,
    pmd_cpus: &BTreeSet<u32>,
    errors: &mut Vec<String>,
) -> Option<String> {
    let auto = || {
        let set: BTreeSet<u32> = host
            .online_cpus
            .iter()
            .copied()
            .filter(|c| !pmd_cpus.contains(c) && !host.isolated_cpus.contains(c))
            .collect();
        (!set.is_empty()).then(|| cpus::format_list(&set))
    };
    match setting.map(str::trim) {
        None | Some("off") => None,
        Some("auto") => auto(),
        Some(list) => match cpus::parse_list(list) {
            Ok(set) if !set.is_empty() && set.is_subset(&host.online_cpus) => {
                Some(cpus::format_list(&set))
            }
            Ok(set) => {
                errors.push(format!(
                    "afxdp.rxCpus {list:?}: {} is not a non-empty set of online CPUs ({}): not steering",
                    cpus::format_list(&set),
                    cpus::format_list(&host.online_cpus)
                ));
                None
            }
            Err(e) => {
                errors.push(format!("afxdp.rxCpus: {e}: not steering"));
                None
            }
        },
    }
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn size_name(kb: u64) -> String {
    if kb >= 1024 * 1024 {
        format!("{}Gi", kb / 1024 / 1024)
    } else {
        format!("{}Mi", kb / 1024)
    }
}

/// The PMD CPUs: the configured list when valid, else derived.
fn pmd_cpus(cfg: &DatapathConfig, host: &HostFacts, errors: &mut Vec<String>) -> BTreeSet<u32> {
    let reserved = match cfg.reserved_cpus.as_deref().map(cpus::parse_list) {
        None => BTreeSet::new(),
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            errors.push(format!("reservedCpus: {e}: ignored"));
            BTreeSet::new()
        }
    };
    let allow0 = cfg.allow_cpu0.unwrap_or(false);
    if let Some(list) = &cfg.pmd_cpus {
        match cpus::parse_list(list) {
            Err(e) => errors.push(format!("pmdCpus: {e}: deriving PMD CPUs instead")),
            Ok(set) if set.is_empty() => {
                errors.push("pmdCpus is empty: deriving PMD CPUs instead".into())
            }
            Ok(set) => {
                let problem = set.iter().find_map(|&c| {
                    if !host.online_cpus.contains(&c) {
                        Some(format!(
                            "CPU {c} does not exist (online: {})",
                            cpus::format_list(&host.online_cpus)
                        ))
                    } else if !host.allowed_cpus.contains(&c) {
                        Some(format!(
                            "CPU {c} is outside the CPUs the agent and OVS may use ({})",
                            cpus::format_list(&host.allowed_cpus)
                        ))
                    } else if reserved.contains(&c) {
                        Some(format!("CPU {c} is in reservedCpus"))
                    } else if c == 0 && !allow0 {
                        Some("CPU 0 is never a PMD CPU unless allowCpu0 is set".into())
                    } else {
                        None
                    }
                });
                match problem {
                    None => return set,
                    Some(p) => {
                        errors.push(format!("pmdCpus {list:?}: {p}: deriving PMD CPUs instead"))
                    }
                }
            }
        }
    }
    let count = cfg.pmd_count.unwrap_or(1) as usize;
    let candidates: Vec<u32> = host
        .allowed_cpus
        .intersection(&host.online_cpus)
        .copied()
        .filter(|c| !reserved.contains(c) && (*c != 0 || allow0))
        .collect();
    let numa = host.nic_numa;
    let mut ordered: Vec<u32> = candidates.clone();
    // NIC-local CPUs first, highest first within each group
    ordered.sort_by_key(|c| {
        (
            numa.is_some_and(|n| host.numa_of(*c) != n),
            std::cmp::Reverse(*c),
        )
    });
    let chosen: BTreeSet<u32> = ordered.into_iter().take(count).collect();
    if chosen.is_empty() {
        errors.push(
            "no CPU is left for PMD threads (CPU 0, reserved and unavailable CPUs excluded): OVS chooses".into(),
        );
    }
    chosen
}

/// `dpdk-lcore-mask`: the configured one when valid, else the lowest usable non-PMD CPU.
fn lcore_mask(
    cfg: &DatapathConfig,
    host: &HostFacts,
    pmd: &BTreeSet<u32>,
    errors: &mut Vec<String>,
) -> Option<String> {
    if let Some(m) = &cfg.lcore_mask {
        match cpus::from_mask(m) {
            Ok(set) if !set.is_empty() && set.is_subset(&host.online_cpus) => {
                return Some(cpus::to_mask(&set));
            }
            Ok(_) => errors.push(format!(
                "lcoreMask {m:?} names no CPU or a CPU that does not exist: derived instead"
            )),
            Err(e) => errors.push(format!("lcoreMask: {e}: derived instead")),
        }
    }
    host.allowed_cpus
        .iter()
        .find(|c| !pmd.contains(c))
        .map(|c| cpus::to_mask(&[*c].into()))
}

/// Why `pmdRxqAffinity` is not set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AffinityError {
    #[error("{0:?} is not queue:cpu")]
    NotQueueCpu(String),
    #[error("{0:?} is not a queue id")]
    NotAQueue(String),
    #[error("{0:?} is not a CPU")]
    NotACpu(String),
    #[error("queue {queue} does not exist (afxdp.queues = {queues})")]
    NoSuchQueue { queue: u32, queues: u32 },
    #[error("CPU {cpu} is not a PMD CPU ({})", cpus::format_list(pmd))]
    NotPmd { cpu: u32, pmd: BTreeSet<u32> },
}

/// `"0:3,1:7"`: queue ids below `queues`, CPUs among the PMD CPUs.
fn check_affinity(a: &str, pmd: &BTreeSet<u32>, queues: u32) -> Result<(), AffinityError> {
    for part in a.split(',').map(str::trim) {
        let (q, c) = part
            .split_once(':')
            .ok_or_else(|| AffinityError::NotQueueCpu(part.to_string()))?;
        let q: u32 = q
            .parse()
            .map_err(|_| AffinityError::NotAQueue(q.to_string()))?;
        let c: u32 = c
            .parse()
            .map_err(|_| AffinityError::NotACpu(c.to_string()))?;
        if q >= queues {
            return Err(AffinityError::NoSuchQueue { queue: q, queues });
        }
        if !pmd.contains(&c) {
            return Err(AffinityError::NotPmd {
                cpu: c,
                pmd: pmd.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
