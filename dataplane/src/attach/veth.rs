//! The veth attachment: a veth pair into the pod's netns, its host end an OVS port of
//! type `""` (kernel path, AF_PACKET on the netdev br-int) or `afxdp` (the node's or the
//! pod's datapath choice, with the per-port AF_XDP → kernel fallback at attach).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cni::error::code;
use cni::{CniError, CniResult, NetConf, Request};

use super::common::{PodAddrs, cni_result, pod_port_spec, refused};
use super::errors::ErrorList;
use crate::agent::report::EventType;
use crate::attach::afxdp_budget;
use crate::attach::node::NodeCtx;
use crate::attach::pod_iface::{PodInterfaceSpec, host_ifname_for};
use crate::attach::state::SandboxRecord;
use crate::datapath::Datapath;
use crate::datapath::report::AFXDP_OPEN_WAIT;
use crate::ovs::{IFNAME_KEY, SANDBOX_KEY};
use crate::source::PodInfo;

/// CNI ADD of a veth for `pod` with `addrs` (under the sandbox lock; `budget` is what is
/// left of the request's time).
pub async fn add(
    ctx: &NodeCtx,
    req: &Request,
    conf: &NetConf,
    pod: &PodInfo,
    addrs: PodAddrs,
    budget: Duration,
    phases: &mut super::phases::AddPhases,
) -> Result<CniResult, CniError> {
    let start = Instant::now();
    let key = pod.key();
    let (ns, name) = (pod.namespace.as_str(), pod.name.as_str());
    // 2. the pod interface
    let decided_mtu = ctx.datapath().decision().and_then(|d| d.mtu);
    let mut rec = SandboxRecord {
        container_id: req.container_id.clone(),
        ifname: req.ifname.clone(),
        pod_namespace: ns.to_string(),
        pod_name: name.to_string(),
        netns: PathBuf::from(&req.netns),
        host_ifname: host_ifname_for(&req.container_id),
        mac: api::mac::format_bytes(&addrs.mac),
        addresses: addrs.addresses,
        gateways: addrs.gateways,
        routes: addrs.routes,
        mtu: conf.mtu.or(decided_mtu).unwrap_or(ctx.mtu()),
        datapath: None,
        datapath_reason: None,
        afxdp: None,
        promote_to: None,
    };
    // held until the ADD is over: by then the record counts for the budget
    let _claim = choose_port(ctx, &mut rec, &pod.annotations).await;
    fast_start(&mut rec);
    phases.datapath = rec.datapath.unwrap_or(Datapath::Kernel).to_string();
    if let Some(then) = rec.promote_to {
        phases.then = then.to_string();
    }
    plumb(ctx, &rec).await?;
    phases.lap("plumb");
    ctx.state().put_async(&rec).await.map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("persist state of sandbox {}: {e}", rec.key()),
        )
    })?;

    // 3. the OVS port, then ovn-controller's confirmation
    ctx.ovs()
        .ensure_port(&pod_port_spec(&rec))
        .await
        .map_err(|e| CniError::new(code::TRY_AGAIN_LATER, format!("pod {key}: OVS port: {e}")))?;
    phases.lap("ovs");
    if rec.datapath == Some(Datapath::Afxdp) {
        let changed = confirm_port(ctx, &mut rec).await;
        phases.lap("open");
        phases.datapath = rec.datapath.unwrap_or(Datapath::Kernel).to_string();
        if changed && let Err(e) = ctx.state().put_async(&rec).await {
            tracing::warn!(sandbox = %rec.key(), error = %e, "persisting the port's fallback failed");
        }
    }
    let left = budget
        .saturating_sub(start.elapsed())
        .max(Duration::from_millis(200));
    ctx.ovs()
        .wait_installed(&rec.host_ifname, &rec.iface_id(), left)
        .await
        .map_err(|e| CniError::new(code::PORT_NOT_READY, format!("pod {key}: {e}")))?;
    phases.lap("installed");
    if rec.promote_to.is_some() {
        ctx.promotions().queued(&rec.key());
    }
    report_budget(ctx);
    Ok(cni_result(&rec, None))
}

/// `afxdp.fastStart`: an AF_XDP port starts as a kernel port and moves later (see
/// [`super::promote`]); the veth keeps the AF_XDP queues and receive steering.
fn fast_start(rec: &mut SandboxRecord) {
    if rec.datapath == Some(Datapath::Afxdp) && rec.afxdp.as_ref().is_some_and(|a| a.fast_start) {
        rec.datapath = Some(Datapath::Kernel);
        rec.promote_to = Some(Datapath::Afxdp);
    }
}

/// Creates (or repairs) the pod's veth pair.
async fn plumb(ctx: &NodeCtx, rec: &SandboxRecord) -> Result<(), CniError> {
    let spec = rec
        .spec()
        .ok_or_else(|| refused(format!("bad MAC {}", rec.mac)))?;
    ctx.plumbing().setup(spec).await.map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!(
                "pod {}/{}: set up {} in {}: {e}",
                rec.pod_namespace,
                rec.pod_name,
                rec.ifname,
                rec.netns.display()
            ),
        )
    })
}

/// Removes every trace of a veth sandbox: our OVS ports for it, the host veth, then the
/// record. Every step runs even when an earlier one failed and every failure is
/// reported; the record stays when one did, so a retry finds it.
pub async fn remove(
    ctx: &NodeCtx,
    container_id: &str,
    ifname: &str,
    host_ifname: &str,
) -> Result<(), CniError> {
    let mut errors = ErrorList::default();
    for p in ctx.ovs().owned_ports() {
        let same_sandbox = p.external_ids.get(SANDBOX_KEY).map(String::as_str)
            == Some(container_id)
            && p.external_ids.get(IFNAME_KEY).is_none_or(|i| i == ifname);
        if (same_sandbox || p.name == host_ifname)
            && let Err(e) = ctx.ovs().delete_owned(&p).await
        {
            errors.push(CniError::new(
                code::TRY_AGAIN_LATER,
                format!("sandbox {container_id}: remove OVS port {}: {e}", p.name),
            ));
        }
    }
    if let Err(e) = ctx.plumbing().teardown(host_ifname.to_string()).await {
        errors.push(CniError::new(
            code::IO_FAILURE,
            format!("sandbox {container_id}: delete {host_ifname}: {e}"),
        ));
    }
    if errors.is_empty()
        && let Err(e) = ctx.state().remove(container_id, ifname)
    {
        errors.push(CniError::new(
            code::IO_FAILURE,
            format!("sandbox {container_id}: remove state: {e}"),
        ));
    }
    report_budget(ctx);
    errors.into_result()
}

/// CNI CHECK of a veth sandbox: the pod interface and the OVS port's binding.
pub async fn check(ctx: &NodeCtx, rec: &SandboxRecord, netns: &str) -> Result<(), CniError> {
    let spec = rec
        .spec()
        .ok_or_else(|| refused(format!("bad MAC {}", rec.mac)))?;
    let spec = PodInterfaceSpec {
        netns_path: if netns.is_empty() {
            spec.netns_path
        } else {
            PathBuf::from(netns)
        },
        ..spec
    };
    ctx.plumbing()
        .check(spec)
        .await
        .map_err(|e| refused(format!("check failed: {e}")))?;
    let ids = ctx
        .ovs()
        .interface(&rec.host_ifname)
        .map(|i| i.external_ids)
        .ok_or_else(|| {
            refused(format!(
                "check failed: OVS port {} is missing",
                rec.host_ifname
            ))
        })?;
    for (k, want) in [
        ("iface-id", rec.iface_id()),
        ("attached_mac", rec.mac.clone()),
    ] {
        let have = ids.get(k).cloned().unwrap_or_default();
        if have != want {
            return Err(refused(format!(
                "check failed: OVS interface {} external_ids:{k} is {have:?}, expected {want:?}",
                rec.host_ifname
            )));
        }
    }
    Ok(())
}

/// Brings a recorded sandbox back after an agent start (its netns exists): the veth, then
/// the OVS port.
pub async fn restore(ctx: &NodeCtx, rec: &SandboxRecord) -> Result<(), CniError> {
    plumb(ctx, rec).await?;
    readd_port(ctx, rec).await
}

/// Adds the sandbox's OVS port (again).
pub async fn readd_port(ctx: &NodeCtx, rec: &SandboxRecord) -> Result<(), CniError> {
    ctx.ovs()
        .ensure_port(&pod_port_spec(rec))
        .await
        .map_err(|e| {
            CniError::new(
                code::TRY_AGAIN_LATER,
                format!("sandbox {}: re-add OVS port: {e}", rec.key()),
            )
        })
}

/// Sets the record's datapath for a new veth port (node default or the pod's
/// request); a request the node cannot honour is reported on the pod. An AF_XDP port
/// is claimed within the node's budget (the claim is returned; hold it until the record
/// is stored); past the budget the port is a kernel one, and the pod is told why.
pub async fn choose_port<'a>(
    ctx: &'a NodeCtx,
    rec: &mut SandboxRecord,
    pod_annotations: &BTreeMap<String, String>,
) -> Option<afxdp_budget::Claim<'a>> {
    let mut c = ctx.datapath().port_choice(pod_annotations);
    let budget = ctx.datapath().decision().and_then(|d| d.afxdp.budget);
    let mut claim = None;
    if c.datapath == Datapath::Afxdp
        && let Some(b) = &budget
    {
        match ctx.afxdp_claims().claim(&rec.key(), b, &ctx.state().all()) {
            Ok(granted) => claim = Some(granted),
            Err(full) => {
                let detail = format!("{full}: the pod gets a kernel port");
                tracing::info!(pod = %format!("{}/{}", rec.pod_namespace, rec.pod_name), %detail, "AF_XDP budget");
                ctx.metrics().datapath_fallback("afxdp_budget");
                c.datapath = Datapath::Kernel;
                c.reason = format!("budget: {full}");
                ctx.pod_event(
                    &rec.pod_namespace,
                    &rec.pod_name,
                    EventType::Normal,
                    "AfxdpBudgetReached",
                    detail,
                )
                .await;
            }
        }
    }
    if let Some(w) = &c.warning {
        tracing::warn!(pod = %format!("{}/{}", rec.pod_namespace, rec.pod_name), warning = %w, "datapath request not honoured");
        ctx.pod_event(
            &rec.pod_namespace,
            &rec.pod_name,
            EventType::Warning,
            "DatapathRequestIgnored",
            w.clone(),
        )
        .await;
    }
    rec.datapath = Some(c.datapath);
    rec.datapath_reason = Some(c.reason);
    rec.afxdp = match c.datapath {
        Datapath::Afxdp => ctx.datapath().decision().map(|d| d.afxdp),
        _ => None,
    };
    claim
}

/// After the OVS port of `rec` was added: an AF_XDP port must open (ofport assigned)
/// within [`AFXDP_OPEN_WAIT`]; if ovs-vswitchd reports an error instead, the port is
/// switched to the kernel path in place, and that is reported (pod event, metric,
/// the port's `external_ids`). Returns whether the record changed.
pub async fn confirm_port(ctx: &NodeCtx, rec: &mut SandboxRecord) -> bool {
    if rec.datapath != Some(Datapath::Afxdp) {
        return false;
    }
    let opened = ctx
        .ovs()
        .wait_settled(&rec.host_ifname, AFXDP_OPEN_WAIT)
        .await;
    let iface = ctx.ovs().interface(&rec.host_ifname);
    let error = match (&iface, opened) {
        (Some(i), true) if i.error.is_none() => return false,
        (Some(i), _) => i
            .error
            .clone()
            .unwrap_or_else(|| format!("no ofport after {} s", AFXDP_OPEN_WAIT.as_secs())),
        (None, _) => "the interface vanished".into(),
    };
    let detail = format!(
        "AF_XDP port {} could not be opened ({error}): using the kernel path",
        rec.host_ifname
    );
    tracing::warn!(pod = %format!("{}/{}", rec.pod_namespace, rec.pod_name), %detail, "per-port datapath fallback");
    ctx.metrics().datapath_fallback("afxdp_port");
    rec.datapath = Some(Datapath::Kernel);
    rec.datapath_reason = Some(format!("fallback: {error}"));
    rec.afxdp = None;
    rec.promote_to = None;
    if let Err(e) = ctx.ovs().ensure_port(&pod_port_spec(rec)).await {
        tracing::warn!(error = %e, "switching the port to the kernel path failed");
    }
    ctx.pod_event(
        &rec.pod_namespace,
        &rec.pod_name,
        EventType::Warning,
        "DatapathFallback",
        detail,
    )
    .await;
    true
}

/// Sets the AF_XDP port gauges from the node's records and decision (see
/// [`afxdp_budget`]).
pub fn report_budget(ctx: &NodeCtx) {
    let max = ctx
        .datapath()
        .decision()
        .and_then(|d| d.afxdp.budget)
        .and_then(|b| b.max_ports);
    ctx.metrics()
        .set_afxdp_ports(afxdp_budget::in_use(&ctx.state().all()), max);
}
