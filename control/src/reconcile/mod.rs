//! The NB reconciler: diff the desired rows ([`DesiredNb`]) against the OVSDB replica and
//! write the difference in batched transactions, touching only rows we own.
//!
//! Level-triggered: [`plan`] looks only at desired vs actual, never at history, so after a
//! restart or reconnect the same call converges, and when nothing changed it plans nothing
//! (zero writes).

pub mod acl;
pub mod address_set;
pub mod children;
pub mod family;
pub mod load_balancer;
pub mod platform_group;
pub mod port_group;
pub mod router_rows;
pub mod template_var;
#[cfg(test)]
mod tests;
pub mod uninstall;

use std::time::Duration;

use ovsdb::nb::{
    LoadBalancer, LoadBalancerGroup, LogicalRouter, LogicalRouterPort, LogicalSwitch,
    LogicalSwitchPort,
};
use ovsdb::replica::View;
use ovsdb::typed::Table;
use ovsdb::{Client, MonitorRequest, Operation, Replica};

use crate::desired::{
    DesiredNb, ROUTER_COLUMNS, ROUTER_PORT_COLUMNS, SWITCH_COLUMNS, SWITCH_PORT_COLUMNS,
};

/// The NB database name.
pub const NB: &str = "OVN_Northbound";

/// Most operations in one transaction when packing units.
pub const MAX_OPS_PER_TRANSACTION: usize = 2_000;

/// Errors of the reconciler.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("OVN NB: {0}")]
    Ovsdb(#[from] ovsdb::Error),
    #[error("NB row does not match the schema: {0}")]
    Row(#[from] ovsdb::ValueError),
    #[error("transaction {index} ({what}) failed: {source}")]
    Transaction {
        index: usize,
        what: String,
        #[source]
        source: ovsdb::Error,
    },
}

/// Operations that belong together (they share `uuid-name`s or a name-uniqueness swap).
#[derive(Debug, Clone)]
pub struct Unit {
    pub what: String,
    pub ops: Vec<Operation>,
}

impl Unit {
    pub fn new(what: String, ops: Vec<Operation>) -> Self {
        Unit { what, ops }
    }
}

/// The planned writes, with counts for logs and status.
#[derive(Debug, Default)]
pub struct Plan {
    pub units: Vec<Unit>,
    pub inserts: usize,
    pub updates: usize,
    pub deletes: usize,
    /// Desired rows we could not make true without touching a foreign row.
    pub conflicts: Vec<String>,
    names: usize,
}

impl Plan {
    /// True when nothing needs writing.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// A `uuid-name` unique within this plan (so packed units never collide).
    pub fn fresh_name(&mut self) -> String {
        self.names += 1;
        format!("row{}", self.names)
    }

    /// Packs the units into transactions of at most [`MAX_OPS_PER_TRANSACTION`]
    /// operations (a unit is never split).
    pub fn transactions(&self) -> Vec<(String, Vec<Operation>)> {
        let mut out: Vec<(String, Vec<Operation>)> = Vec::new();
        for u in &self.units {
            match out.last_mut() {
                Some((what, ops)) if ops.len() + u.ops.len() <= MAX_OPS_PER_TRANSACTION => {
                    ops.extend(u.ops.iter().cloned());
                    if what.len() < 200 {
                        what.push_str("; ");
                        what.push_str(&u.what);
                    }
                }
                _ => out.push((u.what.clone(), u.ops.clone())),
            }
        }
        out
    }
}

/// The tables the reconciler reads; monitor these.
pub fn monitor_requests() -> Vec<MonitorRequest> {
    vec![
        MonitorRequest::of::<LogicalRouter>(),
        MonitorRequest::of::<LogicalRouterPort>(),
        MonitorRequest::of::<ovsdb::nb::LogicalRouterPolicy>(),
        MonitorRequest::of::<ovsdb::nb::LogicalRouterStaticRoute>(),
        MonitorRequest::of::<ovsdb::nb::Nat>(),
        MonitorRequest::of::<LogicalSwitch>(),
        MonitorRequest::of::<LogicalSwitchPort>(),
        MonitorRequest::of::<ovsdb::nb::PortGroup>(),
        MonitorRequest::of::<ovsdb::nb::AddressSet>(),
        MonitorRequest::of::<ovsdb::nb::Acl>(),
        MonitorRequest::of::<LoadBalancer>(),
        MonitorRequest::of::<LoadBalancerGroup>(),
        MonitorRequest::of::<ovsdb::nb::ChassisTemplateVar>(),
    ]
}

/// Plans the writes that make `view` match `desired`, for rows owned by `owner`.
pub fn plan(view: &View<'_>, desired: &DesiredNb, owner: &str) -> Result<Plan, ReconcileError> {
    let mut plan = Plan::default();
    family::plan(
        owner,
        &desired.routers,
        &view.typed::<LogicalRouter>()?,
        &view.typed::<LogicalRouterPort>()?,
        ROUTER_COLUMNS,
        ROUTER_PORT_COLUMNS,
        &mut plan,
    );
    family::plan(
        owner,
        &desired.switches,
        &view.typed::<LogicalSwitch>()?,
        &view.typed::<LogicalSwitchPort>()?,
        SWITCH_COLUMNS,
        SWITCH_PORT_COLUMNS,
        &mut plan,
    );
    load_balancer::plan(
        owner,
        &desired.load_balancers,
        &view.typed::<LoadBalancer>()?,
        &view.typed::<LoadBalancerGroup>()?,
        &view.typed::<LogicalSwitch>()?,
        &mut plan,
    );
    template_var::plan(
        owner,
        &desired.load_balancers.template_vars,
        &view.typed::<ovsdb::nb::ChassisTemplateVar>()?,
        &mut plan,
    );
    Ok(plan)
}

/// What one reconcile pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub transactions: usize,
    pub inserts: usize,
    pub updates: usize,
    pub deletes: usize,
    pub conflicts: Vec<String>,
}

/// Holds the NB connection and replica; reconciles desired states into it.
#[derive(Clone)]
pub struct Reconciler {
    client: Client,
    replica: Replica,
    owner: String,
}

impl Reconciler {
    /// Starts the NB monitor and waits until the replica is synced.
    pub async fn start(client: Client, owner: &str) -> Result<Self, ReconcileError> {
        let replica = client.monitor(NB, monitor_requests()).await?;
        replica.wait_for(Duration::from_secs(60), |_| true).await?;
        Ok(Reconciler {
            client,
            replica,
            owner: owner.to_string(),
        })
    }

    /// The NB replica (for readers such as validation and IPAM rebuild).
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// The NB client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// One pass: plan against the replica, write, and wait until the replica has seen our
    /// writes (so the next pass does not plan them again).
    pub async fn reconcile(&self, desired: &DesiredNb) -> Result<Outcome, ReconcileError> {
        let plan = self.replica.read(|v| plan(v, desired, &self.owner))?;
        let mut outcome = Outcome {
            inserts: plan.inserts,
            updates: plan.updates,
            deletes: plan.deletes,
            conflicts: plan.conflicts.clone(),
            ..Default::default()
        };
        if plan.is_empty() {
            self.reconcile_policy(&desired.netpol, &mut outcome).await?;
            self.reconcile_router_rows(&desired.router_rows, &mut outcome)
                .await?;
            self.reconcile_platform_groups(desired.platform_groups.as_ref(), &mut outcome)
                .await?;
            return Ok(outcome);
        }
        self.write(&plan, &mut outcome).await?;
        // Our own updates come back through the monitor; wait until the replica reflects
        // them so a following pass starts from the written state.
        let owner = self.owner.clone();
        self.replica
            .wait_for(Duration::from_secs(30), |v| {
                plan_is_empty(v, desired, &owner)
            })
            .await?;
        self.reconcile_policy(&desired.netpol, &mut outcome).await?;
        self.reconcile_router_rows(&desired.router_rows, &mut outcome)
            .await?;
        self.reconcile_platform_groups(desired.platform_groups.as_ref(), &mut outcome)
            .await?;
        Ok(outcome)
    }

    /// Writes the plan's transactions in order, counting them in `outcome`.
    async fn write(&self, plan: &Plan, outcome: &mut Outcome) -> Result<(), ReconcileError> {
        for (index, (what, ops)) in plan.transactions().into_iter().enumerate() {
            self.client
                .transact(NB, ops)
                .await
                .map_err(|source| ReconcileError::Transaction {
                    index,
                    what,
                    source,
                })?;
            outcome.transactions += 1;
        }
        Ok(())
    }
}

fn plan_is_empty(v: &View<'_>, desired: &DesiredNb, owner: &str) -> bool {
    plan(v, desired, owner)
        .map(|p| p.is_empty())
        .unwrap_or(false)
}

/// The typed rows of one table in a view, by name (test and diagnostics helper).
pub fn names_of<T: Table + family::Named>(v: &View<'_>) -> Vec<String> {
    v.typed::<T>()
        .map(|rows| rows.iter().map(|r| r.name().to_string()).collect())
        .unwrap_or_default()
}
