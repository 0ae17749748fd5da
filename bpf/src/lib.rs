//! # bpf — XDP programs and their loader
//!
//! The XSK redirect program (C, built with clang) and its Rust loader: map pinning and the
//! AF_XDP socket fd hand-off to pods.
//!
//! Status: scaffolding; arrives with the DPDK-first datapath issue.
