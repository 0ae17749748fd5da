//! The diff of our routing policies, static routes and NAT rows on our routers
//! ([`crate::desired::RouterRows`], the egress gateway: [`crate::translate::egress`] and
//! [`crate::translate::gateway_router`]).
//!
//! A desired row is keyed by [`ROW_KEY`] in its `external_ids`; only rows of the router
//! that carry our owner are compared ([`super::children`]): a policy or route an operator
//! added by hand is never changed or removed.
//!
//! Runs after the routers exist (a pass of its own, like the NetworkPolicy rows): a router
//! the view does not hold yet gets its rows on the next pass.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ovsdb::Uuid;
use ovsdb::nb::{
    LogicalRouter, LogicalRouterPolicy, LogicalRouterPolicyColumn as PolCol,
    LogicalRouterStaticRoute, LogicalRouterStaticRouteColumn as RouteCol, Nat, NatColumn as NatCol,
};
use ovsdb::replica::View;
use ovsdb::typed::Table;

use super::children::{self, Child, Parent};
use super::{Plan, ReconcileError, Reconciler};
use crate::desired::RouterRows;
use crate::names::OWNER;

/// `external_ids` key naming one of our policies or routes within its router.
pub use api::external_ids::nb::ROW as ROW_KEY;

/// The policy columns we manage.
pub const POLICY_COLUMNS: &[PolCol] = &[
    PolCol::Action,
    PolCol::ExternalIds,
    PolCol::Match,
    PolCol::Nexthops,
    PolCol::Priority,
];

/// The static route columns we manage.
pub const ROUTE_COLUMNS: &[RouteCol] = &[
    RouteCol::ExternalIds,
    RouteCol::IpPrefix,
    RouteCol::Nexthop,
    RouteCol::Policy,
];

/// The NAT columns we manage.
pub const NAT_COLUMNS: &[NatCol] = &[
    NatCol::ExternalIds,
    NatCol::ExternalIp,
    NatCol::LogicalIp,
    NatCol::Type,
];

impl Child for Nat {
    fn ids(&self) -> &BTreeMap<String, String> {
        &self.external_ids
    }
}

impl Child for LogicalRouterPolicy {
    fn ids(&self) -> &BTreeMap<String, String> {
        &self.external_ids
    }
}

impl Child for LogicalRouterStaticRoute {
    fn ids(&self) -> &BTreeMap<String, String> {
        &self.external_ids
    }
}

/// Plans the writes that make our routers' policies and routes match `desired`.
pub fn plan(
    view: &View<'_>,
    desired: &BTreeMap<String, RouterRows>,
    owner: &str,
) -> Result<Plan, ReconcileError> {
    let mut plan = Plan::default();
    let routers = view.typed::<LogicalRouter>()?;
    let policies = view.typed::<LogicalRouterPolicy>()?;
    let routes = view.typed::<LogicalRouterStaticRoute>()?;
    let policies: HashMap<Uuid, &LogicalRouterPolicy> =
        policies.iter().map(|p| (p.uuid(), p)).collect();
    let routes: HashMap<Uuid, &LogicalRouterStaticRoute> =
        routes.iter().map(|r| (r.uuid(), r)).collect();
    let nats = view.typed::<Nat>()?;
    let nats: HashMap<Uuid, &Nat> = nats.iter().map(|r| (r.uuid(), r)).collect();
    let empty = RouterRows::default();
    for router in routers.iter() {
        if router.external_ids.get(OWNER).map(String::as_str) != Some(owner) {
            continue; // a foreign router: nothing of ours goes there
        }
        let want = desired.get(&router.name).unwrap_or(&empty);
        let ours =
            |ids: &BTreeMap<String, String>| ids.get(OWNER).map(String::as_str) == Some(owner);
        let parent = |column, what| Parent {
            row: router,
            name: &router.name,
            column,
            what,
            key: ROW_KEY,
        };
        children::plan(
            &parent("policies", "policies"),
            &router.policies,
            &policies,
            &want.policies,
            POLICY_COLUMNS,
            |p| ours(&p.external_ids),
            &mut plan,
        );
        children::plan(
            &parent("static_routes", "static routes"),
            &router.static_routes,
            &routes,
            &want.routes,
            ROUTE_COLUMNS,
            |r| ours(&r.external_ids),
            &mut plan,
        );
        children::plan(
            &parent("nat", "NAT rows"),
            &router.nat,
            &nats,
            &want.nats,
            NAT_COLUMNS,
            |r| ours(&r.external_ids),
            &mut plan,
        );
    }
    Ok(plan)
}

impl Reconciler {
    /// The routers' policies and routes, after the routers exist.
    pub(super) async fn reconcile_router_rows(
        &self,
        desired: &BTreeMap<String, RouterRows>,
        outcome: &mut super::Outcome,
    ) -> Result<(), ReconcileError> {
        let owner = self.owner.as_str();
        let p = self.replica.read(|v| plan(v, desired, owner))?;
        outcome.inserts += p.inserts;
        outcome.updates += p.updates;
        outcome.deletes += p.deletes;
        if p.is_empty() {
            return Ok(());
        }
        self.write(&p, outcome).await?;
        self.replica
            .wait_for(Duration::from_secs(30), |v| {
                plan(v, desired, owner).is_ok_and(|p| p.is_empty())
            })
            .await?;
        Ok(())
    }
}
