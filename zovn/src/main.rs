//! `zovn`: the operator's CLI (diagnostics and day-2 tools, the `diag` crate) and, with
//! the `lab` feature (on by default), the local lab and cluster. Built without it, as the
//! operator installs it (`make install-cli`, also as the kubectl plugin `kubectl-zovn`),
//! it links neither the lab nor the controller nor the node agent.
//!
//! ```text
//! zovn lab up [--nodes N] [--raft] [--dpdk | --datapath auto|dpdk|afxdp|kernel[,...]]
//!              [--encap geneve|vxlan] [--prefix P] [--dir DIR]
//! zovn lab status [--dir DIR]
//! zovn lab down [--keep-files] [--dir DIR]
//! zovn lab apply -f FILE|DIR [-f ...] [--wait [--timeout S]] [--dir DIR]
//! zovn lab delete -f FILE|DIR [-f ...] [--wait [--timeout S]] [--dir DIR]
//! zovn lab get pods|subnets|sn|namespaces|nodes [-o table|json|yaml] [--dir DIR]
//! zovn lab exec NS/POD [--dir DIR] -- CMD [ARGS...]
//! zovn lab exec --external [--dir DIR] -- CMD [ARGS...]
//! zovn lab probe NS/POD HOST:PORT [--udp] [--timeout 2s] [--dir DIR]
//! zovn lab stats [--node N] [-o table|json] [--dir DIR]
//! zovn capture NS/POD [-c N] [-w FILE|-] [--duration SECS] [--dir DIR]
//! zovn backup DIR | zovn restore DIR     (a cluster's OVN central, through kubectl)
//! ```
//! The lab dir defaults to `$ZOVN_LAB_DIR` or `/tmp/zovn-lab`.
//!
//! ```text
//! zovn cluster up [--nodes N] [--image ARCHIVE]... [--hugepages-2m N] [--prefix P] [--dir DIR]
//! zovn cluster status [--dir DIR]
//! zovn cluster down [--keep-files] [--dir DIR]
//! ```
//! A real Kubernetes 1.20 cluster (kubelet + containerd per node); the dir defaults to
//! `$ZOVN_CLUSTER_DIR` or `/tmp/zovn-cluster`. See docs/cluster.md.
//!
//! `up` also starts the lab's object store (`zovn lab serve`, hidden): a daemon holding
//! the Namespaces, Subnets, Pods and Nodes that `apply`/`delete`/`get` work on, with the
//! real controller writing the NB from them. Its objects are saved in `<dir>/store.json`
//! and survive a restart of the daemon (`zovn lab up` on a running lab whose store died
//! starts it again), not `zovn lab down`.
//!
//! `up` then starts one node agent (`zstack-ovnkube-node`) per node in the node's netns.
//! The object store's pod runtime turns every pod into a network namespace wired by the
//! CNI shim and the agent, with a responder on its container ports; `exec` and `probe`
//! act from inside a pod.
//!
//! `up` also builds an external network outside every node: the host `198.51.100.10` /
//! `2001:db8:5100::10` in netns `<prefix>x` behind the underlay netns as router (nodes
//! route it via `172.16.0.254` / `fd00:172:16::254`), whose server answers TCP 8080 and
//! UDP 5353 with the source address it saw (`zovn lab probe NS/POD 198.51.100.10:8080`
//! shows what the outside sees); `exec --external` runs a command as that host.

mod args;
mod backup;
mod capture;
#[cfg(feature = "lab")]
mod lab_commands;
mod target;
mod trace;
mod upgrade_ovs;

use clap::Parser;

use args::{Cli, Command};

fn main() -> anyhow::Result<()> {
    #[cfg(not(feature = "lab"))]
    refuse_lab_commands();
    let cli = Cli::parse();
    // the daemon logs what it does to its log file; the commands only warn
    #[cfg(feature = "lab")]
    let daemon = matches!(
        &cli.command,
        Command::Lab {
            command: lab_commands::args::LabCommand::Serve(_)
        }
    );
    #[cfg(not(feature = "lab"))]
    let daemon = false;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ZOVN_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(if daemon { "info" } else { "warn" })
            }),
        )
        .with_writer(std::io::stderr)
        // colours only on a terminal: a pipe, a log file or the daemon's log gets plain text
        .with_ansi(!daemon && std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        #[cfg(feature = "lab")]
        Command::Lab { command } => lab_commands::lab(command),
        #[cfg(feature = "lab")]
        Command::Cluster { command } => lab_commands::cluster(command),
        Command::Trace(a) => trace::run(a),
        Command::Status(a) => trace::status(a),
        Command::Capture(a) => capture::run(a),
        Command::Backup(a) => backup::backup(a),
        Command::Restore(a) => backup::restore(a),
        Command::UpgradeOvs(a) => upgrade_ovs::run(a),
    }
}

/// The operator's build has no `lab`/`cluster`: say where they are rather than clap's
/// "unrecognized subcommand" (exit 2, bad input).
#[cfg(not(feature = "lab"))]
fn refuse_lab_commands() {
    let Some(cmd) = std::env::args()
        .nth(1)
        .filter(|c| c == "lab" || c == "cluster")
    else {
        return;
    };
    eprintln!(
        "zovn {cmd}: this zovn is the operator's build (make install-cli: diagnostics and \
         day-2 tools only); `zovn {cmd}` is in the full build of the source tree: \
         `cargo build --workspace --bins`, then `target/debug/zovn {cmd} ...`"
    );
    std::process::exit(2);
}
