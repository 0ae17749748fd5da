//! # dataplane — the node agent
//!
//! Chooses and tunes the node's datapath (OVS-DPDK → AF_XDP → kernel veth), manages OVS
//! bridges and ports through the [`ovsdb`] client on the local `Open_vSwitch` database,
//! plumbs pod interfaces with rtnetlink, and serves the CNI socket. Ships the
//! `zstack-ovnkube-node` binary.
//!
//! Status: scaffolding; the agent arrives with the node-agent issue.
