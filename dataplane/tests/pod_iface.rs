//! Real-kernel tests of `dataplane::attach::pod_iface` (root; `ip`/`ethtool`/`ping` as the second
//! opinion). Every test works in private netns named `dpt<pid>…`, removed by a guard.

#![allow(clippy::unwrap_used)] // test helpers: a bad literal is the test's own bug

mod common;

use std::net::IpAddr;

use common::{Netns, ip_json, netns_listed, require_real, sh, sh_ok};
use dataplane::attach::pod_iface::{
    self, CheckError, PlumbError, PodInterfaceSpec, host_ifname_for, netns::run_blocking_in_netns,
};
use serde_json::Value;

const BINS: &[&str] = &["ip", "ethtool", "ping"];

fn spec(pod: &Netns, i: usize, host_ns: Option<std::path::PathBuf>, last: u8) -> PodInterfaceSpec {
    let id = format!("{:02x}{}cafe0123456789abcdef", last, std::process::id());
    PodInterfaceSpec {
        netns_path: pod.path(i),
        host_netns_path: host_ns,
        ifname: "eth0".into(),
        host_ifname: host_ifname_for(&id),
        mac: [0x0a, 0x58, 10, 99, 0, last],
        addresses: vec![
            format!("10.99.0.{last}/24").parse().unwrap(),
            format!("fd99::{last}/64").parse().unwrap(),
        ],
        gateways: vec!["10.99.0.1".parse().unwrap(), "fd99::1".parse().unwrap()],
        routes: vec![
            ("10.96.0.0/12".parse().unwrap(), None),
            (
                "192.168.77.0/24".parse().unwrap(),
                Some("10.99.0.254".parse().unwrap()),
            ),
        ],
        mtu: 1400,
        tx_checksum_offload_off: true,
        queues: 1,
        rps_cpus: None,
    }
}

fn link(ns: &str, dev: &str) -> Value {
    ip_json(ns, &["link", "show", "dev", dev])[0].clone()
}

fn has_flag(l: &Value, f: &str) -> bool {
    l["flags"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == f))
}

/// Second opinion from `ip -j` and `ethtool -k` on everything `spec` asks for.
fn verify_with_ip(ns: &str, s: &PodInterfaceSpec) {
    let a = &ip_json(ns, &["addr", "show", "dev", "eth0"])[0];
    let mac = s
        .mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    assert_eq!(a["address"], mac.as_str(), "MAC: {a}");
    assert_eq!(a["mtu"], s.mtu, "MTU: {a}");
    assert!(has_flag(a, "UP"), "eth0 not up: {a}");
    let addrs: Vec<String> = a["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| format!("{}/{}", i["local"].as_str().unwrap(), i["prefixlen"]))
        .collect();
    for want in &s.addresses {
        assert!(
            addrs.contains(&want.to_string()),
            "{want} missing in {addrs:?}"
        );
    }
    assert!(has_flag(&link(ns, "lo"), "UP"), "lo is down");
    let mut routes = ip_json(ns, &["-4", "route", "show", "table", "main"])
        .as_array()
        .unwrap()
        .clone();
    routes.extend(
        ip_json(ns, &["-6", "route", "show", "table", "main"])
            .as_array()
            .unwrap()
            .clone(),
    );
    let has = |dst: &str, gw: Option<&str>| {
        routes.iter().any(|r| {
            r["dst"] == dst
                && r["dev"] == "eth0"
                && match gw {
                    Some(g) => r["gateway"] == g,
                    None => r.get("gateway").is_none(),
                }
        })
    };
    assert!(
        has("default", Some("10.99.0.1")),
        "v4 default route: {routes:?}"
    );
    assert!(
        has("default", Some("fd99::1")),
        "v6 default route: {routes:?}"
    );
    assert!(has("10.96.0.0/12", None), "on-link route: {routes:?}");
    assert!(
        has("192.168.77.0/24", Some("10.99.0.254")),
        "via route: {routes:?}"
    );
    let k = sh(&["ip", "netns", "exec", ns, "ethtool", "-k", "eth0"]);
    assert!(
        k.lines().any(|l| l.trim() == "tx-checksumming: off"),
        "ethtool -k: {k}"
    );
}

fn veths(ns: &str) -> Vec<String> {
    ip_json(ns, &["-d", "link", "show", "type", "veth"])
        .as_array()
        .map(|a| {
            a.iter()
                .map(|l| l["ifname"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn pod_iface_setup_check_teardown() {
    if !require_real("pod_iface_setup_check_teardown", BINS) {
        return;
    }
    let ns = Netns::new(&["n", "a"]);
    let (node, pod) = (ns.name(0).to_string(), ns.name(1).to_string());
    let mut s = spec(&ns, 1, Some(ns.path(0)), 2);
    // receive steering to CPU 0 (what an AF_XDP pod gets on a node whose PMD is CPU 1)
    s.rps_cpus = Some("00000001".into());
    let host = s.host_ifname.clone();
    let rps = || {
        sh(&[
            "ip",
            "netns",
            "exec",
            &pod,
            "cat",
            "/sys/class/net/eth0/queues/rx-0/rps_cpus",
        ])
        .trim()
        .trim_start_matches(['0', ','])
        .to_string()
    };
    // sysfs mounts the test process sees (other tests add netns mounts meanwhile)
    let sysfs_mounts = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(" - sysfs "))
            .count()
    };
    let mounts = sysfs_mounts();

    let p1 = pod_iface::setup(&s).expect("setup");
    assert!(p1.created);
    assert_eq!(
        rps(),
        "1",
        "rps_cpus of the pod end, read through ip netns exec"
    );
    assert_eq!(
        sysfs_mounts(),
        mounts,
        "the sysfs mount for the pod netns stays on the worker thread"
    );
    assert_eq!(p1.host_ifname, host);
    verify_with_ip(&pod, &s);
    let h = link(&node, &host);
    assert_eq!(h["ifindex"], p1.host_ifindex);
    assert_eq!(h["mtu"], 1400);
    assert!(has_flag(&h, "UP"), "host end down: {h}");
    assert_eq!(link(&pod, "eth0")["ifindex"], p1.pod_ifindex);

    // idempotent
    let p2 = pod_iface::setup(&s).expect("second setup");
    assert!(!p2.created);
    assert_eq!(
        (p2.host_ifindex, p2.pod_ifindex),
        (p1.host_ifindex, p1.pod_ifindex)
    );
    pod_iface::check(&s).expect("check after setup");
    sh(&[
        "ip",
        "netns",
        "exec",
        &pod,
        "sh",
        "-c",
        "echo 0 > /sys/class/net/eth0/queues/rx-0/rps_cpus",
    ]);
    assert_eq!(rps(), "");
    pod_iface::setup(&s).expect("setup restoring the steering");
    assert_eq!(rps(), "1", "setup puts the steering back");

    // break things one at a time: check names it, setup repairs it
    let breakages: [(&[&str], &str); 5] = [
        (
            &["ip", "-n", &pod, "addr", "flush", "dev", "eth0"],
            "address",
        ),
        (
            &["ip", "-n", &pod, "link", "set", "eth0", "mtu", "1300"],
            "MTU",
        ),
        (
            &[
                "ip", "netns", "exec", &pod, "ethtool", "-K", "eth0", "tx", "on",
            ],
            "tx checksum",
        ),
        (
            &["ip", "-n", &pod, "route", "del", "192.168.77.0/24"],
            "route: expected 192.168.77.0/24 via",
        ),
        (
            &[
                "ip",
                "-n",
                &pod,
                "addr",
                "add",
                "10.55.0.9/16",
                "dev",
                "eth0",
            ],
            "unexpected address",
        ),
    ];
    for (cmd, what) in breakages {
        sh(cmd);
        let e = pod_iface::check(&s).expect_err(what);
        eprintln!("check after {cmd:?}: {e}");
        assert!(matches!(e, CheckError::Mismatch { .. }), "{e:?}");
        assert!(e.to_string().contains(what), "{e} should name {what}");
        let p = pod_iface::setup(&s).expect("repairing setup");
        assert_eq!(p.pod_ifindex, p1.pod_ifindex, "repair must not recreate");
        pod_iface::check(&s).expect("check after repair");
    }
    verify_with_ip(&pod, &s);
    sh(&["ip", "-n", &node, "link", "set", &host, "down"]);
    let e = pod_iface::check(&s).expect_err("host down");
    assert!(
        e.to_string().contains(&host) && e.to_string().contains("admin state"),
        "{e}"
    );
    pod_iface::setup(&s).expect("repair host up");

    // stale pair (different MAC wanted): recreated, not failed
    let mut s2 = s.clone();
    s2.mac[5] = 0x42;
    assert!(matches!(
        pod_iface::check(&s2),
        Err(CheckError::Mismatch { what: "MAC", .. })
    ));
    let p3 = pod_iface::setup(&s2).expect("setup with new MAC");
    assert!(p3.created);
    pod_iface::check(&s2).expect("check new MAC");
    verify_with_ip(&pod, &s2);

    // teardown twice
    assert!(pod_iface::teardown(Some(&ns.path(0)), &host).expect("teardown"));
    assert!(!pod_iface::teardown(Some(&ns.path(0)), &host).expect("second teardown"));
    assert!(
        veths(&node).is_empty(),
        "veth left in node netns: {:?}",
        veths(&node)
    );
    assert!(
        veths(&pod).is_empty(),
        "veth left in pod netns: {:?}",
        veths(&pod)
    );
    assert!(matches!(
        pod_iface::check(&s2),
        Err(CheckError::Missing { .. })
    ));

    let names = ns.names.clone();
    drop(ns);
    for n in names {
        assert!(!netns_listed(&n), "netns {n} left behind");
    }
}

/// `host_netns_path: None` means "the calling thread's netns": run setup from a thread
/// that entered the node netns, so the test never touches the machine's own netns.
#[test]
fn pod_iface_host_netns_none_is_callers_netns() {
    if !require_real("pod_iface_host_netns_none_is_callers_netns", BINS) {
        return;
    }
    let ns = Netns::new(&["m", "d"]);
    let mut s = spec(&ns, 1, None, 7);
    s.gateways.clear();
    s.routes.clear();
    let host = s.host_ifname.clone();
    let s2 = s.clone();
    let p = run_blocking_in_netns(Some(&ns.path(0)), move || {
        let p = pod_iface::setup(&s2)?;
        pod_iface::check(&s2).map_err(|e| PlumbError::InvalidSpec(e.to_string()))?;
        Ok(p)
    })
    .expect("setup from inside the node netns");
    assert_eq!(link(ns.name(0), &host)["ifindex"], p.host_ifindex);
    assert!(sh_ok(&["ip", "-n", ns.name(1), "link", "show", "eth0"]));
    let h2 = host.clone();
    let deleted = run_blocking_in_netns(Some(&ns.path(0)), move || pod_iface::teardown(None, &h2))
        .expect("teardown");
    assert!(deleted);
    assert!(veths(ns.name(0)).is_empty());
}

#[test]
fn pod_iface_conflicts_and_errors_name_the_step() {
    if !require_real("pod_iface_conflicts_and_errors_name_the_step", BINS) {
        return;
    }
    let ns = Netns::new(&["x", "y"]);
    let s = spec(&ns, 1, Some(ns.path(0)), 3);
    // a non-veth (a bridge: no dummy module here) holding the host name: a conflict, and teardown refuses to delete it
    sh(&[
        "ip",
        "-n",
        ns.name(0),
        "link",
        "add",
        &s.host_ifname,
        "type",
        "bridge",
    ]);
    let e = pod_iface::setup(&s).expect_err("dummy in the way");
    assert!(matches!(e, PlumbError::Conflict { .. }), "{e:?}");
    assert!(pod_iface::teardown(Some(&ns.path(0)), &s.host_ifname).is_err());
    sh(&["ip", "-n", ns.name(0), "link", "del", &s.host_ifname]);
    // something else already called eth0 in the pod: the create step fails and says so
    sh(&[
        "ip",
        "-n",
        ns.name(1),
        "link",
        "add",
        "eth0",
        "type",
        "bridge",
    ]);
    let e = pod_iface::setup(&s).expect_err("eth0 taken");
    let msg = e.to_string();
    assert!(
        matches!(e, PlumbError::Step { .. }) && msg.contains("create veth pair"),
        "{msg}"
    );
    assert!(
        veths(ns.name(0)).is_empty(),
        "half-created pair left behind"
    );
    // a missing netns
    let mut bad = s.clone();
    bad.netns_path = "/var/run/netns/dpt-does-not-exist".into();
    let e = pod_iface::setup(&bad).expect_err("no netns");
    assert!(
        e.to_string()
            .starts_with("open netns /var/run/netns/dpt-does-not-exist"),
        "{e}"
    );
}

#[test]
fn pod_iface_two_pods_ping_over_node_bridge() {
    if !require_real("pod_iface_two_pods_ping_over_node_bridge", BINS) {
        return;
    }
    let ns = Netns::new(&["c", "p", "q"]);
    let node = ns.name(0).to_string();
    let mut specs = Vec::new();
    for (i, last) in [(1, 2u8), (2, 3u8)] {
        let mut s = spec(&ns, i, Some(ns.path(0)), last);
        s.routes.clear();
        let p = pod_iface::setup(&s).expect("setup pod");
        pod_iface::check(&s).expect("check pod");
        specs.push((s, p));
    }
    // scaffolding: a bridge in the node netns holding the gateway address
    sh(&["ip", "-n", &node, "link", "add", "br0", "type", "bridge"]);
    sh(&[
        "ip",
        "-n",
        &node,
        "addr",
        "add",
        "10.99.0.1/24",
        "dev",
        "br0",
    ]);
    sh(&["ip", "-n", &node, "link", "set", "br0", "up"]);
    for (s, _) in &specs {
        sh(&[
            "ip",
            "-n",
            &node,
            "link",
            "set",
            &s.host_ifname,
            "master",
            "br0",
        ]);
    }
    let ping = |from: &str, to: IpAddr| {
        sh_ok(&[
            "ip",
            "netns",
            "exec",
            from,
            "ping",
            "-c",
            "2",
            "-i",
            "0.2",
            "-W",
            "2",
            &to.to_string(),
        ])
    };
    let b_ip = specs[1].0.addresses[0].addr();
    assert!(ping(ns.name(1), b_ip), "pod A cannot ping pod B ({b_ip})");
    assert!(
        ping(ns.name(2), "10.99.0.1".parse().unwrap()),
        "pod B cannot ping the gateway"
    );
    for (s, _) in &specs {
        assert!(pod_iface::teardown(Some(&ns.path(0)), &s.host_ifname).expect("teardown"));
    }
    assert!(veths(&node).is_empty());
}
