//! Datapath metrics collected on each scrape: PMD statistics from ovs-vswitchd's unixctl
//! socket (`dpif-netdev/pmd-stats-show`, `dpif-netdev/pmd-rxq-show`) and the per-port
//! counters of the agent's OVS Interfaces (`statistics` column, refreshed by vswitchd
//! every 5 s; from the agent's replica, or one `select` for `zovn lab stats`).
//!
//! [`collect`] gathers one [`DatapathSnapshot`] within a bounded time; a dead or hung
//! vswitchd gives `vswitchd_up = false` (exported as `zstack_ovn_vswitchd_up 0`), never
//! an error. [`register`] hooks a [`DatapathCollector`] into the agent's
//! [`Metrics`](crate::agent::metrics::Metrics): refreshed before each scrape, encoded by a
//! prometheus-client `Collector`.
//!
//! | metric | labels |
//! |---|---|
//! | `zstack_ovn_vswitchd_up` | |
//! | `zstack_ovn_pmd_packets_total` | `core`, `numa` (`core="main"` for the main thread) |
//! | `zstack_ovn_pmd_cycles_total` | `core`, `numa`, `kind=idle\|busy` |
//! | `zstack_ovn_pmd_busy_ratio` | `core`, `numa` (busy / (idle + busy) since start) |
//! | `zstack_ovn_pmd_avg_cycles_per_packet` | `core`, `numa` |
//! | `zstack_ovn_pmd_lookups_total` | `core`, `numa`, `result=emc\|smc\|megaflow\|upcall\|upcall_failed` |
//! | `zstack_ovn_pmd_rxq_usage_percent` | `core`, `numa`, `port`, `queue` (last 60 s; absent while `NOT AVAIL`) |
//! | `zstack_ovn_pmd_overhead_percent` | `core`, `numa` |
//! | `zstack_ovn_port_rx_packets_total`, `zstack_ovn_port_tx_packets_total` | `port`, `pod` |
//! | `zstack_ovn_port_bytes_total`, `zstack_ovn_port_dropped_total`, `zstack_ovn_port_errors_total` | `port`, `pod`, `direction=rx\|tx` |
//! | `zstack_ovn_datapath_scrape_seconds` | |
//! | `zstack_ovn_datapath_collections_total` | |
//!
//! A scrape costs ovs-vswitchd two unixctl commands: the agent collects at most once per
//! [`MIN_COLLECT_INTERVAL`], and scrapes arriving meanwhile (or while a collection runs)
//! get the last snapshot, so whoever reaches `/metrics` cannot make ovs-vswitchd's main
//! thread serve unixctl in a loop.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ovsdb::typed::{Column, Table};
use ovsdb::vswitch::{Interface, InterfaceColumn as IC};
use ovsdb::{Client, ClientConfig, Condition, Function, Operation, Value};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use serde::Serialize;

use crate::ovs::unixctl::Unixctl;
use crate::ovs::{DB, OWNER, OWNER_KEY, Ovs, POD_KEY};
use ovsdb::pmd_stats::{PmdThreadStats, RxqShow, parse_pmd_rxq, parse_pmd_stats};

/// Bound of one collection (each source alone; they run concurrently).
pub const COLLECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The agent's `/metrics` collects from ovs-vswitchd at most once per this interval.
pub const MIN_COLLECT_INTERVAL: Duration = Duration::from_secs(1);

/// The Interface `statistics` keys exported (others, e.g. `xsk_queue_0_rx_dropped`, are
/// kept in the snapshot but not exported per key).
pub const PORT_COUNTERS: &[&str] = &[
    "rx_packets",
    "tx_packets",
    "rx_bytes",
    "tx_bytes",
    "rx_dropped",
    "tx_dropped",
    "rx_errors",
    "tx_errors",
];

/// The counters of one of the agent's OVS interfaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortStats {
    /// The Interface name (host end of the pod's veth, `ovn-k8s-mp0`, …).
    pub port: String,
    /// `namespace/name` of the pod, empty for node ports.
    pub pod: String,
    /// Interface `type` (`""` AF_PACKET, `afxdp`, `internal`, …).
    pub kind: String,
    /// The whole `statistics` column (keys vary by port type).
    pub statistics: BTreeMap<String, i64>,
}

impl PortStats {
    pub fn get(&self, key: &str) -> Option<u64> {
        self.statistics
            .get(key)
            .and_then(|v| u64::try_from(*v).ok())
    }
}

/// One collection.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DatapathSnapshot {
    /// ovs-vswitchd answered `pmd-stats-show`.
    pub vswitchd_up: bool,
    /// Why not, when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vswitchd_error: Option<String>,
    /// Per thread (PMDs and the main thread).
    pub pmd: Vec<PmdThreadStats>,
    pub rxq: RxqShow,
    pub ports: Vec<PortStats>,
    /// Why the port counters are missing, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports_error: Option<String>,
    pub collect_seconds: f64,
    /// Collections made by the agent's collector so far (this one included).
    pub collections: u64,
}

/// Where the port counters come from.
#[derive(Debug, Clone, Copy)]
pub enum PortSource<'a> {
    /// The agent's replica of the local Open_vSwitch db (its monitor includes the
    /// Interface `statistics` column, which vswitchd refreshes every 5 s).
    Replica(&'a ovsdb::Replica),
    /// A client of the local Open_vSwitch db: one `select` (e.g. `zovn lab stats`).
    Db(&'a Client),
    /// No database (the counters are reported missing).
    Unavailable,
}

/// Gathers PMD statistics through `ctl` and the counters of the agent's interfaces from
/// `ports`, concurrently, each bounded by `ctl`'s timeout / [`COLLECT_TIMEOUT`].
pub async fn collect(ctl: &Unixctl, ports: PortSource<'_>) -> DatapathSnapshot {
    let t = Instant::now();
    // both at once: a hung vswitchd costs one timeout, not two
    let pmd = async {
        tokio::join!(
            ctl.call("dpif-netdev/pmd-stats-show", &[]),
            ctl.call("dpif-netdev/pmd-rxq-show", &[])
        )
    };
    let ports = async {
        match ports {
            PortSource::Replica(r) => {
                // the replica monitors some columns: read leniently (see `iter_typed`)
                let ifaces: Vec<Interface> = r.read(|v| {
                    v.iter_typed::<Interface>()
                        .filter_map(|i| {
                            i.map_err(|e| tracing::warn!(error = %e, "Interface row skipped"))
                                .ok()
                        })
                        .collect()
                });
                Ok(owned_ports(ifaces))
            }
            PortSource::Db(db) => match tokio::time::timeout(COLLECT_TIMEOUT, port_stats(db)).await
            {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!(
                    "Interface statistics: no answer within {COLLECT_TIMEOUT:?}"
                )),
            },
            PortSource::Unavailable => {
                Err("no connection to the Open_vSwitch database".to_string())
            }
        }
    };
    let ((stats, rxq), ports) = tokio::join!(pmd, ports);
    let mut snap = DatapathSnapshot::default();
    match stats
        .map_err(|e| e.to_string())
        .and_then(|s| parse_pmd_stats(&s).map_err(|e| e.to_string()))
    {
        Ok(pmd) => {
            snap.vswitchd_up = true;
            snap.pmd = pmd;
        }
        Err(e) => snap.vswitchd_error = Some(e),
    }
    if snap.vswitchd_up {
        match rxq
            .map_err(|e| e.to_string())
            .and_then(|s| parse_pmd_rxq(&s).map_err(|e| e.to_string()))
        {
            Ok(r) => snap.rxq = r,
            Err(e) => snap.vswitchd_error = Some(e),
        }
    }
    match ports {
        Ok(p) => snap.ports = p,
        Err(e) => snap.ports_error = Some(e),
    }
    snap.collect_seconds = t.elapsed().as_secs_f64();
    snap
}

/// The `statistics` of every Interface the agent owns (`external_ids:zstack.io/owner`),
/// read with one `select` (fresh from the server).
pub async fn port_stats(db: &Client) -> Result<Vec<PortStats>, ovsdb::Error> {
    let owned = Value::string_map([(OWNER_KEY.to_string(), OWNER.to_string())]);
    let r = db
        .transact(
            DB,
            vec![
                Operation::select(
                    Interface::TABLE,
                    vec![Condition::on(IC::ExternalIds, Function::Includes, owned)],
                )
                .with_columns(
                    [IC::Name, IC::Type, IC::ExternalIds, IC::Statistics].map(|c| c.name()),
                ),
            ],
        )
        .await?;
    let rows = r.first().map(|r| r.rows()).unwrap_or_default();
    Ok(owned_ports(rows.iter().filter_map(|row| {
        Interface::from_partial_row(ovsdb::Uuid::nil(), row).ok()
    })))
}

/// The agent's interfaces among `rows`, sorted by name.
fn owned_ports(rows: impl IntoIterator<Item = Interface>) -> Vec<PortStats> {
    let mut out: Vec<PortStats> = rows
        .into_iter()
        .filter(|i| i.external_ids.get(OWNER_KEY).map(String::as_str) == Some(OWNER))
        .map(|i| PortStats {
            pod: i.external_ids.get(POD_KEY).cloned().unwrap_or_default(),
            port: i.name,
            kind: i.type_,
            statistics: i.statistics,
        })
        .collect();
    out.sort_by(|a, b| a.port.cmp(&b.port));
    out
}

/// Connects a client to the local Open_vSwitch database `remote` (`unix:PATH`) for
/// [`PortSource::Db`], bounded by [`COLLECT_TIMEOUT`].
pub async fn connect_db(remote: &str) -> Result<Client, ovsdb::Error> {
    let cfg = ClientConfig::parse(remote)?
        .with_leader_only(false)
        .with_connect_timeout(COLLECT_TIMEOUT)
        .with_request_timeout(COLLECT_TIMEOUT)
        .with_backoff(Duration::from_millis(100), Duration::from_secs(2));
    Client::connect(cfg).await
}

/// Collects on demand for the agent's `/metrics` (ports from the agent's replica) and
/// keeps the last snapshot for the prometheus-client [`Collector`] that encodes it.
#[derive(Debug)]
pub struct DatapathCollector {
    ctl: Unixctl,
    ovs: Ovs,
    last: Arc<Mutex<DatapathSnapshot>>,
    /// When the last collection ended; held during a collection, so concurrent scrapes
    /// wait for it and share its snapshot.
    gate: tokio::sync::Mutex<Option<Instant>>,
}

impl DatapathCollector {
    /// `ctl`: ovs-vswitchd's unixctl socket; `ovs`: the agent's local database.
    pub fn new(ctl: &Path, ovs: Ovs) -> DatapathCollector {
        DatapathCollector {
            ctl: Unixctl::new(ctl).with_timeout(COLLECT_TIMEOUT),
            ovs,
            last: Arc::default(),
            gate: tokio::sync::Mutex::new(None),
        }
    }

    /// Collects a fresh snapshot and keeps it for the next encode, unless the last one is
    /// younger than [`MIN_COLLECT_INTERVAL`]: then that one.
    pub async fn refresh(&self) -> DatapathSnapshot {
        let mut ended = self.gate.lock().await;
        if ended.is_some_and(|at| at.elapsed() < MIN_COLLECT_INTERVAL) {
            return self.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        }
        let collections = self
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .collections;
        let source = if self.ovs.is_synced() {
            PortSource::Replica(self.ovs.replica())
        } else {
            PortSource::Unavailable
        };
        let mut snap = collect(&self.ctl, source).await;
        snap.collections = collections + 1;
        *ended = Some(Instant::now());
        if let Some(e) = &snap.vswitchd_error {
            tracing::debug!(socket = %self.ctl.socket().display(), error = %e, "datapath metrics: vswitchd not answering");
        }
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = snap.clone();
        snap
    }

    fn encoder(&self) -> SnapshotEncoder {
        SnapshotEncoder(self.last.clone())
    }
}

/// Hooks the datapath metrics into `metrics`: collected before each scrape.
pub fn register(metrics: &mut crate::agent::metrics::Metrics, vswitchd_ctl: &Path, ovs: Ovs) {
    let collector = Arc::new(DatapathCollector::new(vswitchd_ctl, ovs));
    metrics.register_collector(Box::new(collector.encoder()));
    metrics.on_scrape(Box::new(move || {
        let c = collector.clone();
        Box::pin(async move {
            c.refresh().await;
        })
    }));
}

/// Encodes the last snapshot.
#[derive(Debug)]
struct SnapshotEncoder(Arc<Mutex<DatapathSnapshot>>);

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One metric family: name, help, samples.
struct Family<M> {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Labels, M)>,
}

impl<M: EncodeMetric> Family<M> {
    fn new(name: &'static str, help: &'static str) -> Family<M> {
        Family {
            name,
            help,
            samples: Vec::new(),
        }
    }

    fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some((_, first)) = self.samples.first() else {
            return Ok(());
        };
        let mut m = encoder.encode_descriptor(self.name, self.help, None, first.metric_type())?;
        for (l, v) in &self.samples {
            if l.is_empty() {
                v.encode(m)?;
                break;
            }
            v.encode(m.encode_family(l)?)?;
        }
        Ok(())
    }
}

impl Collector for SnapshotEncoder {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut up = Family::<ConstGauge<i64>>::new(
            "zstack_ovn_vswitchd_up",
            "1 when ovs-vswitchd answered on its unixctl socket at the last scrape",
        );
        up.samples
            .push((Vec::new(), ConstGauge::new(i64::from(s.vswitchd_up))));
        up.encode(&mut encoder)?;
        let mut scrape = Family::<ConstGauge<f64>>::new(
            "zstack_ovn_datapath_scrape_seconds",
            "Time taken to collect the datapath metrics of this scrape",
        );
        scrape
            .samples
            .push((Vec::new(), ConstGauge::new(s.collect_seconds)));
        scrape.encode(&mut encoder)?;
        let mut collections = Family::<ConstCounter<u64>>::new(
            "zstack_ovn_datapath_collections",
            "Collections from ovs-vswitchd and the database (at most one per second; scrapes in between get the last)",
        );
        collections
            .samples
            .push((Vec::new(), ConstCounter::new(s.collections)));
        collections.encode(&mut encoder)?;

        let mut packets = Family::<ConstCounter<u64>>::new(
            "zstack_ovn_pmd_packets",
            "Packets received by a datapath thread (core=main: the non-PMD main thread)",
        );
        let mut cycles = Family::<ConstCounter<u64>>::new(
            "zstack_ovn_pmd_cycles",
            "PMD thread cycles, idle (polling empty queues) or busy (processing packets)",
        );
        let mut busy = Family::<ConstGauge<f64>>::new(
            "zstack_ovn_pmd_busy_ratio",
            "Busy cycles / (idle + busy) of a PMD thread since start or the last pmd-stats-clear",
        );
        let mut per_pkt = Family::<ConstGauge<f64>>::new(
            "zstack_ovn_pmd_avg_cycles_per_packet",
            "Average cycles (idle + busy) per received packet of a PMD thread",
        );
        let mut lookups = Family::<ConstCounter<u64>>::new(
            "zstack_ovn_pmd_lookups",
            "Packets by flow-cache result: emc, smc, megaflow hits; upcall (miss), upcall_failed",
        );
        for t in &s.pmd {
            let (core, numa) = t.thread.labels();
            let l = labels(&[("core", &core), ("numa", &numa)]);
            packets
                .samples
                .push((l.clone(), ConstCounter::new(t.packets_received)));
            if let (Some(idle), Some(proc_)) = (t.idle_cycles, t.processing_cycles) {
                for (kind, v) in [("idle", idle), ("busy", proc_)] {
                    let mut k = l.clone();
                    k.push(("kind".into(), kind.into()));
                    cycles.samples.push((k, ConstCounter::new(v)));
                }
            }
            if let Some(b) = t.busy_percent() {
                busy.samples.push((l.clone(), ConstGauge::new(b / 100.0)));
            }
            if let Some(c) = t.avg_cycles_per_packet {
                per_pkt.samples.push((l.clone(), ConstGauge::new(c)));
            }
            for (result, v) in [
                ("emc", t.emc_hits),
                ("smc", t.smc_hits),
                ("megaflow", t.megaflow_hits),
                ("upcall", t.miss_upcall_ok),
                ("upcall_failed", t.miss_upcall_failed),
            ] {
                let mut k = l.clone();
                k.push(("result".into(), result.into()));
                lookups.samples.push((k, ConstCounter::new(v)));
            }
        }
        packets.encode(&mut encoder)?;
        cycles.encode(&mut encoder)?;
        busy.encode(&mut encoder)?;
        per_pkt.encode(&mut encoder)?;
        lookups.encode(&mut encoder)?;

        let mut rxq = Family::<ConstGauge<i64>>::new(
            "zstack_ovn_pmd_rxq_usage_percent",
            "Share of a PMD's processing cycles spent on one rx queue over the last 60 s",
        );
        let mut overhead = Family::<ConstGauge<i64>>::new(
            "zstack_ovn_pmd_overhead_percent",
            "Share of a PMD's processing cycles not attributed to any rx queue",
        );
        for p in &s.rxq.pmds {
            let (core, numa) = (p.core.to_string(), p.numa.to_string());
            for q in &p.rxqs {
                if let Some(u) = q.usage_percent {
                    let l = labels(&[
                        ("core", &core),
                        ("numa", &numa),
                        ("port", &q.port),
                        ("queue", &q.queue.to_string()),
                    ]);
                    rxq.samples.push((l, ConstGauge::new(i64::from(u))));
                }
            }
            if let Some(o) = p.overhead_percent {
                let l = labels(&[("core", &core), ("numa", &numa)]);
                overhead.samples.push((l, ConstGauge::new(i64::from(o))));
            }
        }
        rxq.encode(&mut encoder)?;
        overhead.encode(&mut encoder)?;

        let mut rx_pkts = Family::<ConstCounter<u64>>::new(
            "zstack_ovn_port_rx_packets",
            "Packets received by OVS from an agent port (sent by the pod)",
        );
        let mut tx_pkts = Family::<ConstCounter<u64>>::new(
            "zstack_ovn_port_tx_packets",
            "Packets sent by OVS to an agent port (received by the pod)",
        );
        let mut bytes = Family::<ConstCounter<u64>>::new(
            "zstack_ovn_port_bytes",
            "Bytes through an agent port, as OVS sees them (rx: from the pod)",
        );
        let mut dropped = Family::<ConstCounter<u64>>::new(
            "zstack_ovn_port_dropped",
            "Packets dropped on an agent port",
        );
        let mut errors =
            Family::<ConstCounter<u64>>::new("zstack_ovn_port_errors", "Errors on an agent port");
        for p in &s.ports {
            let l = labels(&[("port", &p.port), ("pod", &p.pod)]);
            let with_dir = |d: &str| {
                let mut k = l.clone();
                k.push(("direction".into(), d.into()));
                k
            };
            if let Some(v) = p.get("rx_packets") {
                rx_pkts.samples.push((l.clone(), ConstCounter::new(v)));
            }
            if let Some(v) = p.get("tx_packets") {
                tx_pkts.samples.push((l.clone(), ConstCounter::new(v)));
            }
            for (fam, key) in [
                (&mut bytes, "bytes"),
                (&mut dropped, "dropped"),
                (&mut errors, "errors"),
            ] {
                for d in ["rx", "tx"] {
                    if let Some(v) = p.get(&format!("{d}_{key}")) {
                        fam.samples.push((with_dir(d), ConstCounter::new(v)));
                    }
                }
            }
        }
        for f in [&rx_pkts, &tx_pkts, &bytes, &dropped, &errors] {
            f.encode(&mut encoder)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovsdb::pmd_stats::{parse_pmd_rxq, parse_pmd_stats};

    fn fixture(name: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/ovs")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn render(s: DatapathSnapshot) -> String {
        let mut r = prometheus_client::registry::Registry::default();
        r.register_collector(Box::new(SnapshotEncoder(Arc::new(Mutex::new(s)))));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        out
    }

    #[test]
    fn exposition_from_real_outputs() {
        let snap = DatapathSnapshot {
            vswitchd_up: true,
            pmd: parse_pmd_stats(&fixture("pmd-stats-show.afxdp.txt")).unwrap(),
            rxq: parse_pmd_rxq(&fixture("pmd-rxq-show.afxdp.txt")).unwrap(),
            ports: vec![PortStats {
                port: "obsvha".into(),
                pod: "default/a".into(),
                kind: "afxdp".into(),
                statistics: [
                    ("rx_bytes", 5_590_827_999),
                    ("rx_dropped", 27_532),
                    ("rx_packets", 3_731_403),
                    ("tx_bytes", 15_285_124),
                    ("tx_packets", 219_199),
                    ("xsk_queue_0_rx_dropped", 1_236),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            }],
            ..Default::default()
        };
        let t = render(snap);
        for line in [
            "zstack_ovn_vswitchd_up 1",
            r#"zstack_ovn_pmd_packets_total{core="1",numa="0"} 3923058"#,
            r#"zstack_ovn_pmd_packets_total{core="main",numa=""} 35"#,
            r#"zstack_ovn_pmd_cycles_total{core="1",numa="0",kind="idle"} 373651616"#,
            r#"zstack_ovn_pmd_cycles_total{core="1",numa="0",kind="busy"} 33758678912"#,
            r#"zstack_ovn_pmd_avg_cycles_per_packet{core="1",numa="0"} 8700.44"#,
            r#"zstack_ovn_pmd_lookups_total{core="1",numa="0",result="emc"} 3921320"#,
            r#"zstack_ovn_pmd_rxq_usage_percent{core="1",numa="0",port="obsvha",queue="0"} 14"#,
            r#"zstack_ovn_pmd_rxq_usage_percent{core="1",numa="0",port="obsvhb",queue="0"} 4"#,
            r#"zstack_ovn_pmd_overhead_percent{core="1",numa="0"} 0"#,
            r#"zstack_ovn_port_rx_packets_total{port="obsvha",pod="default/a"} 3731403"#,
            r#"zstack_ovn_port_tx_packets_total{port="obsvha",pod="default/a"} 219199"#,
            r#"zstack_ovn_port_bytes_total{port="obsvha",pod="default/a",direction="rx"} 5590827999"#,
            r#"zstack_ovn_port_dropped_total{port="obsvha",pod="default/a",direction="rx"} 27532"#,
        ] {
            assert!(t.lines().any(|l| l == line), "missing {line:?} in\n{t}");
        }
        // the main thread has no cycle counters; afxdp ports have no error counters
        assert!(
            !t.contains(r#"zstack_ovn_pmd_cycles_total{core="main""#),
            "{t}"
        );
        assert!(!t.contains("zstack_ovn_port_errors_total{"), "{t}");
        let busy = t
            .lines()
            .find_map(|l| l.strip_prefix(r#"zstack_ovn_pmd_busy_ratio{core="1",numa="0"} "#))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap();
        assert!((busy - 0.9891).abs() < 1e-4, "{busy}");
    }

    #[test]
    fn a_dead_vswitchd_is_a_gauge_not_an_error() {
        let t = render(DatapathSnapshot {
            vswitchd_error: Some("connect: no such file".into()),
            ..Default::default()
        });
        assert!(t.lines().any(|l| l == "zstack_ovn_vswitchd_up 0"), "{t}");
        assert!(!t.contains("zstack_ovn_pmd_packets_total{"), "{t}");
    }

    #[tokio::test]
    async fn collect_from_a_missing_socket_is_bounded_and_down() {
        let ctl = Unixctl::new("/nonexistent/ovs-vswitchd.ctl");
        let s = collect(&ctl, PortSource::Unavailable).await;
        assert!(!s.vswitchd_up);
        let e = s.vswitchd_error.unwrap();
        assert!(
            e.contains("/nonexistent/ovs-vswitchd.ctl") && e.contains("pmd-stats-show"),
            "{e}"
        );
        assert!(s.ports_error.is_some());
        assert!(s.collect_seconds < COLLECT_TIMEOUT.as_secs_f64());
    }
}
