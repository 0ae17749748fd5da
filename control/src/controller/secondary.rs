//! Secondary networks ([`crate::multus`]): addresses, switch ports and annotations of the
//! NADs of ours a pod names in `k8s.v1.cni.cncf.io/networks`.
//!
//! Each pass (after the primary assignment) works out, for every pod holding primary
//! addresses, which of its networks are ours and which Subnet each attaches to, asks IPAM
//! for addresses (idempotent; owner `<pod key>@<nad>`, or for a KubeVirt pod
//! `vm:<ns>/<vmi>@<nad>` so the VM keeps them across pods) and releases what is no longer
//! wanted. A network that cannot be served is reported in
//! [`NETWORK_ERRORS`](crate::multus::NETWORK_ERRORS) on the pod.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ovsdb::nb::LogicalSwitchPort;
use ovsdb::typed::Table;

use super::Controller;
use crate::annotation::{self, POD_NETWORKS};
use crate::desired::DesiredNb;
use crate::ipam::{annotations::pod_request, vm_key};
use crate::model::{PodAddresses, PodInfo, PodIpRequest};
use crate::multus::{self, NETWORK_ERRORS, NETWORK_SUBNETS, owner_key};
use crate::names;
use crate::source::Writer;
use crate::translate::pod::SUBNET;
use crate::translate::{self, ClusterConfig};

/// The secondary networks the controller serves: (pod key, NAD key) → addresses, and
/// pod key → (NAD key → why it is not served).
#[derive(Debug, Default)]
pub struct Secondary {
    pub held: BTreeMap<(String, String), PodAddresses>,
    pub errors: BTreeMap<String, BTreeMap<String, String>>,
}

impl Secondary {
    /// The secondary networks pod `key` holds, by NAD key.
    pub fn of(&self, key: &str) -> BTreeMap<String, PodAddresses> {
        self.held
            .range((key.to_string(), String::new())..)
            .take_while(|((p, _), _)| p == key)
            .map(|((_, n), a)| (n.clone(), a.clone()))
            .collect()
    }
}

/// The switch port of pod `pod` on network `nad_key`: the primary port's shape under its
/// own name, kind `pod-network`, with the NAD in [`names::NETWORK`].
pub fn network_port(
    cfg: &ClusterConfig,
    pod: &PodInfo,
    nad_key: &str,
    addrs: &PodAddresses,
) -> LogicalSwitchPort {
    let mut lsp = translate::pod::port(cfg, pod, addrs);
    lsp.name = names::network_port(&pod.lsp_name(), nad_key);
    lsp.external_ids.insert(
        names::KIND.into(),
        api::external_ids::kind::POD_NETWORK.into(),
    );
    lsp.external_ids
        .insert(names::NETWORK.into(), nad_key.to_string());
    lsp
}

fn ipam_owner(pod: &PodInfo, vmi: Option<&str>, nad_key: &str) -> String {
    match vmi {
        Some(v) => vm_key(&pod.namespace, &owner_key(v, nad_key)),
        None => owner_key(&pod.key(), nad_key),
    }
}

impl<W: Writer> Controller<W> {
    /// Claims the secondary addresses pods already carry (first pass only): from their
    /// annotations, else (a crash between the NB write and the annotation patch) from our
    /// `pod-network` switch ports.
    pub(super) fn restore_secondary(&mut self) {
        let pods: Vec<PodInfo> = self.state.pods.values().cloned().collect();
        let mut restored: BTreeSet<(String, String)> = BTreeSet::new();
        for pod in &pods {
            let (Some(nets), Some(subnets)) = (
                pod.annotations.get(POD_NETWORKS),
                pod.annotations.get(NETWORK_SUBNETS),
            ) else {
                continue;
            };
            let Ok(subnets) = serde_json::from_str::<BTreeMap<String, String>>(subnets) else {
                tracing::warn!(pod = %pod.key(), "unreadable {NETWORK_SUBNETS} annotation");
                continue;
            };
            let vmi = pod_request(pod).ok().and_then(|r| r.vm);
            for (nad, subnet) in subnets {
                let addrs = annotation::decode_network(nets, &nad)
                    .ok()
                    .flatten()
                    .and_then(|n| n.to_addresses(&subnet).ok());
                let Some(addrs) = addrs else { continue };
                let ips: Vec<IpAddr> = addrs.ips.iter().map(|n| n.addr()).collect();
                let owner = ipam_owner(pod, vmi.as_deref(), &nad);
                match self.addr.ipam.restore(&owner, &subnet, &ips, addrs.mac) {
                    Ok(()) => {
                        restored.insert((pod.key(), nad));
                    }
                    Err(e) => {
                        tracing::warn!(pod = %pod.key(), network = %nad, error = %e, "cannot restore secondary addresses")
                    }
                }
            }
        }
        let cluster = self.cfg.cluster_id.clone();
        let from_nb: Vec<(String, String, PodAddresses)> = self.rec.replica().read(|v| {
            v.rows(LogicalSwitchPort::TABLE)
                .filter(|r| r.map_get("external_ids", names::OWNER) == Some(cluster.as_str()))
                .filter(|r| {
                    r.map_get("external_ids", names::KIND)
                        == Some(api::external_ids::kind::POD_NETWORK)
                })
                .filter_map(|r| {
                    let pod = r.map_get("external_ids", names::OBJECT)?.to_string();
                    let nad = r.map_get("external_ids", names::NETWORK)?.to_string();
                    let subnet = r.map_get("external_ids", SUBNET)?.to_string();
                    let addresses: Vec<String> = r.get_as("addresses").ok()?;
                    let addrs =
                        super::parse_lsp_addresses(addresses.first()?, &subnet, &self.addr.served)?;
                    Some((pod, nad, addrs))
                })
                .collect()
        });
        for (key, nad, addrs) in from_nb {
            let Some(pod) = self.state.pods.get(&key) else {
                continue;
            };
            if restored.contains(&(key.clone(), nad.clone())) {
                continue;
            }
            let vmi = pod_request(pod).ok().and_then(|r| r.vm);
            let owner = ipam_owner(pod, vmi.as_deref(), &nad);
            let ips: Vec<IpAddr> = addrs.ips.iter().map(|n| n.addr()).collect();
            if let Err(e) = self
                .addr
                .ipam
                .restore(&owner, &addrs.subnet, &ips, addrs.mac)
            {
                tracing::warn!(pod = %key, network = %nad, error = %e, "cannot restore secondary addresses from the NB");
            }
        }
    }

    /// Releases secondary addresses in Subnets no longer served (before IPAM drops them).
    pub(super) fn release_unserved_secondary(&mut self) {
        let gone: Vec<(String, String)> = self
            .secondary
            .held
            .iter()
            .filter(|(_, a)| !self.addr.served.contains_key(&a.subnet))
            .map(|(k, _)| k.clone())
            .collect();
        for (pod, nad) in gone {
            self.release_secondary(&pod, &nad);
        }
    }

    fn release_secondary(&mut self, pod_key: &str, nad: &str) {
        self.secondary
            .held
            .remove(&(pod_key.to_string(), nad.to_string()));
        self.addr.ipam.release(&owner_key(pod_key, nad));
    }

    /// Assigns and releases secondary addresses (see the module docs). Returns how many
    /// networks were newly assigned.
    pub(super) fn sync_secondary(&mut self) -> usize {
        let mut want: BTreeMap<(String, String), (String, PodIpRequest)> = BTreeMap::new();
        let mut errors: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for key in &self.addr.assigned {
            let Some(pod) = self.state.pods.get(key) else {
                continue;
            };
            if pod.completed || pod.host_network {
                continue;
            }
            let mut errs = BTreeMap::new();
            let selections = match multus::selections(&pod.namespace, &pod.annotations) {
                Ok(s) => s,
                Err(e) => {
                    errs.insert(multus::NETWORKS_ANNOTATION.to_string(), e.to_string());
                    errors.insert(key.clone(), errs);
                    continue;
                }
            };
            let vmi = pod_request(pod).ok().and_then(|r| r.vm);
            for sel in selections {
                let nad_key = sel.nad_key();
                // a NAD not (yet) seen may be another plugin's: nothing to say
                let Some(nad) = self.state.nads.get(&nad_key).filter(|n| n.is_ours()) else {
                    continue;
                };
                let subnet = match nad.subnet() {
                    Ok(s) if self.addr.served.contains_key(&s) => Ok(s),
                    Ok(s) => Err(format!(
                        "NetworkAttachmentDefinition {nad_key}: Subnet {s} does not exist or is \
                         not valid"
                    )),
                    Err(e) => Err(e.to_string()),
                };
                match subnet {
                    Ok(s) => {
                        let req = PodIpRequest {
                            vm: vmi.as_deref().map(|v| owner_key(v, &nad_key)),
                            ..PodIpRequest::default()
                        };
                        want.insert((key.clone(), nad_key), (s, req));
                    }
                    Err(e) => {
                        errs.insert(nad_key, e);
                    }
                }
            }
            if !errs.is_empty() {
                errors.insert(key.clone(), errs);
            }
        }
        let stale: Vec<(String, String)> = self
            .secondary
            .held
            .iter()
            .filter(|(k, a)| want.get(*k).is_none_or(|(s, _)| *s != a.subnet))
            .map(|(k, _)| k.clone())
            .collect();
        for (pod, nad) in stale {
            self.release_secondary(&pod, &nad);
        }
        let mut assigned = 0;
        for ((pod, nad), (subnet, req)) in want {
            let owner = owner_key(&pod, &nad);
            match self.addr.ipam.assign(&owner, &subnet, &req) {
                Ok(addrs) => {
                    if self
                        .secondary
                        .held
                        .insert((pod.clone(), nad.clone()), addrs)
                        .is_none()
                    {
                        tracing::info!(%pod, network = %nad, %subnet, "secondary network addresses assigned");
                        assigned += 1;
                    }
                }
                Err(e) => {
                    errors.entry(pod).or_default().insert(nad, e.to_string());
                }
            }
        }
        self.secondary.errors = errors;
        assigned
    }

    /// Adds the secondary networks' switch ports to `nb`.
    pub(super) fn add_secondary_ports(&self, nb: &mut DesiredNb) {
        for ((pod, nad), addrs) in &self.secondary.held {
            let (Some(p), Some(s)) = (
                self.state.pods.get(pod),
                self.addr.served.get(&addrs.subnet),
            ) else {
                continue;
            };
            nb.add_switch_port(
                &translate::switch_of(s),
                network_port(&self.cfg, p, nad, addrs),
            );
        }
    }

    /// The annotations pod `key` should carry for its secondary networks (besides the
    /// entries in `k8s.ovn.org/pod-networks`): the Subnet and error maps, present when
    /// non-empty or when the pod carries them already (to clear them).
    pub(super) fn secondary_annotations(&self, pod: &PodInfo) -> BTreeMap<String, String> {
        let key = pod.key();
        let subnets: BTreeMap<String, String> = self
            .secondary
            .of(&key)
            .into_iter()
            .map(|(n, a)| (n, a.subnet))
            .collect();
        let errors = self.secondary.errors.get(&key).cloned().unwrap_or_default();
        let mut out = BTreeMap::new();
        for (name, map) in [(NETWORK_SUBNETS, subnets), (NETWORK_ERRORS, errors)] {
            if map.is_empty() && !pod.annotations.contains_key(name) {
                continue;
            }
            let v = if map.is_empty() {
                String::new()
            } else {
                serde_json::to_string(&map).unwrap_or_default()
            };
            out.insert(name.to_string(), v);
        }
        out
    }
}
