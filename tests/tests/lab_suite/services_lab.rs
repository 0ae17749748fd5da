//! Services on real traffic: a 2-node lab with the real controller, node agents and CNI
//! shim, `examples/services/` applied, and connections made with `zovn lab probe` (each lab
//! pod's responder answers with its `namespace/name`, which tells which backend served).
//!
//! Checked: ClusterIP over IPv4 and IPv6 (dual stack) with a named target port, TCP and
//! UDP, from a pod on the same node as a backend and one on the other node, and from both
//! hosts (node netns, through the management port); NodePort on every node's address;
//! `externalTrafficPolicy: Local` (each node's address serves only its own pod);
//! `sessionAffinity: ClientIP` (one backend for a client, after the first connection:
//! OVN drops the first packet of a new affinity session); LoadBalancer ingress IP and
//! externalIPs; hairpin (a pod reaching itself through its Service); no endpoints →
//! refused at once (reject, not a black hole); endpoints following a pod's deletion; a
//! headless Service gets no load balancer. SCTP: this kernel has no SCTP, so the SCTP
//! Service is checked at the NB level (its Load_Balancer row with protocol sctp).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use tests::nbctl::nbctl;
use tests::zovn::{
    Zovn, allow_example_external_ips, pod_ip, start_agents, start_lab_with, wait_dataplane_synced,
};

/// One probe: Ok(who answered) or Err(why not).
fn probe(z: &Zovn, from: &str, target: &str, udp: bool) -> Result<String, String> {
    z.probe(from, target, udp)
}

/// Waits (bounded) until `f` answers `Some`.
fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Which backends answer `n` probes from `from`. A probe that gets no answer is tried
/// once more (the 2 vCPUs are shared with other labs, some busy-polling PMD threads); a
/// second failure fails the test, with what OVN holds at that moment.
fn backends(z: &Zovn, nb: &str, from: &str, target: &str, udp: bool, n: usize) -> BTreeSet<String> {
    (0..n)
        .map(|_| {
            probe(z, from, target, udp)
                .or_else(|e| {
                    eprintln!("retrying once: {e}");
                    probe(z, from, target, udp)
                })
                .unwrap_or_else(|e| panic!("{from} → {target} udp={udp}: {e}\n{}", ovn_state(nb)))
        })
        .collect()
}

/// What a failed probe is judged against: our Service load balancers' VIPs in the NB and
/// how far each chassis got (`nb_cfg`).
fn ovn_state(nb: &str) -> String {
    let run = |args: &[&str]| lab::ctl::nbctl(nb, args).unwrap_or_else(|e| e.to_string());
    let lbs = run(&["--bare", "--columns=name,vips", "list", "Load_Balancer"]);
    let cfg = run(&["--bare", "--columns=nb_cfg,hv_cfg", "list", "NB_Global"]);
    format!("NB load balancers:\n{lbs}\nNB_Global nb_cfg, hv_cfg: {cfg}")
}

/// Our Service load balancers' VIPs in the NB: row name → VIP → backends.
fn nb_vips(nb: &str) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let out = nbctl(
        nb,
        &[
            "--format=json",
            "--columns=name,vips",
            "list",
            "Load_Balancer",
        ],
    );
    let v: Value = serde_json::from_str(&out).expect("ovn-nbctl --format=json");
    v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|row| {
            let name = row[0].as_str().unwrap_or("").to_string();
            let vips = row[1][1]
                .as_array()
                .into_iter()
                .flatten()
                .map(|kv| {
                    let backends = kv[1]
                        .as_str()
                        .unwrap_or("")
                        .split(',')
                        .filter(|b| !b.is_empty())
                        .map(str::to_string)
                        .collect();
                    (kv[0].as_str().unwrap_or("").to_string(), backends)
                })
                .collect();
            (name, vips)
        })
        .collect()
}

/// Probes until one answer comes from a backend in `want` (the load balancer is in place).
fn reachable(z: &Zovn, from: &str, target: &str, udp: bool, want: &[&str]) {
    let t0 = Instant::now();
    loop {
        let last = match probe(z, from, target, udp) {
            Ok(who) if want.contains(&who.as_str()) => return,
            Ok(who) => format!("answered by {who}"),
            Err(e) => e,
        };
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{from} → {target} udp={udp} never reached {want:?}: {last}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn host_probe(netns: &str, target: &str, udp: bool) -> Result<String, String> {
    tests::zovn::probe_netns(netns, target, udp, Duration::from_secs(2))
}

fn vip(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

#[test]
fn services_on_real_traffic() {
    if !tests::require_real("services_lab", tests::OVSDB_BINS)
        || !tests::require_real("services_lab", tests::LAB_BINS)
    {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("svl");
    // the externalIPs of examples/services are allowed (the default allows none)
    let (mut lab, z, _down) = start_lab_with(&s, 2, &[], allow_example_external_ips);
    start_agents(&mut lab);
    let nb = lab.nb_remote();

    z.apply_example("services");
    let (w1, w2, c1, c2) = ("svc/web-1", "svc/web-2", "svc/client-1", "svc/client-2");
    let webs = [w1, w2];

    // Services: allocated cluster IPs and node ports
    let services: BTreeMap<String, Value> = z
        .items("services")
        .into_iter()
        .map(|s| (s["metadata"]["name"].as_str().unwrap_or("").to_string(), s))
        .collect();
    eprintln!("{}", z.ok(&["get", "services"]));
    let ips = |name: &str| -> Vec<String> {
        services[name]["spec"]["clusterIPs"]
            .as_array()
            .unwrap_or_else(|| panic!("{name} has cluster IPs"))
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let web_ips = ips("web");
    assert_eq!(web_ips.len(), 2, "dual stack: {web_ips:?}");
    let (web4, web6) = (web_ips[0].clone(), web_ips[1].clone());
    assert!(web6.contains(':'), "{web6}");

    // Probe only once OVN holds the Services with their endpoints and every chassis has
    // installed the flows: no probing while the load balancers are still being filled, nor
    // while an ovn-controller recomputes (a CI run had a probe refused then, see
    // `wait_dataplane_synced`). The web pods' addresses in the NB: both ready endpoints.
    let t0 = Instant::now();
    let pods = z.wait_ready(&[w1, w2, c1, c2], Duration::from_secs(60));
    let web_ep = |port: u16| -> BTreeSet<String> {
        [w1, w2]
            .iter()
            .map(|k| format!("{}:{port}", pod_ip(&pods[*k])))
            .collect()
    };
    let web_lb = "Service_svc/web_TCP";
    wait_for(
        "both web pods behind every Service",
        Duration::from_secs(30),
        || {
            let lbs = nb_vips(&nb);
            let web = lbs.get(web_lb)?;
            let empty: Vec<&String> = lbs
                .iter()
                .filter(|(name, _)| name.starts_with("Service_svc/") && !name.contains("/nobody_"))
                .flat_map(|(_, vips)| vips.iter().filter(|(_, b)| b.is_empty()).map(|(v, _)| v))
                .collect();
            (web.get(&vip(&web4, 80)) == Some(&web_ep(8080))
                && web.get(&vip(&web6, 80)).is_some_and(|b| b.len() == 2)
                && empty.is_empty())
            .then_some(())
        },
    );
    wait_dataplane_synced(&lab, Duration::from_secs(60));
    eprintln!(
        "endpoints in OVN and the chassis' flows after {:?}",
        t0.elapsed()
    );
    for from in [c1, c2] {
        reachable(&z, from, &vip(&web4, 80), false, &webs);
    }
    eprintln!("{}", z.ok(&["get", "endpointslices"]));

    // ClusterIP v4, TCP and UDP, same-node and cross-node clients: both backends serve
    for from in [c1, c2] {
        let tcp = backends(&z, &nb, from, &vip(&web4, 80), false, 16);
        assert_eq!(
            tcp,
            webs.iter().map(|s| s.to_string()).collect(),
            "{from} TCP"
        );
        let udp = backends(&z, &nb, from, &vip(&web4, 53), true, 16);
        assert_eq!(
            udp,
            webs.iter().map(|s| s.to_string()).collect(),
            "{from} UDP"
        );
    }
    // ClusterIP v6
    for from in [c1, c2] {
        reachable(&z, from, &vip(&web6, 80), false, &webs);
        reachable(&z, from, &vip(&web6, 53), true, &webs);
    }

    // from the hosts, through the management port (route to the service CIDR)
    let nodes = lab.nodes().to_vec();
    for n in &nodes {
        let who = wait_for("host → cluster IP", Duration::from_secs(30), || {
            host_probe(&n.netns, &vip(&web4, 80), false).ok()
        });
        assert!(webs.contains(&who.as_str()), "host {} got {who}", n.netns);
    }

    // NodePort on every node's address, from both clients
    for n in &nodes {
        for from in [c1, c2] {
            reachable(&z, from, &vip(&n.encap_ip, 30080), false, &webs);
        }
    }
    // externalTrafficPolicy: Local — node i's address serves node i's pod only
    for (n, local) in nodes.iter().zip(webs) {
        for from in [c1, c2] {
            reachable(&z, from, &vip(&n.encap_ip, 30081), false, &[local]);
            let seen = backends(&z, &nb, from, &vip(&n.encap_ip, 30081), false, 6);
            assert_eq!(
                seen,
                BTreeSet::from([local.to_string()]),
                "{from} via {}",
                n.encap_ip
            );
        }
    }

    // sessionAffinity: ClientIP — one client, one backend. OVN (23.03) drops the first
    // packet of a new affinity session while it learns the client (a known OVN limitation,
    // see ovn-kubernetes#4066), so each client's first connection may time out: warm up.
    let sticky = ips("web-sticky")[0].clone();
    for from in [c1, c2] {
        reachable(&z, from, &vip(&sticky, 80), false, &webs);
        let seen = backends(&z, &nb, from, &vip(&sticky, 80), false, 12);
        assert_eq!(seen.len(), 1, "{from} stuck to one backend: {seen:?}");
    }

    // LoadBalancer: ingress IP and externalIPs
    for target in ["203.0.113.10:80", "192.0.2.10:80"] {
        for from in [c1, c2] {
            reachable(&z, from, target, false, &webs);
        }
    }

    // hairpin: web-1 → its Service (only itself behind it) → web-1
    let hp = ips("hairpin")[0].clone();
    reachable(&z, w1, &vip(&hp, 80), false, &[w1]);

    // no endpoints: refused at once, not a timeout
    let nobody = ips("nobody")[0].clone();
    let t0 = Instant::now();
    let err = probe(&z, c1, &vip(&nobody, 80), false).expect_err("no endpoints");
    assert!(
        err.to_lowercase().contains("refused") && t0.elapsed() < Duration::from_millis(1500),
        "rejected quickly ({:?}): {err}",
        t0.elapsed()
    );

    // NB: rows per Service and protocol, headless has none, SCTP at the NB level
    let names = nbctl(&nb, &["--bare", "--columns=name", "list", "Load_Balancer"]);
    for want in [
        "Service_svc/web_TCP",
        "Service_svc/web_UDP",
        "Service_svc/web-np_TCP",
        "Service_svc/signal_SCTP",
    ] {
        assert!(names.contains(want), "{want} in {names}");
    }
    assert!(!names.contains("Service_svc/headless"), "{names}");
    let sctp = nbctl(
        &nb,
        &[
            "--bare",
            "--columns=protocol,vips",
            "find",
            "Load_Balancer",
            "name=\"Service_svc/signal_SCTP\"",
        ],
    );
    assert!(sctp.contains("sctp") && sctp.contains(":3868"), "{sctp}");

    // endpoints follow the pods: web-2 deleted → only web-1 serves
    let del = s.dir.path().join("web-2.yaml");
    std::fs::write(
        &del,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web-2, namespace: svc}\nspec: {containers: []}\n",
    )
    .expect("write");
    z.ok(&["delete", "-f", del.to_str().expect("utf-8")]);
    // first in the NB, then in every chassis's flows; only then must every probe succeed
    // (a probe in between may still be sent to web-2, gone: a timeout, as with kube-proxy)
    let only_web1 = BTreeSet::from([format!("{}:8080", pod_ip(&pods[w1]))]);
    wait_for(
        "web-2 out of the load balancer",
        Duration::from_secs(30),
        || (nb_vips(&nb).get(web_lb)?.get(&vip(&web4, 80)) == Some(&only_web1)).then_some(()),
    );
    wait_dataplane_synced(&lab, Duration::from_secs(60));
    let seen = backends(&z, &nb, c2, &vip(&web4, 80), false, 8);
    assert_eq!(seen, BTreeSet::from([w1.to_string()]), "web-2 deleted");

    let across = format!("{}:8080", pod_ip(&pods[w1]));
    tenant_services_take_no_host_address(&lab, &z, &nb, (c2, w1, &across));
    tests::record_real_run("services_lab");
}

/// A namespace's user claims node2's underlay address as an externalIP (TCP 80 and the
/// Geneve port, UDP 6081): refused by the controller (outside the allowlist: an event on
/// the Service, no VIP) and by every agent (no host route, no NAT rule); then a
/// load-balancer controller writes that address as an ingress IP (not governed by the
/// allowlist): still no host route or NAT rule, an event on the Nodes. After each, node1
/// still routes node2's address as before and pods across the nodes still talk.
fn tenant_services_take_no_host_address(
    lab: &lab::Lab,
    z: &Zovn,
    nb: &str,
    (across_from, across_to, across_ip): (&str, &str, &str),
) {
    let n1 = lab.node(1).expect("node1").clone();
    let n2_addr = lab.node(2).expect("node2").encap_ip.clone();
    let route_to_n2 = || {
        let out = std::process::Command::new("ip")
            .args([
                "netns", "exec", &n1.netns, "ip", "-o", "route", "get", &n2_addr,
            ])
            .output()
            .expect("ip route get");
        // "172.16.0.12 dev br-phy src 172.16.0.11 uid 0 \    cache": the device matters
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .skip_while(|w| *w != "dev")
            .nth(1)
            .unwrap_or("none")
            .to_string()
    };
    let before = route_to_n2();
    assert_ne!(
        before, "ovn-k8s-mp0",
        "node1 reaches node2 through its underlay"
    );
    // the message of an event `reason` containing `needle`, waited for
    let event = |what: &str, reason: &str, needle: &str| -> String {
        wait_for(what, Duration::from_secs(30), || {
            z.items("events")
                .iter()
                .filter(|e| e["reason"] == reason)
                .filter_map(|e| e["message"].as_str())
                .find(|m| m.contains(needle))
                .map(str::to_string)
        })
    };
    let apply = |name: &str, yaml: String| {
        let f = lab.dir().join(format!("{name}.yaml"));
        std::fs::write(&f, yaml).expect("write the manifest");
        z.ok(&["apply", "-f", f.to_str().expect("utf-8")]);
    };
    let still_fine = |what: &str| {
        assert_eq!(
            route_to_n2(),
            before,
            "{what}: node1's route to node2 moved"
        );
        let nft = tests::egress::nft_table(&n1.netns);
        assert!(
            !nft.contains(&n2_addr),
            "{what}: node1's NAT table takes node2's address:\n{nft}"
        );
        reachable(z, across_from, across_ip, false, &[across_to]);
    };
    let manifest = |name: &str, external: &str, status: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: svc}}\n\
             spec:\n  type: LoadBalancer\n{external}  selector: {{app: web}}\n  ports:\n\
             \x20 - {{name: http, port: 80, targetPort: 8080}}\n\
             \x20 - {{name: geneve, port: 6081, targetPort: 8080, protocol: UDP}}\n{status}"
        )
    };

    // 1. spec.externalIPs, as any namespace's user writes it
    apply(
        "grab-node",
        manifest("grab-node", &format!("  externalIPs: [{n2_addr}]\n"), ""),
    );
    let refused = event(
        "the controller's ServiceProblem event on svc/grab-node",
        "ServiceProblem",
        &format!("externalIP {n2_addr} refused"),
    );
    eprintln!("refused by the controller: {refused}");
    let lb_vips: Vec<String> = nb_vips(nb)
        .into_iter()
        .filter(|(name, _)| name.contains("svc/grab-node"))
        .flat_map(|(_, v)| v.into_keys())
        .collect();
    // its cluster IP and node ports (node2's address at a nodePort is a NodePort, as for
    // every LoadBalancer Service), not node2's address at the claimed ports
    assert!(
        !lb_vips.is_empty()
            && !lb_vips.contains(&format!("{n2_addr}:80"))
            && !lb_vips.contains(&format!("{n2_addr}:6081")),
        "svc/grab-node's VIPs: {lb_vips:?}"
    );
    still_fine("externalIPs: [node2]");

    // 2. the same address as a LoadBalancer ingress IP (a load-balancer controller's
    // status): the agents' own guard
    apply(
        "lb-on-node",
        manifest(
            "lb-on-node",
            "",
            &format!("status:\n  loadBalancer: {{ingress: [{{ip: {n2_addr}}}]}}\n"),
        ),
    );
    let refused = event(
        "node1's ServiceAddressRefused event for svc/lb-on-node",
        "ServiceAddressRefused",
        &format!("svc/lb-on-node: {n2_addr} is in "),
    );
    eprintln!("refused by node1's agent: {refused}");
    // node2's agent refuses it as its own address
    event(
        "node2's ServiceAddressRefused event for svc/lb-on-node",
        "ServiceAddressRefused",
        &format!("svc/lb-on-node: {n2_addr} is an address of this host"),
    );
    still_fine("ingress IP node2");
}
