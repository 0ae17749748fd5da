//! Prometheus metrics of the agent (served by the [`endpoints`] crate).

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Work run before each scrape renders (e.g. refreshing the datapath collector's
/// snapshot, see [`crate::datapath::metrics`]); it bounds its own time.
pub type ScrapeHook =
    Box<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync>;

/// The agent's metrics.
pub struct Metrics {
    registry: Registry,
    scrape_hooks: Vec<ScrapeHook>,
    pub add_seconds: Histogram,
    pub del_seconds: Histogram,
    pub requests: Family<Labels, Counter>,
    /// `zstack_ovn_datapath_fallbacks_total{reason}`.
    pub datapath_fallbacks: Family<Labels, Counter>,
    /// `zstack_ovn_datapath_info{datapath}`: 1 for the node's datapath.
    pub datapath_info: Family<Labels, prometheus_client::metrics::gauge::Gauge>,
    /// `zstack_ovn_stale_megaflow_purges_total` (see [`crate::datapath::megaflow_guard`]).
    pub stale_megaflow_purges: Counter,
    /// `zstack_ovn_cni_add_phase_seconds{phase,datapath}` (see [`crate::attach::phases`]).
    pub add_phase_seconds: Family<Labels, Histogram>,
    /// `zstack_ovn_port_promotions_total{result}`: fast-start ports moved to AF_XDP
    /// (`ok`), that fell back to the kernel path (`fallback`) or whose OVS write failed
    /// (`error`, retried), or kept on the kernel path by a lowered AF_XDP budget
    /// (`budget`) — see [`crate::attach::promote`].
    pub port_promotions: Family<Labels, Counter>,
    /// `zstack_ovn_port_promotion_wait_seconds`: a fast-start port's ADD answered → its
    /// AF_XDP port open.
    pub port_promotion_wait: Histogram,
    /// `zstack_ovn_pmd_max_sleep_microseconds`: `pmd-maxsleep` as the adaptive tuner last
    /// wrote it (see [`crate::datapath::pmd_sleep`]).
    pub pmd_max_sleep: prometheus_client::metrics::gauge::Gauge,
    /// `zstack_ovn_pmd_sleep_switches_total{to=busy|idle}`.
    pub pmd_sleep_switches: Family<Labels, Counter>,
    /// `zstack_ovn_afxdp_ports{kind=in_use|max}` (see [`crate::attach::afxdp_budget`];
    /// `max` absent while unlimited).
    pub afxdp_ports: Family<Labels, prometheus_client::metrics::gauge::Gauge>,
    /// `zstack_ovn_pinger_*` (see [`crate::pinger`]).
    pub pinger: crate::pinger::metrics::PingerMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let add_seconds = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let del_seconds = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let requests = Family::<Labels, Counter>::default();
        registry.register(
            "zstack_ovn_cni_add_seconds",
            "Time to answer a CNI ADD",
            add_seconds.clone(),
        );
        registry.register(
            "zstack_ovn_cni_del_seconds",
            "Time to answer a CNI DEL",
            del_seconds.clone(),
        );
        // the counter type appends `_total`
        registry.register(
            "zstack_ovn_cni_requests",
            "CNI requests by command and result",
            requests.clone(),
        );
        let datapath_fallbacks = Family::<Labels, Counter>::default();
        registry.register(
            "zstack_ovn_datapath_fallbacks",
            "Datapath fallbacks (node dpdk→afxdp→kernel, or one AF_XDP port to kernel) by reason",
            datapath_fallbacks.clone(),
        );
        let datapath_info = Family::<Labels, prometheus_client::metrics::gauge::Gauge>::default();
        registry.register(
            "zstack_ovn_datapath_info",
            "The node's datapath (1 for the one in use)",
            datapath_info.clone(),
        );
        let stale_megaflow_purges = Counter::default();
        registry.register(
            "zstack_ovn_stale_megaflow_purges",
            "Datapath flow purges after overlapping megaflows with different actions were found \
             (stale verdicts of the userspace revalidator)",
            stale_megaflow_purges.clone(),
        );
        fn phase_histogram() -> Histogram {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        }
        let add_phase_seconds =
            Family::<Labels, Histogram>::new_with_constructor(phase_histogram as fn() -> Histogram);
        registry.register(
            "zstack_ovn_cni_add_phase_seconds",
            "Time of each phase of a CNI ADD (annotation, plumb, ovs, open, installed) by the port's datapath",
            add_phase_seconds.clone(),
        );
        let port_promotions = Family::<Labels, Counter>::default();
        registry.register(
            "zstack_ovn_port_promotions",
            "Fast-start pod ports moved to AF_XDP (ok), fallen back to the kernel path (fallback), kept there by the AF_XDP budget (budget) or retried (error)",
            port_promotions.clone(),
        );
        let port_promotion_wait = Histogram::new(exponential_buckets(0.01, 2.0, 12));
        registry.register(
            "zstack_ovn_port_promotion_wait_seconds",
            "Time from a fast-start pod's ADD answer to its AF_XDP port being open",
            port_promotion_wait.clone(),
        );
        let pmd_max_sleep = prometheus_client::metrics::gauge::Gauge::default();
        registry.register(
            "zstack_ovn_pmd_max_sleep_microseconds",
            "pmd-maxsleep as the adaptive PMD sleep tuner last wrote it (0: busy polling under traffic)",
            pmd_max_sleep.clone(),
        );
        let pmd_sleep_switches = Family::<Labels, Counter>::default();
        registry.register(
            "zstack_ovn_pmd_sleep_switches",
            "Switches of the adaptive PMD sleep to busy polling (to=busy) or back to sleeping (to=idle)",
            pmd_sleep_switches.clone(),
        );
        let afxdp_ports = Family::<Labels, prometheus_client::metrics::gauge::Gauge>::default();
        registry.register(
            "zstack_ovn_afxdp_ports",
            "Pod ports on AF_XDP (kind=in_use, fast-start ports waiting to move included) and the node's budget (kind=max)",
            afxdp_ports.clone(),
        );
        let pinger = crate::pinger::metrics::PingerMetrics::register(&mut registry);
        Metrics {
            pinger,
            afxdp_ports,
            pmd_max_sleep,
            pmd_sleep_switches,
            add_phase_seconds,
            port_promotions,
            port_promotion_wait,
            stale_megaflow_purges,
            datapath_fallbacks,
            datapath_info,
            registry,
            scrape_hooks: Vec::new(),
            add_seconds,
            del_seconds,
            requests,
        }
    }

    /// Counts a datapath fallback.
    pub fn datapath_fallback(&self, reason: &str) {
        self.datapath_fallbacks
            .get_or_create(&vec![("reason".to_string(), reason.to_string())])
            .inc();
    }

    /// Marks `datapath` as the node's (the others 0).
    pub fn set_datapath(&self, datapath: &str) {
        for d in ["dpdk", "afxdp", "kernel"] {
            self.datapath_info
                .get_or_create(&vec![("datapath".to_string(), d.to_string())])
                .set(i64::from(d == datapath));
        }
    }

    /// Records one answered request.
    pub fn observe(&self, command: &str, ok: bool, elapsed: Duration) {
        let result = if ok { "ok" } else { "error" };
        self.requests
            .get_or_create(&vec![
                ("command".to_string(), command.to_string()),
                ("result".to_string(), result.to_string()),
            ])
            .inc();
        match command {
            "ADD" => self.add_seconds.observe(elapsed.as_secs_f64()),
            "DEL" => self.del_seconds.observe(elapsed.as_secs_f64()),
            _ => {}
        }
    }

    /// Records one phase of an ADD (see [`crate::attach::phases`]).
    pub fn observe_add_phase(&self, phase: &str, datapath: &str, d: Duration) {
        self.add_phase_seconds
            .get_or_create(&vec![
                ("phase".to_string(), phase.to_string()),
                ("datapath".to_string(), datapath.to_string()),
            ])
            .observe(d.as_secs_f64());
    }

    /// The AF_XDP ports in use and the budget.
    pub fn set_afxdp_ports(&self, in_use: u32, max: Option<u32>) {
        let kind = |k: &str| vec![("kind".to_string(), k.to_string())];
        self.afxdp_ports
            .get_or_create(&kind("in_use"))
            .set(i64::from(in_use));
        match max {
            Some(m) => {
                self.afxdp_ports
                    .get_or_create(&kind("max"))
                    .set(i64::from(m));
            }
            None => {
                self.afxdp_ports.remove(&kind("max"));
            }
        }
    }

    /// Records a write of the adaptive PMD sleep.
    pub fn pmd_sleep_switch(&self, us: u32) {
        self.pmd_max_sleep.set(i64::from(us));
        let to = if us == 0 { "busy" } else { "idle" };
        self.pmd_sleep_switches
            .get_or_create(&vec![("to".to_string(), to.to_string())])
            .inc();
    }

    /// Counts a fast-start port's move (`ok`, `fallback`, `error`).
    pub fn port_promotion(&self, result: &str) {
        self.port_promotions
            .get_or_create(&vec![("result".to_string(), result.to_string())])
            .inc();
    }

    /// Adds a collector encoded on every render.
    pub fn register_collector(&mut self, c: Box<dyn prometheus_client::collector::Collector>) {
        self.registry.register_collector(c);
    }

    /// Adds a hook awaited before every scrape (see [`Metrics::scrape`]).
    pub fn on_scrape(&mut self, hook: ScrapeHook) {
        self.scrape_hooks.push(hook);
    }

    /// Runs the scrape hooks, then renders.
    pub async fn scrape(&self) -> String {
        futures::future::join_all(self.scrape_hooks.iter().map(|h| h())).await;
        self.render()
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
        let m = Metrics::new();
        m.observe("ADD", true, Duration::from_millis(30));
        m.observe("DEL", false, Duration::from_millis(3));
        m.observe_add_phase("open", "afxdp", Duration::from_millis(140));
        m.port_promotion("ok");
        let t = m.render();
        assert!(t.contains("zstack_ovn_cni_add_seconds_bucket"), "{t}");
        assert!(
            t.contains(
                r#"zstack_ovn_cni_add_phase_seconds_count{phase="open",datapath="afxdp"} 1"#
            ),
            "{t}"
        );
        assert!(
            t.contains(r#"zstack_ovn_port_promotions_total{result="ok"} 1"#),
            "{t}"
        );
        assert!(t.contains("zstack_ovn_cni_del_seconds_count 1"), "{t}");
        assert!(
            t.contains(r#"zstack_ovn_cni_requests_total{command="ADD",result="ok"} 1"#),
            "{t}"
        );
    }
}
