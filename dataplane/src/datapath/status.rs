//! What the agent tells the operator about the node's datapath: the Node annotation
//! [`super::STATUS_ANNOTATION`] (JSON of [`DatapathStatus`]), events, and `zovn lab get
//! nodes`.

use serde::{Deserialize, Serialize};

use super::cpus;
use super::decide::{AfxdpPorts, Datapath, Decision, Fallback};
use super::probe::{HostFacts, OvsFacts};

/// One PMD CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmdCpu {
    pub cpu: u32,
    pub numa: u32,
}

/// Hugepages of the size DPDK uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hugepages {
    pub size: String,
    pub total: u64,
    pub free: u64,
}

/// The report (stable field order, no timestamps: it changes only when something changed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DatapathStatus {
    pub datapath: Datapath,
    pub requested: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<Fallback>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    pub dpdk_initialized: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpdk_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ovs_version: Option<String>,
    pub pmd_cpus: String,
    pub pmds: Vec<PmdCpu>,
    /// The PMD threads ovs-vswitchd actually runs (from `dpif-netdev/pmd-rxq-show`; empty
    /// while no port needs one or without `--vswitchd-ctl`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pmd_threads: Vec<PmdCpu>,
    /// How idle PMDs sleep (the tuner's live value is the metric
    /// `zstack_ovn_pmd_max_sleep_microseconds`).
    #[serde(default)]
    pub pmd_sleep: super::pmd_sleep::PmdSleep,
    pub hugepages: Hugepages,
    pub userspace_tso: bool,
    pub tso_reason: String,
    pub afxdp: AfxdpPorts,
    /// The CPU wake-up latency (µs) the agent holds through `/dev/cpu_dma_latency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_dma_latency_us: Option<u32>,
    /// Start-time settings waiting for an ovs-vswitchd restart the agent could not do.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restart_required: Vec<String>,
    /// The uplink port of the bridge holding the node's address ([`crate::host::uplink`]);
    /// `None` where that bridge does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink: Option<crate::host::uplink::UplinkStatus>,
}

impl DatapathStatus {
    /// The report of `d`, with the facts after applying it.
    pub fn new(
        d: &Decision,
        host: &HostFacts,
        ovs: &OvsFacts,
        restart_required: Vec<String>,
    ) -> Self {
        let hp = host
            .hugepages
            .get(&d.hugepage_size_kb)
            .cloned()
            .unwrap_or_default();
        DatapathStatus {
            datapath: d.datapath,
            requested: d.requested.clone(),
            reason: d.reason.clone(),
            fallbacks: d.fallbacks.clone(),
            errors: d.errors.clone(),
            dpdk_initialized: ovs.dpdk_initialized,
            dpdk_version: ovs.dpdk_version.clone(),
            ovs_version: ovs.ovs_version.clone(),
            pmd_cpus: cpus::format_list(&d.pmd_cpus),
            pmds: d
                .pmd_cpus
                .iter()
                .map(|&cpu| PmdCpu {
                    cpu,
                    numa: host.numa_of(cpu),
                })
                .collect(),
            pmd_threads: vec![],
            pmd_sleep: d.pmd_sleep,
            hugepages: Hugepages {
                size: if d.hugepage_size_kb >= 1024 * 1024 {
                    format!("{}Gi", d.hugepage_size_kb / 1024 / 1024)
                } else {
                    format!("{}Mi", d.hugepage_size_kb / 1024)
                },
                total: hp.total,
                free: hp.free,
            },
            userspace_tso: d.userspace_tso,
            tso_reason: d.tso_reason.clone(),
            afxdp: d.afxdp.clone(),
            cpu_dma_latency_us: None,
            restart_required,
            uplink: None,
        }
    }

    /// A status before any decision: the kernel path, nothing known.
    pub fn initial() -> DatapathStatus {
        DatapathStatus {
            datapath: Datapath::Kernel,
            requested: "auto".into(),
            reason: "not decided yet".into(),
            fallbacks: vec![],
            errors: vec![],
            dpdk_initialized: false,
            dpdk_version: None,
            ovs_version: None,
            pmd_cpus: String::new(),
            pmds: vec![],
            pmd_threads: vec![],
            pmd_sleep: Default::default(),
            hugepages: Hugepages::default(),
            userspace_tso: false,
            tso_reason: String::new(),
            afxdp: AfxdpPorts {
                queues: 1,
                mode: "native".into(),
                rxq_affinity: None,
                rx_cpus: None,
                fast_start: true,
                budget: None,
            },
            cpu_dma_latency_us: None,
            restart_required: vec![],
            uplink: None,
        }
    }

    /// The annotation value.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The same apart from the hugepage counters (which move with every pod of other
    /// users): used to decide whether to rewrite the annotation.
    pub fn same_decision(&self, other: &DatapathStatus) -> bool {
        let strip = |s: &DatapathStatus| DatapathStatus {
            hugepages: Hugepages {
                size: s.hugepages.size.clone(),
                total: s.hugepages.total,
                free: 0,
            },
            ..s.clone()
        };
        strip(self) == strip(other)
    }
}
