//! The contract between the controller (`control`), the node agent (`dataplane`), the CNI
//! plugin (`cni`), the vhost-user layer (`vhost`) and the lab: what one side writes and the
//! other reads. Pure data and pure functions, no I/O.
//!
//! | module | holds |
//! |---|---|
//! | [`api_timeouts`] | how long the Kubernetes clients trust a connection (read, watch) |
//! | [`chassis_cert`] | per-chassis OVN certificates: the signer's name, the requester's identity |
//! | [`keys`] | every annotation key, label and event reason the parts share |
//! | [`lab_store`] | the lab object store's JSON-lines protocol (requests, answers) |
//! | [`external_ids`] | every `external_ids` key on OVN/OVS rows, and the owner values marking ours |
//! | [`pod_networks`] | the `k8s.ovn.org/pod-networks` and mgmt-port codec (typed IPs, MACs) |
//! | [`multus`] | `k8s.v1.cni.cncf.io/networks` selections, NetworkAttachmentDefinitions |
//! | [`gateway`] | the node gateway report of `shared` gateway mode, and its OVN/OVS names |
//! | [`ifname`] | the one rule for network interface names (the CNI spec's) |
//! | [`mac`] | [`Mac`], its one parser and its one formatting |
//! | [`pcap`] | the capture stream between the node agent and `zovn capture`: classic pcap over any `Read`/`Write`, and its protocol version |
//! | `subnet` | the `network.zstack.io/v1` Subnet custom resource types (feature `k8s`) |
//! | [`services`] | the Service/endpoint model, and (feature `k8s`) its conversion from Kubernetes objects |
//! | [`names`] | persistent names both sides compute: ports, LSPs, socket ids, OVN rows |
//! | [`hash`] | THE stable hash (FNV-1a 64) behind persistent names |
//!
//! Persistent names (socket directories, OVS/OVN port names, port groups, template
//! variables) name live objects: a change here renames them on upgrade. `tests/golden.rs`
//! pins each with literal values; a failing golden test is a migration, not a test to
//! update.

pub mod api_timeouts;
pub mod chassis_cert;
pub mod external_ids;
pub mod gateway;
pub mod hash;
pub mod ifname;
pub mod keys;
pub mod lab_store;
pub mod mac;
pub mod multus;
pub mod names;
pub mod pcap;
pub mod platform_mgmt;
pub mod pod_json;
pub mod pod_networks;
pub mod services;
#[cfg(feature = "k8s")]
pub mod subnet;

pub use mac::{BadMac, Mac};
