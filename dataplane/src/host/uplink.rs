//! The node's uplink: the device port of the bridge that holds the node's address and
//! tunnel endpoint (`--gateway-interface`, br-phy; the chart's uplink container puts
//! `tunnel.interface` there, the lab its underlay veth).
//!
//! On the userspace datapaths (`dpdk`, `afxdp`) every packet that leaves or enters the
//! node (Geneve/VXLAN between nodes, the `shared` gateway routers' egress) crosses that
//! port. As a kernel port (AF_PACKET) it costs a syscall per batch in ovs-vswitchd's main
//! thread and a copy each way; as an AF_XDP port it is polled by the PMD threads like the
//! pods' ports. Measured in the lab (2 vCPUs, one PMD): `shared` egress from an AF_XDP pod
//! went from ~0.75× to ~0.95× pod-to-pod with the uplink on AF_XDP (docs/egress.md).
//!
//! The config key `uplink` ([`crate::datapath::config::DatapathConfig::uplink`]) decides:
//! `auto` (AF_XDP on the dpdk and afxdp datapaths, a kernel port on the kernel one),
//! `afxdp`, `kernel`. `n_rxq` is the device's number of receive queues (an AF_XDP port
//! must serve all of them: a queue without a socket hands its packets to the kernel), the
//! XDP mode `afxdp.mode` or `best-effort`. An uplink that does not open as AF_XDP is put
//! back on a kernel port with the reason (`UplinkFallback` Warning event, the datapath
//! status' `uplink`), and retried only when its inputs change (or the agent restarts).
//! Only a port marked `external_ids:zstack.io/owner=zstack-ovn-node` is changed; a bridge
//! with several device ports is left alone and said so.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::report::EventType;
use crate::datapath::Datapath;
use crate::datapath::decide::UplinkPlan;
use crate::ovs::Ovs;
use crate::ovs::uplink_port::UplinkPort;

use super::dpdk_nic::{NicFacts, NicRefusal};

/// How long ovs-vswitchd may take to reconfigure after a type change.
pub const OPEN_WAIT: Duration = Duration::from_secs(10);

/// What the datapath status says of the uplink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UplinkStatus {
    pub bridge: String,
    /// The device port (empty when the bridge has none, or several).
    pub port: String,
    /// `afxdp`, `system` (a kernel port), `dpdk`, or empty.
    #[serde(rename = "type")]
    pub port_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp_mode: Option<String>,
    /// Why, in one sentence.
    pub reason: String,
}

/// What the uplink should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An AF_XDP port with these options.
    Afxdp { queues: u32, xdp_mode: String },
    /// A DPDK port on this device (`options:dpdk-devargs`).
    Dpdk { devargs: String },
    /// A kernel port.
    Kernel,
    /// Not ours to change.
    Leave,
}

/// What the pass needs to know of the port besides the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortFacts<'a> {
    pub name: &'a str,
    pub owned: bool,
    pub queues: u32,
    /// The last AF_XDP (or DPDK) failure for these same inputs.
    pub failed: Option<&'a str>,
    /// `uplink: dpdk`: the host checks of the device ([`crate::host::dpdk_nic`]).
    pub nic: Option<&'a Result<NicFacts, NicRefusal>>,
}

/// Decides (pure).
pub fn target(plan: &UplinkPlan, datapath: Datapath, port: &PortFacts) -> (Target, String) {
    let name = port.name;
    if !port.owned {
        return (
            Target::Leave,
            format!(
                "{name} is not marked as the agent's (external_ids:zstack.io/owner on its Port): left as it is"
            ),
        );
    }
    if plan.pref == "kernel" {
        return (Target::Kernel, "a kernel port (uplink: kernel)".to_string());
    }
    if plan.pref == "dpdk" {
        let devargs = plan.devargs.clone().unwrap_or_default();
        if datapath != Datapath::Dpdk {
            return (
                Target::Leave,
                format!(
                    "uplink dpdk ({devargs}) needs the dpdk datapath, this node runs {datapath}: {name} left as it is"
                ),
            );
        }
        if let Some(Err(e)) = port.nic {
            return (
                Target::Leave,
                format!("uplink dpdk refused: {e}: {name} left as it is"),
            );
        }
        if let Some(e) = port.failed {
            return (
                Target::Kernel,
                format!("a kernel port: {name} did not open as DPDK device {devargs} ({e})"),
            );
        }
        return (
            Target::Dpdk {
                devargs: devargs.clone(),
            },
            format!("DPDK device {devargs}, polled by the PMD threads (uplink: dpdk)"),
        );
    }
    if plan.pref == "auto" && datapath == Datapath::Kernel {
        return (
            Target::Kernel,
            "a kernel port on the kernel datapath (uplink: auto)".to_string(),
        );
    }
    if let Some(e) = port.failed {
        return (
            Target::Kernel,
            format!("a kernel port: {name} did not open as AF_XDP ({e})"),
        );
    }
    (
        Target::Afxdp {
            queues: port.queues,
            xdp_mode: plan.xdp_mode.clone(),
        },
        format!(
            "AF_XDP, polled by the PMD threads like the pods' ports (uplink: {}, {} datapath)",
            plan.pref, datapath
        ),
    )
}

/// The receive queues of a device (`/sys/class/net/<dev>/queues/rx-*`), at least 1.
pub fn rx_queues(sys_class_net: &Path, dev: &str) -> u32 {
    let n = std::fs::read_dir(sys_class_net.join(dev).join("queues"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(0);
    u32::try_from(n).unwrap_or(u32::MAX).clamp(1, 64)
}

/// One event the pass asks the agent to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UplinkEvent {
    pub kind: EventType,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, Default)]
struct Memory {
    /// (inputs, error) of the last AF_XDP or DPDK attempt that failed.
    failed: Option<(String, String)>,
    /// The last refusal reported (an event only when it changes).
    refused: Option<String>,
}

/// The agent's uplink manager: the bridge, and what it remembers between passes.
#[derive(Debug)]
pub struct Uplink {
    bridge: String,
    /// sysfs/devfs root (`/`) for the DPDK device checks.
    sys_root: std::path::PathBuf,
    sys_class_net: std::path::PathBuf,
    mem: Mutex<Memory>,
}

impl Uplink {
    pub fn new(bridge: &str) -> Uplink {
        Uplink {
            bridge: bridge.to_string(),
            sys_root: "/".into(),
            sys_class_net: "/sys/class/net".into(),
            mem: Mutex::new(Memory::default()),
        }
    }

    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// One pass: read the bridge's device ports, decide, change the type if needed and
    /// check that ovs-vswitchd opened it. `None`: the bridge does not exist.
    pub async fn pass(
        &self,
        ovs: &Ovs,
        plan: &UplinkPlan,
        datapath: Datapath,
    ) -> (Option<UplinkStatus>, Vec<UplinkEvent>) {
        let mut events = Vec::new();
        let Some(ports) = ovs.uplink_ports(&self.bridge) else {
            return (None, events);
        };
        let mut status = UplinkStatus {
            bridge: self.bridge.clone(),
            port: String::new(),
            port_type: String::new(),
            queues: None,
            xdp_mode: None,
            reason: String::new(),
        };
        let [port] = ports.as_slice() else {
            let names: Vec<&str> = ports.iter().map(|p| p.name.as_str()).collect();
            status.reason = format!(
                "{} has {} device ports ({}): the agent changes a single uplink only",
                self.bridge,
                names.len(),
                names.join(", ")
            );
            return (Some(status), events);
        };
        let queues = rx_queues(&self.sys_class_net, &port.name);
        let inputs = format!(
            "{} {} {queues} {} {}",
            port.name,
            plan.pref,
            plan.xdp_mode,
            plan.devargs.as_deref().unwrap_or("")
        );
        let nic = (plan.pref == "dpdk")
            .then(|| super::dpdk_nic::check(&self.sys_root, plan.devargs.as_deref().unwrap_or("")));
        let failed = {
            let mut m = self.mem.lock().unwrap_or_else(|e| e.into_inner());
            match &m.failed {
                Some((i, e)) if *i == inputs => Some(e.clone()),
                Some(_) => {
                    m.failed = None;
                    None
                }
                None => None,
            }
        };
        let facts = PortFacts {
            name: &port.name,
            owned: port.owned,
            queues,
            failed: failed.as_deref(),
            nic: nic.as_ref(),
        };
        let (want, reason) = target(plan, datapath, &facts);
        let refused = matches!(want, Target::Leave) && port.owned;
        {
            let mut m = self.mem.lock().unwrap_or_else(|e| e.into_inner());
            if refused && m.refused.as_deref() != Some(reason.as_str()) {
                events.push(UplinkEvent {
                    kind: EventType::Warning,
                    reason: "UplinkRefused",
                    message: format!("{} on {}: {reason}", port.name, self.bridge),
                });
            }
            m.refused = refused.then(|| reason.clone());
        }
        status.port = port.name.clone();
        status.reason = reason;
        match want {
            Target::Leave => {}
            Target::Kernel => {
                if !port.is_kernel()
                    && let Err(e) = ovs.set_uplink_type(port, "system", &BTreeMap::new()).await
                {
                    status.reason = format!("{}; could not set it: {e}", status.reason);
                }
            }
            Target::Dpdk { devargs } => {
                let opts = BTreeMap::from([("dpdk-devargs".to_string(), devargs.clone())]);
                match self.open_userspace(ovs, port, "dpdk", &opts).await {
                    Ok(changed) => {
                        if changed {
                            events.push(UplinkEvent {
                                kind: EventType::Normal,
                                reason: "UplinkDpdk",
                                message: format!(
                                    "{} on {}: DPDK port on {devargs}",
                                    port.name, self.bridge
                                ),
                            });
                        }
                    }
                    Err(e) => {
                        let ev = self
                            .fall_back(ovs, port, inputs, "DPDK", e, &mut status)
                            .await;
                        events.push(ev)
                    }
                }
            }
            Target::Afxdp { queues, xdp_mode } => {
                let opts = BTreeMap::from([
                    ("xdp-mode".to_string(), xdp_mode.clone()),
                    ("n_rxq".to_string(), queues.to_string()),
                ]);
                match self.open_userspace(ovs, port, "afxdp", &opts).await {
                    Ok(changed) => {
                        status.queues = Some(queues);
                        status.xdp_mode = Some(xdp_mode.clone());
                        if changed {
                            events.push(UplinkEvent {
                                kind: EventType::Normal,
                                reason: "UplinkAfxdp",
                                message: format!(
                                    "{} on {}: AF_XDP port ({queues} queues, xdp-mode {xdp_mode})",
                                    port.name, self.bridge
                                ),
                            });
                        }
                    }
                    Err(e) => {
                        let ev = self
                            .fall_back(ovs, port, inputs, "AF_XDP", e, &mut status)
                            .await;
                        events.push(ev)
                    }
                }
            }
        }
        status.port_type = ovs
            .uplink_ports(&self.bridge)
            .and_then(|ps| ps.into_iter().find(|p| p.name == port.name))
            .map(|p| {
                if p.is_kernel() {
                    "system".to_string()
                } else {
                    p.iface_type
                }
            })
            .unwrap_or_default();
        (Some(status), events)
    }

    /// An uplink that did not open as `what` (AF_XDP, DPDK) goes back to a kernel port;
    /// the failure is remembered for these `inputs`, put in `status` and returned as the
    /// event that reports it.
    async fn fall_back(
        &self,
        ovs: &Ovs,
        port: &UplinkPort,
        inputs: String,
        what: &str,
        e: NotOpen,
        status: &mut UplinkStatus,
    ) -> UplinkEvent {
        tracing::warn!(port = %port.name, error = %e, "uplink: {what} did not open; back on a kernel port");
        self.mem.lock().unwrap_or_else(|e| e.into_inner()).failed = Some((inputs, e.to_string()));
        let back = ovs.set_uplink_type(port, "system", &BTreeMap::new()).await;
        status.reason = format!("a kernel port: {} did not open as {what} ({e})", port.name);
        if let Err(b) = back {
            status.reason = format!("{}; could not set it back: {b}", status.reason);
        }
        UplinkEvent {
            kind: EventType::Warning,
            reason: "UplinkFallback",
            message: format!("{} on {}: {}", port.name, self.bridge, status.reason),
        }
    }

    /// Makes `port` a port of `iface_type` (`afxdp`, `dpdk`) with these options unless it
    /// is one already; `Ok(true)` when it changed. `Err`: why ovs-vswitchd did not open it.
    async fn open_userspace(
        &self,
        ovs: &Ovs,
        port: &UplinkPort,
        iface_type: &str,
        opts: &BTreeMap<String, String>,
    ) -> Result<bool, NotOpen> {
        let current = port.iface_type == iface_type
            && opts.iter().all(|(k, v)| port.options.get(k) == Some(v));
        if current {
            // open already, or refused since (a restarted ovs-vswitchd, a changed device)
            return match &port.error {
                Some(e) => Err(NotOpen::Refused(e.clone())),
                None => Ok(false),
            };
        }
        ovs.set_uplink_type(port, iface_type, opts).await?;
        if !ovs.wait_applied(OPEN_WAIT).await? {
            return Err(NotOpen::NotReconfigured);
        }
        let now = ovs
            .uplink_ports(&self.bridge)
            .and_then(|ps| ps.into_iter().find(|p| p.name == port.name));
        match now {
            Some(p) if p.error.is_some() => Err(NotOpen::Refused(p.error.unwrap_or_default())),
            Some(p) if p.ofport.is_some_and(|o| o > 0) => {
                tracing::info!(port = %port.name, bridge = %self.bridge, iface_type, ?opts, "uplink: userspace port");
                Ok(true)
            }
            Some(_) => Err(NotOpen::NoOfport),
            None => Err(NotOpen::Gone),
        }
    }
}

/// Why the uplink did not open as an AF_XDP or DPDK port ([`Uplink`] falls back to a
/// kernel port and remembers the text for the same inputs).
#[derive(Debug, thiserror::Error)]
enum NotOpen {
    /// ovs-vswitchd's own words (the Interface's `error` column).
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Ovs(#[from] crate::ovs::OvsError),
    #[error("ovs-vswitchd did not reconfigure within {OPEN_WAIT:?}")]
    NotReconfigured,
    #[error("no OpenFlow port number assigned")]
    NoOfport,
    #[error("the port disappeared")]
    Gone,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(pref: &str) -> UplinkPlan {
        UplinkPlan {
            pref: pref.into(),
            xdp_mode: "best-effort".into(),
            devargs: (pref == "dpdk").then(|| "net_af_packet0,iface=eth1".to_string()),
        }
    }

    fn port(owned: bool, failed: Option<&str>) -> PortFacts<'_> {
        PortFacts {
            name: "eth1",
            owned,
            queues: 4,
            failed,
            nic: None,
        }
    }

    #[test]
    fn auto_is_afxdp_on_the_userspace_datapaths_and_kernel_on_the_kernel_one() {
        for dp in [Datapath::Dpdk, Datapath::Afxdp] {
            let (t, why) = target(&plan("auto"), dp, &port(true, None));
            assert_eq!(
                t,
                Target::Afxdp {
                    queues: 4,
                    xdp_mode: "best-effort".into()
                }
            );
            assert!(why.contains(dp.as_str()), "{why}");
        }
        let (t, why) = target(&plan("auto"), Datapath::Kernel, &port(true, None));
        assert_eq!(t, Target::Kernel);
        assert!(why.contains("kernel datapath"), "{why}");
    }

    #[test]
    fn explicit_choices_win_over_the_datapath() {
        let (t, _) = target(&plan("afxdp"), Datapath::Kernel, &port(true, None));
        assert!(matches!(t, Target::Afxdp { .. }));
        let (t, why) = target(&plan("kernel"), Datapath::Dpdk, &port(true, None));
        assert_eq!(t, Target::Kernel);
        assert!(why.contains("uplink: kernel"), "{why}");
    }

    #[test]
    fn a_foreign_port_is_left_and_said_so() {
        let (t, why) = target(&plan("afxdp"), Datapath::Afxdp, &port(false, None));
        assert_eq!(t, Target::Leave);
        assert!(
            why.contains("eth1") && why.contains("zstack.io/owner"),
            "{why}"
        );
    }

    #[test]
    fn a_failure_keeps_the_kernel_port_with_its_reason() {
        let (t, why) = target(
            &plan("auto"),
            Datapath::Afxdp,
            &port(true, Some("Operation not supported")),
        );
        assert_eq!(t, Target::Kernel);
        assert!(
            why.contains("Operation not supported") && why.contains("eth1"),
            "{why}"
        );
    }

    #[test]
    fn a_dpdk_uplink_needs_the_dpdk_datapath_and_a_device_that_passed_its_checks() {
        let ok = Ok(NicFacts {
            device: super::super::dpdk_nic::Device::Vdev {
                driver: "net_af_packet".into(),
            },
            driver: None,
            iommu_group: None,
            numa: None,
        });
        let with = |nic| PortFacts {
            nic: Some(nic),
            ..port(true, None)
        };
        let (t, why) = target(&plan("dpdk"), Datapath::Dpdk, &with(&ok));
        assert_eq!(
            t,
            Target::Dpdk {
                devargs: "net_af_packet0,iface=eth1".into()
            }
        );
        assert!(why.contains("net_af_packet0"), "{why}");
        let (t, why) = target(&plan("dpdk"), Datapath::Afxdp, &with(&ok));
        assert_eq!(t, Target::Leave);
        assert!(
            why.contains("needs the dpdk datapath") && why.contains("afxdp"),
            "{why}"
        );
        let bad = Err(NicRefusal::KernelDriver {
            addr: "0000:03:00.0".into(),
            driver: "ixgbe".into(),
        });
        let (t, why) = target(&plan("dpdk"), Datapath::Dpdk, &with(&bad));
        assert_eq!(t, Target::Leave);
        assert!(why.contains("refused") && why.contains("ixgbe"), "{why}");
        let failed = PortFacts {
            failed: Some("could not attach"),
            ..with(&ok)
        };
        let (t, why) = target(&plan("dpdk"), Datapath::Dpdk, &failed);
        assert_eq!(t, Target::Kernel);
        assert!(why.contains("did not open as DPDK"), "{why}");
    }

    #[test]
    fn rx_queues_counts_the_devices_receive_queues() {
        let d = tempfile::tempdir().expect("tmp");
        for q in ["rx-0", "rx-1", "rx-2", "tx-0"] {
            std::fs::create_dir_all(d.path().join("eth1/queues").join(q)).expect("mkdir");
        }
        assert_eq!(rx_queues(d.path(), "eth1"), 3);
        assert_eq!(rx_queues(d.path(), "nosuch"), 1);
    }
}
