//! Command-line arguments (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[cfg(feature = "lab")]
use crate::lab_commands::args::{ClusterCommand, LabCommand};
pub use crate::target::TargetArgs;

/// zovn — Kubernetes networking on OVN: diagnostics, day-2 tools and the local lab
///
/// Built without the `lab` feature (`make install-cli`, the kubectl plugin) it has no
/// `lab` and `cluster` commands.
#[derive(Debug, Parser)]
#[command(name = "zovn", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// A local lab of real OVN/OVS daemons in network namespaces.
    #[cfg(feature = "lab")]
    Lab {
        #[command(subcommand)]
        command: LabCommand,
    },
    /// A real Kubernetes 1.20 cluster on this machine: control plane on the host, each
    /// node a netns + mount namespace with its own containerd and kubelet.
    #[cfg(feature = "lab")]
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Why a packet from a pod reaches its destination or not: the logical trace
    /// (ovn-trace) and the OpenFlow traces of the nodes on the way, with the verdict in
    /// Kubernetes terms first (the NetworkPolicy rule, the Service backend, the route). On
    /// a lab, or on a cluster through kubectl (also as `kubectl zovn trace`). Exit 0 when
    /// delivered, 1 when dropped, 2 on bad input.
    Trace(TraceArgs),
    /// A lab or a cluster on one screen: OVN central's health (members, Raft roles and
    /// lag), each node's datapath decision and why, uplink, PMD load and stale-flow purges,
    /// and the pods with problems (no address, not Ready) and why.
    Status(StatusArgs),
    /// A pod's packets, from its OVS port on any datapath (kernel, AF_XDP, vhost-user:
    /// where the host's tcpdump sees nothing): one summary line per packet, or pcap with
    /// -w (tcpdump/tshark read it). An OVS Mirror onto a temporary port, removed on exit,
    /// Ctrl-C, or by the node agent if the capture is killed. Exit 2 on bad input.
    Capture(CaptureArgs),
    /// A consistent snapshot of OVN central's NB and SB databases (standalone mode) into
    /// DIR: `ovsdb-client backup` in the central pod through kubectl exec. Also as
    /// `kubectl zovn backup`.
    Backup(BackupArgs),
    /// Replaces OVN central's NB and SB with the snapshots in DIR (as `zovn backup` wrote
    /// them), e.g. into a fresh central after its disk was lost.
    Restore(BackupArgs),
    /// After a `helm upgrade` that changed the OVS image: each OVS pod whose template
    /// differs from its DaemonSet's only in images and labels gets its new images in
    /// place, one pod at a time (kubelet restarts its containers, ovs-vswitchd restores
    /// its tables: about 2 s without traffic, not a pod re-creation's 6-15 s). Pods that
    /// differ in more are named, with what differs, and left for `kubectl delete pod`.
    /// Exit 1 when such a pod remains. Also as `kubectl zovn upgrade-ovs`.
    UpgradeOvs(UpgradeOvsArgs),
}

#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// The pod, namespace/name (or name, in the namespace of -n).
    pub pod: String,
    /// The namespace of a pod named without one (as kubectl's `-n`) [default: `default`
    /// on a lab, the context's namespace on a cluster].
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Stop after N packets.
    #[arg(short = 'c', long, value_name = "N")]
    pub count: Option<u64>,
    /// Write the packets as pcap to FILE (`-`: stdout, e.g. `| tshark -r -`) instead of
    /// printing one line per packet.
    #[arg(short = 'w', value_name = "FILE")]
    pub write: Option<PathBuf>,
    /// Stop after SECS seconds in any case.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub duration: u64,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, Args)]
pub struct UpgradeOvsArgs {
    /// Only the OVS pod on this node (node by node, as docs/install.md upgrades).
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Say what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Seconds a pod may take to run its new images and be Ready.
    #[arg(long, value_name = "SECS", default_value_t = 180)]
    pub timeout: u64,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The directory holding `ovnnb_db.db` and `ovnsb_db.db`.
    #[arg(value_name = "DIR")]
    pub backup_dir: PathBuf,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Output format.
    #[arg(short, long, value_enum, default_value = "text")]
    pub output: TraceFormat,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The source pod, namespace/name (or name, in the namespace of -n).
    pub src: String,
    /// namespace/name or name (a pod), svc/namespace/name (a Service) or an address, with
    /// :PORT[/tcp|udp|sctp] (no port: ICMP echo; IPv6 in brackets with a port).
    pub dst: String,
    /// Every logical stage and the physical trace too.
    #[arg(short, long)]
    pub verbose: bool,
    /// The namespace of pods named without one (as kubectl's `-n`) [default: `default`
    /// on a lab, the context's namespace on a cluster].
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "text")]
    pub output: TraceFormat,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TraceFormat {
    Text,
    Json,
}
