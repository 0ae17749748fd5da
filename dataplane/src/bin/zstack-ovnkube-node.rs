//! `zstack-ovnkube-node`: the node agent (OVS setup, management port, CNI server).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use dataplane::agent::{Agent, AgentConfig};
use dataplane::metrics::Metrics;
use dataplane::ovs::{OvnConfig, Ovs};
use dataplane::state::StateStore;

#[derive(Debug, Parser)]
#[command(name = "zstack-ovnkube-node", version, about = "zstack-ovn node agent")]
struct Args {
    /// This node's name (the Node object, the OVN chassis name).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// The local Open_vSwitch database.
    #[arg(long, default_value = "unix:/var/run/openvswitch/db.sock")]
    ovs_db: String,
    /// The CNI server socket.
    #[arg(long, default_value = cni::DEFAULT_SOCKET)]
    cni_socket: PathBuf,
    /// Where to write the conflist (with --cni-bin-dir and --cni-shim).
    #[arg(long)]
    cni_conf_dir: Option<PathBuf>,
    /// Where to install the shim binary.
    #[arg(long)]
    cni_bin_dir: Option<PathBuf>,
    /// The `zstack-ovn-cni` binary to install.
    #[arg(long)]
    cni_shim: Option<PathBuf>,
    /// Pod source: `lab:SOCKET` (the lab's object store) or `kube`.
    #[arg(long)]
    pods: String,
    /// kubeconfig for `--pods kube` (default: in-cluster / $KUBECONFIG).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// OVN Southbound remote for ovn-controller (written to OVS when given).
    #[arg(long)]
    sb: Option<String>,
    #[arg(long, default_value = "geneve")]
    encap_type: String,
    /// Tunnel endpoint IP (required with --sb).
    #[arg(long)]
    encap_ip: Option<String>,
    /// Default pod MTU.
    #[arg(long, default_value_t = 1400)]
    mtu: u32,
    /// Per-sandbox state (restart safety).
    #[arg(long, default_value = "/var/lib/zstack-ovn/node")]
    state_dir: PathBuf,
    /// Prometheus `/metrics` listen address (port 0: any).
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if !(68..=65535).contains(&args.mtu) {
        anyhow::bail!("--mtu {} is out of range 68..=65535", args.mtu);
    }
    let ovn = match (&args.sb, &args.encap_ip) {
        (Some(sb), Some(ip)) => Some(OvnConfig {
            remote: sb.clone(),
            encap_type: args.encap_type.clone(),
            encap_ip: ip.clone(),
            system_id: args.node_name.clone(),
        }),
        (Some(_), None) => anyhow::bail!("--sb needs --encap-ip"),
        _ => None,
    };

    let ovs = Ovs::connect(&args.ovs_db)
        .await
        .with_context(|| format!("connect to the local OVS database {}", args.ovs_db))?;
    let pods = dataplane::pods::from_spec(&args.pods, args.kubeconfig.clone())
        .await
        .context("pod source")?;
    let state = StateStore::open(Some(&args.state_dir))
        .with_context(|| format!("state dir {}", args.state_dir.display()))?;
    let metrics = Arc::new(Metrics::new());
    let agent = Arc::new(Agent::new(
        AgentConfig {
            node_name: args.node_name.clone(),
            mtu: args.mtu,
            ovn,
            refresh: Duration::from_secs(5),
        },
        ovs,
        pods,
        state,
        metrics.clone(),
    ));

    agent.setup_node().await.context("node setup")?;
    if let Err(e) = agent.ensure_mgmt().await {
        // the controller may not have annotated the node yet: the watch retries
        tracing::warn!(error = %e, "management port not configured yet");
    }
    agent.restore().await;

    if let Some(addr) = args.metrics_addr {
        let (l, bound) = dataplane::metrics::bind(addr)
            .await
            .with_context(|| format!("metrics address {addr}"))?;
        tracing::info!(addr = %bound, "metrics listening on http://{bound}/metrics");
        tokio::spawn(dataplane::metrics::serve(l, metrics));
    }

    let listener = dataplane::server::bind(&args.cni_socket)
        .with_context(|| format!("CNI socket {}", args.cni_socket.display()))?;
    if let (Some(conf_dir), Some(bin_dir), Some(shim)) =
        (&args.cni_conf_dir, &args.cni_bin_dir, &args.cni_shim)
    {
        cni::conflist::install_binary(shim, bin_dir)
            .with_context(|| format!("install {} into {}", shim.display(), bin_dir.display()))?;
        let conflist = cni::conflist::ConfList::zstack_ovn(&cni::conflist::PluginOptions {
            server_socket: Some(args.cni_socket.clone()),
            mtu: Some(args.mtu),
            log_level: None,
            timeout_seconds: None,
        });
        let p = cni::conflist::write(conf_dir, &conflist)
            .with_context(|| format!("write conflist into {}", conf_dir.display()))?;
        tracing::info!(conflist = %p.display(), "CNI plugin installed");
    } else if args.cni_conf_dir.is_some() || args.cni_bin_dir.is_some() || args.cni_shim.is_some() {
        anyhow::bail!("--cni-conf-dir, --cni-bin-dir and --cni-shim go together");
    }
    tracing::info!(socket = %args.cni_socket.display(), node = %args.node_name, "CNI server ready");

    tokio::spawn(agent.clone().watch());
    let server = tokio::spawn(dataplane::server::serve(listener, agent));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        r = server => { r.context("CNI server task")?; }
    }
    tracing::info!("shutting down");
    let _ = std::fs::remove_file(&args.cni_socket);
    Ok(())
}
