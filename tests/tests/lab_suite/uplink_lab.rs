//! The node's uplink port on real components: a 2-node lab (node 1 AF_XDP, node 2 kernel),
//! the real agents, OVS and OVN.
//!
//! Checked:
//! - node 1's br-phy uplink (marked as ours by the lab, as the chart's uplink container
//!   marks it) became an AF_XDP port that ovs-vswitchd opened, node 2's stayed a kernel
//!   port; each node's datapath status says so and why, `zovn lab get nodes` shows it, and
//!   an `UplinkAfxdp` event was sent; pods on both nodes reach each other through the
//!   tunnel (over node 1's AF_XDP uplink);
//! - `uplink: kernel` (Node annotation) puts it back on a kernel port, traffic still flows;
//!   a bad value is named in the status' errors and `auto` is used;
//! - an uplink that cannot open as AF_XDP (a Linux bridge device on a bridge `br-x`, with
//!   `afxdp.mode: native`: no native XDP there): the agent puts it back on a kernel port,
//!   the status names the OVS error, a `UplinkFallback` Warning event is sent; with
//!   `afxdp.mode: best-effort` (new inputs) it is tried again and opens (generic XDP);
//! - an uplink port without our mark is never changed, and the status says why;
//! - a bridge with two device ports: nothing is changed, and the status names them.

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use tests::node_status::{events, has_event, set_config, wait_status};
use tests::zovn::{Zovn, wait_until};

const BINS: &[&str] = &[
    "/usr/lib/openvswitch-switch/ovs-vswitchd",
    "ovsdb-server",
    "ovn-northd",
    "ovn-controller",
    "ovs-vsctl",
];

fn vsctl(dir: &std::path::Path, node: usize, args: &[&str]) -> String {
    let db = format!("--db=unix:{}/node{node}/run/db.sock", dir.display());
    let out = Command::new("ovs-vsctl")
        .arg(&db)
        .args(args)
        .output()
        .expect("ovs-vsctl");
    assert!(
        out.status.success(),
        "ovs-vsctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// (type, error, ofport) of Interface `port` on node `node`.
fn iface(dir: &std::path::Path, node: usize, port: &str) -> (String, String, String) {
    let v = vsctl(
        dir,
        node,
        &["get", "Interface", port, "type", "error", "ofport"],
    );
    let mut l = v.lines().map(|s| s.trim().trim_matches('"').to_string());
    (
        l.next().unwrap_or_default(),
        l.next().unwrap_or_default(),
        l.next().unwrap_or_default(),
    )
}

/// Pod `from` reaches `ip:8080` (its responder answers with the pod's name), within 20 s.
fn reaches(z: &Zovn, from: &str, ip: &str, name: &str) {
    let t0 = std::time::Instant::now();
    loop {
        let last = match z.probe(from, &format!("{ip}:8080"), false) {
            Ok(out) if out.contains(name) => return,
            Ok(out) | Err(out) => out,
        };
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{from} → {ip}:8080 ({name}) not reached: {last}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn the_uplink_is_afxdp_on_userspace_nodes_and_falls_back_with_a_reason() {
    if !tests::require_real(
        "uplink_lab_the_uplink_is_afxdp_on_userspace_nodes_and_falls_back_with_a_reason",
        BINS,
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("upl");
    let (z, _down) = tests::zovn::cli_up(&s, &["--nodes", "2", "--datapath", "afxdp,kernel"]);
    let (dir, p) = (z.dir.clone(), s.prefix.clone());
    let (n1, n2) = (format!("{p}-node1"), format!("{p}-node2"));
    let (u1, u2) = (format!("{p}u1"), format!("{p}u2"));

    // node 1: AF_XDP uplink, open; node 2: kernel port
    let st = wait_status(&z, &n1, "AF_XDP uplink", |s| s["uplink"]["type"] == "afxdp");
    assert_eq!(st["uplink"]["port"], u1.as_str(), "{st:#}");
    assert_eq!(st["uplink"]["bridge"], "br-phy");
    assert_eq!(st["uplink"]["queues"], 1, "a veth has one receive queue");
    let (t, err, ofport) = iface(&dir, 1, &u1);
    assert_eq!(t, "afxdp");
    assert!(
        err == "[]" && ofport.parse::<i64>().is_ok_and(|o| o > 0),
        "{err} {ofport}"
    );
    let st2 = wait_status(&z, &n2, "kernel uplink", |s| {
        s["uplink"]["type"] == "system"
    });
    assert!(
        st2["uplink"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("kernel datapath")),
        "{st2:#}"
    );
    assert_eq!(iface(&dir, 2, &u2).0, "");
    assert!(
        has_event(&events(&z), &n1, "UplinkAfxdp", &u1),
        "no UplinkAfxdp event"
    );
    let table = z.ok(&["get", "nodes"]);
    assert!(
        table.contains("UPLINK") && table.contains(&format!("{u1}/afxdp")),
        "{table}"
    );
    assert!(table.contains(&format!("{u2}/system")), "{table}");

    // pods on both nodes talk through the tunnel, over node 1's AF_XDP uplink
    let f = s.dir.path().join("pods.yaml");
    let pod = |name: &str, node: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
             spec: {{nodeName: {node}, containers: [{{name: c, ports: [{{containerPort: 8080}}]}}]}}\n"
        )
    };
    std::fs::write(&f, format!("{}---\n{}", pod("a1", &n1), pod("k2", &n2))).expect("write");
    z.ok(&["apply", "-f", f.to_str().expect("utf-8"), "--wait"]);
    let pods = z.wait_ready(&["default/a1", "default/k2"], Duration::from_secs(60));
    let ip = |k: &str| tests::zovn::pod_ip(&pods[k]);
    let (a1, k2) = (ip("default/a1"), ip("default/k2"));
    reaches(&z, "default/a1", &k2, "k2");
    reaches(&z, "default/k2", &a1, "a1");

    // `uplink: kernel` takes it back; a bad value is named, auto used
    set_config(&z, &n1, &json!({"uplink": "kernel"}));
    wait_status(&z, &n1, "kernel uplink asked for", |s| {
        s["uplink"]["type"] == "system"
            && s["uplink"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("uplink: kernel"))
    });
    assert_eq!(iface(&dir, 1, &u1).0, "system");
    reaches(&z, "default/a1", &k2, "k2");
    set_config(&z, &n1, &json!({"uplink": "fast"}));
    let st = wait_status(&z, &n1, "bad value named, auto used", |s| {
        s["uplink"]["type"] == "afxdp"
            && s["errors"].as_array().is_some_and(|e| {
                e.iter().any(|e| {
                    e.as_str()
                        .is_some_and(|e| e.contains("uplink \"fast\" is not one of"))
                })
            })
    });
    assert_eq!(st["uplink"]["port"], u1.as_str());
    reaches(&z, "default/k2", &a1, "a1");

    // an uplink that cannot open as AF_XDP: a Linux bridge device (no native XDP) on
    // br-x, node 1's agent restarted to manage br-x with afxdp.mode native
    let ns = format!("{p}n1");
    let bad = format!("{p}xb0");
    let ip_n = |args: &[&str]| {
        let ok = Command::new("ip")
            .args(["-n", &ns])
            .args(args)
            .status()
            .expect("ip")
            .success();
        assert!(ok, "ip -n {ns} {args:?}");
    };
    ip_n(&["link", "add", &bad, "type", "bridge"]);
    ip_n(&["link", "set", &bad, "up"]);
    vsctl(
        &dir,
        1,
        &[
            "add-br",
            "br-x",
            "--",
            "set",
            "bridge",
            "br-x",
            "datapath_type=netdev",
            "--",
            "add-port",
            "br-x",
            &bad,
            "--",
            "set",
            "port",
            &bad,
            "external_ids:zstack.io/owner=zstack-ovn-node",
        ],
    );
    set_config(&z, &n1, &json!({"afxdp": {"mode": "native"}}));
    let mut lab = lab::Lab::open(&dir).expect("open lab");
    let agent = tests::workspace_bin("zstack-ovnkube-node");
    let shim = tests::workspace_bin("zstack-ovn-cni");
    lab.restart_agent_with(1, &agent, Some(&shim), |a| {
        a.extend(["--gateway-interface".into(), "br-x".into()]);
    })
    .expect("restart agent 1 on br-x");
    let st = wait_status(&z, &n1, "fallback to a kernel port", |s| {
        s["uplink"]["port"] == bad.as_str() && s["uplink"]["type"] == "system"
    });
    let reason = st["uplink"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("did not open as AF_XDP")
            && reason.contains("could not add network device"),
        "{st:#}"
    );
    assert_eq!(iface(&dir, 1, &bad).0, "system", "a kernel port again");
    wait_until("UplinkFallback event", Duration::from_secs(10), || {
        has_event(&events(&z), &n1, "UplinkFallback", &bad)
    });
    // new inputs: tried again, generic XDP opens
    set_config(&z, &n1, &json!({"afxdp": {"mode": "best-effort"}}));
    let st = wait_status(&z, &n1, "AF_XDP on br-x (best-effort)", |s| {
        s["uplink"]["port"] == bad.as_str() && s["uplink"]["type"] == "afxdp"
    });
    assert_eq!(st["uplink"]["xdpMode"], "best-effort");
    let (_, err, ofport) = iface(&dir, 1, &bad);
    assert!(
        err == "[]" && ofport.parse::<i64>().is_ok_and(|o| o > 0),
        "{err} {ofport}"
    );

    // not ours: never changed, and said so
    vsctl(
        &dir,
        1,
        &["remove", "port", &bad, "external_ids", "zstack.io/owner"],
    );
    set_config(
        &z,
        &n1,
        &json!({"afxdp": {"mode": "best-effort"}, "uplink": "kernel"}),
    );
    let st = wait_status(&z, &n1, "foreign uplink left alone", |s| {
        s["uplink"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not marked as the agent's"))
    });
    assert_eq!(st["uplink"]["type"], "afxdp", "{st:#}");
    assert_eq!(iface(&dir, 1, &bad).0, "afxdp");

    // two device ports: nothing changed, both named
    let second = format!("{p}xb1");
    ip_n(&["link", "add", &second, "type", "bridge"]);
    vsctl(&dir, 1, &["add-port", "br-x", &second]);
    let st = wait_status(&z, &n1, "two device ports named", |s| {
        s["uplink"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("2 device ports"))
    });
    let reason = st["uplink"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(&bad) && reason.contains(&second), "{st:#}");
    assert_eq!(iface(&dir, 1, &second).0, "");

    // back on br-phy: still AF_XDP (nothing of this run changed it since)
    vsctl(&dir, 1, &["del-br", "br-x"]);
    set_config(&z, &n1, &json!({}));
    lab.restart_agent_with(1, &agent, Some(&shim), |_| {})
        .expect("restart agent 1");
    wait_status(&z, &n1, "br-phy's uplink again", |s| {
        s["uplink"]["port"] == u1.as_str() && s["uplink"]["type"] == "afxdp"
    });
    reaches(&z, "default/k2", &a1, "a1");
}
