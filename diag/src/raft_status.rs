//! `cluster/status` parsed (Raft role, term, leader): the parser lives with the OVSDB
//! client ([`ovsdb::cluster_status`]), which the OVN database exporter shares.

pub use ovsdb::cluster_status::{ClusterStatus, parse_cluster_status};
