//! Node-local and host-side Services on real traffic: a 2-node lab with the real
//! controller, node agents and CNI shim, `examples/services/` applied plus one
//! `internalTrafficPolicy: Local` Service.
//!
//! Checked:
//! - `internalTrafficPolicy: Local` (OVN template load balancers): with its only endpoint
//!   on node 1, node 1's client reaches it and node 2's client does not (dropped); once a
//!   second endpoint runs on node 2, each node's client (and each host) reaches only its
//!   own node's endpoint; such a Service without any endpoint is refused at once.
//! - From both hosts (the lab node netns): NodePort on the host's own address and on the
//!   other node's address, the LoadBalancer ingress IP and an externalIP (the agent's
//!   `table inet zstack-ovn`).
//! - A foreign nf_tables table in the host is never touched; an agent restart after our
//!   table was lost rebuilds it; deleting a Service removes its rules.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use tests::zovn::{
    Zovn, alive, allow_example_external_ips, start_agents, start_lab_with, wait_until,
};

const ITP: &str = r#"apiVersion: v1
kind: Service
metadata: {name: itp, namespace: svc}
spec:
  internalTrafficPolicy: Local
  selector: {itp: "yes"}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: itp-none, namespace: svc}
spec:
  internalTrafficPolicy: Local
  selector: {itp: "nobody"}
  ports: [{port: 80, targetPort: 8080}]
"#;

/// A backend of the `itp` Service on `node`.
fn itp_pod(name: &str, node: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: svc, labels: {{itp: \"yes\"}}}}\n\
         spec: {{nodeName: {node}, containers: [{{name: web, ports: [{{containerPort: 8080}}]}}]}}\n"
    )
}

const WEB_NP: &str = r#"apiVersion: v1
kind: Service
metadata: {name: web-np, namespace: svc}
spec: {type: NodePort, selector: {app: web}, ports: [{port: 80, targetPort: 8080, nodePort: 30080}]}
"#;

/// A pod's probe: Ok(who answered) or Err(why not).
fn probe(z: &Zovn, from: &str, target: &str) -> Result<String, String> {
    z.probe(from, target, false)
}

/// A probe from a host (node netns).
fn host_probe(netns: &str, target: &str) -> Result<String, String> {
    tests::zovn::probe_netns(netns, target, false, Duration::from_secs(2))
}

/// Probes (`f`) until the answer is one of `want`, 30 s at most.
fn reaches(what: &str, want: &[&str], mut f: impl FnMut() -> Result<String, String>) {
    let t0 = Instant::now();
    loop {
        let last = match f() {
            Ok(who) if want.contains(&who.as_str()) => return,
            Ok(who) => format!("answered by {who}"),
            Err(e) => e,
        };
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what} never reached {want:?}: {last}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Who answers `n` probes (a probe without answer is an entry `-`).
fn answers(n: usize, mut f: impl FnMut() -> Result<String, String>) -> BTreeSet<String> {
    (0..n).map(|_| f().unwrap_or_else(|_| "-".into())).collect()
}

fn nft(netns: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "nft"])
        .args(args)
        .output()
        .expect("run nft");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn our_table(netns: &str) -> Option<String> {
    let (ok, out) = nft(netns, &["list", "table", "inet", "zstack-ovn"]);
    ok.then_some(out)
}

#[test]
fn node_local_and_host_services_on_real_traffic() {
    if !tests::require_real("services_host_lab", tests::OVSDB_BINS)
        || !tests::require_real("services_host_lab", tests::LAB_BINS)
        || !tests::require_real("services_host_lab", &["nft"])
    {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("svh");
    let (mut lab, z, _down) = start_lab_with(&s, 2, &[], allow_example_external_ips);
    let nodes = lab.nodes().to_vec();
    // a table of someone else's in node 1's host: never touched
    let foreign = "table inet h2-foreign {\n  chain keep {\n    ip daddr 203.0.113.9 counter accept\n  }\n}\n";
    let foreign_file = s.dir.path().join("foreign.nft");
    std::fs::write(&foreign_file, foreign).expect("write");
    let (ok, out) = nft(
        &nodes[0].netns,
        &["-f", foreign_file.to_str().expect("utf-8")],
    );
    assert!(ok, "foreign table: {out}");

    start_agents(&mut lab);
    z.apply_example("services");
    let itp_file = s.dir.path().join("itp.yaml");
    std::fs::write(
        &itp_file,
        format!("{ITP}---\n{}", itp_pod("itp-1", "node1")),
    )
    .expect("write");
    z.ok(&["apply", "-f", itp_file.to_str().expect("utf-8")]);

    let cluster_ip = |name: &str| -> String {
        z.items("services")
            .into_iter()
            .find(|s| s["metadata"]["name"].as_str() == Some(name))
            .and_then(|s| s["spec"]["clusterIP"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("Service {name} has a cluster IP"))
    };
    let (c1, c2) = ("svc/client-1", "svc/client-2");
    let webs = ["svc/web-1", "svc/web-2"];
    let web = format!("{}:80", cluster_ip("web"));
    let itp = format!("{}:80", cluster_ip("itp"));
    // both clients are wired: they reach the plain Service
    for from in [c1, c2] {
        reaches(&format!("{from} → {web}"), &webs, || {
            probe(&z, from, &web)
        });
    }

    // internalTrafficPolicy: Local, endpoint on node 1 only
    reaches(&format!("{c1} → {itp}"), &["svc/itp-1"], || {
        probe(&z, c1, &itp)
    });
    assert_eq!(
        answers(6, || probe(&z, c1, &itp)),
        BTreeSet::from(["svc/itp-1".to_string()])
    );
    assert_eq!(
        answers(3, || probe(&z, c2, &itp)),
        BTreeSet::from(["-".to_string()]),
        "node 2 has no local endpoint: dropped"
    );
    // no endpoint anywhere: refused at once (not dropped), as for any Service
    let none = format!("{}:80", cluster_ip("itp-none"));
    let t0 = Instant::now();
    let err = probe(&z, c1, &none).expect_err("no endpoints");
    assert!(
        err.to_lowercase().contains("refused") && t0.elapsed() < Duration::from_millis(1500),
        "rejected quickly ({:?}): {err}",
        t0.elapsed()
    );
    reaches(&format!("host 1 → {itp}"), &["svc/itp-1"], || {
        host_probe(&nodes[0].netns, &itp)
    });

    // from both hosts: NodePort on the own and the other address, ingress IP, externalIP
    for host in &nodes {
        for n in &nodes {
            let target = format!("{}:30080", n.encap_ip);
            reaches(&format!("host {} → {target}", host.netns), &webs, || {
                host_probe(&host.netns, &target)
            });
        }
        for target in ["203.0.113.10:80", "192.0.2.10:80"] {
            reaches(&format!("host {} → {target}", host.netns), &webs, || {
                host_probe(&host.netns, target)
            });
        }
    }
    let table = our_table(&nodes[0].netns).expect("our table");
    assert!(
        table.contains("dport 30080") && table.contains("masquerade"),
        "{table}"
    );

    // a second endpoint on node 2: each node's clients reach only their own
    let itp2_file = s.dir.path().join("itp-2.yaml");
    std::fs::write(&itp2_file, itp_pod("itp-2", "node2")).expect("write");
    z.ok(&["apply", "-f", itp2_file.to_str().expect("utf-8")]);
    reaches(&format!("{c2} → {itp}"), &["svc/itp-2"], || {
        probe(&z, c2, &itp)
    });
    assert_eq!(
        answers(6, || probe(&z, c2, &itp)),
        BTreeSet::from(["svc/itp-2".to_string()])
    );
    assert_eq!(
        answers(6, || probe(&z, c1, &itp)),
        BTreeSet::from(["svc/itp-1".to_string()])
    );
    reaches(&format!("host 2 → {itp}"), &["svc/itp-2"], || {
        host_probe(&nodes[1].netns, &itp)
    });

    // agent restart after our table was lost: rebuilt
    let agent1 = lab
        .agents()
        .iter()
        .find(|a| a.name.starts_with("node1/"))
        .cloned()
        .expect("node1 agent");
    lab::process::kill9(&agent1).expect("kill agent");
    wait_until("agent gone", Duration::from_secs(5), || {
        !alive(i64::from(agent1.pid))
    });
    let (ok, out) = nft(&nodes[0].netns, &["delete", "table", "inet", "zstack-ovn"]);
    assert!(ok, "{out}");
    let own = format!("{}:30080", nodes[0].encap_ip);
    assert!(
        host_probe(&nodes[0].netns, &own).is_err(),
        "no rule, no answer"
    );
    start_agents(&mut lab);
    reaches(&format!("host 1 → {own} after restart"), &webs, || {
        host_probe(&nodes[0].netns, &own)
    });

    // deleting the Service removes its rules
    let np_file = s.dir.path().join("web-np.yaml");
    std::fs::write(&np_file, WEB_NP).expect("write");
    z.ok(&["delete", "-f", np_file.to_str().expect("utf-8")]);
    for n in &nodes {
        wait_until(
            &format!("30080 out of {}'s table", n.netns),
            Duration::from_secs(30),
            || our_table(&n.netns).is_some_and(|t| !t.contains("30080")),
        );
    }
    assert!(host_probe(&nodes[0].netns, &own).is_err(), "Service gone");
    // the ingress/external IPs are still served
    reaches("host 1 → 192.0.2.10:80 after the delete", &webs, || {
        host_probe(&nodes[0].netns, "192.0.2.10:80")
    });

    let (ok, out) = nft(&nodes[0].netns, &["list", "table", "inet", "h2-foreign"]);
    assert!(
        ok && out.contains("203.0.113.9"),
        "foreign table untouched: {out}"
    );
    tests::record_real_run("services_host_lab");
}
