//! # perf — the perf harness
//!
//! Benchmarks that stand on the real lab, run by the `zovn-perf` binary. Figures are
//! reported as rates and as ratios against a baseline measured in the same run (these
//! machines are shared and noisy), printed as a table and written as JSON.
//!
//! - [`ovsdb_insert`]: bulk insert of logical switch ports into a real NB through our
//!   client (batched transactions) versus `ovn-nbctl` (one invocation per port, and one
//!   invocation with every command), plus the replica's memory per row.
//! - [`control_sync`]: the controller's cold sync of 10,000 pods over 20 Subnets into a
//!   real NB, and its restart with nothing changed (time to steady state, NB writes).
//! - [`cni_add`]: CNI ADD latency (p50/p99) and pods/s through the real shim and node
//!   agents per datapath (kernel, afxdp, dpdk, vhost-user) on one lab with a node per
//!   datapath, sequential and concurrent, ratios to the kernel node, per-phase breakdown
//!   from the agents' `CNI ADD phases` lines; on the kernel node also the same per-pod work
//!   done by hand with `ip`/`ethtool`/`ovs-vsctl`/`ovn-nbctl`.
//! - [`datapath_bench`]: pod-to-pod iperf3/qperf on one node through AF_XDP ports, kernel
//!   fallback ports and a direct veth pair (the ceiling), with the target ratios.
//!   [`pmd_sleep_modes`]: the AF_XDP pair again under each `pmdMaxSleep` (busy, static,
//!   adaptive) with the idle node's CPU cost under each.
//! - [`node_memory`]: ovs-vswitchd memory per pod on one node at growing pod counts, per
//!   datapath (kernel, afxdp, dpdk), with the agent's AF_XDP port budget.
//! - [`guard_bench`]: the megaflow guard's check time and ovs-vswitchd main-thread stall
//!   on a bare ovs-vswitchd with thousands of datapath flows, against an idle probe.
//! - [`netpol_bench`]: NetworkPolicy create → enforced on a 2-node lab with 100 pods
//!   (p50/p99, first probe with the new verdict) and NB rows as pods/policies grow.
//! - [`service_lb`]: Service endpoint change → Load_Balancer updated in a real NB (p50/p99,
//!   vs the same one-row write done directly), and NB rows as the number of Services grows.
//! - [`host`]: running host tools, the heavy-test lock, lab teardown.
//! - [`vhost_bench`]: 64 B packet rate through the OVS-DPDK PMD between two vhost-user
//!   ports, created by the node agent versus by hand with `ovs-vsctl` (target ≥ 0.95×).
//! - [`matrix_bench`]: per datapath, node ↔ node, pod ↔ pod on one node and across nodes:
//!   iperf3, qperf `tcp_lat`/`udp_lat`/`udp_bw` (zstack-ovn-kubernetes' benchmark matrix).
//! - [`vm_bench`]: a real QEMU guest (TCG) on vhost-user vs testpmd as the VM, TCP from a
//!   pod on the other node both ways, and the guest's boot split.
//! - [`pod_burst`]: issue #17's user test per datapath (fresh 2-node lab, N pods at once,
//!   apply → all Ready, moves to AF_XDP, traffic of running pods during a burst), with
//!   [`phase_log`] (the agents' churn log lines), [`traffic_gap`] (ping/iperf3 probe) and
//!   [`vswitchd_ports`] (ports really open as AF_XDP).
//! - [`alloc`]: the counting allocator behind the memory figures.

pub mod alloc;
pub mod cni_add;
pub mod control_sync;
pub mod datapath_bench;
pub mod egress_bench;
pub mod guard_bench;
pub mod host;
pub mod matrix_bench;
pub mod netpol_bench;
pub mod node_memory;
pub mod ovsdb_insert;
pub mod phase_log;
pub mod pmd_sleep_modes;
pub mod pod_burst;
pub mod service_lb;
pub mod traffic_gap;
pub mod udp_probe;
pub mod vhost_bench;
pub mod vm_bench;
pub mod vswitchd_ports;
