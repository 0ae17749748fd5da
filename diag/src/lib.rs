//! # diag — the operator's tools on a running network
//!
//! What `zovn` and `kubectl zovn` do on a cluster, as a library: each tool is written
//! against a small trait of reads and commands, with the cluster's implementation here
//! (`kubectl` and the chart's pods) and the lab's in the `lab` crate, so the operator's
//! plugin links neither the lab nor the controller nor the node agent
//! (`tests/tests/repo_suite/layering.rs` checks it).
//!
//! | module | holds |
//! |---|---|
//! | [`trace`] | `zovn trace SRC DST`: why a packet is delivered or dropped, in Kubernetes terms ([`trace::backend::Backend`]) |
//! | [`overview`] | `zovn status`: OVN central, each node's datapath, pods with problems ([`overview::Overview`]) |
//! | [`capture`] | `zovn capture NS/POD`: the CLI side of a pod port's capture (the node side is the agent's `debug capture`) |
//! | [`backup`] | `zovn backup` / `zovn restore`: a cluster's OVN central databases, through kubectl |
//! | [`ovs_upgrade`] | `zovn upgrade-ovs`: a `helm upgrade`'s new OVS image applied to the OVS pods in place, one at a time |
//! | [`release`] | the chart's pods found by their labels: controller, agents, central |
//! | [`kubectl`] | the `kubectl` runner every cluster backend uses |
//! | [`raft_status`] | `cluster/status` parsed (Raft role, term, leader) |
//!
//! Read-only except `restore` and `upgrade-ovs`, which say what they change first.

pub mod backup;
pub mod capture;
pub mod kubectl;
pub mod overview;
pub mod ovs_upgrade;
pub mod raft_status;
pub mod release;
pub mod trace;
