//! The `external_ids` contract: every key the plugin writes on an OVN Northbound row or a
//! local OVS row, and the owner values that mark a row as ours. One place, so a writer
//! and its readers (the controller, the node agent, `zovn trace`, the lab) cannot drift;
//! `tests/external_ids.rs` pins every key and value.
//!
//! Every key starts with [`PREFIX`]; a row is ours only when [`OWNER`] holds one of our
//! owner values, and a row without it is never changed or deleted.
//!
//! | key | on | written by | value |
//! |---|---|---|---|
//! | [`OWNER`] | every row | controller, agent, capture | the cluster id (NB, default [`CLUSTER_ID`]), [`AGENT_OWNER`] (OVS), [`CAPTURE_OWNER`] (a capture's OVS rows) |
//! | [`nb::KIND`], [`nb::OBJECT`] | NB rows | controller | the row kind ([`kind`]); the Kubernetes object (`ns/name` or `name`) |
//! | [`nb::NETWORK`] | secondary-network switch ports | controller | the NAD, `ns/name` |
//! | [`nb::POD_UID`], [`nb::SUBNET`] | pod switch ports | controller | the pod's UID; its Subnet (the IPAM rebuild) |
//! | [`nb::CIDR`] | Subnet and join switches | controller | the switch's CIDRs, comma-separated |
//! | [`nb::ACL`] | ACLs | controller | the policy rule the ACL comes from |
//! | [`nb::UNUSED_SINCE`] | Address_Sets | controller | when the set was last referenced |
//! | [`nb::ROW`] | router rows (routes, NATs, policies) | controller | the row's identity within its router |
//! | [`nb::PLATFORM_GROUP`], [`nb::PLATFORM_ACL`] | ACLs mirroring a platform security group's rule | controller | the platform's Port_Group; its ACL's uuid |
//! | [`ovs::POD`], [`ovs::SANDBOX`], [`ovs::IFNAME`] | pod Interfaces | agent | `ns/name`; the container id; the CNI ifname |
//! | [`ovs::DATAPATH`], [`ovs::DATAPATH_REASON`], [`ovs::DATAPATH_PENDING`] | pod Interfaces | agent | the port's datapath; why; a promotion in progress |
//! | [`ovs::VHOST_SOCKET`], [`ovs::VHOST_QUEUES`] | vhost-user Interfaces | agent | the socket path; the queue count |
//! | [`ovs::DATAPATH_KEYS`], [`ovs::VSWITCHD_RESTART_PENDING`] | the Open_vSwitch row | agent | the `other_config` keys it manages; a restart it owes |
//! | [`ovs::CAPTURE_PID`], [`ovs::CAPTURE_START`], [`ovs::CAPTURE_IFACE_ID`] | a capture's Mirror and port | `zovn capture` | the capturing process; its start time; the pod port's `iface-id` |

/// The prefix of every key the plugin writes (others' keys, such as ovn-controller's
/// `ovn-installed`, are never ours).
pub const PREFIX: &str = "zstack.io/";
/// Which party owns the row (values below).
pub const OWNER: &str = "zstack.io/owner";
/// The controller's default cluster id: [`OWNER`] of its NB rows (`--cluster-id`).
pub const CLUSTER_ID: &str = "zstack-ovn";
/// [`OWNER`] of the node agent's OVS rows.
pub const AGENT_OWNER: &str = "zstack-ovn-node";
/// [`OWNER`] of the OVS rows a running `zovn capture` adds (removed when it ends or its
/// process is gone).
pub const CAPTURE_OWNER: &str = "zovn-capture";

/// Keys of the controller's Northbound rows.
pub mod nb {
    /// What the row is for (`pod`, `subnet`, `service`, `netpol`, …).
    pub const KIND: &str = "zstack.io/kind";
    /// The Kubernetes object the row comes from (`ns/name` or `name`).
    pub const OBJECT: &str = "zstack.io/object";
    /// A secondary network's switch port: its NAD (`ns/name`).
    pub const NETWORK: &str = "zstack.io/network";
    /// A pod's switch port: the pod's UID.
    pub const POD_UID: &str = "zstack.io/pod-uid";
    /// A pod's switch port: its Subnet.
    pub const SUBNET: &str = "zstack.io/subnet";
    /// A Subnet's or the join switch's CIDRs, comma-separated.
    pub const CIDR: &str = "zstack.io/cidr";
    /// An ACL: the policy rule it comes from.
    pub const ACL: &str = "zstack.io/acl";
    /// An Address_Set no policy references any more: since when.
    pub const UNUSED_SINCE: &str = "zstack.io/unused-since";
    /// A router's static route, NAT or policy: its identity within the router.
    pub const ROW: &str = "zstack.io/row";
    /// An ACL mirroring a platform security group's rule under a NetworkPolicy (external
    /// mode): the platform's Port_Group.
    pub const PLATFORM_GROUP: &str = "zstack.io/platform-group";
    /// Such an ACL: the uuid of the platform's ACL it mirrors.
    pub const PLATFORM_ACL: &str = "zstack.io/platform-acl";
}

/// The values of [`nb::KIND`]: what a Northbound row of the controller is for.
pub mod kind {
    /// The distributed router joining every Subnet and the join switch.
    pub const CLUSTER_ROUTER: &str = "cluster-router";
    /// The switch of the nodes' management ports.
    pub const JOIN_SWITCH: &str = "join-switch";
    /// A node's management port and its rows.
    pub const NODE: &str = "node";
    /// A pod's switch port.
    pub const POD: &str = "pod";
    /// A pod's port on a secondary network.
    pub const POD_NETWORK: &str = "pod-network";
    /// A Subnet's switch.
    pub const SUBNET: &str = "subnet";
    /// A VLAN Subnet's localnet port.
    pub const SUBNET_LOCALNET: &str = "subnet-localnet";
    /// A router port and its switch-side peer.
    pub const ROUTER_PORT: &str = "router-port";
    /// A Service's load balancer.
    pub const SERVICE: &str = "service";
    /// The per-chassis template variables of `externalTrafficPolicy: Local` Services.
    pub const SERVICE_TEMPLATE_VARS: &str = "service-template-vars";
    /// A node's gateway router and its switch (`shared` gateway mode).
    pub const GATEWAY: &str = "gateway";
    /// The cluster's egress rows (default route, cluster policy).
    pub const EGRESS: &str = "egress";
    /// A node's egress rows; the set of every node's egress addresses.
    pub const EGRESS_NODE: &str = "egress-node";
    pub const EGRESS_NODES: &str = "egress-nodes";
    /// The return route of an egress Service through a gateway router.
    pub const EGRESS_SERVICE_RETURN: &str = "egress-service-return";
    /// A NetworkPolicy's port group; the default-deny groups; a peer's address set; an ACL.
    pub const NETPOL: &str = "netpol";
    pub const NETPOL_DENY: &str = "netpol-deny";
    pub const NETPOL_PEER: &str = "netpol-peer";
    pub const NETPOL_ACL: &str = "netpol-acl";
    /// A node's management port on a platform switch (external mode:
    /// [`crate::platform_mgmt`]).
    pub const PLATFORM_MGMT: &str = "platform-mgmt";

    /// Every kind (pinned by `tests/golden.rs`).
    pub const ALL: [&str; 20] = [
        CLUSTER_ROUTER,
        JOIN_SWITCH,
        NODE,
        POD,
        POD_NETWORK,
        SUBNET,
        SUBNET_LOCALNET,
        ROUTER_PORT,
        SERVICE,
        SERVICE_TEMPLATE_VARS,
        GATEWAY,
        EGRESS,
        EGRESS_NODE,
        EGRESS_NODES,
        EGRESS_SERVICE_RETURN,
        NETPOL,
        NETPOL_DENY,
        NETPOL_PEER,
        NETPOL_ACL,
        PLATFORM_MGMT,
    ];
}

/// Keys of the node agent's (and a capture's) local OVS rows.
pub mod ovs {
    /// A pod port: the pod (`ns/name`).
    pub const POD: &str = "zstack.io/pod";
    /// A pod port: the sandbox (container id).
    pub const SANDBOX: &str = "zstack.io/sandbox";
    /// A pod port: the CNI ifname (garbage collection matches container id + ifname).
    pub const IFNAME: &str = "zstack.io/ifname";
    /// A pod port: the datapath it runs on.
    pub const DATAPATH: &str = "zstack.io/datapath";
    /// A pod port: why it runs on that datapath.
    pub const DATAPATH_REASON: &str = "zstack.io/datapath-reason";
    /// A pod port started on the kernel path and waiting for its AF_XDP promotion.
    pub const DATAPATH_PENDING: &str = "zstack.io/datapath-pending";
    /// A vhost-user port: its socket path.
    pub const VHOST_SOCKET: &str = "zstack.io/vhost-socket";
    /// A vhost-user port: its queue count.
    pub const VHOST_QUEUES: &str = "zstack.io/vhost-queues";
    /// The Open_vSwitch row: the `other_config` keys the agent manages.
    pub const DATAPATH_KEYS: &str = "zstack.io/datapath-keys";
    /// The Open_vSwitch row: an ovs-vswitchd restart the agent still owes.
    pub const VSWITCHD_RESTART_PENDING: &str = "zstack.io/vswitchd-restart-pending";
    /// A capture: the capturing process's pid (in the node agent's pid namespace).
    pub const CAPTURE_PID: &str = "zstack.io/capture-pid";
    /// A capture: the process's start time (`/proc/<pid>/stat` field 22).
    pub const CAPTURE_START: &str = "zstack.io/capture-start";
    /// A capture: the captured pod port's `iface-id` (its logical switch port).
    pub const CAPTURE_IFACE_ID: &str = "zstack.io/capture-iface-id";
}

/// Every key above (for the pinning test and for readers that list ours).
pub const ALL_KEYS: [&str; 25] = [
    OWNER,
    nb::KIND,
    nb::OBJECT,
    nb::NETWORK,
    nb::POD_UID,
    nb::SUBNET,
    nb::CIDR,
    nb::ACL,
    nb::UNUSED_SINCE,
    nb::ROW,
    nb::PLATFORM_GROUP,
    nb::PLATFORM_ACL,
    ovs::POD,
    ovs::SANDBOX,
    ovs::IFNAME,
    ovs::DATAPATH,
    ovs::DATAPATH_REASON,
    ovs::DATAPATH_PENDING,
    ovs::VHOST_SOCKET,
    ovs::VHOST_QUEUES,
    ovs::DATAPATH_KEYS,
    ovs::VSWITCHD_RESTART_PENDING,
    ovs::CAPTURE_PID,
    ovs::CAPTURE_START,
    ovs::CAPTURE_IFACE_ID,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_ours_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for k in ALL_KEYS {
            assert!(k.starts_with(PREFIX), "{k}");
            assert!(seen.insert(k), "{k} twice");
        }
        let owners = [CLUSTER_ID, AGENT_OWNER, CAPTURE_OWNER];
        assert_eq!(
            owners
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            3
        );
    }
}
