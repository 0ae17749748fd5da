//! A VLAN (underlay) Subnet carrying traffic: a 2-node lab, a Subnet with `vlanID: 100`,
//! a pod on each node.
//!
//! Checked: the pods reach each other (TCP), and the traffic took the underlay, not the
//! tunnel: node 1's datapath tags it (`push_vlan(vid=100)` towards the uplink, and
//! `pop_vlan` on the way back) while its Geneve port sends nothing during the exchange.
//! OVS tags in userspace on both sides (this kernel has no 802.1Q module); the lab maps the
//! localnet ports' `physnet` to `br-phy` (`ovn-bridge-mappings`).
//!
//! Not yet (issue 18): a host on the VLAN outside the nodes.

use std::process::Command;
use std::time::{Duration, Instant};

use tests::zovn::{Zovn, start_agents, start_lab};

fn vsctl(db: &str, args: &[&str]) -> String {
    let out = Command::new("ovs-vsctl")
        .arg(format!("--db={db}"))
        .args(args)
        .output()
        .expect("ovs-vsctl");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Packets node 1's Geneve ports sent so far.
fn tunnel_tx(db: &str) -> u64 {
    vsctl(
        db,
        &[
            "--bare",
            "--columns=statistics",
            "find",
            "Interface",
            "type=geneve",
        ],
    )
    .split([',', ' ', '{', '}'])
    .filter_map(|kv| kv.strip_prefix("tx_packets="))
    .filter_map(|n| n.parse::<u64>().ok())
    .sum()
}

fn probe(z: &Zovn, from: &str, target: &str) -> Result<String, String> {
    z.probe(from, target, false)
}

#[test]
fn vlan_subnet_pods_talk_over_the_underlay_not_the_tunnel() {
    if !tests::require_real(
        "vlan_underlay_lab_vlan_subnet_pods_talk_over_the_underlay_not_the_tunnel",
        &[
            "ovs-vswitchd",
            "ovsdb-server",
            "ovn-northd",
            "ovn-controller",
            "ovs-appctl",
        ],
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("vln");
    let (mut lab, z, _down) = start_lab(&s, 2, &["kernel"]);
    let nodes = lab.nodes().to_vec();
    start_agents(&mut lab);
    let p = &s.prefix;
    let f = s.dir.path().join("vlan.yaml");
    std::fs::write(
        &f,
        format!(
            "apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {{name: vl}}\n\
             spec: {{cidr: 10.88.0.0/24, vlanID: 100, default: true}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: v1, namespace: default}}\n\
             spec: {{nodeName: {p}-node1, containers: [{{name: c, ports: [{{containerPort: 8080}}]}}]}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: v2, namespace: default}}\n\
             spec: {{nodeName: {p}-node2, containers: [{{name: c, ports: [{{containerPort: 8080}}]}}]}}\n"
        ),
    )
    .expect("write");
    z.ok(&["apply", "-f", f.to_str().expect("utf-8"), "--wait"]);
    let v2_ip = {
        let t0 = Instant::now();
        loop {
            let ip = z
                .items("pods")
                .into_iter()
                .find(|p| {
                    p["metadata"]["name"] == "v2"
                        && p["status"]["conditions"].as_array().is_some_and(|c| {
                            c.iter()
                                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                        })
                })
                .and_then(|p| p["status"]["podIP"].as_str().map(str::to_string));
            if let Some(ip) = ip {
                break ip;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "v2 never Ready");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let target = format!("{v2_ip}:8080");
    let t0 = Instant::now();
    while probe(&z, "default/v1", &target).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "v1 never reached {target}: {:?}",
            probe(&z, "default/v1", &target)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // now, with the path set up: a few exchanges, and node 1's tunnel sends nothing
    let db1 = &nodes[0].db_remote;
    let before = tunnel_tx(db1);
    for _ in 0..5 {
        assert_eq!(
            probe(&z, "default/v1", &target).as_deref(),
            Ok("default/v2"),
            "v1 → {target}"
        );
    }
    assert_eq!(
        tunnel_tx(db1),
        before,
        "the VLAN Subnet's traffic went through the tunnel"
    );
    let ctl = nodes[0].dir.join("run/ovs-vswitchd.ctl");
    let out = Command::new("ovs-appctl")
        .arg("-t")
        .arg(&ctl)
        .arg("dpctl/dump-flows")
        .output()
        .expect("ovs-appctl");
    let flows = String::from_utf8_lossy(&out.stdout);
    assert!(
        flows.contains("push_vlan(vid=100"),
        "no flow tags VLAN 100 on node 1:\n{flows}"
    );
    assert!(
        flows.contains("vlan(vid=100") && flows.contains("pop_vlan"),
        "no tagged VLAN 100 traffic arrives on node 1:\n{flows}"
    );
}
