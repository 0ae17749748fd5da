//! # ovsdb — an RFC 7047 OVSDB client on tokio
//!
//! Both the control plane (OVN Northbound) and the node agent (local `Open_vSwitch`) speak
//! OVSDB; no maintained Rust client exists, so this crate is ours:
//!
//! - [`value`]: the data model (atoms, sets, maps, uuids) and its JSON wire form.
//! - [`schema`]: `.ovsschema` parsing (used by the typed-row generator and for validation).
//! - [`typed`]: the [`typed::Table`] trait and the generated typed rows for `OVN_Northbound`,
//!   `OVN_Southbound` and `Open_vSwitch` (`nb`, `sb`, `vswitch`).
//!
//! Every fallible entry point returns an error; nothing panics on server input.

pub mod codegen;
#[rustfmt::skip]
pub mod nb;
#[rustfmt::skip]
pub mod sb;
pub mod schema;
pub mod typed;
pub mod value;
#[rustfmt::skip]
pub mod vswitch;

pub use value::{Atom, FromValue, IntoValue, Row, Uuid, Value, ValueError};
