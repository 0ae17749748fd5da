//! The node agent on real OVS: datapaths, metrics, the megaflow guard, vhost-user, CNI through containerd.
//!
//! One test binary for these files (each a module, its tests named `<file>::<test>`):
//! linking one binary instead of one per file is most of an edit-test cycle. Heavy tests
//! still take [`tests::heavy_lock`], so they run one at a time as before.

mod cni_agent_restart;
mod cni_containerd;
mod datapath;
mod datapath_metrics;
mod megaflow_guard;
mod node_agent;
mod node_scale;
mod vhost_hugepages;
mod vhost_pod;
mod vhost_refusals;
mod vhost_secondary;
mod vm_guest;
