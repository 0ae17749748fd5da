//! The agent's datapath loop: read config and facts, decide, apply, report — at start and
//! again whenever asked (the agent's watch runs it every few seconds and when the Node's
//! config annotation changes). Each pass is level-triggered and idempotent: nothing is
//! written when nothing changed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use super::POD_DATAPATH_ANNOTATION;
use super::apply::{self, Plan};
use super::config::DatapathConfig;
use super::decide::{self, Datapath, Decision, Fallback, Runtime};
use super::pm_qos::PmQos;
use super::probe::{OvsFacts, Sysfs};
use super::status::DatapathStatus;
use crate::ovs::Ovs;

/// How long DPDK may take to come up after `dpdk-init=try` is written (it takes
/// ~0.3 s with 256 MiB here) before the agent restarts ovs-vswitchd to retry.
pub const DPDK_INIT_WAIT: Duration = Duration::from_secs(5);
/// How long ovs-vswitchd may take to come back (and DPDK to initialise) after a restart.
pub const RESTART_WAIT: Duration = Duration::from_secs(30);

/// Settings of the manager.
#[derive(Debug, Clone, Default)]
pub struct ManagerConfig {
    /// The agent's config file (already read; errors reading it are in `base_errors`).
    pub base: DatapathConfig,
    pub base_errors: Vec<String>,
    /// A shell command that restarts ovs-vswitchd (`None`: restarts are only reported).
    pub restart_cmd: Option<String>,
    /// The node sends pod traffic into tunnels.
    pub tunnels: bool,
    /// sysfs/procfs root (`/`).
    pub sys_root: PathBuf,
}

/// What one pass found and did.
#[derive(Debug, Clone)]
pub struct PassOutcome {
    pub status: DatapathStatus,
    /// The status differs from the previous pass's (the annotation needs writing).
    pub changed: bool,
    /// Fallbacks that were not there in the previous pass (count them, tell the operator).
    pub new_fallbacks: Vec<Fallback>,
    /// Configuration errors not reported before.
    pub new_errors: Vec<String>,
    /// Whether ovs-vswitchd was restarted in this pass.
    pub restarted: bool,
}

/// The per-port choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortChoice {
    pub datapath: Datapath,
    /// Why (for the port's external_ids and the logs).
    pub reason: String,
    /// A request the agent could not honour (the pod gets an event).
    pub warning: Option<String>,
}

#[derive(Debug, Default)]
struct Memory {
    status: Option<DatapathStatus>,
    /// DPDK failed to initialise with this fingerprint of its inputs.
    dpdk_failed: Option<(String, String)>,
    last_decision: Option<Decision>,
}

/// The node's datapath state.
#[derive(Debug)]
pub struct DatapathManager {
    cfg: ManagerConfig,
    mem: Mutex<Memory>,
    /// The CPU wake-up latency request (held while the agent runs).
    pm_qos: Mutex<PmQos>,
    /// One pass at a time.
    pass: tokio::sync::Mutex<()>,
}

impl DatapathManager {
    pub fn new(cfg: ManagerConfig) -> DatapathManager {
        DatapathManager {
            cfg,
            mem: Mutex::new(Memory::default()),
            pm_qos: Mutex::new(PmQos::default()),
            pass: tokio::sync::Mutex::new(()),
        }
    }

    fn mem(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.mem.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current status (the initial one before the first pass).
    pub fn status(&self) -> DatapathStatus {
        self.mem()
            .status
            .clone()
            .unwrap_or_else(DatapathStatus::initial)
    }

    /// The last decision (pod MTU, AF_XDP port settings).
    pub fn decision(&self) -> Option<Decision> {
        self.mem().last_decision.clone()
    }

    /// The PMD sleep mode of the last decision, without cloning the decision (the adaptive
    /// tuner asks 10 times a second).
    pub fn pmd_sleep(&self) -> Option<super::pmd_sleep::PmdSleep> {
        self.mem().last_decision.as_ref().map(|d| d.pmd_sleep)
    }

    /// The datapath of a new veth port: the node's, or the pod's request where the node
    /// can honour it.
    pub fn port_choice(&self, pod_annotations: &BTreeMap<String, String>) -> PortChoice {
        choose_port(
            &self.status(),
            pod_annotations
                .get(POD_DATAPATH_ANNOTATION)
                .map(|s| s.trim()),
        )
    }

    /// One pass: config (+ the Node's override annotation), facts, decision, apply.
    pub async fn pass(
        &self,
        ovs: &Ovs,
        node_annotations: Option<&BTreeMap<String, String>>,
    ) -> PassOutcome {
        let _one = self.pass.lock().await;
        let mut pre_errors = self.cfg.base_errors.clone();
        let cfg = match node_annotations.and_then(DatapathConfig::from_annotations) {
            Some(Ok(over)) => {
                let (over, refused) = over.annotation_part();
                for key in refused {
                    pre_errors.push(format!(
                        "{key} in the annotation {} is ignored: it reaches the privileged datapath or the host, so only the agent's configuration file sets it (the chart's datapathConfig values, written by an administrator)",
                        crate::datapath::config::CONFIG_ANNOTATION
                    ));
                }
                self.cfg.base.overlay(&over)
            }
            Some(Err(e)) => {
                pre_errors.push(format!("{e}: the annotation is ignored"));
                self.cfg.base.clone()
            }
            None => self.cfg.base.clone(),
        };
        let sys = Sysfs {
            root: self.cfg.sys_root.clone(),
        };
        let mut restarted = false;
        let mut restart_required = Vec::new();
        let mut d = self.decide_now(&cfg, &pre_errors, &sys, ovs);

        if let Some(a) = d.allocate_hugepages {
            if let Err(e) = apply::allocate_hugepages(&sys.root, &a) {
                tracing::warn!(error = %e, "hugepage allocation failed");
                pre_errors.push(e.to_string());
            }
            // decide again on what the kernel actually gave
            let mut c2 = cfg.clone();
            if let Some(h) = c2.hugepages.as_mut() {
                h.allocate = Some(false);
            }
            d = self.decide_now(&c2, &pre_errors, &sys, ovs);
        }

        match self
            .apply(ovs, &d, &mut restarted, &mut restart_required)
            .await
        {
            Ok(None) => {}
            Ok(Some(failure)) => {
                // DPDK did not come up: remember it for these inputs, decide again
                tracing::warn!(detail = %failure, "DPDK initialisation failed; falling back");
                self.mem().dpdk_failed = Some((dpdk_fingerprint(&d), failure));
                d = self.decide_now(&cfg, &pre_errors, &sys, ovs);
                if let Err(e) = self
                    .apply(ovs, &d, &mut restarted, &mut restart_required)
                    .await
                {
                    d.errors.push(format!("apply: {e}"));
                }
            }
            Err(e) => d.errors.push(format!("apply: {e}")),
        }

        let cpu_dma_latency_us = {
            let mut q = self.pm_qos.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = q.set(&self.cfg.sys_root, cfg.cpu_dma_latency_us) {
                tracing::warn!(error = %e, "datapath: CPU wake-up latency request failed");
                d.errors.push(e.to_string());
            }
            q.held()
        };
        let host = host_facts(&sys, &cfg);
        let mut status = DatapathStatus::new(&d, &host, &OvsFacts::read(ovs), restart_required);
        status.cpu_dma_latency_us = cpu_dma_latency_us;
        let mut mem = self.mem();
        let prev = mem.status.clone();
        let new_fallbacks: Vec<Fallback> = status
            .fallbacks
            .iter()
            .filter(|f| {
                !prev.as_ref().is_some_and(|p| {
                    p.fallbacks
                        .iter()
                        .any(|g| g.reason == f.reason && g.from == f.from)
                })
            })
            .cloned()
            .collect();
        let new_errors: Vec<String> = status
            .errors
            .iter()
            .filter(|e| !prev.as_ref().is_some_and(|p| p.errors.contains(e)))
            .cloned()
            .collect();
        let changed = !prev.as_ref().is_some_and(|p| p.same_decision(&status));
        mem.status = Some(status.clone());
        mem.last_decision = Some(d);
        PassOutcome {
            status,
            changed,
            new_fallbacks,
            new_errors,
            restarted,
        }
    }

    fn decide_now(&self, cfg: &DatapathConfig, pre: &[String], sys: &Sysfs, ovs: &Ovs) -> Decision {
        let host = host_facts(sys, cfg);
        let facts = OvsFacts::read(ovs);
        let mut rt = Runtime {
            dpdk_init_failed: None,
            tunnels: self.cfg.tunnels,
        };
        // a failure counts only while its inputs are the same
        let probe = decide::decide(cfg, pre.to_vec(), &host, &facts, &rt);
        let fp = dpdk_fingerprint(&probe);
        let mut mem = self.mem();
        match &mem.dpdk_failed {
            Some((f, why)) if *f == fp => rt.dpdk_init_failed = Some(why.clone()),
            Some(_) => mem.dpdk_failed = None,
            None => {}
        }
        drop(mem);
        if rt.dpdk_init_failed.is_none() {
            return probe;
        }
        decide::decide(cfg, pre.to_vec(), &host, &facts, &rt)
    }

    /// Writes the decision. `Ok(Some(detail))`: DPDK was wanted and did not initialise.
    async fn apply(
        &self,
        ovs: &Ovs,
        d: &Decision,
        restarted: &mut bool,
        restart_required: &mut Vec<String>,
    ) -> Result<Option<String>, apply::ApplyError> {
        let facts = OvsFacts::read(ovs);
        let p: Plan = apply::plan(d, &facts);
        if !p.set.is_empty() || !p.remove.is_empty() {
            tracing::info!(set = ?p.set, remove = ?p.remove, "datapath: updating Open_vSwitch other_config");
        }
        let restart_reason = (!p.restart.is_empty()).then(|| p.restart.join(","));
        apply::write(ovs, &p, restart_reason.as_deref()).await?;
        if let Some(why) = &restart_reason {
            match &self.cfg.restart_cmd {
                Some(cmd) if !*restarted => {
                    tracing::info!(reason = %why, "datapath: restarting ovs-vswitchd (start-time settings changed)");
                    self.restart(ovs, cmd).await?;
                    *restarted = true;
                }
                _ => {
                    tracing::warn!(reason = %why, "datapath: an ovs-vswitchd restart is needed for these settings; no --vswitchd-restart-cmd is configured");
                    restart_required.extend(p.restart.iter().cloned());
                }
            }
        }
        if d.datapath != Datapath::Dpdk {
            return Ok(None);
        }
        if wait_dpdk(ovs, DPDK_INIT_WAIT).await {
            return Ok(None);
        }
        // the running ovs-vswitchd may have tried (and failed) before: DPDK initialises
        // once per process, so retry in a new one
        match &self.cfg.restart_cmd {
            Some(cmd) if !*restarted => {
                tracing::info!(
                    "datapath: DPDK did not initialise in the running ovs-vswitchd; restarting it to retry"
                );
                apply::write(ovs, &p, Some("dpdk-init")).await?;
                self.restart(ovs, cmd).await?;
                *restarted = true;
                if wait_dpdk(ovs, RESTART_WAIT).await {
                    return Ok(None);
                }
                Ok(Some(format!(
                    "dpdk_initialized stayed false after dpdk-init=try and an ovs-vswitchd restart (dpdk-socket-mem={}; see the ovs-vswitchd log)",
                    d.other_config
                        .get("dpdk-socket-mem")
                        .map(String::as_str)
                        .unwrap_or("")
                )))
            }
            _ => Ok(Some(format!(
                "dpdk_initialized is still false {} s after dpdk-init=try{}",
                DPDK_INIT_WAIT.as_secs(),
                if self.cfg.restart_cmd.is_none() {
                    " (no --vswitchd-restart-cmd to retry in a new ovs-vswitchd)"
                } else {
                    ""
                }
            ))),
        }
    }

    async fn restart(&self, ovs: &Ovs, cmd: &str) -> Result<(), apply::ApplyError> {
        apply::restart_vswitchd(cmd, RESTART_WAIT).await?;
        if let Err(e) = apply::clear_pending(ovs).await {
            tracing::warn!(error = %e, "could not clear the pending-restart mark");
        }
        Ok(())
    }
}

/// The host's facts; the NUMA node of the NIC is `nic`'s, or else the PCI uplink's
/// (`uplink: dpdk` on a PCI device: socket memory and PMDs follow it), and why the host
/// refuses that device, if it does.
fn host_facts(sys: &Sysfs, cfg: &DatapathConfig) -> super::probe::HostFacts {
    let mut h = sys.host_facts(cfg.nic.as_deref());
    if cfg.uplink.as_deref() != Some("dpdk") {
        return h;
    }
    let Some(devargs) = cfg.uplink_devargs.as_deref() else {
        return h;
    };
    match crate::host::dpdk_nic::check(&sys.root, devargs) {
        Ok(f) => {
            if cfg.nic.is_none() && f.numa.is_some() {
                h.nic_numa = f.numa;
            }
        }
        Err(e) => h.uplink_refusal = Some(e.to_string()),
    }
    h
}

async fn wait_dpdk(ovs: &Ovs, timeout: Duration) -> bool {
    ovs.wait_open_vswitch(timeout, |r| r.dpdk_initialized).await
}

/// What a DPDK failure depends on: its settings (a missing prerequisite such as free
/// hugepages is a check of its own, not a failure to remember).
fn dpdk_fingerprint(d: &Decision) -> String {
    d.other_config
        .iter()
        .filter(|(k, _)| k.starts_with("dpdk-") && *k != "dpdk-init")
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// The datapath of a new veth port on a node with status `node`, for a pod that asks for
/// `asked` (the annotation's value).
pub fn choose_port(node: &DatapathStatus, asked: Option<&str>) -> PortChoice {
    let unknown = asked
        .filter(|a| !["afxdp", "dpdk", "kernel", ""].contains(a))
        .map(|a| {
            format!(
                "{POD_DATAPATH_ANNOTATION}={a:?} is not afxdp or kernel: the node's default is used"
            )
        });
    if asked == Some("kernel") {
        return PortChoice {
            datapath: Datapath::Kernel,
            reason: "the pod asks for the kernel path".into(),
            warning: None,
        };
    }
    if node.datapath.veth_on_afxdp() {
        return PortChoice {
            datapath: Datapath::Afxdp,
            reason: if asked == Some("afxdp") {
                "the pod asks for AF_XDP".into()
            } else {
                format!("the node's datapath is {}", node.datapath)
            },
            warning: unknown,
        };
    }
    PortChoice {
        datapath: Datapath::Kernel,
        reason: format!("the node's datapath is kernel ({})", node.reason),
        warning: unknown.or_else(|| {
            asked.filter(|a| ["afxdp", "dpdk"].contains(a)).map(|a| {
                format!(
                    "the pod asks for {a} but the node runs the kernel datapath: {}",
                    node.reason
                )
            })
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(dp: Datapath) -> DatapathStatus {
        let mut s = DatapathStatus::initial();
        s.datapath = dp;
        s.reason = "fell back: no hugepages".into();
        s
    }

    #[test]
    fn port_choice_follows_node_and_pod() {
        let c = choose_port(&node(Datapath::Dpdk), None);
        assert_eq!(c.datapath, Datapath::Afxdp);
        assert!(c.warning.is_none());
        let c = choose_port(&node(Datapath::Afxdp), Some("kernel"));
        assert_eq!(c.datapath, Datapath::Kernel);
        let c = choose_port(&node(Datapath::Kernel), Some("afxdp"));
        assert_eq!(c.datapath, Datapath::Kernel);
        assert!(c.warning.unwrap().contains("no hugepages"));
        let c = choose_port(&node(Datapath::Afxdp), Some("turbo"));
        assert_eq!(c.datapath, Datapath::Afxdp);
        assert!(c.warning.unwrap().contains("\"turbo\""));
    }
}
