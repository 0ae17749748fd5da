//! Pods reaching the lab's external host through the `shared` gateway mode, on real
//! traffic: a 3-node lab (one kernel, one AF_XDP and one DPDK node,
//! `zovn lab up --gateway-mode shared`), each node with its gateway router `GR_<node>`
//! sharing its br-phy address, the real controller, agents and CNI shim.
//!
//! Checked:
//! - every node got its gateway router, external switch and localnet port, all ours;
//! - the AF_XDP and DPDK nodes' uplinks are AF_XDP ports, the kernel node's a kernel port;
//! - `natOutgoing` pods on each node: TCP 8080 and UDP 5353, IPv4 and IPv6, answer and the
//!   external host saw the node's address of that family, and the traffic left through
//!   the gateway router (its IPv6 side too: the br-phy rule of each family for the
//!   router's patch port counted it);
//! - `natOutgoing: false` (AF_XDP and DPDK nodes): no answer until the underlay routes the
//!   Subnet to a node, then the host saw the pod's address;
//! - a gateway interface that does not exist (node 3's agent restarted with
//!   `--gateway-interface nosuch0`): the Node's report names it, a `GatewayConfigError`
//!   event (agent) and a `GatewayRouterMissing` event (controller) say what happens
//!   instead, node 3's gateway router and switch are gone
//!   (nothing half-built), and its pod still leaves through the management port
//!   (masqueraded by the agent: the host still sees node 3's address); the right interface
//!   brings the router back;
//! - node 2 deleted: its gateway router, switch and join port go, nodes 1 and 3 keep
//!   reaching the external host.

use std::process::Command;
use std::time::Duration;

use tests::egress::{BINS, reach, seen};
use tests::nbctl::nbctl;
use tests::zovn::wait_until;

/// Packets the br-phy rule taking the gateway router's traffic of one family to the
/// uplink counted on node `i`.
fn router_packets(dir: &std::path::Path, i: usize, v6: bool) -> u64 {
    let mgmt = format!("unix:{}/node{i}/run/br-phy.mgmt", dir.display());
    let out = Command::new("ovs-ofctl")
        .args(["dump-flows", &mgmt, "cookie=0x7a6f766e6777/-1"])
        .output()
        .expect("ovs-ofctl");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("ct(commit") && l.contains(",ipv6,") == v6)
        .filter_map(|l| {
            l.split([',', ' '])
                .find_map(|kv| kv.trim().strip_prefix("n_packets="))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

fn gateway_rows(nb: &str, node: &str) -> (bool, bool, bool) {
    let routers = nbctl(nb, &["--bare", "--columns=name", "list", "Logical_Router"]);
    let switches = nbctl(nb, &["--bare", "--columns=name", "list", "Logical_Switch"]);
    let ports = nbctl(
        nb,
        &["--bare", "--columns=name", "list", "Logical_Switch_Port"],
    );
    let has = |text: &str, name: String| text.lines().any(|l| l.trim() == name);
    (
        has(&routers, format!("GR_{node}")),
        has(&switches, format!("ext_{node}")),
        has(&ports, format!("jtor-GR_{node}")),
    )
}

#[test]
fn pods_leave_through_their_nodes_gateway_router() {
    if !tests::require_real(
        "egress_shared_lab_pods_leave_through_their_nodes_gateway_router",
        BINS,
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("egs");
    let (z, _down, p, pods) = tests::egress::up(&s, "shared");
    let dir = s.dir.path().join("lab");
    let nb = lab::Lab::open(&dir).expect("open lab").nb_remote();
    for i in 1..=3 {
        let node = format!("{p}-node{i}");
        wait_until(
            &format!("{node}'s gateway router"),
            Duration::from_secs(30),
            || gateway_rows(&nb, &node) == (true, true, true),
        );
        let owner = nbctl(
            &nb,
            &[
                "get",
                "Logical_Router",
                &format!("GR_{node}"),
                "external_ids:\"zstack.io/owner\"",
            ],
        );
        assert_eq!(owner.trim().trim_matches('"'), "zstack-ovn");
        wait_until(
            &format!("{node}'s gateway router has its IPv6 side"),
            Duration::from_secs(30),
            || {
                nbctl(
                    &nb,
                    &[
                        "get",
                        "Logical_Router_Port",
                        &format!("rtoe-GR_{node}"),
                        "networks",
                    ],
                )
                .contains(&format!("fd00:172:16::{i}/64"))
            },
        );
    }
    // the uplinks the gateway routers leave through: AF_XDP on the AF_XDP and DPDK nodes
    // (polled by their PMD), a kernel port on the kernel node
    for (i, want) in [(1, "system"), (2, "afxdp"), (3, "afxdp")] {
        let node = format!("{p}-node{i}");
        wait_until(
            &format!("{node}'s uplink is {want}"),
            Duration::from_secs(30),
            || {
                z.node_annotation_json(&node, "network.zstack.io/datapath-status")
                    .is_some_and(|s| s["uplink"]["type"] == want)
            },
        );
    }

    // natOutgoing: the node's address, through the gateway router
    for i in 1..=3 {
        let (before, before6) = (
            router_packets(&dir, i, false),
            router_packets(&dir, i, true),
        );
        let pod = format!("default/nat{i}");
        // IPv4 and IPv6: the router has an IPv6 side too (the lab's agents report br-phy's
        // IPv6 address and next hop, the join network is dual-stack) and SNATs to the
        // node's address of each family. Until ovn-controller has the flows of the
        // router's latest rows a probe may still take the management port (masqueraded
        // to the same address): probe until the router's rules count the traffic, each
        // probe checking the address the host saw
        let t0 = std::time::Instant::now();
        let (mut v4, mut v6) = (0, 0);
        while t0.elapsed() < Duration::from_secs(15) {
            for (port, udp) in [("8080", false), ("5353", true)] {
                let reply = reach(&z, &pod, port, udp);
                eprintln!("{pod} → {port}: {reply}");
                assert_eq!(seen(&reply), format!("172.16.0.{i}"), "{pod} → {port}");
            }
            tests::egress::check_ipv6_egress(&z, i);
            // the datapath's counters reach the rules within a revalidation round
            std::thread::sleep(Duration::from_millis(500));
            (v4, v6) = (
                router_packets(&dir, i, false),
                router_packets(&dir, i, true),
            );
            if v4 >= before + 4 && v6 >= before6 + 2 {
                break;
            }
        }
        assert!(
            v4 >= before + 4 && v6 >= before6 + 2,
            "node {i}'s gateway router did not carry the pod's traffic: IPv4 rule {before} → {v4}, \
             IPv6 rule {before6} → {v6}\n{}",
            tests::sh(&[
                "ovs-ofctl",
                "dump-flows",
                &format!("unix:{}/node{i}/run/br-phy.mgmt", dir.display()),
            ])
        );
    }

    // natOutgoing: false: the pod's own address, once the underlay routes the Subnet
    tests::egress::check_routed_subnet(&z, &p, &pods);

    // a gateway interface that does not exist on node 3
    let node3 = format!("{p}-node3");
    let agent = tests::workspace_bin("zstack-ovnkube-node");
    let shim = tests::workspace_bin("zstack-ovn-cni");
    let restart = |iface: &'static str| {
        let mut lab = lab::Lab::open(&dir).expect("open lab");
        lab.restart_agent_with(3, &agent, Some(&shim), |args| {
            if let Some(i) = args.iter().position(|a| a == "--gateway-interface") {
                args[i + 1] = iface.into();
            }
        })
        .expect("restart node 3's agent");
    };
    restart("nosuch0");
    wait_until(
        "node 3's report names the missing interface",
        Duration::from_secs(30),
        || {
            z.node_annotation_json(&node3, api::keys::NODE_GATEWAY)
                .and_then(|g| g["error"].as_str().map(String::from))
                .is_some_and(|e| e.contains("nosuch0") && e.contains("does not exist"))
        },
    );
    wait_until(
        "node 3's gateway router is gone",
        Duration::from_secs(30),
        || gateway_rows(&nb, &node3) == (false, false, false),
    );
    wait_until(
        "a GatewayConfigError event on node 3 saying what happens instead",
        Duration::from_secs(30),
        || {
            z.items("events").iter().any(|e| {
                e["reason"] == "GatewayConfigError"
                    && e["involvedObject"]["name"] == node3.as_str()
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("nosuch0") && m.contains("management port"))
            })
        },
    );
    // the controller says too why it built no router for node 3
    wait_until(
        "a GatewayRouterMissing event on node 3 from the controller",
        Duration::from_secs(30),
        || {
            tests::node_status::has_event(
                &tests::node_status::events(&z),
                &node3,
                "GatewayRouterMissing",
                "nosuch0",
            )
        },
    );
    let reply = reach(&z, "default/nat3", "8080", false);
    assert_eq!(
        seen(&reply),
        "172.16.0.3",
        "through the management port: {reply}"
    );
    restart("br-phy");
    wait_until(
        "node 3's gateway router is back",
        Duration::from_secs(30),
        || gateway_rows(&nb, &node3) == (true, true, true),
    );
    let reply = reach(&z, "default/nat3", "5353", true);
    assert_eq!(seen(&reply), "172.16.0.3");

    // node 2 deleted: its gateway goes, the others keep working
    let node2 = format!("{p}-node2");
    let nf = s.dir.path().join("node2.yaml");
    std::fs::write(
        &nf,
        format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {node2}}}\n"),
    )
    .expect("write");
    z.ok(&["delete", "-f", nf.to_str().expect("utf-8"), "--wait"]);
    wait_until(
        "node 2's gateway router, switch and join port are gone",
        Duration::from_secs(30),
        || gateway_rows(&nb, &node2) == (false, false, false),
    );
    for i in [1, 3] {
        let reply = reach(&z, &format!("default/nat{i}"), "8080", false);
        assert_eq!(seen(&reply), format!("172.16.0.{i}"));
    }
}
