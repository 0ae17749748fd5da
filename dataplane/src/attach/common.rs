//! What every attachment kind shares: the pod's addresses from `k8s.ovn.org/pod-networks`
//! ([`PodAddrs`]), the OVS port of a sandbox ([`pod_port_spec`]) and the CNI result
//! ([`cni_result`]).

use std::collections::BTreeMap;
use std::net::IpAddr;

use api::pod_networks::{POD_NETWORKS, PodNetwork, decode_pod_networks};
use cni::error::code;
use cni::{CniError, CniResult, Interface, IpConfig, Route};
use ipnet::IpNet;

use crate::attach::state::SandboxRecord;
use crate::datapath::report::{PORT_DATAPATH_KEY, PORT_PENDING_KEY, PORT_REASON_KEY};
use crate::ovs::{IFNAME_KEY, POD_KEY, PortSpec, SANDBOX_KEY};
use crate::source::PodInfo;

pub(crate) fn refused(msg: impl Into<String>) -> CniError {
    CniError::new(code::AGENT_REFUSED, msg)
}

/// The pod's addresses as the annotation gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAddrs {
    pub mac: [u8; 6],
    pub addresses: Vec<IpNet>,
    pub gateways: Vec<IpAddr>,
    pub routes: Vec<(IpNet, Option<IpAddr>)>,
}

/// Reads `k8s.ovn.org/pod-networks`; errors name the pod and what is wrong.
pub fn pod_addrs(pod: &PodInfo) -> Result<PodAddrs, CniError> {
    let key = pod.key();
    let raw = pod
        .annotation(POD_NETWORKS)
        .ok_or_else(|| refused(format!("pod {key} has no {POD_NETWORKS} annotation")))?;
    let pn = decode_pod_networks(raw).map_err(|e| refused(format!("pod {key}: {e}")))?;
    network_addrs(&key, &pn)
}

/// The addresses of one entry of `k8s.ovn.org/pod-networks` (of pod `key`), typed by the
/// contract's codec ([`PodNetwork::typed`]).
pub fn network_addrs(key: &str, pn: &PodNetwork) -> Result<PodAddrs, CniError> {
    let t = pn.typed().map_err(|e| refused(format!("pod {key}: {e}")))?;
    Ok(PodAddrs {
        mac: t.mac.octets(),
        addresses: t.ips,
        gateways: t.gateways,
        routes: t.routes,
    })
}

/// The OVS port of a sandbox.
pub fn pod_port_spec(r: &SandboxRecord) -> PortSpec {
    let ips: Vec<String> = r.addresses.iter().map(ToString::to_string).collect();
    let pod = format!("{}/{}", r.pod_namespace, r.pod_name);
    let mut iface = BTreeMap::from([
        ("iface-id".to_string(), r.iface_id()),
        ("attached_mac".to_string(), r.mac.clone()),
        ("ip_addresses".to_string(), ips.join(",")),
        ("sandbox".to_string(), r.container_id.clone()),
        (POD_KEY.to_string(), pod.clone()),
        (SANDBOX_KEY.to_string(), r.container_id.clone()),
        (IFNAME_KEY.to_string(), r.ifname.clone()),
    ]);
    if let Some(first) = ips.first() {
        iface.insert("ip_address".to_string(), first.clone());
    }
    let dp = r.datapath.unwrap_or(crate::datapath::Datapath::Kernel);
    iface.insert(PORT_DATAPATH_KEY.to_string(), dp.to_string());
    if let Some(why) = &r.datapath_reason {
        iface.insert(PORT_REASON_KEY.to_string(), why.clone());
    }
    if let Some(next) = r.promote_to {
        iface.insert(PORT_PENDING_KEY.to_string(), next.to_string());
    }
    let (iface_type, options, other_config) = match (&r.afxdp, dp) {
        (Some(a), crate::datapath::Datapath::Afxdp) => (
            "afxdp".to_string(),
            BTreeMap::from([
                ("xdp-mode".to_string(), a.mode.clone()),
                ("n_rxq".to_string(), a.queues.to_string()),
            ]),
            a.rxq_affinity
                .iter()
                .map(|x| ("pmd-rxq-affinity".to_string(), x.clone()))
                .collect(),
        ),
        _ => (String::new(), BTreeMap::new(), BTreeMap::new()),
    };
    PortSpec {
        name: r.host_ifname.clone(),
        iface_type,
        options,
        other_config,
        mac: None,
        iface_external_ids: iface,
        port_external_ids: BTreeMap::from([
            (POD_KEY.to_string(), pod),
            (SANDBOX_KEY.to_string(), r.container_id.clone()),
            (IFNAME_KEY.to_string(), r.ifname.clone()),
        ]),
        ..PortSpec::new(r.host_ifname.clone())
    }
}

/// The CNI result for a sandbox.
pub fn cni_result(r: &SandboxRecord, host_mac: Option<String>) -> CniResult {
    let interfaces = vec![
        Interface {
            name: r.host_ifname.clone(),
            mac: host_mac,
            mtu: Some(r.mtu),
            ..Default::default()
        },
        Interface {
            name: r.ifname.clone(),
            mac: Some(r.mac.clone()),
            mtu: Some(r.mtu),
            sandbox: Some(r.netns.display().to_string()),
            ..Default::default()
        },
    ];
    let ips = r
        .addresses
        .iter()
        .map(|a| IpConfig {
            address: *a,
            gateway: r
                .gateways
                .iter()
                .find(|g| g.is_ipv4() == a.addr().is_ipv4())
                .copied(),
            interface: Some(1),
        })
        .collect();
    let mut routes: Vec<Route> = r
        .gateways
        .iter()
        .map(|g| {
            let any = if g.is_ipv4() { "0.0.0.0/0" } else { "::/0" };
            Route::new(any.parse().unwrap_or_default(), Some(*g))
        })
        .collect();
    routes.extend(r.routes.iter().map(|(d, v)| Route::new(*d, *v)));
    CniResult {
        interfaces,
        ips,
        routes,
        dns: Default::default(),
    }
}
