//! Services and their endpoints as the controller and the node agent's host NAT see them,
//! independent of where they come from (discovery.k8s.io/v1 EndpointSlices, core v1
//! Endpoints on servers without v1 slices, or the lab's EndpointSlice producer).
//!
//! | file | holds |
//! |---|---|
//! | [`model`] | [`ServiceInfo`], [`EndpointSliceInfo`] |
//! | `convert` (feature `k8s`) | Kubernetes `Service`, `EndpointSlice`, `Endpoints` → the model, with the problems found |

#[cfg(feature = "k8s")]
pub mod convert;
pub mod model;

pub use model::{
    EndpointInfo, EndpointPort, EndpointSliceInfo, Proto, ServiceInfo, ServicePort, TargetPort,
};
