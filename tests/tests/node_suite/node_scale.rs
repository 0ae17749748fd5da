//! A full node's costs on real components (issue #33), on a 1-node lab of the chart's
//! default kind (`--datapath afxdp`, plain ovs-vswitchd, AF_XDP pod ports):
//!
//! - `afxdp_budget_and_adaptive_pmd_sleep`:
//!   - with `afxdp.maxPorts: 2` in the agent's file, three pods applied at once get two
//!     AF_XDP ports and one kernel port whose `zstack.io/datapath-reason` names the budget,
//!     with a Normal `AfxdpBudgetReached` event, the fallback counter and the
//!     `zstack_ovn_afxdp_ports` gauges; the kernel pod and an AF_XDP pod talk; a deleted
//!     AF_XDP pod frees its slot for the next pod;
//!   - with `pmdMaxSleep: auto` the idle node's `pmd-maxsleep` is the idle value, a ping
//!     flood between two AF_XDP pods switches it to 0 (busy polling) while it runs and
//!     the agent puts it back after the quiet period; the switches are counted.
//!
//! Needs root, OVS, OVN.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::node_status::wait_status;
use tests::zovn::Zovn;

use super::datapath::{
    apply, ip_of, node_metrics, pings, set_file_config_for, subnet_and_pods, up, wait_event,
};
use dataplane::datapath::pmd_sleep::{IDLE_SLEEP_US, QUIET_FOR};

const BINS: &[&str] = &[
    "/usr/lib/openvswitch-switch/ovs-vswitchd",
    "ovsdb-server",
    "ovn-northd",
    "ovn-controller",
    "ovs-vsctl",
];

/// The pod's OVS Interface on node 1: (type, external_ids).
fn iface(z: &Zovn, pod: &str) -> Option<(String, BTreeMap<String, String>)> {
    let db = format!("unix:{}/node1/run/db.sock", z.dir.display());
    let out = Command::new("ovs-vsctl")
        .args([
            &format!("--db={db}"),
            "--format=json",
            "--columns=type,external_ids",
            "find",
            "Interface",
            &format!("external_ids:zstack.io/pod=\"default/{pod}\""),
        ])
        .output()
        .expect("ovs-vsctl");
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let row = v["data"][0].as_array()?.clone();
    let ids = row[1][1]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[0].as_str()?.to_string(), p[1].as_str()?.to_string())))
        .collect();
    Some((row[0].as_str().unwrap_or("").to_string(), ids))
}

/// Waits until every pod's port has settled (no move pending); their types by pod.
fn settled_types(z: &Zovn, pods: &[&str]) -> BTreeMap<String, (String, BTreeMap<String, String>)> {
    let t0 = Instant::now();
    loop {
        let all: BTreeMap<_, _> = pods
            .iter()
            .filter_map(|p| Some((p.to_string(), iface(z, p)?)))
            .collect();
        if all.len() == pods.len()
            && all
                .values()
                .all(|(_, ids)| !ids.contains_key("zstack.io/datapath-pending"))
        {
            return all;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "ports not settled after 60 s: {all:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `pmd-maxsleep` of node 1's Open_vSwitch row.
fn pmd_maxsleep(z: &Zovn) -> Option<String> {
    let db = format!("unix:{}/node1/run/db.sock", z.dir.display());
    let out = Command::new("ovs-vsctl")
        .args([
            &format!("--db={db}"),
            "--if-exists",
            "get",
            "Open_vSwitch",
            ".",
            "other_config:pmd-maxsleep",
        ])
        .output()
        .expect("ovs-vsctl");
    let v = String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_matches('"')
        .to_string();
    (!v.is_empty()).then_some(v)
}

fn wait_maxsleep(z: &Zovn, want: &str, within: Duration, what: &str) -> Duration {
    let t0 = Instant::now();
    loop {
        let have = pmd_maxsleep(z);
        if have.as_deref() == Some(want) {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < within,
            "{what}: pmd-maxsleep is {have:?}, not {want} after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of metric line `name{labels}` in `text` (0 when absent).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn afxdp_budget_and_adaptive_pmd_sleep() {
    if !tests::require_real("afxdp_budget_and_adaptive_pmd_sleep", BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let (scratch, z, _down) = up("nsc", "afxdp", "1");
    let p = scratch.prefix.clone();
    let n1 = format!("{p}-node1");
    set_file_config_for(
        &z,
        "afxdp",
        json!({"afxdp": {"maxPorts": 2}, "pmdMaxSleep": "auto"}),
    );
    let s = wait_status(&z, &n1, "the budget and the adaptive sleep decided", |s| {
        s["afxdp"]["budget"]["maxPorts"] == 2 && s["pmdSleep"]["mode"] == "adaptive"
    });
    assert_eq!(s["datapath"], "afxdp", "{s:#}");
    assert_eq!(s["afxdp"]["budget"]["source"], "afxdp.maxPorts 2", "{s:#}");

    // three pods at once, room for two
    apply(
        &z,
        subnet_and_pods(&p, &[("a", 1, None), ("b", 1, None), ("c", 1, None)]),
    );
    let pods = z.wait_ready(
        &["default/a", "default/b", "default/c"],
        Duration::from_secs(60),
    );
    let ports = settled_types(&z, &["a", "b", "c"]);
    let on_xdp: Vec<&String> = ports
        .iter()
        .filter(|(_, (t, _))| t == "afxdp")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(on_xdp.len(), 2, "two AF_XDP ports: {ports:#?}");
    let (kernel_pod, (_, ids)) = ports
        .iter()
        .find(|(_, (t, _))| t.is_empty())
        .expect("one kernel port");
    assert_eq!(ids["zstack.io/datapath"], "kernel", "{ids:?}");
    let reason = &ids["zstack.io/datapath-reason"];
    assert!(
        reason.contains("budget") && reason.contains("2 of 2"),
        "{reason}"
    );
    wait_event(&z, kernel_pod, "AfxdpBudgetReached", "2 of 2 ports in use");
    let m = node_metrics(&p);
    assert_eq!(metric(&m, "zstack_ovn_afxdp_ports{kind=\"in_use\"}"), 2.0);
    assert_eq!(metric(&m, "zstack_ovn_afxdp_ports{kind=\"max\"}"), 2.0);
    assert_eq!(
        metric(
            &m,
            "zstack_ovn_datapath_fallbacks_total{reason=\"afxdp_budget\"}"
        ),
        1.0
    );
    // the kernel pod and an AF_XDP pod talk both ways
    pings(&z, kernel_pod, &ip_of(&pods, on_xdp[0]));
    pings(&z, on_xdp[0], &ip_of(&pods, kernel_pod));

    // adaptive sleep: idle now
    let idle = IDLE_SLEEP_US.to_string();
    wait_maxsleep(&z, &idle, Duration::from_secs(10), "idle node");
    let (xa, xb) = (on_xdp[0].clone(), on_xdp[1].clone());
    let xb_ip = ip_of(&pods, &xb);
    let flood = {
        let dir = z.dir.clone();
        let from = format!("default/{xa}");
        std::thread::spawn(move || {
            Zovn::new(&dir).run(&[
                "exec", &from, "--", "ping", "-f", "-l", "8", "-w", "6", &xb_ip,
            ])
        })
    };
    let to_busy = wait_maxsleep(&z, "0", Duration::from_secs(5), "under a ping flood");
    let (code, out, err) = flood.join().expect("flood thread");
    assert_eq!(code, 0, "ping flood: {out}{err}");
    let to_idle = wait_maxsleep(
        &z,
        &idle,
        QUIET_FOR + Duration::from_secs(5),
        "after the flood",
    );
    eprintln!(
        "adaptive PMD sleep: busy {to_busy:?} after the flood began, idle {to_idle:?} after it ended"
    );
    let m = node_metrics(&p);
    assert!(
        metric(&m, "zstack_ovn_pmd_sleep_switches_total{to=\"busy\"}") >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "zstack_ovn_pmd_sleep_switches_total{to=\"idle\"}") >= 1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "zstack_ovn_pmd_max_sleep_microseconds"),
        f64::from(IDLE_SLEEP_US)
    );

    // a deleted AF_XDP pod frees its slot
    let f = z.dir.with_extension("del-a.json");
    let del = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": xa, "namespace": "default"}});
    std::fs::write(&f, del.to_string()).expect("write manifest");
    z.ok(&["delete", "-f", f.to_str().expect("utf-8")]);
    let t0 = Instant::now();
    while iface(&z, &xa).is_some() {
        assert!(t0.elapsed() < Duration::from_secs(30), "{xa}'s port stays");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut next = subnet_and_pods(&p, &[("d", 1, None)]);
    next.remove(0);
    apply(&z, next);
    z.wait_ready(&["default/d"], Duration::from_secs(60));
    let d = settled_types(&z, &["d"]);
    assert_eq!(d["d"].0, "afxdp", "the freed slot is used: {d:#?}");
    let m = node_metrics(&p);
    assert_eq!(metric(&m, "zstack_ovn_afxdp_ports{kind=\"in_use\"}"), 2.0);
}
