//! The stale-megaflow fault of OVS 3.1's userspace datapath, and the agent's guard against
//! it (`dataplane::datapath::megaflow_guard`), on a real ovs-vswitchd with real UDP traffic.
//!
//! A bridge of the test joins two namespaces. Rules v1 forward udp/81 only, so udp/81
//! traffic installs a megaflow S that matches the destination port exactly. Rules v2 drop
//! everything. While the revalidators are paused, udp/80 traffic installs B, a broad drop
//! megaflow that also covers S's packets, and B is hit often enough that its classifier
//! subtable ranks first. When the revalidators resume, their "modify" of S (v2 drops) is
//! looked up by S's key and lands on B; S keeps forwarding.
//!
//! - `stale_megaflow_leaks_then_the_guard_purges_it`: first the fault itself: after the
//!   revalidators' rounds S still outputs; once B is gone (as when it idles out), udp/81
//!   packets are delivered although every rule drops them. Then the same setup again, and
//!   the guard's check: it reports the S/B pair, purges, and udp/81 is dropped (0 of 50
//!   delivered). On an OVS without the fault, S is updated by itself, and the guard must
//!   find nothing.

use std::net::UdpSocket;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dataplane::datapath::megaflow::{parse_dump, recirc_targets};
use dataplane::datapath::megaflow_guard::MegaflowGuard;
use dataplane::ovs::unixctl::Unixctl;
use lab::bare_ovs::{BareOvs, send_udp};

/// A UDP receiver on port 81 in a namespace, counting datagrams until dropped.
struct Receiver {
    count: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    fn start(ns: &str) -> Receiver {
        let sock = lab::netns::run_in(ns, || UdpSocket::bind("0.0.0.0:81"))
            .and_then(|r| r.map_err(|e| lab::LabError::io("bind :81 in", ns, e)))
            .unwrap_or_else(|e| panic!("{e}"));
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let (count, stop) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (c, st) = (count.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !st.load(Ordering::Relaxed) {
                if sock.recv(&mut buf).is_ok() {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Receiver {
            count,
            stop,
            thread: Some(thread),
        }
    }
    fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends `n` datagrams from namespace `ns` to 10.97.0.2:`port`, 2 ms apart.
fn send(ns: &str, port: u16, n: usize) {
    send_udp(ns, [port], n, Duration::from_millis(2)).unwrap_or_else(|e| panic!("{e}"));
}

/// Sends 50 udp/81 datagrams from `na` and waits (≤ 5 s) until all are counted; the
/// number delivered.
fn deliver_50(na: &str, rx: &Receiver) -> usize {
    let before = rx.count();
    send(na, 81, 50);
    let t = Instant::now();
    while rx.count() < before + 50 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    rx.count() - before
}

struct Bench {
    /// S's actions under v1 (the output to b's port, in datapath port numbers).
    v1_output: String,
    ctl: Unixctl,
    ovs: BareOvs,
    na: String,
}

impl Bench {
    async fn appctl(&self, cmd: &str, args: &[&str]) -> String {
        self.ctl
            .call(cmd, args)
            .await
            .unwrap_or_else(|e| panic!("{cmd}: {e}"))
    }

    fn rules(&self, name: &str, text: &str) {
        self.ovs
            .rules(name, text)
            .unwrap_or_else(|e| panic!("rules {name}: {e}"));
    }

    /// The datapath flows of the udp traffic: (ufid, udp dst as printed, actions, packets).
    async fn udp_flows(&self) -> Vec<(String, String, String, u64)> {
        let dump = self.appctl("dpctl/dump-flows", &["-m", "--no-names"]).await;
        parse_dump(&dump)
            .into_iter()
            .filter_map(|f| {
                let dst = f.fields.iter().find(|x| x.path == "udp.dst")?;
                let dst = match &dst.mask {
                    Some(m) => format!("{}/{m}", dst.value),
                    None => dst.value.clone(),
                };
                Some((f.ufid, dst, f.actions, f.packets))
            })
            .collect()
    }

    /// v1 with udp/81 traffic (S), then v2 installed while the revalidators are paused and
    /// udp/80 traffic installs B; then the revalidators' rounds.
    async fn stale_setup(&self, rx: &Receiver) {
        // a clean slate: no datapath flow of an earlier round
        self.appctl("revalidator/purge", &[]).await;
        self.rules(
            "v1",
            "priority=10,udp,in_port=1,tp_dst=81,actions=output:2\npriority=1,actions=drop\n",
        );
        let delivered = deliver_50(&self.na, rx);
        assert_eq!(delivered, 50, "v1: udp/81 not delivered");
        // the revalidators have seen S (its record is operational) before they pause
        self.appctl("revalidator/wait", &[]).await;
        self.appctl("revalidator/pause", &[]).await;
        self.rules("v2", "priority=1,actions=drop\n");
        // udp/80 traffic installs B and keeps hitting it until the revalidators are done:
        // dpif-netdev re-sorts a table's subtables by their hits once a second, so B's
        // subtable ranks first when S's modify is looked up
        let stop = Arc::new(AtomicBool::new(false));
        let sender = {
            let (ns, stop) = (self.na.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    send(&ns, 80, 50);
                }
            })
        };
        // a re-sort after B's first hits
        tokio::time::sleep(Duration::from_millis(1500)).await;
        self.appctl("revalidator/resume", &[]).await;
        for _ in 0..2 {
            self.appctl("revalidator/wait", &[]).await;
        }
        stop.store(true, Ordering::Relaxed);
        sender.join().expect("udp/80 sender");
    }
}

/// The bench: a bare OVS (`lab::bare_ovs`) with namespaces `<p>a` (10.97.0.1, port 1)
/// and `<p>b` (10.97.0.2, port 2) on its bridge; the caller installs the rules.
fn setup(p: &str, dir: &Path) -> Bench {
    let ovs = BareOvs::start(&dir.join("ovs"), p).unwrap_or_else(|e| panic!("bare OVS: {e}"));
    Bench {
        v1_output: ovs.b_dp_port.clone(),
        ctl: Unixctl::new(ovs.ctl()).with_timeout(Duration::from_secs(5)),
        na: ovs.na.clone(),
        ovs,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_megaflow_leaks_then_the_guard_purges_it() {
    if !tests::require_real(
        "megaflow_guard::stale_megaflow_leaks_then_the_guard_purges_it",
        tests::LAB_BINS,
    ) {
        return;
    }
    let _lock = tests::heavy_lock();
    let scratch = tests::scratch("mfg");
    let bench = setup(&scratch.prefix, scratch.dir.path());
    let (na, nb) = (bench.na.clone(), bench.ovs.nb.clone());
    let rx = Receiver::start(&nb);

    // 1. the fault: S keeps forwarding after the revalidators' rounds. It takes B's
    // subtable ranking first at the revalidators' lookup, which this bench does not
    // control: up to 3 tries; then the datapath state the fault leaves is made directly
    // (`dpctl/mod-flow` gives S its v1 actions back behind the revalidators' back).
    let mut reproduced = None;
    let mut s = None;
    for attempt in 1..=3 {
        bench.stale_setup(&rx).await;
        let flows = bench.udp_flows().await;
        s = flows.iter().find(|f| f.1 == "81").cloned();
        if s.as_ref().is_some_and(|s| s.2 != "drop") {
            reproduced = Some(attempt);
            break;
        }
    }
    let s = s.expect("S, the udp/81 flow");
    // B goes (as when it idles out): no flow overlaps S any more (and a modify by key
    // below can only find S)
    for b in bench.udp_flows().await.iter().filter(|f| f.0 != s.0) {
        bench
            .appctl("dpctl/del-flow", &[&format!("ufid:{}", b.0)])
            .await;
    }
    if reproduced.is_none() {
        let dump = bench
            .appctl("dpctl/dump-flows", &["-m", "--no-names"])
            .await;
        let flow = parse_dump(&dump)
            .into_iter()
            .find(|f| f.ufid == s.0)
            .expect("S in the dump");
        bench
            .appctl(
                "dpctl/mod-flow",
                &[&format!("ufid:{},{}", s.0, flow.matched), &bench.v1_output],
            )
            .await;
    }
    eprintln!(
        "stale S: {}",
        match reproduced {
            Some(n) => format!("the fault itself, on try {n}"),
            None => "made with dpctl/mod-flow (the fault did not show in 3 tries)".into(),
        }
    );
    let flows = bench.udp_flows().await;
    let leaked = deliver_50(&na, &rx);
    eprintln!("stale S delivered {leaked} of 50 udp/81 datagrams under drop-all rules");
    assert_eq!(leaked, 50, "the stale flow should forward: {flows:?}");

    // 2. the guard: S's actions differ from its trace; purged, and udp/81 is dropped
    let mut guard =
        MegaflowGuard::new(Unixctl::new(bench.ovs.ctl()).with_timeout(Duration::from_secs(5)));
    let check = guard.check().await.expect("guard check");
    eprintln!("guard: {check:?}");
    assert!(check.purged, "stale S not found: {check:?}");
    assert!(
        check.stale.iter().any(|x| x.0 == s.0 && x.2 == "drop"),
        "S {} not among the stale flows {:?}",
        s.0,
        check.stale
    );
    let before = rx.count();
    send(&na, 81, 50);
    let t = Instant::now();
    loop {
        let flows = bench.udp_flows().await;
        let forwarded: Vec<_> = flows.iter().filter(|f| f.2 != "drop").collect();
        assert!(
            forwarded.is_empty(),
            "a udp flow still forwards after the guard: {forwarded:?}"
        );
        // the first datagram goes through the upcall, the other 49 through the new flow
        let dropped: u64 = flows.iter().map(|f| f.3).sum();
        if dropped >= 49 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "udp/81 not accounted to drop flows: {flows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        rx.count() - before,
        0,
        "udp/81 delivered after the guard's purge"
    );
    // a check with nothing stale finds nothing and purges nothing
    let again = guard.check().await.expect("second check");
    assert!(
        !again.purged && again.conflicts.is_empty() && again.stale.is_empty(),
        "{again:?}"
    );
    drop(rx);
    drop(bench);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_recirculation_blackholes_then_the_guard_purges_it() {
    if !tests::require_real(
        "megaflow_guard::unknown_recirculation_blackholes_then_the_guard_purges_it",
        tests::LAB_BINS,
    ) {
        return;
    }
    let _lock = tests::heavy_lock();
    let scratch = tests::scratch("mfr");
    let bench = setup(&scratch.prefix, scratch.dir.path());
    let (na, nb) = (bench.na.clone(), bench.ovs.nb.clone());
    let rx = Receiver::start(&nb);
    // udp/81 through conntrack, as OVN's ACL stages do: a first pass that recirculates,
    // and a second one that forwards
    bench.rules(
        "ct",
        "table=0,priority=10,udp,in_port=1,ct_state=-trk,actions=ct(table=1,zone=5)\n\
         table=0,priority=1,actions=drop\n\
         table=1,priority=10,udp,in_port=1,ct_state=+trk,actions=output:2\n\
         table=1,priority=1,actions=drop\n",
    );
    assert_eq!(deliver_50(&na, &rx), 50, "udp/81 through conntrack");
    let dump = bench
        .appctl("dpctl/dump-flows", &["-m", "--no-names"])
        .await;
    let first = parse_dump(&dump)
        .into_iter()
        .find(|f| f.actions.contains("recirc("))
        .unwrap_or_else(|| panic!("no recirculating flow in {dump}"));

    let first_id = recirc_targets(&first.actions)
        .next()
        .expect("a recirculation id")
        .to_string();
    eprintln!(
        "recirculating flow: {} actions {}",
        first.ufid, first.actions
    );
    // The state the fault leaves (a revalidator modify that landed on another flow, the
    // frozen state of this flow's continuation freed since): OVS offers no way to force
    // the race, so the flow is given a recirculation id ovs-vswitchd never allocated.
    let unknown = "0xdead00";
    bench
        .appctl(
            "dpctl/mod-flow",
            &[
                &format!("ufid:{},{}", first.ufid, first.matched),
                &first.actions.replace(
                    &format!("recirc({})", first_id),
                    // the action parser takes the id in decimal only
                    &format!("recirc({})", 0xdead00),
                ),
            ],
        )
        .await;
    let drops = |c: &str| c.trim().parse::<u64>().unwrap_or(0);
    let counter = "datapath_drop_upcall_error";
    let lost_before = drops(&bench.appctl("coverage/read-counter", &[counter]).await);
    let delivered = deliver_50(&na, &rx);
    eprintln!("a flow recirculating to an unknown id delivered {delivered} of 50");
    assert_eq!(
        delivered, 0,
        "the unknown recirculation should drop everything"
    );
    // what starts the guard's check in the agent: the counter of those drops moves (the
    // coverage counters are summed once a second)
    let t = Instant::now();
    loop {
        let lost = drops(&bench.appctl("coverage/read-counter", &[counter]).await);
        if lost > lost_before {
            eprintln!("{counter}: {lost_before} -> {lost}");
            break;
        }
        if t.elapsed() > Duration::from_secs(5) {
            let all = bench.appctl("coverage/show", &[]).await;
            panic!("{counter} did not move: {all}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut guard =
        MegaflowGuard::new(Unixctl::new(bench.ovs.ctl()).with_timeout(Duration::from_secs(5)));
    let check = guard.check().await.expect("guard check");
    eprintln!("guard: {check:?}");
    assert!(
        check.purged,
        "the unknown recirculation was not found: {check:?}"
    );
    assert!(
        check
            .dangling
            .iter()
            .any(|d| d.0 == first.ufid && d.2 == unknown),
        "{} not among the flows with an unknown recirculation: {:?}",
        first.ufid,
        check.dangling
    );
    assert_eq!(
        deliver_50(&na, &rx),
        50,
        "udp/81 after the guard's purge (fresh translations)"
    );
    let again = guard.check().await.expect("second check");
    assert!(
        !again.purged && again.dangling.is_empty() && again.stale.is_empty(),
        "{again:?}"
    );
    drop(rx);
    drop(bench);
}
