//! The pinger's matrix in `zovn status`: what each node's agent measured to the other
//! nodes (its `zstack_ovn_pinger_*` metrics, see the dataplane's `pinger` module).

use std::collections::BTreeMap;

use serde::Serialize;

/// What one node's pinger measured to one peer: ICMP RTT of the last round and the
/// reachability verdict, for its tunnel endpoint (`node_*`) and its sampled pods (`pod_*`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PeerProbe {
    pub peer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_rtt_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_reachable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_loss: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_rtt_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_reachable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_loss: Option<f64>,
}

/// One sample of Prometheus text: its name, labels and value.
fn sample(line: &str) -> Option<(&str, BTreeMap<&str, &str>, f64)> {
    let (head, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = match head.split_once('{') {
        Some((n, rest)) => (n, rest.strip_suffix('}')?),
        None => (head, ""),
    };
    let labels = labels
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k, v.trim_matches('"')))
        })
        .collect();
    Some((name, labels, value))
}

/// The peers an agent's `/metrics` text reports, by name.
pub fn peer_probes(metrics: &str) -> Vec<PeerProbe> {
    let mut peers: BTreeMap<String, PeerProbe> = BTreeMap::new();
    for (name, l, v) in metrics.lines().filter_map(sample) {
        let (Some(peer), Some(target)) = (l.get("peer"), l.get("target")) else {
            continue;
        };
        let icmp = l.get("proto") == Some(&"icmp");
        let p = peers.entry(peer.to_string()).or_insert_with(|| PeerProbe {
            peer: peer.to_string(),
            ..PeerProbe::default()
        });
        let node = *target == "node";
        match name {
            "zstack_ovn_pinger_last_rtt_seconds" if icmp => {
                *if node {
                    &mut p.node_rtt_ms
                } else {
                    &mut p.pod_rtt_ms
                } = Some(v * 1000.0)
            }
            "zstack_ovn_pinger_loss_ratio" if icmp => {
                *if node {
                    &mut p.node_loss
                } else {
                    &mut p.pod_loss
                } = Some(v)
            }
            "zstack_ovn_pinger_peer_reachable" => {
                *if node {
                    &mut p.node_reachable
                } else {
                    &mut p.pod_reachable
                } = Some(v > 0.0)
            }
            _ => {}
        }
    }
    peers.into_values().collect()
}

/// A cell: `<tunnel endpoint>/<pods>`, each the RTT in ms, `LOST` when unreachable, `?`
/// before any answer, `-` for no pod to probe.
pub fn cell(p: &PeerProbe) -> String {
    let part = |reachable: Option<bool>, rtt: Option<f64>| match (reachable, rtt) {
        (Some(false), _) => "LOST".to_string(),
        (_, Some(ms)) if ms < 10.0 => format!("{ms:.2}"),
        (_, Some(ms)) => format!("{ms:.0}"),
        (Some(true), None) | (None, None) => "?".to_string(),
    };
    let pods = if p.pod_reachable.is_none() && p.pod_rtt_ms.is_none() {
        "-".to_string()
    } else {
        part(p.pod_reachable, p.pod_rtt_ms)
    };
    format!("{}/{pods}", part(p.node_reachable, p.node_rtt_ms))
}

const FIRST: usize = 13;
const COL: usize = 13;

/// The matrix, rows probing columns, within 80 columns (the first 5 peers; JSON has all).
/// `rows`: (node, what its pinger reported); empty: no text.
pub fn matrix(rows: &[(String, Vec<PeerProbe>)]) -> String {
    if rows.iter().all(|(_, p)| p.is_empty()) {
        return String::new();
    }
    let cols: Vec<&String> = rows.iter().map(|(n, _)| n).collect();
    let shown = cols.len().min((80 - FIRST) / COL);
    let cut = |s: &str, n: usize| s.chars().take(n - 1).collect::<String>();
    let mut s = String::from(
        "PINGER (row probes column): ICMP RTT ms, tunnel endpoint/pods; LOST: no answer\n",
    );
    s += &format!("{:<FIRST$}", "FROM \\ TO");
    for c in &cols[..shown] {
        s += &format!("{:<COL$}", cut(c, COL));
    }
    s = s.trim_end().to_string() + "\n";
    for (from, probes) in rows {
        let mut line = format!("{:<FIRST$}", cut(from, FIRST));
        for to in &cols[..shown] {
            let c = if *to == from {
                "-".to_string()
            } else {
                probes
                    .iter()
                    .find(|p| &p.peer == *to)
                    .map(cell)
                    .unwrap_or_else(|| "?".into())
            };
            line += &format!("{:<COL$}", cut(&c, COL));
        }
        s += line.trim_end();
        s.push('\n');
    }
    if shown < cols.len() {
        s += &format!("  ({} more nodes: -o json)\n", cols.len() - shown);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"# HELP zstack_ovn_pinger_last_rtt_seconds x
zstack_ovn_pinger_last_rtt_seconds{peer="n2",target="node",proto="icmp"} 0.00021
zstack_ovn_pinger_last_rtt_seconds{peer="n2",target="node",proto="tcp"} 0.9
zstack_ovn_pinger_last_rtt_seconds{peer="n2",target="pod",proto="icmp"} 0.00035
zstack_ovn_pinger_loss_ratio{peer="n2",target="pod",proto="icmp"} 0.25
zstack_ovn_pinger_peer_reachable{peer="n2",target="node"} 1
zstack_ovn_pinger_peer_reachable{peer="n2",target="pod"} 0
zstack_ovn_pinger_peer_reachable{peer="n3",target="node"} 1
zstack_ovn_cni_requests_total{command="ADD",result="ok"} 3
"#;

    #[test]
    fn the_metrics_give_each_peers_icmp_figures_and_verdicts() {
        let p = peer_probes(METRICS);
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[0].peer, "n2");
        assert!((p[0].node_rtt_ms.unwrap() - 0.21).abs() < 1e-9);
        assert_eq!(p[0].pod_loss, Some(0.25));
        assert_eq!(p[0].pod_reachable, Some(false));
        assert_eq!(cell(&p[0]), "0.21/LOST");
        // reachable but no answer recorded yet; no pod to probe
        assert_eq!(cell(&p[1]), "?/-");
    }

    #[test]
    fn the_matrix_has_a_row_per_node_and_fits_80_columns() {
        let rows: Vec<(String, Vec<PeerProbe>)> = (1..=7)
            .map(|i| {
                let peers = (1..=7)
                    .filter(|j| *j != i)
                    .map(|j| PeerProbe {
                        peer: format!("node-with-a-long-name-{j}"),
                        node_rtt_ms: Some(0.2),
                        node_reachable: Some(true),
                        pod_rtt_ms: Some(12.0),
                        pod_reachable: Some(true),
                        ..PeerProbe::default()
                    })
                    .collect();
                (format!("node-with-a-long-name-{i}"), peers)
            })
            .collect();
        let t = matrix(&rows);
        assert!(t.lines().all(|l| l.chars().count() <= 80), "{t}");
        assert_eq!(t.lines().count(), 2 + 7 + 1, "{t}");
        assert!(t.contains("0.20/12"), "{t}");
        assert!(t.contains("(2 more nodes: -o json)"), "{t}");
        assert_eq!(matrix(&[("a".into(), vec![])]), "");
    }
}
