//! The desired OVN Northbound state: what the translators produce and the reconciler makes
//! true.
//!
//! Rows are typed ([`ovsdb::nb`]) and keyed by name. Parents (routers, switches) own their
//! children (router ports, switch ports) through their `ports` column. A parent marked
//! `owned: false` is a foreign row (external mode: the platform's switch): the reconciler
//! never changes it beyond adding and removing its own ports in its `ports` set.

use std::collections::{BTreeMap, BTreeSet};

use ovsdb::nb::{
    LoadBalancer, LoadBalancerColumn as LbCol, LogicalRouter, LogicalRouterColumn as LrCol,
    LogicalRouterPort, LogicalRouterPortColumn as LrpCol, LogicalSwitch,
    LogicalSwitchColumn as LsCol, LogicalSwitchPort, LogicalSwitchPortColumn as LspCol,
};

/// A parent row and its children, by name.
#[derive(Clone, Debug, PartialEq)]
pub struct Parent<P, C> {
    pub row: P,
    /// False for a foreign parent whose only managed part is our children in its `ports`.
    pub owned: bool,
    pub children: BTreeMap<String, C>,
}

impl<P, C> Parent<P, C> {
    pub fn owned(row: P) -> Self {
        Parent {
            row,
            owned: true,
            children: BTreeMap::new(),
        }
    }
    pub fn foreign(row: P) -> Self {
        Parent {
            row,
            owned: false,
            children: BTreeMap::new(),
        }
    }
}

/// Everything the control plane wants in the NB.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DesiredNb {
    pub routers: BTreeMap<String, Parent<LogicalRouter, LogicalRouterPort>>,
    pub switches: BTreeMap<String, Parent<LogicalSwitch, LogicalSwitchPort>>,
    /// Service load balancers and the switches they apply on.
    pub load_balancers: DesiredLbs,
    /// NetworkPolicy port groups, address sets and ACLs ([`crate::netpol`]); the egress
    /// gateway's per-node address sets go with them.
    pub netpol: crate::netpol::PolicyNb,
    /// Routing policies, static routes and NAT rows by router name (the egress gateway,
    /// [`crate::translate::egress`], [`crate::translate::gateway_router`]).
    pub router_rows: BTreeMap<String, RouterRows>,
    /// External mode: the platform's security groups (Port_Group names) and our ports
    /// that belong in them ([`crate::reconcile::platform_group`]); `None` (standalone
    /// mode): no group of anyone else's is looked at.
    pub platform_groups: Option<BTreeMap<String, BTreeSet<String>>>,
}

/// A router's routing policies, static routes and NAT rows, keyed by
/// [`crate::reconcile::router_rows::ROW_KEY`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouterRows {
    pub policies: BTreeMap<String, ovsdb::nb::LogicalRouterPolicy>,
    pub routes: BTreeMap<String, ovsdb::nb::LogicalRouterStaticRoute>,
    pub nats: BTreeMap<String, ovsdb::nb::Nat>,
}

/// Service load balancers ([`crate::translate::service`]): the `Load_Balancer` rows by
/// name, all members of our Load_Balancer_Group, which is attached to `switches`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DesiredLbs {
    pub rows: BTreeMap<String, LoadBalancer>,
    /// Our logical switches the group is attached to (traffic entering them is balanced).
    pub switches: BTreeSet<String>,
    /// Platform switches (external mode: the `externalLogicalSwitch` of a Subnet) the
    /// group is attached to as well, so the pods there reach Services. The only write to
    /// such a row: one `mutate` of its `load_balancer_group` inserting our group's uuid,
    /// undone by a `mutate` deleting exactly that uuid when no Subnet names the switch.
    pub platform_switches: BTreeSet<String>,
    /// `Chassis_Template_Var` variables by chassis name (template load balancers of
    /// `internalTrafficPolicy: Local` Services, [`crate::translate::service::local`]).
    pub template_vars: BTreeMap<String, BTreeMap<String, String>>,
}

impl DesiredNb {
    /// Adds a switch port under `switch` (which must have been added).
    pub fn add_switch_port(&mut self, switch: &str, port: LogicalSwitchPort) -> bool {
        match self.switches.get_mut(switch) {
            Some(p) => {
                p.children.insert(port.name.clone(), port);
                true
            }
            None => false,
        }
    }

    /// Number of rows (parents and children).
    pub fn len(&self) -> usize {
        self.routers
            .values()
            .map(|p| 1 + p.children.len())
            .sum::<usize>()
            + self
                .switches
                .values()
                .map(|p| 1 + p.children.len())
                .sum::<usize>()
            + self.load_balancers.rows.len()
            + self.netpol.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routers.is_empty() && self.switches.is_empty() && self.load_balancers.rows.is_empty()
    }
}

/// The columns the reconciler manages on each table; others (e.g. columns northd or an
/// operator sets) are left alone.
pub const ROUTER_COLUMNS: &[LrCol] = &[LrCol::ExternalIds, LrCol::Options];
pub const ROUTER_PORT_COLUMNS: &[LrpCol] = &[
    LrpCol::Mac,
    LrpCol::Networks,
    LrpCol::ExternalIds,
    LrpCol::Options,
];
pub const SWITCH_COLUMNS: &[LsCol] = &[LsCol::ExternalIds, LsCol::OtherConfig];
pub const SWITCH_PORT_COLUMNS: &[LspCol] = &[
    LspCol::Addresses,
    LspCol::PortSecurity,
    LspCol::Type,
    LspCol::Options,
    LspCol::ExternalIds,
    LspCol::Tag,
];
pub const LOAD_BALANCER_COLUMNS: &[LbCol] = &[
    LbCol::Vips,
    LbCol::Protocol,
    LbCol::Options,
    LbCol::SelectionFields,
    LbCol::ExternalIds,
];
