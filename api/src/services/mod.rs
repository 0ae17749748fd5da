//! Services and their endpoints as the controller and the node agent's host NAT see them,
//! independent of where they come from (discovery.k8s.io/v1 EndpointSlices, core v1
//! Endpoints on servers without v1 slices, or the lab's EndpointSlice producer).
//!
//! | file | holds |
//! |---|---|
//! | [`model`] | [`ServiceInfo`], [`EndpointSliceInfo`] |
//! | `convert` (feature `k8s`) | Kubernetes `Service`, `EndpointSlice`, `Endpoints` → the model, with the problems found |
//! | [`external_ips`] | which `spec.externalIPs` a Service may claim (the administrator's allowlist; empty refuses all) |
//! | [`select`] | which endpoints back a Service port (ready, else serving+terminating; per family; per node), for the controller's load balancers and the agent's `externalTrafficPolicy: Local` rules alike |

#[cfg(feature = "k8s")]
pub mod convert;
pub mod external_ips;
pub mod model;
pub mod select;

pub use external_ips::ExternalIpPolicy;
pub use model::{
    EndpointInfo, EndpointPort, EndpointSliceInfo, Proto, ServiceInfo, ServicePort, TargetPort,
};
