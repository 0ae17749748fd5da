//! The Subnet custom resource (`network.zstack.io/v1`) and its generated CRD YAML
//! (`deploy/crds/subnet.yaml`, written by the `crdgen` binary).

pub mod subnet;

pub use subnet::{
    CONDITION_READY, REASON_ACTIVE, REASON_INVALID_SPEC, Subnet, SubnetPhase, SubnetSpec,
    SubnetStatus, crd_yaml,
};

#[cfg(test)]
mod tests;
