//! The lab's pod runtime: "the pod runtime that calls the CNI binary like a container
//! runtime". Pods of the object store become network namespaces, wired by the real
//! `zstack-ovn-cni` shim talking to the node's real `zstack-ovnkube-node` agent, each
//! with a small responder serving its container ports.
//!
//! | module | holds |
//! |---|---|
//! | [`desired`] | [`PodSource`]: what the object store asks of the runtime ([`DesiredPod`]) |
//! | [`runtime`] | [`PodRuntime`]: the per-pod tasks inside the object-store daemon |
//! | [`cni_exec`] | the node's network config, one plugin call (`CNI_*` env, stdin, stdout) |
//! | [`record`] | `pods.json` (what was created, what was learnt), [`record::teardown`] |
//! | [`naming`] | netns names (`<prefix>p-<hash>`) and container ids |
//! | [`responder`] | `zovn lab responder`: TCP/UDP answers with the pod name |
//! | [`probe`] | `zovn lab exec` / `zovn lab probe` from inside a pod netns |
//! | [`networks`] | Multus secondary networks (`k8s.v1.cni.cncf.io/networks`): one ADD each, `network-status` |
//! | [`vhost_pod`] | the "VM" of a vhost-user pod: testpmd virtio-user (server) ⇄ tap `eth0` / `net1`… |
//! | [`vm_pod`] | a VMI with a boot source: a real QEMU guest on the vhost-user `eth0`, its console |

pub mod cni_exec;
pub mod desired;
pub mod naming;
pub mod networks;
pub mod probe;
pub mod record;
pub mod responder;
pub mod runtime;
pub mod vhost_pod;
pub mod vm_pod;

pub use desired::{DesiredPod, PodSource};
pub use record::{PodPhase, PodRecord, PodsFile, PortSpec, Proto};
pub use runtime::PodRuntime;
