//! The node's host side: what the agent sets up outside OVS so pods and Services work
//! on this host.
//!
//! - [`mgmt`]: the management port `ovn-k8s-mp0` (OVS internal port + host address and
//!   Subnet routes);
//! - [`platform_mgmt`]: external mode: the host's ports on the platform's switches where
//!   it hosts pods (host ↔ pod, kubelet's probes);
//! - [`uplink`]: the node's uplink port (br-phy's NIC): AF_XDP on the userspace
//!   datapaths, with a kernel-port fallback;
//! - [`dpdk_nic`]: a DPDK NIC (PCI device or vdev) as the uplink: the host checks and
//!   their refusals;
//! - [`mtu`]: the pod MTU from the underlay and the encapsulation;
//! - [`gateway`], [`gateway_flows`]: `shared` gateway mode: the gateway bridge's address,
//!   MAC and next hop, and its rules splitting the shared address between the host and
//!   the gateway router;
//! - [`nat`]: Services reached through the host (NodePort, externalIPs, LoadBalancer IPs
//!   DNATed in our nf_tables table `inet zstack-ovn`) and pods' egress masquerade;
//! - [`service_address_guard`]: what a Service may not take from the host (its
//!   addresses, next hops, attached networks).

pub mod dpdk_nic;
pub mod gateway;
pub mod gateway_flows;
pub mod mgmt;
pub mod mtu;
pub mod nat;
pub mod platform_mgmt;
pub mod service_address_guard;
pub mod uplink;
