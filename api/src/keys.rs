//! Every annotation key, label and event reason the controller, the node agent, the CNI
//! plugin, the vhost-user layer and the lab share: one place, so no two copies can drift.
//!
//! | key | on | written by | read by |
//! |---|---|---|---|
//! | [`POD_NETWORKS`] | Pod | controller | agent, lab (see [`crate::pod_networks`]) |
//! | [`POD_SUBNET`] | Pod | controller | controller (IPAM rebuild) |
//! | [`IPAM_ERROR`] | Pod | controller | agent (fails the ADD with it) |
//! | [`NETWORK_SUBNETS`], [`NETWORK_ERRORS`] | Pod | controller | controller, agent |
//! | [`NODE_MGMT_PORT`] | Node | controller | agent |
//! | [`PLATFORM_MGMT_PORTS`] | Node | controller | agent, controller (IPAM rebuild) |
//! | [`CHASSIS_ID`] | Node | agent | controller (SB chassis clean-up) |
//! | [`NODE_GATEWAY`] | Node | agent | controller (`shared` gateway mode) |
//! | [`DATAPATH_STATUS`] | Node | agent | lab, `zovn status` |
//! | [`DATAPATH_CONFIG`] | Node | operator | agent |
//! | [`POD_DATAPATH`] | Pod | user | agent |
//! | [`VHOST_USER`], [`VHOST_OWNER`] | Pod, VMI | user, lab's KubeVirt | agent, vhost |
//! | [`NETWORKS_ANNOTATION`], [`NETWORK_STATUS`], [`MULTUS_DEFAULT_NETWORK`] | Pod | user, Multus | controller, agent, lab |
//! | [`KUBEVIRT_DOMAIN`], [`KUBEVIRT_VM_LABEL`] | virt-launcher Pod | KubeVirt | controller, vhost |
//! | [`IP_ADDRESS`], [`MAC_ADDRESS`], [`IP_POOL`] | Pod | user (kube-ovn's names) | controller |
//! | [`MANAGED_BY`] (label) | Subnet | controller | controller (the default Subnet it keeps) |
//! | [`UNINSTALL_ACK_PREFIX`] + node ([`uninstall_ack_key`]) | the uninstall marker ConfigMap | agent | the chart's pre-delete hook |

/// The ovn-kubernetes pod network annotation (one entry per network).
pub const POD_NETWORKS: &str = "k8s.ovn.org/pod-networks";
/// The Subnet a pod's addresses belong to.
pub const POD_SUBNET: &str = "network.zstack.io/subnet";
/// Why a pod has no address.
pub const IPAM_ERROR: &str = "network.zstack.io/ipam-error";
/// `{"<nad-ns>/<nad-name>": "<subnet>"}` for every served secondary network.
pub const NETWORK_SUBNETS: &str = "network.zstack.io/network-subnets";
/// `{"<nad-ns>/<nad-name>": "<why it gets no address>"}`.
pub const NETWORK_ERRORS: &str = "network.zstack.io/network-errors";
/// A node's management-port addresses on the join switch (one pod-networks entry).
pub const NODE_MGMT_PORT: &str = "network.zstack.io/mgmt-port";
/// External mode: a node's management ports on the platform's switches where it hosts
/// pods (JSON list, [`crate::platform_mgmt::PlatformMgmtPort`]).
pub const PLATFORM_MGMT_PORTS: &str = "network.zstack.io/platform-mgmt-ports";
/// The node's OVN chassis name (`external_ids:system-id`).
pub const CHASSIS_ID: &str = "network.zstack.io/chassis-id";
/// The node agent's gateway interface report, `shared` gateway mode (JSON,
/// [`crate::gateway::NodeGateway`]).
pub const NODE_GATEWAY: &str = "network.zstack.io/gateway";

/// The node agent's datapath report on its Node (JSON).
pub const DATAPATH_STATUS: &str = "network.zstack.io/datapath-status";
/// Node annotation overriding the agent's datapath configuration for one node.
pub const DATAPATH_CONFIG: &str = "network.zstack.io/datapath-config";
/// The datapath a pod asks for (`afxdp` or `kernel`); absent = the node's.
pub const POD_DATAPATH: &str = "network.zstack.io/datapath";

/// Pod/VMI annotation asking for a vhost-user interface on the default network.
pub const VHOST_USER: &str = "network.zstack.io/vhost-user";
/// Pod annotation naming the owner a vhost-user socket path is derived from.
pub const VHOST_OWNER: &str = "network.zstack.io/vhost-owner";

/// Multus: the pod's secondary networks.
pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
/// Multus: the attachment status a runtime publishes.
pub const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
/// Multus: the NAD that replaces the cluster default network for a pod.
pub const MULTUS_DEFAULT_NETWORK: &str = "v1.multus-cni.io/default-network";

/// KubeVirt's annotation on every virt-launcher pod: the VMI name.
pub const KUBEVIRT_DOMAIN: &str = "kubevirt.io/domain";
/// KubeVirt's label naming the VMI (`VirtualMachineLabel`).
pub const KUBEVIRT_VM_LABEL: &str = "kubevirt.io/vm";

/// kube-ovn's static address(es): one, or one per family separated by `,`.
pub const IP_ADDRESS: &str = "ovn.kubernetes.io/ip_address";
/// kube-ovn's static MAC.
pub const MAC_ADDRESS: &str = "ovn.kubernetes.io/mac_address";
/// kube-ovn's address pool, separated by `,` or `;`.
pub const IP_POOL: &str = "ovn.kubernetes.io/ip_pool";

/// The label naming an EndpointSlice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label every Namespace carries with its own name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The label marking a Subnet the controller created and keeps (the cluster's default
/// Subnet from `--cluster-cidr`); value [`MANAGED_BY_CONTROLLER`]. A Subnet without it is
/// the user's and is never touched.
pub const MANAGED_BY: &str = "network.zstack.io/managed-by";
/// The value of [`MANAGED_BY`] on the Subnets the controller keeps.
pub const MANAGED_BY_CONTROLLER: &str = "zstack-ovn-controller";

/// The prefix of the annotation a node agent puts on the uninstall marker ConfigMap (the
/// chart's `pre-delete` hook creates it on `helm uninstall`) to say it saw the marker and
/// will clean its node at SIGTERM; the value is the time (RFC 3339). The full key is
/// [`uninstall_ack_key`].
pub const UNINSTALL_ACK_PREFIX: &str = "network.zstack.io/ack.";

/// Longest name part (after the `/`) of an annotation key.
const KEY_NAME_MAX: usize = 63;

/// The acknowledgement key of node `node` on the uninstall marker:
/// `network.zstack.io/ack.<node>`, or, when that name part would pass the 63 characters
/// Kubernetes allows, `ack.<the node name's first 42 characters>-<16 hex digits of its
/// hash>`. The agent writes it and the hook looks for it: both sides call this function.
pub fn uninstall_ack_key(node: &str) -> String {
    // the name part of the prefix: `ack.`
    let name_prefix = UNINSTALL_ACK_PREFIX
        .split_once('/')
        .map_or(UNINSTALL_ACK_PREFIX, |(_, n)| n);
    if name_prefix.len() + node.len() <= KEY_NAME_MAX {
        return format!("{UNINSTALL_ACK_PREFIX}{node}");
    }
    let hash = crate::hash::hex(node.as_bytes());
    let room = KEY_NAME_MAX - name_prefix.len() - 1 - hash.len();
    // node names are DNS subdomains (ASCII), but never split a character whatever comes
    let mut cut = room.min(node.len());
    while !node.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{UNINSTALL_ACK_PREFIX}{}-{hash}", &node[..cut])
}

/// Event reason (on a Node, from its agent's pinger): a peer node's tunnel endpoint or
/// its sampled pods stopped answering.
pub const REASON_PEER_UNREACHABLE: &str = "PeerUnreachable";
/// Event reason (on a Node, from its agent's pinger): an unreachable peer answers again.
pub const REASON_PEER_REACHABLE: &str = "PeerReachable";
/// Event reason: a Service the controller cannot fully use.
pub const REASON_SERVICE_PROBLEM: &str = "ServiceProblem";
/// Event reason (on a Node, from its agent): a Service address (externalIP or ingress IP)
/// the node must keep (its own, a next hop, a network it routes): no route, no NAT rule.
pub const REASON_SERVICE_ADDRESS_REFUSED: &str = "ServiceAddressRefused";
/// Event reason: a Subnet whose spec the controller refuses (its `Ready` condition says
/// the same), e.g. an `externalLogicalSwitch` the platform deleted or made another network.
pub const REASON_SUBNET_INVALID: &str = "SubnetInvalid";
/// Event reason: a NetworkPolicy the controller cannot fully apply.
pub const REASON_POLICY_PROBLEM: &str = "PolicyProblem";
/// Event reason (on a Node, from the controller): `shared` gateway mode built no gateway
/// router for the node, and why (its pods leave through its management port).
pub const REASON_GATEWAY_ROUTER_MISSING: &str = "GatewayRouterMissing";
/// Event reason: the node fell back from its configured datapath.
pub const REASON_DATAPATH_FALLBACK: &str = "DatapathFallback";
/// Event reason: the node's datapath configuration is invalid.
pub const REASON_DATAPATH_CONFIG_ERROR: &str = "DatapathConfigError";
