//! The lab's side of the operator's tools: each implements a trait or builds a command of
//! the `diag` crate, from the lab's state directory (its object store, its central's and
//! nodes' sockets, its node network namespaces). The cluster's side is in `diag` itself.
//!
//! - [`trace`]: [`trace::LabBackend`], `zovn trace`'s reads and tools;
//! - [`overview`]: `zovn status`'s rows;
//! - [`capture`]: the command running the node agent's `debug capture` in a node's netns.

pub mod capture;
pub mod overview;
pub mod trace;
