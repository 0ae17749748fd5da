//! # vhost — vhost-user sockets for VMs and DPDK pods
//!
//! The pure, testable half of the vhost-user support: what a user asks for (a
//! NetworkAttachmentDefinition config or a pod/VMI annotation), where the socket lives (a
//! directory per pod interface under a short host root, stable per interface name, within
//! the 108-byte `sun_path` limit), its ownership and mode for QEMU, the Network Plumbing WG
//! device-info the workload reads, and the directory's creation and removal. The node
//! agent (`dataplane::attach::vhost`) adds the OVS `dpdkvhostuserclient` port on top.
//! The annotation keys and the socket id / port name (persistent names) come from the
//! contract crate [`api`].
//!
//! | module | holds |
//! |---|---|
//! | [`config`] | [`VhostUserConfig`]: the NAD `vhostUser` block / pod annotation, validated |
//! | [`layout`] | [`SocketLayout`]: stable socket dir + path per (namespace, owner, ifname), `sun_path` check |
//! | [`device_info`] | [`DeviceInfo`] (device-info spec 1.1.0) and the `network-status` entry |
//! | [`socket_dir`] | create (owner/mode), bind into a kubelet volume, remove |
//!
//! SELinux: the agent sets ownership and mode only. On SELinux hosts the platform labels
//! the socket root (e.g. `container_file_t`, or KubeVirt's `virt_launcher` policy); the
//! directory inherits the root's label on creation.

pub mod config;
pub mod device_info;
pub mod layout;
pub mod socket_dir;

pub use config::{ConfigError, Owner, VhostUserConfig};
pub use device_info::DeviceInfo;
pub use layout::{LayoutError, SocketLayout};
