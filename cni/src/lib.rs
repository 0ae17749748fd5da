//! # cni — CNI spec 1.1 types and the `zstack-ovn-cni` shim
//!
//! The runtime runs `zstack-ovn-cni` with `CNI_*` variables and the network config on
//! stdin. The shim ([`shim`]) validates them, answers `VERSION` itself and forwards every
//! other command as one [`Request`] over the node agent's unix socket ([`client::call`],
//! framing in [`protocol`]); it prints the agent's [`Response`] — the result converted to
//! the config's `cniVersion` ([`CniResult::to_value`]) or a [`CniError`] — and creates
//! nothing itself.
//!
//! The agent (crate `dataplane`) serves the socket with [`protocol::read_request`] and
//! [`protocol::write_response`] (feature `server`, tokio) and installs the plugin with
//! [`conflist::write`] and [`conflist::install_binary`].
//!
//! Versions: results are produced in 1.1.0, 1.0.0, 0.4.0, 0.3.1 and 0.3.0. Error codes:
//! the spec's well-known ones and ours (100+), listed in [`error::code`].

pub mod client;
pub mod conflist;
pub mod dns;
pub mod error;
pub mod invoke;
pub mod protocol;
pub mod request;
pub mod result;
pub mod shim;
pub mod types;
pub mod version;

pub use error::CniError;
pub use request::{CniArgs, Command, Request, Response};
pub use result::{CniResult, Interface, IpConfig, Route};
pub use shim::DEFAULT_SOCKET;
pub use types::{Dns, GcAttachment, NetConf};
pub use version::{CniVersion, VersionInfo};
