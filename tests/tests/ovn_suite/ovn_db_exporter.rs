//! `zstack-ovn-dbexporter` on a real 3-member Raft OVN central (`lab::Central`, NB and SB
//! clusters, ovn-northd): one exporter per member, as the chart runs one per central pod,
//! scraped over HTTP.
//!
//! - every member reports its databases up, sizes, 3 servers, the same term; exactly one
//!   NB exporter reports its member leading; northd up and active;
//! - the NB leader SIGKILLed: its exporter reports NB down (no Raft series), and within
//!   30 s another member leads at a higher term;
//! - the member restarted: up again, a follower at that term.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::{Central, CentralConfig, Db, Signal};
use tests::e2e::metrics_page;

struct Exporters(Vec<Child>);

impl Drop for Exporters {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// The value of series `series` (name and labels, exactly) on `page`.
fn value(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Scrapes `addr` until `ok` holds for the page (bounded); the page.
fn scrape_until(addr: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let t0 = Instant::now();
    loop {
        if let Ok(page) = metrics_page(addr)
            && ok(&page)
        {
            return page;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what} on {addr}: last page {:?}",
            metrics_page(addr).ok()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts an exporter of `nb` and `sb` (and `northd`'s control socket) on a free port;
/// its address and process.
fn start_exporter(
    nb: &lab::central::Member,
    sb: &lab::central::Member,
    northd: Option<&std::path::Path>,
) -> (String, Child) {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(tests::workspace_bin("zstack-ovn-dbexporter"));
    cmd.args(["--listen", &addr])
        .arg("--nb-ctl")
        .arg(&nb.unixctl)
        .arg("--nb-file")
        .arg(&nb.db_file)
        .arg("--sb-ctl")
        .arg(&sb.unixctl)
        .arg("--sb-file")
        .arg(&sb.db_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(n) = northd {
        cmd.arg("--northd-ctl").arg(n);
    }
    (addr, cmd.spawn().expect("start the exporter"))
}

#[test]
fn the_exporter_follows_raft_roles_terms_and_a_killed_leader() {
    const T: &str = "ovn_db_exporter::the_exporter_follows_raft_roles_terms_and_a_killed_leader";
    let mut bins = tests::CENTRAL_DB_BINS.to_vec();
    bins.push("ovn-northd");
    if !tests::require_real(T, &bins) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("dbx");
    let mut central = Central::start(CentralConfig {
        dir: s.dir.path().join("central"),
        raft: true,
        northd: true,
        tcp: false,
    })
    .expect("raft central starts");
    let northd_ctl = central
        .northd()
        .and_then(|n| n.unixctl.clone())
        .expect("northd's control socket");
    let mut addrs = Vec::new();
    let mut children = Exporters(Vec::new());
    for i in 0..3 {
        let (nb, sb) = (&central.nb_members()[i], &central.sb_members()[i]);
        let (addr, child) = start_exporter(nb, sb, (i == 0).then_some(northd_ctl.as_path()));
        children.0.push(child);
        addrs.push(addr);
    }

    // every member: up, sized, 3 servers; one NB leader; one term
    let leader = central.nb_leader().expect("an NB leader");
    let mut terms = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let page = scrape_until(addr, "both databases up", |p| {
            value(p, "zstack_ovn_db_up{db=\"nb\"}") == Some(1.0)
                && value(p, "zstack_ovn_db_up{db=\"sb\"}") == Some(1.0)
        });
        for db in ["nb", "sb"] {
            assert_eq!(
                value(&page, &format!("zstack_ovn_db_raft_servers{{db=\"{db}\"}}")),
                Some(3.0),
                "member {i} {db}:\n{page}"
            );
            assert!(
                value(&page, &format!("zstack_ovn_db_file_bytes{{db=\"{db}\"}}"))
                    .is_some_and(|b| b > 0.0),
                "member {i} {db} size:\n{page}"
            );
        }
        let leads = value(&page, "zstack_ovn_db_raft_leader{db=\"nb\"}");
        assert_eq!(
            leads,
            Some(if i == leader { 1.0 } else { 0.0 }),
            "member {i} (the leader is {leader}):\n{page}"
        );
        let role = if i == leader { "leader" } else { "follower" };
        assert_eq!(
            value(
                &page,
                &format!("zstack_ovn_db_raft_role{{db=\"nb\",role=\"{role}\"}}")
            ),
            Some(1.0),
            "{page}"
        );
        terms.push(value(&page, "zstack_ovn_db_raft_term{db=\"nb\"}").expect("term"));
        if i == 0 {
            assert_eq!(value(&page, "zstack_ovn_northd_up"), Some(1.0), "{page}");
            assert_eq!(
                value(&page, "zstack_ovn_northd_active"),
                Some(1.0),
                "{page}"
            );
        }
    }
    assert!(terms.windows(2).all(|w| w[0] == w[1]), "{terms:?}");
    let term = terms[0];
    eprintln!("NB leader member {leader}, term {term}");

    // the leader killed: its exporter says so, another member leads at a higher term
    central
        .kill_member(Db::Nb, leader, Signal::SIGKILL)
        .expect("kill the leader");
    let page = scrape_until(&addrs[leader], "NB down", |p| {
        value(p, "zstack_ovn_db_up{db=\"nb\"}") == Some(0.0)
    });
    assert!(
        value(&page, "zstack_ovn_db_raft_term{db=\"nb\"}").is_none(),
        "no Raft series for a database that does not answer:\n{page}"
    );
    assert_eq!(value(&page, "zstack_ovn_db_up{db=\"sb\"}"), Some(1.0));
    let t0 = Instant::now();
    let new_leader = loop {
        let found = (0..3).filter(|i| *i != leader).find(|i| {
            metrics_page(&addrs[*i]).is_ok_and(|p| {
                value(&p, "zstack_ovn_db_raft_leader{db=\"nb\"}") == Some(1.0)
                    && value(&p, "zstack_ovn_db_raft_term{db=\"nb\"}").is_some_and(|t| t > term)
            })
        });
        if let Some(i) = found {
            break i;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no new NB leader reported within 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!(
        "member {new_leader} reported leading {:?} after the kill",
        t0.elapsed()
    );

    // the member back: up, a follower at the new term
    central
        .restart_member(Db::Nb, leader)
        .expect("restart the member");
    let page = scrape_until(&addrs[leader], "NB back as a follower", |p| {
        value(p, "zstack_ovn_db_raft_role{db=\"nb\",role=\"follower\"}") == Some(1.0)
    });
    assert!(
        value(&page, "zstack_ovn_db_raft_term{db=\"nb\"}").is_some_and(|t| t > term),
        "{page}"
    );
    drop(children);
    central.stop().expect("stop");
}

/// A standalone central (the chart's `haMode: single`): both databases up with their file
/// size and no Raft series, northd up and active.
#[test]
fn a_standalone_central_reports_up_sizes_and_an_active_northd() {
    const T: &str = "ovn_db_exporter::a_standalone_central_reports_up_sizes_and_an_active_northd";
    let mut bins = tests::CENTRAL_DB_BINS.to_vec();
    bins.push("ovn-northd");
    if !tests::require_real(T, &bins) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("dbs");
    let central = Central::start(CentralConfig {
        dir: s.dir.path().join("central"),
        raft: false,
        northd: true,
        tcp: false,
    })
    .expect("central starts");
    let (nb, sb) = (&central.nb_members()[0], &central.sb_members()[0]);
    let northd = central
        .northd()
        .and_then(|n| n.unixctl.clone())
        .expect("northd's control socket");
    let (addr, child) = start_exporter(nb, sb, Some(northd.as_path()));
    let _children = Exporters(vec![child]);
    let page = scrape_until(&addr, "both databases up, northd active", |p| {
        value(p, "zstack_ovn_db_up{db=\"nb\"}") == Some(1.0)
            && value(p, "zstack_ovn_db_up{db=\"sb\"}") == Some(1.0)
            && value(p, "zstack_ovn_northd_active") == Some(1.0)
    });
    for db in ["nb", "sb"] {
        assert!(
            value(&page, &format!("zstack_ovn_db_file_bytes{{db=\"{db}\"}}"))
                .is_some_and(|b| b > 0.0),
            "{db}:\n{page}"
        );
    }
    assert!(!page.contains("zstack_ovn_db_raft"), "{page}");
    drop(_children);
    central.stop().expect("stop");
}
