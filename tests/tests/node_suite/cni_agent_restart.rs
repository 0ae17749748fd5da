//! The node agent SIGKILLed in the middle of a CNI ADD and restarted: the runtime's retry
//! (the same container id) succeeds, and nothing is leaked or duplicated — one OVS
//! Interface per pod, one host veth, one `eth0` with the annotated address — and DEL
//! removes it all.
//!
//! Two kill points:
//! - A: while the agent waits for the controller's `k8s.ovn.org/pod-networks` annotation
//!   (the pod is applied only after the ADD started): nothing has been plumbed yet.
//! - B: while the agent waits for ovn-controller's `ovn-installed` (ovn-controller is
//!   SIGSTOPped): the veth, the pod's `eth0` and the OVS port already exist, so the retry
//!   must adopt them rather than add a second set.
//!
//! Needs the `zovn`, `zstack-ovn-cni` and `zstack-ovnkube-node` binaries
//! (`cargo build --workspace --bins`).

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use tests::agent::{self, AgentLab, in_ns, links, ovs_ifaces, ping, result_ip, shim};

/// Asserts the pod `pod` (container `cid`, netns `ns`, CNI result `r`) on node 0 is
/// plumbed exactly once.
fn assert_single(lab: &AgentLab, pod: &str, ns: &str, r: &Value) {
    let node = &lab.nodes[0];
    let iface_id = format!("default_{pod}");
    let host = r["interfaces"][0]["name"].as_str().expect("host ifname");
    assert_eq!(
        ovs_ifaces(&node.db, &iface_id),
        [host],
        "OVS interfaces of {iface_id}"
    );
    let host_links: Vec<String> = links(&node.netns)
        .into_iter()
        .filter(|l| l == host)
        .collect();
    assert_eq!(host_links.len(), 1, "host veth {host} in {}", node.netns);
    let pod_links = links(ns);
    assert_eq!(
        pod_links.iter().filter(|l| *l == "eth0").count(),
        1,
        "links in {ns}: {pod_links:?}"
    );
    // lo + eth0, nothing else (no second veth end)
    assert_eq!(pod_links.len(), 2, "links in {ns}: {pod_links:?}");
    let out = in_ns(ns, &["ip", "-o", "-4", "addr", "show", "dev", "eth0"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let want = lab.pod_ip(pod);
    assert_eq!(
        text.matches("inet ").count(),
        1,
        "addresses on eth0 of {pod}: {text}"
    );
    assert!(
        text.contains(&format!("inet {want} ")),
        "eth0 of {pod}: {text}, want {want}"
    );
    assert_eq!(
        r["ips"][0]["address"].as_str(),
        Some(want.as_str()),
        "result of {pod}: {r}"
    );
}

/// Waits for the shim's exit within `within`, returning (ok, JSON).
fn wait_shim(c: std::process::Child, within: Duration) -> (bool, Value) {
    let pid = c.id();
    let t = Instant::now();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    let h = std::thread::spawn(move || {
        let r = agent::shim_output(c, "ADD");
        d.store(true, std::sync::atomic::Ordering::SeqCst);
        r
    });
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        if t.elapsed() > within {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            panic!("shim still running {within:?} after the agent died");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    h.join().expect("shim thread")
}

#[test]
fn cni_agent_killed_mid_add() {
    let mut bins = tests::LAB_BINS.to_vec();
    bins.extend(tests::OVSDB_BINS);
    if !tests::require_real("cni_agent_killed_mid_add", &bins) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("akr");
    let mut lab = AgentLab::up(&s, "10.34.0.0/16", "10.34.0.1");
    let ns_a = lab.add_netns("ra");
    let ns_b = lab.add_netns("rb");
    let cid_a = format!("{:0<64}", "ra");
    let cid_b = format!("{:0<64}", "rb");

    // A: killed while waiting for the annotation (the pod does not exist yet)
    let mut c = agent::spawn_shim("ADD", &lab.nodes[0], &cid_a, &ns_a, "ra", 30.0);
    std::thread::sleep(Duration::from_millis(1500));
    // still waiting (for up to 30 s) for the pod: the ADD is in flight
    assert!(
        c.try_wait().expect("try_wait").is_none(),
        "ADD ra ended early"
    );
    lab.kill_agent(0);
    let (ok, r) = wait_shim(c, Duration::from_secs(10));
    assert!(!ok, "ADD ra survived the agent's death: {r}");
    eprintln!("A: the shim reported {r}");
    lab.apply_pod("ra", 0);
    lab.start_agent(0);
    let (ok, ra) = shim("ADD", &lab.nodes[0], &cid_a, &ns_a, "ra", 30.0);
    assert!(ok, "retried ADD ra: {ra}\n{}", lab.logs());
    assert_single(&lab, "ra", &ns_a, &ra);

    // B: killed while waiting for ovn-installed (veth + OVS port already there)
    lab.apply_pod("rb", 0);
    lab.pod_ip("rb");
    let ovnc = lab.nodes[0]
        .ovn_controller
        .expect("ovn-controller pid of node1");
    kill(Pid::from_raw(ovnc), Signal::SIGSTOP).expect("SIGSTOP ovn-controller");
    lab.stopped.push(ovnc);
    let mut c = agent::spawn_shim("ADD", &lab.nodes[0], &cid_b, &ns_b, "rb", 30.0);
    let t = Instant::now();
    while ovs_ifaces(&lab.nodes[0].db, "default_rb").is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "no OVS port for rb\n{}",
            lab.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        c.try_wait().expect("try_wait").is_none(),
        "ADD rb ended early"
    );
    lab.kill_agent(0);
    let (ok, r) = wait_shim(c, Duration::from_secs(10));
    assert!(!ok, "ADD rb survived the agent's death: {r}");
    eprintln!("B: the shim reported {r}");
    assert!(
        links(&ns_b).iter().any(|l| l == "eth0"),
        "kill point B: eth0 not plumbed yet"
    );
    kill(Pid::from_raw(ovnc), Signal::SIGCONT).expect("SIGCONT ovn-controller");
    lab.stopped.clear();
    lab.start_agent(0);
    let (ok, rb) = shim("ADD", &lab.nodes[0], &cid_b, &ns_b, "rb", 30.0);
    assert!(ok, "retried ADD rb: {rb}\n{}", lab.logs());
    assert_single(&lab, "rb", &ns_b, &rb);
    // the first pod is untouched
    assert_single(&lab, "ra", &ns_a, &ra);

    // both work
    let (ip_a, ip_b) = (result_ip(&ra), result_ip(&rb));
    assert!(
        ping(&ns_a, &ip_b, Duration::from_secs(15)),
        "ra -> rb\n{}",
        lab.logs()
    );
    assert!(ping(&ns_b, &ip_a, Duration::from_secs(10)), "rb -> ra");
    let (ok, r) = shim("CHECK", &lab.nodes[0], &cid_b, &ns_b, "rb", 10.0);
    assert!(ok, "CHECK rb: {r}");

    // DEL: nothing remains
    for (cid, ns, pod, r) in [(&cid_a, &ns_a, "ra", &ra), (&cid_b, &ns_b, "rb", &rb)] {
        let (ok, d) = shim("DEL", &lab.nodes[0], cid, ns, pod, 10.0);
        assert!(ok, "DEL {pod}: {d}");
        let host = r["interfaces"][0]["name"].as_str().expect("host ifname");
        assert!(
            ovs_ifaces(&lab.nodes[0].db, &format!("default_{pod}")).is_empty(),
            "OVS interface of {pod} left"
        );
        assert!(
            !agent::ovs_ports(&lab.nodes[0].db).iter().any(|p| p == host),
            "OVS port {host} left"
        );
        assert!(
            !links(&lab.nodes[0].netns).iter().any(|l| l == host),
            "veth {host} left"
        );
        assert_eq!(links(ns), ["lo"], "links left in {ns}");
    }
    assert_eq!(
        agent::ovs_ports(&lab.nodes[0].db)
            .into_iter()
            .filter(|p| !p.starts_with("ovn-") && !p.contains("patch"))
            .collect::<Vec<_>>(),
        Vec::<String>::new(),
        "ports left on br-int of node1"
    );
    lab.finish();
}
