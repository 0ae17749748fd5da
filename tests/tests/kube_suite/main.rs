//! The controller and the node agent on a real kube-apiserver + etcd.
//!
//! One test binary for these files (each a module, its tests named `<file>::<test>`):
//! linking one binary instead of one per file is most of an edit-test cycle. Heavy tests
//! still take [`tests::heavy_lock`], so they run one at a time as before.

mod admission_webhook;
mod agent_kube;
mod control_kube;
mod control_kube_secondary;
mod control_leader;
mod default_subnet_kube;
mod events_kube;
mod kube_apiserver;
mod services_kube;
mod tenant_attacks;
mod uninstall_kube;
