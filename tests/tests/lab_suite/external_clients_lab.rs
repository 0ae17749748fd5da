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
//! Checked, `externalTrafficPolicy: Local` (the node agent DNATs straight to its own
//! endpoints, without masquerading):
//! - `web-local` (endpoints on both nodes): each node's NodePort answers only with the
//!   pod on that node;
//! - `echo-local` (one endpoint, on node 1, whose responder echoes the source it saw):
//!   node 1's NodePort (IPv4 and IPv6) and the LoadBalancer ingress IP routed to node 1
//!   answer, and the pod saw the external host's own address (198.51.100.10,
//!   2001:db8:5100::10); node 2's NodePort (both families) and the
//!   ingress IP routed to node 2 do not answer (dropped there, as kube-proxy does); node
//!   2's host is outside node 1 too: it reaches node 1's NodePort and the pod sees node
//!   2's address, while node 1's host gets no answer from node 2's NodePort.

use std::process::Command;
use std::time::{Duration, Instant};

use lab::node::UNDERLAY_NET6;
use lab::pods::record::{PortSpec, Proto};
use lab::pods::responder::{ResponderDaemon, parse_source_reply, spawn_daemon};
use tests::zovn::{
    Zovn, allow_example_external_ips, netns_of, start_agents, start_lab_with, wait_until,
};

/// The external host's addresses on the lab's external network.
const EXTERNAL_HOST: &str = "198.51.100.10";
const EXTERNAL_HOST_V6: &str = "2001:db8:5100::10";

/// A Service on `web-1` only (label `hairpin: "yes"`, node 1), port 9090, where the test
/// runs a responder that echoes the source address it saw.
const ECHO_LOCAL: &str = r#"apiVersion: v1
kind: Service
metadata: {name: echo-local, namespace: svc}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  ipFamilyPolicy: RequireDualStack
  selector: {hairpin: "yes"}
  ports: [{port: 9090, targetPort: 9090, nodePort: 30090}]
status:
  loadBalancer: {ingress: [{ip: 203.0.113.11}]}
"#;

/// Stops a responder the test started (also when the test panics).
struct StopOnDrop(lab::process::DaemonRecord);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = lab::process::stop_daemon(&self.0);
    }
}

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

/// One TCP exchange from node netns `netns`'s host: Ok(the first line) or Err(why).
fn host_get(netns: &str, target: &str) -> Result<String, String> {
    let (host, port) = target.rsplit_once(':').expect("host:port");
    let script = format!("exec 3<>/dev/tcp/{host}/{port} && head -n1 <&3");
    let out = Command::new("ip")
        .args([
            "netns", "exec", netns, "timeout", "3", "bash", "-c", &script,
        ])
        .output()
        .expect("ip netns exec");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && !line.is_empty() {
        Ok(line)
    } else {
        Err(format!(
            "{}: {line}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Waits until `target` answers; returns the answer.
fn answer(z: &Zovn, target: &str) -> String {
    let t0 = Instant::now();
    loop {
        match external_get(z, target) {
            Ok(line) => return line,
            Err(e) => assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the external host never reached {target}: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until a rule of node netns `netns`'s table contains `needle`.
fn wait_rule(netns: &str, needle: &str) {
    wait_until(
        &format!("{netns}: a rule with {needle:?}"),
        Duration::from_secs(30),
        || {
            tests::egress::nft_table(netns)
                .lines()
                .any(|l| l.contains(needle))
        },
    );
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
    run(
        "external_clients_lab_external_clients_reach_node_ports_and_routed_service_addresses",
        lab::Gateway::Local,
    );
}

/// The same in `shared` gateway mode: the pods' replies to outside would go to their node's
/// gateway router; those of `externalTrafficPolicy: Local` endpoints are rerouted to the
/// management port, where the node's kernel DNATed the request.
#[test]
fn external_clients_in_shared_gateway_mode() {
    run(
        "external_clients_lab_external_clients_in_shared_gateway_mode",
        lab::Gateway::Shared,
    );
}

fn run(name: &str, gateway: lab::Gateway) {
    if !tests::require_real(
        name,
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
    let (mut lab, z, _down) = start_lab_with(&s, 2, &[], |c| {
        c.gateway = gateway;
        allow_example_external_ips(c);
    });
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

    // externalTrafficPolicy: Local, endpoints on both nodes: each node answers with its own
    // (once its agent has seen the endpoints: until then the Service has none for it, and
    // the cluster rule serves)
    for (n, own) in nodes.iter().zip(webs) {
        wait_rule(&n.netns, "dport 30081 dnat ip to 10.");
        let target = format!("{}:30081", n.encap_ip);
        reaches(&z, &target, &[own]);
        for _ in 0..6 {
            assert_eq!(
                external_get(&z, &target).as_deref(),
                Ok(own),
                "{target}: only the node's own endpoint answers"
            );
        }
    }

    // externalTrafficPolicy: Local, one endpoint on node 1: the pod sees the client
    let pods = z.pods();
    let web1 = pods.get("svc/web-1").expect("svc/web-1");
    let _echo = StopOnDrop(
        spawn_daemon(
            &z.exe,
            &ResponderDaemon {
                daemon_name: "echo responder in svc/web-1".into(),
                reply_name: "echo/web-1",
                echo_source: true,
                netns: &netns_of(web1),
                ports: &[PortSpec {
                    port: 9090,
                    proto: Proto::Tcp,
                }],
                pidfile: s.dir.path().join("echo.pid"),
                log_file: s.dir.path().join("echo.log"),
            },
        )
        .expect("echo responder in svc/web-1"),
    );
    let file = s.dir.path().join("echo-local.yaml");
    std::fs::write(&file, ECHO_LOCAL).expect("write the Service");
    z.ok(&["apply", "-f", file.to_str().expect("utf-8")]);
    let seen = |target: &str, client: &str| {
        let line = answer(&z, target);
        let (who, from) = parse_source_reply(&line)
            .unwrap_or_else(|| panic!("{target}: not an echo reply: {line}"));
        assert_eq!(who, "echo/web-1", "{target}: {line}");
        assert_eq!(
            from.ip().to_string(),
            client,
            "{target}: the pod must see the external host's own address: {line}"
        );
    };
    wait_rule(&nodes[0].netns, "dport 30090 dnat ip to 10.");
    seen(&format!("{}:30090", nodes[0].encap_ip), EXTERNAL_HOST);
    // IPv6 too (the dual-stack join gives the pods' replies their way back)
    wait_rule(&nodes[0].netns, "dport 30090 dnat ip6 to [fd00:10:20::");
    seen(
        &format!("{UNDERLAY_NET6}{}:30090", nodes[0].index),
        EXTERNAL_HOST_V6,
    );
    // node 2 has no endpoint: its agent drops what comes from outside
    wait_rule(&nodes[1].netns, "dport 30090 drop");
    let on_node2 = format!("{}:30090", nodes[1].encap_ip);
    let on_node2_v6 = format!("{UNDERLAY_NET6}{}:30090", nodes[1].index);
    for _ in 0..3 {
        for target in [&on_node2, &on_node2_v6] {
            assert!(
                external_get(&z, target).is_err(),
                "{target} answered: node 2 has no endpoint of echo-local"
            );
        }
    }
    // another node's host is outside the node too: node 2's host reaches node 1's NodePort
    // and the pod sees node 2's address; node 1's host gets nothing from node 2's
    let t0 = Instant::now();
    let line = loop {
        match host_get(&nodes[1].netns, &format!("{}:30090", nodes[0].encap_ip)) {
            Ok(line) => break line,
            Err(e) => assert!(
                t0.elapsed() < Duration::from_secs(30),
                "node 2's host never reached node 1's NodePort: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let from = parse_source_reply(&line).map(|(_, from)| from.ip().to_string());
    assert_eq!(from.as_deref(), Some(nodes[1].encap_ip.as_str()), "{line}");
    assert!(
        host_get(&nodes[0].netns, &on_node2).is_err(),
        "node 1's host reached {on_node2}: node 2 has no endpoint of echo-local"
    );
    // the ingress IP: answered with the client's address through node 1, not through node 2
    underlay_route(&underlay, "203.0.113.11/32", &nodes[0].encap_ip);
    seen("203.0.113.11:9090", EXTERNAL_HOST);
    underlay_route(&underlay, "203.0.113.11/32", &nodes[1].encap_ip);
    wait_until(
        "the ingress IP is dropped through node 2",
        Duration::from_secs(15),
        || external_get(&z, "203.0.113.11:9090").is_err(),
    );
    // externalTrafficPolicy: Cluster still answers on both nodes
    for n in &nodes {
        reaches(&z, &format!("{}:30080", n.encap_ip), &webs);
    }
}
