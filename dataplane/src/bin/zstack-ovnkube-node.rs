//! `zstack-ovnkube-node`: the node agent (OVS setup, management port, CNI server).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use dataplane::agent::{Agent, AgentConfig};
use dataplane::datapath::DatapathConfig;
use dataplane::datapath::manager::ManagerConfig;
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
    /// Tunnel endpoint IP (with --sb: this or --encap-ip-interface).
    #[arg(long, conflicts_with = "encap_ip_interface")]
    encap_ip: Option<String>,
    /// Take the tunnel endpoint IP from this interface's IPv4 address, waiting until it
    /// has one (the chart's `tunnel.interface`: the address moves to br-phy).
    #[arg(long)]
    encap_ip_interface: Option<String>,
    /// Pods' egress, as the controller's --gateway-mode: `shared` makes this agent report
    /// its gateway bridge (--gateway-interface) for the node's gateway router and keep the
    /// bridge's rules; `local` and `off` need nothing here.
    #[arg(long, value_enum, default_value = "local")]
    gateway_mode: GatewayModeArg,
    /// The OVS bridge holding the uplink and the node's address: the `shared` gateway
    /// router shares it, and the agent manages its uplink port (datapath config `uplink`).
    #[arg(long, default_value = "br-phy")]
    gateway_interface: String,
    /// `shared` gateway mode: the IPv4 next hop of traffic leaving the cluster (default:
    /// the gateway interface's default route).
    #[arg(long)]
    gateway_next_hop: Option<std::net::Ipv4Addr>,
    /// `shared` gateway mode: the IPv6 next hop (default: the gateway interface's IPv6
    /// default route). With it and a global IPv6 address on the interface, the gateway
    /// router carries the pods' IPv6 too (needs --join-cidr-v6 on the controller).
    #[arg(long)]
    gateway_next_hop_v6: Option<std::net::Ipv6Addr>,
    /// Pod MTU. Default: the MTU of the interface holding the tunnel endpoint address
    /// minus the encapsulation overhead (Geneve 100, VXLAN 50; +20 on IPv6), e.g. 1400 on
    /// a 1500-byte underlay with Geneve.
    #[arg(long)]
    mtu: Option<u32>,
    /// Per-sandbox state (restart safety).
    #[arg(long, default_value = "/var/lib/zstack-ovn/node")]
    state_dir: PathBuf,
    /// Listen address of `/metrics` (Prometheus), `/healthz` and `/readyz` (port 0: any).
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
    /// The node's datapath configuration (YAML/JSON; see docs/datapath.md).
    /// The Node annotation network.zstack.io/datapath-config overrides keys per node.
    #[arg(long, env = "ZSTACK_OVN_DATAPATH_CONFIG")]
    datapath_config: Option<PathBuf>,
    /// The ovs-vswitchd unixctl socket (PMD statistics).
    #[arg(long)]
    vswitchd_ctl: Option<PathBuf>,
    /// Shell command that restarts ovs-vswitchd, run when a start-time setting (DPDK
    /// memory, lcores, EAL args, TSO, hw-offload) changed or DPDK must be retried.
    /// Without it such changes are reported as restartRequired.
    #[arg(long)]
    vswitchd_restart_cmd: Option<String>,
    /// The DaemonSet running this agent: on SIGTERM, when it is gone, being deleted or no
    /// longer readable (the plugin is being uninstalled), the agent removes what the plugin
    /// put on the node (docs/install.md, "Uninstalling"). Unset: never clean up.
    #[arg(long)]
    uninstall_daemonset: Option<String>,
    /// The namespace of --uninstall-daemonset.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    uninstall_namespace: String,
    /// On uninstall, remove the contents of this directory (repeatable).
    #[arg(long)]
    uninstall_empty_dir: Vec<PathBuf>,
    /// On uninstall, OVS runs in the node pod: wait for ovs-vswitchd (--vswitchd-ctl) to
    /// exit, then delete the tap devices its userspace bridges leave.
    #[arg(long)]
    uninstall_ovs_in_pod: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum GatewayModeArg {
    // the values are described on --gateway-mode (keeps `--help` short)
    Local,
    Shared,
    Off,
}

/// Fallback when the tunnel endpoint is not known yet: right for Geneve on 1500 bytes.
const FALLBACK_MTU: u32 = 1400;

/// The pod MTU from the tunnel endpoint's interface and the encapsulation (see
/// [`dataplane::mtu`]); the decision and its reason are logged.
fn derive_mtu(args: &Args, ovs: &Ovs) -> u32 {
    let from_ovs = |key: &str| {
        ovs.open_vswitch()
            .and_then(|r| r.external_ids.get(key).cloned())
    };
    let (ip, encap) = match (&args.sb, &args.encap_ip) {
        (Some(_), Some(ip)) => (Some(ip.clone()), args.encap_type.clone()),
        _ => (
            from_ovs("ovn-encap-ip"),
            from_ovs("ovn-encap-type").unwrap_or_else(|| args.encap_type.clone()),
        ),
    };
    let Some(ip) = ip.and_then(|s| s.parse::<std::net::IpAddr>().ok()) else {
        tracing::warn!(
            mtu = FALLBACK_MTU,
            "pod MTU: no tunnel endpoint (ovn-encap-ip) configured; using the Geneve-on-1500 default"
        );
        return FALLBACK_MTU;
    };
    let derived = dataplane::mtu::uplink_mtu(ip).and_then(|(iface, underlay)| {
        dataplane::mtu::pod_mtu(underlay, &encap, ip).map(|m| (iface, underlay, m))
    });
    match derived {
        Ok((iface, underlay, mtu)) => {
            tracing::info!(mtu, %iface, underlay, %encap, "pod MTU = underlay MTU minus the encapsulation overhead");
            mtu
        }
        Err(e) => {
            tracing::warn!(error = %e, mtu = FALLBACK_MTU, "pod MTU could not be derived; using the Geneve-on-1500 default");
            FALLBACK_MTU
        }
    }
}

/// The first IPv4 address of `iface`, polled every second until there is one (a warning
/// every 30 s names what is awaited).
async fn wait_interface_ipv4(iface: &str) -> std::net::Ipv4Addr {
    let mut waited = 0u32;
    loop {
        if let Some(ip) = dataplane::mtu::interface_ipv4(iface) {
            return ip;
        }
        if waited.is_multiple_of(30) {
            tracing::warn!(%iface, waited_s = waited, "waiting for the tunnel interface to get an IPv4 address");
        }
        waited += 1;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if args.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            // colours only on a terminal: a log file or collector gets plain text
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    if let Some(mtu) = args.mtu
        && !(68..=65535).contains(&mtu)
    {
        anyhow::bail!("--mtu {mtu} is out of range 68..=65535");
    }
    if let (Some(iface), None) = (&args.encap_ip_interface, &args.encap_ip) {
        let ip = wait_interface_ipv4(iface).await;
        tracing::info!(%iface, %ip, "tunnel endpoint IP taken from the interface");
        args.encap_ip = Some(ip.to_string());
    }
    let ovn = match (&args.sb, &args.encap_ip) {
        (Some(sb), Some(ip)) => Some(OvnConfig {
            remote: sb.clone(),
            encap_type: args.encap_type.clone(),
            encap_ip: ip.clone(),
            system_id: args.node_name.clone(),
        }),
        (Some(_), None) => anyhow::bail!("--sb needs --encap-ip or --encap-ip-interface"),
        _ => None,
    };

    let ovs = Ovs::connect(&args.ovs_db)
        .await
        .with_context(|| format!("connect to the local OVS database {}", args.ovs_db))?;
    let mtu = match args.mtu {
        Some(m) => m,
        None => derive_mtu(&args, &ovs),
    };
    let pods = dataplane::pods::from_spec(&args.pods, args.kubeconfig.clone(), &args.node_name)
        .await
        .context("pod source")?;
    let state = StateStore::open(Some(&args.state_dir))
        .with_context(|| format!("state dir {}", args.state_dir.display()))?;
    let mut metrics = Metrics::new();
    if let Some(ctl) = &args.vswitchd_ctl {
        // PMD and per-port counters, collected on each scrape
        dataplane::datapath_metrics::register(&mut metrics, ctl, ovs.clone());
    }
    let metrics = Arc::new(metrics);
    let (base, base_errors) = match &args.datapath_config {
        None => (DatapathConfig::default(), vec![]),
        Some(p) => match DatapathConfig::load(p) {
            Ok(c) => (c, vec![]),
            // the node keeps a working datapath: defaults, and the error in the status
            Err(e) => {
                tracing::error!(error = %e, "datapath config unreadable: using defaults");
                (
                    DatapathConfig::default(),
                    vec![format!("{e}: using defaults")],
                )
            }
        },
    };
    let tunnels = ovn.is_some() || {
        let ovs_ref = &ovs;
        ovs_ref
            .open_vswitch()
            .is_some_and(|r| r.external_ids.contains_key("ovn-encap-type"))
    };
    let agent = Arc::new(Agent::new(
        AgentConfig {
            node_name: args.node_name.clone(),
            mtu,
            ovn,
            refresh: Duration::from_secs(5),
            datapath: ManagerConfig {
                base,
                base_errors,
                restart_cmd: args.vswitchd_restart_cmd.clone(),
                tunnels,
                sys_root: "/".into(),
            },
            vswitchd_ctl: args.vswitchd_ctl.clone(),
            gateway: matches!(args.gateway_mode, GatewayModeArg::Shared).then(|| {
                dataplane::gateway::GatewayConfig {
                    interface: args.gateway_interface.clone(),
                    next_hop: args.gateway_next_hop,
                    next_hop_v6: args.gateway_next_hop_v6,
                }
            }),
            uplink_bridge: args.gateway_interface.clone(),
        },
        ovs,
        pods,
        state,
        metrics.clone(),
    ));

    // A wrong --uninstall-daemonset (name, namespace, RBAC) would look like an uninstall at
    // every restart and wipe the node: the DaemonSet must be readable now, or the cleanup
    // is disabled for this run.
    let uninstall_daemonset = match &args.uninstall_daemonset {
        None => None,
        Some(ds) => {
            use dataplane::uninstall::{self, Verdict};
            match uninstall::is_uninstalling(
                args.kubeconfig.as_deref(),
                &args.uninstall_namespace,
                ds,
            )
            .await
            {
                Verdict::Staying(_) => Some(ds.clone()),
                Verdict::Uninstalling(why) => {
                    tracing::error!(
                        daemonset = %ds,
                        namespace = %args.uninstall_namespace,
                        %why,
                        "--uninstall-daemonset: not readable at start; cleanup on uninstall disabled"
                    );
                    None
                }
            }
        }
    };
    agent.setup_node().await.context("node setup")?;
    let dp = agent.datapath_pass().await;
    tracing::info!(datapath = %dp.status.datapath, reason = %dp.status.reason, "node datapath");
    if let Err(e) = agent.ensure_mgmt().await {
        // the controller may not have annotated the node yet: the watch retries
        tracing::warn!(error = %e, "management port not configured yet");
    }
    agent.restore().await;

    // /readyz: ready once the first datapath pass is done (above) and the CNI server listens
    let cni_listening = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(addr) = args.metrics_addr {
        let (l, bound) = endpoints::bind(addr)
            .await
            .with_context(|| format!("metrics address {addr}"))?;
        tracing::info!(addr = %bound, "metrics listening on http://{bound}/metrics (and /healthz, /readyz)");
        let m = metrics.clone();
        let render: endpoints::Render = Arc::new(move || {
            let m = m.clone();
            Box::pin(async move { m.scrape().await })
        });
        let listening = cni_listening.clone();
        let ready: endpoints::Ready = Arc::new(move || {
            if listening.load(std::sync::atomic::Ordering::SeqCst) {
                endpoints::Readiness::ready("ready: datapath configured, CNI server listening")
            } else {
                endpoints::Readiness::not_ready("not ready: CNI server not listening yet")
            }
        });
        tokio::spawn(endpoints::serve(
            l,
            endpoints::Endpoints::new(render, ready),
        ));
    }

    let listener = dataplane::server::bind(&args.cni_socket)
        .with_context(|| format!("CNI socket {}", args.cni_socket.display()))?;
    if let (Some(conf_dir), Some(bin_dir), Some(shim)) =
        (&args.cni_conf_dir, &args.cni_bin_dir, &args.cni_shim)
    {
        cni::conflist::install_binary(shim, bin_dir)
            .with_context(|| format!("install {} into {}", shim.display(), bin_dir.display()))?;
        // no `mtu` in the node's own conflist: the agent applies the node's MTU (datapath
        // config, else derived) per ADD; a NetworkAttachmentDefinition's `mtu` wins
        let conflist = cni::conflist::ConfList::zstack_ovn(&cni::conflist::PluginOptions {
            server_socket: Some(args.cni_socket.clone()),
            mtu: None,
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
    cni_listening.store(true, std::sync::atomic::Ordering::SeqCst);

    tokio::spawn(agent.clone().watch());
    // fast-start pod ports move to AF_XDP in the background
    tokio::spawn(agent.clone().run_promotions());
    // the Mirrors and ports of `zovn capture`s that were killed
    tokio::spawn(agent.clone().run_capture_gc());
    if let Some(ctl) = &args.vswitchd_ctl {
        // stale verdicts of the userspace revalidator (see dataplane::megaflow_guard)
        let ctl = dataplane::unixctl::Unixctl::new(ctl).with_timeout(Duration::from_secs(5));
        tokio::spawn(dataplane::megaflow_guard::run(ctl, metrics.clone()));
    }
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
    if let Some(ds) = &uninstall_daemonset {
        use dataplane::uninstall::{self, Verdict};
        match uninstall::is_uninstalling(args.kubeconfig.as_deref(), &args.uninstall_namespace, ds)
            .await
        {
            Verdict::Staying(why) => {
                tracing::info!(daemonset = %ds, %why, "not an uninstall: the node keeps its state")
            }
            Verdict::Uninstalling(why) => {
                tracing::info!(daemonset = %ds, %why, "the plugin is being uninstalled: cleaning the node");
                let plan = uninstall::CleanupPlan {
                    cni_conf_dir: args.cni_conf_dir.clone(),
                    cni_bin_dir: args.cni_bin_dir.clone(),
                    pod_vswitchd_ctl: args
                        .vswitchd_ctl
                        .clone()
                        .filter(|_| args.uninstall_ovs_in_pod),
                    empty_dirs: args.uninstall_empty_dir.clone(),
                };
                let removed = uninstall::cleanup(&plan).await;
                tracing::info!(?removed, "node cleaned");
            }
        }
    }
    Ok(())
}
