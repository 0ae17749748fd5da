//! Persistent names both sides compute, or that name live objects: OVN logical switch
//! ports, vhost-user socket directories and OVS port names, NetworkPolicy port groups and
//! address sets, Service template variables, router MACs.
//!
//! Each is pinned by `tests/golden.rs`: changing one renames live objects on upgrade.

use crate::hash;
use crate::mac::Mac;
use crate::services::Proto;

/// A pod's logical switch port on its primary network, also the OVS interface's
/// `external_ids:iface-id`: `<namespace>_<name>` (pod names never hold `_`).
pub fn pod_port(namespace: &str, name: &str) -> String {
    format!("{namespace}_{name}")
}

/// A pod's logical switch port on its secondary network `nad_key` (`<nad-ns>/<nad-name>`,
/// see [`crate::multus`]): `<pod port>_<nad-ns>.<nad-name>`.
pub fn network_port(pod_port: &str, nad_key: &str) -> String {
    format!("{pod_port}_{}", nad_key.replacen('/', ".", 1))
}

/// Node `name`'s management port on the join switch (the mgmt port's `iface-id`).
pub fn node_port(node: &str) -> String {
    format!("node-{node}")
}

/// Prefix of the OVS port names of vhost-user interfaces.
pub const VHOST_PORT_PREFIX: &str = "vhu";

/// The vhost-user socket directory id of `ifname` of `owner` (the VMI, or the name the pod
/// asks for) in `namespace`: 16 hex digits, stable across restarts and migrations.
pub fn vhost_socket_id(namespace: &str, owner: &str, ifname: &str) -> String {
    hash::hex_parts(&[namespace, owner, ifname])
}

/// The OVS Port/Interface name of the vhost-user interface with socket id `id`:
/// [`VHOST_PORT_PREFIX`] + the id's first 12 hex digits.
pub fn vhost_port_name(id: &str) -> String {
    let short = id.get(..12).unwrap_or(id);
    format!("{VHOST_PORT_PREFIX}{short}")
}

/// The NetworkPolicy port group of `key` (a policy `ns/name`, or `deny/ingress`...) in
/// cluster `cluster_id`: an OVN identifier (`@name` in matches), unique per cluster.
pub fn policy_port_group(cluster_id: &str, key: &str) -> String {
    format!("np_{}", hash::hex_parts(&[cluster_id, key]))
}

/// The address set of NetworkPolicy peer `key` for one family (`$name` in matches).
pub fn policy_address_set(cluster_id: &str, key: &str, v4: bool) -> String {
    let family = if v4 { "v4" } else { "v6" };
    format!(
        "np_{}_{family}",
        hash::hex_parts(&[cluster_id, "peer", key])
    )
}

/// The address set of node `node`'s pods of one family (the egress gateway's reroute
/// policy matches `ip4.src == $name`).
pub fn egress_address_set(cluster_id: &str, node: &str, v4: bool) -> String {
    let family = if v4 { "v4" } else { "v6" };
    format!(
        "eg_{}_{family}",
        hash::hex_parts(&[cluster_id, "egress", node])
    )
}

/// The address set of every node's own addresses of one family (`shared` gateway mode:
/// pods reach them through their management port).
pub fn egress_nodes_address_set(cluster_id: &str, v4: bool) -> String {
    let family = if v4 { "v4" } else { "v6" };
    format!(
        "egn_{}_{family}",
        hash::hex_parts(&[cluster_id, "egress-nodes"])
    )
}

fn family_digit(v4: bool) -> char {
    if v4 { '4' } else { '6' }
}

/// The OVN template variable holding Service `service_key`'s cluster IP of one family.
pub fn service_ip_var(service_key: &str, v4: bool) -> String {
    format!(
        "zsvc_{}_ip{}",
        hash::hex(service_key.as_bytes()),
        family_digit(v4)
    )
}

/// The OVN template variable holding a Service port's node-local backends of one family.
pub fn service_backends_var(service_key: &str, proto: Proto, port: u16, v4: bool) -> String {
    format!(
        "zsvc_{}_{}{port}_{}",
        hash::hex(service_key.as_bytes()),
        proto.ovn(),
        family_digit(v4)
    )
}

/// A deterministic locally administered unicast MAC for a router port, from its name.
pub fn router_mac(port: &str) -> Mac {
    let b = hash::fnv1a64(port.as_bytes()).to_be_bytes();
    Mac([0x0a, b[3], b[4], b[5], b[6], b[7]])
}
