//! # control — the control plane
//!
//! Reconciles Kubernetes objects (the `network.zstack.io/v1` Subnet CRD, Pods, Services,
//! NetworkPolicies, Nodes) into the OVN Northbound database: pure translators produce the
//! desired rows, a reconciler diffs them against an [`ovsdb`] replica and writes batched
//! transactions touching only rows it owns. Ships the `zstack-ovnkube-controller` binary.
//!
//! Status: the foundation (OVSDB client, lab) is in place; the translators arrive with the
//! control-plane issue.
