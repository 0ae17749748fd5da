//! The pod annotations the controller writes: the codec is the contract's
//! ([`api::pod_networks`], re-exported here so `control::annotation::…` paths keep working).

pub use api::pod_networks::*;
