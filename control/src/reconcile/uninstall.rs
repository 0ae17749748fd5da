//! Taking everything of ours out of the Northbound database: what an uninstall needs in
//! external mode, where the databases are the platform's and outlive the plugin.
//!
//! It is the reconciler run against an empty desired state (and an empty platform-group
//! membership): our routers, switches, ports, load balancers and their group, template
//! variables, policies' port groups, ACLs and address sets go; on the platform's rows only
//! our own writes are undone (our ports out of its switches and security groups, our
//! group out of its switches' `load_balancer_group`). Nothing of anyone else's is touched.

use std::collections::BTreeMap;

use super::{Outcome, ReconcileError, Reconciler};
use crate::desired::DesiredNb;
use crate::names::OWNER;
use crate::netpol::PolicyNb;

/// What [`Reconciler::remove_all`] did and what of ours is still there.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Removal {
    pub outcome: Outcome,
    /// `TABLE name-or-uuid` of every row still marked ours (none after a clean removal).
    pub left: Vec<String>,
}

impl Reconciler {
    /// Removes every row of ours and our writes to the platform's rows; passes until one
    /// writes nothing (a group goes after its rows, a policy's rows after its port group),
    /// then the policies' rows without their grace period.
    pub async fn remove_all(&self) -> Result<Removal, ReconcileError> {
        let nothing = DesiredNb {
            platform_groups: Some(BTreeMap::new()),
            ..Default::default()
        };
        let mut total = Outcome::default();
        for _ in 0..5 {
            let o = self.reconcile(&nothing).await?;
            let done = o.transactions == 0;
            total.transactions += o.transactions;
            total.inserts += o.inserts;
            total.updates += o.updates;
            total.deletes += o.deletes;
            total.conflicts.extend(o.conflicts);
            if done {
                break;
            }
        }
        // policies' groups and sets are marked unused above and deleted only after a grace
        // period (a policy that comes back keeps its rows): not at an uninstall
        for _ in 0..3 {
            let mut o = Outcome::default();
            self.reconcile_policy_at(&PolicyNb::default(), &mut o, u64::MAX)
                .await?;
            let done = o.transactions == 0;
            total.transactions += o.transactions;
            total.deletes += o.deletes;
            total.updates += o.updates;
            if done {
                break;
            }
        }
        Ok(Removal {
            outcome: total,
            left: self.rows_of_ours(),
        })
    }

    /// Every row marked ours, as `TABLE name` (or uuid), and our load balancer group.
    pub fn rows_of_ours(&self) -> Vec<String> {
        let owner = self.owner.clone();
        let group = crate::names::lb_group(&owner);
        self.replica.read(|v| {
            let tables: Vec<&str> = v.tables().collect();
            tables
                .into_iter()
                .flat_map(|t| {
                    v.rows(t)
                        .filter(|r| {
                            r.map_get("external_ids", OWNER) == Some(owner.as_str())
                                || (t == "Load_Balancer_Group" && r.str("name") == group)
                        })
                        .map(|r| {
                            let name = r.str("name");
                            if name.is_empty() {
                                format!("{t} {}", r.uuid())
                            } else {
                                format!("{t} {name}")
                            }
                        })
                        .collect::<Vec<_>>()
                })
                .collect()
        })
    }
}
