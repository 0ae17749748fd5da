//! `zstack-ovnkube-node`: the node agent (OVS setup, management port, CNI server).
//! `zstack-ovnkube-node uninstall-hook`: the chart's `pre-delete` hook (see
//! [`dataplane::uninstall::hook`]); the agent itself is started with flags only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use dataplane::agent::metrics::Metrics;
use dataplane::agent::{Agent, AgentConfig};
use dataplane::attach::state::StateStore;
use dataplane::datapath::DatapathConfig;
use dataplane::datapath::manager::ManagerConfig;
use dataplane::ovs::{OvnConfig, Ovs};

#[derive(Debug, Parser)]
#[command(
    name = "zstack-ovnkube-node",
    version,
    about = "zstack-ovn node agent",
    after_help = "Subcommands: `zstack-ovnkube-node uninstall-hook` is the chart's pre-delete \
                  hook (see `zstack-ovnkube-node uninstall-hook --help`); \
                  `zstack-ovnkube-node debug capture` is the node side of `zovn capture` \
                  (see `zstack-ovnkube-node debug capture --help`)."
)]
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
    /// Keep this node's OVN client certificate (CN = the chassis, --node-name) in this
    /// directory: `chassis.key` is made here and never leaves the node, `chassis.crt` comes
    /// from the controller's signer through a CertificateSigningRequest (needs `--pods
    /// kube` and a pod-bound service-account token), renewed at two thirds of its life.
    /// ovn-controller reads both.
    #[arg(long, requires = "ovn_ca")]
    chassis_cert_dir: Option<PathBuf>,
    /// The CA of OVN central's certificate, copied beside the chassis certificate for
    /// ovn-controller (which the agent points at both through the OVS `SSL` row).
    #[arg(long, requires = "chassis_cert_dir")]
    ovn_ca: Option<PathBuf>,
    /// The chassis CA's certificate: a chassis certificate on disk it did not sign (the CAs
    /// made again, a reinstall) is asked for anew.
    #[arg(long, requires = "chassis_cert_dir")]
    chassis_ca: Option<PathBuf>,
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
    /// The Service `externalIPs` an administrator allows (CIDRs, comma-separated; the
    /// controller's flag of the same name): others get no host route and no NAT rule on
    /// this node. Empty (the default): none.
    #[arg(long, env = "SERVICE_EXTERNAL_IP_CIDRS", default_value = "")]
    service_external_ip_cidrs: String,
    /// Pod MTU. Default: the MTU of the interface holding the tunnel endpoint address
    /// minus the encapsulation overhead (Geneve 100, VXLAN 50; +20 on IPv6), e.g. 1400 on
    /// a 1500-byte underlay with Geneve.
    #[arg(long)]
    mtu: Option<u32>,
    /// Per-sandbox state (restart safety).
    #[arg(long, default_value = "/var/lib/zstack-ovn/node")]
    state_dir: PathBuf,
    /// Listen address of `/metrics` (Prometheus), `/healthz` and `/readyz` (port 0: any):
    /// `IP:PORT`, `[IPv6]:PORT` or `IPv6:PORT`. The chart gives the node's address, not
    /// every address of the host.
    #[arg(long, value_parser = endpoints::parse_listen_addr)]
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
    /// The uninstall marker ConfigMap (in --uninstall-namespace) that the chart's
    /// pre-delete hook creates on `helm uninstall`. The agent watches it; one created while
    /// the agent runs (not one already there at start) is the only thing that makes the
    /// agent remove what the plugin put on the node at SIGTERM (docs/install.md,
    /// "Uninstalling"). Unset: never clean up.
    #[arg(long)]
    uninstall_marker: Option<String>,
    /// Where to write the `uninstall-requested` flag file when the marker is seen (removed
    /// at start: a starting agent is not uninstalling). Unset: memory only.
    #[arg(long)]
    uninstall_flag_dir: Option<PathBuf>,
    /// The DaemonSet running this agent: with the marker seen, the node is still kept
    /// when this DaemonSet exists and is not being deleted at SIGTERM (a restart before the
    /// uninstall went through). Alone it never triggers a cleanup.
    #[arg(long)]
    uninstall_daemonset: Option<String>,
    /// The namespace of --uninstall-marker and --uninstall-daemonset.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    uninstall_namespace: String,
    /// On uninstall, remove the contents of this directory (repeatable).
    #[arg(long)]
    uninstall_empty_dir: Vec<PathBuf>,
    /// On uninstall, OVS runs in the node pod: wait for ovs-vswitchd (--vswitchd-ctl) to
    /// exit, then delete the tap devices its userspace bridges leave.
    #[arg(long)]
    uninstall_ovs_in_pod: bool,
    /// Milliseconds between two rounds of the pinger, which probes the other nodes' tunnel
    /// endpoints and a sample of their running pods (ICMP and TCP); 0: no pinger.
    #[arg(long, default_value_t = 5000)]
    pinger_interval_ms: u64,
    /// Running pods the pinger probes per peer node.
    #[arg(long, default_value_t = 2)]
    pinger_pods_per_node: usize,
    /// Probes the pinger starts per second, at most.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pinger_max_rate: u32,
    /// The port of the pinger's TCP probes (a reset answers as well as an accept).
    /// Default: the port of --metrics-addr (the peers' agents listen there), else 10665.
    #[arg(long)]
    pinger_tcp_port: Option<u16>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum GatewayModeArg {
    // the values are described on --gateway-mode (keeps `--help` short)
    Local,
    Shared,
    Off,
}

/// `zstack-ovnkube-node uninstall-hook`: the chart's pre-delete hook. Creates the uninstall
/// marker, waits until every node agent of the release acknowledged it (at most --timeout),
/// deletes it. Exits 0 even when some did not (they are named in the log, with what to
/// remove by hand) or the API failed: an uninstall is never blocked by a node. With
/// --stop-deployment (external mode) it then stops the controller, and exits 1 when it
/// cannot: the Job's next step cleans the platform's NB only after it.
#[derive(Debug, Parser)]
#[command(
    name = "uninstall-hook",
    bin_name = "zstack-ovnkube-node uninstall-hook",
    version
)]
struct HookArgs {
    /// The marker ConfigMap's name (the agents' --uninstall-marker).
    #[arg(long)]
    marker: String,
    /// The release namespace (the marker's and the agent pods').
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    namespace: String,
    /// Labels put on the marker: `key=value,key=value`.
    #[arg(long, default_value = "")]
    marker_labels: String,
    /// Label selector of the release's pods, e.g.
    /// `app.kubernetes.io/name=zstack-ovn,app.kubernetes.io/instance=zs`.
    #[arg(long)]
    agents_selector: String,
    /// The agent pods' `app.kubernetes.io/component`: this value or it followed by `-`
    /// and anything (the chart's `node` and `node-<pool>`).
    #[arg(long, default_value = "node")]
    agents_component: String,
    /// Seconds to wait for the acknowledgements.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// External mode: then scale this Deployment (the controller's) to 0 and wait until
    /// its pods are gone, so the Job's next step can clean the platform's NB; exits 1 when
    /// that fails (the NB is not cleaned under a running controller).
    #[arg(long)]
    stop_deployment: Option<String>,
    /// Seconds to wait for the stopped Deployment's pods to go.
    #[arg(long, default_value_t = 60)]
    stop_timeout: u64,
    /// kubeconfig (default: in-cluster / $KUBECONFIG).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
}

async fn uninstall_hook(args: HookArgs) -> anyhow::Result<()> {
    use dataplane::uninstall::{self, hook};
    // even a bad label must not block the uninstall: the marker goes without labels
    let marker_labels = hook::parse_labels(&args.marker_labels).unwrap_or_else(|e| {
        tracing::error!(error = %e, "--marker-labels: the marker gets no labels");
        Default::default()
    });
    let cfg = hook::HookConfig {
        namespace: args.namespace,
        marker: args.marker,
        marker_labels,
        agents_selector: args.agents_selector,
        agents_component: args.agents_component,
        timeout: Duration::from_secs(args.timeout),
        poll: Duration::from_secs(1),
    };
    let client = uninstall::client(args.kubeconfig.as_deref()).await;
    let result = match &client {
        Ok(client) => hook::run(client.clone(), &cfg).await,
        Err(e) => {
            tracing::error!(error = %e, "Kubernetes client");
            Err(uninstall::UninstallError::Marker {
                marker: cfg.marker.clone(),
                why: "no Kubernetes client",
            })
        }
    };
    match result {
        // missing nodes were logged by `run`, with what to remove by hand
        Ok(report) => tracing::info!(
            acknowledged = report.acknowledged.len(),
            missing = report.missing.len(),
            marker_deleted = report.marker_deleted,
            "uninstall hook done"
        ),
        Err(e) => tracing::error!(
            error = %e,
            "uninstall hook failed: the node agents were not told, so every node keeps the \
             plugin's state; the uninstall goes on. Remove it by hand (docs/install.md, \
             \"Uninstalling\")"
        ),
    }
    if let Some(name) = &args.stop_deployment {
        let client = client.map_err(|e| anyhow::anyhow!("stop {name}: {e}"))?;
        let stopped = uninstall::stop_controller::stop(
            client,
            &cfg.namespace,
            name,
            Duration::from_secs(args.stop_timeout),
            Duration::from_secs(1),
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "{e}: the platform's NB is not cleaned; see docs/install.md, \"Uninstalling\""
            )
        })?;
        tracing::info!(deployment = %name, ?stopped, "controller stopped: the NB can be cleaned");
    }
    Ok(())
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if json {
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
}

/// Fallback when the tunnel endpoint is not known yet: right for Geneve on 1500 bytes.
const FALLBACK_MTU: u32 = 1400;

/// The pod MTU from the tunnel endpoint's interface and the encapsulation (see
/// [`dataplane::host::mtu`]); the decision and its reason are logged.
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
    let derived = dataplane::host::mtu::uplink_mtu(ip).and_then(|(iface, underlay)| {
        dataplane::host::mtu::pod_mtu(underlay, &encap, ip).map(|m| (iface, underlay, m))
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
        if let Some(ip) = dataplane::host::mtu::interface_ipv4(iface) {
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
    // the agent is started with flags only; the subcommands are the chart's hook and the
    // node side of `zovn capture`
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if dataplane::capture::command::is_debug_capture(&argv) {
        let a = dataplane::capture::command::DebugCaptureArgs::parse_from(
            std::iter::once(std::ffi::OsString::from("capture")).chain(argv.into_iter().skip(2)),
        );
        std::process::exit(dataplane::capture::command::run(a).await);
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "uninstall-hook")
    {
        let hook = HookArgs::parse_from(std::env::args_os().skip(1));
        init_logging(hook.log_json);
        return uninstall_hook(hook).await;
    }
    let mut args = Args::parse();
    init_logging(args.log_json);
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
    // ovn-controller's TLS row (with --chassis-cert-dir)
    let tls_ovs = ovs.clone();
    let uninstall_ovs = ovs.clone();
    let mtu = match args.mtu {
        Some(m) => m,
        None => derive_mtu(&args, &ovs),
    };
    let pods = dataplane::source::from_spec(&args.pods, args.kubeconfig.clone(), &args.node_name)
        .await
        .context("pod source")?;
    let state = StateStore::open(Some(&args.state_dir))
        .with_context(|| format!("state dir {}", args.state_dir.display()))?;
    let mut metrics = Metrics::new();
    if let Some(ctl) = &args.vswitchd_ctl {
        // PMD and per-port counters, collected on each scrape
        dataplane::datapath::metrics::register(&mut metrics, ctl, ovs.clone());
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
                dataplane::host::gateway::GatewayConfig {
                    interface: args.gateway_interface.clone(),
                    next_hop: args.gateway_next_hop,
                    next_hop_v6: args.gateway_next_hop_v6,
                }
            }),
            uplink_bridge: args.gateway_interface.clone(),
            external_ips: api::services::ExternalIpPolicy::parse(&args.service_external_ip_cidrs)
                .context("--service-external-ip-cidrs")?,
        },
        ovs,
        pods,
        state,
        metrics.clone(),
    ));

    let uninstall = start_uninstall_watch(&args).await;
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

    let listener = dataplane::agent::server::bind(&args.cni_socket)
        .with_context(|| format!("CNI socket {}", args.cni_socket.display()))?;
    let bound = dataplane::agent::server::BoundSocket::of(&args.cni_socket);
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

    if let Some(dir) = &args.chassis_cert_dir {
        if args.pods != "kube" {
            anyhow::bail!(
                "--chassis-cert-dir needs --pods kube (the certificate comes through the Kubernetes API)"
            );
        }
        let kube = dataplane::source::kube_client(args.kubeconfig.clone())
            .await
            .context("Kubernetes client for the chassis certificate")?;
        let ca = args.ovn_ca.clone().unwrap_or_default();
        tokio::spawn(dataplane::agent::chassis_cert::keep_current(
            kube,
            dataplane::agent::chassis_cert::CertOptions {
                dir: dir.clone(),
                chassis: args.node_name.clone(),
                wait: Duration::from_secs(60),
                issuer: args.chassis_ca.clone(),
            },
            tls_ovs,
            ca,
        ));
    }
    tokio::spawn(agent.clone().watch());
    // fast-start pod ports move to AF_XDP in the background
    tokio::spawn(agent.clone().run_promotions());
    // the Mirrors and ports of `zovn capture`s that were killed
    tokio::spawn(agent.clone().run_capture_gc());
    tokio::spawn(agent.clone().run_pmd_sleep());
    if args.pinger_interval_ms > 0 {
        let interval = Duration::from_millis(args.pinger_interval_ms);
        tokio::spawn(
            agent.clone().run_pinger(dataplane::pinger::PingerConfig {
                interval,
                pods_per_node: args.pinger_pods_per_node,
                tcp_port: args
                    .pinger_tcp_port
                    .or(args.metrics_addr.map(|a| a.port()))
                    .unwrap_or(10665),
                timeout: interval.min(Duration::from_secs(1)),
                max_rate: args.pinger_max_rate,
            }),
        );
    }
    if let Some(ctl) = &args.vswitchd_ctl {
        // stale verdicts of the userspace revalidator (see dataplane::datapath::megaflow_guard)
        let ctl = dataplane::ovs::unixctl::Unixctl::new(ctl).with_timeout(Duration::from_secs(5));
        tokio::spawn(dataplane::datapath::megaflow_guard::run(
            ctl,
            metrics.clone(),
        ));
    }
    let server = tokio::spawn(dataplane::agent::server::serve(listener, agent));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        r = server => { r.context("CNI server task")?; }
    }
    tracing::info!("shutting down");
    if !bound.remove_if_ours() {
        tracing::info!(socket = %args.cni_socket.display(), "the CNI socket file is not the one this agent bound (replaced by a new agent, or gone): left as it is");
    }
    if let Some(u) = &uninstall {
        on_sigterm(&args, u, &uninstall_ovs).await;
    } else {
        tracing::info!("no --uninstall-marker: the node keeps its state");
    }
    Ok(())
}

/// The uninstall watch of this run: the marker's watch task and what SIGTERM asks.
struct UninstallWatch {
    signal: Arc<dataplane::uninstall::UninstallSignal>,
    client: kube::Client,
    /// --uninstall-daemonset, when it was readable at start (the restart guard).
    daemonset: Option<String>,
    /// Why the DaemonSet is not asked at SIGTERM, when it is not.
    daemonset_off: String,
}

/// Removes a leftover flag, starts the marker watch. `None` without --uninstall-marker or
/// without an API client (then the node is never cleaned in this run: logged).
async fn start_uninstall_watch(args: &Args) -> Option<UninstallWatch> {
    use dataplane::uninstall::{self, DaemonSetState};
    if let Some(dir) = &args.uninstall_flag_dir {
        match uninstall::marker::clear_flag(dir) {
            Ok(true) => tracing::info!(
                dir = %dir.display(),
                "leftover uninstall flag removed: a starting agent is not uninstalling"
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "leftover uninstall flag not removed"),
        }
    }
    let Some(marker) = &args.uninstall_marker else {
        if args.uninstall_daemonset.is_some() {
            tracing::warn!(
                "--uninstall-daemonset without --uninstall-marker: the node is never cleaned \
                 (the DaemonSet alone is no uninstall signal)"
            );
        }
        return None;
    };
    let client = match uninstall::client(args.kubeconfig.as_deref()).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "no Kubernetes client: the uninstall marker is not watched; the node is never cleaned in this run");
            return None;
        }
    };
    // the restart guard needs the DaemonSet readable now: a wrong name would read as gone
    let (daemonset, daemonset_off) = match &args.uninstall_daemonset {
        None => (None, "no --uninstall-daemonset".to_string()),
        Some(ds) => {
            match uninstall::read_daemonset(client.clone(), &args.uninstall_namespace, ds).await {
                DaemonSetState::Present => (Some(ds.clone()), String::new()),
                state => {
                    tracing::warn!(
                        daemonset = %ds,
                        namespace = %args.uninstall_namespace,
                        %state,
                        "--uninstall-daemonset not readable at start: not asked at SIGTERM"
                    );
                    (None, format!("{ds} was not readable at start: {state}"))
                }
            }
        }
    };
    let signal = Arc::new(uninstall::UninstallSignal::default());
    tokio::spawn(uninstall::watch_marker(
        client.clone(),
        uninstall::MarkerWatch {
            namespace: args.uninstall_namespace.clone(),
            name: marker.clone(),
            node: args.node_name.clone(),
            flag_dir: args.uninstall_flag_dir.clone(),
        },
        signal.clone(),
    ));
    Some(UninstallWatch {
        signal,
        client,
        daemonset,
        daemonset_off,
    })
}

/// The SIGTERM decision (logged with its reason), and the cleanup when it says so.
async fn on_sigterm(args: &Args, u: &UninstallWatch, ovs: &Ovs) {
    use dataplane::uninstall::{self, DaemonSetState, Decision};
    let seen = u.signal.get().or_else(|| {
        args.uninstall_flag_dir
            .as_deref()
            .and_then(uninstall::marker::read_flag)
    });
    let ds_state = match (&seen, &u.daemonset) {
        (None, _) => DaemonSetState::NotChecked("no marker seen".into()),
        (Some(_), None) => DaemonSetState::NotChecked(u.daemonset_off.clone()),
        (Some(_), Some(ds)) => {
            uninstall::read_daemonset(u.client.clone(), &args.uninstall_namespace, ds).await
        }
    };
    match uninstall::decide(seen.as_ref().map(|r| r.uid.as_str()), &ds_state) {
        Decision::Keep(why) => {
            tracing::info!(%why, "not an uninstall: the node keeps its state");
            if let Some(dir) = &args.uninstall_flag_dir
                && seen.is_some()
            {
                // the uplink container must not take br-phy down either
                if let Err(e) = uninstall::marker::clear_flag(dir) {
                    tracing::warn!(error = %e, "uninstall flag not removed");
                }
            }
        }
        Decision::Clean(why) => {
            tracing::info!(%why, "the plugin is being uninstalled: cleaning the node");
            let plan = uninstall::CleanupPlan {
                cni_conf_dir: args.cni_conf_dir.clone(),
                cni_bin_dir: args.cni_bin_dir.clone(),
                pod_vswitchd_ctl: args
                    .vswitchd_ctl
                    .clone()
                    .filter(|_| args.uninstall_ovs_in_pod),
                empty_dirs: args.uninstall_empty_dir.clone(),
                chassis_cert_dir: args.chassis_cert_dir.clone(),
                // the host's OVS (a pod's database is emptied whole)
                ovs: args
                    .chassis_cert_dir
                    .as_ref()
                    .filter(|_| !args.uninstall_ovs_in_pod)
                    .map(|_| ovs.clone()),
            };
            let removed = uninstall::cleanup(&plan).await;
            tracing::info!(?removed, "node cleaned");
        }
    }
}
