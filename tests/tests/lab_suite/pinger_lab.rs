//! The agents' pinger (issue #36) on a 2-node lab (node1 AF_XDP, node2 kernel ports;
//! Geneve), real agents, controller and pods, `--pinger-interval-ms 1000`:
//! - each agent measures the other's tunnel endpoint and pod, and `zovn status` shows
//!   the matrix;
//! - Geneve cut between the nodes on the lab's underlay bridge (nftables, the tunnel
//!   only): both agents mark the peer's pods unreachable while its tunnel endpoint still
//!   answers, with a `PeerUnreachable` Warning event each, and `LOST` in the matrix;
//! - the cut restored: the pods answer again, `PeerReachable` events, loss falls.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use tests::egress::BINS;
use tests::zovn::{start_agents, start_lab_with, wait_until};

/// Node `from`'s pinger row for `to` in `zovn status -o json`.
fn probe_of(z: &tests::zovn::Zovn, from: &str, to: &str) -> Value {
    let o: Value = serde_json::from_str(&z.status(&["-o", "json"])).expect("status JSON");
    tests::node_status::pinger_probe(&o, from, to)
}

fn nft(netns: &str, script: &str) {
    let mut c = Command::new("ip")
        .args(["netns", "exec", netns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("nft");
    use std::io::Write;
    c.stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("write");
    assert!(c.wait().expect("nft").success(), "nft failed: {script}");
}

fn events(z: &tests::zovn::Zovn, reason: &str, node: &str) -> Vec<String> {
    z.items("events")
        .iter()
        .filter(|e| e["reason"] == reason && e["involvedObject"]["name"] == node)
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

fn lost_probes(metrics: &str, peer: &str) -> u64 {
    let key = format!(
        "zstack_ovn_pinger_probes_total{{peer=\"{peer}\",target=\"pod\",proto=\"icmp\",result=\"lost\"}} "
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn pinger_reports_a_cut_tunnel_and_its_recovery() {
    const T: &str = "pinger_lab::pinger_reports_a_cut_tunnel_and_its_recovery";
    if !tests::require_real(T, BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("png");
    let (mut lab, z, _down) = start_lab_with(&s, 2, &["afxdp", "kernel"], |c| {
        c.pinger_interval_ms = 1000;
    });
    start_agents(&mut lab);
    let (n1, n2) = (format!("{}-node1", s.prefix), format!("{}-node2", s.prefix));
    let manifest = s.dir.path().join("pods.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p1, namespace: default}}\n\
             spec: {{nodeName: {n1}, containers: [{{name: c}}]}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: p2, namespace: default}}\n\
             spec: {{nodeName: {n2}, containers: [{{name: c}}]}}\n"
        ),
    )
    .expect("write");
    z.ok(&["apply", "-f", manifest.to_str().expect("utf-8")]);
    z.wait_ready(&["default/p1", "default/p2"], Duration::from_secs(120));

    // both directions measured: tunnel endpoint and pod (the pod sample is read every
    // minute, so the first rounds may probe the endpoints only)
    for (from, to) in [(&n1, &n2), (&n2, &n1)] {
        let t0 = Instant::now();
        let mut last = Value::Null;
        while t0.elapsed() < Duration::from_secs(90) {
            last = probe_of(&z, from, to);
            if last["node_reachable"] == true
                && last["pod_reachable"] == true
                && last["node_rtt_ms"].is_number()
                && last["pod_rtt_ms"].is_number()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        assert!(
            last["pod_rtt_ms"].is_number(),
            "{from}'s pinger did not measure {to}'s endpoint and pod; last: {last}\n{}",
            z.status(&[])
        );
        let p = probe_of(&z, from, to);
        eprintln!("{from} → {to}: {p}");
        for k in ["node_rtt_ms", "pod_rtt_ms"] {
            let ms = p[k].as_f64().expect("rtt");
            assert!(ms > 0.0 && ms < 1000.0, "{k} {ms} out of (0, 1000) ms: {p}");
        }
    }
    let text = z.status(&[]);
    assert!(text.contains("PINGER (row probes column)"), "{text}");
    eprintln!("{text}");

    let netns1 = lab.node(1).expect("node1").netns.clone();
    let lost_before =
        lab::diag_backends::overview::metrics_in(&netns1, lab::agent::AGENT_METRICS_PORT)
            .map(|m| lost_probes(&m, &n2))
            .unwrap_or(0);

    // cut Geneve (and VXLAN) on the underlay bridge: the tunnel, not the underlay
    let underlay = lab.names().underlay_netns();
    nft(
        &underlay,
        "table bridge zovncut {\n chain forward {\n  type filter hook forward priority 0;\n  udp dport { 4789, 6081 } drop\n }\n}\n",
    );
    let cut = Instant::now();
    for (from, to) in [(&n1, &n2), (&n2, &n1)] {
        wait_until(
            &format!("{from}'s pinger marking {to}'s pods unreachable"),
            Duration::from_secs(30),
            || probe_of(&z, from, to)["pod_reachable"] == false,
        );
    }
    let detected = cut.elapsed();
    for (from, to) in [(&n1, &n2), (&n2, &n1)] {
        let p = probe_of(&z, from, to);
        assert_eq!(p["node_reachable"], true, "the underlay still answers: {p}");
        wait_until(
            &format!("a PeerUnreachable event of {from} naming {to}"),
            Duration::from_secs(20),
            || {
                events(&z, "PeerUnreachable", from)
                    .iter()
                    .any(|m| m.contains(&format!("pods sampled on {to}")))
            },
        );
    }
    let text = z.status(&[]);
    assert!(text.contains("/LOST"), "no LOST cell:\n{text}");
    eprintln!("cut detected by both agents {detected:?} after the cut\n{text}");
    let lost_after =
        lab::diag_backends::overview::metrics_in(&netns1, lab::agent::AGENT_METRICS_PORT)
            .map(|m| lost_probes(&m, &n2))
            .unwrap_or(0);
    assert!(
        lost_after >= lost_before + 3,
        "lost ICMP probes {lost_before} → {lost_after}"
    );

    // restored
    nft(&underlay, "delete table bridge zovncut\n");
    let restored = Instant::now();
    for (from, to) in [(&n1, &n2), (&n2, &n1)] {
        wait_until(
            &format!("{from}'s pinger reaching {to}'s pods again"),
            Duration::from_secs(30),
            || probe_of(&z, from, to)["pod_reachable"] == true,
        );
        wait_until(
            &format!("a PeerReachable event of {from}"),
            Duration::from_secs(20),
            || !events(&z, "PeerReachable", from).is_empty(),
        );
    }
    eprintln!("recovery seen {:?} after the restore", restored.elapsed());
    // the loss ratio (last 20 probes) falls as answers come back
    wait_until(
        "node1's pod loss ratio to fall",
        Duration::from_secs(30),
        || {
            probe_of(&z, &n1, &n2)["pod_loss"]
                .as_f64()
                .is_some_and(|l| l < 0.5)
        },
    );
}
