//! `zstack-ovnkube-controller`: watches Subnets, Pods and Nodes and writes OVN NB rows,
//! pod/node annotations and Subnet status.
//!
//! ```text
//! zstack-ovnkube-controller --nb unix:/var/run/ovn/ovnnb_db.sock            # standalone
//! zstack-ovnkube-controller --mode external --nb ssl:10.0.0.5:6641 \
//!     --nb-ca /etc/ovn/ca.pem --nb-cert /etc/ovn/cert.pem --nb-key /etc/ovn/key.pem
//! ```
//! The Kubernetes connection comes from `--kubeconfig`, `$KUBECONFIG`, or the in-cluster
//! service account.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use control::controller::Controller;
use control::reconcile::Reconciler;
use control::source::kube::{KubeWriter, spawn_watchers};
use control::translate::{ClusterConfig, DefaultSubnet, Mode};
use ovsdb::{Client, ClientConfig, TlsConfig};
use tokio::sync::mpsc;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ModeArg {
    /// We own the OVN databases.
    Standalone,
    /// The OVN databases belong to an IaaS platform: only our own rows are touched.
    External,
}

#[derive(Parser, Debug)]
#[command(name = "zstack-ovnkube-controller", version, about)]
struct Args {
    /// OVN Northbound remote(s): unix:PATH, tcp:IP:PORT, ssl:IP:PORT; comma-separated for a
    /// Raft cluster.
    #[arg(long, env = "OVN_NB_DB")]
    nb: String,
    /// OVN Southbound remote(s) (standalone mode: a deleted node's chassis is removed).
    /// Uses the same TLS files as --nb.
    #[arg(long, env = "OVN_SB_DB")]
    sb: Option<String>,
    /// CA certificate for ssl: remotes.
    #[arg(long)]
    nb_ca: Option<PathBuf>,
    /// Client certificate for ssl: remotes (with --nb-key).
    #[arg(long, requires = "nb_key")]
    nb_cert: Option<PathBuf>,
    /// Client private key for ssl: remotes.
    #[arg(long, requires = "nb_cert")]
    nb_key: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "standalone")]
    mode: ModeArg,
    /// Value of external_ids:zstack.io/owner on every row we create.
    #[arg(long, default_value = "zstack-ovn")]
    cluster_id: String,
    /// Network of the join switch (node management ports); its first address is the router's.
    #[arg(long, default_value = "100.64.0.0/16")]
    join_cidr: ipnet::IpNet,
    /// Service CIDR(s), comma-separated (Subnets may not overlap them).
    #[arg(long, default_value = "10.96.0.0/16", value_delimiter = ',')]
    service_cidr: Vec<ipnet::IpNet>,
    /// The cluster CIDR(s), comma-separated (IPv4 first): the controller creates and keeps
    /// the default Subnet with it (absent or empty: no default Subnet).
    #[arg(long, value_delimiter = ',')]
    cluster_cidr: Vec<String>,
    /// Name of the default Subnet --cluster-cidr creates.
    #[arg(long, default_value = control::translate::DefaultSubnet::NAME)]
    default_subnet_name: String,
    /// Kubeconfig file (default: $KUBECONFIG or in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
}

async fn kube_client(path: Option<&PathBuf>) -> Result<kube::Client> {
    let config = match path {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .with_context(|| format!("read kubeconfig {}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .context("use kubeconfig")?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a pod")?,
    };
    kube::Client::try_from(config).context("build Kubernetes client")
}

fn cluster_config(args: &Args) -> Result<ClusterConfig> {
    let join_gateway = args
        .join_cidr
        .hosts()
        .next()
        .with_context(|| format!("--join-cidr {} has no host addresses", args.join_cidr))?;
    Ok(ClusterConfig {
        cluster_id: args.cluster_id.clone(),
        mode: match args.mode {
            ModeArg::Standalone => Mode::Standalone,
            ModeArg::External => Mode::External,
        },
        join_cidr: args.join_cidr,
        join_gateway,
        service_cidrs: args.service_cidr.clone(),
        default_subnet: default_subnet(args)?,
    })
}

/// The default Subnet from --cluster-cidr (`None` when absent or empty).
fn default_subnet(args: &Args) -> Result<Option<DefaultSubnet>> {
    let cidrs = args
        .cluster_cidr
        .iter()
        .map(|c| c.trim())
        .filter(|c| !c.is_empty())
        .map(|c| {
            let net = c
                .parse::<ipnet::IpNet>()
                .with_context(|| format!("--cluster-cidr {c:?} is not a CIDR"))?;
            if net.trunc() != net {
                bail!(
                    "--cluster-cidr {net} has host bits set (did you mean {}?)",
                    net.trunc()
                );
            }
            Ok(net)
        })
        .collect::<Result<Vec<_>>>()?;
    if cidrs.is_empty() {
        return Ok(None);
    }
    if args.default_subnet_name.is_empty() {
        bail!("--default-subnet-name must not be empty");
    }
    Ok(Some(DefaultSubnet {
        name: args.default_subnet_name.clone(),
        cidrs,
    }))
}

/// Connects to an OVN database remote, with the NB TLS files for ssl: remotes.
async fn connect(args: &Args, remote: &str) -> Result<Client> {
    let mut cfg = ClientConfig::parse(remote).with_context(|| format!("remote {remote}"))?;
    if let Some(ca) = &args.nb_ca {
        let client_cert = args.nb_cert.as_ref().zip(args.nb_key.as_ref());
        let tls = TlsConfig::from_files(ca, client_cert.map(|(c, k)| (c.as_path(), k.as_path())))
            .context("load TLS files")?;
        cfg = cfg.with_tls(tls);
    }
    Client::connect(cfg)
        .await
        .with_context(|| format!("connect to {remote}"))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if args.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            // colours only on a terminal: a log file or collector gets plain text
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init();
    }
    let cfg = cluster_config(&args)?;
    if args.cluster_id.is_empty() {
        bail!("--cluster-id must not be empty: it marks the rows this controller owns");
    }

    let client = connect(&args, &args.nb).await?;
    let rec = Reconciler::start(client, &cfg.cluster_id)
        .await
        .context("start the NB replica")?;
    let kube = kube_client(args.kubeconfig.as_ref()).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    spawn_watchers(kube.clone(), tx);
    tracing::info!(nb = %args.nb, mode = ?cfg.mode, cluster_id = %cfg.cluster_id, "controller started");
    let mut controller = Controller::new(cfg, rec, KubeWriter::new(kube));
    if let Some(sb) = &args.sb {
        controller = controller.with_southbound(connect(&args, sb).await?);
    }
    controller.run(rx).await.context("controller stopped")
}
