//! Datapath observability on real components.
//!
//! - `unixctl_and_collect_on_real_vswitchd`: a 1-node lab on ovs-vswitchd-dpdk; the
//!   unixctl client runs `version`, `dpif-netdev/pmd-stats-show`, `pmd-rxq-show`,
//!   `pmd-perf-show` and an unknown command (an error naming socket and command). Two
//!   namespaces joined by two `type=afxdp` ports on a bridge of the test (marked like the
//!   agent's pod ports) carry pings: the collected snapshot shows the PMD thread's packet
//!   and cycle counters and both ports' rx/tx counters growing by at least the pings
//!   sent, and both rx queues on the PMD. A SIGSTOPped vswitchd gives a bounded timeout and
//!   `vswitchd_up = false`; a missing socket a connect error.
//! - `agent_metrics_with_pod_traffic`: the lab's node agent (`--vswitchd-ctl`, `/metrics`
//!   on the node netns loopback) on a 1-node lab with `--datapath dpdk`; two pods with
//!   `network.zstack.io/datapath: afxdp`, wired by the lab runtime through the real shim,
//!   ping each other: `/metrics` shows their ports' packet counters growing by at least
//!   the pings, the PMD thread's packets and busy cycles; while vswitchd is SIGSTOPped the
//!   page still answers, within the collection bound, with `zstack_ovn_vswitchd_up 0`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use dataplane::datapath::metrics::{
    COLLECT_TIMEOUT, DatapathSnapshot, MIN_COLLECT_INTERVAL, PortSource, collect, connect_db,
};
use dataplane::ovs::unixctl::{Unixctl, UnixctlError};
use lab::{Dpdk, Lab, LabConfig, NodeState};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use ovsdb::pmd_stats::{PmdThread, parse_pmd_rxq, parse_pmd_stats};
use serde_json::json;
use tests::sh;

/// Undoes what a test set up, also on panic: SIGCONT for stopped daemons, test
/// namespaces, the lab (with its agent).
struct Cleanup {
    dir: PathBuf,
    netns: Vec<String>,
    stopped: Vec<i32>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for pid in self.stopped.drain(..) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
        for n in &self.netns {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        if let Ok(lab) = Lab::open(&self.dir) {
            let _ = lab.down();
        }
    }
}

fn vswitchd_pid(node: &NodeState) -> i32 {
    node.daemons
        .iter()
        .find(|d| d.name.contains("ovs-vswitchd"))
        .map(|d| d.pid)
        .expect("ovs-vswitchd pid")
}

fn lab_up(scratch: &tests::Scratch, set: impl FnOnce(&mut LabConfig)) -> (Lab, Cleanup) {
    let dir = scratch.dir.path().join("lab");
    let mut cfg = LabConfig::new(dir.clone(), &scratch.prefix);
    set(&mut cfg);
    let mut lab = Lab::up(cfg).expect("lab up");
    lab.keep_running();
    let cleanup = Cleanup {
        dir,
        netns: Vec::new(),
        stopped: Vec::new(),
    };
    (lab, cleanup)
}

/// Polls `collect` until `cond` holds (bounded; vswitchd refreshes Interface statistics
/// every 5 s).
async fn collect_until(
    ctl: &Unixctl,
    db: &ovsdb::Client,
    within: Duration,
    what: &str,
    cond: impl Fn(&DatapathSnapshot) -> bool,
) -> DatapathSnapshot {
    let t = Instant::now();
    loop {
        let s = collect(ctl, PortSource::Db(db)).await;
        if cond(&s) {
            return s;
        }
        assert!(
            t.elapsed() < within,
            "{what} not seen within {within:?}: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn port<'a>(
    s: &'a DatapathSnapshot,
    name: &str,
) -> Option<&'a dataplane::datapath::metrics::PortStats> {
    s.ports.iter().find(|p| p.port == name)
}

fn counter(s: &DatapathSnapshot, port_name: &str, key: &str) -> u64 {
    port(s, port_name).and_then(|p| p.get(key)).unwrap_or(0)
}

fn pmd_packets(s: &DatapathSnapshot) -> u64 {
    s.pmd
        .iter()
        .filter(|t| matches!(t.thread, PmdThread::Pmd { .. }))
        .map(|t| t.packets_received)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unixctl_and_collect_on_real_vswitchd() {
    if !tests::require_real(
        "datapath_metrics::unixctl_and_collect_on_real_vswitchd",
        tests::LAB_BINS,
    ) {
        return;
    }
    let _lock = tests::heavy_lock();
    let scratch = tests::scratch("dpm");
    // DPDK set up by the lab itself: no agent here
    let (lab, mut cleanup) = lab_up(&scratch, |c| c.dpdk = Dpdk::All);
    let node = lab.node(1).expect("node 1").clone();
    let sock = node.dir.join("run/ovs-vswitchd.ctl");
    let ctl = Unixctl::new(&sock).with_timeout(Duration::from_secs(2));

    // plain commands
    let v = ctl.call("version", &[]).await.expect("version");
    assert!(v.contains("Open vSwitch") && v.contains("3."), "{v}");
    let stats = ctl
        .call("dpif-netdev/pmd-stats-show", &[])
        .await
        .expect("pmd-stats-show");
    let threads = parse_pmd_stats(&stats).expect("parse pmd-stats-show");
    assert!(
        threads.iter().any(|t| t.thread == PmdThread::Main),
        "{stats}"
    );
    let rxq = ctl
        .call("dpif-netdev/pmd-rxq-show", &[])
        .await
        .expect("pmd-rxq-show");
    assert_eq!(
        parse_pmd_rxq(&rxq).expect("parse").window_secs,
        Some(60),
        "{rxq}"
    );
    ctl.call("dpif-netdev/pmd-perf-show", &[])
        .await
        .expect("pmd-perf-show");
    match ctl.call("no-such-command", &["x"]).await {
        Err(e @ UnixctlError::Command { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains(&sock.display().to_string())
                    && m.contains("no-such-command")
                    && m.contains("is not a valid command"),
                "{m}"
            );
        }
        other => panic!("unknown command answered {other:?}"),
    }

    // traffic through two AF_XDP ports on a bridge of the test, marked like pod ports
    let p = &scratch.prefix;
    let (na, nb) = (format!("{p}a"), format!("{p}b"));
    for (ns, host, ip) in [
        (&na, format!("{p}ha"), "10.98.0.1/24"),
        (&nb, format!("{p}hb"), "10.98.0.2/24"),
    ] {
        lab::netns::add(ns).expect("add the pod's netns");
        cleanup.netns.push(ns.clone());
        lab::netns::add_veth(&host, &node.netns, "eth0", ns).expect("veth into the pod");
        lab::netns::addr_add(ns, "eth0", ip).expect("pod address");
        lab::netns::link_up(ns, "eth0").expect("pod's eth0 up");
        lab::netns::link_up(&node.netns, &host).expect("host end up");
    }
    let db_opt = format!("--db={}", node.db_remote);
    let br = format!("{p}br");
    let mut vsctl = vec![
        "ovs-vsctl".to_string(),
        db_opt.clone(),
        "add-br".into(),
        br.clone(),
        "--".into(),
        "set".into(),
        "bridge".into(),
        br.clone(),
        "datapath_type=netdev".into(),
    ];
    for (host, pod) in [
        (format!("{p}ha"), "default/a"),
        (format!("{p}hb"), "default/b"),
    ] {
        vsctl.extend(
            [
                "--",
                "add-port",
                &br,
                &host,
                "--",
                "set",
                "interface",
                &host,
                "type=afxdp",
                "options:xdp-mode=native",
            ]
            .map(String::from),
        );
        vsctl.push("external_ids:zstack.io/owner=zstack-ovn-node".into());
        vsctl.push(format!("external_ids:zstack.io/pod={pod}"));
    }
    sh(&vsctl.iter().map(String::as_str).collect::<Vec<_>>());
    let (ha, hb) = (format!("{p}ha"), format!("{p}hb"));
    let db = connect_db(&node.db_remote).await.expect("OVS db");

    // both rx queues on a PMD thread (the ports opened their XDP sockets)
    let before = collect_until(
        &ctl,
        &db,
        Duration::from_secs(20),
        "afxdp rxqs on a PMD",
        |s| {
            let on_pmd = |name: &str| {
                s.rxq
                    .pmds
                    .iter()
                    .any(|p| p.rxqs.iter().any(|q| q.port == name && q.enabled))
            };
            s.vswitchd_up && on_pmd(&ha) && on_pmd(&hb) && port(s, &ha).is_some()
        },
    )
    .await;
    let pings = 200u64;
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &na,
            "ping",
            "-q",
            "-c",
            &pings.to_string(),
            "-i",
            "0.005",
        ])
        .arg("10.98.0.2")
        .output()
        .expect("ping");
    assert!(
        out.status.success(),
        "ping through the afxdp ports: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let after = collect_until(&ctl, &db, Duration::from_secs(15), "port counters", |s| {
        counter(s, &ha, "rx_packets") >= counter(&before, &ha, "rx_packets") + pings
            && counter(s, &hb, "tx_packets") >= counter(&before, &hb, "tx_packets") + pings
            && counter(s, &hb, "rx_packets") >= counter(&before, &hb, "rx_packets") + pings
            && counter(s, &ha, "tx_packets") >= counter(&before, &ha, "tx_packets") + pings
    })
    .await;
    // every echo request and reply crossed the PMD
    assert!(
        pmd_packets(&after) >= pmd_packets(&before) + 2 * pings,
        "PMD packets {} -> {}",
        pmd_packets(&before),
        pmd_packets(&after)
    );
    let pmd = after
        .pmd
        .iter()
        .find(|t| matches!(t.thread, PmdThread::Pmd { .. }))
        .expect("a PMD thread");
    assert!(pmd.processing_cycles.unwrap_or(0) > 0 && pmd.idle_cycles.is_some());
    assert!(pmd.avg_cycles_per_packet.unwrap_or(0.0) > 0.0);
    let pa = port(&after, &ha).expect("port a");
    assert_eq!(pa.pod, "default/a");
    assert_eq!(pa.kind, "afxdp");
    // 84-byte IP packets (56 bytes of ping payload), with or without the Ethernet header
    let grew = pa.get("rx_bytes").unwrap_or(0) - counter(&before, &ha, "rx_bytes");
    assert!(
        grew >= pings * 84,
        "rx_bytes grew by {grew} for {pings} pings"
    );
    // the agent's own ports only: foreign interfaces (br itself) are not listed
    assert!(port(&after, &br).is_none());

    // a stopped vswitchd: bounded, reported down
    let pid = vswitchd_pid(&node);
    kill(Pid::from_raw(pid), Signal::SIGSTOP).expect("SIGSTOP vswitchd");
    cleanup.stopped.push(pid);
    let short = Unixctl::new(&sock).with_timeout(Duration::from_millis(500));
    let t = Instant::now();
    match short.call("version", &[]).await {
        Err(e @ UnixctlError::Timeout { .. }) => {
            assert!(e.to_string().contains("version"), "{e}")
        }
        other => panic!("a stopped vswitchd answered {other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let down = collect(
        &Unixctl::new(&sock).with_timeout(COLLECT_TIMEOUT),
        PortSource::Db(&db),
    )
    .await;
    assert!(!down.vswitchd_up, "{down:?}");
    assert!(
        down.vswitchd_error
            .as_deref()
            .unwrap_or("")
            .contains("no reply")
    );
    assert!(
        t.elapsed() < COLLECT_TIMEOUT + Duration::from_secs(1),
        "{:?}",
        t.elapsed()
    );
    kill(Pid::from_raw(pid), Signal::SIGCONT).expect("SIGCONT vswitchd");
    cleanup.stopped.clear();
    ctl.call("version", &[])
        .await
        .expect("version after SIGCONT");

    match Unixctl::new(node.dir.join("run/missing.ctl"))
        .call("version", &[])
        .await
    {
        Err(e @ UnixctlError::Connect { .. }) => assert!(e.to_string().contains("missing.ctl")),
        other => panic!("a missing socket gave {other:?}"),
    }
    db.close().await;
    drop(cleanup);
}

/// `GET /metrics` from inside netns `ns` (the agent listens on the node netns' loopback).
fn scrape(ns: &str, addr: &str) -> String {
    let (ns, addr) = (ns.to_string(), addr.to_string());
    std::thread::spawn(move || {
        let f = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("open netns");
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let mut s = std::net::TcpStream::connect(&addr).expect("connect metrics");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
        let mut body = String::new();
        s.read_to_string(&mut body).expect("read");
        body
    })
    .join()
    .expect("scrape thread")
}

/// The value of the sample `name{labels}` (labels as printed), if present.
fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Samples of metric `name` by label string.
fn samples(text: &str, name: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, v) = rest.split_once("} ")?;
            Some((labels.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

#[test]
fn agent_metrics_with_pod_traffic() {
    if !tests::require_real(
        "datapath_metrics::agent_metrics_with_pod_traffic",
        tests::LAB_BINS,
    ) {
        return;
    }
    let _lock = tests::heavy_lock();
    let scratch = tests::scratch("dpa");
    // the agent configures DPDK itself (the lab's --datapath dpdk)
    let (mut lab, mut cleanup) = lab_up(&scratch, |c| c.datapath = vec!["dpdk".into()]);
    let zovn = tests::workspace_bin("zovn");
    lab.start_apiserver(&zovn).expect("object store");
    let node = lab.node(1).expect("node").clone();
    let dir = scratch.dir.path().join("lab");
    let layout = lab::state::Layout::new(&dir);
    lab::apiserver::ApiClient::connect(&dir)
        .expect("object store client")
        .apply(vec![json!({
            "apiVersion": "network.zstack.io/v1", "kind": "Subnet",
            "metadata": {"name": "dpa"},
            "spec": {"cidr": "10.61.0.0/16", "gateway": "10.61.0.1", "default": true}})])
        .expect("apply Subnet");
    // the lab's own agent: --vswitchd-ctl, --datapath-config, /metrics on the node
    // netns loopback
    let agents = lab
        .start_agents(
            &tests::workspace_bin("zstack-ovnkube-node"),
            Some(&tests::workspace_bin("zstack-ovn-cni")),
        )
        .expect("start the agent");
    let agent_log_path = agents[0].log_file.clone();
    let agent_log = || std::fs::read_to_string(&agent_log_path).unwrap_or_default();
    let addr = format!("127.0.0.1:{}", lab::agent::AGENT_METRICS_PORT);
    let t = Instant::now();
    while !agent_log().contains("metrics listening") {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "agent not serving /metrics:\n{}",
            agent_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // two AF_XDP pods, wired by the lab's runtime through the real shim and the agent
    for pod in ["pa", "pb"] {
        lab::apiserver::ApiClient::connect(&dir)
            .expect("client")
            .apply(vec![json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": "default",
                    "annotations": {"network.zstack.io/datapath": "afxdp"}},
                "spec": {"nodeName": node.system_id, "containers": []}})])
            .expect("apply pod");
    }
    let t = Instant::now();
    let recs = loop {
        let file = lab::pods::record::PodsFile::load(&layout.pods_file()).expect("pods file");
        let recs: Vec<_> = ["pa", "pb"]
            .iter()
            .filter_map(|p| {
                file.pod(&format!("default/{p}"))
                    .filter(|r| r.ready)
                    .cloned()
            })
            .collect();
        if recs.len() == 2 {
            break recs;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "pods not ready: {:?}\n{}",
            file.pods
                .values()
                .map(|r| (&r.key, &r.message))
                .collect::<Vec<_>>(),
            agent_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let ips: Vec<String> = recs
        .iter()
        .map(|r| r.ips[0].split('/').next().expect("address").to_string())
        .collect();
    let hosts: Vec<String> = recs
        .iter()
        .map(|r| {
            r.result
                .as_ref()
                .and_then(|v| v["interfaces"][0]["name"].as_str())
                .expect("host interface in the CNI result")
                .to_string()
        })
        .collect();
    let ns_a = recs[0].netns.clone();
    // fast start: the ports answered on the kernel path; counters are the AF_XDP ports'
    // once ovs-vswitchd has confirmed both switches (the agent logs each)
    let t = Instant::now();
    while !["default/pa", "default/pb"].iter().all(|p| {
        agent_log()
            .lines()
            .any(|l| l.contains("pod port moved to AF_XDP") && l.contains(p))
    }) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the pods' ports were not moved to AF_XDP:\n{}",
            agent_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let rx = |text: &str, i: usize| {
        sample(
            text,
            &format!(
                "zstack_ovn_port_rx_packets_total{{port=\"{}\",pod=\"default/{}\"}}",
                hosts[i],
                ["pa", "pb"][i]
            ),
        )
    };
    let first = scrape(&node.netns, &addr);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert_eq!(
        sample(&first, "zstack_ovn_vswitchd_up"),
        Some(1.0),
        "{first}"
    );
    let rx0 = rx(&first, 0).unwrap_or_else(|| panic!("no rx counter for pod a:\n{first}"));

    let pings = 100u64;
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns_a,
            "ping",
            "-q",
            "-c",
            &pings.to_string(),
            "-i",
            "0.01",
        ])
        .arg(&ips[1])
        .output()
        .expect("ping");
    assert!(
        out.status.success(),
        "pod a -> b: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // counters refresh every 5 s in vswitchd: wait for the growth
    let t = Instant::now();
    let text = loop {
        let text = scrape(&node.netns, &addr);
        if rx(&text, 0).is_some_and(|v| v >= rx0 + pings as f64) {
            break text;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "pod a's rx_packets did not grow by {pings} from {rx0}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let tx_b = sample(
        &text,
        &format!(
            "zstack_ovn_port_tx_packets_total{{port=\"{}\",pod=\"default/pb\"}}",
            hosts[1]
        ),
    )
    .expect("tx counter of pod b");
    assert!(tx_b >= pings as f64, "{tx_b}");
    // the pods got AF_XDP ports: a PMD thread forwarded the pings, with cycle counters
    for h in &hosts {
        let t = sh(&[
            "ovs-vsctl",
            &format!("--db={}", node.db_remote),
            "get",
            "Interface",
            h,
            "type",
        ]);
        assert_eq!(t.trim(), "afxdp", "port {h}:\n{}", agent_log());
    }
    let pkts = samples(&text, "zstack_ovn_pmd_packets_total");
    let (core_labels, pmd_pkts) = pkts
        .iter()
        .find(|(l, _)| !l.contains("core=\"main\""))
        .unwrap_or_else(|| panic!("no PMD thread in {pkts:?}"));
    assert!(*pmd_pkts >= 2.0 * pings as f64, "{core_labels}: {pmd_pkts}");
    let busy = sample(
        &text,
        &format!("zstack_ovn_pmd_cycles_total{{{core_labels},kind=\"busy\"}}"),
    )
    .unwrap_or_else(|| panic!("no busy cycles for {core_labels}:\n{text}"));
    assert!(busy > 0.0, "{busy}");
    let rxqs = samples(&text, "zstack_ovn_pmd_rxq_usage_percent");
    assert!(
        rxqs.keys().all(|l| l.contains("core="))
            && rxqs.values().all(|v| (0.0..=100.0).contains(v)),
        "{rxqs:?}"
    );
    let lookups = samples(&text, "zstack_ovn_pmd_lookups_total");
    assert!(!lookups.is_empty(), "{text}");
    let scrape_s = sample(&text, "zstack_ovn_datapath_scrape_seconds").expect("scrape time");
    assert!(scrape_s < COLLECT_TIMEOUT.as_secs_f64(), "{scrape_s}");

    // eight scrapes at once cost ovs-vswitchd at most one collection (the others share
    // it): a client of /metrics cannot keep vswitchd's main thread busy with unixctl
    let collections = |t: &str| {
        sample(t, "zstack_ovn_datapath_collections_total")
            .unwrap_or_else(|| panic!("no collections counter:\n{t}"))
    };
    let before = collections(&scrape(&node.netns, &addr));
    let burst: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| scrape(&node.netns, &addr)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("scrape"))
            .collect()
    });
    let after = burst.iter().map(|t| collections(t)).fold(0.0, f64::max);
    assert!(
        // 1, or 2 when the burst straddles the interval on a loaded machine (8 without it)
        after - before <= 2.0,
        "8 concurrent scrapes made {} collections",
        after - before
    );

    // a stopped vswitchd: the page still answers, with vswitchd_up 0, in bounded time
    // (the agent may have restarted vswitchd for DPDK: its current pid)
    let pid = vswitchd_pid(Lab::open(&dir).expect("lab").node(1).expect("node 1"));
    kill(Pid::from_raw(pid), Signal::SIGSTOP).expect("SIGSTOP vswitchd");
    cleanup.stopped.push(pid);
    // (a scrape within MIN_COLLECT_INTERVAL of the last collection gets its snapshot:
    // scrape until one collects)
    let waited = Instant::now();
    let (down, took) = loop {
        let t = Instant::now();
        let down = scrape(&node.netns, &addr);
        let took = t.elapsed();
        assert!(took < COLLECT_TIMEOUT + Duration::from_secs(2), "{took:?}");
        if sample(&down, "zstack_ovn_vswitchd_up") == Some(0.0)
            || waited.elapsed() > MIN_COLLECT_INTERVAL * 10
        {
            break (down, took);
        }
    };
    kill(Pid::from_raw(pid), Signal::SIGCONT).expect("SIGCONT vswitchd");
    cleanup.stopped.clear();
    assert!(down.starts_with("HTTP/1.1 200"), "{down}");
    assert_eq!(sample(&down, "zstack_ovn_vswitchd_up"), Some(0.0), "{down}");
    assert!(took < COLLECT_TIMEOUT + Duration::from_secs(2), "{took:?}");
    // the port counters still come from the agent's replica
    assert!(rx(&down, 0).is_some(), "{down}");
    drop(cleanup);
}
