//! # lab — the local lab
//!
//! Starts and stops real OVN central daemons and N simulated nodes (each a network
//! namespace with its own ovsdb-server, ovs-vswitchd and ovn-controller) in a private state
//! directory. Used by the tests, the benchmarks and the `zovn lab` CLI.
