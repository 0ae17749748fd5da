//! # perf — the perf harness
//!
//! Benchmarks that stand on the real lab: OVSDB bulk insert through our client versus
//! `ovn-nbctl`, replica memory per row; later iperf3/qperf/testpmd drivers.
