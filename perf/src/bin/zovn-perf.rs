//! `zovn-perf`: the benchmark runner.
//!
//! `zovn-perf ovsdb-insert [--ports 10000] [--batch 1000] [--nbctl-loop-ports 1000]
//! [--json FILE]` inserts logical switch ports into real NB databases through our client
//! and through `ovn-nbctl`, and prints rates, ratios and the replica's memory per row.
//!
//! `zovn-perf cni-add [--pods 100] [--concurrent 20] [--datapath kernel,afxdp,dpdk,vhost]
//! [--no-fast-start] [--json FILE] [--agent-log DIR]` brings up ONE lab with a node per
//! datapath (vhost-user pods on the dpdk node), its object store, controller and a node
//! agent per node with the lab's datapath config, and measures per datapath CNI ADD latency
//! and pods/s through the real shim (sequential and concurrent), the ratio to the kernel
//! node, and where each ADD's time went (the agents' `CNI ADD phases` lines); on the kernel
//! node also the same work done by hand.
//!
//! `zovn-perf pod-burst [--datapaths kernel,afxdp,dpdk] [--rounds 1] [--pods 60]
//! [--probe-pods 30] [--probe-seconds 30] [--iperf-rate 100M|off] [--no-fast-start]
//! [--agent-logs DIR] [--json FILE]` is issue #17's user test: per datapath and round a
//! fresh 2-node lab, the pods applied at once, apply -> all Ready (ratio to kernel), ADD
//! phases, the time until every pod is on AF_XDP; then the longest ping gap, loss and
//! iperf3's verdict between two running pods while more pods are added on their node.
//!
//! `zovn-perf datapath [--seconds 5] [--qperf-seconds 3] [--pmd-max-sleep US] [--rounds N]
//! [--afxdp-rx-cpus auto|LIST|off] [--json FILE]`
//! measures iperf3 and qperf between two pods on a 1-node lab through AF_XDP ports, kernel
//! fallback ports and a direct veth pair, and prints the ratios the issue targets.
//!
//! `zovn-perf netpol [--pods 100] [--policies 20] [--rows-only] [--json FILE]` measures
//! NetworkPolicy create → enforced on a 2-node lab (p50/p99) and the NB rows the policy
//! translator produces as pods and policies grow.
//!
//! `zovn-perf megaflow-guard [--ports 250,1000,4000] [--json FILE]` measures the node
//! agent's megaflow guard on a bare ovs-vswitchd with 2N datapath flows: one check's time,
//! and how long ovs-vswitchd's main thread takes to answer while checks run against the
//! same probe with none.
//!
//! `zovn-perf vhost [--seconds 5] [--rounds 3] [--json FILE]` measures the 64 B packet
//! rate through the OVS-DPDK PMD between two vhost-user ports made by the node agent and
//! between two made by hand, with testpmd as the guest.
//!
//! `zovn-perf matrix [--datapaths kernel,afxdp,dpdk] [--seconds 10] [--qperf-seconds 5]
//! [--rounds 2] [--json FILE]` measures node ↔ node, pod ↔ pod on one node and across
//! nodes per datapath (one 2-node lab each): iperf3 TCP, qperf tcp_lat/udp_lat (1 B) and
//! udp_bw (1 KiB).
//!
//! `zovn-perf vm [--seconds 30] [--rounds 2] [--json FILE]` measures TCP (iperf3, both
//! directions) between a pod on node2 and a real QEMU guest (TCG) on node1's vhost-user
//! port, against testpmd playing the VM on the same kind of port in the same run, and the
//! guest's boot split.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOC: perf::alloc::Counting = perf::alloc::Counting;

#[derive(Parser)]
#[command(name = "zovn-perf", about = "Benchmarks on the real lab")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bulk insert of logical switch ports: our client vs ovn-nbctl; replica memory per row.
    OvsdbInsert {
        /// Ports written by the client and by the single ovn-nbctl invocation.
        #[arg(long, default_value_t = 10_000)]
        ports: usize,
        /// Ports per client transaction.
        #[arg(long, default_value_t = 1_000)]
        batch: usize,
        /// Ports written by the one-invocation-per-port ovn-nbctl loop.
        #[arg(long, default_value_t = 1_000)]
        nbctl_loop_ports: usize,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The megaflow guard's cost: check time and ovs-vswitchd main-thread stall on a bare
    /// ovs-vswitchd with 2N datapath flows.
    MegaflowGuard {
        /// Port counts N (comma separated).
        #[arg(long, value_delimiter = ',', default_values_t = [250usize, 1000, 4000])]
        ports: Vec<usize>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Service load balancers: endpoint change -> LB updated in a real NB (p50/p99), NB
    /// rows as the number of Services grows.
    ServiceLb {
        #[arg(long, default_value_t = 1_000)]
        services: usize,
        #[arg(long, default_value_t = 200)]
        changes: usize,
        /// Service counts of the scaling series (comma separated).
        #[arg(long, value_delimiter = ',', default_values_t = [250usize, 500, 1000, 2000, 4000])]
        scale: Vec<usize>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Controller cold sync of pods over Subnets into a real NB, and restart with no change.
    ControlSync {
        #[arg(long, default_value_t = 10_000)]
        pods: usize,
        #[arg(long, default_value_t = 20)]
        subnets: usize,
        #[arg(long, default_value_t = 2)]
        nodes: usize,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// CNI ADD latency, pods/s and per-phase breakdown per datapath on one lab (a node per
    /// datapath): real shim + agent; on the kernel node also by hand (ip/ovs-vsctl/ovn-nbctl).
    CniAdd {
        /// Pods added one after another per datapath (and by hand for the baseline).
        #[arg(long, default_value_t = 100)]
        pods: usize,
        /// Pods whose ADDs start together, per datapath.
        #[arg(long, default_value_t = 20)]
        concurrent: usize,
        /// Datapaths measured (comma separated): kernel, afxdp, dpdk, vhost (vhost-user
        /// pods on the dpdk node).
        #[arg(long, value_delimiter = ',', default_values_t = ["kernel".to_string(), "afxdp".into(), "dpdk".into(), "vhost".into()])]
        datapath: Vec<String>,
        /// Also measure afxdp/dpdk nodes with `afxdp: {fastStart: false}` (extra nodes,
        /// same run).
        #[arg(long)]
        no_fast_start: bool,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Keep a copy of the node agents' logs in this directory.
        #[arg(long)]
        agent_log: Option<PathBuf>,
    },
    /// Issue #17's user test: per datapath and round a fresh 2-node lab, N pods applied at
    /// once, apply -> all Ready; phases, moves to AF_XDP; traffic of running pods during a
    /// burst.
    PodBurst {
        /// Datapaths (comma separated), each on its own fresh lab per round.
        #[arg(long, value_delimiter = ',', default_values_t = ["kernel".to_string(), "afxdp".into(), "dpdk".into()])]
        datapaths: Vec<String>,
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        /// Pods applied at once (spread over both nodes).
        #[arg(long, default_value_t = 60)]
        pods: usize,
        /// Pods added on node1 during the traffic probe (0: no probe).
        #[arg(long, default_value_t = 30)]
        probe_pods: usize,
        /// Length of the probe's ping and iperf3 stream.
        #[arg(long, default_value_t = 30)]
        probe_seconds: u32,
        /// iperf3 -b of the probe's TCP stream, or `off` (ping only).
        #[arg(long, default_value = "100M")]
        iperf_rate: String,
        /// Also run afxdp/dpdk with `afxdp: {fastStart: false}` (extra labs, same run).
        #[arg(long)]
        no_fast_start: bool,
        /// Keep the agents' logs in this directory.
        #[arg(long)]
        agent_logs: Option<PathBuf>,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Pod-to-pod iperf3/qperf: AF_XDP ports vs kernel fallback vs a direct veth pair.
    Datapath {
        /// iperf3 duration per run (-P1, -P4).
        #[arg(long, default_value_t = 5)]
        seconds: u32,
        /// qperf duration per test and message size.
        #[arg(long, default_value_t = 3)]
        qperf_seconds: u32,
        /// pmdMaxSleep (µs, static) in the node's datapath config instead of the agent's
        /// default (auto: idle PMDs sleep, busy-poll under traffic); 0: busy polling.
        #[arg(long)]
        pmd_max_sleep: Option<u32>,
        /// AF_XDP mode of the pod ports (native, generic) instead of native.
        #[arg(long)]
        afxdp_mode: Option<String>,
        /// cpuDmaLatencyUs in the node's datapath config: the agent holds this CPU
        /// wake-up latency (µs, /dev/cpu_dma_latency) for the whole run, every path included.
        #[arg(long)]
        cpu_dma_latency: Option<u32>,
        /// afxdp.rxCpus in the node's datapath config (auto, a cpulist, off): where the
        /// AF_XDP pods' receive processing runs (RPS). Default: the agent's (off). With
        /// steering, the AF_XDP pods are also measured with it cleared, in the same rounds.
        #[arg(long)]
        afxdp_rx_cpus: Option<String>,
        /// Rounds: the paths alternate within each round; figures are medians over rounds.
        #[arg(long, default_value_t = 1)]
        rounds: u32,
        /// Also measure the AF_XDP pods under each of these pmdMaxSleep values (`0` busy
        /// polling, µs, `auto` the agent's adaptive sleep), each with the idle node's CPU
        /// cost, in the same rounds (e.g. `0,50,auto`).
        #[arg(long, value_delimiter = ',')]
        pmd_sleep_modes: Vec<String>,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// NetworkPolicy: create → enforced p50/p99 on a 2-node lab; NB rows as pods and
    /// policies grow.
    Netpol {
        #[arg(long, default_value_t = 100)]
        pods: usize,
        #[arg(long, default_value_t = 20)]
        policies: usize,
        /// Only the row counts (no lab).
        #[arg(long)]
        rows_only: bool,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// ovs-vswitchd memory (RSS, hugepages) per pod on one node, per datapath, at growing
    /// pod counts: what a full node costs, against the kernel path in the same run.
    NodeMemory {
        /// Pod counts measured (ascending).
        #[arg(long, value_delimiter = ',', default_value = "10,50,110")]
        steps: Vec<usize>,
        /// Datapaths, each on a fresh 1-node lab.
        #[arg(long, value_delimiter = ',', default_value = "kernel,afxdp,dpdk")]
        datapaths: Vec<String>,
        /// afxdp.maxPorts in the node's datapath config (default: the agent's budget, 10 %
        /// of the machine's memory).
        #[arg(long)]
        max_ports: Option<u32>,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// 64 B packet rate through the OVS-DPDK PMD between two vhost-user ports (testpmd
    /// txonly -> rxonly, and an io loop): the agent's ports vs ports made by hand.
    Vhost {
        /// Measured seconds per sample (after a 2 s warm-up).
        #[arg(long, default_value_t = 5)]
        seconds: u32,
        /// Rounds of (agent, by hand); the median is reported.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Per datapath (one 2-node lab each): node <-> node, pod <-> pod on one node and across
    /// nodes, with iperf3 TCP, qperf tcp_lat/udp_lat (1 B) and udp_bw (1 KiB)
    Matrix {
        /// Datapaths (comma separated), one 2-node lab each.
        #[arg(long, value_delimiter = ',', default_value = "kernel,afxdp,dpdk")]
        datapaths: Vec<String>,
        /// iperf3 seconds per sample.
        #[arg(long, default_value_t = 10)]
        seconds: u32,
        /// qperf seconds per test.
        #[arg(long, default_value_t = 5)]
        qperf_seconds: u32,
        /// Rounds (path order alternating); medians are reported.
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// A real QEMU guest (TCG) vs testpmd as the VM on vhost-user ports of node1: iperf3
    /// both ways from a pod on node2, ratios, and the guest's boot split.
    Vm {
        /// iperf3 seconds per sample.
        #[arg(long, default_value_t = 30)]
        seconds: u32,
        /// Rounds of (guest, testpmd), order alternating; medians are reported.
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Pods' egress to the lab's external host vs pod-to-pod on the same node, per
    /// gateway mode and datapath: iperf3 -P1 and qperf tcp_lat, medians and ratios.
    Egress {
        /// Gateway modes (comma separated), one lab each.
        #[arg(long, value_delimiter = ',', default_value = "local,shared")]
        modes: Vec<String>,
        /// Datapaths (comma separated), one lab node each.
        #[arg(long, value_delimiter = ',', default_value = "kernel,afxdp,dpdk")]
        datapaths: Vec<String>,
        /// iperf3 seconds per sample.
        #[arg(long, default_value_t = 5)]
        seconds: u32,
        /// qperf seconds per sample.
        #[arg(long, default_value_t = 2)]
        qperf_seconds: u32,
        /// Rounds (the paths alternate; medians are reported).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The pod-burst traffic probe's echo end (run by `pod-burst` inside a pod's netns).
    #[command(hide = true)]
    UdpEcho {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        seconds: u32,
    },
    /// The pod-burst traffic probe's sending end: one line per datagram to `--out`.
    #[command(hide = true)]
    UdpSend {
        #[arg(long)]
        to: std::net::SocketAddr,
        #[arg(long, default_value_t = 2000)]
        interval_us: u64,
        #[arg(long)]
        seconds: u32,
        #[arg(long)]
        out: PathBuf,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::UdpEcho { port, seconds } => perf::udp_probe::echo(port, seconds)?,
        Cmd::Egress {
            modes,
            datapaths,
            seconds,
            qperf_seconds,
            rounds,
            json,
        } => {
            let dir = tempfile_dir()?;
            let cfg = perf::egress_bench::Config {
                dir: dir.clone(),
                datapaths,
                seconds,
                qperf_seconds,
                rounds,
                modes: modes
                    .iter()
                    .map(|m| match m.as_str() {
                        "local" => Ok(lab::Gateway::Local),
                        "shared" => Ok(lab::Gateway::Shared),
                        other => Err(anyhow::anyhow!(
                            "--modes: unknown gateway mode {other:?} (local, shared)"
                        )),
                    })
                    .collect::<Result<_>>()?,
            };
            let report = tokio::task::spawn_blocking(move || perf::egress_bench::run(cfg))
                .await
                .context("egress worker")?;
            let _ = std::fs::remove_dir_all(&dir);
            let report = report?;
            print!("{}", report.table());
            write_json(json, report.to_json())?;
        }
        Cmd::UdpSend {
            to,
            interval_us,
            seconds,
            out,
        } => perf::udp_probe::send(
            to,
            std::time::Duration::from_micros(interval_us),
            seconds,
            &out,
        )?,
        Cmd::OvsdbInsert {
            ports,
            batch,
            nbctl_loop_ports,
            json,
        } => {
            let dir = tempfile_dir()?;
            let cfg = perf::ovsdb_insert::Config {
                dir: dir.clone(),
                ports,
                batch,
                nbctl_loop_ports,
            };
            let report = perf::ovsdb_insert::run(cfg).await;
            let _ = std::fs::remove_dir_all(&dir);
            let report = report?;
            print!("{}", report.table());
            write_json(json, report.to_json())?;
        }
        Cmd::ServiceLb {
            services,
            changes,
            scale,
            json,
        } => {
            let dir = tempfile_dir()?;
            let cfg = perf::service_lb::Config {
                dir: dir.clone(),
                services,
                changes,
                scale,
            };
            let report = perf::service_lb::run(cfg).await;
            let _ = std::fs::remove_dir_all(&dir);
            let report = report?;
            print!("{}", report.table());
            write_json(json, report.to_json())?;
        }
        Cmd::Netpol {
            pods,
            policies,
            rows_only,
            json,
        } => {
            let dir = tempfile_dir()?;
            let cfg = perf::netpol_bench::Config {
                dir: dir.clone(),
                pods,
                policies,
                rows_only,
            };
            let report = tokio::task::spawn_blocking(move || perf::netpol_bench::run(cfg))
                .await
                .context("netpol benchmark task")?;
            let _ = std::fs::remove_dir_all(&dir);
            let report = report?;
            print!("{}", report.table());
            write_json(json, report.to_json())?;
        }
        Cmd::MegaflowGuard { ports, json } => {
            let dir = tempfile_dir()?;
            let cfg = perf::guard_bench::Config {
                dir: dir.clone(),
                prefix: format!("mg{}", std::process::id() % 10_000),
                ports,
            };
            let report = perf::guard_bench::run(cfg).await;
            let _ = std::fs::remove_dir_all(&dir);
            let report = report?;
            print!("{}", report.table());
            write_json(json, report.to_json())?;
        }
        Cmd::ControlSync {
            pods,
            subnets,
            nodes,
            json,
        } => {
            let dir = tempfile_dir()?;
            let cfg = perf::control_sync::Config {
                dir: dir.clone(),
                pods,
                subnets,
                nodes,
            };
            let report = perf::control_sync::run(cfg).await;
            let _ = std::fs::remove_dir_all(&dir);
            let report = report?;
            print!("{}", report.table());
            write_json(json, report.to_json())?;
        }
        Cmd::CniAdd {
            pods,
            concurrent,
            datapath,
            no_fast_start,
            json,
            agent_log,
        } => {
            let dir = tempfile_dir()?;
            let cfg = perf::cni_add::Config {
                dir: dir.clone(),
                pods,
                concurrent,
                datapaths: datapath,
                no_fast_start,
                agent_log,
            };
            let report = tokio::task::spawn_blocking(move || perf::cni_add::run(cfg))
                .await
                .context("cni-add worker")?;
            let _ = std::fs::remove_dir_all(&dir);
            let report = report?;
            print!("{}", report.table());
            write_json(json, report.to_json())?;
        }
        Cmd::PodBurst {
            datapaths,
            rounds,
            pods,
            probe_pods,
            probe_seconds,
            iperf_rate,
            no_fast_start,
            agent_logs,
            json,
        } => {
            let dir = tempfile_dir()?;
            let cfg = perf::pod_burst::Config {
                dir: dir.clone(),
                datapaths,
                rounds,
                pods,
                probe_pods,
                probe_seconds,
                iperf_rate: (iperf_rate != "off").then_some(iperf_rate),
                no_fast_start,
                keep_logs: agent_logs,
            };
            let report = tokio::task::spawn_blocking(move || perf::pod_burst::run(cfg))
                .await
                .context("pod-burst worker")?;
            let _ = std::fs::remove_dir_all(&dir);
            let report = report?;
            print!("{}", report.table());
            write_json(json, report.to_json())?;
        }
        Cmd::Datapath {
            seconds,
            qperf_seconds,
            pmd_max_sleep,
            afxdp_mode,
            cpu_dma_latency,
            afxdp_rx_cpus,
            rounds,
            pmd_sleep_modes,
            json,
        } => {
            scratch_bench(
                "datapath",
                json,
                move |dir| {
                    perf::datapath_bench::run(perf::datapath_bench::Config {
                        dir,
                        seconds,
                        qperf_seconds,
                        pmd_max_sleep,
                        afxdp_mode,
                        cpu_dma_latency,
                        afxdp_rx_cpus,
                        rounds,
                        pmd_sleep_modes,
                    })
                },
                |r| (r.table(), r.to_json()),
            )
            .await?;
        }
        Cmd::NodeMemory {
            steps,
            datapaths,
            max_ports,
            json,
        } => {
            scratch_bench(
                "node-memory",
                json,
                move |dir| {
                    perf::node_memory::run(perf::node_memory::Config {
                        dir,
                        steps,
                        datapaths,
                        max_ports,
                    })
                },
                |r| (r.table(), r.to_json()),
            )
            .await?;
        }
        Cmd::Matrix {
            datapaths,
            seconds,
            qperf_seconds,
            rounds,
            json,
        } => {
            scratch_bench(
                "matrix",
                json,
                move |dir| {
                    perf::matrix_bench::run(perf::matrix_bench::Config {
                        dir,
                        datapaths,
                        seconds,
                        qperf_seconds,
                        rounds,
                    })
                },
                |r| (r.table(), r.to_json()),
            )
            .await?;
        }
        Cmd::Vm {
            seconds,
            rounds,
            json,
        } => {
            scratch_bench(
                "vm",
                json,
                move |dir| {
                    perf::vm_bench::run(perf::vm_bench::Config {
                        dir,
                        seconds,
                        rounds,
                    })
                },
                |r| (r.table(), r.to_json()),
            )
            .await?;
        }
        Cmd::Vhost {
            seconds,
            rounds,
            json,
        } => {
            scratch_bench(
                "vhost",
                json,
                move |dir| {
                    perf::vhost_bench::run(perf::vhost_bench::Config {
                        dir,
                        seconds,
                        rounds,
                    })
                },
                |r| (r.table(), r.to_json()),
            )
            .await?;
        }
    }
    Ok(())
}

/// Runs the blocking benchmark `run` in a fresh scratch directory (removed afterwards),
/// then prints its table and writes its JSON (`show`: both of the report).
async fn scratch_bench<R: Send + 'static>(
    what: &'static str,
    json: Option<PathBuf>,
    run: impl FnOnce(PathBuf) -> Result<R> + Send + 'static,
    show: impl Fn(&R) -> (String, serde_json::Value),
) -> Result<()> {
    let dir = tempfile_dir()?;
    let scratch = dir.clone();
    let report = tokio::task::spawn_blocking(move || run(scratch))
        .await
        .with_context(|| format!("{what} worker"))?;
    let _ = std::fs::remove_dir_all(&dir);
    let (table, value) = show(&report?);
    print!("{table}");
    write_json(json, value)
}

fn write_json(path: Option<PathBuf>, value: serde_json::Value) -> Result<()> {
    if let Some(path) = path {
        std::fs::write(&path, serde_json::to_string_pretty(&value)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("zovn-perf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}
