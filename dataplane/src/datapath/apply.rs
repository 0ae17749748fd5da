//! Applying a [`Decision`]: the `other_config` keys the agent manages, hugepages, and a
//! restart of ovs-vswitchd when (and only when) a start-time setting changed.
//!
//! The agent owns only the keys it wrote: their names are kept in
//! `Open_vSwitch.external_ids:zstack.io/datapath-keys`, so a key an operator set by hand
//! and the agent never managed is left alone, and a key the agent no longer wants is
//! removed. A restart that is due is recorded first
//! (`external_ids:zstack.io/vswitchd-restart-pending`), so an agent that dies before
//! restarting does it on its next start.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use super::decide::{Datapath, Decision, HugepageAllocation, RESTART_KEYS};
use super::pmd_sleep::{self, PmdSleep};
use super::probe::OvsFacts;
use crate::ovs::{Ovs, OvsError};

/// `Open_vSwitch.external_ids` keys: the `other_config` keys the agent manages; a restart
/// of ovs-vswitchd is due (value: why).
pub use api::external_ids::ovs::{
    DATAPATH_KEYS as MANAGED_KEYS, VSWITCHD_RESTART_PENDING as RESTART_PENDING,
};

/// What to change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Keys to set (new or changed).
    pub set: BTreeMap<String, String>,
    /// Managed keys no longer wanted.
    pub remove: Vec<String>,
    /// Start-time keys that change while ovs-vswitchd runs with the old value (or a
    /// restart left pending by an earlier run): a restart is needed.
    pub restart: Vec<String>,
    /// The managed key list to record.
    pub managed: BTreeSet<String>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty() && self.restart.is_empty()
    }
}

/// Compares the decision with the running `Open_vSwitch` row.
pub fn plan(d: &Decision, ovs: &OvsFacts) -> Plan {
    let have = &ovs.other_config;
    let managed_before: BTreeSet<String> = ovs
        .external_ids
        .get(MANAGED_KEYS)
        .map(|s| {
            s.split(',')
                .filter(|k| !k.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    // the adaptive PMD sleep's live value belongs to its tuner once it exists
    let live = |k: &str| {
        matches!(d.pmd_sleep, PmdSleep::Adaptive { .. })
            && k == pmd_sleep::KEY
            && have.contains_key(k)
    };
    let set: BTreeMap<String, String> = d
        .other_config
        .iter()
        .filter(|(k, v)| have.get(*k) != Some(*v) && !live(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let remove: Vec<String> = managed_before
        .iter()
        .filter(|k| !d.other_config.contains_key(*k) && have.contains_key(*k))
        .cloned()
        .collect();
    let mut restart: Vec<String> = Vec::new();
    if let Some(why) = ovs.external_ids.get(RESTART_PENDING) {
        restart.push(format!("pending: {why}"));
    }
    if ovs.vswitchd_seen() {
        for k in RESTART_KEYS {
            let changed = set.contains_key(*k) || remove.iter().any(|r| r == k);
            if !changed {
                continue;
            }
            let dpdk_key = k.starts_with("dpdk-");
            // DPDK settings matter only to a DPDK that is up (one not up yet reads them
            // when it initialises); TSO and offload are read at start.
            let needs = if dpdk_key {
                ovs.dpdk_initialized && d.datapath == Datapath::Dpdk
            } else {
                let was = have.get(*k).map(String::as_str).unwrap_or("false");
                let will = d
                    .other_config
                    .get(*k)
                    .map(String::as_str)
                    .unwrap_or("false");
                was != will
            };
            if needs {
                restart.push((*k).to_string());
            }
        }
    }
    Plan {
        set,
        remove,
        restart,
        managed: d.other_config.keys().cloned().collect(),
    }
}

/// Errors applying a decision.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Ovs(#[from] OvsError),
    #[error("allocate {total} hugepages of {size_kb} kB: {detail}")]
    Hugepages {
        size_kb: u64,
        total: u64,
        detail: String,
    },
    #[error("restart ovs-vswitchd with {command:?}: {detail}")]
    Restart { command: String, detail: String },
}

/// Writes the plan's `other_config` changes and the managed-key record in one transaction.
pub async fn write(ovs: &Ovs, p: &Plan, restart_reason: Option<&str>) -> Result<(), OvsError> {
    let mut ext_set = BTreeMap::from([(
        MANAGED_KEYS.to_string(),
        p.managed.iter().cloned().collect::<Vec<_>>().join(","),
    )]);
    if let Some(r) = restart_reason {
        ext_set.insert(RESTART_PENDING.to_string(), r.to_string());
    }
    ovs.update_open_vswitch_maps(&p.set, &p.remove, &ext_set, &[])
        .await
}

/// Clears the pending-restart mark.
pub async fn clear_pending(ovs: &Ovs) -> Result<(), OvsError> {
    ovs.update_open_vswitch_maps(
        &BTreeMap::new(),
        &[],
        &BTreeMap::new(),
        &[RESTART_PENDING.to_string()],
    )
    .await
}

/// Sets `nr_hugepages` (under `sys_root`, `/` on a node) and checks the kernel gave them.
pub fn allocate_hugepages(sys_root: &Path, a: &HugepageAllocation) -> Result<(), ApplyError> {
    let f = sys_root.join(format!(
        "sys/kernel/mm/hugepages/hugepages-{}kB/nr_hugepages",
        a.size_kb
    ));
    let err = |detail: String| ApplyError::Hugepages {
        size_kb: a.size_kb,
        total: a.total,
        detail,
    };
    std::fs::write(&f, format!("{}\n", a.total))
        .map_err(|e| err(format!("write {}: {e}", f.display())))?;
    let got: u64 = std::fs::read_to_string(&f)
        .map_err(|e| err(format!("read {}: {e}", f.display())))?
        .trim()
        .parse()
        .map_err(|_| err(format!("{} is not a number", f.display())))?;
    if got < a.total {
        return Err(err(format!(
            "the kernel gave {got} (memory too fragmented or too small)"
        )));
    }
    tracing::info!(size_kb = a.size_kb, total = got, "hugepages allocated");
    Ok(())
}

/// Runs the restart command (through `sh -c`), bounded by `timeout`.
pub async fn restart_vswitchd(command: &str, timeout: Duration) -> Result<(), ApplyError> {
    let err = |detail: String| ApplyError::Restart {
        command: command.to_string(),
        detail,
    };
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(timeout, child)
        .await
        .map_err(|_| err(format!("no exit after {timeout:?}")))?
        .map_err(|e| err(e.to_string()))?;
    if !out.status.success() {
        return Err(err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::decide::{AfxdpPorts, Datapath};

    fn decision(dp: Datapath, oc: &[(&str, &str)]) -> Decision {
        Decision {
            requested: "auto".into(),
            datapath: dp,
            reason: String::new(),
            fallbacks: vec![],
            errors: vec![],
            other_config: oc
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            pmd_cpus: [1].into(),
            pmd_sleep: PmdSleep::Busy,
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
            uplink: crate::datapath::decide::UplinkPlan {
                pref: "auto".into(),
                xdp_mode: "best-effort".into(),
                devargs: None,
            },
            mtu: None,
            allocate_hugepages: None,
            hugepage_size_kb: 2048,
        }
    }

    fn running(dpdk: bool, oc: &[(&str, &str)], managed: &str) -> OvsFacts {
        OvsFacts {
            dpdk_initialized: dpdk,
            iface_types: ["afxdp", "dpdk"].map(String::from).into(),
            other_config: oc
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            external_ids: BTreeMap::from([(MANAGED_KEYS.to_string(), managed.to_string())]),
            ..Default::default()
        }
    }

    #[test]
    fn first_dpdk_init_needs_no_restart() {
        let d = decision(
            Datapath::Dpdk,
            &[
                ("dpdk-init", "try"),
                ("dpdk-socket-mem", "256"),
                ("pmd-cpu-mask", "0x2"),
            ],
        );
        let p = plan(&d, &running(false, &[], ""));
        assert_eq!(p.set.len(), 3);
        assert!(p.restart.is_empty(), "{p:?}");
    }

    #[test]
    fn changing_socket_mem_under_a_running_dpdk_needs_a_restart_but_pmd_mask_does_not() {
        let d = decision(
            Datapath::Dpdk,
            &[
                ("dpdk-init", "try"),
                ("dpdk-socket-mem", "512"),
                ("pmd-cpu-mask", "0x2"),
            ],
        );
        let have = [
            ("dpdk-init", "try"),
            ("dpdk-socket-mem", "256"),
            ("pmd-cpu-mask", "0x1"),
        ];
        let p = plan(
            &d,
            &running(true, &have, "dpdk-init,dpdk-socket-mem,pmd-cpu-mask"),
        );
        assert_eq!(p.restart, ["dpdk-socket-mem"]);
        assert_eq!(
            p.set.keys().collect::<Vec<_>>(),
            ["dpdk-socket-mem", "pmd-cpu-mask"]
        );
    }

    #[test]
    fn tso_change_needs_a_restart_and_absent_means_false() {
        let d = decision(Datapath::Afxdp, &[("userspace-tso-enable", "false")]);
        let p = plan(&d, &running(false, &[], ""));
        assert!(p.restart.is_empty(), "false == absent");
        let d = decision(Datapath::Afxdp, &[("userspace-tso-enable", "true")]);
        assert_eq!(
            plan(&d, &running(false, &[], "")).restart,
            ["userspace-tso-enable"]
        );
    }

    #[test]
    fn only_managed_keys_are_removed() {
        let d = decision(Datapath::Kernel, &[("dpdk-init", "false")]);
        let have = [
            ("dpdk-init", "try"),
            ("pmd-maxsleep", "50"),
            ("vlan-limit", "0"),
        ];
        let p = plan(&d, &running(false, &have, "dpdk-init,pmd-maxsleep"));
        assert_eq!(p.remove, ["pmd-maxsleep"], "vlan-limit is not ours");
        assert_eq!(p.set["dpdk-init"], "false");
    }

    #[test]
    fn the_adaptive_sleep_is_written_once_then_left_to_its_tuner() {
        let mut d = decision(Datapath::Afxdp, &[("pmd-maxsleep", "1000")]);
        d.pmd_sleep = PmdSleep::Adaptive { idle_us: 1000 };
        // missing: the pass writes the idle value
        let p = plan(&d, &running(false, &[], ""));
        assert_eq!(p.set["pmd-maxsleep"], "1000");
        // the tuner set 0 under traffic: the pass keeps it, and keeps managing the key
        let busy = running(false, &[("pmd-maxsleep", "0")], "pmd-maxsleep");
        let p = plan(&d, &busy);
        assert!(p.is_empty(), "{p:?}");
        assert!(p.managed.contains("pmd-maxsleep"));
        // a static value replaces the tuner's
        let mut s = decision(Datapath::Afxdp, &[("pmd-maxsleep", "50")]);
        s.pmd_sleep = PmdSleep::Static { us: 50 };
        assert_eq!(plan(&s, &busy).set["pmd-maxsleep"], "50");
        // busy polling removes it
        assert_eq!(
            plan(&decision(Datapath::Afxdp, &[]), &busy).remove,
            ["pmd-maxsleep"]
        );
    }

    #[test]
    fn a_pending_restart_is_carried() {
        let d = decision(Datapath::Dpdk, &[]);
        let mut o = running(true, &[], "");
        o.external_ids
            .insert(RESTART_PENDING.into(), "dpdk-socket-mem".into());
        assert_eq!(plan(&d, &o).restart, ["pending: dpdk-socket-mem"]);
    }

    #[test]
    fn hugepage_allocation_writes_and_verifies() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("sys/kernel/mm/hugepages/hugepages-2048kB");
        std::fs::create_dir_all(&f).unwrap();
        std::fs::write(f.join("nr_hugepages"), "0\n").unwrap();
        allocate_hugepages(
            d.path(),
            &HugepageAllocation {
                size_kb: 2048,
                total: 64,
            },
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(f.join("nr_hugepages")).unwrap(),
            "64\n"
        );
        let e = allocate_hugepages(
            d.path(),
            &HugepageAllocation {
                size_kb: 1048576,
                total: 1,
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("hugepages-1048576kB"), "{e}");
    }

    #[tokio::test]
    async fn restart_command_failure_names_the_command() {
        let e = restart_vswitchd("echo nope >&2; exit 3", Duration::from_secs(5))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("exit 3") && e.contains("nope"), "{e}");
        restart_vswitchd("true", Duration::from_secs(5))
            .await
            .unwrap();
    }
}
