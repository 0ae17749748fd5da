//! The Subnet custom resource (`network.zstack.io/v1`): its types live in the contract
//! crate ([`api::subnet`], re-exported here); this module writes its CRD YAML
//! (`deploy/helm/zstack-ovn/crds/subnet.yaml`, by the `crdgen` binary) and applies the CRD
//! to the cluster at the controller's start ([`apply`]).

pub mod apply;

pub use api::subnet::{
    CONDITION_READY, REASON_ACTIVE, REASON_INVALID_SPEC, Subnet, SubnetPhase, SubnetSpec,
    SubnetStatus, condition_now,
};

/// The CRD YAML `crdgen` writes and `deploy/helm/zstack-ovn/crds/subnet.yaml` holds.
pub fn crd_yaml() -> Result<String, serde_norway::Error> {
    use kube::CustomResourceExt;
    let body = serde_norway::to_string(&Subnet::crd())?;
    Ok(format!("{CRD_YAML_HEADER}{body}"))
}

/// The comment heading the generated YAML.
pub const CRD_YAML_HEADER: &str = "# Generated from api/src/subnet.rs: do not edit.\n\
# Regenerate with: cargo run -p control --bin crdgen -- deploy/helm/zstack-ovn/crds/subnet.yaml\n";

#[cfg(test)]
mod tests;
