//! Multus secondary networks on the node ([`api::multus`]): an ADD whose `CNI_IFNAME`
//! is not `eth0` and that the pod's `k8s.v1.cni.cncf.io/networks` names (`net1`, … or
//! the entry's `interface`).
//!
//! The agent waits for the controller's entry `<nad-ns>/<nad-name>` in
//! `k8s.ovn.org/pod-networks` (or its reason in `network.zstack.io/network-errors`), then
//! creates a vhost-user interface ([`super::vhost`]) bound to the pod's LSP on that
//! network. Only vhost-user is supported on secondary networks: any other request is
//! refused. The interface carries no default route (the primary network keeps it).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::multus::{NetworkSelection, selection_for};
use api::pod_networks::{POD_NETWORKS, PodNetwork, decode_network};
use cni::error::code;
use cni::{CniError, CniResult, NetConf, Request};
use vhost::VhostUserConfig;

use super::common::network_addrs;
use crate::attach::node::NodeCtx;
use crate::source::PodInfo;

/// The pod's primary interface.
pub const PRIMARY_IFNAME: &str = "eth0";

/// Whether `ifname` may be a secondary interface.
pub fn is_secondary_ifname(ifname: &str) -> bool {
    ifname != PRIMARY_IFNAME
}

fn refused(msg: impl Into<String>) -> CniError {
    CniError::new(code::AGENT_REFUSED, msg)
}

/// The network selection this ADD serves, when its ifname is a secondary network the pod
/// names (`None`: the primary path handles it).
pub async fn selection(
    ctx: &NodeCtx,
    req: &Request,
    ns: &str,
    name: &str,
) -> Result<Option<NetworkSelection>, CniError> {
    if !is_secondary_ifname(&req.ifname) {
        return Ok(None);
    }
    let pod = ctx
        .pods()
        .pod(ns, name)
        .await
        .map_err(|e| CniError::new(code::TRY_AGAIN_LATER, format!("pod {ns}/{name}: {e}")))?;
    let Some(pod) = pod else {
        return Ok(None);
    };
    selection_for(ns, &pod.annotations, &req.ifname)
        .map_err(|e| CniError::new(code::INVALID_CONFIG, format!("pod {ns}/{name}: {e}")))
}

/// The pod's entry for network `nad` in `k8s.ovn.org/pod-networks`.
pub fn network_entry(pod: &PodInfo, nad: &str) -> Option<PodNetwork> {
    decode_network(pod.annotation(POD_NETWORKS)?, nad)
        .ok()
        .flatten()
}

/// Why the controller does not serve network `nad` for the pod.
pub fn network_error(pod: &PodInfo, nad: &str) -> Option<String> {
    api::multus::network_error(&pod.annotations, nad)
}

/// CNI ADD of a secondary interface (under the sandbox lock).
pub async fn add(
    ctx: &NodeCtx,
    req: &Request,
    conf: &NetConf,
    sel: NetworkSelection,
    budget: Duration,
    start: Instant,
    phases: &mut super::phases::AddPhases,
) -> Result<CniResult, CniError> {
    let nad = sel.nad_key();
    let key = format!("{}/{}", sel_pod_ns(req), sel_pod_name(req));
    let ifname = &req.ifname;
    // what the request gets wrong first: only vhost-user is served here
    let cfg = VhostUserConfig::requested(&conf.extra, &BTreeMap::new()).map_err(|e| {
        CniError::new(
            code::INVALID_CONFIG,
            format!("pod {key}: network {nad}: vhost-user: {e}"),
        )
    })?;
    let Some(cfg) = cfg else {
        return Err(refused(format!(
            "pod {key}: network {nad} (interface {ifname}): only vhost-user interfaces are \
             supported on secondary networks; set \"interfaceType\": \"vhost-user\" in the \
             NetworkAttachmentDefinition's config"
        )));
    };
    let ready = |p: &PodInfo| network_entry(p, &nad).is_some() || network_error(p, &nad).is_some();
    let (ns, name) = (sel_pod_ns(req), sel_pod_name(req));
    let what = format!(
        "give pod {key} addresses on network {nad} (entry {nad:?} of {POD_NETWORKS}); is the \
         NetworkAttachmentDefinition there?"
    );
    let pod = ctx.wait_for_pod(&ns, &name, budget, &ready, &what).await?;
    let Some(entry) = network_entry(&pod, &nad) else {
        let why = network_error(&pod, &nad).unwrap_or_default();
        return Err(refused(format!("pod {key}: network {nad}: {why}")));
    };
    let mut addrs = network_addrs(&key, &entry)?;
    // the primary interface keeps the default route
    addrs.gateways.clear();
    addrs.routes.clear();
    phases.lap("annotation");
    let left = budget
        .saturating_sub(start.elapsed())
        .max(Duration::from_millis(200));
    super::vhost::add(ctx, req, conf, &pod, addrs, cfg, Some(nad), left, phases).await
}

fn sel_pod_ns(req: &Request) -> String {
    req.args.pod_namespace.clone().unwrap_or_default()
}

fn sel_pod_name(req: &Request) -> String {
    req.args.pod_name.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::multus::NETWORK_ERRORS;

    #[test]
    fn entries_and_errors_by_network() {
        let pod = PodInfo {
            namespace: "vms".into(),
            name: "p".into(),
            node_name: None,
            annotations: BTreeMap::from([
                (
                    POD_NETWORKS.to_string(),
                    r#"{"default":{"ip_addresses":["10.1.0.5/24"],"mac_address":"0a:58:0a:01:00:05"},
                        "vms/sec":{"ip_addresses":["10.77.0.5/16"],"mac_address":"0a:58:0a:4d:00:05"}}"#
                        .to_string(),
                ),
                (
                    NETWORK_ERRORS.to_string(),
                    r#"{"vms/bad":"no subnet"}"#.to_string(),
                ),
            ]),
        };
        let e = network_entry(&pod, "vms/sec").expect("entry");
        assert_eq!(e.ip_addresses, ["10.77.0.5/16"]);
        assert!(network_entry(&pod, "vms/bad").is_none());
        assert_eq!(network_error(&pod, "vms/bad").as_deref(), Some("no subnet"));
        assert!(network_error(&pod, "vms/sec").is_none());
        let a = network_addrs("vms/p", &e).expect("addrs");
        assert_eq!(a.mac, [0x0a, 0x58, 0x0a, 0x4d, 0, 5]);
        assert!(is_secondary_ifname("net1") && !is_secondary_ifname("eth0"));
    }
}
