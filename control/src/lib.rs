//! # control — the control plane
//!
//! Reconciles Kubernetes objects (the `network.zstack.io/v1` Subnet CRD, Pods, Nodes,
//! Services with their Endpoints, NetworkPolicies, Multus NetworkAttachmentDefinitions) into the OVN Northbound database. Pure translators
//! produce the desired rows, a reconciler diffs them against an [`ovsdb`] replica and writes
//! batched transactions touching only rows it owns. Ships the `zstack-ovnkube-controller`
//! binary, `zstack-ovn-dbexporter` (OVN central's metrics) and `crdgen` (writes `deploy/helm/zstack-ovn/crds/subnet.yaml` from the Rust types).
//!
//! What the controller shares with the node agent (annotation keys and codecs, the Subnet
//! CRD types, the Service model, persistent names and their hash) lives in the contract
//! crate [`api`]; the modules below re-export those items where older paths use them.
//!
//! | module | holds |
//! |---|---|
//! | [`model`] | the plain cluster model (pods, nodes, validated subnets; [`api::Mac`], [`api::pod_networks::PodAddresses`] re-exported) |
//! | [`crd`] | the Subnet custom resource's YAML (types: [`api::subnet`], re-exported) |
//! | [`validate`] | Subnet spec → [`model::ValidSubnet`] or reasons a person understands |
//! | [`address_space`] | one CIDR's reserved addresses, default gateway and size: the one rule IPAM and validation follow |
//! | [`ipam`] | per-Subnet address and MAC allocation, pod annotation requests |
//! | [`names`] | row names and the `external_ids` ownership marks (persistent ones from [`api::names`]) |
//! | [`translate`] | pure translators: model → [`desired::DesiredNb`] |
//! | [`controller`] | the level-triggered pass: validate, IPAM, translate, reconcile, write back |
//! | [`leader`] | leader election on a `coordination.k8s.io/v1` Lease (client-go's protocol) |
//! | [`metrics`] | the controller's Prometheus metrics |
//! | [`logging`] | the binaries' `tracing` setup (`RUST_LOG`, `--log-json`) |
//! | [`ovn_db_metrics`] | OVN central's health (Raft role, term, lag, sizes; ovn-northd active) for `zstack-ovn-dbexporter` |
//! | [`chassis`] | SB chassis cleanup when a node is deleted |
//! | [`chassis_signer`] | approves and signs the node agents' per-chassis OVN certificates |
//! | [`agent_identity`] | which node an agent's request comes from (its pod-bound token) |
//! | [`admission`] | the validating webhook: agents write only their own Node, nobody else the controller's pod annotations |
//! | [`annotation`] | re-export of [`api::pod_networks`] (the `k8s.ovn.org/pod-networks` codec) |
//! | [`source`] | object sources (kube-rs watchers, in-process store) and writers |
//! | [`reconcile`] | diff desired rows against the NB replica → batched transactions |
//! | [`netpol`] | NetworkPolicy → Port_Groups, Address_Sets, stateful ACLs (pure) |
//! | [`services`] | Services and their endpoints: backend selection (model and conversion from [`api::services`]) |
//! | [`multus`] | IPAM owner keys of secondary networks; selections and NADs from [`api::multus`] |

pub mod address_space;
pub mod admission;
pub mod agent_identity;
pub mod annotation;
pub mod chassis;
pub mod chassis_signer;
pub mod controller;
pub mod crd;
pub mod desired;
pub mod ipam;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod multus;
pub mod names;
pub mod netpol;
pub mod ovn_db_metrics;
pub mod reconcile;
pub mod services;
pub mod source;
pub mod translate;
pub mod validate;
