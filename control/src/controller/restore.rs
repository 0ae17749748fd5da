//! Rebuilding IPAM on the first pass of a controller (a start, a leader change) from what
//! pods, VMs and nodes already hold — without trusting what a tenant can write.
//!
//! A pod's address annotation is writable by whoever may update the pod, i.e. by its
//! namespace's users, also while the pod is Pending. So, in this order:
//! 1. every pod with a Logical_Switch_Port of ours (state only the controller writes,
//!    keyed by the pod and its UID) gets the addresses of that port; an annotation that
//!    differs is ignored (and rewritten by the write-back);
//! 2. then a pod without such a port (its port lost with the NB, or never written) gets
//!    its annotation's addresses only when it is scheduled, not host-network, and the
//!    annotation's Subnet serves its namespace (it names it, or is a default Subnet); an
//!    address another pod already holds from step 1 stays with that pod.
//!
//! Refusals are logged with the pod and the reason; the pod then gets an address the
//! normal way (step 4 of the pass).

use super::*;
use crate::translate::pod::POD_UID;

/// Why a pod's address annotation is not restored (step 2); logged with the pod.
#[derive(Debug, thiserror::Error)]
enum AnnotationUntrusted {
    #[error("the pod is not scheduled (no address was handed to it)")]
    NotScheduled,
    #[error("the pod is on the host network")]
    HostNetwork,
    #[error("Subnet {subnet} is not served")]
    NotServed { subnet: String },
    #[error(
        "Subnet {subnet} does not serve namespace {namespace} (it is neither named by it nor a \
         default Subnet)"
    )]
    OtherNamespace { subnet: String, namespace: String },
}

/// An address claim read from our NB port of a pod.
struct NbClaim {
    addrs: PodAddresses,
    uid: Option<String>,
}

impl<S: Writer> Controller<S> {
    /// Rebuilds IPAM from our NB ports, then from trusted annotations, then the secondary
    /// networks and the nodes' join addresses.
    pub(super) fn restore(&mut self) {
        let pods: Vec<PodInfo> = self.state.pods.values().cloned().collect();
        let mut from_nb = self.nb_claims();
        // a port of an earlier pod of the same name (another UID) is not this pod's
        from_nb.retain(|key, claim| {
            let pod = self.state.pods.get(key);
            let same = pod.is_some_and(|p| claim.uid.as_deref().is_none_or(|u| u == p.uid));
            if pod.is_some() && !same {
                tracing::info!(pod = %key, "NB port of an earlier pod of this name (another UID): not restored");
            }
            same
        });
        // 1. the controller's own rows first: they win every conflict
        for pod in &pods {
            let Some(claim) = from_nb.get(&pod.key()) else {
                continue;
            };
            if let Some(Ok(ann)) = annotation::pod_addresses(&pod.annotations)
                && (ann.subnet != claim.addrs.subnet || ann.ips != claim.addrs.ips)
            {
                tracing::warn!(
                    pod = %pod.key(),
                    annotation = ?ann.ips,
                    nb = ?claim.addrs.ips,
                    "the pod's address annotation differs from the controller's NB port: the NB port's addresses kept"
                );
            }
            self.restore_pod(pod, &claim.addrs);
        }
        // the nodes' management ports on platform switches: also our own rows
        self.restore_platform_mgmt();
        // 2. annotations of pods without a port of ours
        for pod in &pods {
            if from_nb.contains_key(&pod.key()) {
                continue;
            }
            match annotation::pod_addresses(&pod.annotations) {
                Some(Ok(addrs)) => match self.annotation_trusted(pod, &addrs) {
                    Ok(()) => self.restore_pod(pod, &addrs),
                    Err(why) => tracing::warn!(
                        pod = %pod.key(),
                        subnet = %addrs.subnet,
                        ips = ?addrs.ips,
                        "address annotation not restored: {why}"
                    ),
                },
                Some(Err(e)) => {
                    tracing::warn!(pod = %pod.key(), error = %e, "unreadable pod annotation")
                }
                None => {}
            }
        }
        self.restore_secondary();
        self.restore_join_addresses();
    }

    /// Our pod ports in the NB replica, by pod key.
    fn nb_claims(&self) -> BTreeMap<String, NbClaim> {
        self.rec.replica().read(|v| {
            v.rows(LogicalSwitchPort::TABLE)
                .filter(|r| r.map_get("external_ids", OWNER) == Some(self.cfg.cluster_id.as_str()))
                .filter(|r| r.map_get("external_ids", KIND) == Some(api::external_ids::kind::POD))
                .filter_map(|r| {
                    let key = r.map_get("external_ids", crate::names::OBJECT)?.to_string();
                    let subnet = r.map_get("external_ids", SUBNET)?.to_string();
                    let addresses: Vec<String> = r.get_as("addresses").ok()?;
                    let addrs =
                        parse_lsp_addresses(addresses.first()?, &subnet, &self.addr.served)?;
                    let uid = r.map_get("external_ids", POD_UID).map(str::to_string);
                    Some((key, NbClaim { addrs, uid }))
                })
                .collect()
        })
    }

    /// Whether a pod without an NB port of ours may keep its annotation's addresses.
    fn annotation_trusted(
        &self,
        pod: &PodInfo,
        addrs: &PodAddresses,
    ) -> Result<(), AnnotationUntrusted> {
        if pod.node.is_none() {
            return Err(AnnotationUntrusted::NotScheduled);
        }
        if pod.host_network {
            return Err(AnnotationUntrusted::HostNetwork);
        }
        let Some(subnet) = self.addr.served.get(&addrs.subnet) else {
            return Err(AnnotationUntrusted::NotServed {
                subnet: addrs.subnet.clone(),
            });
        };
        if !subnet.default && !subnet.namespaces.iter().any(|n| n == &pod.namespace) {
            return Err(AnnotationUntrusted::OtherNamespace {
                subnet: addrs.subnet.clone(),
                namespace: pod.namespace.clone(),
            });
        }
        Ok(())
    }

    pub(super) fn restore_pod(&mut self, pod: &PodInfo, addrs: &PodAddresses) {
        let vm = pod_request(pod).ok().and_then(|r| r.vm);
        let key = match &vm {
            Some(vmi) => vm_key(&pod.namespace, vmi),
            None => pod.key(),
        };
        let ips: Vec<IpAddr> = addrs.ips.iter().map(|n| n.addr()).collect();
        match self.addr.ipam.restore(&key, &addrs.subnet, &ips, addrs.mac) {
            Ok(()) => {
                if vm.is_some() {
                    // ties the pod to its VM's lease (restore records the lease only), so
                    // the pod's addresses (and its LSP) are found through its key
                    let req = PodIpRequest {
                        vm,
                        ..PodIpRequest::default()
                    };
                    if let Err(e) = self.addr.ipam.assign(&pod.key(), &addrs.subnet, &req) {
                        tracing::warn!(pod = %pod.key(), error = %e, "cannot tie the pod to its VM's addresses");
                    }
                }
                self.addr.assigned.insert(pod.key());
            }
            Err(e) => {
                tracing::warn!(pod = %pod.key(), error = %e, "cannot restore pod addresses");
            }
        }
    }

    /// The nodes' join addresses from their management-port annotation (written by the
    /// controller).
    fn restore_join_addresses(&mut self) {
        let nodes: Vec<(String, Option<String>)> = self
            .state
            .nodes
            .values()
            .map(|n| (n.name.clone(), n.annotations.get(NODE_MGMT_PORT).cloned()))
            .collect();
        for (name, ann) in nodes {
            let Some(ann) = ann else { continue };
            let parsed = serde_json::from_str::<annotation::PodNetwork>(&ann)
                .ok()
                .and_then(|n| n.to_addresses(JOIN_POOL).ok());
            if let Some(addrs) = parsed {
                let (ips, ips6): (Vec<IpAddr>, Vec<IpAddr>) = addrs
                    .ips
                    .iter()
                    .map(|n| n.addr())
                    .partition(IpAddr::is_ipv4);
                match self
                    .addr
                    .ipam
                    .restore(&node_key(&name), JOIN_POOL, &ips, addrs.mac)
                {
                    Ok(()) => {
                        self.addr.nodes_assigned.insert(name.clone());
                    }
                    Err(e) => {
                        tracing::warn!(node = %name, error = %e, "cannot restore join address")
                    }
                }
                // the IPv6 lease: the same address again, after the IPv4 one (which keeps
                // the port's MAC; this lease's own MAC is never used)
                if !ips6.is_empty()
                    && self.cfg.join_v6.is_some()
                    && let Err(e) = self.addr.ipam.assign(
                        &node6_key(&name),
                        JOIN6_POOL,
                        &PodIpRequest {
                            static_ips: ips6,
                            ..PodIpRequest::default()
                        },
                    )
                {
                    tracing::warn!(node = %name, error = %e, "cannot restore the IPv6 join address");
                }
            }
        }
    }
}
