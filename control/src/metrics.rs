//! The controller's Prometheus metrics (served by the [`endpoints`] crate).
//!
//! | metric | type | what |
//! |---|---|---|
//! | `zstack_ovn_controller_sync_seconds` | histogram | one reconcile pass |
//! | `zstack_ovn_controller_nb_transactions_total` | counter | NB transactions written |
//! | `zstack_ovn_controller_sync_errors_total` | counter | failed passes |
//! | `zstack_ovn_controller_nb_transaction_errors_total` | counter | failed passes whose NB transaction failed |
//! | `zstack_ovn_subnet_addresses_used{subnet}` | gauge | addresses handed out |
//! | `zstack_ovn_subnet_addresses_available{subnet}` | gauge | addresses left |
//! | `zstack_ovn_controller_leader` | gauge | 1 while this process leads (always 1 without election) |

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::ipam::Ipam;

type Labels = Vec<(String, String)>;

/// The controller's metrics; shared (`Arc`) between the run loop and the HTTP server.
pub struct ControllerMetrics {
    registry: Registry,
    pub sync_seconds: Histogram,
    pub nb_transactions: Counter,
    pub sync_errors: Counter,
    pub nb_transaction_errors: Counter,
    pub subnet_used: Family<Labels, Gauge>,
    pub subnet_available: Family<Labels, Gauge>,
    pub leader: Gauge,
    /// Subnets with usage gauges (to drop the gauges of removed ones).
    subnets: Mutex<BTreeSet<String>>,
    /// A pass ran (for readiness).
    synced: AtomicBool,
}

impl std::fmt::Debug for ControllerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControllerMetrics")
    }
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn subnet_label(name: &str) -> Labels {
    vec![("subnet".to_string(), name.to_string())]
}

fn gauge_value(n: u128) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl ControllerMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let sync_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "zstack_ovn_controller_sync_seconds",
            "Time of one reconcile pass (validate, IPAM, translate, NB transaction, write-back)",
            sync_seconds.clone(),
        );
        // a counter's name gets `_total`
        let nb_transactions = Counter::default();
        registry.register(
            "zstack_ovn_controller_nb_transactions",
            "OVN Northbound transactions written",
            nb_transactions.clone(),
        );
        let sync_errors = Counter::default();
        registry.register(
            "zstack_ovn_controller_sync_errors",
            "Reconcile passes that failed (retried with backoff)",
            sync_errors.clone(),
        );
        let nb_transaction_errors = Counter::default();
        registry.register(
            "zstack_ovn_controller_nb_transaction_errors",
            "Reconcile passes that failed in the OVN Northbound transaction",
            nb_transaction_errors.clone(),
        );
        let subnet_used = Family::<Labels, Gauge>::default();
        registry.register(
            "zstack_ovn_subnet_addresses_used",
            "Addresses of a Subnet handed out (both families)",
            subnet_used.clone(),
        );
        let subnet_available = Family::<Labels, Gauge>::default();
        registry.register(
            "zstack_ovn_subnet_addresses_available",
            "Addresses of a Subnet that can still be handed out (both families)",
            subnet_available.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "zstack_ovn_controller_leader",
            "1 while this controller leads (holds the Lease, or runs without leader election)",
            leader.clone(),
        );
        ControllerMetrics {
            registry,
            sync_seconds,
            nb_transactions,
            sync_errors,
            nb_transaction_errors,
            subnet_used,
            subnet_available,
            leader,
            subnets: Mutex::new(BTreeSet::new()),
            synced: AtomicBool::new(false),
        }
    }

    /// Records a pass that succeeded with `transactions` NB transactions.
    pub fn pass_ok(&self, elapsed: Duration, transactions: usize) {
        self.sync_seconds.observe(elapsed.as_secs_f64());
        self.nb_transactions
            .inc_by(u64::try_from(transactions).unwrap_or(u64::MAX));
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Records a failed pass (`nb`: the NB transaction failed).
    pub fn pass_failed(&self, elapsed: Duration, nb: bool) {
        self.sync_seconds.observe(elapsed.as_secs_f64());
        self.sync_errors.inc();
        if nb {
            self.nb_transaction_errors.inc();
        }
    }

    /// Sets the per-Subnet address gauges from the IPAM (gauges of gone Subnets removed).
    pub fn set_usage(&self, ipam: &Ipam) {
        let names: BTreeSet<String> = ipam.subnet_names().map(str::to_string).collect();
        for name in &names {
            if let Ok(u) = ipam.usage(name) {
                let l = subnet_label(name);
                self.subnet_used.get_or_create(&l).set(gauge_value(u.used));
                self.subnet_available
                    .get_or_create(&l)
                    .set(gauge_value(u.available));
            }
        }
        let mut known = self.subnets.lock().unwrap_or_else(|p| p.into_inner());
        for gone in known.difference(&names) {
            let l = subnet_label(gone);
            self.subnet_used.remove(&l);
            self.subnet_available.remove(&l);
        }
        *known = names;
    }

    /// Whether a pass ran since the start.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        endpoints::render_registry(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_exposition() {
        let m = ControllerMetrics::new();
        m.pass_ok(Duration::from_millis(3), 2);
        m.pass_failed(Duration::from_millis(1), true);
        m.leader.set(1);
        let t = m.render();
        for want in [
            "zstack_ovn_controller_sync_seconds_count 2",
            "zstack_ovn_controller_nb_transactions_total 2",
            "zstack_ovn_controller_sync_errors_total 1",
            "zstack_ovn_controller_nb_transaction_errors_total 1",
            "zstack_ovn_controller_leader 1",
        ] {
            assert!(t.contains(want), "{want} missing in\n{t}");
        }
        assert!(m.synced());
    }
}
