//! A node and its join-switch address → its management port `node-<name>`.
//!
//! The node agent creates the matching OVS internal interface on the host (bound with
//! `iface-id=node-<name>`), which gives the host a route to every pod through the cluster
//! router.

use ovsdb::nb::LogicalSwitchPort;

use super::ClusterConfig;
use crate::model::{NodeInfo, PodAddresses};
use crate::names;
use crate::translate::pod::address_entry;

/// The node's management port on the join switch.
pub fn port(cfg: &ClusterConfig, node: &NodeInfo, addrs: &PodAddresses) -> LogicalSwitchPort {
    let mut lsp = LogicalSwitchPort {
        name: names::node_port(&node.name),
        external_ids: names::owned(&cfg.cluster_id, api::external_ids::kind::NODE, &node.name),
        ..Default::default()
    };
    lsp.addresses.insert(address_entry(addrs));
    lsp.options
        .insert("requested-chassis".into(), node.name.clone());
    lsp
}
