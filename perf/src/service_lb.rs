//! Service load balancer benchmark on a real OVN NB (ovsdb-server from the lab).
//!
//! - **endpoint change → LB updated**: the real controller (its event loop, fed by the
//!   in-process object store) serves `services` Services; one Service's EndpointSlice
//!   changes at a time (a backend added, or swapped), and the time until a separate NB
//!   client's replica shows that Service's `Load_Balancer.vips` with the new backend is
//!   measured, `changes` times (p50/p99). Each change must cost exactly one row write.
//!   **Baseline** in the same run: the same one-row `vips` update written directly with
//!   our OVSDB client and observed the same way (the floor: a transaction + a monitor
//!   update).
//! - **rows as Services grow**: for each count in `scale`, a fresh NB and controller,
//!   cold sync to steady state; NB `Load_Balancer` rows (one per Service and protocol:
//!   linear, not quadratic), the time to sync, and the rows written by one endpoint
//!   change at that size (constant).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use api::subnet::{Subnet, SubnetSpec};
use control::controller::Controller;
use control::model::NodeInfo;
use control::reconcile::Reconciler;
use control::services::{
    EndpointInfo, EndpointPort, EndpointSliceInfo, Proto, ServiceInfo, ServicePort, TargetPort,
};
use control::source::Event;
use control::source::memory::MemoryStore;
use control::translate::ClusterConfig;
use ovsdb::nb::LoadBalancer;
use ovsdb::{Client, ClientConfig, Condition, MonitorRequest, Operation, Replica, Value};
use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::cni_add::percentile;
use crate::ovsdb_insert::start_central;

const NB: &str = "OVN_Northbound";
const WAIT: Duration = Duration::from_secs(60);

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    pub dir: PathBuf,
    /// Services while endpoint changes are measured.
    pub services: usize,
    /// Endpoint changes measured.
    pub changes: usize,
    /// Service counts of the scaling series.
    pub scale: Vec<usize>,
}

/// One point of the scaling series.
#[derive(Debug, Clone)]
pub struct ScalePoint {
    pub services: usize,
    pub lb_rows: usize,
    pub sync_s: f64,
    pub rows_written_per_change: usize,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub config: Config,
    /// Endpoint change → LB row updated in the NB (seconds).
    pub latencies: Vec<f64>,
    /// Direct one-row vips update → seen (seconds).
    pub baseline: Vec<f64>,
    pub scale: Vec<ScalePoint>,
}

impl Report {
    fn ms(v: &[f64], q: f64) -> f64 {
        percentile(v, q) * 1e3
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "benchmark": "service-lb",
            "services": self.config.services,
            "changes": self.config.changes,
            "endpoint_change_p50_ms": Self::ms(&self.latencies, 0.5),
            "endpoint_change_p99_ms": Self::ms(&self.latencies, 0.99),
            "baseline_direct_update_p50_ms": Self::ms(&self.baseline, 0.5),
            "baseline_direct_update_p99_ms": Self::ms(&self.baseline, 0.99),
            "scale": self.scale.iter().map(|p| json!({
                "services": p.services,
                "lb_rows": p.lb_rows,
                "sync_s": p.sync_s,
                "rows_per_service": p.lb_rows as f64 / p.services as f64,
                "sync_ms_per_service": p.sync_s * 1e3 / p.services as f64,
                "rows_written_per_change": p.rows_written_per_change,
            })).collect::<Vec<_>>(),
        })
    }

    pub fn table(&self) -> String {
        let mut out = format!(
            "service LBs: endpoint change -> Load_Balancer updated in the NB ({} changes, {} Services)\n\
             controller (event loop, diff, write, seen by another client)  p50 {:>6.2} ms  p99 {:>6.2} ms\n\
             baseline: the same one-row update written directly          p50 {:>6.2} ms  p99 {:>6.2} ms\n\
             \n{:>9} {:>8} {:>10} {:>12} {:>16} {:>16}\n",
            self.latencies.len(),
            self.config.services,
            Self::ms(&self.latencies, 0.5),
            Self::ms(&self.latencies, 0.99),
            Self::ms(&self.baseline, 0.5),
            Self::ms(&self.baseline, 0.99),
            "services",
            "LB rows",
            "rows/svc",
            "sync s",
            "sync ms/svc",
            "rows/change",
        );
        for p in &self.scale {
            out.push_str(&format!(
                "{:>9} {:>8} {:>10.2} {:>12.2} {:>16.3} {:>16}\n",
                p.services,
                p.lb_rows,
                p.lb_rows as f64 / p.services as f64,
                p.sync_s,
                p.sync_s * 1e3 / p.services as f64,
                p.rows_written_per_change
            ));
        }
        out
    }
}

fn backend(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        10,
        16,
        ((i >> 8) & 0xff) as u8,
        (i & 0xff) as u8,
    ))
}

fn service(i: usize) -> ServiceInfo {
    ServiceInfo {
        namespace: "bench".into(),
        name: format!("svc{i}"),
        cluster_ips: vec![IpAddr::V4(Ipv4Addr::new(
            10,
            96,
            ((i >> 8) & 0xff) as u8,
            (i & 0xff) as u8,
        ))],
        node_ports: true,
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: Proto::Tcp,
            port: 80,
            target_port: TargetPort::Number(8080),
            node_port: Some(30000 + (i % 2700) as u16),
        }],
        ..Default::default()
    }
}

fn slice(i: usize, backends: &[IpAddr]) -> EndpointSliceInfo {
    EndpointSliceInfo {
        namespace: "bench".into(),
        name: format!("svc{i}-1"),
        service: format!("svc{i}"),
        endpoints: backends
            .iter()
            .enumerate()
            .map(|(n, ip)| EndpointInfo {
                addresses: vec![*ip],
                ready: true,
                serving: true,
                terminating: false,
                node: Some(format!("node{}", n % 2 + 1)),
            })
            .collect(),
        ports: vec![EndpointPort {
            name: "http".into(),
            port: 8080,
            protocol: Proto::Tcp,
        }],
    }
}

fn fill(store: &MemoryStore, services: usize) {
    let mut spec = SubnetSpec {
        cidr: "10.16.0.0/16".into(),
        ..Default::default()
    };
    spec.default = true;
    store.apply_subnet(Subnet::new("bench", spec));
    for n in 1..=2u8 {
        store.apply_node(NodeInfo {
            name: format!("node{n}"),
            addresses: vec![IpAddr::V4(Ipv4Addr::new(172, 18, 0, n))],
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        });
    }
    for i in 0..services {
        store.apply_service(service(i));
        store.apply_endpoint_slice(slice(i, &[backend(2 * i), backend(2 * i + 1)]));
    }
    store.mark_synced();
}

async fn controller(nb: &str, store: &MemoryStore) -> Result<Controller<MemoryStore>> {
    let client = Client::connect(ClientConfig::parse(nb)?).await?;
    let rec = Reconciler::start(client, "zstack-ovn").await?;
    Ok(Controller::new(
        ClusterConfig::default(),
        rec,
        store.clone(),
    ))
}

/// Passes until one writes nothing; returns the NB row writes of all passes.
async fn settle(
    ctl: &mut Controller<MemoryStore>,
    rx: &mut UnboundedReceiver<Event>,
) -> Result<usize> {
    Ok(ctl.settle(rx, 10).await?.rows_written())
}

/// An independent observer of the NB's Load_Balancer rows.
async fn observer(nb: &str) -> Result<(Client, Replica)> {
    let client = Client::connect(ClientConfig::parse(nb)?).await?;
    let replica = client
        .monitor(NB, vec![MonitorRequest::of::<LoadBalancer>()])
        .await?;
    replica.wait_for(WAIT, |_| true).await?;
    Ok((client, replica))
}

/// Waits until the LB of Service `i` has a VIP whose backends contain `needle`.
async fn seen(replica: &Replica, i: usize, needle: &str) -> Result<()> {
    let name = control::names::service_lb(&format!("bench/svc{i}"), "TCP");
    let vip = format!("{}:80", service(i).cluster_ips[0]);
    replica
        .wait_for(WAIT, |v| {
            v.rows("Load_Balancer").any(|r| {
                r.get_as::<String>("name").ok().as_deref() == Some(name.as_str())
                    && r.map_get("vips", &vip).is_some_and(|b| b.contains(needle))
            })
        })
        .await
        .with_context(|| format!("{name} never showed {needle}"))
}

fn lb_rows(replica: &Replica) -> usize {
    replica.read(|v| v.rows("Load_Balancer").count())
}

/// Runs the benchmark.
pub async fn run(cfg: Config) -> Result<Report> {
    ensure!(
        cfg.services > 0 && cfg.services < 30_000,
        "services must be 1..29999"
    );
    // endpoint change latency through the controller's own event loop
    let central = start_central(&cfg.dir.join("latency"))?;
    let nb = central.nb_remote();
    let (store, rx) = MemoryStore::new();
    fill(&store, cfg.services);
    let (_obs_client, replica) = observer(&nb).await?;
    let ctl = controller(&nb, &store).await?;
    let task = tokio::spawn(ctl.run(rx));
    replica
        .wait_for(WAIT, |v| v.rows("Load_Balancer").count() >= cfg.services)
        .await
        .context("initial sync")?;
    let mut latencies = Vec::with_capacity(cfg.changes);
    for c in 0..cfg.changes {
        let i = (c * 7919) % cfg.services;
        let fresh = backend(60_000 - c % 5_000);
        let t0 = Instant::now();
        store.apply_endpoint_slice(slice(i, &[backend(2 * i), fresh]));
        seen(&replica, i, &format!("{fresh}:8080")).await?;
        latencies.push(t0.elapsed().as_secs_f64());
    }
    task.abort();

    // baseline: the same one-row update written directly
    let direct = Client::connect(ClientConfig::parse(&nb)?).await?;
    let mut baseline = Vec::with_capacity(cfg.changes);
    for c in 0..cfg.changes {
        let i = (c * 7919) % cfg.services;
        let name = control::names::service_lb(&format!("bench/svc{i}"), "TCP");
        let vip = format!("{}:80", service(i).cluster_ips[0]);
        let fresh = format!("{}:8080", backend(50_000 - c % 5_000));
        let t0 = Instant::now();
        // replace the VIP's backends: delete the key, insert it anew (one transaction)
        direct
            .transact(
                NB,
                vec![Operation::mutate(
                    "Load_Balancer",
                    vec![Condition::eq("name", Value::string(&name))],
                    vec![
                        ovsdb::Mutation::delete("vips", Value::string_set([vip.as_str()])),
                        ovsdb::Mutation::insert(
                            "vips",
                            Value::string_map([(vip.as_str(), fresh.as_str())]),
                        ),
                    ],
                )],
            )
            .await?;
        seen(&replica, i, &fresh).await?;
        baseline.push(t0.elapsed().as_secs_f64());
    }
    direct.close().await;
    central.stop()?;

    // rows as the number of Services grows
    let mut scale = Vec::new();
    for &n in &cfg.scale {
        let central = start_central(&cfg.dir.join(format!("scale{n}")))?;
        let nb = central.nb_remote();
        let (store, mut rx) = MemoryStore::new();
        fill(&store, n);
        let (_c, replica) = observer(&nb).await?;
        let t0 = Instant::now();
        let mut ctl = controller(&nb, &store).await?;
        settle(&mut ctl, &mut rx).await?;
        let sync_s = t0.elapsed().as_secs_f64();
        replica
            .wait_for(WAIT, |v| v.rows("Load_Balancer").count() >= n)
            .await?;
        let rows = lb_rows(&replica);
        store.apply_endpoint_slice(slice(n / 2, &[backend(2 * (n / 2)), backend(65_000)]));
        let written = settle(&mut ctl, &mut rx).await?;
        scale.push(ScalePoint {
            services: n,
            lb_rows: rows,
            sync_s,
            rows_written_per_change: written,
        });
        drop(ctl);
        central.stop()?;
    }
    Ok(Report {
        config: cfg,
        latencies,
        baseline,
        scale,
    })
}
