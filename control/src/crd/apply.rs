//! The Subnet CRD kept current by the controller (`--apply-crd`): Helm installs the chart's
//! `crds/` only on the first install and never upgrades them, so an upgrade whose Subnet
//! gained a field would leave the cluster on the old schema (the API server would prune the
//! new field from every Subnet). The controller, at start as the leader, applies its own
//! CRD with server-side apply (field manager [`FIELD_MANAGER`], forced: the chart's copy is
//! the same document), so the schema in the cluster is always the running controller's.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, CustomResourceExt};

use super::Subnet;

/// The server-side apply field manager of the controller's CRD writes.
pub const FIELD_MANAGER: &str = "zstack-ovnkube-controller";

/// What one apply did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub name: String,
    /// `metadata.generation` before (None: the CRD did not exist) and after.
    pub generation_before: Option<i64>,
    pub generation_after: Option<i64>,
}

impl Applied {
    /// Whether the schema in the cluster changed.
    pub fn changed(&self) -> bool {
        self.generation_before != self.generation_after
    }
}

/// Applies the Subnet CRD this binary was built with.
pub async fn apply_subnet_crd(client: Client) -> Result<Applied, kube::Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let crd = Subnet::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    let before = crds
        .get_opt(&name)
        .await?
        .and_then(|c| c.metadata.generation);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let after = crds.patch(&name, &pp, &Patch::Apply(&crd)).await?;
    Ok(Applied {
        name,
        generation_before: before,
        generation_after: after.metadata.generation,
    })
}
