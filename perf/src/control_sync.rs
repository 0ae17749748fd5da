//! Control-plane sync benchmark on a real OVN NB (ovsdb-server + ovn-northd from the lab).
//!
//! - **cold sync**: a controller starts against an empty NB with `pods` pods over
//!   `subnets` Subnets already in its object store (the lab's in-process store); measured
//!   from start to the first pass that writes nothing (NB rows, pod annotations and Subnet
//!   status all written);
//! - **restart**: a second controller starts on the same store and NB with nothing
//!   changed; measured to steady state, and its NB transactions counted (target: zero);
//! - **baseline** in the same run: the raw batched insert of the same number of switch
//!   ports through the OVSDB client alone, on a fresh NB — the floor any controller pays.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use api::subnet::{Subnet, SubnetSpec};
use control::controller::Controller;
use control::model::{NodeInfo, PodInfo};
use control::reconcile::Reconciler;
use control::source::Event;
use control::source::memory::MemoryStore;
use control::translate::ClusterConfig;
use ovsdb::{Client, ClientConfig};
use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::ovsdb_insert::{client_batched, start_central};

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    pub dir: PathBuf,
    pub pods: usize,
    pub subnets: usize,
    pub nodes: usize,
}

/// What one run measured (seconds).
#[derive(Debug, Clone)]
pub struct Report {
    pub config: Config,
    pub cold_sync_s: f64,
    pub cold_passes: usize,
    pub cold_nb_transactions: usize,
    pub restart_s: f64,
    pub restart_nb_transactions: usize,
    pub baseline_raw_insert_s: f64,
}

impl Report {
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "benchmark": "control-sync",
            "pods": self.config.pods,
            "subnets": self.config.subnets,
            "nodes": self.config.nodes,
            "cold_sync_s": self.cold_sync_s,
            "cold_passes": self.cold_passes,
            "cold_nb_transactions": self.cold_nb_transactions,
            "restart_s": self.restart_s,
            "restart_nb_transactions": self.restart_nb_transactions,
            "baseline_raw_insert_s": self.baseline_raw_insert_s,
            "cold_sync_vs_raw_insert": self.cold_sync_s / self.baseline_raw_insert_s,
        })
    }

    pub fn table(&self) -> String {
        format!(
            "control sync: {} pods over {} subnets, {} nodes\n\
             cold sync to steady state   {:>7.2} s  ({} passes, {} NB transactions)\n\
             restart, nothing changed    {:>7.2} s  ({} NB transactions)\n\
             baseline: raw batched insert of {} ports {:>6.2} s  -> cold sync = {:.1}x the raw insert\n",
            self.config.pods,
            self.config.subnets,
            self.config.nodes,
            self.cold_sync_s,
            self.cold_passes,
            self.cold_nb_transactions,
            self.restart_s,
            self.restart_nb_transactions,
            self.config.pods,
            self.baseline_raw_insert_s,
            self.cold_sync_s / self.baseline_raw_insert_s,
        )
    }
}

fn fill(store: &MemoryStore, cfg: &Config) -> Result<()> {
    ensure!(
        cfg.subnets > 0 && cfg.subnets < 200,
        "subnets must be 1..199"
    );
    ensure!(cfg.nodes > 0, "nodes must be > 0");
    for i in 0..cfg.subnets {
        let mut spec = SubnetSpec {
            cidr: format!("10.{}.0.0/16", 100 + i),
            ..Default::default()
        };
        spec.namespaces = vec![format!("ns{i}")];
        let mut s = Subnet::new(&format!("sn{i}"), spec);
        let t = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + i as i64)
            .context("timestamp")?;
        s.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t));
        s.metadata.generation = Some(1);
        store.apply_subnet(s);
    }
    for n in 0..cfg.nodes {
        store.apply_node(NodeInfo {
            name: format!("node{}", n + 1),
            addresses: vec![],
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        });
    }
    for p in 0..cfg.pods {
        store.apply_pod(PodInfo {
            namespace: format!("ns{}", p % cfg.subnets),
            name: format!("pod{p}"),
            uid: format!("uid{p}"),
            node: Some(format!("node{}", p % cfg.nodes + 1)),
            host_network: false,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            completed: false,
            ports: Vec::new(),
        });
    }
    store.mark_synced();
    Ok(())
}

/// Runs passes until one writes nothing; returns (passes, NB transactions).
async fn settle(
    ctl: &mut Controller<MemoryStore>,
    rx: &mut UnboundedReceiver<Event>,
) -> Result<(usize, usize)> {
    let s = ctl.settle(rx, 10).await?;
    Ok((s.passes, s.transactions))
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

/// Runs the benchmark.
pub async fn run(cfg: Config) -> Result<Report> {
    let central = start_central(&cfg.dir.join("sync"))?;
    let nb = central.nb_remote();
    let (store, mut rx) = MemoryStore::new();
    fill(&store, &cfg)?;

    let t0 = Instant::now();
    let mut ctl = controller(&nb, &store).await?;
    let (cold_passes, cold_nb_transactions) = settle(&mut ctl, &mut rx).await?;
    let cold_sync_s = t0.elapsed().as_secs_f64();
    let ports = nb_pod_ports(&nb).await?;
    ensure!(
        ports == cfg.pods,
        "cold sync wrote {ports} pod ports, expected {}",
        cfg.pods
    );
    drop(ctl);

    let t1 = Instant::now();
    let mut replay = store.replay();
    let mut ctl = controller(&nb, &store).await?;
    let (_, restart_nb_transactions) = settle(&mut ctl, &mut replay).await?;
    let restart_s = t1.elapsed().as_secs_f64();
    drop(ctl);
    central.stop()?;

    let base = start_central(&cfg.dir.join("baseline"))?;
    let raw = client_batched(&base.nb_remote(), cfg.pods, 1000).await?;
    base.stop()?;

    Ok(Report {
        config: cfg,
        cold_sync_s,
        cold_passes,
        cold_nb_transactions,
        restart_s,
        restart_nb_transactions,
        baseline_raw_insert_s: raw.seconds,
    })
}

/// Pod ports in the NB, counted by a fresh client (not the controller's own view).
async fn nb_pod_ports(nb: &str) -> Result<usize> {
    let client = Client::connect(ClientConfig::parse(nb)?).await?;
    let res = client
        .transact(
            "OVN_Northbound",
            vec![
                ovsdb::Operation::select(
                    "Logical_Switch_Port",
                    vec![ovsdb::Condition::includes(
                        "external_ids",
                        ovsdb::Value::string_map([(control::names::KIND, "pod")]),
                    )],
                )
                .with_columns(["name"]),
            ],
        )
        .await?;
    client.close().await;
    Ok(res.first().map(|r| r.rows().len()).unwrap_or(0))
}
