use std::collections::BTreeMap;

use super::*;
use crate::services::{EndpointInfo, ServicePort, TargetPort};
use crate::translate::Input;

fn node(name: &str, ip: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        addresses: vec![ip.parse().expect("ip")],
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }
}

fn svc(ports: Vec<ServicePort>) -> ServiceInfo {
    ServiceInfo {
        namespace: "demo".into(),
        name: "web".into(),
        cluster_ips: vec![
            "10.96.0.10".parse().expect("ip"),
            "fd00:96::10".parse().expect("ip"),
        ],
        ports,
        ..Default::default()
    }
}

fn port(name: &str, proto: Proto, port: u16, node_port: Option<u16>) -> ServicePort {
    ServicePort {
        name: name.into(),
        protocol: proto,
        port,
        target_port: TargetPort::Number(port),
        node_port,
    }
}

fn ep(ips: &[&str], node: &str, ready: bool) -> EndpointInfo {
    crate::services::testing::endpoint(ips, node, ready)
}

fn slice(endpoints: Vec<EndpointInfo>) -> EndpointSliceInfo {
    crate::services::testing::slice(
        "demo",
        "web",
        endpoints,
        &[
            ("http", 8080, Proto::Tcp),
            ("dns", 5353, Proto::Udp),
            ("sig", 3868, Proto::Sctp),
        ],
    )
}

#[test]
fn dual_stack_multi_protocol() {
    let cfg = ClusterConfig::default();
    let s = svc(vec![
        port("http", Proto::Tcp, 80, None),
        port("dns", Proto::Udp, 53, None),
        port("sig", Proto::Sctp, 3868, None),
    ]);
    let sl = slice(vec![
        ep(&["10.16.0.5", "fd00:16::5"], "n1", true),
        ep(&["10.16.0.6"], "n2", true),
        ep(&["10.16.0.7"], "n2", false),
    ]);
    let lbs = load_balancers(&cfg, &s, &[&sl], &[]);
    let names: Vec<&str> = lbs.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "Service_demo/web_TCP",
            "Service_demo/web_UDP",
            "Service_demo/web_SCTP"
        ]
    );
    let tcp = &lbs[0];
    assert_eq!(tcp.protocol.as_deref(), Some("tcp"));
    assert_eq!(tcp.vips["10.96.0.10:80"], "10.16.0.5:8080,10.16.0.6:8080");
    assert_eq!(tcp.vips["[fd00:96::10]:80"], "[fd00:16::5]:8080");
    assert_eq!(tcp.vips.len(), 2);
    assert_eq!(
        lbs[1].vips["10.96.0.10:53"],
        "10.16.0.5:5353,10.16.0.6:5353"
    );
    assert_eq!(lbs[2].protocol.as_deref(), Some("sctp"));
    assert_eq!(tcp.options["reject"], "true");
    assert!(!tcp.options.contains_key("affinity_timeout"));
    assert_eq!(tcp.external_ids[names::OWNER], cfg.cluster_id);
    assert_eq!(tcp.external_ids[names::OBJECT], "demo/web");
}

#[test]
fn no_endpoints_rejects_and_affinity() {
    let cfg = ClusterConfig::default();
    let mut s = svc(vec![port("http", Proto::Tcp, 80, None)]);
    s.affinity_timeout = Some(60);
    let lbs = load_balancers(&cfg, &s, &[], &[]);
    assert_eq!(
        lbs[0].vips["10.96.0.10:80"], "",
        "VIP kept with no backends"
    );
    assert_eq!(lbs[0].options["reject"], "true");
    assert_eq!(lbs[0].options["affinity_timeout"], "60");
}

#[test]
fn node_ports_external_ips_and_local_policy() {
    let cfg = ClusterConfig::default();
    let mut s = svc(vec![port("http", Proto::Tcp, 80, Some(30080))]);
    s.cluster_ips.truncate(1);
    s.node_ports = true;
    s.external_ips = vec!["192.0.2.7".parse().expect("ip")];
    s.ingress_ips = vec!["198.51.100.1".parse().expect("ip")];
    let sl = slice(vec![
        ep(&["10.16.0.5"], "n1", true),
        ep(&["10.16.0.6"], "n2", true),
    ]);
    let (n1, n2, n3) = (
        node("n1", "172.18.0.1"),
        node("n2", "172.18.0.2"),
        node("n3", "172.18.0.3"),
    );
    let nodes = [&n1, &n2, &n3];
    let lb = &load_balancers(&cfg, &s, &[&sl], &nodes)[0];
    let all = "10.16.0.5:8080,10.16.0.6:8080";
    for v in [
        "10.96.0.10:80",
        "192.0.2.7:80",
        "198.51.100.1:80",
        "172.18.0.1:30080",
        "172.18.0.3:30080",
    ] {
        assert_eq!(lb.vips[v], all, "{v}");
    }
    s.external_local = true;
    let lb = &load_balancers(&cfg, &s, &[&sl], &nodes)[0];
    assert_eq!(lb.vips["172.18.0.1:30080"], "10.16.0.5:8080");
    assert_eq!(lb.vips["172.18.0.2:30080"], "10.16.0.6:8080");
    assert_eq!(lb.vips["172.18.0.3:30080"], "", "no local endpoint: reject");
    assert_eq!(
        lb.vips["10.96.0.10:80"], all,
        "cluster traffic uses every endpoint"
    );
    // a ClusterIP Service ignores nodePort values
    s.node_ports = false;
    let lb = &load_balancers(&cfg, &s, &[&sl], &nodes)[0];
    assert!(!lb.vips.contains_key("172.18.0.1:30080"));
}

#[test]
fn headless_external_name_and_no_ip_get_nothing() {
    let cfg = ClusterConfig::default();
    let mut s = svc(vec![port("http", Proto::Tcp, 80, None)]);
    s.headless = true;
    s.cluster_ips.clear();
    assert!(load_balancers(&cfg, &s, &[], &[]).is_empty());
    let mut s = svc(vec![port("http", Proto::Tcp, 80, None)]);
    s.external_name = true;
    assert!(load_balancers(&cfg, &s, &[], &[]).is_empty());
    let mut s = svc(vec![port("http", Proto::Tcp, 80, None)]);
    s.cluster_ips.clear();
    assert!(load_balancers(&cfg, &s, &[], &[]).is_empty(), "no VIP yet");
}

#[test]
fn group_attaches_to_owned_switches() {
    let cfg = ClusterConfig::default();
    let mut nb = crate::translate::translate(&cfg, &Input::default());
    let s = svc(vec![port("http", Proto::Tcp, 80, None)]);
    add(&cfg, [&s], [], &[], &mut nb);
    assert_eq!(nb.load_balancers.rows.len(), 1);
    assert!(nb.load_balancers.switches.contains(names::JOIN_SWITCH));
}

#[test]
fn row_count_is_linear_in_services() {
    let cfg = ClusterConfig::default();
    let n1 = node("n1", "172.18.0.1");
    for n in [10usize, 100, 1000] {
        let services: Vec<ServiceInfo> = (0..n)
            .map(|i| {
                let mut s = svc(vec![port("http", Proto::Tcp, 80, Some(30000))]);
                s.name = format!("s{i}");
                s
            })
            .collect();
        let mut nb = DesiredNb::default();
        add(&cfg, &services, [], &[&n1], &mut nb);
        assert_eq!(nb.load_balancers.rows.len(), n);
    }
}

#[test]
fn internal_local_uses_template_rows_and_per_chassis_variables() {
    let cfg = ClusterConfig::default();
    let mut s = svc(vec![
        port("http", Proto::Tcp, 80, Some(30080)),
        port("dns", Proto::Udp, 53, None),
    ]);
    s.internal_local = true;
    s.node_ports = true;
    s.external_ips = vec!["192.0.2.7".parse().expect("ip")];
    let sl = slice(vec![
        ep(&["10.16.0.5", "fd00:16::5"], "n1", true),
        ep(&["10.16.0.6"], "n1", true),
    ]);
    let n1 = node("n1", "172.18.0.1");
    let mut n2 = node("n2", "172.18.0.2");
    n2.annotations
        .insert(crate::chassis::CHASSIS_ID.into(), "chassis-2".into());
    let nodes = [&n1, &n2];
    let lbs = load_balancers(&cfg, &s, &[&sl], &nodes);
    let by_name: BTreeMap<&str, &LoadBalancer> = lbs.iter().map(|l| (l.name.as_str(), l)).collect();
    let names: Vec<&str> = by_name.keys().copied().collect();
    assert_eq!(
        names,
        [
            "Service_demo/web_TCP",
            "Service_demo/web_TCP_local4",
            "Service_demo/web_TCP_local6",
            "Service_demo/web_UDP",
            "Service_demo/web_UDP_local4",
            "Service_demo/web_UDP_local6",
        ]
    );
    assert_eq!(
        by_name["Service_demo/web_UDP"]
            .vips
            .keys()
            .collect::<Vec<_>>(),
        ["192.0.2.7:53"],
        "UDP: only the externalIP stays on the regular row"
    );
    // the regular row keeps external traffic (externalIPs, node ports), not cluster IPs
    let tcp = by_name["Service_demo/web_TCP"];
    assert!(!tcp.vips.contains_key("10.96.0.10:80"), "{:?}", tcp.vips);
    assert!(tcp.vips.contains_key("192.0.2.7:80"));
    assert!(tcp.vips.contains_key("172.18.0.2:30080"));
    let t4 = by_name["Service_demo/web_TCP_local4"];
    assert_eq!(t4.options["template"], "true");
    assert_eq!(t4.options["address-family"], "ipv4");
    assert_eq!(
        by_name["Service_demo/web_TCP_local6"].options["address-family"],
        "ipv6"
    );
    let (ipv, bv) = (
        local::ip_var("demo/web", true),
        local::backends_var("demo/web", Proto::Tcp, 80, true),
    );
    assert_eq!(t4.vips[&format!("^{ipv}:80")], format!("^{bv}"));
    assert!(
        ipv.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "{ipv}"
    );
    assert_eq!(ipv, local::ip_var("demo/web", true), "stable");
    assert_ne!(ipv, local::ip_var("demo/web2", true));

    let mut nb = crate::translate::translate(&cfg, &Input::default());
    add(&cfg, [&s], [&sl], &nodes, &mut nb);
    let vars = &nb.load_balancers.template_vars;
    assert_eq!(vars.keys().collect::<Vec<_>>(), ["chassis-2", "n1"]);
    assert_eq!(vars["n1"][&ipv], "10.96.0.10");
    assert_eq!(vars["n1"][&bv], "10.16.0.5:8080,10.16.0.6:8080");
    assert_eq!(
        vars["n1"][&local::backends_var("demo/web", Proto::Tcp, 80, false)],
        "[fd00:16::5]:8080"
    );
    assert_eq!(vars["n1"][&local::ip_var("demo/web", false)], "fd00:96::10");
    assert_eq!(vars["chassis-2"][&bv], "", "no local endpoint on n2");
    assert_eq!(vars["n1"].len(), 6, "2 IPs + 2 ports x 2 families");

    // no endpoint anywhere: the cluster IPs stay on the regular row (reject), no variables
    let lbs = load_balancers(&cfg, &s, &[], &nodes);
    assert!(lbs.iter().all(|l| !l.name.contains("_local")), "{lbs:?}");
    assert_eq!(lbs[0].vips["10.96.0.10:80"], "", "rejects");
    let mut nb = crate::translate::translate(&cfg, &Input::default());
    add(&cfg, [&s], [], &nodes, &mut nb);
    assert!(nb.load_balancers.template_vars.is_empty());

    // a Service without the policy has no variables
    s.internal_local = false;
    let mut nb = crate::translate::translate(&cfg, &Input::default());
    add(&cfg, [&s], [&sl], &nodes, &mut nb);
    assert!(nb.load_balancers.template_vars.is_empty());
}

#[test]
fn internal_local_with_affinity_keeps_it_off_the_template_rows_and_says_so() {
    let cfg = ClusterConfig::default();
    let mut s = svc(vec![port("http", Proto::Tcp, 80, Some(30080))]);
    s.node_ports = true;
    s.affinity_timeout = Some(60);
    assert!(s.limitations().is_empty(), "affinity alone is served");
    s.internal_local = true;
    let sl = slice(vec![ep(&["10.16.0.5"], "n1", true)]);
    let n1 = node("n1", "172.18.0.1");
    let lbs = load_balancers(&cfg, &s, &[&sl], &[&n1]);
    let by_name: BTreeMap<&str, &LoadBalancer> = lbs.iter().map(|l| (l.name.as_str(), l)).collect();
    let t4 = by_name["Service_demo/web_TCP_local4"];
    assert!(
        !t4.options.contains_key("affinity_timeout"),
        "OVN 23.03 cannot keep affinity on a template row: {:?}",
        t4.options
    );
    // the node ports on the regular row keep it
    let tcp = by_name["Service_demo/web_TCP"];
    assert!(tcp.vips.contains_key("172.18.0.1:30080"), "{:?}", tcp.vips);
    assert_eq!(tcp.options["affinity_timeout"], "60");
    let l = s.limitations();
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(l[0].contains("sessionAffinity: ClientIP"), "{l:?}");
    assert!(
        s.problems.is_empty(),
        "a limitation is not a problem of the object"
    );
    // headless: nothing is served, nothing to say
    s.headless = true;
    assert!(s.limitations().is_empty());
}
