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

use std::time::Duration;

use tests::egress::{BINS, EXTERNAL, nft_table, probe, reach, seen};
use tests::zovn::wait_until;

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
    let (z, _down, p, pods) = tests::egress::up(&s, "local");
    let datapaths: Vec<&str> = pods.iter().map(|(_, _, d)| d.as_str()).collect();
    assert_eq!(
        datapaths,
        [
            "kernel/veth",
            "afxdp/veth",
            "afxdp/veth",
            "kernel/veth",
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
        tests::egress::check_ipv6_egress(&z, i);
    }

    // natOutgoing: false: the pod's own address, once the underlay routes the Subnet
    tests::egress::check_routed_subnet(&z, &p, &pods);

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
