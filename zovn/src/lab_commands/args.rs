//! The arguments of the lab's and the local cluster's commands (`zovn lab ...`, `zovn
//! cluster ...`): feature `lab` only.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and N nodes
    /// (containerd + kubelet each); print the KUBECONFIG. Nodes stay NotReady until a CNI
    /// plugin is installed (`helm install`, docs/cluster.md).
    Up(ClusterUpArgs),
    /// Daemons (pid, alive) and `kubectl get nodes`.
    Status(ClusterDirArgs),
    /// Stop every process of the cluster by pid, delete the nodes' namespaces, cgroups and
    /// bridges, restore kernel settings and hugepages, remove the state dir.
    Down(ClusterDownArgs),
}

#[derive(Debug, Args)]
pub struct ClusterDirArgs {
    /// Cluster state directory.
    #[arg(long, env = "ZOVN_CLUSTER_DIR", default_value = "/tmp/zovn-cluster")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct ClusterUpArgs {
    #[command(flatten)]
    pub dir: ClusterDirArgs,
    /// Number of nodes (node1…nodeN).
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Prefix of host-side names (bridges, veths, netns, cgroups), 1-6 chars [a-z0-9].
    #[arg(long, default_value = "zc")]
    pub prefix: String,
    /// OCI archive to import into every node's containerd (repeatable). Default: the
    /// archives of `make images` and `make test-images` under target/images/.
    #[arg(long = "image")]
    pub images: Vec<PathBuf>,
    /// 2 MiB hugepages the host must have before the kubelets start (0: leave alone).
    #[arg(long, default_value_t = 1024)]
    pub hugepages_2m: u64,
    /// One NIC per node (eth0: management and data, with default routes IPv4 and IPv6)
    /// instead of eth0 + a data NIC eth1.
    #[arg(long)]
    pub single_nic: bool,
}

#[derive(Debug, Args)]
pub struct ClusterDownArgs {
    #[command(flatten)]
    pub dir: ClusterDirArgs,
    /// Keep the state directory (logs, etcd data).
    #[arg(long)]
    pub keep_files: bool,
}

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Start central + N nodes and the external network, wait until every chassis is
    /// registered.
    Up(UpArgs),
    /// Daemons (pid, alive), chassis, NB/SB remotes, the external network.
    Status(DirArgs),
    /// Stop every daemon, delete every netns, undo hugepage changes, remove the state dir.
    Down(DownArgs),
    /// Create or update Namespaces, Subnets and Pods from YAML/JSON manifests.
    Apply(ApplyArgs),
    /// Delete the objects named in manifests (missing ones are fine).
    Delete(DeleteArgs),
    /// List pods, subnets (sn), namespaces (ns) or nodes (no).
    Get(GetArgs),
    /// Run the lab's object store daemon (started by `zovn lab up`).
    #[command(hide = true)]
    Serve(ServeArgs),
    /// Run a command inside a pod's network namespace, or with --external in the external
    /// host's (its exit code is passed through).
    Exec(ExecArgs),
    /// Connect from inside a pod to HOST:PORT (TCP: connect and read the reply; --udp: send
    /// and wait for the echo). Exit 0 when reachable, 1 when not.
    Probe(ProbeArgs),
    /// Datapath counters per node: PMD threads, rx queue usage, the agent's ports.
    Stats(StatsArgs),
    /// Restart node N's ovs-vswitchd (what a node agent runs when a start-time datapath
    /// setting changed: `--vswitchd-restart-cmd`).
    #[command(hide = true)]
    RestartVswitchd(RestartVswitchdArgs),
    /// A pod's responder (started by the pod runtime inside the pod netns): TCP answers
    /// with the pod name and closes, UDP echoes the pod name. The external host's server
    /// is one too (`--echo-source`).
    #[command(hide = true)]
    Responder(ResponderArgs),
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// The pod: NAMESPACE/NAME (NAME alone: namespace default).
    #[arg(required_unless_present = "external", conflicts_with = "external")]
    pub pod: Option<String>,
    /// Run in the external host's netns (198.51.100.10, outside every node) instead of a
    /// pod's: the lab's external client.
    #[arg(long)]
    pub external: bool,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// The pod to probe from: NAMESPACE/NAME.
    pub pod: String,
    /// Where to: HOST:PORT.
    pub target: String,
    /// UDP instead of TCP.
    #[arg(long)]
    pub udp: bool,
    /// How long to wait (e.g. 2s, 500ms).
    #[arg(long, default_value = "2s", value_parser = lab::pods::probe::parse_duration)]
    pub timeout: std::time::Duration,
}

#[derive(Debug, Args)]
pub struct ResponderArgs {
    /// Ports to serve: 80/tcp,53/udp.
    #[arg(long, default_value = "")]
    pub ports: String,
    /// The reply: the pod's NAMESPACE/NAME.
    #[arg(long)]
    pub name: String,
    /// Written once every port is bound.
    #[arg(long)]
    pub pidfile: Option<PathBuf>,
    /// Also name the client's address and port as seen (`NAME ADDR:PORT`).
    #[arg(long)]
    pub echo_source: bool,
}

#[derive(Debug, Args)]
pub struct DirArgs {
    /// Lab state directory.
    #[arg(long, env = "ZOVN_LAB_DIR", default_value = "/tmp/zovn-lab")]
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum EncapArg {
    Geneve,
    Vxlan,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Number of simulated nodes.
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// 3-member Raft clusters for NB and SB.
    #[arg(long)]
    pub raft: bool,
    /// Use ovs-vswitchd-dpdk on every node with DPDK set up by the lab itself (the
    /// hand-made baseline; sets up hugepages if needed).
    #[arg(long)]
    pub dpdk: bool,
    /// Datapath the node agents manage: one value for every node or one per node, comma
    /// separated (auto, dpdk, afxdp, kernel), e.g. `--datapath dpdk,kernel`. dpdk/auto
    /// nodes run ovs-vswitchd-dpdk and their agent initialises DPDK.
    #[arg(long, value_delimiter = ',')]
    pub datapath: Vec<String>,
    /// Tunnel encapsulation.
    #[arg(long, value_enum, default_value = "geneve")]
    pub encap: EncapArg,
    /// Prefix of every netns/interface name (1-8 chars [a-z0-9]).
    #[arg(long, default_value = "zovn")]
    pub prefix: String,
    /// The cluster CIDR(s) (IPv4 first, comma separated): the lab's controller creates and
    /// keeps the default Subnet `cluster-default` with it; `none` for no default Subnet.
    #[arg(long, default_value = lab::DEFAULT_CLUSTER_CIDR)]
    pub cluster_cidr: String,
    /// Pods' egress: `local` (each node's management port, masqueraded by its agent),
    /// `shared` (a gateway router per node sharing its br-phy address) or `off`.
    #[arg(long, value_enum, default_value = "local")]
    pub gateway_mode: GatewayArg,
    /// The lab controller's mode: standalone (it owns the NB) or external (the NB is a
    /// platform's: no cluster router, join switch or egress rows; a Subnet's
    /// `externalLogicalSwitch` puts its pods on a platform switch).
    #[arg(long, value_enum, default_value = "standalone")]
    pub mode: ModeArg,
    /// The Service externalIPs the controller and the agents allow (CIDRs, comma
    /// separated); every other externalIP is refused. Empty (the default): none.
    #[arg(long, default_value = "")]
    pub external_ip_cidrs: String,
    /// External mode: Subnets may put their pods in the platform's security groups
    /// (`spec.securityGroups`; the controller's `--platform-security-groups`).
    #[arg(long)]
    pub platform_security_groups: bool,
    /// The agents' pinger: milliseconds between its rounds of probes to the other nodes
    /// (`zovn status` shows the matrix); 0 (the default): off.
    #[arg(long, default_value_t = 0)]
    pub pinger_interval_ms: u64,
}

/// `zovn lab up --mode`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    Standalone,
    External,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum GatewayArg {
    Local,
    Shared,
    Off,
}

impl From<GatewayArg> for lab::Gateway {
    fn from(g: GatewayArg) -> Self {
        match g {
            GatewayArg::Local => lab::Gateway::Local,
            GatewayArg::Shared => lab::Gateway::Shared,
            GatewayArg::Off => lab::Gateway::Off,
        }
    }
}

#[derive(Debug, Args)]
pub struct RestartVswitchdArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// The node (1-based).
    #[arg(long)]
    pub node: usize,
}

#[derive(Debug, Args)]
pub struct DownArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Keep the state directory (logs, databases); only the manifest is removed.
    #[arg(long)]
    pub keep_files: bool,
}

#[derive(Debug, Args)]
pub struct FilesArgs {
    /// A manifest file, or a directory (its *.yaml, *.yml, *.json in name order); repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Wait until the controller has caught up (addresses, ports, statuses).
    #[arg(long)]
    pub wait: bool,
    /// Longest wait with --wait, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub files: FilesArgs,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub files: FilesArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GetKind {
    #[value(name = "pods", alias = "pod", alias = "po")]
    Pods,
    #[value(name = "subnets", alias = "subnet", alias = "sn")]
    Subnets,
    #[value(name = "namespaces", alias = "namespace", alias = "ns")]
    Namespaces,
    #[value(name = "nodes", alias = "node", alias = "no")]
    Nodes,
    #[value(name = "services", alias = "service", alias = "svc")]
    Services,
    #[value(name = "networkpolicies", alias = "networkpolicy", alias = "netpol")]
    NetworkPolicies,
    /// Multus NetworkAttachmentDefinitions.
    #[value(
        name = "network-attachment-definitions",
        alias = "network-attachment-definition",
        alias = "net-attach-def",
        alias = "nad"
    )]
    NetworkAttachmentDefinitions,
    /// Produced by the lab from Services and Pods.
    #[value(name = "endpointslices", alias = "endpointslice", alias = "eps")]
    EndpointSlices,
    /// Events the node agents recorded (datapath decisions, fallbacks, config errors).
    #[value(name = "events", alias = "event", alias = "ev")]
    Events,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OutputArg {
    Table,
    Json,
    Yaml,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// What to list.
    #[arg(value_enum)]
    pub kind: GetKind,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: OutputArg,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Pidfile to write (also how `down` recognises the process).
    #[arg(long)]
    pub pidfile: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StatsOutput {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Only this node (1-based).
    #[arg(long)]
    pub node: Option<usize>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: StatsOutput,
}
