//! # dataplane — the node agent
//!
//! Chooses and tunes the node's datapath (OVS-DPDK → AF_XDP → kernel veth), manages OVS
//! bridges and ports through the [`ovsdb`] client on the local `Open_vSwitch` database,
//! plumbs pod interfaces with rtnetlink, and serves the CNI socket. Ships the
//! `zstack-ovnkube-node` binary.
//!
//! Status: scaffolding; the agent arrives with the node-agent issue.
//!
//! ## Modules
//!
//! | module | what |
//! |---|---|
//! | [`pod_iface`] | pod veth plumbing for CNI ADD/DEL/CHECK: [`pod_iface::setup`], [`pod_iface::teardown`], [`pod_iface::check`] (rtnetlink + ethtool ioctl, idempotent) |
//! | [`pod_iface::netns`] | run a closure on a dedicated thread inside a netns, with an rtnetlink handle opened there |

pub mod pod_iface;
