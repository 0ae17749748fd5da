//! # hostio — host I/O primitives, written once
//!
//! The bottom crate for what several crates do to the host and must do the same way.
//! Depends on nothing of the workspace; everything above may use it.
//!
//! | module | holds |
//! |---|---|
//! | [`atomic`] | replace a file so a reader sees the old or the new content, never a part, with an explicit [`Durability`] |
//! | [`netdev`] | network-device syscalls (interface flags, ethtool values, an `AF_PACKET` socket) behind safe functions with a typed [`netdev::SysError`] |

pub mod atomic;
pub mod netdev;

pub use atomic::{Durability, write_atomic, write_atomic_with};
