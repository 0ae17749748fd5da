//! Pods reaching the lab's external host (`198.51.100.10`, outside every node) through the
//! `local` gateway mode, on real traffic, from a kernel, an AF_XDP and a DPDK node
//! (`zovn lab up --nodes 3 --datapath kernel,afxdp,dpdk`, the real controller, agents and
//! CNI shim):
//! - a Subnet with `natOutgoing` (the default): TCP 8080 and UDP 5353 answer, and the
//!   external host saw the pod's NODE address (172.16.0.<i>);
//! - a Subnet with `natOutgoing: false` on the AF_XDP and the DPDK node, once the
//!   underlay routes it to a node: the external host saw the POD's address;
//! - without that route its replies have nowhere to go: unreachable (nothing is NATed
//!   behind the operator's back);
//! - the agents' host NAT tables hold exactly the `natOutgoing` Subnets;
//! - a NetworkPolicy's egress `ipBlock` applies to traffic leaving the cluster: allowed
//!   to the external host's TCP 8080 only, the pod still reaches it there and no longer on
//!   UDP 5353; the policy deleted, UDP answers again.
//!
//! IPv6 egress is not built yet (the join network is IPv4 only): docs/egress.md.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tests::zovn::{DownOnDrop, Zovn, wait_until};

const BINS: &[&str] = &[
    "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk",
    "/usr/lib/openvswitch-switch/ovs-vswitchd",
    "ovsdb-server",
    "ovn-northd",
    "ovn-controller",
    "nft",
];

const EXTERNAL: &str = "198.51.100.10";

fn manifest(p: &str) -> String {
    let mut s = "apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {name: egr}\n\
         spec: {cidr: 10.77.0.0/16, default: true}\n---\n\
         apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {name: routed}\n\
         spec: {cidr: 10.78.0.0/16, natOutgoing: false, namespaces: [routed]}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {name: routed}\n"
        .to_string();
    for i in 1..=3 {
        s += &format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: nat{i}, namespace: default}}\n\
             spec: {{nodeName: {p}-node{i}, containers: [{{name: c}}]}}\n"
        );
    }
    for i in 2..=3 {
        s += &format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: own{i}, namespace: routed}}\n\
             spec: {{nodeName: {p}-node{i}, containers: [{{name: c}}]}}\n"
        );
    }
    s
}

/// The pod's probe to the external host: Ok(what the host answered) or Err(why not).
fn probe(z: &Zovn, pod: &str, port: &str, udp: bool) -> Result<String, String> {
    z.probe(pod, &format!("{EXTERNAL}:{port}"), udp)
}

/// Waits until `pod` reaches the external host on `port`; what the host answered.
fn reach(z: &Zovn, pod: &str, port: &str, udp: bool) -> String {
    let mut last = Err(String::new());
    wait_until(
        &format!("{pod} reaches {EXTERNAL}:{port}"),
        Duration::from_secs(30),
        || {
            last = probe(z, pod, port, udp);
            last.is_ok()
        },
    );
    last.unwrap_or_default()
}

/// The source address the external host saw (`external 172.16.0.1:41234` → `172.16.0.1`).
fn seen(reply: &str) -> String {
    lab::pods::responder::parse_source_reply(reply)
        .map(|(_, addr)| addr.ip().to_string())
        .unwrap_or_else(|| panic!("not an external host reply: {reply:?}"))
}

/// Every pod Ready, with an address, and done moving to AF_XDP (a pod's switch drops
/// its packets meanwhile); (namespace/name, IP, datapath) of each.
fn wait_pods(z: &Zovn, n: usize) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    wait_until(
        "every pod Ready and settled",
        Duration::from_secs(120),
        || {
            let items = z.items("pods");
            out = items
                .iter()
                .filter_map(|p: &Value| {
                    let ready = p["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    });
                    let dp = p["metadata"]["annotations"]["lab.zstack.io/datapath"]
                        .as_str()
                        .unwrap_or("");
                    let ip = p["status"]["podIP"].as_str()?;
                    (ready && !dp.is_empty() && !dp.contains('→')).then(|| {
                        (
                            format!(
                                "{}/{}",
                                p["metadata"]["namespace"].as_str().unwrap_or(""),
                                p["metadata"]["name"].as_str().unwrap_or("")
                            ),
                            ip.to_string(),
                            dp.to_string(),
                        )
                    })
                })
                .collect();
            out.len() == n
        },
    );
    out.sort();
    out
}

fn nft_table(netns: &str) -> String {
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

#[test]
fn pods_reach_the_external_host_from_every_datapath() {
    if !tests::require_real(
        "egress_lab_pods_reach_the_external_host_from_every_datapath",
        BINS,
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("egr");
    let dir = s.dir.path().join("lab");
    let z = Zovn::new(&dir);
    let _down = DownOnDrop(dir.clone());
    let p = s.prefix.clone();
    z.ok(&[
        "up",
        "--prefix",
        &p,
        "--nodes",
        "3",
        "--datapath",
        "kernel,afxdp,dpdk",
    ]);
    let f = s.dir.path().join("egress.yaml");
    std::fs::write(&f, manifest(&p)).expect("write");
    z.ok(&["apply", "-f", f.to_str().expect("utf-8"), "--wait"]);
    let pods = wait_pods(&z, 5);
    let datapaths: Vec<&str> = pods.iter().map(|(_, _, d)| d.as_str()).collect();
    assert_eq!(
        datapaths,
        [
            "kernel/veth",
            "afxdp/veth",
            "afxdp/veth",
            "afxdp/veth",
            "afxdp/veth"
        ],
        "{pods:?}"
    );

    // natOutgoing (default): the external host sees the node's address, TCP and UDP
    for i in 1..=3 {
        let pod = format!("default/nat{i}");
        let node = format!("172.16.0.{i}");
        for (port, udp) in [("8080", false), ("5353", true)] {
            let reply = reach(&z, &pod, port, udp);
            eprintln!("{pod} → {EXTERNAL}:{port}: {reply}");
            assert_eq!(seen(&reply), node, "{pod} → {port}: {reply}");
        }
    }

    // natOutgoing: false, no route back to the Subnet in the underlay: no answer, and
    // nothing masqueraded it behind the operator's back
    for i in 2..=3 {
        assert!(
            probe(&z, &format!("routed/own{i}"), "8080", false).is_err(),
            "routed/own{i} answered without a route back"
        );
    }
    // the operator routes the Subnet to a node (node 1: the return path crosses nodes)
    let underlay = format!("{p}ul");
    let out = Command::new("ip")
        .args([
            "-n",
            &underlay,
            "route",
            "add",
            "10.78.0.0/16",
            "via",
            "172.16.0.1",
        ])
        .output()
        .expect("ip route");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 2..=3 {
        let pod = format!("routed/own{i}");
        let ip = pods
            .iter()
            .find(|(k, _, _)| *k == pod)
            .map(|(_, ip, _)| ip.clone())
            .expect("pod listed");
        for (port, udp) in [("8080", false), ("5353", true)] {
            let reply = reach(&z, &pod, port, udp);
            eprintln!("{pod} ({ip}) → {EXTERNAL}:{port}: {reply}");
            assert_eq!(seen(&reply), ip, "{pod} → {port}");
        }
    }

    // NetworkPolicy egress ipBlock on traffic leaving the cluster (the kernel node's pod)
    let np = s.dir.path().join("policy.yaml");
    std::fs::write(
        &np,
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
             metadata: {{name: out-8080, namespace: default}}\n\
             spec: {{podSelector: {{}}, policyTypes: [Egress], egress: [{{to: \
             [{{ipBlock: {{cidr: {EXTERNAL}/32}}}}], ports: [{{protocol: TCP, port: 8080}}]}}]}}\n"
        ),
    )
    .expect("write");
    z.ok(&["apply", "-f", np.to_str().expect("utf-8"), "--wait"]);
    wait_until(
        "the policy drops UDP 5353 to the external host",
        Duration::from_secs(30),
        || probe(&z, "default/nat1", "5353", true).is_err(),
    );
    let reply = probe(&z, "default/nat1", "8080", false).expect("TCP 8080 stays allowed");
    assert_eq!(seen(&reply), "172.16.0.1");
    z.ok(&["delete", "-f", np.to_str().expect("utf-8"), "--wait"]);
    wait_until(
        "UDP 5353 answers again without the policy",
        Duration::from_secs(30),
        || probe(&z, "default/nat1", "5353", true).is_ok(),
    );

    // each agent masquerades exactly the natOutgoing Subnets (the default Subnet of the
    // lab's cluster CIDR is one of them), never the routed one
    for i in 1..=3 {
        let t = nft_table(&format!("{p}n{i}"));
        assert!(
            t.contains("10.77.0.0/16") && t.contains("oifname != \"ovn-k8s-mp0\" masquerade"),
            "node {i}: {t}"
        );
        assert!(!t.contains("10.78.0.0/16"), "node {i}: {t}");
    }
}
