//! The node's datapath configuration, as an operator writes it.
//!
//! Where it comes from, lowest priority first:
//! 1. built-in defaults (this file's `Default`s);
//! 2. the agent's config file (`--datapath-config FILE`, YAML or JSON; the Helm chart
//!    renders it per node pool from `datapath:` values);
//! 3. the Node annotation [`CONFIG_ANNOTATION`] (a JSON object) for one node, limited to
//!    the keys of [`ANNOTATION_KEYS`]: whoever may patch the Node (every node agent's
//!    account among them) may write it, so it never reaches what a privileged
//!    ovs-vswitchd or the host would obey (EAL arguments, memory, CPUs, hugepage
//!    allocation, PCI, the NIC, offload, PM QoS): those come only from the
//!    file, which an administrator writes ([`DatapathConfig::annotation_part`]).
//!
//! Every key is optional. A key with a bad value is reported (see
//! [`crate::datapath::decide`]) and its default used instead; a bad annotation as a whole
//! (not JSON) is reported and ignored. The agent never stops over a bad configuration: the
//! node keeps a working datapath.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Node annotation overriding the agent's datapath configuration for one node.
pub const CONFIG_ANNOTATION: &str = api::keys::DATAPATH_CONFIG;

/// Hugepage request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HugepagesConfig {
    /// `2Mi` (default) or `1Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Pages the node should have; default: enough for `socketMem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Allocate missing pages (`/sys/kernel/mm/hugepages/.../nr_hugepages`) when fewer
    /// are free than needed. Default false: the agent only checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocate: Option<bool>,
}

/// AF_XDP port settings (veth pods on a userspace datapath).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AfxdpConfig {
    /// `n_rxq` of each pod port (the veth is created with as many queues). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
    /// `xdp-mode`: `native` (default), `native-with-zerocopy`, `generic` or `best-effort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// CPUs that run the pods' receive processing (RPS on the pod end of each AF_XDP
    /// veth): `off` (default, the kernel's: the CPU that hands the packet over, which for
    /// an AF_XDP port is the PMD's own core, inside its transmit syscall), `auto` (the
    /// online CPUs that are neither PMD CPUs nor isolated) or a cpulist (`"0,2-3"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_cpus: Option<String>,
    /// `true` (default): a new pod starts on a kernel port, answered as fast as on the
    /// kernel datapath, and the agent moves it to AF_XDP in the background once the burst
    /// of ADDs is over (ovs-vswitchd opens an AF_XDP port in ~110–180 ms, one at a time:
    /// on the ADD's path a 30-pod burst waited seconds). The pod's traffic pauses once for
    /// that switch. `false`: the ADD opens the AF_XDP port itself and waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_start: Option<bool>,
    /// The most pod ports on AF_XDP at once on this node (file only: each queue costs
    /// ovs-vswitchd a 64 MiB umem). Past it a new pod gets a kernel port, with the reason.
    /// Default: what 10 % of the node's memory holds (see
    /// [`crate::attach::afxdp_budget`]); `0`: no pod on AF_XDP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ports: Option<u32>,
}

/// `pmdMaxSleep`: a number of µs, or `"auto"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PmdMaxSleep {
    Us(u32),
    /// `auto` (any other word is reported, and `auto` used).
    Word(String),
}

/// Everything an operator can set. Field names are the YAML/JSON keys (camelCase).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DatapathConfig {
    /// `auto` (default: dpdk when possible, else afxdp, else kernel), `dpdk`, `afxdp`,
    /// `kernel`. A named datapath that cannot run falls back along dpdk → afxdp → kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugepages: Option<HugepagesConfig>,
    /// `dpdk-socket-mem` in MiB per NUMA node (index = NUMA id). Default: 256 on the NUMA
    /// node of `nic` (or 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_mem: Option<Vec<u32>>,
    /// `dpdk-socket-limit` in MiB per NUMA node. Default: twice `socketMem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_limit: Option<Vec<u32>>,
    /// PMD CPUs as a cpulist (`"2,4-5"`). Default: derived from `pmdCount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmd_cpus: Option<String>,
    /// How many PMD CPUs to derive (highest-numbered usable CPUs on the NIC's NUMA node,
    /// excluding `reservedCpus` and CPU 0). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmd_count: Option<u32>,
    /// The NIC whose NUMA node PMDs and socket memory should be on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    /// CPUs reserved for kubelet/system (`--reserved-cpus`), never used for PMDs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_cpus: Option<String>,
    /// Allow CPU 0 as a PMD CPU (never chosen otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_cpu0: Option<bool>,
    /// `dpdk-lcore-mask` (hex). Default: the lowest usable CPU that is not a PMD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lcore_mask: Option<String>,
    /// `pmd-rxq-assign`: `cycles`, `roundrobin` or `group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmd_rxq_assign: Option<String>,
    /// `pmd-rxq-affinity` for every pod port (`"0:3,1:7"`: queue 0 on CPU 3...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmd_rxq_affinity: Option<String>,
    /// `pmd-auto-lb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmd_auto_lb: Option<bool>,
    /// How long an idle PMD may sleep (`pmd-maxsleep`): `auto` (the default, unless
    /// `pmdCpus` dedicates cores: then 0) lets the agent switch it between
    /// [`super::pmd_sleep::IDLE_SLEEP_US`] while the PMDs see no traffic and 0 (busy
    /// polling) while they do (see [`super::pmd_sleep`]); a number (0–10000 µs) sets it
    /// once (a static sleep costs latency under light traffic: OVS 3.1 sleeps whenever an
    /// iteration brings fewer than 16 packets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmd_max_sleep: Option<PmdMaxSleep>,
    /// `userspace-tso-enable`: `auto` (default: off on a node with a tunnel, because OVS
    /// 3.1 drops offloaded packets sent into tunnels and into vhost ports without csum),
    /// `on`, `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userspace_tso: Option<String>,
    /// `hw-offload`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hw_offload: Option<bool>,
    /// Pod MTU (overrides the one derived from the tunnel underlay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Extra EAL arguments (`dpdk-extra`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_eal_args: Option<String>,
    /// Pass `--no-pci` to DPDK (default true: the agent binds no PCI device; a NIC DPDK
    /// should probe must be listed with `extraEalArgs: "-a 0000:03:00.0"` and `noPci: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_pci: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub afxdp: Option<AfxdpConfig>,
    /// The uplink of the bridge holding the node's address (the agent's
    /// `--gateway-interface`, br-phy): `auto` (default: an AF_XDP port on the dpdk and
    /// afxdp datapaths, a kernel port on the kernel one), `afxdp`, `kernel`, or `dpdk` (a
    /// DPDK NIC named by `uplinkDevargs`, on the dpdk datapath). Only an
    /// uplink port marked as ours (`external_ids:zstack.io/owner`) is changed. See
    /// [`crate::host::uplink`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink: Option<String>,
    /// `uplink: dpdk`: the device, as `options:dpdk-devargs` (file only): a PCI address
    /// of a NIC bound to vfio-pci (`0000:03:00.0`) or a DPDK vdev (`net_af_packet0,
    /// iface=eth1`). See [`crate::host::dpdk_nic`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink_devargs: Option<String>,
    /// CPU wake-up latency (µs) the agent requests through `/dev/cpu_dma_latency` while it
    /// runs, as tuned's `network-latency` profile does: 0 keeps idle CPUs polling so a
    /// packet handed over by a PMD core does not wait for a sleeping core to wake (costs
    /// power, and host CPU in a VM). Default: no request. See [`super::pm_qos`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_dma_latency_us: Option<u32>,
}

/// The keys a Node annotation may set (`parent.child` for a nested one): how the node
/// uses its datapath, never what reaches beyond it. Every other key is file-only.
pub const ANNOTATION_KEYS: &[&str] = &[
    "datapath",
    "hugepages.size",
    "hugepages.count",
    "pmdRxqAssign",
    "pmdRxqAffinity",
    "pmdAutoLb",
    "pmdMaxSleep",
    "userspaceTso",
    "mtu",
    "afxdp",
    "uplink",
];

/// Why a configuration could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("datapath config {source_name}: {detail}")]
    Parse { source_name: String, detail: String },
    #[error("datapath config {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl DatapathConfig {
    /// Parses YAML or JSON (JSON is YAML). `source_name` names it in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<DatapathConfig, ConfigError> {
        if text.trim().is_empty() {
            return Ok(DatapathConfig::default());
        }
        serde_norway::from_str(text).map_err(|e| ConfigError::Parse {
            source_name: source_name.to_string(),
            detail: e.to_string(),
        })
    }

    /// Reads a config file.
    pub fn load(path: &std::path::Path) -> Result<DatapathConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        DatapathConfig::parse(&text, &path.display().to_string())
    }

    /// The node annotation's override (JSON), if present. A bad annotation is an error the
    /// caller reports (and then ignores the annotation).
    pub fn from_annotations(
        ann: &BTreeMap<String, String>,
    ) -> Option<Result<DatapathConfig, ConfigError>> {
        let text = ann.get(CONFIG_ANNOTATION)?;
        Some(serde_json::from_str(text).map_err(|e| ConfigError::Parse {
            source_name: format!("annotation {CONFIG_ANNOTATION}"),
            detail: e.to_string(),
        }))
    }

    /// What a Node annotation may set of `self` ([`ANNOTATION_KEYS`]), and the names of
    /// the file-only keys it set (dropped).
    pub fn annotation_part(&self) -> (DatapathConfig, Vec<&'static str>) {
        let mut refused = Vec::new();
        macro_rules! file_only {
            ($($f:ident => $key:literal),*) => {$(
                if self.$f.is_some() {
                    refused.push($key);
                }
            )*};
        }
        file_only!(
            socket_mem => "socketMem",
            socket_limit => "socketLimit",
            pmd_cpus => "pmdCpus",
            pmd_count => "pmdCount",
            nic => "nic",
            reserved_cpus => "reservedCpus",
            allow_cpu0 => "allowCpu0",
            lcore_mask => "lcoreMask",
            hw_offload => "hwOffload",
            extra_eal_args => "extraEalArgs",
            no_pci => "noPci",
            cpu_dma_latency_us => "cpuDmaLatencyUs",
            uplink_devargs => "uplinkDevargs"
        );
        let afxdp = self.afxdp.as_ref().map(|a| {
            if a.max_ports.is_some() {
                refused.push("afxdp.maxPorts");
            }
            AfxdpConfig {
                max_ports: None,
                ..a.clone()
            }
        });
        let hugepages = self.hugepages.as_ref().map(|h| {
            if h.allocate.is_some() {
                refused.push("hugepages.allocate");
            }
            HugepagesConfig {
                allocate: None,
                ..h.clone()
            }
        });
        let allowed = DatapathConfig {
            datapath: self.datapath.clone(),
            hugepages,
            pmd_rxq_assign: self.pmd_rxq_assign.clone(),
            pmd_rxq_affinity: self.pmd_rxq_affinity.clone(),
            pmd_auto_lb: self.pmd_auto_lb,
            pmd_max_sleep: self.pmd_max_sleep.clone(),
            userspace_tso: self.userspace_tso.clone(),
            mtu: self.mtu,
            afxdp,
            // the mode of the NIC the administrator named (--gateway-interface), as the
            // datapath choice is: never which NIC
            uplink: self.uplink.clone(),
            ..DatapathConfig::default()
        };
        (allowed, refused)
    }

    /// `self` with every key `over` sets replaced by `over`'s value.
    pub fn overlay(&self, over: &DatapathConfig) -> DatapathConfig {
        macro_rules! pick {
            ($($f:ident),*) => { DatapathConfig { $($f: over.$f.clone().or_else(|| self.$f.clone()),)* } };
        }
        let mut merged = pick!(
            datapath,
            hugepages,
            socket_mem,
            socket_limit,
            pmd_cpus,
            pmd_count,
            nic,
            reserved_cpus,
            allow_cpu0,
            lcore_mask,
            pmd_rxq_assign,
            pmd_rxq_affinity,
            pmd_auto_lb,
            pmd_max_sleep,
            userspace_tso,
            hw_offload,
            mtu,
            extra_eal_args,
            no_pci,
            afxdp,
            uplink,
            uplink_devargs,
            cpu_dma_latency_us
        );
        // nested objects merge key by key
        if let (Some(a), Some(b)) = (&self.hugepages, &over.hugepages) {
            merged.hugepages = Some(HugepagesConfig {
                size: b.size.clone().or_else(|| a.size.clone()),
                count: b.count.or(a.count),
                allocate: b.allocate.or(a.allocate),
            });
        }
        if let (Some(a), Some(b)) = (&self.afxdp, &over.afxdp) {
            merged.afxdp = Some(AfxdpConfig {
                queues: b.queues.or(a.queues),
                mode: b.mode.clone().or_else(|| a.mode.clone()),
                rx_cpus: b.rx_cpus.clone().or_else(|| a.rx_cpus.clone()),
                fast_start: b.fast_start.or(a.fast_start),
                max_ports: b.max_ports.or(a.max_ports),
            });
        }
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_annotation_keeps_its_tuning_and_loses_what_reaches_the_host() {
        let over = DatapathConfig::parse(
            r#"{"datapath":"dpdk","mtu":1400,"afxdp":{"queues":2,"maxPorts":500},"pmdMaxSleep":50,
                "hugepages":{"size":"2Mi","count":64,"allocate":true},
                "extraEalArgs":"-d /x.so","socketMem":[4096],"lcoreMask":"0x1",
                "pmdCpus":"0","cpuDmaLatencyUs":0,"noPci":false,"nic":"eth0","uplink":"kernel",
                "uplinkDevargs":"0000:03:00.0"}"#,
            "annotation",
        )
        .expect("parses");
        let (allowed, refused) = over.annotation_part();
        assert_eq!(allowed.datapath.as_deref(), Some("dpdk"));
        assert_eq!(allowed.mtu, Some(1400));
        assert_eq!(allowed.pmd_max_sleep, Some(PmdMaxSleep::Us(50)));
        let ax = allowed.afxdp.expect("afxdp");
        assert_eq!((ax.queues, ax.max_ports), (Some(2), None));
        let h = allowed.hugepages.expect("hugepages");
        assert_eq!((h.count, h.allocate), (Some(64), None));
        assert!(allowed.extra_eal_args.is_none() && allowed.socket_mem.is_none());
        assert!(allowed.lcore_mask.is_none() && allowed.pmd_cpus.is_none());
        assert!(allowed.cpu_dma_latency_us.is_none() && allowed.no_pci.is_none());
        assert!(allowed.nic.is_none());
        assert_eq!(allowed.uplink.as_deref(), Some("kernel"));
        for k in [
            "extraEalArgs",
            "socketMem",
            "lcoreMask",
            "pmdCpus",
            "cpuDmaLatencyUs",
            "noPci",
            "nic",
            "hugepages.allocate",
            "afxdp.maxPorts",
            "uplinkDevargs",
        ] {
            assert!(refused.contains(&k), "{k} not refused: {refused:?}");
        }
        // every key is either allowed or refused: a new field must be placed
        let all = serde_json::to_value(DatapathConfig {
            datapath: Some("x".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(all.as_object().map(|o| o.len()), Some(1));
    }

    #[test]
    fn a_fast_start_that_is_not_a_boolean_is_an_error_naming_it() {
        let e = DatapathConfig::parse(r#"{"afxdp":{"fastStart":"maybe"}}"#, "annotation")
            .expect_err("a string is no boolean")
            .to_string();
        assert!(e.contains("fastStart") || e.contains("boolean"), "{e}");
        let ok = DatapathConfig::parse("afxdp: {fastStart: false}\n", "file").expect("parses");
        assert_eq!(ok.afxdp.and_then(|a| a.fast_start), Some(false));
    }

    #[test]
    fn yaml_and_json_parse_to_the_same() {
        let y = "datapath: dpdk\nsocketMem: [512, 0]\npmdCpus: \"2-3\"\nhugepages:\n  size: 2Mi\n  count: 512\nafxdp:\n  queues: 2\n";
        let j = r#"{"datapath":"dpdk","socketMem":[512,0],"pmdCpus":"2-3","hugepages":{"size":"2Mi","count":512},"afxdp":{"queues":2}}"#;
        let a = DatapathConfig::parse(y, "y").unwrap();
        let b = DatapathConfig::parse(j, "j").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.socket_mem, Some(vec![512, 0]));
        assert_eq!(a.afxdp.unwrap().queues, Some(2));
    }

    #[test]
    fn unknown_key_is_an_error_naming_it() {
        let e = DatapathConfig::parse("pmdCpu: 3\n", "node.yaml").unwrap_err();
        let s = e.to_string();
        assert!(s.contains("node.yaml") && s.contains("pmdCpu"), "{s}");
    }

    #[test]
    fn overlay_replaces_only_what_is_set() {
        let base = DatapathConfig::parse(
            "datapath: dpdk\npmdMaxSleep: 50\nhugepages: {size: 2Mi, count: 256}\n",
            "b",
        )
        .unwrap();
        let over =
            DatapathConfig::parse(r#"{"datapath":"afxdp","hugepages":{"count":64}}"#, "o").unwrap();
        let m = base.overlay(&over);
        assert_eq!(m.datapath.as_deref(), Some("afxdp"));
        assert_eq!(m.pmd_max_sleep, Some(PmdMaxSleep::Us(50)));
        let h = m.hugepages.unwrap();
        assert_eq!((h.size.as_deref(), h.count), (Some("2Mi"), Some(64)));
    }

    #[test]
    fn annotation_override_bad_json_is_reported() {
        let ann = BTreeMap::from([(CONFIG_ANNOTATION.to_string(), "{datapath: x".to_string())]);
        let e = DatapathConfig::from_annotations(&ann).unwrap().unwrap_err();
        assert!(e.to_string().contains(CONFIG_ANNOTATION));
        assert!(DatapathConfig::from_annotations(&BTreeMap::new()).is_none());
    }
}
