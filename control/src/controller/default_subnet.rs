//! The cluster's default Subnet, created and kept by the controller from `--cluster-cidr`,
//! so that a fresh install gives pods addresses without any manifest.
//!
//! ## Decisions
//!
//! * **Keeping**: once the state is synced, each pass creates the Subnet named
//!   [`DefaultSubnet::name`] when no Subnet of that name exists, with the label
//!   [`MANAGED_BY`]`=`[`MANAGED_BY_CONTROLLER`] and the spec `{cidr, default: true}`.
//!   Deleted, it comes back on the next pass.
//! * **Never overwritten**: a Subnet of that name with a different `cidr` is left as it is
//!   (addresses handed out from it stay valid); a warning and its `MatchesClusterCIDR=False`
//!   condition say that the flag and the Subnet disagree. A Subnet of that name without our
//!   label is the user's: the controller neither changes it nor reports on it.
//! * **Yielding**: a user's own `default: true` Subnet takes precedence. A managed Subnet
//!   (any Subnet with our label) counts as the newest for every conflict (see
//!   [`crate::validate`]), so a user's Subnet never fails because of it; while a user's
//!   default exists, the managed Subnet is served with `default` off (pods holding
//!   addresses in it keep them) and its `ClusterDefault=False` condition names the Subnet it
//!   yields to. Without a user default, the managed Subnet is the default.

use std::borrow::Cow;

use api::keys::{MANAGED_BY, MANAGED_BY_CONTROLLER};
use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::Controller;
use super::state::ClusterState;
use crate::crd::{Subnet, SubnetSpec, condition_now};
use crate::source::Writer;
use crate::translate::DefaultSubnet;
use api::subnet::{
    CONDITION_CLUSTER_DEFAULT, CONDITION_MATCHES_FLAG, REASON_CIDR_MATCHES, REASON_CIDR_MISMATCH,
    REASON_SERVING_DEFAULT, REASON_YIELDS,
};

/// True when the controller created (and keeps) this Subnet.
pub fn is_managed(subnet: &Subnet) -> bool {
    subnet
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY))
        .is_some_and(|v| v == MANAGED_BY_CONTROLLER)
}

/// The Subnet object the controller creates for `d`.
pub fn object(d: &DefaultSubnet) -> Subnet {
    let mut s = Subnet::new(
        &d.name,
        SubnetSpec {
            cidr: d.cidr_field(),
            default: true,
            ..SubnetSpec::default()
        },
    );
    s.metadata.labels = Some([(MANAGED_BY.to_string(), MANAGED_BY_CONTROLLER.to_string())].into());
    s
}

/// The user's `default: true` Subnet a managed one yields to: the oldest (creation time,
/// unknown last, then name) of the Subnets without our label.
pub fn user_default(state: &ClusterState) -> Option<&str> {
    state
        .subnets
        .iter()
        .filter(|(_, s)| s.spec.default && !is_managed(s))
        .min_by(|(a, sa), (b, sb)| {
            let ka = sa.metadata.creation_timestamp.as_ref();
            let kb = sb.metadata.creation_timestamp.as_ref();
            (ka.is_none(), ka, a).cmp(&(kb.is_none(), kb, b))
        })
        .map(|(n, _)| n.as_str())
}

/// The spec Subnet `name` is validated and served with: a managed Subnet loses `default`
/// while a user's default Subnet exists.
pub fn effective_spec<'a>(state: &'a ClusterState, name: &str) -> Option<Cow<'a, SubnetSpec>> {
    let subnet = state.subnets.get(name)?;
    if subnet.spec.default && is_managed(subnet) && user_default(state).is_some() {
        let mut spec = subnet.spec.clone();
        spec.default = false;
        return Some(Cow::Owned(spec));
    }
    Some(Cow::Borrowed(&subnet.spec))
}

/// Why the Subnet and the flag disagree, or `None` when its `cidr` is the flag's.
pub fn mismatch(d: &DefaultSubnet, subnet: &Subnet) -> Option<String> {
    let theirs: Vec<IpNet> = subnet
        .spec
        .cidr
        .split(',')
        .map(|c| c.trim().parse::<IpNet>().map(|n| n.trunc()))
        .collect::<Result<_, _>>()
        .unwrap_or_default();
    (theirs != d.cidrs).then(|| {
        format!(
            "the controller's --cluster-cidr is {} but Subnet {} has cidr {:?}: the Subnet is left as it is (edit it, or delete it to have it re-created from the flag)",
            d.cidr_field(),
            d.name,
            subnet.spec.cidr
        )
    })
}

/// The conditions a managed Subnet carries besides `Ready`.
pub fn conditions(
    state: &ClusterState,
    flag: Option<&DefaultSubnet>,
    subnet: &Subnet,
) -> Vec<Condition> {
    let name = subnet.metadata.name.as_deref().unwrap_or_default();
    let mut out = Vec::new();
    if subnet.spec.default {
        out.push(match user_default(state) {
            Some(user) => condition_now(
                CONDITION_CLUSTER_DEFAULT,
                false,
                REASON_YIELDS,
                format!(
                    "yields to Subnet {user} (default: true): pods of namespaces without a Subnet get their addresses there; pods holding addresses here keep them"
                ),
            ),
            None => condition_now(
                CONDITION_CLUSTER_DEFAULT,
                true,
                REASON_SERVING_DEFAULT,
                "the cluster's default Subnet: pods of namespaces without a Subnet get their addresses here".to_string(),
            ),
        });
    }
    if let Some(d) = flag.filter(|d| d.name == name) {
        out.push(match mismatch(d, subnet) {
            Some(why) => condition_now(CONDITION_MATCHES_FLAG, false, REASON_CIDR_MISMATCH, why),
            None => condition_now(
                CONDITION_MATCHES_FLAG,
                true,
                REASON_CIDR_MATCHES,
                format!("cidr is the controller's --cluster-cidr {}", d.cidr_field()),
            ),
        });
    }
    out
}

impl<W: Writer> Controller<W> {
    /// Creates the default Subnet when no Subnet of its name exists; warns (once per
    /// change) when ours disagrees with the flag.
    pub(super) async fn keep_default_subnet(&mut self) {
        let Some(d) = self.cfg.default_subnet.clone() else {
            return;
        };
        let note = match self.state.subnets.get(&d.name) {
            None => {
                match self.writer.create_subnet(&object(&d)).await {
                    Ok(created) => {
                        tracing::info!(subnet = %d.name, cidr = %d.cidr_field(), managed = is_managed(&created), "created the default Subnet");
                        self.state.subnets.insert(d.name.clone(), created);
                    }
                    Err(e) => {
                        tracing::warn!(subnet = %d.name, error = %e, "cannot create the default Subnet; will retry")
                    }
                }
                return;
            }
            Some(s) if !is_managed(s) => Some(format!(
                "Subnet {} exists without label {MANAGED_BY}={MANAGED_BY_CONTROLLER}: it is the user's, left as it is",
                d.name
            )),
            Some(s) => mismatch(&d, s),
        };
        if note != self.reported.default_note {
            if let Some(n) = &note {
                tracing::warn!(subnet = %d.name, "{n}");
            }
            self.reported.default_note = note;
        }
    }
}

#[cfg(test)]
mod tests;
