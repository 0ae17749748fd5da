//! Services and their endpoints as the control plane sees them. The model and its
//! conversion from Kubernetes objects are the contract's ([`api::services`], shared with the
//! node agent's host NAT), re-exported here.
//!
//! | file | holds |
//! |---|---|
//! | [`model`], [`convert`], [`select`] | re-exports of [`api::services::model`], [`api::services::convert`], [`api::services::select`] (which endpoints back a Service port) |

pub use api::services::{convert, model, select};
#[cfg(test)]
pub(crate) mod testing;

pub use model::{
    EndpointInfo, EndpointPort, EndpointSliceInfo, Proto, ServiceInfo, ServicePort, TargetPort,
};

/// The reason of the Warning events on Services the controller cannot fully use.
pub const SERVICE_PROBLEM: &str = api::keys::REASON_SERVICE_PROBLEM;
