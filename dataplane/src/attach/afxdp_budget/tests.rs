use super::*;

fn rec(id: &str, datapath: Datapath, promote_to: Option<Datapath>) -> SandboxRecord {
    SandboxRecord {
        container_id: id.into(),
        ifname: "eth0".into(),
        pod_namespace: "ns".into(),
        pod_name: id.into(),
        netns: "/run/netns/x".into(),
        host_ifname: format!("h{id}"),
        mac: "0a:00:00:00:00:01".into(),
        addresses: vec![],
        gateways: vec![],
        routes: vec![],
        mtu: 1400,
        datapath: Some(datapath),
        datapath_reason: None,
        afxdp: None,
        promote_to,
    }
}

fn budget(n: u32) -> PortBudget {
    PortBudget::decide(Some(n), 1, None)
}

#[test]
fn the_default_is_a_tenth_of_the_memory_per_queue() {
    // 24 GiB: 2457 MiB / 72 MiB = 34 single-queue ports, 17 two-queue ones
    let b = PortBudget::decide(None, 1, Some(24 * 1024 * 1024));
    assert_eq!(b.max_ports, Some(34));
    assert!(
        b.source.contains("10 %") && b.source.contains("24576 MiB"),
        "{}",
        b.source
    );
    assert_eq!(
        PortBudget::decide(None, 2, Some(24 * 1024 * 1024)).max_ports,
        Some(17)
    );
    // configured wins; unknown memory without configuration: no limit, said so
    assert_eq!(
        PortBudget::decide(Some(3), 1, Some(1 << 30)).max_ports,
        Some(3)
    );
    let u = PortBudget::decide(None, 1, None);
    assert_eq!(u.max_ports, None);
    assert!(u.source.contains("unlimited"), "{}", u.source);
}

#[test]
fn open_and_waiting_ports_count_kernel_ports_do_not() {
    let records = vec![
        rec("a", Datapath::Afxdp, None),
        rec("b", Datapath::Kernel, Some(Datapath::Afxdp)),
        rec("c", Datapath::Kernel, None),
    ];
    assert_eq!(in_use(&records), 2);
    let claims = Claims::default();
    let full = claims.claim("d/eth0", &budget(2), &records).unwrap_err();
    assert_eq!((full.in_use, full.max), (2, 2));
    let msg = full.to_string();
    assert!(
        msg.contains("2 of 2") && msg.contains("afxdp.maxPorts 2"),
        "{msg}"
    );
    assert!(claims.claim("d/eth0", &budget(3), &records).is_ok());
}

#[test]
fn claims_in_flight_count_until_dropped() {
    let claims = Claims::default();
    let b = budget(1);
    let first = claims.claim("a/eth0", &b, &[]).expect("room for one");
    // a concurrent ADD sees the first one's claim before its record exists
    assert!(claims.claim("b/eth0", &b, &[]).is_err());
    // the same sandbox again (a retried ADD) is not counted twice
    drop(first);
    let again = claims.claim("a/eth0", &b, &[rec("a", Datapath::Afxdp, None)]);
    assert!(again.is_ok(), "its own record is not someone else's port");
    drop(again);
    assert!(
        claims.claim("b/eth0", &b, &[]).is_ok(),
        "dropped claims free the slot"
    );
}

#[test]
fn zero_means_no_pod_on_afxdp() {
    let claims = Claims::default();
    assert!(claims.claim("a/eth0", &budget(0), &[]).is_err());
}

#[test]
fn a_lowered_budget_stops_waiting_ports_from_moving() {
    let records = vec![
        rec("a", Datapath::Afxdp, None),
        rec("b", Datapath::Kernel, Some(Datapath::Afxdp)),
    ];
    // counted at its ADD: with the budget unchanged it moves
    assert!(spent_before_move(&budget(2), "b/eth0", &records).is_none());
    // lowered to 1 meanwhile: "a" holds the only port
    let full = spent_before_move(&budget(1), "b/eth0", &records).expect("spent");
    assert_eq!((full.in_use, full.max), (1, 1));
    assert!(spent_before_move(&PortBudget::decide(None, 1, None), "b/eth0", &records).is_none());
}
