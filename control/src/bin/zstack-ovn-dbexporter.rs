//! `zstack-ovn-dbexporter`: OVN central's health for Prometheus. Runs beside the databases
//! in every OVN central pod (the chart's `dbexporter` container) and, on each scrape of
//! `/metrics`, asks this pod's NB and SB ovsdb-servers for `cluster/status` and its
//! ovn-northd for `status` through their control sockets: Raft role, term, leader, log,
//! commit and apply lag, connections, database sizes, northd active or standby
//! ([`control::ovn_db_metrics`]; names in docs/reference/metrics.md). `/healthz` answers
//! while it runs; `/readyz` once a database's control socket is there.
//!
//! ```text
//! zstack-ovn-dbexporter --listen 0.0.0.0:9479 \
//!   --nb-ctl /var/run/ovn/ovnnb_db.ctl --nb-file /var/lib/ovn/ovnnb_db.db \
//!   --sb-ctl /var/run/ovn/ovnsb_db.ctl --sb-file /var/lib/ovn/ovnsb_db.db \
//!   --northd-ctl /var/run/ovn/ovn-northd.ctl
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use control::ovn_db_metrics::{DbTarget, appctl, render, sample_db, sample_northd};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "zstack-ovn-dbexporter",
    version,
    about = "OVN central's health (Raft role, term, lag, sizes; ovn-northd active) as Prometheus metrics"
)]
struct Args {
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:9479")]
    listen: String,
    /// The NB ovsdb-server's control socket (`ovs-appctl -t`).
    #[arg(long)]
    nb_ctl: Option<PathBuf>,
    /// The NB database file (its size is reported).
    #[arg(long)]
    nb_file: Option<PathBuf>,
    /// The SB ovsdb-server's control socket.
    #[arg(long)]
    sb_ctl: Option<PathBuf>,
    /// The SB database file.
    #[arg(long)]
    sb_file: Option<PathBuf>,
    /// ovn-northd's control socket (or `ovs-appctl` target name).
    #[arg(long)]
    northd_ctl: Option<String>,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
}

fn targets(a: &Args) -> Vec<DbTarget> {
    [("nb", &a.nb_ctl, &a.nb_file), ("sb", &a.sb_ctl, &a.sb_file)]
        .into_iter()
        .filter_map(|(db, ctl, file)| {
            Some(DbTarget {
                db: db.to_string(),
                ctl: ctl.clone()?,
                file: file.clone(),
            })
        })
        .collect()
}

/// One scrape: every database and northd, sampled now.
fn scrape(dbs: &[DbTarget], northd: Option<&str>) -> String {
    let samples: Vec<_> = dbs.iter().map(|t| sample_db(t, &appctl)).collect();
    let n = northd.map(|t| sample_northd(t, &appctl));
    render(&samples, n)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    control::logging::init(args.log_json);
    let dbs = targets(&args);
    anyhow::ensure!(
        !dbs.is_empty() || args.northd_ctl.is_some(),
        "nothing to watch: give --nb-ctl, --sb-ctl or --northd-ctl"
    );
    let addr = endpoints::parse_listen_addr(&args.listen)
        .with_context(|| format!("--listen {}", args.listen))?;
    let (listener, bound) = endpoints::bind(addr)
        .await
        .with_context(|| format!("listen on {addr}"))?;
    tracing::info!(addr = %bound, dbs = ?dbs, northd = ?args.northd_ctl,
        "OVN database metrics on http://{bound}/metrics");
    let shared = Arc::new((dbs, args.northd_ctl.clone()));
    let s = shared.clone();
    let render_fn: endpoints::Render = Arc::new(move || {
        let s = s.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || scrape(&s.0, s.1.as_deref()))
                .await
                .unwrap_or_else(|e| format!("# scrape failed: {e}\n"))
        })
    });
    // ready once a database's control socket exists (no command on this path: /readyz is
    // probed often, /metrics asks the daemons)
    let s = shared.clone();
    let ready: endpoints::Ready = Arc::new(move || {
        if s.0.is_empty() || s.0.iter().any(|t| t.ctl.exists()) {
            endpoints::Readiness::ready("a database's control socket is there")
        } else {
            endpoints::Readiness::not_ready("no database control socket yet")
        }
    });
    endpoints::serve(listener, endpoints::Endpoints::new(render_fn, ready)).await;
    Ok(())
}
