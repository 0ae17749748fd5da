//! Pure translators: the cluster model → the desired OVN Northbound rows ([`DesiredNb`]).
//!
//! No I/O here; every function is a plain mapping testable without a cluster.
//!
//! | file | translates |
//! |---|---|
//! | [`topology`] | the cluster router and the join switch |
//! | [`subnet`] | a Subnet → its logical switch, router port, localnet port (VLAN) |
//! | [`pod`] | a pod with its addresses → a logical switch port |
//! | [`node`] | a node with its join address → its management port |
//! | [`service`] | Services and EndpointSlices → load balancers (one per Service and protocol) |
//! | [`egress`] | pods' traffic leaving the cluster → router policies to their node's gateway |
//! | [`gateway_return`] | `shared` mode: replies of `externalTrafficPolicy: Local` endpoints back through their node's management port |
//! | [`gateway_router`] | `shared` gateway mode: a node's gateway report → its gateway router, external switch, routes and SNAT |

pub mod egress;
pub mod gateway_return;
pub mod gateway_router;
pub mod node;
pub mod pod;
pub mod service;
pub mod subnet;
pub mod topology;

use std::net::{IpAddr, Ipv4Addr};

use ipnet::{IpNet, Ipv4Net};

use crate::desired::DesiredNb;
use crate::model::{NodeInfo, PodAddresses, PodInfo, ValidSubnet};

/// Deployment mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// We own the OVN databases.
    Standalone,
    /// The OVN databases belong to an IaaS platform; we only add our own rows.
    External,
}

/// Cluster-wide settings the translators need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The value of `external_ids:zstack.io/owner` on every row we create.
    pub cluster_id: String,
    pub mode: Mode,
    /// The join switch's network (node management ports); default 100.64.0.0/16.
    pub join_cidr: IpNet,
    /// The cluster router's address on the join switch (first address of the join CIDR).
    pub join_gateway: IpAddr,
    /// The join network's IPv6 part (management ports get an IPv6 address too: IPv6
    /// egress in `local` mode); `None`: IPv4 only.
    pub join_v6: Option<JoinV6>,
    /// Service CIDRs (Subnets must not overlap them).
    pub service_cidrs: Vec<IpNet>,
    /// The default Subnet the controller creates and keeps (`--cluster-cidr`); `None`: none.
    pub default_subnet: Option<DefaultSubnet>,
    /// How pods reach addresses outside the cluster ([`egress`]).
    pub gateway: GatewayMode,
    /// The Service `externalIPs` an administrator allows (`--service-external-ip-cidrs`);
    /// the others are refused (a `ServiceProblem` event) and get no VIP.
    pub external_ips: api::services::ExternalIpPolicy,
    /// External mode: Subnets may put their pods in the platform's security groups
    /// (`--platform-security-groups`, off by default).
    pub platform_security_groups: bool,
}

/// The join network's IPv6 part (`--join-cidr-v6`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinV6 {
    pub cidr: IpNet,
    /// The cluster router's IPv6 address on the join switch (the CIDR's first address).
    pub gateway: IpAddr,
}

impl JoinV6 {
    /// From an IPv6 CIDR: the router takes its first host address.
    pub fn new(cidr: IpNet) -> Option<JoinV6> {
        let IpNet::V6(net) = cidr else { return None };
        if net.prefix_len() > 126 {
            return None;
        }
        // the network address itself is the subnet-router anycast address: the next one
        let gateway = std::net::Ipv6Addr::from(u128::from(net.network()) + 1);
        Some(JoinV6 {
            cidr: IpNet::V6(net.trunc()),
            gateway: IpAddr::V6(gateway),
        })
    }
}

/// The egress gateway (`--gateway-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GatewayMode {
    /// Through the pod's own node: the cluster router reroutes the traffic to the node's
    /// management port, the node's kernel forwards it (and masquerades it, `natOutgoing`).
    #[default]
    Local,
    /// Through a gateway router per node (`GR_<node>`) sharing the node's address on its
    /// gateway bridge: SNAT and routing stay in OVN ([`gateway_router`]).
    Shared,
    /// No egress: traffic to addresses outside the cluster is dropped by the cluster router.
    Off,
}

/// The cluster's default Subnet as the controller's flags give it
/// (see [`crate::controller::default_subnet`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultSubnet {
    /// The Subnet's name (`--default-subnet-name`, default [`DefaultSubnet::NAME`]).
    pub name: String,
    /// Its CIDRs, IPv4 first (`--cluster-cidr`, one or one per family).
    pub cidrs: Vec<IpNet>,
}

impl DefaultSubnet {
    /// The default name of the default Subnet.
    pub const NAME: &'static str = "cluster-default";

    /// `spec.cidr` as the Subnet carries it (`v4,v6`).
    pub fn cidr_field(&self) -> String {
        self.cidrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            cluster_id: "zstack-ovn".into(),
            mode: Mode::Standalone,
            join_cidr: IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(100, 64, 0, 0), 16)),
            join_gateway: IpAddr::V4(Ipv4Addr::new(100, 64, 0, 1)),
            join_v6: None,
            service_cidrs: vec![IpNet::V4(Ipv4Net::new_assert(
                Ipv4Addr::new(10, 96, 0, 0),
                16,
            ))],
            default_subnet: None,
            gateway: GatewayMode::Local,
            external_ips: Default::default(),
            platform_security_groups: false,
        }
    }
}

/// What the translators read: validated Subnets, pods and nodes with their addresses.
#[derive(Clone, Debug, Default)]
pub struct Input<'a> {
    pub subnets: Vec<&'a ValidSubnet>,
    pub pods: Vec<(&'a PodInfo, &'a PodAddresses)>,
    pub nodes: Vec<(&'a NodeInfo, &'a PodAddresses)>,
}

/// The logical switch a Subnet's pods attach to: its own, or the platform's.
pub fn switch_of(subnet: &ValidSubnet) -> String {
    subnet
        .external_logical_switch
        .clone()
        .unwrap_or_else(|| crate::names::subnet_switch(&subnet.name))
}

/// Translates the whole model.
pub fn translate(cfg: &ClusterConfig, input: &Input<'_>) -> DesiredNb {
    let mut nb = DesiredNb::default();
    topology::add(cfg, &mut nb);
    for s in &input.subnets {
        subnet::add(cfg, s, &mut nb);
    }
    for (pod, addrs) in &input.pods {
        if let Some(s) = input.subnets.iter().find(|s| s.name == addrs.subnet) {
            nb.add_switch_port(&switch_of(s), pod::port(cfg, pod, addrs));
        }
    }
    for (node, addrs) in &input.nodes {
        nb.add_switch_port(crate::names::JOIN_SWITCH, node::port(cfg, node, addrs));
    }
    nb
}
