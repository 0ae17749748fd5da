//! A VLAN (underlay) Subnet carrying traffic: a 2-node lab, a Subnet with `vlanID: 100`,
//! a pod on each node, and a host on VLAN 100 outside every node
//! ([`lab::vlan_host`]: its own netns and bare ovs-vswitchd, a trunk veth on the
//! underlay bridge, an access port `tag=100` holding `10.88.0.250/24`, an address the
//! Subnet's IPAM does not hand out: `excludeIPs`).
//!
//! Checked:
//! - the pods reach each other, and each pod reaches the host, which sees the pod's own
//!   address (no NAT on the VLAN); the host reaches each pod (TCP);
//! - the traffic took the underlay, not the tunnel: neither node's Geneve ports send
//!   anything during the exchanges, node 1's datapath tags VLAN 100 (`push_vlan(vid=100)`
//!   towards the uplink, `pop_vlan` on the way back), and so does the host's;
//! - the pods' default gateway is the Subnet's gateway (`10.88.0.1`, the cluster router's
//!   port on the Subnet's switch), and the host on the VLAN reaches it too;
//! - a pod leaves the cluster through that gateway: the lab's external host sees node 1's
//!   address (`local` gateway mode, masqueraded by node 1's agent);
//! - dropping the host leaves nothing: its processes, its netns, its underlay port.
//!
//! OVS tags in userspace on both sides (this kernel has no 802.1Q module); the lab maps the
//! localnet ports' `physnet` to `br-phy` (`ovn-bridge-mappings`).

use std::process::Command;
use std::time::{Duration, Instant};

use lab::pods::record::{PortSpec, Proto};
use lab::pods::responder::parse_source_reply;
use lab::vlan_host::{SERVER_NAME, VlanHost, VlanHostConfig};
use tests::zovn::{Zovn, alive, start_agents, start_lab, wait_until};

/// The host on the VLAN (outside the Subnet's IPAM: `excludeIPs`).
const HOST_IP: &str = "10.88.0.250";

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

/// Packets of each node's Geneve ports sent so far.
fn tunnels_tx(nodes: &[lab::NodeState]) -> Vec<u64> {
    nodes.iter().map(|n| tunnel_tx(&n.db_remote)).collect()
}

/// `dpctl/dump-flows` of the ovs-vswitchd behind unixctl socket `ctl`.
fn datapath_flows(ctl: &std::path::Path) -> String {
    let out = Command::new("ovs-appctl")
        .arg("-t")
        .arg(ctl)
        .arg("dpctl/dump-flows")
        .output()
        .expect("ovs-appctl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// From the VLAN host to `target` (TCP): what answered.
fn from_host(host: &VlanHost, target: &str) -> Result<String, String> {
    tests::zovn::probe_netns(host.netns(), target, false, Duration::from_secs(2))
}

/// Pod `from` → the VLAN host: the source address the host saw.
fn to_host(z: &Zovn, from: &str) -> Result<std::net::IpAddr, String> {
    let reply = probe(z, from, &format!("{HOST_IP}:8080"))?;
    match parse_source_reply(&reply) {
        Some((name, src)) if name == SERVER_NAME => Ok(src.ip()),
        _ => Err(format!("not the VLAN host's reply: {reply:?}")),
    }
}

/// Retries `f` until it gives `Ok` (bounded): the path is being set up.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let t0 = Instant::now();
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if t0.elapsed() > Duration::from_secs(30) => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[test]
fn vlan_subnet_pods_talk_to_each_other_and_a_vlan_host_over_the_underlay_not_the_tunnel() {
    if !tests::require_real(
        "vlan_underlay_lab_vlan_subnet_pods_talk_to_each_other_and_a_vlan_host_over_the_underlay_not_the_tunnel",
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
    // dropped before the lab goes down (declared after `_down`)
    let host_dir = s.dir.path().join("vlan-host");
    let mut host = VlanHost::start(&VlanHostConfig {
        names: lab.names(),
        dir: &host_dir,
        vlan: 100,
        address: &format!("{HOST_IP}/24"),
    })
    .expect("the VLAN host");
    host.start_server(
        &z.exe,
        &[PortSpec {
            port: 8080,
            proto: Proto::Tcp,
        }],
    )
    .expect("the VLAN host's server");

    let p = &s.prefix;
    let f = s.dir.path().join("vlan.yaml");
    std::fs::write(
        &f,
        format!(
            "apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {{name: vl}}\n\
             spec: {{cidr: 10.88.0.0/24, vlanID: 100, default: true, excludeIPs: [{HOST_IP}]}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: v1, namespace: default}}\n\
             spec: {{nodeName: {p}-node1, containers: [{{name: c, ports: [{{containerPort: 8080}}]}}]}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: v2, namespace: default}}\n\
             spec: {{nodeName: {p}-node2, containers: [{{name: c, ports: [{{containerPort: 8080}}]}}]}}\n"
        ),
    )
    .expect("write");
    z.ok(&["apply", "-f", f.to_str().expect("utf-8"), "--wait"]);
    let pods = z.wait_ready(&["default/v1", "default/v2"], Duration::from_secs(60));
    let ip = |k: &str| tests::zovn::pod_ip(&pods[k]);
    let (v1_ip, v2_ip) = (ip("default/v1"), ip("default/v2"));
    let (to_v1, to_v2) = (format!("{v1_ip}:8080"), format!("{v2_ip}:8080"));

    // the paths come up: pod ↔ pod, pods → host, host → pods
    eventually("v1 → v2", || probe(&z, "default/v1", &to_v2));
    eventually("v1 → the VLAN host", || to_host(&z, "default/v1"));
    eventually("v2 → the VLAN host", || to_host(&z, "default/v2"));
    eventually("the VLAN host → v1", || from_host(&host, &to_v1));
    eventually("the VLAN host → v2", || from_host(&host, &to_v2));

    // now, with the paths set up: a few exchanges each way, and no node's tunnel sends
    let before = tunnels_tx(&nodes);
    for _ in 0..5 {
        assert_eq!(
            probe(&z, "default/v1", &to_v2).as_deref(),
            Ok("default/v2"),
            "v1 → {to_v2}"
        );
        for (pod, pod_ip) in [("default/v1", &v1_ip), ("default/v2", &v2_ip)] {
            let seen = to_host(&z, pod).unwrap_or_else(|e| panic!("{pod} → the VLAN host: {e}"));
            assert_eq!(
                seen.to_string(),
                *pod_ip,
                "the VLAN host saw {pod} as {seen}"
            );
        }
        assert_eq!(from_host(&host, &to_v1).as_deref(), Ok("default/v1"));
        assert_eq!(from_host(&host, &to_v2).as_deref(), Ok("default/v2"));
    }
    assert_eq!(
        tunnels_tx(&nodes),
        before,
        "the VLAN Subnet's traffic went through a tunnel (tx packets of node 1, node 2)"
    );
    // tagged in userspace on both sides
    let flows = datapath_flows(&nodes[0].dir.join("run/ovs-vswitchd.ctl"));
    assert!(
        flows.contains("push_vlan(vid=100"),
        "no flow tags VLAN 100 on node 1:\n{flows}"
    );
    assert!(
        flows.contains("vlan(vid=100") && flows.contains("pop_vlan"),
        "no tagged VLAN 100 traffic arrives on node 1:\n{flows}"
    );
    let host_flows = datapath_flows(&host.ctl().expect("the host's OVS runs"));
    assert!(
        host_flows.contains("push_vlan(vid=100") && host_flows.contains("pop_vlan"),
        "the VLAN host's OVS does not tag VLAN 100:\n{host_flows}"
    );

    // the pods' default gateway: the Subnet's gateway, the cluster router's port, which
    // answers on the VLAN too
    let route = z.ok(&[
        "exec",
        "default/v1",
        "--",
        "ip",
        "-4",
        "route",
        "show",
        "default",
    ]);
    assert!(
        route.contains("via 10.88.0.1 "),
        "v1's default route: {route}"
    );
    let ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            host.netns(),
            "ping",
            "-c1",
            "-W2",
            "10.88.0.1",
        ])
        .output()
        .expect("ping");
    assert!(
        ping.status.success(),
        "the VLAN host does not reach the gateway: {}",
        String::from_utf8_lossy(&ping.stdout)
    );

    // leaving the cluster: through the cluster router (the pods' gateway) and the node's
    // management port, masqueraded there: the external host sees node 1's address
    let reply = eventually("v1 → the external host", || {
        probe(&z, "default/v1", "198.51.100.10:8080")
    });
    let seen = lab::pods::responder::parse_source_reply(&reply).map(|(_, a)| a.ip().to_string());
    assert_eq!(seen.as_deref(), Some(nodes[0].encap_ip.as_str()), "{reply}");

    // teardown leaves nothing
    let pids = host.pids();
    assert_eq!(
        pids.len(),
        3,
        "server, ovs-vswitchd, ovsdb-server: {pids:?}"
    );
    let (ns, ul_port) = (
        host.netns().to_string(),
        lab.names().vlan_host_underlay_port(),
    );
    drop(host);
    for pid in pids {
        wait_until(&format!("pid {pid} gone"), Duration::from_secs(5), || {
            !alive(i64::from(pid))
        });
    }
    assert!(!lab::netns::exists(&ns), "netns {ns} left");
    // the kernel removes a deleted netns's devices (and their veth peers) asynchronously
    let ul = lab.names().underlay_netns();
    wait_until(
        &format!("{ul_port} gone from the underlay"),
        Duration::from_secs(5),
        || {
            !Command::new("ip")
                .args(["-n", &ul, "link", "show", &ul_port])
                .output()
                .expect("ip link")
                .status
                .success()
        },
    );
}
