//! External mode, host ↔ pod: each node's management port on every platform switch where
//! it hosts pods ([`api::platform_mgmt`]).
//!
//! Level-triggered, one pass at a time: the (node, Subnet) pairs that need a port are the
//! nodes of the pods holding (or about to get) an address of a Subnet with
//! `externalLogicalSwitch`. A pair gets an address of that Subnet from IPAM, before the
//! pods do (owner key [`key`], so no pod and no platform
//! port gets it), a Logical_Switch_Port [`api::platform_mgmt::port_name`] on the platform
//! switch (ours: owner marks, kind `platform-mgmt`; `port_security` holds its address, so
//! the host cannot speak for a VM of the platform) and an entry in the Node's
//! `network.zstack.io/platform-mgmt-ports`, which the node agent turns into the host's
//! device. A pair no longer needed (its last pod gone, the Subnet deleted) gives its
//! address back and loses its port and entry. After a restart the addresses come back
//! from our own NB ports first, as the pods' do ([`super::restore`]).

use api::platform_mgmt::{self, PLATFORM_MGMT_PORTS, PlatformMgmtPort};
use ovsdb::nb::LogicalSwitchPort;

use super::*;

/// IPAM owner key of `node`'s management port on the switch of `subnet`.
pub fn key(node: &str, subnet: &str) -> String {
    format!("platform-mgmt:{subnet}:{node}")
}

impl<S: Writer> Controller<S> {
    /// The (node, Subnet) pairs that need a management port now: of every scheduled pod
    /// on the pod network, its address's Subnet, or the one it is about to get an address
    /// from (so the port is served before the node's first pod there, even when the
    /// Subnet is nearly full: without it, kubelet could not probe that pod).
    fn platform_mgmt_wanted(&self) -> BTreeSet<(String, String)> {
        self.state
            .pods
            .values()
            .filter(|p| !p.host_network && !p.completed)
            .filter_map(|p| {
                let node = p.node.clone()?;
                let subnet = match self.addr.ipam.addresses(&p.key()) {
                    Some(a) => a.subnet,
                    None => self.subnet_for(p)?.name.clone(),
                };
                let served = self.addr.served.get(&subnet)?;
                served.external_logical_switch.as_ref()?;
                self.state
                    .nodes
                    .contains_key(&node)
                    .then_some((node, subnet))
            })
            .collect()
    }

    /// Gives the wanted pairs an address and takes it back from the others.
    pub(super) fn assign_platform_mgmt(&mut self) {
        let wanted = self.platform_mgmt_wanted();
        let unwanted: Vec<(String, String)> = self
            .addr
            .platform_mgmt
            .difference(&wanted)
            .cloned()
            .collect();
        for (node, subnet) in unwanted {
            self.addr.ipam.release(&key(&node, &subnet));
            self.addr
                .platform_mgmt
                .remove(&(node.clone(), subnet.clone()));
            tracing::info!(%node, %subnet, "platform management port no longer needed: address released");
        }
        for (node, subnet) in wanted {
            if self
                .addr
                .platform_mgmt
                .contains(&(node.clone(), subnet.clone()))
            {
                continue;
            }
            let k = key(&node, &subnet);
            match self.addr.ipam.assign(&k, &subnet, &PodIpRequest::default()) {
                Ok(a) => {
                    tracing::info!(%node, %subnet, ips = ?a.ips, "platform management port address assigned");
                    self.addr.platform_mgmt.insert((node, subnet));
                }
                Err(e) => tracing::warn!(
                    %node,
                    %subnet,
                    error = %e,
                    "no address for the node's management port on the platform switch: its host cannot reach its pods there"
                ),
            }
        }
    }

    /// Takes back the addresses of Subnet `subnet` (no longer served).
    pub(super) fn release_platform_mgmt_of(&mut self, subnet: &str) {
        let of: Vec<(String, String)> = self
            .addr
            .platform_mgmt
            .iter()
            .filter(|(_, s)| s == subnet)
            .cloned()
            .collect();
        for pair in of {
            self.addr.ipam.release(&key(&pair.0, &pair.1));
            self.addr.platform_mgmt.remove(&pair);
        }
    }

    /// `(node, subnet)`'s addresses, when it holds some.
    fn platform_mgmt_addresses(&self, node: &str, subnet: &str) -> Option<PodAddresses> {
        self.addr.ipam.addresses(&key(node, subnet))
    }

    /// Every management port's address on a platform switch, as a host prefix (allowed
    /// into pods that NetworkPolicies isolate, as the join network is).
    pub(super) fn platform_mgmt_hosts(&self) -> Vec<ipnet::IpNet> {
        self.addr
            .platform_mgmt
            .iter()
            .filter_map(|(n, s)| self.platform_mgmt_addresses(n, s))
            .flat_map(|a| a.ips)
            .map(|ip| ipnet::IpNet::from(ip.addr()))
            .collect()
    }

    /// Adds the management ports to their platform switches.
    pub(super) fn add_platform_mgmt_ports(&self, nb: &mut DesiredNb) {
        for (node, subnet) in &self.addr.platform_mgmt {
            let (Some(served), Some(addrs)) = (
                self.addr.served.get(subnet),
                self.platform_mgmt_addresses(node, subnet),
            ) else {
                continue;
            };
            let Some(switch) = &served.external_logical_switch else {
                continue;
            };
            let entry = translate::pod::address_entry(&addrs);
            let mut lsp = LogicalSwitchPort {
                name: platform_mgmt::port_name(node, subnet),
                external_ids: crate::names::owned(
                    &self.cfg.cluster_id,
                    api::external_ids::kind::PLATFORM_MGMT,
                    node,
                ),
                ..Default::default()
            };
            lsp.addresses.insert(entry.clone());
            lsp.port_security.insert(entry);
            lsp.external_ids.insert(SUBNET.into(), subnet.clone());
            lsp.options.insert("requested-chassis".into(), node.clone());
            nb.add_switch_port(switch, lsp);
        }
    }

    /// The [`PLATFORM_MGMT_PORTS`] value of `node` (`""`: none).
    pub(super) fn platform_mgmt_annotation(&self, node: &str) -> String {
        let ports: Vec<PlatformMgmtPort> = self
            .addr
            .platform_mgmt
            .iter()
            .filter(|(n, _)| n == node)
            .filter_map(|(n, subnet)| {
                let addrs = self.platform_mgmt_addresses(n, subnet)?;
                Some(PlatformMgmtPort {
                    subnet: subnet.clone(),
                    port: platform_mgmt::port_name(n, subnet),
                    mac_address: addrs.mac.to_string(),
                    ip_addresses: addrs.ips.iter().map(ToString::to_string).collect(),
                    gateway_ips: addrs.gateways.iter().map(ToString::to_string).collect(),
                    routes: self
                        .cfg
                        .service_cidrs
                        .iter()
                        .map(ToString::to_string)
                        .collect(),
                })
            })
            .collect();
        if ports.is_empty() {
            String::new()
        } else {
            platform_mgmt::encode(&ports)
        }
    }

    /// The Node annotations to write: every node whose [`PLATFORM_MGMT_PORTS`] differs
    /// (a node that never had one and needs none is left alone).
    pub(super) fn platform_mgmt_writes(&self) -> Vec<(String, String)> {
        self.state
            .nodes
            .values()
            .filter_map(|n| {
                let want = self.platform_mgmt_annotation(&n.name);
                let have = n.annotations.get(PLATFORM_MGMT_PORTS);
                (have.map(String::as_str).unwrap_or("") != want).then(|| (n.name.clone(), want))
            })
            .collect()
    }

    /// Restores the addresses of our management ports on platform switches from the NB
    /// (state only the controller writes).
    pub(super) fn restore_platform_mgmt(&mut self) {
        let claims: Vec<(String, PodAddresses)> = self.rec.replica().read(|v| {
            v.rows(LogicalSwitchPort::TABLE)
                .filter(|r| r.map_get("external_ids", OWNER) == Some(self.cfg.cluster_id.as_str()))
                .filter(|r| {
                    r.map_get("external_ids", KIND) == Some(api::external_ids::kind::PLATFORM_MGMT)
                })
                .filter_map(|r| {
                    let node = r.map_get("external_ids", crate::names::OBJECT)?.to_string();
                    let subnet = r.map_get("external_ids", SUBNET)?.to_string();
                    let addresses: Vec<String> = r.get_as("addresses").ok()?;
                    let addrs =
                        parse_lsp_addresses(addresses.first()?, &subnet, &self.addr.served)?;
                    Some((node, addrs))
                })
                .collect()
        });
        for (node, addrs) in claims {
            let ips: Vec<IpAddr> = addrs.ips.iter().map(|n| n.addr()).collect();
            match self
                .addr
                .ipam
                .restore(&key(&node, &addrs.subnet), &addrs.subnet, &ips, addrs.mac)
            {
                Ok(()) => {
                    self.addr.platform_mgmt.insert((node, addrs.subnet));
                }
                Err(e) => tracing::warn!(
                    %node,
                    subnet = %addrs.subnet,
                    error = %e,
                    "cannot restore the platform management port's address"
                ),
            }
        }
    }
}
