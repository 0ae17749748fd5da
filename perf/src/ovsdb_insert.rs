//! Bulk insert of logical switch ports into a real OVN Northbound database.
//!
//! Three writers, each on a fresh NB `ovsdb-server` started by the lab (standalone, no
//! northd, so only the database works):
//!
//! 1. our client, batched transactions (`batch` ports per transaction: one `insert` per
//!    port with a `uuid-name`, one `mutate` adding them to the switch's `ports`);
//! 2. `ovn-nbctl`, one invocation per port (`lsp-add` + `lsp-set-addresses`) — the way a
//!    shell-driven controller works; run on the first `nbctl_loop_ports` ports only,
//!    because each invocation re-reads the growing database (the rate only falls as it
//!    grows, so a shorter loop flatters `ovn-nbctl`);
//! 3. `ovn-nbctl`, one invocation carrying every command.
//!
//! Each writer's result is checked (the NB holds exactly the expected ports) before its
//! rate counts. Then the replica's memory per row: live heap bytes (counting allocator)
//! before and after a monitor of `Logical_Switch_Port` syncs the 10,000 rows.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use lab::central::{Central, CentralConfig};
use ovsdb::nb::{LogicalSwitch, LogicalSwitchPort};
use ovsdb::typed::Table;
use ovsdb::{Client, ClientConfig, Condition, MonitorRequest, Mutation, Operation, Value};
use serde_json::json;

const DB: &str = "OVN_Northbound";
const SWITCH: &str = "bench-ls";

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    /// Scratch directory (one sub-directory per writer).
    pub dir: PathBuf,
    /// Ports inserted by the client and by the single `ovn-nbctl` invocation.
    pub ports: usize,
    /// Ports per client transaction.
    pub batch: usize,
    /// Ports inserted by the one-invocation-per-port `ovn-nbctl` loop.
    pub nbctl_loop_ports: usize,
}

/// Rows written, time taken, rate.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub rows: usize,
    pub seconds: f64,
}

impl Rate {
    pub fn per_second(&self) -> f64 {
        self.rows as f64 / self.seconds.max(1e-9)
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub config: Config,
    pub client_batched: Rate,
    pub nbctl_per_invocation: Rate,
    pub nbctl_single_invocation: Rate,
    /// Live heap bytes the replica holds per `Logical_Switch_Port` row.
    pub replica_bytes_per_row: f64,
    /// The same rows' size as compact OVSDB JSON, for scale.
    pub json_bytes_per_row: f64,
    /// Time from `monitor` to the replica holding every row.
    pub replica_sync_seconds: f64,
}

impl Report {
    /// The report as JSON (rates, ratios, memory).
    pub fn to_json(&self) -> serde_json::Value {
        let base = self.nbctl_per_invocation.per_second();
        json!({
            "benchmark": "ovsdb-insert",
            "ports": self.config.ports,
            "batch": self.config.batch,
            "nbctl_loop_ports": self.config.nbctl_loop_ports,
            "rows_per_s": {
                "client_batched": self.client_batched.per_second(),
                "nbctl_per_invocation": base,
                "nbctl_single_invocation": self.nbctl_single_invocation.per_second(),
            },
            "seconds": {
                "client_batched": self.client_batched.seconds,
                "nbctl_per_invocation": self.nbctl_per_invocation.seconds,
                "nbctl_single_invocation": self.nbctl_single_invocation.seconds,
                "replica_sync": self.replica_sync_seconds,
            },
            "ratio_vs_nbctl_per_invocation": {
                "client_batched": self.client_batched.per_second() / base,
                "nbctl_single_invocation": self.nbctl_single_invocation.per_second() / base,
            },
            "replica_bytes_per_row": self.replica_bytes_per_row,
            "json_bytes_per_row": self.json_bytes_per_row,
        })
    }

    /// A human-readable table.
    pub fn table(&self) -> String {
        let base = self.nbctl_per_invocation.per_second();
        let line = |name: &str, r: &Rate| {
            format!(
                "{name:<40} {:>7} rows {:>8.2} s {:>10.0} rows/s {:>8.1}x\n",
                r.rows,
                r.seconds,
                r.per_second(),
                r.per_second() / base
            )
        };
        let mut s = String::from(
            "writer                                      rows     time         rate   vs loop\n",
        );
        s += &line(
            &format!("ovsdb client, {} ports/transaction", self.config.batch),
            &self.client_batched,
        );
        s += &line(
            "ovn-nbctl, one invocation per port",
            &self.nbctl_per_invocation,
        );
        s += &line(
            "ovn-nbctl, one invocation, all commands",
            &self.nbctl_single_invocation,
        );
        s += &format!(
            "replica: {:.0} bytes/row in memory ({:.0} bytes/row as OVSDB JSON), synced {} rows in {:.2} s\n",
            self.replica_bytes_per_row,
            self.json_bytes_per_row,
            self.config.ports,
            self.replica_sync_seconds
        );
        s
    }
}

fn mac_ip(i: usize) -> (String, String) {
    let (a, b, c) = ((i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
    (
        format!("0a:58:0a:{a:02x}:{b:02x}:{c:02x}"),
        format!("10.{a}.{b}.{c}"),
    )
}

fn port_name(i: usize) -> String {
    format!("bench_p{i}")
}

pub fn start_central(dir: &Path) -> Result<Central> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    Central::start(CentralConfig {
        dir: dir.to_path_buf(),
        raft: false,
        northd: false,
        tcp: false,
    })
    .context("start OVN NB for the benchmark")
}

fn nbctl(remote: &str, args: &[String]) -> Result<()> {
    let out = Command::new("ovn-nbctl")
        .arg(format!("--db={remote}"))
        .args(args)
        .output()
        .context("run ovn-nbctl (is ovn-central installed?)")?;
    if !out.status.success() {
        bail!(
            "ovn-nbctl {}: {}",
            args.first().map(String::as_str).unwrap_or(""),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

async fn connect(remote: &str) -> Result<Client> {
    let cfg = ClientConfig::parse(remote)?.with_request_timeout(Duration::from_secs(120));
    Ok(Client::connect(cfg).await?)
}

/// Counts the switch's ports through the client: the check that a writer did its job.
async fn count_ports(client: &Client) -> Result<usize> {
    let res = client
        .transact(
            DB,
            vec![Operation::select(LogicalSwitchPort::TABLE, vec![]).with_columns(["name"])],
        )
        .await?;
    Ok(res.first().map(|r| r.rows().len()).unwrap_or(0))
}

pub async fn client_batched(remote: &str, ports: usize, batch: usize) -> Result<Rate> {
    let client = connect(remote).await?;
    let ls = LogicalSwitch {
        name: SWITCH.into(),
        ..Default::default()
    };
    client
        .transact(DB, vec![Operation::insert_typed(&ls)])
        .await?;
    let t0 = Instant::now();
    let mut i = 0;
    while i < ports {
        let end = (i + batch).min(ports);
        let mut ops = Vec::with_capacity(end - i + 1);
        let mut refs = Vec::with_capacity(end - i);
        for k in i..end {
            let (mac, ip) = mac_ip(k);
            let mut lsp = LogicalSwitchPort {
                name: port_name(k),
                ..Default::default()
            };
            lsp.addresses.insert(format!("{mac} {ip}"));
            lsp.external_ids
                .insert("zstack-ovn/owner".into(), "perf".into());
            let named = format!("p{k}");
            ops.push(Operation::insert_typed(&lsp).with_uuid_name(&named));
            refs.push(ovsdb::Atom::NamedUuid(named));
        }
        ops.push(Operation::mutate(
            LogicalSwitch::TABLE,
            vec![Condition::eq("name", Value::string(SWITCH))],
            vec![Mutation::insert("ports", Value::Set(refs))],
        ));
        client.transact(DB, ops).await?;
        i = end;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let n = count_ports(&client).await?;
    ensure!(n == ports, "client wrote {n} ports, expected {ports}");
    client.close().await;
    Ok(Rate {
        rows: ports,
        seconds,
    })
}

fn nbctl_loop(remote: &str, ports: usize) -> Result<Rate> {
    nbctl(remote, &["ls-add".into(), SWITCH.into()])?;
    let t0 = Instant::now();
    for k in 0..ports {
        let (mac, ip) = mac_ip(k);
        let p = port_name(k);
        nbctl(
            remote,
            &[
                "lsp-add".into(),
                SWITCH.into(),
                p.clone(),
                "--".into(),
                "lsp-set-addresses".into(),
                p,
                format!("{mac} {ip}"),
            ],
        )?;
    }
    Ok(Rate {
        rows: ports,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

fn nbctl_single(remote: &str, ports: usize) -> Result<Rate> {
    nbctl(remote, &["ls-add".into(), SWITCH.into()])?;
    let mut args: Vec<String> = Vec::with_capacity(ports * 8);
    for k in 0..ports {
        let (mac, ip) = mac_ip(k);
        let p = port_name(k);
        if k > 0 {
            args.push("--".into());
        }
        args.extend([
            "lsp-add".into(),
            SWITCH.into(),
            p.clone(),
            "--".into(),
            "lsp-set-addresses".into(),
            p,
            format!("{mac} {ip}"),
        ]);
    }
    let t0 = Instant::now();
    nbctl(remote, &args)?;
    Ok(Rate {
        rows: ports,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Heap bytes per row held by a replica of the `Logical_Switch_Port` table (needs the
/// [`crate::alloc::Counting`] allocator installed), the rows' JSON size, and sync time.
async fn replica_memory(remote: &str, ports: usize) -> Result<(f64, f64, f64)> {
    let client = connect(remote).await?;
    let before = crate::alloc::live_bytes();
    let t0 = Instant::now();
    let replica = client
        .monitor(DB, vec![MonitorRequest::of::<LogicalSwitchPort>()])
        .await?;
    replica
        .wait_for(Duration::from_secs(60), |v| {
            v.len(LogicalSwitchPort::TABLE) == ports
        })
        .await?;
    let sync = t0.elapsed().as_secs_f64();
    let after = crate::alloc::live_bytes();
    if after == 0 {
        bail!("the counting allocator is not installed in this binary");
    }
    let json_bytes: usize = replica
        .rows(LogicalSwitchPort::TABLE)
        .iter()
        .map(|(_, row)| ovsdb::ops::row_json(row).to_string().len())
        .sum();
    let per_row = after.saturating_sub(before) as f64 / ports as f64;
    drop(replica);
    client.close().await;
    Ok((per_row, json_bytes as f64 / ports as f64, sync))
}

/// Runs the three writers and the replica measurement; each writer on its own NB.
pub async fn run(cfg: Config) -> Result<Report> {
    ensure!(
        cfg.ports > 0 && cfg.batch > 0,
        "ports and batch must be > 0"
    );
    let client_central = start_central(&cfg.dir.join("client"))?;
    let client_batched = client_batched(&client_central.nb_remote(), cfg.ports, cfg.batch)
        .await
        .context("client batched insert")?;
    let (replica_bytes_per_row, json_bytes_per_row, replica_sync_seconds) =
        replica_memory(&client_central.nb_remote(), cfg.ports)
            .await
            .context("replica memory")?;
    client_central.stop()?;

    let loop_central = start_central(&cfg.dir.join("nbctl-loop"))?;
    let remote = loop_central.nb_remote();
    let nbctl_per_invocation =
        tokio::task::spawn_blocking(move || nbctl_loop(&remote, cfg.nbctl_loop_ports))
            .await
            .context("nbctl loop task")??;
    let client = connect(&loop_central.nb_remote()).await?;
    let n = count_ports(&client).await?;
    client.close().await;
    ensure!(
        n == cfg.nbctl_loop_ports,
        "ovn-nbctl loop wrote {n} ports, expected {}",
        cfg.nbctl_loop_ports
    );
    loop_central.stop()?;

    let single_central = start_central(&cfg.dir.join("nbctl-single"))?;
    let remote = single_central.nb_remote();
    let ports = cfg.ports;
    let nbctl_single_invocation = tokio::task::spawn_blocking(move || nbctl_single(&remote, ports))
        .await
        .context("nbctl single task")??;
    let client = connect(&single_central.nb_remote()).await?;
    let n = count_ports(&client).await?;
    client.close().await;
    ensure!(
        n == cfg.ports,
        "ovn-nbctl single invocation wrote {n} ports"
    );
    single_central.stop()?;

    Ok(Report {
        config: cfg,
        client_batched,
        nbctl_per_invocation,
        nbctl_single_invocation,
        replica_bytes_per_row,
        json_bytes_per_row,
        replica_sync_seconds,
    })
}
