//! Services and their endpoints as the control plane sees them, independent of where they
//! come from (discovery.k8s.io/v1 EndpointSlices, core v1 Endpoints on servers without
//! v1 slices, or the lab's EndpointSlice producer).
//!
//! | file | holds |
//! |---|---|
//! | [`model`] | [`ServiceInfo`], [`EndpointSliceInfo`] |
//! | [`convert`] | Kubernetes `Service`, `EndpointSlice`, `Endpoints` → the model, with the problems found |
//! | [`select`] | which endpoints back a service port (ready, else serving+terminating; per family; per node) |

pub mod convert;
pub mod model;
pub mod select;
#[cfg(test)]
pub(crate) mod testing;

pub use model::{
    EndpointInfo, EndpointPort, EndpointSliceInfo, Proto, ServiceInfo, ServicePort, TargetPort,
};

/// The reason of the Warning events on Services the controller cannot fully use.
pub const SERVICE_PROBLEM: &str = "ServiceProblem";
