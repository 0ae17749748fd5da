//! # control — the control plane
//!
//! Reconciles Kubernetes objects (the `network.zstack.io/v1` Subnet CRD, Pods, Nodes, and
//! later Services and NetworkPolicies) into the OVN Northbound database. Pure translators
//! produce the desired rows, a reconciler diffs them against an [`ovsdb`] replica and writes
//! batched transactions touching only rows it owns. Ships the `zstack-ovnkube-controller`
//! binary and `crdgen` (writes `deploy/crds/subnet.yaml` from the Rust types).
//!
//! | module | holds |
//! |---|---|
//! | [`model`] | the plain cluster model (pods, nodes, validated subnets, addresses) |
//! | [`crd`] | the Subnet custom resource (`network.zstack.io/v1`) and its YAML |
//! | [`validate`] | Subnet spec → [`model::ValidSubnet`] or reasons a person understands |
//! | [`ipam`] | per-Subnet address and MAC allocation, pod annotation requests |
//! | [`names`] | row names and the `external_ids` ownership marks |
//! | [`translate`] | pure translators: model → [`desired::DesiredNb`] |
//! | [`controller`] | the level-triggered pass: validate, IPAM, translate, reconcile, write back |
//! | [`chassis`] | SB chassis cleanup when a node is deleted |
//! | [`annotation`] | the `k8s.ovn.org/pod-networks` annotation and friends |
//! | [`source`] | object sources (kube-rs watchers, in-process store) and writers |
//! | [`reconcile`] | diff desired rows against the NB replica → batched transactions |
//! | [`netpol`] | NetworkPolicy → Port_Groups, Address_Sets, stateful ACLs (pure) |
//! | [`services`] | Services and their endpoints (model, conversion, backend selection) |
//! | [`multus`] | Multus secondary networks: network selections, our NADs and their Subnet |

pub mod annotation;
pub mod chassis;
pub mod controller;
pub mod crd;
pub mod desired;
pub mod ipam;
pub mod model;
pub mod multus;
pub mod names;
pub mod netpol;
pub mod reconcile;
pub mod services;
pub mod source;
pub mod translate;
pub mod validate;
