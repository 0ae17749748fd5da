use super::*;

fn pick(cfg: Option<PmdMaxSleep>, dedicated: bool, polls: bool) -> (PmdSleep, Vec<String>) {
    let mut errors = vec![];
    let s = choose(cfg.as_ref(), dedicated, polls, &mut errors);
    (s, errors)
}

#[test]
fn the_default_adapts_unless_cores_are_dedicated() {
    let adaptive = PmdSleep::Adaptive {
        idle_us: IDLE_SLEEP_US,
    };
    assert_eq!(pick(None, false, true), (adaptive, vec![]));
    assert_eq!(pick(None, true, true), (PmdSleep::Busy, vec![]));
    // asked for explicitly, dedicated cores adapt too
    let auto = Some(PmdMaxSleep::Word("auto".into()));
    assert_eq!(pick(auto, true, true), (adaptive, vec![]));
    // no PMD polls on the kernel datapath: nothing to set
    assert_eq!(pick(None, false, false).0, PmdSleep::Busy);
}

#[test]
fn numbers_are_static_and_zero_is_busy() {
    assert_eq!(
        pick(Some(PmdMaxSleep::Us(50)), false, true).0,
        PmdSleep::Static { us: 50 }
    );
    assert_eq!(
        pick(Some(PmdMaxSleep::Us(0)), false, true).0,
        PmdSleep::Busy
    );
    assert_eq!(PmdSleep::Static { us: 50 }.initial_us(), Some(50));
    assert_eq!(PmdSleep::Busy.initial_us(), None);
}

#[test]
fn bad_values_are_named_and_the_default_used() {
    let (s, e) = pick(Some(PmdMaxSleep::Us(20_000)), true, true);
    assert_eq!(s, PmdSleep::Busy);
    assert!(e[0].contains("20000") && e[0].contains("10000"), "{e:?}");
    let (s, e) = pick(Some(PmdMaxSleep::Word("fast".into())), false, true);
    assert!(matches!(s, PmdSleep::Adaptive { .. }));
    assert!(e[0].contains("\"fast\"") && e[0].contains("auto"), "{e:?}");
}

#[test]
fn the_config_reads_numbers_and_auto() {
    use crate::datapath::config::DatapathConfig;
    let n = DatapathConfig::parse("pmdMaxSleep: 50\n", "t").unwrap();
    assert_eq!(n.pmd_max_sleep, Some(PmdMaxSleep::Us(50)));
    let a = DatapathConfig::parse(r#"{"pmdMaxSleep":"auto"}"#, "t").unwrap();
    assert_eq!(a.pmd_max_sleep, Some(PmdMaxSleep::Word("auto".into())));
}

#[test]
fn traffic_switches_to_busy_polling_and_quiet_back() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut t = Tuner::default();
    // first reading: no rate yet, idle
    assert_eq!(t.observe(at(0), 100, 1000), 1000);
    // a trickle (5 packets in 200 ms = 25/s) stays idle
    assert_eq!(t.observe(at(200), 105, 1000), 1000);
    // 400 packets in 200 ms = 2000/s: busy
    assert_eq!(t.observe(at(400), 505, 1000), 0);
    assert!(t.busy());
    // quiet, but not for QUIET_FOR yet
    assert_eq!(t.observe(at(600), 505, 1000), 0);
    assert_eq!(t.observe(at(2000), 506, 1000), 0);
    // traffic again resets the quiet period
    assert_eq!(t.observe(at(2200), 1006, 1000), 0);
    assert_eq!(t.observe(at(2400), 1006, 1000), 0);
    let quiet_end = 2400 + QUIET_FOR.as_millis() as u64;
    assert_eq!(t.observe(at(quiet_end - 200), 1006, 1000), 0);
    assert_eq!(t.observe(at(quiet_end), 1006, 1000), 1000);
    assert!(!t.busy());
}

#[test]
fn a_counter_reset_is_a_new_baseline_not_traffic() {
    let t0 = Instant::now();
    let mut t = Tuner::default();
    t.observe(t0, 1_000_000, 1000);
    // ovs-vswitchd restarted: the counter starts again from 0
    assert_eq!(t.observe(t0 + Duration::from_millis(200), 3, 1000), 1000);
    assert_eq!(t.observe(t0 + Duration::from_millis(400), 4, 1000), 1000);
}

#[test]
fn pmd_packets_counts_pmd_threads_only() {
    let text = include_str!("../../../tests/fixtures/ovs/pmd-stats-show.afxdp.txt");
    let stats = ovsdb::pmd_stats::parse_pmd_stats(text).unwrap();
    // the main thread's 35 packets are not the PMDs'
    assert_eq!(pmd_packets(&stats), Some(3_923_058));
    let none = include_str!("../../../tests/fixtures/ovs/pmd-stats-show.no-pmd.txt");
    let stats = ovsdb::pmd_stats::parse_pmd_stats(none).unwrap();
    assert_eq!(pmd_packets(&stats), None);
}
