//! Clients OUTSIDE the cluster (the lab's external host, `198.51.100.10`, behind the
//! underlay router) reaching Services through the nodes, on real traffic: a 2-node lab
//! with `examples/services/` applied.
//!
//! Checked, `externalTrafficPolicy: Cluster`:
//! - the NodePort on each node's address answers (from either backend);
//! - the LoadBalancer ingress IP and the externalIP, once the underlay routes them to a
//!   node (the operator's or the cloud's job), answer;
//! - without such a route nothing answers (no node claims the address on the underlay).
//!
//! Not yet (issue 18): `externalTrafficPolicy: Local` for external clients (only the
//! node's own endpoints, the client's address preserved).

use std::process::Command;
use std::time::{Duration, Instant};

use tests::zovn::{Zovn, start_agents, start_lab};

/// One TCP exchange from the external host: Ok(the responder's first line) or Err(why).
fn external_get(z: &Zovn, target: &str) -> Result<String, String> {
    let (host, port) = target.rsplit_once(':').expect("host:port");
    let script = format!("exec 3<>/dev/tcp/{host}/{port} && head -n1 <&3");
    let (code, out, err) = z.run(&[
        "exec",
        "--external",
        "--",
        "timeout",
        "3",
        "bash",
        "-c",
        &script,
    ]);
    if code == 0 && !out.trim().is_empty() {
        Ok(out.trim().to_string())
    } else {
        Err(format!("exit {code}: {out}{err}"))
    }
}

/// Waits until `target` is answered by one of `want`.
fn reaches(z: &Zovn, target: &str, want: &[&str]) {
    let t0 = Instant::now();
    loop {
        let last = match external_get(z, target) {
            Ok(who) if want.contains(&who.as_str()) => return,
            Ok(who) => format!("answered by {who}"),
            Err(e) => e,
        };
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the external host never reached {target} ({want:?}): {last}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn underlay_route(netns: &str, prefix: &str, via: &str) {
    let out = Command::new("ip")
        .args(["-n", netns, "route", "replace", prefix, "via", via])
        .output()
        .expect("ip route");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn external_clients_reach_node_ports_and_routed_service_addresses() {
    if !tests::require_real(
        "external_clients_lab_external_clients_reach_node_ports_and_routed_service_addresses",
        &[
            "ovs-vswitchd",
            "ovsdb-server",
            "ovn-northd",
            "ovn-controller",
            "nft",
            "bash",
        ],
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("ecl");
    let (mut lab, z, _down) = start_lab(&s, 2, &[]);
    let nodes = lab.nodes().to_vec();
    let underlay = lab.names().underlay_netns();
    start_agents(&mut lab);
    z.apply_example("services");
    let webs = ["svc/web-1", "svc/web-2"];

    // NodePort (externalTrafficPolicy: Cluster) on each node's address
    for n in &nodes {
        reaches(&z, &format!("{}:30080", n.encap_ip), &webs);
    }

    // the LoadBalancer ingress IP and the externalIP: nothing answers until the underlay
    // routes them to a node
    for ip in ["203.0.113.10", "192.0.2.10"] {
        assert!(
            external_get(&z, &format!("{ip}:80")).is_err(),
            "{ip} answered without a route to a node"
        );
    }
    underlay_route(&underlay, "203.0.113.10/32", &nodes[1].encap_ip);
    underlay_route(&underlay, "192.0.2.10/32", &nodes[0].encap_ip);
    for ip in ["203.0.113.10", "192.0.2.10"] {
        reaches(&z, &format!("{ip}:80"), &webs);
    }
}
