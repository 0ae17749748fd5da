//! # vhost — vhost-user sockets for VMs and DPDK pods
//!
//! Socket directory lifecycle, ownership and mode for QEMU, the 108-byte `sun_path` limit,
//! migration-stable paths and Network Plumbing WG device-info.
//!
//! Status: scaffolding; arrives with the vhost-user issue.
