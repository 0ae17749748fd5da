//! The local lab: real OVN central and OVS nodes in network namespaces, pods, Services, policies, egress, diagnostics.
//!
//! One test binary for these files (each a module, its tests named `<file>::<test>`):
//! linking one binary instead of one per file is most of an edit-test cycle. Heavy tests
//! still take [`tests::heavy_lock`], so they run one at a time as before.

mod capture_lab;
mod default_subnet_lab;
mod dpdk_uplink_lab;
mod egress_lab;
mod egress_shared_lab;
mod examples_lab;
mod external_clients_lab;
mod external_mode_faults_lab;
mod external_mode_lab;
mod external_mode_sg_lab;
mod lab;
mod lab_apply;
mod lab_external;
mod lab_pods;
mod netpol_lab;
mod pinger_lab;
mod services_host_lab;
mod services_lab;
mod trace_lab;
mod uplink_lab;
mod vlan_underlay_lab;
mod vxlan_lab;
