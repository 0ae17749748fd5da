//! The node's AF_XDP port budget: how many pod ports may be AF_XDP at once.
//!
//! OVS 3.1 gives every AF_XDP queue its own umem of 16,384 frames × 4 KiB = 64 MiB,
//! pinned (measured: ovs-vswitchd grew by 73 MiB per single-queue pod). Kubernetes'
//! default of 110 pods would cost ~8 GiB of a node's memory on pod ports alone. So the
//! agent keeps a budget ([`PortBudget`]): `afxdp.maxPorts` from the agent's config file,
//! or by default as many ports as 10 % of `MemTotal` holds at [`MIB_PER_QUEUE`] per
//! queue. A new pod past the budget gets a kernel port (AF_PACKET on the same bridge),
//! with the reason in its port's `external_ids`, an event and the metric
//! `zstack_ovn_datapath_fallbacks_total{reason="afxdp_budget"}`; the ports in use and
//! the budget are the gauges `zstack_ovn_afxdp_ports{kind="in_use"|"max"}`.
//!
//! A port counts from the moment its ADD chooses AF_XDP (a fast-start port waiting to
//! move counts too) until its DEL. Concurrent ADDs cannot overshoot: each one claims its
//! port under one lock, counting the sandbox records and the claims still in flight
//! ([`Claims`]); a claim ends with its ADD, by which time the record counts instead.

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::attach::state::SandboxRecord;
use crate::datapath::Datapath;

pub use crate::datapath::port_budget::{DEFAULT_MEMORY_PERCENT, MIB_PER_QUEUE, PortBudget};

/// Whether a record holds an AF_XDP port (open, or a fast-start port waiting to move).
pub fn holds_port(r: &SandboxRecord) -> bool {
    r.datapath == Some(Datapath::Afxdp) || r.promote_to == Some(Datapath::Afxdp)
}

/// A claim refused: the budget is spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Full {
    pub in_use: u32,
    pub max: u32,
    pub source: String,
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the node's AF_XDP port budget is spent ({} of {} ports in use; {})",
            self.in_use, self.max, self.source
        )
    }
}

/// The claims of ADDs in flight (see the module doc).
#[derive(Debug, Default)]
pub struct Claims {
    in_flight: Mutex<BTreeSet<String>>,
}

/// A granted claim; it ends when dropped (the ADD is over: its record counts, or it failed).
#[derive(Debug)]
pub struct Claim<'a> {
    claims: &'a Claims,
    key: String,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.claims
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

impl Claims {
    /// Claims an AF_XDP port for sandbox `key` within `budget`, counting `records` (the
    /// node's sandbox records) and the other claims in flight.
    pub fn claim<'a>(
        &'a self,
        key: &str,
        budget: &PortBudget,
        records: &[SandboxRecord],
    ) -> Result<Claim<'a>, Full> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let held: BTreeSet<String> = records
            .iter()
            .filter(|r| holds_port(r))
            .map(SandboxRecord::key)
            .chain(in_flight.iter().cloned())
            .filter(|k| k != key)
            .collect();
        let in_use = u32::try_from(held.len()).unwrap_or(u32::MAX);
        if let Some(max) = budget.max_ports
            && in_use >= max
        {
            return Err(Full {
                in_use,
                max,
                source: budget.source.clone(),
            });
        }
        in_flight.insert(key.to_string());
        Ok(Claim {
            claims: self,
            key: key.to_string(),
        })
    }
}

/// For a fast-start port about to move (`key`): the budget is spent by the ports already
/// open on AF_XDP. It can be only after the budget was lowered (the port was counted
/// when its ADD claimed it); the port then stays on the kernel path.
pub fn spent_before_move(
    budget: &PortBudget,
    key: &str,
    records: &[SandboxRecord],
) -> Option<Full> {
    let max = budget.max_ports?;
    let open = records
        .iter()
        .filter(|r| r.datapath == Some(Datapath::Afxdp) && r.key() != key)
        .count();
    let open = u32::try_from(open).unwrap_or(u32::MAX);
    (open >= max).then(|| Full {
        in_use: open,
        max,
        source: budget.source.clone(),
    })
}

/// The ports holding AF_XDP among `records`.
pub fn in_use(records: &[SandboxRecord]) -> u32 {
    u32::try_from(records.iter().filter(|r| holds_port(r)).count()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
