//! `zstack-ovnkube-controller`: watches Subnets, Pods and Nodes and writes OVN NB rows,
//! pod/node annotations and Subnet status.
//!
//! ```text
//! zstack-ovnkube-controller --nb unix:/var/run/ovn/ovnnb_db.sock            # standalone
//! zstack-ovnkube-controller --mode external --nb ssl:10.0.0.5:6641 \
//!     --nb-ca /etc/ovn/ca.pem --nb-cert /etc/ovn/cert.pem --nb-key /etc/ovn/key.pem
//! ```
//! The Kubernetes connection comes from `--kubeconfig`, `$KUBECONFIG`, or the in-cluster
//! service account. `--metrics-addr` serves `/metrics`, `/healthz` and `/readyz` (crate
//! [`endpoints`]). With `--leader-elect` the process first acquires a Lease
//! ([`control::leader`]) and only then connects to the NB, starts its watchers and runs the
//! controller; losing the Lease ends the process with a non-zero status, SIGTERM releases it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use control::controller::Controller;
use control::leader::{Elector, LeaseConfig};
use control::metrics::ControllerMetrics;
use control::reconcile::Reconciler;
use control::source::kube::{KubeWriter, spawn_watchers};
use control::translate::{ClusterConfig, DefaultSubnet, GatewayMode, Mode};
use ovsdb::{Client, ClientConfig, TlsConfig};
use tokio::sync::mpsc;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ModeArg {
    /// We own the OVN databases.
    Standalone,
    /// The OVN databases belong to an IaaS platform: only our own rows are touched.
    External,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum GatewayModeArg {
    /// Through the pod's own node (its management port; masqueraded there).
    Local,
    /// Through a gateway router per node sharing the node's address (SNAT in OVN).
    Shared,
    /// No egress out of the cluster.
    Off,
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
    /// The name OVN central's certificate holds, checked instead of the host of the remote
    /// dialled (the chart dials ClusterIPs; its certificate names the central service).
    #[arg(long, requires = "nb_ca")]
    ovn_server_name: Option<String>,
    #[arg(long, value_enum, default_value = "standalone")]
    mode: ModeArg,
    /// External mode: let Subnets put their pods in the platform's security groups
    /// (`spec.securityGroups`, the platform's Port_Group names). Off: such a Subnet is
    /// refused, and ports of ours left in a platform group by an earlier run are taken out.
    #[arg(long)]
    platform_security_groups: bool,
    /// Remove every Northbound row of ours (marked with --cluster-id) and undo our writes to
    /// the platform's rows (our ports out of its switches and security groups, our Service
    /// group out of its switches), then exit: what an uninstall needs in external mode,
    /// where the databases outlive the plugin. Run it once the controller is stopped.
    /// Needs only --nb (and its TLS flags), no Kubernetes API.
    #[arg(long)]
    uninstall_nb: bool,
    /// Chassis CA certificate (PEM): with --chassis-ca-key, the controller approves and
    /// signs the node agents' requests for their per-chassis OVN client certificate
    /// (signer `network.zstack.io/ovn-chassis`), after checking each came from the agent
    /// pod running on the node its CN names.
    #[arg(long, requires = "chassis_ca_key")]
    chassis_ca_cert: Option<PathBuf>,
    /// Chassis CA private key (PEM).
    #[arg(long, requires = "chassis_ca_cert")]
    chassis_ca_key: Option<PathBuf>,
    /// The node agent's service account, `NAMESPACE/NAME`: the only requester whose chassis
    /// certificates are signed without an administrator's approval, and whose Node writes
    /// the admission webhook confines to its own Node.
    #[arg(long, default_value = "kube-system/zstack-ovn-node")]
    agent_account: String,
    /// Serve the validating admission webhook on this address (HTTPS, path `/validate`),
    /// with --admission-cert and --admission-key. Every replica serves it, standbys too.
    #[arg(long, value_parser = endpoints::parse_listen_addr, requires_all = ["admission_cert", "admission_key"])]
    admission_addr: Option<std::net::SocketAddr>,
    /// The webhook's serving certificate (PEM, its chain).
    #[arg(long)]
    admission_cert: Option<PathBuf>,
    /// The webhook's serving key (PEM).
    #[arg(long)]
    admission_key: Option<PathBuf>,
    /// This controller's service account, `NAMESPACE/NAME`: the only writer of the pods'
    /// allocation annotations the webhook admits.
    #[arg(
        long,
        env = "CONTROLLER_ACCOUNT",
        default_value = "kube-system/zstack-ovn-controller"
    )]
    controller_account: String,
    /// User names allowed to put `kubevirt.io/domain` on a pod (KubeVirt's virt-controller),
    /// comma-separated; empty: nobody.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "system:serviceaccount:kubevirt:kubevirt-controller"
    )]
    vm_pod_creators: Vec<String>,
    /// Days a chassis certificate is valid (agents renew at two thirds of it).
    #[arg(long, default_value = "365")]
    chassis_cert_days: u32,
    /// Value of external_ids:zstack.io/owner on every row we create.
    #[arg(long, default_value = api::external_ids::CLUSTER_ID)]
    cluster_id: String,
    /// Network of the join switch (node management ports); its first address is the router's.
    #[arg(long, default_value = "100.64.0.0/16")]
    join_cidr: ipnet::IpNet,
    /// IPv6 part of the join network (e.g. fd98::/64): management ports get an IPv6 address
    /// too and pods' IPv6 traffic leaves the cluster (`local` gateway mode). Absent: IPv4
    /// only.
    #[arg(long)]
    join_cidr_v6: Option<ipnet::IpNet>,
    /// The Service `externalIPs` an administrator allows (CIDRs, comma-separated; the
    /// node agents' flag of the same name). Every other externalIP is refused with a
    /// Warning event on its Service: any namespace's user writes them, and a claimed
    /// address (the API server's, a node's) would be captured. Empty (the default): none.
    #[arg(long, env = "SERVICE_EXTERNAL_IP_CIDRS", default_value = "")]
    service_external_ip_cidrs: String,
    /// Service CIDR(s), comma-separated (Subnets may not overlap them).
    #[arg(long, default_value = "10.96.0.0/16", value_delimiter = ',')]
    service_cidr: Vec<ipnet::IpNet>,
    /// The cluster CIDR(s), comma-separated (IPv4 first): the controller creates and keeps
    /// the default Subnet with it (absent or empty: no default Subnet).
    #[arg(long, value_delimiter = ',')]
    cluster_cidr: Vec<String>,
    /// Pods' egress: `local` (through their own node's management port, masqueraded there
    /// for Subnets with natOutgoing), `shared` (a gateway router per node sharing the node's
    /// address, SNAT in OVN; the node agents need --gateway-mode shared too) or `off` (no
    /// route out of the cluster). Not used in external mode.
    #[arg(long, value_enum, default_value = "local")]
    gateway_mode: GatewayModeArg,
    /// Name of the default Subnet --cluster-cidr creates.
    #[arg(long, default_value = control::translate::DefaultSubnet::NAME)]
    default_subnet_name: String,
    /// Kubeconfig file (default: $KUBECONFIG or in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// As the leader, at start: apply this controller's Subnet CRD to the cluster with
    /// server-side apply (Helm never upgrades CRDs), so the schema matches the binary.
    #[arg(long)]
    apply_crd: bool,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
    /// Listen address of `/metrics` (Prometheus), `/healthz` and `/readyz` (port 0: any; the
    /// bound address is logged): `IP:PORT`, `[IPv6]:PORT` or `IPv6:PORT`. The chart gives
    /// the node's address, not every address of the host.
    #[arg(long, value_parser = endpoints::parse_listen_addr)]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Elect a leader on a coordination.k8s.io/v1 Lease: only the holder connects to the NB
    /// and reconciles; the others stand by.
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    leader_elect_namespace: String,
    /// Name of the Lease.
    #[arg(long, default_value = "zstack-ovn-controller")]
    leader_elect_lease_name: String,
    /// Our identity in the Lease (default: <hostname>-<pid>).
    #[arg(long, env = "POD_NAME")]
    leader_elect_identity: Option<String>,
    /// Seconds a leader's Lease lasts after its last renewal, as seen by the standbys.
    #[arg(long, default_value = "15", value_parser = seconds)]
    leader_elect_lease_duration: Duration,
    /// Seconds within which the leader must renew, else it stops and exits non-zero.
    #[arg(long, default_value = "10", value_parser = seconds)]
    leader_elect_renew_deadline: Duration,
    /// Seconds between acquire and renew attempts.
    #[arg(long, default_value = "2", value_parser = seconds)]
    leader_elect_retry_period: Duration,
}

/// A positive number of seconds (fractions allowed).
fn seconds(s: &str) -> std::result::Result<Duration, String> {
    let v: f64 = s.parse().map_err(|e| format!("{s}: {e}"))?;
    if !(v.is_finite() && v > 0.0 && v < 86400.0) {
        return Err(format!("{s}: need a number of seconds in (0, 86400)"));
    }
    Ok(Duration::from_secs_f64(v))
}

async fn kube_client(path: Option<&PathBuf>) -> Result<kube::Client> {
    let mut config = match path {
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
    // a connection that died silently fails its request instead of holding it forever
    config.read_timeout = Some(api::api_timeouts::API_READ_TIMEOUT);
    config.reset_reader_on_write = true;
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
        join_v6: match args.join_cidr_v6 {
            None => None,
            Some(c) => Some(control::translate::JoinV6::new(c).with_context(|| {
                format!("--join-cidr-v6 {c} is not an IPv6 network with host addresses")
            })?),
        },
        service_cidrs: args.service_cidr.clone(),
        platform_security_groups: args.platform_security_groups,
        external_ips: api::services::ExternalIpPolicy::parse(&args.service_external_ip_cidrs)
            .context("--service-external-ip-cidrs")?,
        default_subnet: default_subnet(args)?,
        gateway: match args.gateway_mode {
            GatewayModeArg::Local => GatewayMode::Local,
            GatewayModeArg::Shared => GatewayMode::Shared,
            GatewayModeArg::Off => GatewayMode::Off,
        },
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

/// The chassis certificate signer's configuration, when the CA was given.
fn chassis_signer(args: &Args) -> Result<Option<control::chassis_signer::SignerConfig>> {
    let (Some(cert), Some(key)) = (&args.chassis_ca_cert, &args.chassis_ca_key) else {
        return Ok(None);
    };
    let ca = control::chassis_signer::ChassisCa::from_files(cert, key)
        .context("--chassis-ca-cert/--chassis-ca-key")?;
    if args.chassis_cert_days == 0 {
        bail!("--chassis-cert-days must be at least 1");
    }
    Ok(Some(control::chassis_signer::SignerConfig {
        ca: Arc::new(ca),
        agent: account("--agent-account", &args.agent_account)?,
        validity: Duration::from_secs(u64::from(args.chassis_cert_days) * 86_400),
    }))
}

/// A service account given as `NAMESPACE/NAME`.
fn account(flag: &str, v: &str) -> Result<control::agent_identity::AgentAccount> {
    let Some((namespace, name)) = v
        .split_once('/')
        .filter(|(n, a)| !n.is_empty() && !a.is_empty() && !a.contains('/'))
    else {
        bail!("{flag} {v:?}: expected NAMESPACE/NAME");
    };
    Ok(control::agent_identity::AgentAccount {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

/// The admission webhook's configuration, when its address was given.
fn admission(args: &Args) -> Result<Option<control::admission::AdmissionConfig>> {
    let (Some(addr), Some(cert), Some(key)) = (
        args.admission_addr,
        &args.admission_cert,
        &args.admission_key,
    ) else {
        return Ok(None);
    };
    Ok(Some(control::admission::AdmissionConfig {
        addr,
        cert: cert.clone(),
        key: key.clone(),
        agent: account("--agent-account", &args.agent_account)?,
        pods: control::admission::PodPolicy {
            controller: account("--controller-account", &args.controller_account)?.username(),
            vm_pod_creators: args
                .vm_pod_creators
                .iter()
                .filter(|c| !c.is_empty())
                .cloned()
                .collect(),
        },
    }))
}

/// Connects to an OVN database remote, with the NB TLS files for ssl: remotes.
async fn connect(args: &Args, remote: &str) -> Result<Client> {
    let mut cfg = ClientConfig::parse(remote).with_context(|| format!("remote {remote}"))?;
    if let Some(ca) = &args.nb_ca {
        let client_cert = args.nb_cert.as_ref().zip(args.nb_key.as_ref());
        let mut tls =
            TlsConfig::from_files(ca, client_cert.map(|(c, k)| (c.as_path(), k.as_path())))
                .context("load TLS files")?;
        if let Some(n) = &args.ovn_server_name {
            tls = tls.with_server_name(n).context("--ovn-server-name")?;
        }
        cfg = cfg.with_tls(tls);
    }
    // OVN central may still be starting (a Raft cluster electing its first leader on a
    // fresh install, a member restarting): wait for it rather than exit, which cost a
    // kubelet back-off of up to 5 min per crash. Bad input (a malformed remote, TLS files)
    // fails above, at once.
    let mut waited = 0u64;
    loop {
        match Client::connect(cfg.clone()).await {
            Ok(c) => return Ok(c),
            Err(e) => {
                waited += 1;
                tracing::warn!(remote, error = %e, attempt = waited,
                    "OVN database not reachable yet (or no Raft leader): retrying in 2 s");
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    control::logging::init(args.log_json);
    let cfg = cluster_config(&args)?;
    if args.cluster_id.is_empty() {
        bail!("--cluster-id must not be empty: it marks the rows this controller owns");
    }

    if args.uninstall_nb {
        return uninstall_nb(&args, &cfg).await;
    }

    let kube = kube_client(args.kubeconfig.as_ref()).await?;
    let metrics = Arc::new(ControllerMetrics::new());
    let role = Arc::new(Mutex::new(Role::Starting));
    if let Some(addr) = args.metrics_addr {
        serve_endpoints(addr, metrics.clone(), role.clone()).await?;
    }
    if let Some(webhook) = admission(&args)? {
        // a webhook that cannot start (certificate, port) ends the process: the API server
        // would otherwise refuse every Node write it routes here
        let webhook = control::admission::bind(webhook)
            .await
            .context("admission webhook")?;
        tokio::spawn(webhook.run(kube.clone()));
    }
    if !args.leader_elect {
        // as before leader election existed: SIGTERM's default action ends the process
        metrics.leader.set(1);
        set_role(&role, Role::Leading);
        return run_controller(&args, cfg, kube, metrics).await;
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("SIGTERM handler")?;

    let identity = match &args.leader_elect_identity {
        Some(id) if !id.is_empty() => id.clone(),
        _ => format!("{}-{}", hostname(), std::process::id()),
    };
    let mut elector = Elector::new(
        kube.clone(),
        LeaseConfig {
            namespace: args.leader_elect_namespace.clone(),
            name: args.leader_elect_lease_name.clone(),
            identity: identity.clone(),
            lease_duration: args.leader_elect_lease_duration,
            renew_deadline: args.leader_elect_renew_deadline,
            retry_period: args.leader_elect_retry_period,
        },
    )?;
    tracing::info!(identity = %identity, lease = %format!("{}/{}", args.leader_elect_namespace, args.leader_elect_lease_name), "leader election: acquiring the Lease");
    // Standby: nothing but Lease reads until we hold it (never two writers).
    tokio::select! {
        _ = elector.acquire(|holder| set_role(&role, Role::Standby(holder.to_string()))) => {}
        _ = term.recv() => {
            tracing::info!("SIGTERM while standing by: stopping");
            return Ok(());
        }
    }
    tracing::info!(identity = %identity, "became leader");
    metrics.leader.set(1);
    set_role(&role, Role::Leading);
    let outcome = tokio::select! {
        r = run_controller(&args, cfg, kube, metrics.clone()) => Outcome::Stopped(r),
        lost = elector.hold() => Outcome::Lost(lost),
        _ = term.recv() => Outcome::Term,
    };
    // the controller future is dropped here: no more NB or Kubernetes writes
    metrics.leader.set(0);
    match outcome {
        Outcome::Lost(why) => {
            tracing::error!(reason = %why, "lost leadership: stopping all work; exiting non-zero to restart as a standby");
            std::process::exit(1);
        }
        Outcome::Term => {
            tracing::info!("SIGTERM: releasing the Lease");
            if let Err(e) = elector.release().await {
                tracing::warn!(error = %e, "could not release the Lease: the successor waits for its expiry");
            }
            Ok(())
        }
        Outcome::Stopped(r) => {
            if let Err(e) = elector.release().await {
                tracing::warn!(error = %e, "could not release the Lease");
            }
            r
        }
    }
}

enum Outcome {
    Stopped(Result<()>),
    Lost(control::leader::LostReason),
    Term,
}

/// What `/readyz` reports.
#[derive(Clone, Debug)]
enum Role {
    Starting,
    Standby(String),
    Leading,
}

fn set_role(role: &Mutex<Role>, r: Role) {
    *role.lock().unwrap_or_else(|p| p.into_inner()) = r;
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "zstack-ovnkube-controller".to_string())
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr`.
async fn serve_endpoints(
    addr: std::net::SocketAddr,
    metrics: Arc<ControllerMetrics>,
    role: Arc<Mutex<Role>>,
) -> Result<()> {
    let (l, bound) = endpoints::bind(addr)
        .await
        .with_context(|| format!("metrics address {addr}"))?;
    tracing::info!(addr = %bound, "metrics listening on http://{bound}/metrics (and /healthz, /readyz)");
    let m = metrics.clone();
    let render: endpoints::Render = Arc::new(move || {
        let m = m.clone();
        Box::pin(async move { m.render() })
    });
    let ready: endpoints::Ready = Arc::new(move || {
        let r = role.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match r {
            Role::Starting => endpoints::Readiness::not_ready("not ready: starting"),
            Role::Standby(h) => endpoints::Readiness::ready(format!("standby: leader is {h}")),
            Role::Leading if metrics.synced() => endpoints::Readiness::ready("leader: synced"),
            Role::Leading => {
                endpoints::Readiness::not_ready("not ready: leader, first sync pending")
            }
        }
    });
    tokio::spawn(endpoints::serve(
        l,
        endpoints::Endpoints::new(render, ready),
    ));
    Ok(())
}

/// Connects to the NB (and SB), starts the watchers and runs the controller.
/// `--uninstall-nb`: every row of ours out of the NB; fails naming any that stayed.
async fn uninstall_nb(args: &Args, cfg: &ClusterConfig) -> Result<()> {
    let client = connect(args, &args.nb).await?;
    let rec = Reconciler::start(client, &cfg.cluster_id)
        .await
        .context("start the NB replica")?;
    let r = rec
        .remove_all()
        .await
        .context("remove the rows of ours from the NB")?;
    tracing::info!(
        nb = %args.nb,
        cluster_id = %cfg.cluster_id,
        transactions = r.outcome.transactions,
        deleted = r.outcome.deletes,
        updated = r.outcome.updates,
        "NB rows of ours removed"
    );
    if !r.left.is_empty() {
        bail!(
            "{} rows of ours are still in the NB: {}",
            r.left.len(),
            r.left.join(", ")
        );
    }
    println!(
        "removed every NB row of cluster id {} ({} deleted, {} platform rows restored) from {}",
        cfg.cluster_id, r.outcome.deletes, r.outcome.updates, args.nb
    );
    Ok(())
}

async fn run_controller(
    args: &Args,
    cfg: ClusterConfig,
    kube: kube::Client,
    metrics: Arc<ControllerMetrics>,
) -> Result<()> {
    if args.apply_crd {
        match control::crd::apply::apply_subnet_crd(kube.clone()).await {
            Ok(a) if a.changed() => {
                tracing::info!(crd = %a.name, before = ?a.generation_before, after = ?a.generation_after, "Subnet CRD updated to this controller's schema")
            }
            Ok(a) => {
                tracing::info!(crd = %a.name, generation = ?a.generation_after, "Subnet CRD already current")
            }
            // the chart's copy stays: Subnets work with the schema it has
            Err(e) => {
                tracing::warn!(error = %e, "--apply-crd: the Subnet CRD could not be applied (RBAC: customresourcedefinitions get/patch)")
            }
        }
    }
    let signer = chassis_signer(args)?;
    let chassis_ca = signer.as_ref().map(|s| s.ca.clone());
    if let Some(signer) = signer {
        tokio::spawn(control::chassis_signer::run(kube.clone(), signer));
    }
    let client = connect(args, &args.nb).await?;
    let rec = Reconciler::start(client, &cfg.cluster_id)
        .await
        .context("start the NB replica")?;
    let (tx, rx) = mpsc::unbounded_channel();
    spawn_watchers(kube.clone(), tx);
    tracing::info!(nb = %args.nb, mode = ?cfg.mode, cluster_id = %cfg.cluster_id, "controller started");
    let mut controller = Controller::new(cfg, rec, KubeWriter::new(kube)).with_metrics(metrics);
    match (&args.sb, chassis_ca, &args.nb_ca) {
        // the chart's PKI: the Southbound's RBAC lets a chassis delete only its own rows,
        // so a deleted node's rows are removed as that node
        (Some(sb), Some(ca), Some(server_ca)) => {
            let login = control::chassis::ChassisLogin {
                config: ClientConfig::parse(sb).with_context(|| format!("remote {sb}"))?,
                server_ca_pem: std::fs::read(server_ca)
                    .with_context(|| format!("read {}", server_ca.display()))?,
                server_name: args.ovn_server_name.clone(),
                ca,
            };
            controller = controller.with_southbound_as_chassis(login);
        }
        (Some(sb), _, _) => controller = controller.with_southbound(connect(args, sb).await?),
        (None, _, _) => {}
    }
    controller.run(rx).await.context("controller stopped")
}
