//! The OVSDB client, OVN RBAC and the controller on real ovsdb-server/ovn-northd (no Kubernetes).
//!
//! One test binary for these files (each a module, its tests named `<file>::<test>`):
//! linking one binary instead of one per file is most of an edit-test cycle. Heavy tests
//! still take [`tests::heavy_lock`], so they run one at a time as before.

mod chassis_certs;
mod control_controller;
mod control_reconcile;
mod control_secondary;
mod netpol_reconcile;
mod ovn_db_exporter;
mod ovn_rbac;
mod ovsdb_cluster;
mod ovsdb_server;
mod services_nb;
