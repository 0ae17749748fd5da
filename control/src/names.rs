//! Names and ownership marks of the OVN rows the control plane creates.
//!
//! Every row we create carries `external_ids` [`OWNER`] = the cluster id (default
//! `zstack-ovn`), [`KIND`] and [`OBJECT`] (the Kubernetes object it comes from). The
//! reconciler only updates or deletes rows whose [`OWNER`] is ours, so foreign rows (an
//! IaaS platform's switches and ports in external mode) are never touched.

use std::collections::BTreeMap;

/// `external_ids` keys ([`api::external_ids`]): which cluster's controller owns the row;
/// what the row is for (`cluster-router`, `join-switch`, `subnet`, `subnet-router-port`,
/// `pod`, `node`, …); the Kubernetes object it comes from (`ns/name` or `name`).
pub use api::external_ids::OWNER;
pub use api::external_ids::nb::{KIND, OBJECT};

/// The distributed router joining every Subnet and the join switch.
pub const CLUSTER_ROUTER: &str = "ovn_cluster_router";
/// The switch holding each node's management port (host ↔ pods).
pub const JOIN_SWITCH: &str = "join";

/// The logical switch of Subnet `name`.
pub fn subnet_switch(subnet: &str) -> String {
    format!("subnet-{subnet}")
}

/// The cluster router's port towards switch `switch`.
pub fn router_port(switch: &str) -> String {
    format!("{CLUSTER_ROUTER}-{switch}")
}

/// The switch-side port peering with [`router_port`].
pub fn switch_router_port(switch: &str) -> String {
    format!("{switch}-{CLUSTER_ROUTER}")
}

pub use api::names::{network_port, node_port};

/// `external_ids` key on a secondary network's switch port: the NAD (`<ns>/<name>`).
pub use api::external_ids::nb::NETWORK;

/// The `network_name` of our localnet ports (VLAN Subnets without a `provider`, the
/// gateway routers' external switches): each node maps it to its gateway bridge with
/// `ovn-bridge-mappings=physnet:<bridge>`.
pub const PHYSNET: &str = "physnet";

/// The localnet port of an underlay (VLAN) Subnet switch.
pub fn localnet_port(switch: &str) -> String {
    format!("{switch}-localnet")
}

/// The Load_Balancer of Service `namespace/name` for one protocol (`TCP`, `UDP`, `SCTP`):
/// `Service_<namespace>/<name>_<protocol>`.
pub fn service_lb(service_key: &str, protocol: &str) -> String {
    format!("Service_{service_key}_{protocol}")
}

/// Our Load_Balancer_Group holding every Service load balancer. The table has no
/// `external_ids`, so the name carries the owner: `zstack-ovn-services_<cluster id>`.
pub fn lb_group(cluster_id: &str) -> String {
    format!("zstack-ovn-services_{cluster_id}")
}

/// The `external_ids` of a row we own.
pub fn owned(cluster_id: &str, kind: &str, object: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (OWNER.to_string(), cluster_id.to_string()),
        (KIND.to_string(), kind.to_string()),
        (OBJECT.to_string(), object.to_string()),
    ])
}

/// A deterministic locally administered unicast MAC for a router port, from its name
/// ([`api::names::router_mac`]).
pub fn router_mac(port: &str) -> String {
    api::names::router_mac(port).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_macs_are_stable_unicast_and_distinct() {
        let a = router_mac("ovn_cluster_router-subnet-blue");
        let b = router_mac("ovn_cluster_router-subnet-red");
        assert_eq!(a, router_mac("ovn_cluster_router-subnet-blue"));
        assert_ne!(a, b);
        assert!(a.starts_with("0a:"), "locally administered unicast: {a}");
    }
}
