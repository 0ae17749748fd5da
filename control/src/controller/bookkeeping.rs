//! The controller's bookkeeping, by concern: [`Addressing`] (the allocator and what it
//! serves), [`ChassisCleanup`] (deleted nodes' chassis still in the SB) and [`Reported`]
//! (warnings already given). Each is rebuilt from the cluster after a restart: addresses
//! from the pods' annotations and the NB, chassis from the Nodes, warnings by the next pass.

use std::collections::{BTreeMap, BTreeSet};

use crate::ipam::Ipam;
use crate::model::ValidSubnet;
use crate::translate;

/// Addresses: the allocator, the Subnets it serves, who holds what, why pods have none.
pub(super) struct Addressing {
    pub(super) ipam: Ipam,
    /// Subnets being served (valid now, or last valid before an invalid edit).
    pub(super) served: BTreeMap<String, ValidSubnet>,
    /// Problems of Subnets whose current spec is invalid.
    pub(super) problems: BTreeMap<String, String>,
    /// Pod keys holding addresses.
    pub(super) assigned: BTreeSet<String>,
    /// Node names holding a join address.
    pub(super) nodes_assigned: BTreeSet<String>,
    /// (node, Subnet) pairs holding an address for the node's management port on the
    /// Subnet's platform switch (external mode, [`super::platform_mgmt`]).
    pub(super) platform_mgmt: BTreeSet<(String, String)>,
    /// Pod key → why it has no address.
    pub(super) pod_errors: BTreeMap<String, String>,
    /// Whether the addresses of existing pods were restored (once, after the first lists).
    pub(super) restored: bool,
}

impl Addressing {
    /// Nothing served or assigned yet, on `ipam` (which may hold the join Subnets).
    pub(super) fn new(ipam: Ipam) -> Addressing {
        Addressing {
            ipam,
            served: BTreeMap::new(),
            problems: BTreeMap::new(),
            assigned: BTreeSet::new(),
            nodes_assigned: BTreeSet::new(),
            platform_mgmt: BTreeSet::new(),
            pod_errors: BTreeMap::new(),
            restored: false,
        }
    }
}

/// Deleted nodes whose chassis the SB still has (standalone mode).
#[derive(Default)]
pub(super) struct ChassisCleanup {
    /// Southbound client for node-deletion cleanup (none: nothing is removed).
    pub(super) sb: Option<crate::chassis::Southbound>,
    /// Chassis name of every node seen (annotation, else the node name).
    pub(super) chassis_of: BTreeMap<String, String>,
    /// Deleted nodes whose chassis still has to be removed: (node, chassis).
    pub(super) cleanup: BTreeSet<(String, String)>,
}

/// Warnings already given, so each is logged and evented once per change.
#[derive(Default)]
pub(super) struct Reported {
    /// NetworkPolicy problems already reported.
    pub(super) policy_problems: BTreeSet<crate::netpol::Problem>,
    /// Service problems already reported (`namespace/name: problem`).
    pub(super) service_problems: BTreeSet<String>,
    /// Subnet problems already reported, by Subnet.
    pub(super) subnet_problems: BTreeMap<String, String>,
    /// Nodes without a gateway router in `shared` mode and why, as last reported.
    pub(super) gateway_problems: translate::egress::GatewayProblems,
    /// The last warning about the default Subnet (logged once per change).
    pub(super) default_note: Option<String>,
}
