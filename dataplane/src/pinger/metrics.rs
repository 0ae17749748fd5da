//! The [pinger](super)'s metrics (`zstack_ovn_pinger_*`, see docs/reference/metrics.md).
//! Labels: `peer` (the node probed), `target` (`node`: its tunnel endpoint; `pod`: its
//! sampled pods), `proto` (`icmp`, `tcp`).

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::verdict::Target;

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// The pinger's metrics.
#[derive(Clone)]
pub struct PingerMetrics {
    rtt: Family<Labels, Histogram>,
    probes: Family<Labels, Counter>,
    loss: Family<Labels, FloatGauge>,
    last_rtt: Family<Labels, FloatGauge>,
    reachable: Family<Labels, Gauge>,
}

pub const PROTOS: [&str; 2] = ["icmp", "tcp"];
const TARGETS: [Target; 2] = [Target::Node, Target::Pod];

fn labels(peer: &str, target: Target, proto: &str) -> Labels {
    vec![
        ("peer".into(), peer.into()),
        ("target".into(), target.as_str().into()),
        ("proto".into(), proto.into()),
    ]
}

impl PingerMetrics {
    /// Registers the pinger's metrics in `registry`.
    pub fn register(registry: &mut Registry) -> PingerMetrics {
        fn rtt_histogram() -> Histogram {
            // 50 µs × 2ⁿ: 50 µs … 1.6 s
            Histogram::new(exponential_buckets(0.00005, 2.0, 16))
        }
        let m = PingerMetrics {
            rtt: Family::new_with_constructor(rtt_histogram as fn() -> Histogram),
            probes: Family::default(),
            loss: Family::default(),
            last_rtt: Family::default(),
            reachable: Family::default(),
        };
        registry.register(
            "zstack_ovn_pinger_rtt_seconds",
            "Round-trip time of the pinger's answered probes to a peer node's tunnel endpoint (target=node) or its sampled pods (target=pod)",
            m.rtt.clone(),
        );
        registry.register(
            "zstack_ovn_pinger_probes",
            "Pinger probes by peer, target, protocol and result (ok, lost)",
            m.probes.clone(),
        );
        registry.register(
            "zstack_ovn_pinger_loss_ratio",
            "Share of the last 20 pinger probes of a series that got no answer",
            m.loss.clone(),
        );
        registry.register(
            "zstack_ovn_pinger_last_rtt_seconds",
            "Mean round-trip time of the last round's answered probes of a series (absent before the first answer)",
            m.last_rtt.clone(),
        );
        registry.register(
            "zstack_ovn_pinger_peer_reachable",
            "1 while a peer's target answers, 0 after 3 rounds in a row without any answer",
            m.reachable.clone(),
        );
        m
    }

    /// Records one probe (`None`: lost).
    pub fn probe(&self, peer: &str, target: Target, proto: &str, rtt: Option<std::time::Duration>) {
        let mut l = labels(peer, target, proto);
        if let Some(d) = rtt {
            self.rtt.get_or_create(&l).observe(d.as_secs_f64());
        }
        l.push((
            "result".into(),
            if rtt.is_some() { "ok" } else { "lost" }.into(),
        ));
        self.probes.get_or_create(&l).inc();
    }

    /// Sets a series' loss ratio and last round's mean RTT (`None`: nothing answered,
    /// the last figure stays).
    pub fn round(&self, peer: &str, target: Target, proto: &str, loss: f64, mean_rtt: Option<f64>) {
        let l = labels(peer, target, proto);
        self.loss.get_or_create(&l).set(loss);
        if let Some(r) = mean_rtt {
            self.last_rtt.get_or_create(&l).set(r);
        }
    }

    /// Sets whether a peer's target is reachable.
    pub fn reachable(&self, peer: &str, target: Target, up: bool) {
        let l = vec![
            ("peer".into(), peer.into()),
            ("target".into(), target.as_str().into()),
        ];
        self.reachable.get_or_create(&l).set(i64::from(up));
    }

    /// Removes every series of `peer` (gone from the cluster).
    pub fn forget(&self, peer: &str) {
        for t in TARGETS {
            self.reachable.remove(&vec![
                ("peer".into(), peer.into()),
                ("target".into(), t.as_str().into()),
            ]);
            for p in PROTOS {
                let l = labels(peer, t, p);
                self.rtt.remove(&l);
                self.loss.remove(&l);
                self.last_rtt.remove(&l);
                for r in ["ok", "lost"] {
                    let mut lr = l.clone();
                    lr.push(("result".into(), r.into()));
                    self.probes.remove(&lr);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_named_and_a_gone_peer_leaves_none() {
        let mut r = Registry::default();
        let m = PingerMetrics::register(&mut r);
        m.probe(
            "n2",
            Target::Pod,
            "icmp",
            Some(std::time::Duration::from_micros(300)),
        );
        m.probe("n2", Target::Pod, "icmp", None);
        m.round("n2", Target::Pod, "icmp", 0.5, Some(0.0003));
        m.reachable("n2", Target::Pod, true);
        let t = endpoints::render_registry(&r);
        for want in [
            r#"zstack_ovn_pinger_probes_total{peer="n2",target="pod",proto="icmp",result="lost"} 1"#,
            r#"zstack_ovn_pinger_rtt_seconds_count{peer="n2",target="pod",proto="icmp"} 1"#,
            r#"zstack_ovn_pinger_loss_ratio{peer="n2",target="pod",proto="icmp"} 0.5"#,
            r#"zstack_ovn_pinger_last_rtt_seconds{peer="n2",target="pod",proto="icmp"} 0.0003"#,
            r#"zstack_ovn_pinger_peer_reachable{peer="n2",target="pod"} 1"#,
        ] {
            assert!(t.contains(want), "{want} not in:\n{t}");
        }
        m.forget("n2");
        let t = endpoints::render_registry(&r);
        assert!(!t.contains("peer=\"n2\""), "{t}");
    }
}
