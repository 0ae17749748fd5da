//! VXLAN, zstack-ovn-kubernetes' default tunnel, on real traffic (issue #36): a 3-node lab
//! (`--encap vxlan`; kernel, AF_XDP and DPDK nodes), the real controller, agents and CNI
//! shim, and the checks the Geneve suites make across nodes:
//! - every node's tunnel ports are `vxlan` (none `geneve`), one per peer;
//! - pod ↔ pod across every pair of nodes, TCP and UDP, IPv4 and IPv6;
//! - a ClusterIP Service backed by a pod on the DPDK node, from the other two nodes;
//! - NetworkPolicy: the Service's pod isolated except from one peer, then open again;
//! - egress to the lab's external host from every node (SNATed to the node's address).
//!
//! What OVN cannot express on VXLAN (its 24-bit VNI carries the datapath and the egress
//! port, not the ingress port: at most 4,096 logical switches and routers and 2,048 ports
//! per switch; no `inport` match in the egress pipeline) is stated in docs/datapath.md; the
//! product's ACLs match addresses and port groups, so nothing here depends on it.

use std::time::Duration;

use lab::config::Encap;
use serde_json::Value;
use std::time::Instant;
use tests::egress::{BINS, EXTERNAL, reach, seen};
use tests::zovn::{start_agents, start_lab_with, wait_until};

fn manifest(p: &str) -> String {
    let mut s = String::from(
        "apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {name: vx}\n\
         spec: {cidr: \"10.88.0.0/16,fd00:88::/64\", default: true}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {name: web3, namespace: default}\n\
         spec: {selector: {app: web3}, ports: [{port: 8080, targetPort: 80, protocol: TCP}]}\n",
    );
    for i in 1..=3 {
        s += &format!(
            "---\napiVersion: v1\nkind: Pod\n\
             metadata: {{name: web{i}, namespace: default, labels: {{app: web{i}}}}}\n\
             spec: {{nodeName: {p}-node{i}, containers: [{{name: c, ports: \
             [{{containerPort: 80}}, {{containerPort: 53, protocol: UDP}}]}}]}}\n"
        );
    }
    s
}

const POLICY: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web3-from-web1, namespace: default}
spec:
  podSelector: {matchLabels: {app: web3}}
  policyTypes: [Ingress]
  ingress: [{from: [{podSelector: {matchLabels: {app: web1}}}]}]
"#;

/// The pod's addresses (`status.podIPs`), IPv4 first.
fn ips(pod: &Value) -> (String, String) {
    let all: Vec<String> = pod["status"]["podIPs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["ip"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let v4 = all.iter().find(|a| !a.contains(':')).cloned();
    let v6 = all.iter().find(|a| a.contains(':')).cloned();
    (
        v4.unwrap_or_else(|| panic!("no IPv4: {pod:#}")),
        v6.unwrap_or_else(|| panic!("no IPv6: {pod:#}")),
    )
}

#[test]
fn vxlan_carries_pods_services_policies_and_egress_on_every_datapath() {
    const T: &str = "vxlan_lab::vxlan_carries_pods_services_policies_and_egress_on_every_datapath";
    if !tests::require_real(T, BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("vxl");
    let (mut lab, z, _down) = start_lab_with(&s, 3, &["kernel", "afxdp", "dpdk"], |c| {
        c.encap = Encap::Vxlan;
    });
    start_agents(&mut lab);

    // the tunnels are VXLAN, one per peer
    for i in 1..=3 {
        let db = lab.node(i).expect("node").db_remote.clone();
        wait_until(
            &format!("node{i}'s two VXLAN tunnel ports"),
            Duration::from_secs(60),
            || lab::node::tunnel_ports(&db, Encap::Vxlan).is_ok_and(|p| p.len() == 2),
        );
        let geneve = lab::node::tunnel_ports(&db, Encap::Geneve).expect("ports");
        assert!(geneve.is_empty(), "node{i} has Geneve ports: {geneve:?}");
        eprintln!(
            "node{i} tunnels: {:?}",
            lab::node::tunnel_ports(&db, Encap::Vxlan).expect("ports")
        );
    }
    let t0 = Instant::now();

    let f = s.dir.path().join("vxlan.yaml");
    std::fs::write(&f, manifest(&s.prefix)).expect("write");
    z.ok(&["apply", "-f", f.to_str().expect("utf-8")]);
    let keys = ["default/web1", "default/web2", "default/web3"];
    let pods = z.wait_ready(&keys, Duration::from_secs(120));
    let addr: Vec<(String, String)> = keys.iter().map(|k| ips(&pods[*k])).collect();
    // the AF_XDP and DPDK nodes' pods on AF_XDP ports (fast start moves them after Ready)
    wait_until("web2 and web3 on AF_XDP", Duration::from_secs(60), || {
        let pods = z.pods();
        ["default/web2", "default/web3"]
            .iter()
            .all(|k| pods[*k]["metadata"]["annotations"]["lab.zstack.io/datapath"] == "afxdp/veth")
    });

    // pod ↔ pod across every pair of nodes: TCP and UDP over IPv4, TCP over IPv6
    for a in 1..=3 {
        for b in (1..=3).filter(|b| *b != a) {
            let (from, to) = (format!("default/web{a}"), format!("default/web{b}"));
            let (v4, v6) = &addr[b - 1];
            for (target, udp) in [
                (format!("{v4}:80"), false),
                (format!("{v4}:53"), true),
                (format!("[{v6}]:80"), false),
            ] {
                let mut last = Err(String::new());
                wait_until(
                    &format!("{from} → {target} (udp {udp}) over VXLAN"),
                    Duration::from_secs(30),
                    || {
                        last = z.probe(&from, &target, udp);
                        last.as_deref() == Ok(to.as_str())
                    },
                );
            }
        }
    }

    eprintln!(
        "pod ↔ pod over VXLAN, 6 pairs × TCP/UDP/IPv6: all answered within {:?}",
        t0.elapsed()
    );
    // a ClusterIP Service whose backend is on the DPDK node, from the other two
    let svc = z
        .items("services")
        .into_iter()
        .find(|v| v["metadata"]["name"] == "web3")
        .expect("service web3");
    let cip = svc["spec"]["clusterIP"]
        .as_str()
        .expect("clusterIP")
        .to_string();
    let target = format!("{cip}:8080");
    for from in ["default/web1", "default/web2"] {
        let mut last = Err(String::new());
        wait_until(
            &format!("{from} → Service {target}"),
            Duration::from_secs(30),
            || {
                last = z.probe(from, &target, false);
                last.as_deref() == Ok("default/web3")
            },
        );
    }

    // NetworkPolicy: web3 isolated except from web1, then open again
    let pf = s.dir.path().join("policy.yaml");
    std::fs::write(&pf, POLICY).expect("write");
    z.ok(&["apply", "-f", pf.to_str().expect("utf-8")]);
    let web3 = format!("{}:80", addr[2].0);
    wait_until("web2 → web3 refused", Duration::from_secs(30), || {
        z.probe("default/web2", &web3, false).is_err()
    });
    assert_eq!(
        z.probe("default/web1", &web3, false).as_deref(),
        Ok("default/web3"),
        "web1 stays admitted"
    );
    z.ok(&["delete", "-f", pf.to_str().expect("utf-8")]);
    wait_until("web2 → web3 again", Duration::from_secs(30), || {
        z.probe("default/web2", &web3, false).as_deref() == Ok("default/web3")
    });

    // egress from every node, SNATed to the node's address
    for i in 1..=3 {
        let pod = format!("default/web{i}");
        let reply = reach(&z, &pod, "8080", false);
        eprintln!("{pod} → {EXTERNAL}:8080: {reply}");
        assert_eq!(seen(&reply), format!("172.16.0.{i}"), "{pod}: {reply}");
    }
}
