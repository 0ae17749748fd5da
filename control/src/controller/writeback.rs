//! Writes the controller's answers back to the object store: pod and node annotations
//! (after the NB commit) and Subnet status, each only when it differs from what the object
//! already carries, so a steady state writes nothing.

use std::collections::BTreeMap;

use super::{Controller, IPAM_ERROR};
use crate::annotation::{self, NODE_MGMT_PORT, POD_NETWORKS, POD_SUBNET, PodNetwork};
use crate::source::{WriteError, Writer};

impl<W: Writer> Controller<W> {
    /// Returns (annotation writes, status writes).
    pub(super) async fn write_back(&mut self) -> (usize, usize) {
        let mut annotations = 0;
        let mut pod_writes: Vec<(String, String, BTreeMap<String, String>)> = Vec::new();
        for key in &self.addr.assigned {
            let (Some(pod), Some(addrs)) =
                (self.state.pods.get(key), self.addr.ipam.addresses(key))
            else {
                continue;
            };
            let want = BTreeMap::from([
                (
                    POD_NETWORKS.to_string(),
                    annotation::encode_pod_networks_with(&addrs, &self.secondary.of(key)),
                ),
                (POD_SUBNET.to_string(), addrs.subnet.clone()),
            ]);
            let mut want = want;
            want.extend(self.secondary_annotations(pod));
            if pod
                .annotations
                .get(IPAM_ERROR)
                .is_some_and(|e| !e.is_empty())
            {
                want.insert(IPAM_ERROR.to_string(), String::new());
            }
            if want.iter().any(|(k, v)| pod.annotations.get(k) != Some(v)) {
                pod_writes.push((pod.namespace.clone(), pod.name.clone(), want));
            }
        }
        for (key, msg) in &self.addr.pod_errors {
            let Some(pod) = self.state.pods.get(key) else {
                continue;
            };
            if pod.annotations.get(IPAM_ERROR) != Some(msg) {
                pod_writes.push((
                    pod.namespace.clone(),
                    pod.name.clone(),
                    BTreeMap::from([(IPAM_ERROR.to_string(), msg.clone())]),
                ));
            }
        }
        for (ns, name, want) in pod_writes {
            match self.writer.annotate_pod(&ns, &name, &want).await {
                Ok(()) => {
                    annotations += 1;
                    if let Some(p) = self.state.pods.get_mut(&format!("{ns}/{name}")) {
                        p.annotations.extend(want);
                    }
                }
                Err(WriteError::NotFound { .. }) => {}
                Err(e) => tracing::warn!(error = %e, "pod annotation not written"),
            }
        }

        let mut node_writes = Vec::new();
        for name in &self.addr.nodes_assigned {
            let (Some(node), Some(addrs)) = (self.state.nodes.get(name), self.node_addresses(name))
            else {
                continue;
            };
            let mut addrs = addrs;
            addrs.gateways = std::iter::once(self.cfg.join_gateway)
                .chain(self.cfg.join_v6.map(|v| v.gateway))
                .filter(|g| {
                    addrs
                        .ips
                        .iter()
                        .any(|ip| ip.addr().is_ipv4() == g.is_ipv4())
                })
                .collect();
            let mut network = PodNetwork::from_addresses(&addrs);
            // the host reaches Service VIPs through its management port (the join switch
            // balances them); in external mode there is no join switch: through its ports
            // on the platform's switches instead (`platform_mgmt_annotation`)
            network.routes = self
                .cfg
                .service_cidrs
                .iter()
                .filter(|_| self.cfg.mode != crate::translate::Mode::External)
                .filter_map(|c| {
                    let gw = addrs
                        .gateways
                        .iter()
                        .find(|g| g.is_ipv4() == c.addr().is_ipv4())?;
                    Some(annotation::Route {
                        dest: c.to_string(),
                        next_hop: gw.to_string(),
                    })
                })
                .collect();
            let value = serde_json::to_string(&network).unwrap_or_default();
            if node.annotations.get(NODE_MGMT_PORT) != Some(&value) {
                node_writes.push((name.clone(), value));
            }
        }
        let mut node_writes: Vec<(String, BTreeMap<String, String>)> = node_writes
            .into_iter()
            .map(|(name, value)| (name, BTreeMap::from([(NODE_MGMT_PORT.to_string(), value)])))
            .collect();
        for (name, value) in self.platform_mgmt_writes() {
            let entry = (api::platform_mgmt::PLATFORM_MGMT_PORTS.to_string(), value);
            match node_writes.iter_mut().find(|(n, _)| *n == name) {
                Some((_, want)) => {
                    want.insert(entry.0, entry.1);
                }
                None => node_writes.push((name, BTreeMap::from([entry]))),
            }
        }
        for (name, want) in node_writes {
            match self.writer.annotate_node(&name, &want).await {
                Ok(()) => {
                    annotations += 1;
                    if let Some(n) = self.state.nodes.get_mut(&name) {
                        n.annotations.extend(want);
                    }
                }
                Err(WriteError::NotFound { .. }) => {}
                Err(e) => tracing::warn!(error = %e, "node annotation not written"),
            }
        }

        let mut statuses = 0;
        let names: Vec<String> = self.state.subnets.keys().cloned().collect();
        for name in names {
            let Some(subnet) = self.state.subnets.get(&name) else {
                continue;
            };
            let previous = subnet.status.as_ref();
            let status = self
                .subnet_status(&name)
                .keep_transition_times(previous)
                .with_observed_generation(subnet.metadata.generation);
            if previous == Some(&status) {
                continue;
            }
            match self.writer.subnet_status(&name, &status).await {
                Ok(()) => {
                    statuses += 1;
                    if let Some(s) = self.state.subnets.get_mut(&name) {
                        s.status = Some(status);
                    }
                }
                Err(WriteError::NotFound { .. }) => {}
                Err(e) => tracing::warn!(subnet = %name, error = %e, "status not written"),
            }
        }
        (annotations, statuses)
    }
}
