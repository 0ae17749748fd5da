//! The pinger: each node agent probes the other nodes, so an operator sees the mesh's
//! health before a tenant reports it (the "pinger" zstack-ovn-kubernetes and Kube-OVN
//! users know).
//!
//! Every [`PingerConfig::interval`], for each peer chassis ovn-controller built a tunnel
//! to ([`targets`]): its tunnel endpoint over the underlay (`target=node`) and up to
//! [`PingerConfig::pods_per_node`] running pods of its node over OVN and the tunnel
//! (`target=pod`, sent from the host through the management port, which NetworkPolicy
//! always admits), each by ICMP echo and by a TCP handshake ([`probe`]). Probes start at
//! most [`PingerConfig::max_rate`] per second, whatever the cluster's size. RTT and loss
//! go to `zstack_ovn_pinger_*` ([`metrics`]); a target kind of a peer that stays silent
//! for [`verdict::LOST_ROUNDS`] rounds gets a `PeerUnreachable` Warning event on this
//! node, and a `PeerReachable` event when it answers again ([`verdict`]).
//! `zovn status` shows the matrix from every agent's metrics.

pub mod metrics;
pub mod probe;
pub mod targets;
pub mod verdict;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::agent::report::{AgentEvent, EventType, Subject};
use crate::ovs::Ovs;
use crate::source::PodSource;
use metrics::{PROTOS, PingerMetrics};
use targets::{Peer, PeerView};
use verdict::{Change, LOST_ROUNDS, Target, Verdicts, Window};

/// The pinger's settings (the agent's `--pinger-*` flags).
#[derive(Debug, Clone)]
pub struct PingerConfig {
    /// Between the starts of two rounds.
    pub interval: Duration,
    /// Pods probed per peer node.
    pub pods_per_node: usize,
    /// The port of the TCP probes (a reset answers as well as an accept).
    pub tcp_port: u16,
    /// How long a probe waits for its answer.
    pub timeout: Duration,
    /// Probes started per second, at most.
    pub max_rate: u32,
}

/// How often the Nodes and the pod sample are read again ...
pub const VIEW_REFRESH: Duration = Duration::from_secs(60);
/// ... or while a peer has no pod sampled or no Node naming it (a new node, pods not
/// started yet).
pub const VIEW_REFRESH_INCOMPLETE: Duration = Duration::from_secs(15);

/// One probe to run.
struct Job {
    peer: usize,
    target: Target,
    proto: &'static str,
    addr: std::net::IpAddr,
}

/// Runs forever (see the module doc).
pub async fn run(
    node: &str,
    ovs: &Ovs,
    pods: &dyn PodSource,
    m: &PingerMetrics,
    cfg: &PingerConfig,
) {
    let mut view = PeerView::default();
    let mut view_at: Option<Instant> = None;
    let mut refresh = VIEW_REFRESH;
    let mut verdicts = Verdicts::default();
    let mut windows: BTreeMap<(String, Target, &'static str), Window> = BTreeMap::new();
    let mut known: BTreeSet<String> = BTreeSet::new();
    let mut seq: u16 = 0;
    let mut icmp_failed = false;
    let mut tick = tokio::time::interval(cfg.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if view_at.is_none_or(|t| t.elapsed() >= refresh) {
            match pods.peer_view(cfg.pods_per_node).await {
                Ok(v) => view = v,
                Err(e) => {
                    tracing::warn!(error = %e, "pinger: Nodes and pods not read; probing the tunnel endpoints only")
                }
            }
            view_at = Some(Instant::now());
        }
        let tunnels = ovs.tunnel_ports();
        let peers = targets::plan(&tunnels, &view, node);
        let complete = cfg.pods_per_node == 0
            || peers
                .iter()
                .all(|p| !p.pods.is_empty() && view.chassis_of.contains_key(&p.name));
        refresh = if complete {
            VIEW_REFRESH
        } else {
            VIEW_REFRESH_INCOMPLETE
        };
        let names: BTreeSet<String> = peers.iter().map(|p| p.name.clone()).collect();
        for gone in known.difference(&names) {
            m.forget(gone);
        }
        windows.retain(|(p, _, _), _| names.contains(p));
        verdicts.retain(&names.iter().map(String::as_str).collect::<Vec<_>>());
        known = names;

        seq = seq.wrapping_add(1);
        let results = probe_round(&peers, cfg, seq, &mut icmp_failed).await;
        for (i, peer) in peers.iter().enumerate() {
            for target in [Target::Node, Target::Pod] {
                let mut sent = 0;
                let mut answered = 0;
                for proto in PROTOS {
                    let rtts: Vec<Option<Duration>> = results
                        .iter()
                        .filter(|(j, r)| {
                            j.peer == i && j.target == target && j.proto == proto && r.is_some()
                        })
                        .map(|(_, r)| r.flatten())
                        .collect();
                    if rtts.is_empty() {
                        continue;
                    }
                    let w = windows
                        .entry((peer.name.clone(), target, proto))
                        .or_default();
                    for r in &rtts {
                        w.push(r.is_some());
                        m.probe(&peer.name, target, proto, *r);
                    }
                    let ok: Vec<f64> = rtts.iter().flatten().map(Duration::as_secs_f64).collect();
                    let mean = (!ok.is_empty()).then(|| ok.iter().sum::<f64>() / ok.len() as f64);
                    m.round(&peer.name, target, proto, w.loss(), mean);
                    sent += rtts.len();
                    answered += ok.len();
                }
                if let Some(change) = verdicts.round(&peer.name, target, answered, sent) {
                    report(pods, node, peer, target, change, cfg).await;
                }
                if let Some(up) = verdicts.reachable(&peer.name, target) {
                    m.reachable(&peer.name, target, up);
                }
            }
        }
    }
}

/// Runs one round's probes, their starts spread at `cfg.max_rate`; each result is
/// `Some(rtt or lost)`, or `None` for a probe that could not be sent (logged once).
async fn probe_round(
    peers: &[Peer],
    cfg: &PingerConfig,
    seq: u16,
    icmp_failed: &mut bool,
) -> Vec<(Job, Option<Option<Duration>>)> {
    let mut jobs = Vec::new();
    for (i, p) in peers.iter().enumerate() {
        let mut addrs = vec![(Target::Node, p.endpoint)];
        addrs.extend(p.pods.iter().map(|(_, ip)| (Target::Pod, *ip)));
        for (target, addr) in addrs {
            for proto in PROTOS {
                jobs.push(Job {
                    peer: i,
                    target,
                    proto,
                    addr,
                });
            }
        }
    }
    let gap = Duration::from_secs_f64(1.0 / f64::from(cfg.max_rate.max(1)));
    let runs = jobs.into_iter().enumerate().map(|(n, job)| async move {
        tokio::time::sleep(gap * n as u32).await;
        let r = match job.proto {
            "icmp" => probe::icmp(job.addr, seq, cfg.timeout).await,
            _ => Ok(probe::tcp(SocketAddr::new(job.addr, cfg.tcp_port), cfg.timeout).await),
        };
        (job, r)
    });
    let mut out = Vec::new();
    for (job, r) in futures::future::join_all(runs).await {
        match r {
            Ok(r) => out.push((job, Some(r))),
            Err(e) => {
                if !std::mem::replace(icmp_failed, true) {
                    tracing::warn!(error = %e, "pinger: ICMP probes cannot be sent; TCP only");
                }
                out.push((job, None));
            }
        }
    }
    out
}

/// What a target kind of `peer` is, for the events.
fn describe(peer: &Peer, target: Target) -> String {
    match target {
        Target::Node => format!("{}'s tunnel endpoint {}", peer.name, peer.endpoint),
        Target::Pod => format!(
            "the pods sampled on {} ({}) over the {} tunnel to {}",
            peer.name,
            peer.pods
                .iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            peer.encap,
            peer.endpoint
        ),
    }
}

/// Logs a change and records it as an event on this node.
async fn report(
    pods: &dyn PodSource,
    node: &str,
    peer: &Peer,
    target: Target,
    change: Change,
    cfg: &PingerConfig,
) {
    let what = describe(peer, target);
    let (event_type, reason, message) = match change {
        Change::Unreachable => (
            EventType::Warning,
            api::keys::REASON_PEER_UNREACHABLE,
            format!(
                "{what}: no answer to ICMP or TCP (port {}) for {LOST_ROUNDS} rounds, {:?} apart",
                cfg.tcp_port, cfg.interval
            ),
        ),
        Change::Reachable => (
            EventType::Normal,
            api::keys::REASON_PEER_REACHABLE,
            format!("{what}: answers again"),
        ),
    };
    match change {
        Change::Unreachable => {
            tracing::warn!(peer = %peer.name, target = target.as_str(), "{message}")
        }
        Change::Reachable => {
            tracing::info!(peer = %peer.name, target = target.as_str(), "{message}")
        }
    }
    let ev = AgentEvent {
        subject: Subject::Node(node.to_string()),
        event_type,
        reason: reason.to_string(),
        message,
        node: node.to_string(),
    };
    if let Err(e) = pods.event(&ev).await {
        tracing::warn!(error = %e, "pinger: event not recorded");
    }
}
