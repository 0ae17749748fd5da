//! What the egress lab suites share (`tests/tests/lab_suite/egress_lab.rs`, `egress_shared_lab.rs`):
//! the manifest, the external host probes and the pods' wait.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::zovn::{DownOnDrop, Zovn, wait_until};

/// The binaries a 3-node kernel/AF_XDP/DPDK egress lab needs.
pub const BINS: &[&str] = &[
    "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk",
    "/usr/lib/openvswitch-switch/ovs-vswitchd",
    "ovsdb-server",
    "ovn-northd",
    "ovn-controller",
    "nft",
];

/// The lab's external host.
pub const EXTERNAL: &str = "198.51.100.10";
/// The lab's external host, IPv6 (as a `host:port` target's host part).
pub const EXTERNAL_V6: &str = "[2001:db8:5100::10]";

/// Subnets `egr` (10.77.0.0/16 and fd00:77::/64, the default, `natOutgoing`) and `routed`
/// (10.78.0.0/16 and fd00:78::/64, `natOutgoing: false`, namespace `routed`); pods
/// `default/nat<i>` and `routed/own<i>` on nodes 1–3 of the lab with prefix `p`.
pub fn manifest(p: &str) -> String {
    let mut s = "apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {name: egr}\n\
         spec: {cidr: \"10.77.0.0/16,fd00:77::/64\", default: true}\n---\n\
         apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {name: routed}\n\
         spec: {cidr: \"10.78.0.0/16,fd00:78::/64\", natOutgoing: false, namespaces: [routed]}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {name: routed}\n"
        .to_string();
    for i in 1..=3 {
        s += &format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: nat{i}, namespace: default}}\n\
             spec: {{nodeName: {p}-node{i}, containers: [{{name: c}}]}}\n"
        );
    }
    for i in 1..=3 {
        s += &format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: own{i}, namespace: routed}}\n\
             spec: {{nodeName: {p}-node{i}, containers: [{{name: c}}]}}\n"
        );
    }
    s
}

/// The 3-node egress lab (kernel, AF_XDP, DPDK) of `s` in gateway mode `gateway`, with
/// [`manifest`] applied and its 6 pods settled: (the CLI, its teardown guard, the lab's
/// prefix, the pods as [`wait_pods`] lists them).
pub fn up(
    s: &crate::Scratch,
    gateway: &str,
) -> (Zovn, DownOnDrop, String, Vec<(String, String, String)>) {
    let p = s.prefix.clone();
    let (z, down) = crate::zovn::cli_up(
        s,
        &[
            "--nodes",
            "3",
            "--datapath",
            "kernel,afxdp,dpdk",
            "--gateway-mode",
            gateway,
        ],
    );
    let f = s.dir.path().join("egress.yaml");
    std::fs::write(&f, manifest(&p)).expect("write");
    z.ok(&["apply", "-f", f.to_str().expect("utf-8"), "--wait"]);
    let pods = wait_pods(&z, 6);
    (z, down, p, pods)
}

/// The pod's probe to the external host: Ok(what the host answered) or Err(why not).
pub fn probe(z: &Zovn, pod: &str, port: &str, udp: bool) -> Result<String, String> {
    z.probe(pod, &format!("{EXTERNAL}:{port}"), udp)
}

/// Waits until `pod` reaches the external host on `port`; what the host answered.
pub fn reach(z: &Zovn, pod: &str, port: &str, udp: bool) -> String {
    reach_host(z, pod, EXTERNAL, port, udp)
}

/// Waits until `pod` reaches `host` (an IPv4 address or `[IPv6]`) on `port`; what the
/// host answered.
pub fn reach_host(z: &Zovn, pod: &str, host: &str, port: &str, udp: bool) -> String {
    let mut last = Err(String::new());
    wait_until(
        &format!("{pod} reaches {host}:{port}"),
        Duration::from_secs(30),
        || {
            last = z.probe(pod, &format!("{host}:{port}"), udp);
            last.is_ok()
        },
    );
    last.unwrap_or_default()
}

/// Pod `nat<i>` reaches the external host over IPv6, TCP and UDP, and the host saw node
/// `i`'s IPv6 underlay address (`fd00:172:16::<i>`, masqueraded by the node's agent).
pub fn check_ipv6_egress(z: &Zovn, i: usize) {
    let pod = format!("default/nat{i}");
    for (port, udp) in [("8080", false), ("5353", true)] {
        let reply = reach_host(z, &pod, EXTERNAL_V6, port, udp);
        eprintln!("{pod} → {EXTERNAL_V6}:{port}: {reply}");
        assert_eq!(seen(&reply), format!("fd00:172:16::{i}"), "{pod} → {port}");
    }
}

/// The source address the external host saw (`external 172.16.0.1:41234` → `172.16.0.1`).
pub fn seen(reply: &str) -> String {
    lab::pods::responder::parse_source_reply(reply)
        .map(|(_, addr)| addr.ip().to_string())
        .unwrap_or_else(|| panic!("not an external host reply: {reply:?}"))
}

/// Every pod Ready, with an address, and done moving to AF_XDP (a pod's switch drops
/// its packets meanwhile); (namespace/name, IP, datapath) of each.
pub fn wait_pods(z: &Zovn, n: usize) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    wait_until(
        "every pod Ready and settled",
        Duration::from_secs(120),
        || {
            let items = z.items("pods");
            out = items
                .iter()
                .filter_map(|p: &Value| {
                    let ready = api::pod_json::is_ready(p);
                    let dp = api::pod_json::lab_datapath(p);
                    let ip = api::pod_json::pod_ip(p)?;
                    (ready && !dp.is_empty() && !dp.contains('→'))
                        .then(|| (api::pod_json::key(p), ip.to_string(), dp.to_string()))
                })
                .collect();
            out.len() == n
        },
    );
    out.sort();
    out
}

/// The address of pod `key` in `wait_pods`' list.
pub fn ip_of(pods: &[(String, String, String)], key: &str) -> String {
    pods.iter()
        .find(|(k, _, _)| k == key)
        .map(|(_, ip, _)| ip.clone())
        .unwrap_or_else(|| panic!("{key} not listed: {pods:?}"))
}

/// `ip -n <underlay netns> route add <cidr> via <via>`: the operator routing a Subnet.
pub fn underlay_route(prefix: &str, cidr: &str, via: &str) {
    let out = Command::new("ip")
        .args([
            "-n",
            &format!("{prefix}ul"),
            "route",
            "add",
            cidr,
            "via",
            via,
        ])
        .output()
        .expect("ip route");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `natOutgoing: false` (pods `routed/own1..3`, one per datapath): no answer from the
/// external host, IPv4 or IPv6, while the underlay has no route back to the Subnet
/// (nothing is NATed behind the operator's back); once it routes the Subnet's two CIDRs
/// to node 1 (for the other nodes' pods the return path crosses nodes), TCP and UDP
/// answer and the host saw each pod's own address of that family.
pub fn check_routed_subnet(z: &Zovn, prefix: &str, pods: &[(String, String, String)]) {
    for i in 1..=3 {
        let pod = format!("routed/own{i}");
        assert!(
            probe(z, &pod, "8080", false).is_err(),
            "{pod} answered without a route back"
        );
        assert!(
            z.probe(&pod, &format!("{EXTERNAL_V6}:8080"), false)
                .is_err(),
            "{pod} answered over IPv6 without a route back"
        );
    }
    underlay_route(prefix, "10.78.0.0/16", "172.16.0.1");
    underlay_route(prefix, "fd00:78::/64", "fd00:172:16::1");
    let all = z.pods();
    for i in 1..=3 {
        let pod = format!("routed/own{i}");
        let ip = ip_of(pods, &pod);
        let ip6 = all[&pod]["status"]["podIPs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["ip"].as_str())
            .find(|a| a.contains(':'))
            .unwrap_or_else(|| panic!("{pod} has no IPv6 address"))
            .to_string();
        for (port, udp) in [("8080", false), ("5353", true)] {
            let reply = reach(z, &pod, port, udp);
            eprintln!("{pod} ({ip}) → {EXTERNAL}:{port}: {reply}");
            assert_eq!(seen(&reply), ip, "{pod} → {port}: {reply}");
            let reply = reach_host(z, &pod, EXTERNAL_V6, port, udp);
            eprintln!("{pod} ({ip6}) → {EXTERNAL_V6}:{port}: {reply}");
            assert_eq!(seen(&reply), ip6, "{pod} → [v6]:{port}: {reply}");
        }
    }
}

/// The agent's `table inet zstack-ovn` in node netns `netns`.
pub fn nft_table(netns: &str) -> String {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            netns,
            "nft",
            "list",
            "table",
            "inet",
            "zstack-ovn",
        ])
        .output()
        .expect("nft");
    String::from_utf8_lossy(&out.stdout).to_string()
}
