use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::datapath::probe::HugepageFacts;

/// A 2-CPU node like the lab machines, with `free` 2 MiB pages mounted.
fn host(free: u64) -> HostFacts {
    HostFacts {
        online_cpus: [0, 1].into(),
        isolated_cpus: BTreeSet::new(),
        allowed_cpus: [0, 1].into(),
        cpu_numa: BTreeMap::from([(0, 0), (1, 0)]),
        hugepages: BTreeMap::from([
            (
                2048,
                HugepageFacts {
                    size_kb: 2048,
                    total: free,
                    free,
                    free_per_numa: BTreeMap::from([(0, free)]),
                    mounted: true,
                },
            ),
            (
                1048576,
                HugepageFacts {
                    size_kb: 1048576,
                    free_per_numa: BTreeMap::from([(0, 0)]),
                    ..Default::default()
                },
            ),
        ]),
        nic_numa: None,
        xdp_sockets: true,
        mem_total_kib: Some(24 * 1024 * 1024),
        uplink_refusal: None,
    }
}

fn dpdk_ovs() -> OvsFacts {
    OvsFacts {
        dpdk_version: Some("DPDK 22.11.11".into()),
        iface_types: ["afxdp", "dpdk", "dpdkvhostuserclient", "system", "internal"]
            .map(String::from)
            .into(),
        ..Default::default()
    }
}

fn plain_ovs() -> OvsFacts {
    OvsFacts {
        iface_types: ["afxdp", "system", "internal", "tap"]
            .map(String::from)
            .into(),
        ..Default::default()
    }
}

fn tunnels() -> Runtime {
    Runtime {
        tunnels: true,
        ..Default::default()
    }
}

fn cfg(yaml: &str) -> DatapathConfig {
    DatapathConfig::parse(yaml, "test").unwrap()
}

#[test]
fn auto_on_a_dpdk_node_with_hugepages_is_dpdk_with_derived_cpus() {
    let d = decide(&cfg(""), vec![], &host(512), &dpdk_ovs(), &tunnels());
    assert_eq!(d.datapath, Datapath::Dpdk);
    assert!(d.fallbacks.is_empty() && d.errors.is_empty(), "{d:?}");
    assert_eq!(d.pmd_cpus, [1].into(), "never CPU 0, highest first");
    let oc = &d.other_config;
    assert_eq!(oc["dpdk-init"], "try");
    assert_eq!(oc["pmd-cpu-mask"], "0x2");
    assert_eq!(oc["dpdk-lcore-mask"], "0x1");
    assert_eq!(oc["dpdk-socket-mem"], "256");
    assert_eq!(oc["dpdk-socket-limit"], "512");
    assert_eq!(oc["dpdk-extra"], "--no-pci");
    assert_eq!(oc["userspace-tso-enable"], "false");
    assert!(d.tso_reason.contains("tunnels"));
    assert_eq!(d.afxdp.mode, "native");
}

#[test]
fn no_hugepages_falls_back_to_afxdp_and_says_how_many_were_needed() {
    let d = decide(&cfg(""), vec![], &host(0), &dpdk_ovs(), &tunnels());
    assert_eq!(d.datapath, Datapath::Afxdp);
    assert_eq!(d.fallbacks.len(), 1);
    let f = &d.fallbacks[0];
    assert_eq!(
        (f.from, f.to, f.reason.as_str()),
        (Datapath::Dpdk, Datapath::Afxdp, "hugepages")
    );
    assert!(
        f.detail.contains("needs 128 free 2Mi hugepages"),
        "{}",
        f.detail
    );
    assert_eq!(d.other_config["dpdk-init"], "false");
    assert!(d.reason.starts_with("fell back from dpdk to afxdp"));
}

#[test]
fn allocation_when_allowed_instead_of_fallback() {
    let c = cfg("hugepages: {allocate: true, count: 256}\n");
    let d = decide(&c, vec![], &host(0), &dpdk_ovs(), &tunnels());
    assert_eq!(d.datapath, Datapath::Dpdk, "{d:?}");
    assert_eq!(
        d.allocate_hugepages,
        Some(HugepageAllocation {
            size_kb: 2048,
            total: 256
        })
    );
}

#[test]
fn unmounted_hugetlbfs_is_a_reason() {
    let mut h = host(512);
    h.hugepages.get_mut(&2048).unwrap().mounted = false;
    let d = decide(&cfg(""), vec![], &h, &dpdk_ovs(), &tunnels());
    assert_eq!(d.datapath, Datapath::Afxdp);
    assert!(d.fallbacks[0].detail.contains("hugetlbfs"));
}

#[test]
fn running_dpdk_with_the_same_memory_needs_no_free_pages() {
    let mut ovs = dpdk_ovs();
    ovs.dpdk_initialized = true;
    ovs.other_config
        .insert("dpdk-socket-mem".into(), "256".into());
    let mut h = host(0);
    h.hugepages.get_mut(&2048).unwrap().total = 128;
    let d = decide(&cfg(""), vec![], &h, &ovs, &tunnels());
    assert_eq!(d.datapath, Datapath::Dpdk, "{d:?}");
}

#[test]
fn plain_ovs_build_is_afxdp_and_no_xdp_is_kernel() {
    let d = decide(
        &cfg("datapath: dpdk"),
        vec![],
        &host(512),
        &plain_ovs(),
        &tunnels(),
    );
    assert_eq!(d.datapath, Datapath::Afxdp);
    assert_eq!(d.fallbacks[0].reason, "no_dpdk_build");
    // DPDK asked for and not there: a real fallback
    assert!(!d.fallbacks[0].designed);
    assert!(
        d.reason.starts_with("fell back from dpdk to afxdp"),
        "{}",
        d.reason
    );
    // `auto` on an OVS without DPDK: what auto is for, not an alarm
    let d = decide(&cfg(""), vec![], &host(512), &plain_ovs(), &tunnels());
    assert_eq!(d.datapath, Datapath::Afxdp);
    assert!(d.fallbacks[0].designed, "{d:?}");
    assert_eq!(
        d.reason,
        "auto: afxdp (ovs-vswitchd is not the DPDK build (no dpdk interface type))"
    );
    let mut h = host(512);
    h.xdp_sockets = false;
    let d = decide(&cfg(""), vec![], &h, &plain_ovs(), &tunnels());
    assert_eq!(d.datapath, Datapath::Kernel);
    let codes: Vec<&str> = d.fallbacks.iter().map(|f| f.reason.as_str()).collect();
    assert_eq!(codes, ["no_dpdk_build", "no_xdp_sockets"]);
    // one step down for a real reason: the whole is a fallback
    assert!(!d.fallbacks[1].designed);
    assert!(
        d.reason.starts_with("fell back from afxdp to kernel"),
        "{}",
        d.reason
    );
}

#[test]
fn dpdk_init_failure_is_a_fallback() {
    let rt = Runtime {
        dpdk_init_failed: Some("dpdk_initialized stayed false".into()),
        tunnels: true,
    };
    let d = decide(&cfg(""), vec![], &host(512), &dpdk_ovs(), &rt);
    assert_eq!(d.datapath, Datapath::Afxdp);
    assert_eq!(d.fallbacks[0].reason, "dpdk_init");
}

#[test]
fn kernel_as_configured_has_no_fallback() {
    let d = decide(
        &cfg("datapath: kernel"),
        vec![],
        &host(512),
        &dpdk_ovs(),
        &tunnels(),
    );
    assert_eq!(d.datapath, Datapath::Kernel);
    assert!(d.fallbacks.is_empty());
    assert_eq!(d.reason, "kernel as configured");
    assert_eq!(d.other_config["dpdk-init"], "false");
}

#[test]
fn unknown_datapath_is_an_error_and_auto_is_used() {
    let d = decide(
        &cfg("datapath: turbo"),
        vec![],
        &host(512),
        &dpdk_ovs(),
        &tunnels(),
    );
    assert_eq!(d.datapath, Datapath::Dpdk);
    assert_eq!(d.requested, "auto");
    assert!(
        d.errors[0].contains("\"turbo\" is unknown"),
        "{:?}",
        d.errors
    );
}

#[test]
fn pmd_cpu_that_does_not_exist_is_an_error_and_cpus_are_derived() {
    let d = decide(
        &cfg("pmdCpus: \"7\""),
        vec![],
        &host(512),
        &dpdk_ovs(),
        &tunnels(),
    );
    assert!(
        d.errors[0].contains("CPU 7 does not exist (online: 0-1)"),
        "{:?}",
        d.errors
    );
    assert_eq!(d.pmd_cpus, [1].into());
    assert_eq!(d.datapath, Datapath::Dpdk);
    let d = decide(
        &cfg("pmdCpus: \"0\""),
        vec![],
        &host(512),
        &dpdk_ovs(),
        &tunnels(),
    );
    assert!(d.errors[0].contains("allowCpu0"));
    let d = decide(
        &cfg("pmdCpus: \"0\"\nallowCpu0: true"),
        vec![],
        &host(512),
        &dpdk_ovs(),
        &tunnels(),
    );
    assert!(d.errors.is_empty());
    assert_eq!(d.other_config["pmd-cpu-mask"], "0x1");
    assert_eq!(
        d.other_config["dpdk-lcore-mask"], "0x2",
        "lcore avoids the PMD CPU"
    );
}

#[test]
fn pmd_cpus_avoid_reserved_and_prefer_the_nic_numa() {
    let mut h = host(512);
    h.online_cpus = (0..8).collect();
    h.allowed_cpus = (0..8).collect();
    h.cpu_numa = (0..8).map(|c| (c, c / 4)).collect();
    h.nic_numa = Some(0);
    let d = decide(
        &cfg("pmdCount: 2\nreservedCpus: \"3\""),
        vec![],
        &h,
        &dpdk_ovs(),
        &tunnels(),
    );
    assert_eq!(d.pmd_cpus, [1, 2].into(), "NUMA 0, not 0, not reserved 3");
    let mut h2 = h.clone();
    h2.allowed_cpus = [0, 1, 2].into();
    let d = decide(&cfg("pmdCpus: \"5\""), vec![], &h2, &dpdk_ovs(), &tunnels());
    assert!(d.errors[0].contains("outside the CPUs"), "{:?}", d.errors);
}

#[test]
fn socket_mem_larger_than_the_hugepages_keeps_a_working_datapath() {
    let d = decide(
        &cfg("socketMem: [4096]"),
        vec![],
        &host(512),
        &dpdk_ovs(),
        &tunnels(),
    );
    assert_eq!(d.datapath, Datapath::Afxdp);
    assert_eq!(d.fallbacks[0].reason, "config");
    assert!(
        d.errors[0].contains("socketMem 4096 MiB needs 2048 × 2Mi pages but the node has 512"),
        "{:?}",
        d.errors
    );
    let d = decide(
        &cfg("socketMem: [1024]\nhugepages: {count: 100}"),
        vec![],
        &host(512),
        &dpdk_ovs(),
        &tunnels(),
    );
    assert!(
        d.errors[0].contains("hugepages.count is 100"),
        "{:?}",
        d.errors
    );
}

#[test]
fn socket_mem_on_a_missing_numa_node_uses_the_default() {
    let d = decide(
        &cfg("socketMem: [0, 512]"),
        vec![],
        &host(512),
        &dpdk_ovs(),
        &tunnels(),
    );
    assert!(d.errors[0].contains("NUMA node 1"), "{:?}", d.errors);
    assert_eq!(d.other_config["dpdk-socket-mem"], "256");
}

#[test]
fn tuning_keys_and_their_validation() {
    let c = cfg(
        "pmdRxqAssign: group\npmdAutoLb: true\npmdMaxSleep: 50\nhwOffload: true\nuserspaceTso: on\nextraEalArgs: \"--log-level=7\"\nafxdp: {queues: 2, mode: generic}\npmdRxqAffinity: \"0:1,1:1\"\nmtu: 1400\n",
    );
    let d = decide(&c, vec![], &host(512), &dpdk_ovs(), &tunnels());
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    let oc = &d.other_config;
    assert_eq!(oc["pmd-rxq-assign"], "group");
    assert_eq!(oc["pmd-auto-lb"], "true");
    assert_eq!(oc["pmd-maxsleep"], "50");
    assert_eq!(oc["hw-offload"], "true");
    assert_eq!(oc["userspace-tso-enable"], "true");
    assert_eq!(oc["dpdk-extra"], "--no-pci --log-level=7");
    assert_eq!(d.afxdp.queues, 2);
    assert_eq!(d.afxdp.rxq_affinity.as_deref(), Some("0:1,1:1"));
    assert_eq!(d.mtu, Some(1400));

    let bad = cfg(
        "pmdRxqAssign: fastest\npmdMaxSleep: 20000\nuserspaceTso: maybe\nafxdp: {queues: 0, mode: zc}\npmdRxqAffinity: \"0:0\"\nmtu: 10\n",
    );
    let d = decide(&bad, vec![], &host(512), &dpdk_ovs(), &tunnels());
    let all = d.errors.join("\n");
    for needle in [
        "pmdRxqAssign \"fastest\"",
        "pmdMaxSleep 20000",
        "userspaceTso \"maybe\"",
        "afxdp.queues 0",
        "afxdp.mode \"zc\"",
        "pmdRxqAffinity \"0:0\": CPU 0 is not a PMD CPU",
        "mtu 10",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in\n{all}");
    }
    assert!(!d.other_config.contains_key("pmd-rxq-assign"));
    // a bad pmdMaxSleep leaves the default: adaptive (no pmdCpus), idle to start with
    assert_eq!(
        d.other_config["pmd-maxsleep"],
        crate::datapath::pmd_sleep::IDLE_SLEEP_US.to_string()
    );
    assert!(matches!(
        d.pmd_sleep,
        crate::datapath::pmd_sleep::PmdSleep::Adaptive { .. }
    ));
    assert_eq!(
        d.datapath,
        Datapath::Dpdk,
        "bad tuning does not cost the datapath"
    );
}

#[test]
fn jumbo_mtu_switches_afxdp_to_generic_mode() {
    let d = decide(
        &cfg("mtu: 9000"),
        vec![],
        &host(512),
        &dpdk_ovs(),
        &tunnels(),
    );
    assert_eq!(d.afxdp.mode, "generic");
    assert!(d.errors[0].contains("native XDP"));
}

#[test]
fn tso_is_on_without_tunnels_in_auto() {
    let d = decide(
        &cfg(""),
        vec![],
        &host(512),
        &dpdk_ovs(),
        &Runtime::default(),
    );
    assert!(d.userspace_tso);
    assert_eq!(d.other_config["userspace-tso-enable"], "true");
}

#[test]
fn vswitchd_not_seen_yet_is_kernel_for_now() {
    let d = decide(
        &cfg(""),
        vec![],
        &host(512),
        &OvsFacts::default(),
        &tunnels(),
    );
    assert_eq!(d.datapath, Datapath::Kernel);
    assert_eq!(d.fallbacks[0].reason, "vswitchd_unknown");
}

#[test]
fn pre_errors_are_carried() {
    let d = decide(
        &cfg(""),
        vec!["annotation: bad".into()],
        &host(512),
        &dpdk_ovs(),
        &tunnels(),
    );
    assert_eq!(d.errors, ["annotation: bad"]);
}

#[test]
fn pod_rx_steering_avoids_pmd_and_isolated_cpus() {
    let dp = |yaml: &str, h: &HostFacts| decide(&cfg(yaml), vec![], h, &dpdk_ovs(), &tunnels());
    // off unless asked for
    let d = dp("", &host(512));
    assert_eq!(d.afxdp.rx_cpus, None);
    // auto on the lab node: PMD on CPU 1, the pods' receive work on CPU 0
    let auto = "afxdp: {rxCpus: auto}\n";
    let d = dp(auto, &host(512));
    assert_eq!(d.afxdp.rx_cpus.as_deref(), Some("0"));
    // 8 CPUs, 2 PMDs (6, 7), CPU 5 isolated
    let mut h = host(512);
    h.online_cpus = (0..8).collect();
    h.allowed_cpus = (0..8).collect();
    h.isolated_cpus = [5].into();
    let d = dp(&format!("pmdCount: 2\n{auto}"), &h);
    assert_eq!(d.pmd_cpus, [6, 7].into(), "{d:?}");
    assert_eq!(d.afxdp.rx_cpus.as_deref(), Some("0-4"));
    // off, a list, and bad values (reported, not steering)
    let d = dp("afxdp: {rxCpus: \"off\"}\n", &host(512));
    assert_eq!(d.afxdp.rx_cpus, None);
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    let d = dp("afxdp: {rxCpus: \"0-1\"}\n", &host(512));
    assert_eq!(d.afxdp.rx_cpus.as_deref(), Some("0-1"));
    for bad in ["5", "x", ""] {
        let d = dp(&format!("afxdp: {{rxCpus: \"{bad}\"}}\n"), &host(512));
        assert_eq!(d.afxdp.rx_cpus, None, "{bad}: not steering");
        assert!(
            d.errors.iter().any(|e| e.contains("afxdp.rxCpus")),
            "{bad}: {:?}",
            d.errors
        );
    }
    // a single-CPU node has nowhere to steer to
    let mut one = host(512);
    one.online_cpus = [0].into();
    one.allowed_cpus = [0].into();
    let d = dp(&format!("allowCpu0: true\n{auto}"), &one);
    assert_eq!(d.afxdp.rx_cpus, None, "{d:?}");
}

/// `extraEalArgs` reaches ovs-vswitchd only through the EAL allowlist: an option that
/// loads code is an error naming it, and no extra argument goes to DPDK.
#[test]
fn extra_eal_args_outside_the_allowlist_are_an_error_and_dropped() {
    let c = cfg("extraEalArgs: \"--iova-mode=va -d /tmp/evil.so\"\n");
    let d = decide(&c, vec![], &host(512), &dpdk_ovs(), &tunnels());
    let all = d.errors.join("\n");
    assert!(
        all.contains("extraEalArgs") && all.contains("\"-d\" is refused (loads a shared object"),
        "{all}"
    );
    assert_eq!(d.other_config["dpdk-extra"], "--no-pci");
    assert_eq!(d.datapath, Datapath::Dpdk, "the node keeps its datapath");
}

#[test]
fn a_dpdk_uplink_is_planned_and_a_pci_one_is_probed_by_dpdk() {
    let vdev = cfg("uplink: dpdk\nuplinkDevargs: \"net_af_packet0,iface=eth1\"\n");
    let d = decide(&vdev, vec![], &host(512), &dpdk_ovs(), &tunnels());
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    assert_eq!(d.uplink.pref, "dpdk");
    assert_eq!(
        d.uplink.devargs.as_deref(),
        Some("net_af_packet0,iface=eth1")
    );
    assert_eq!(
        d.other_config["dpdk-extra"], "--no-pci",
        "a vdev needs no PCI bus"
    );

    let pci = cfg("uplink: dpdk\nuplinkDevargs: \"03:00.0\"\n");
    let d = decide(&pci, vec![], &host(512), &dpdk_ovs(), &tunnels());
    assert_eq!(
        d.other_config["dpdk-extra"], "-a 0000:03:00.0",
        "the PCI bus probed, that device only"
    );
    // the administrator's own allowlist is kept as it is
    let own = cfg(
        "uplink: dpdk\nuplinkDevargs: \"0000:03:00.0\"\nextraEalArgs: \"-a 0000:03:00.0 -a 0000:03:00.1\"\n",
    );
    let d = decide(&own, vec![], &host(512), &dpdk_ovs(), &tunnels());
    assert_eq!(
        d.other_config["dpdk-extra"],
        "-a 0000:03:00.0 -a 0000:03:00.1"
    );

    // a device the host refuses is not handed to DPDK
    let mut refusing = host(512);
    refusing.uplink_refusal = Some("PCI device 0000:03:00.0 is bound to ixgbe".into());
    let d = decide(&pci, vec![], &refusing, &dpdk_ovs(), &tunnels());
    assert_eq!(d.other_config["dpdk-extra"], "--no-pci");

    let missing = cfg("uplink: dpdk\n");
    let d = decide(&missing, vec![], &host(512), &dpdk_ovs(), &tunnels());
    assert_eq!(d.uplink.pref, "auto");
    assert!(
        d.errors
            .iter()
            .any(|e| e.contains("uplink dpdk needs uplinkDevargs")),
        "{:?}",
        d.errors
    );
}
