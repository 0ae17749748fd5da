//! The vhost-user attachment, for KubeVirt VMs and DPDK pods: ADD, CHECK, removal and
//! restore of one interface (DEL, GC and the OVS reconcile over every kind are
//! [`super`]'s).
//!
//! A pod asks for one through its network config (`interfaceType: vhost-user`, from a
//! NetworkAttachmentDefinition) or the [`vhost::config::ANNOTATION`] annotation (see
//! [`vhost::config`]). Instead of a veth, the agent
//! - creates the socket directory ([`vhost::SocketLayout`]: stable per namespace + VMI/owner +
//!   ifname, under the short root [`VhostPorts::root`], owner/mode for QEMU) and, when asked,
//!   bind-mounts it onto the pod's `emptyDir`;
//! - adds an OVS `dpdkvhostuserclient` Interface (OVS is the client, the workload the
//!   server, so an ovs-vswitchd restart reconnects) with `options:vhost-server-path`,
//!   `mtu_request` and the same `external_ids` as a veth port (`iface-id` = the pod's LSP);
//! - waits for ovn-controller's `ovn-installed`, writes the device-info file when the
//!   runtime passes `runtimeConfig.CNIDeviceInfoFile`, and answers with a CNI result whose
//!   pod interface carries `socketPath` and the pod's addresses (for the guest to use).
//!
//! Records live in `<root>/.records/` ([`crate::attach::vhost_state`]; host only: the
//! per-interface directories are what pods see). DEL removes the port, the mount, the directory, the device-info file and the
//! record. A restarted agent re-adds missing ports and keeps live sockets; records whose
//! netns is gone are removed.
//!
//! Refusals: a node whose OVS is not DPDK-initialised, no free hugepages, a socket path over
//! the `sun_path` limit, a bad config, a path held by another live sandbox.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cni::error::code;
use cni::{CniError, CniResult, NetConf, Request};
use vhost::config::{DEFAULT_KUBELET_DIR, owner_name};
use vhost::device_info::device_info_file;
use vhost::layout::kubelet_volume_dir;
use vhost::{DeviceInfo, SocketLayout, VhostUserConfig};

use super::common::{PodAddrs, cni_result, pod_port_spec};
use super::errors::ErrorList;
use crate::attach::node::NodeCtx;
use crate::attach::state::{SandboxRecord, sandbox_key};
pub use crate::attach::vhost_state::{VHOST_DIR_ENV, VhostPorts, VhostRecord};
use crate::ovs::{NodeOvs, PortSpec};
use crate::source::PodInfo;

/// OVS Interface type: OVS connects to the workload's socket.
pub const IFACE_TYPE: &str = "dpdkvhostuserclient";
/// Interface `external_ids` keys: the host socket path; the queue pairs requested.
pub use api::external_ids::ovs::{VHOST_QUEUES as QUEUES_KEY, VHOST_SOCKET as SOCKET_KEY};

/// The OVS port of a vhost-user interface: the veth port's external ids plus the type,
/// the socket path, `mtu_request` and our vhost keys.
pub fn port_spec(r: &VhostRecord, socket: &Path) -> PortSpec {
    let mut spec = pod_port_spec(&r.sandbox);
    spec.iface_external_ids
        .insert("iface-id".into(), r.iface_id());
    spec.iface_type = IFACE_TYPE.to_string();
    spec.options = BTreeMap::from([(
        "vhost-server-path".to_string(),
        socket.display().to_string(),
    )]);
    spec.mtu_request = Some(i64::from(r.sandbox.mtu));
    spec.iface_external_ids
        .insert(SOCKET_KEY.into(), socket.display().to_string());
    spec.iface_external_ids
        .insert(QUEUES_KEY.into(), r.config.queues.to_string());
    spec
}

fn refused(msg: impl Into<String>) -> CniError {
    CniError::new(code::AGENT_REFUSED, msg)
}

fn io_failure(msg: impl Into<String>) -> CniError {
    CniError::new(code::IO_FAILURE, msg)
}

/// The vhost-user request of an ADD, if any (bad config: a CNI error 7).
pub fn requested(conf: &NetConf, pod: &PodInfo) -> Result<Option<VhostUserConfig>, CniError> {
    VhostUserConfig::requested(&conf.extra, &pod.annotations).map_err(|e| {
        CniError::new(
            code::INVALID_CONFIG,
            format!("pod {}: vhost-user: {e}", pod.key()),
        )
    })
}

/// Why this node refuses a vhost-user interface (the CNI error's message, after the pod's
/// name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VhostRefusal {
    #[error(
        "this node is not on a DPDK datapath (Open_vSwitch dpdk_initialized is not true): \
         vhost-user interfaces need OVS-DPDK; schedule the pod on a DPDK node"
    )]
    NotDpdk,
    #[error("ovs-vswitchd does not offer interface type {IFACE_TYPE} (iface_types: {offered})")]
    NoVhostType { offered: String },
    #[error(
        "hugepages exhausted on this node (HugePages_Free 0 of {total}): the vhost-user \
         workload needs shared hugepage memory"
    )]
    HugepagesExhausted { total: u64 },
    #[error("no hugepage information in /proc/meminfo")]
    NoHugepageInfo,
    #[error(
        "check failed: OVS interface {port} negotiated {negotiated} queue pair(s) (status \
         num_of_vrings {vrings}), the request asks for {requested}: the workload \
         (QEMU/testpmd) must open {requested} queue pair(s)"
    )]
    QueueMismatch {
        port: String,
        negotiated: u32,
        vrings: String,
        requested: u32,
    },
    #[error(
        "vhostUser.socketDir {} is outside the agent's socket root {}: a \
         NetworkAttachmentDefinition may only name a directory at or below it",
        dir.display(),
        root.display()
    )]
    SocketDirOutsideRoot { dir: PathBuf, root: PathBuf },
    #[error(
        "vhostUser.kubeletDir {} is not kubelet's directory the agent serves ({DEFAULT_KUBELET_DIR})",
        dir.display()
    )]
    KubeletDirNotServed { dir: PathBuf },
}

/// Whether this node's OVS runs DPDK with vhost-user support (the replica's
/// `Open_vSwitch` row: what a vhost-user port needs, whatever the agent decided for veth
/// pods; a refusal quotes that decision, see [`crate::datapath`]).
pub fn dpdk_ready(ovs: &dyn NodeOvs) -> Result<(), VhostRefusal> {
    let facts = ovs
        .open_vswitch()
        .map(|r| crate::datapath::probe::OvsFacts::of(&r))
        .unwrap_or_default();
    let (init, types) = (facts.dpdk_initialized, facts.iface_types);
    if !init {
        return Err(VhostRefusal::NotDpdk);
    }
    if !types.contains(IFACE_TYPE) {
        return Err(VhostRefusal::NoVhostType {
            offered: types.into_iter().collect::<Vec<_>>().join(","),
        });
    }
    Ok(())
}

/// `(HugePages_Total, HugePages_Free)` of a `/proc/meminfo` text.
pub fn hugepages_of(meminfo: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        meminfo.lines().find_map(|l| {
            l.strip_prefix(name)?
                .trim_start_matches(':')
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    Some((field("HugePages_Total")?, field("HugePages_Free")?))
}

/// A vhost-user workload maps its memory from shared hugepages: refuse when none are free.
pub fn hugepages_check(meminfo: &str) -> Result<(), VhostRefusal> {
    match hugepages_of(meminfo) {
        Some((total, 0)) => Err(VhostRefusal::HugepagesExhausted { total }),
        Some(_) => Ok(()),
        None => Err(VhostRefusal::NoHugepageInfo),
    }
}

/// CNI ADD of a vhost-user interface (under the sandbox lock);
/// `network`: the NAD of a secondary network (see [`VhostRecord::network`]).
#[allow(clippy::too_many_arguments)]
pub async fn add(
    ctx: &NodeCtx,
    req: &Request,
    conf: &NetConf,
    pod: &PodInfo,
    addrs: PodAddrs,
    cfg: VhostUserConfig,
    network: Option<String>,
    wait: Duration,
    phases: &mut super::phases::AddPhases,
) -> Result<CniResult, CniError> {
    let key = pod.key();
    phases.kind = "vhost";
    phases.datapath = crate::datapath::Datapath::Dpdk.to_string();
    // what the request itself gets wrong first, then what the node lacks
    let owner = owner_name(&pod.name, &pod.annotations).to_string();
    confine(&cfg, ctx.vhost().root()).map_err(|e| refused(format!("pod {key}: {e}")))?;
    let root = cfg
        .socket_root
        .clone()
        .unwrap_or_else(|| ctx.vhost().root().to_path_buf());
    let layout = SocketLayout::new(
        &root,
        &pod.namespace,
        &owner,
        &req.ifname,
        cfg.pod_socket_dir.as_deref(),
    )
    .map_err(|e| refused(format!("pod {key}: {e}")))?;

    dpdk_ready(ctx.ovs()).map_err(|e| {
        let st = ctx.datapath().status();
        refused(format!(
            "pod {key}: {e} (the agent's datapath decision: {} — {})",
            st.datapath, st.reason
        ))
    })?;
    let meminfo = ctx.plumbing().meminfo();
    hugepages_check(&meminfo).map_err(|e| refused(format!("pod {key}: {e}")))?;

    // the path is stable per interface: a previous sandbox of the same VM may still hold it
    for other in ctx.vhost().all() {
        if other.key() == sandbox_key(&req.container_id, &req.ifname)
            || other.layout().ok().map(|l| l.socket) != Some(layout.socket.clone())
        {
            continue;
        }
        if ctx.plumbing().netns_exists(&other.sandbox.netns) {
            return Err(CniError::new(
                code::TRY_AGAIN_LATER,
                format!(
                    "pod {key}: vhost-user socket {} is still held by sandbox {} of pod {}/{} \
                     (a previous instance of the same VM?); retry once it is deleted",
                    layout.socket.display(),
                    other.sandbox.container_id,
                    other.sandbox.pod_namespace,
                    other.sandbox.pod_name
                ),
            ));
        }
        tracing::info!(stale = %other.key(), socket = %layout.socket.display(), "taking over the socket of a sandbox whose netns is gone");
        remove_record(ctx, &other, false).await?;
    }

    let mac = api::mac::format_bytes(&addrs.mac);
    let volume_target = match &cfg.socket_volume {
        None => None,
        Some(vol) => {
            let uid = req.args.pod_uid.as_deref().unwrap_or("");
            let kubelet = cfg
                .kubelet_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_KUBELET_DIR));
            Some(
                kubelet_volume_dir(&kubelet, uid, vol)
                    .map_err(|e| refused(format!("pod {key}: socketVolume {vol}: {e}")))?,
            )
        }
    };
    let rec = VhostRecord {
        sandbox: SandboxRecord {
            container_id: req.container_id.clone(),
            ifname: req.ifname.clone(),
            pod_namespace: pod.namespace.clone(),
            pod_name: pod.name.clone(),
            netns: PathBuf::from(&req.netns),
            host_ifname: layout.port_name.clone(),
            mac,
            addresses: addrs.addresses,
            gateways: addrs.gateways,
            routes: addrs.routes,
            mtu: conf.mtu.unwrap_or(ctx.mtu()),
            datapath: Some(crate::datapath::Datapath::Dpdk),
            datapath_reason: Some("vhost-user interface".into()),
            afxdp: None,
            promote_to: None,
        },
        config: cfg,
        owner,
        root,
        volume_target,
        device_info_file: device_info_file(conf.runtime_config.as_ref()).map(PathBuf::from),
        network,
    };
    ctx.vhost()
        .put(&rec)
        .map_err(|e| io_failure(format!("pod {key}: persist vhost record: {e}")))?;
    prepare_dir(ctx, &rec, &layout, true).await?;
    phases.lap("plumb");

    ctx.ovs()
        .ensure_port(&port_spec(&rec, &layout.socket))
        .await
        .map_err(|e| CniError::new(code::TRY_AGAIN_LATER, format!("pod {key}: OVS port: {e}")))?;
    phases.lap("ovs");
    if let Err(e) = ctx
        .ovs()
        .wait_installed(&layout.port_name, &rec.iface_id(), wait)
        .await
    {
        // ovs-vswitchd's reason (a mempool that could not be allocated, ...) says more
        let why = ctx
            .ovs()
            .interface(&layout.port_name)
            .and_then(|i| i.error)
            .map(|err| format!(" (ovs-vswitchd: {err})"))
            .unwrap_or_default();
        return Err(CniError::new(
            code::PORT_NOT_READY,
            format!("pod {key}: {e}{why}"),
        ));
    }
    phases.lap("installed");
    let info = DeviceInfo::server(layout.device_path());
    if let Some(f) = &rec.device_info_file {
        info.write_file(f).map_err(|e| {
            io_failure(format!("pod {key}: write device-info {}: {e}", f.display()))
        })?;
    }
    tracing::info!(pod = %key, port = %layout.port_name, socket = %layout.socket.display(),
        queues = rec.config.queues, "vhost-user interface ready");
    Ok(result(&rec, &layout))
}

/// The CNI result: the veth-shaped result with the pod interface's `socketPath` (the
/// workload's view of the socket).
pub fn result(rec: &VhostRecord, layout: &SocketLayout) -> CniResult {
    let mut r = cni_result(&rec.sandbox, None);
    if let Some(pod_if) = r.interfaces.iter_mut().find(|i| i.sandbox.is_some()) {
        pod_if.socket_path = Some(layout.device_path().display().to_string());
    }
    r
}

async fn prepare_dir(
    ctx: &NodeCtx,
    rec: &VhostRecord,
    layout: &SocketLayout,
    clear_stale: bool,
) -> Result<(), CniError> {
    ctx.plumbing()
        .prepare_socket_dir(
            layout.clone(),
            rec.config.clone(),
            clear_stale,
            rec.volume_target.clone(),
        )
        .await
        .map_err(|e| io_failure(format!("sandbox {}: vhost-user socket dir: {e}", rec.key())))
}

/// Removes everything of one record: OVS port, mount, socket dir (unless `keep_dir`: the
/// directory is being taken over), device-info file, then the record. Every step runs
/// even when an earlier one failed, and every failure is reported; the record stays when
/// one did, so a retry (DEL, GC, restore) finds it and tries again.
pub async fn remove_record(
    ctx: &NodeCtx,
    rec: &VhostRecord,
    keep_dir: bool,
) -> Result<(), CniError> {
    let key = rec.key();
    let mut errors = ErrorList::default();
    if let Err(e) = ctx.ovs().delete_port(&rec.sandbox.host_ifname).await {
        errors.push(CniError::new(
            code::TRY_AGAIN_LATER,
            format!("sandbox {key}: remove OVS port: {e}"),
        ));
    }
    if let Ok(layout) = rec.layout() {
        let r = ctx
            .plumbing()
            .remove_socket_dir(layout, rec.volume_target.clone(), keep_dir)
            .await
            .map_err(|e| io_failure(format!("sandbox {key}: {e}")));
        errors.record(r);
    }
    if let Some(f) = &rec.device_info_file {
        match std::fs::remove_file(f) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                errors.push(io_failure(format!(
                    "sandbox {key}: remove device-info {}: {e}",
                    f.display()
                )));
            }
            _ => {}
        }
    }
    if errors.is_empty() {
        let r = ctx
            .vhost()
            .remove(&key)
            .map_err(|e| io_failure(format!("sandbox {key}: remove vhost record: {e}")));
        errors.record(r);
    }
    errors.into_result()?;
    tracing::info!(sandbox = %key, port = %rec.sandbox.host_ifname, "vhost-user interface removed");
    Ok(())
}

/// The queue pairs the workload negotiated on a connected port, from its Interface
/// `status` (ovs-vswitchd's `num_of_vrings`: one rx and one tx ring per pair); `None`
/// while no workload is connected.
pub fn negotiated_queues(status: &BTreeMap<String, String>) -> Option<u32> {
    if status.get("status").map(String::as_str) != Some("connected") {
        return None;
    }
    let rings: u32 = status.get("num_of_vrings")?.parse().ok()?;
    Some(rings / 2)
}

/// Compares the negotiated queue pairs with the request (CHECK).
pub fn check_queues(
    port: &str,
    requested: u32,
    status: &BTreeMap<String, String>,
) -> Result<(), VhostRefusal> {
    match negotiated_queues(status) {
        Some(n) if n != requested => Err(VhostRefusal::QueueMismatch {
            port: port.to_string(),
            negotiated: n,
            vrings: status
                .get("num_of_vrings")
                .map_or("?", String::as_str)
                .to_string(),
            requested,
        }),
        _ => Ok(()),
    }
}

/// CNI CHECK of a vhost-user interface: the OVS port (type, socket path, LSP binding), the
/// socket directory, and the queue pairs the connected workload negotiated.
pub async fn check(ctx: &NodeCtx, rec: &VhostRecord) -> Result<(), CniError> {
    check_port(ctx, rec)?;
    let port = &rec.sandbox.host_ifname;
    let status = ctx
        .ovs()
        .interface_status(port)
        .await
        .map_err(|e| refused(format!("check failed: {e}")))?;
    check_queues(port, u32::from(rec.config.queues), &status).map_err(|e| refused(e.to_string()))
}

fn check_port(ctx: &NodeCtx, rec: &VhostRecord) -> Result<(), CniError> {
    let layout = rec
        .layout()
        .map_err(|e| refused(format!("check failed: {e}")))?;
    let iface = ctx.ovs().interface(&layout.port_name).ok_or_else(|| {
        refused(format!(
            "check failed: OVS port {} is missing",
            layout.port_name
        ))
    })?;
    let want = port_spec(rec, &layout.socket);
    let have_path = iface.options.get("vhost-server-path").cloned();
    let want_path = want.options.get("vhost-server-path").cloned();
    if iface.iface_type != IFACE_TYPE || have_path != want_path {
        return Err(refused(format!(
            "check failed: OVS interface {} is type {:?} with vhost-server-path {:?}, expected \
             {IFACE_TYPE} with {:?}",
            layout.port_name, iface.iface_type, have_path, want_path
        )));
    }
    for k in ["iface-id", "attached_mac"] {
        if iface.external_ids.get(k) != want.iface_external_ids.get(k) {
            return Err(refused(format!(
                "check failed: OVS interface {} external_ids:{k} is {:?}, expected {:?}",
                layout.port_name,
                iface.external_ids.get(k),
                want.iface_external_ids.get(k)
            )));
        }
    }
    if !ctx.plumbing().dir_exists(&layout.dir) {
        return Err(refused(format!(
            "check failed: socket directory {} is missing",
            layout.dir.display()
        )));
    }
    Ok(())
}

/// Brings one record back after an agent start (its netns exists): re-creates the socket
/// directory if missing (keeping a live socket) and re-adds the OVS port.
pub async fn restore(ctx: &NodeCtx, rec: &VhostRecord) -> Result<(), CniError> {
    let layout = rec
        .layout()
        .map_err(|e| refused(format!("sandbox {}: vhost record unusable: {e}", rec.key())))?;
    let mut errors = ErrorList::default();
    errors.record(prepare_dir(ctx, rec, &layout, false).await);
    errors.record(readd_port(ctx, rec).await);
    errors.into_result()
}

/// Adds the record's OVS port (again).
pub async fn readd_port(ctx: &NodeCtx, rec: &VhostRecord) -> Result<(), CniError> {
    let layout = rec
        .layout()
        .map_err(|e| refused(format!("sandbox {}: vhost record unusable: {e}", rec.key())))?;
    ctx.ovs()
        .ensure_port(&port_spec(rec, &layout.socket))
        .await
        .map_err(|e| {
            CniError::new(
                code::TRY_AGAIN_LATER,
                format!("sandbox {}: re-add vhost-user port: {e}", rec.key()),
            )
        })
}

/// The host paths a NetworkAttachmentDefinition may name, which anyone who may write NADs
/// in a namespace controls: `socketDir` at or below the agent's socket root (`root`),
/// `kubeletDir` only kubelet's directory the agent serves ([`DEFAULT_KUBELET_DIR`]: the
/// chart mounts `/var/lib/kubelet/pods`). The privileged agent creates, chowns and
/// bind-mounts there.
pub(crate) fn confine(cfg: &VhostUserConfig, root: &Path) -> Result<(), VhostRefusal> {
    if let Some(dir) = &cfg.socket_root
        && !dir.starts_with(root)
    {
        return Err(VhostRefusal::SocketDirOutsideRoot {
            dir: dir.clone(),
            root: root.to_path_buf(),
        });
    }
    if let Some(dir) = &cfg.kubelet_dir
        && dir != Path::new(DEFAULT_KUBELET_DIR)
    {
        return Err(VhostRefusal::KubeletDirNotServed { dir: dir.clone() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nad_host_paths_are_confined_to_the_agents_roots() {
        let root = Path::new("/var/run/zstack-ovn/vhost");
        let cfg = |socket: Option<&str>, kubelet: Option<&str>| VhostUserConfig {
            socket_root: socket.map(PathBuf::from),
            kubelet_dir: kubelet.map(PathBuf::from),
            ..Default::default()
        };
        for ok in [
            cfg(None, None),
            cfg(Some("/var/run/zstack-ovn/vhost"), None),
            cfg(
                Some("/var/run/zstack-ovn/vhost/team-a"),
                Some("/var/lib/kubelet"),
            ),
        ] {
            assert_eq!(confine(&ok, root), Ok(()), "{ok:?}");
        }
        for (bad, why) in [
            (cfg(Some("/etc"), None), "outside the agent's socket root"),
            (
                cfg(Some("/var/run/zstack-ovn/vhost2"), None),
                "outside the agent's socket root",
            ),
            (
                cfg(None, Some("/etc/kubernetes")),
                "not kubelet's directory",
            ),
        ] {
            let e = confine(&bad, root).expect_err("refused").to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    fn rec(root: &Path) -> VhostRecord {
        VhostRecord {
            sandbox: SandboxRecord {
                container_id: "c1".into(),
                ifname: "eth0".into(),
                pod_namespace: "vms".into(),
                pod_name: "virt-launcher-vm1-x7".into(),
                netns: "/var/run/netns/x".into(),
                host_ifname: "vhu0123".into(),
                mac: "0a:58:0a:10:00:05".into(),
                addresses: vec!["10.16.0.5/16".parse().expect("net")],
                gateways: vec!["10.16.0.1".parse().expect("ip")],
                routes: vec![],
                mtu: 1400,
                datapath: None,
                datapath_reason: None,
                afxdp: None,
                promote_to: None,
            },
            config: VhostUserConfig {
                queues: 2,
                ..Default::default()
            },
            owner: "vm1".into(),
            root: root.to_path_buf(),
            volume_target: None,
            device_info_file: None,
            network: None,
        }
    }

    #[test]
    fn port_spec_is_a_bound_vhost_client() {
        let r = rec(Path::new("/run/v"));
        let l = r.layout().expect("layout");
        let s = port_spec(&r, &l.socket);
        assert_eq!(s.iface_type, "dpdkvhostuserclient");
        assert_eq!(
            s.options.get("vhost-server-path").map(String::as_str),
            Some(l.socket.to_str().expect("utf8"))
        );
        assert_eq!(s.mtu_request, Some(1400));
        assert_eq!(
            s.iface_external_ids.get("iface-id").map(String::as_str),
            Some("vms_virt-launcher-vm1-x7")
        );
        assert_eq!(
            s.iface_external_ids.get(QUEUES_KEY).map(String::as_str),
            Some("2")
        );
        let res = result(&r, &l);
        let pod_if = res
            .interfaces
            .iter()
            .find(|i| i.sandbox.is_some())
            .expect("pod if");
        assert_eq!(pod_if.socket_path.as_deref(), l.socket.to_str());
        assert_eq!(res.ips.len(), 1);
    }

    #[test]
    fn records_persist() {
        let d = tempfile::tempdir().expect("dir");
        let v = VhostPorts::open(d.path().to_path_buf());
        let r = rec(d.path());
        v.put(&r).expect("put");
        std::fs::write(d.path().join(".records").join("junk.json"), b"{").expect("junk");
        let again = VhostPorts::open(d.path().to_path_buf());
        assert_eq!(again.all(), vec![r.clone()]);
        again.remove(&r.key()).expect("remove");
        again.remove(&r.key()).expect("remove twice");
        assert!(
            VhostPorts::open(d.path().to_path_buf())
                .get("c1", "eth0")
                .is_none()
        );
    }

    #[test]
    fn queues_are_checked_on_a_connected_port() {
        let st = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let two = st(&[("status", "connected"), ("num_of_vrings", "4")]);
        assert_eq!(negotiated_queues(&two), Some(2));
        assert!(check_queues("vhu1", 2, &two).is_ok());
        let e = check_queues("vhu1", 1, &two)
            .expect_err("mismatch")
            .to_string();
        assert!(
            e.contains("negotiated 2 queue pair(s)") && e.contains("asks for 1"),
            "{e}"
        );
        let idle = st(&[("status", "disconnected"), ("mode", "client")]);
        assert_eq!(negotiated_queues(&idle), None);
        assert!(
            check_queues("vhu1", 4, &idle).is_ok(),
            "nothing to compare yet"
        );
    }

    #[test]
    fn secondary_port_binds_to_the_network_lsp() {
        let mut r = rec(Path::new("/run/v"));
        r.sandbox.ifname = "net1".into();
        r.network = Some("vms/vhost-net".into());
        let l = r.layout().expect("layout");
        let s = port_spec(&r, &l.socket);
        assert_eq!(
            s.iface_external_ids.get("iface-id").map(String::as_str),
            Some("vms_virt-launcher-vm1-x7_vms.vhost-net")
        );
        assert!(l.socket.ends_with("net1.sock"), "{}", l.socket.display());
        let eth0 = rec(Path::new("/run/v")).layout().expect("layout");
        assert_ne!(l.dir, eth0.dir, "a directory per interface");
        assert_ne!(l.port_name, eth0.port_name);
    }

    #[test]
    fn hugepages_refusal() {
        let mem = "MemTotal: 1 kB\nHugePages_Total:     512\nHugePages_Free:        0\n";
        assert_eq!(hugepages_of(mem), Some((512, 0)));
        let e = hugepages_check(mem).expect_err("exhausted").to_string();
        assert!(
            e.contains("hugepages exhausted") && e.contains("0 of 512"),
            "{e}"
        );
        assert!(hugepages_check("HugePages_Total: 4\nHugePages_Free: 3\n").is_ok());
        assert!(hugepages_check("").is_err());
    }
}
