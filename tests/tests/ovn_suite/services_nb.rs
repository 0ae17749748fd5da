//! Services on a real OVN NB + northd through the whole controller (fed by the in-process
//! object store): one Load_Balancer per Service and protocol (`Service_<ns>/<name>_<PROTO>`)
//! with our owner marks, in our Load_Balancer_Group attached to the Subnet and join
//! switches; northd turns the VIPs into logical flows; an endpoint change rewrites only
//! that Service's row (1 update, nothing else); a restart writes nothing; a foreign load
//! balancer with one of our names is never touched; deleting a Service deletes its rows.
//! A Service with a part that cannot be used is served without it and gets one Warning
//! event. An externalIP outside the administrator's allowlist gets no VIP and a Warning
//! event (the allowlist is empty by default). SCTP: this kernel has no SCTP, so SCTP Services are checked here, at the NB/SB
//! level.

use std::collections::BTreeMap;

use api::subnet::{Subnet, SubnetSpec};
use control::controller::{Controller, SyncReport};
use control::model::NodeInfo;
use control::reconcile::Reconciler;
use control::services::{
    EndpointInfo, EndpointPort, EndpointSliceInfo, Proto, ServiceInfo, ServicePort, TargetPort,
};
use control::source::Event;
use control::source::memory::MemoryStore;
use control::translate::ClusterConfig;
use lab::central::{Central, CentralConfig};
use ovsdb::{Client, ClientConfig};
use tests::nbctl::nbctl;
use tokio::sync::mpsc::UnboundedReceiver;

async fn pass(ctl: &mut Controller<MemoryStore>, rx: &mut UnboundedReceiver<Event>) -> SyncReport {
    while let Ok(ev) = rx.try_recv() {
        ctl.apply(ev);
    }
    ctl.sync().await.expect("sync")
}

/// Passes until one writes nothing (the controller's own writes come back as events).
async fn settle(ctl: &mut Controller<MemoryStore>, rx: &mut UnboundedReceiver<Event>) {
    ctl.settle(rx, 5).await.expect("settle");
}

async fn controller(nb: &str, store: &MemoryStore) -> Controller<MemoryStore> {
    controller_with(nb, store, ClusterConfig::default()).await
}

async fn controller_with(
    nb: &str,
    store: &MemoryStore,
    cfg: ClusterConfig,
) -> Controller<MemoryStore> {
    let client = Client::connect(ClientConfig::parse(nb).expect("remote"))
        .await
        .expect("connect NB");
    let rec = Reconciler::start(client, "zstack-ovn")
        .await
        .expect("replica");
    Controller::new(cfg, rec, store.clone())
}

fn node(name: &str, ip: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        addresses: vec![ip.parse().expect("ip")],
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }
}

fn service(name: &str, ip: &str, ports: &[(&str, Proto, u16, Option<u16>)]) -> ServiceInfo {
    ServiceInfo {
        namespace: "demo".into(),
        name: name.into(),
        cluster_ips: vec![ip.parse().expect("ip")],
        node_ports: ports.iter().any(|p| p.3.is_some()),
        ports: ports
            .iter()
            .map(|(n, proto, port, np)| ServicePort {
                name: n.to_string(),
                protocol: *proto,
                port: *port,
                target_port: TargetPort::Number(*port),
                node_port: *np,
            })
            .collect(),
        ..Default::default()
    }
}

fn slice(svc: &str, ips: &[(&str, &str)], ports: &[(&str, Proto, u16)]) -> EndpointSliceInfo {
    EndpointSliceInfo {
        namespace: "demo".into(),
        name: format!("{svc}-1"),
        service: svc.into(),
        endpoints: ips
            .iter()
            .map(|(ip, node)| EndpointInfo {
                addresses: vec![ip.parse().expect("ip")],
                ready: true,
                serving: true,
                terminating: false,
                node: Some(node.to_string()),
            })
            .collect(),
        ports: ports
            .iter()
            .map(|(n, p, port)| EndpointPort {
                name: n.to_string(),
                port: *port,
                protocol: *p,
            })
            .collect(),
    }
}

fn get(nb: &str, table: &str, row: &str, column: &str) -> String {
    nbctl(nb, &["get", table, row, column]).trim().to_string()
}

fn lb_uuid(nb: &str, name: &str) -> String {
    let out = nbctl(
        nb,
        &[
            "--bare",
            "--columns=_uuid",
            "find",
            "Load_Balancer",
            &format!("name=\"{name}\""),
            "external_ids:zstack.io/owner=zstack-ovn",
        ],
    );
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one row of ours named {name}: {out}");
    lines[0].trim().to_string()
}

/// A real NB + SB + northd in a scratch dir (`None`: the binaries are missing).
fn central(tag: &str) -> Option<(tests::Scratch, Central)> {
    let bins = [
        "ovsdb-server",
        "ovsdb-tool",
        "ovn-northd",
        "ovn-nbctl",
        "ovn-sbctl",
    ];
    if !tests::require_real("services_nb", &bins) {
        return None;
    }
    let s = tests::scratch(tag);
    let central = Central::start(CentralConfig {
        dir: s.dir.path().join("central"),
        raft: false,
        northd: true,
        tcp: false,
    })
    .expect("start OVN central");
    Some((s, central))
}

/// An object store with the default Subnet `blue` (10.16.0.0/16).
fn store_with_subnet() -> (MemoryStore, UnboundedReceiver<Event>) {
    let (store, rx) = MemoryStore::new();
    let mut spec = SubnetSpec {
        cidr: "10.16.0.0/16".into(),
        ..Default::default()
    };
    spec.default = true;
    store.apply_subnet(Subnet::new("blue", spec));
    (store, rx)
}

/// Waits (10 s at most) until the SB flows of `subnet-blue` contain every one of `needles`.
fn sb_has(sb: &str, needles: &[&str]) -> bool {
    sb_has_on(sb, "subnet-blue", needles)
}

/// Waits (10 s at most) until the SB flows of datapath `dp` contain every one of `needles`.
fn sb_has_on(sb: &str, dp: &str, needles: &[&str]) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let flows = lab::ctl::sbctl(sb, &["lflow-list", dp]).unwrap_or_default();
        if needles.iter().all(|n| flows.contains(n)) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            eprintln!("{flows}");
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_load_balancers_on_real_nb() {
    let Some((_scratch, central)) = central("svcnb") else {
        return;
    };
    let nb = central.nb_remote();
    let sb = central.sb_remote();
    // a foreign load balancer that happens to carry one of our names
    nbctl(
        &nb,
        &[
            "lb-add",
            "Service_demo/web_TCP",
            "192.0.2.1:80",
            "192.0.2.2:80",
        ],
    );

    let (store, mut rx) = store_with_subnet();
    store.apply_node(node("n1", "172.18.0.11"));
    store.apply_node(node("n2", "172.18.0.12"));
    store.apply_service(service(
        "web",
        "10.96.0.10",
        &[
            ("http", Proto::Tcp, 80, Some(30080)),
            ("dns", Proto::Udp, 53, None),
        ],
    ));
    store.apply_endpoint_slice(slice(
        "web",
        &[("10.16.0.5", "n1"), ("10.16.0.6", "n2")],
        &[("http", Proto::Tcp, 8080), ("dns", Proto::Udp, 5353)],
    ));
    store.apply_service(service(
        "sig",
        "10.96.0.20",
        &[("", Proto::Sctp, 3868, None)],
    ));
    store.apply_service(service(
        "empty",
        "10.96.0.30",
        &[("", Proto::Tcp, 80, None)],
    ));
    // a Service with a part the controller cannot use: the rest is served, the problem
    // is reported once as a Warning event
    let mut partly = service("partly", "10.96.0.40", &[("", Proto::Tcp, 80, None)]);
    let problem = r#"port "bad": protocol "ICMP" is not one of TCP, UDP, SCTP"#;
    partly.problems = vec![problem.to_string()];
    store.apply_service(partly);
    store.mark_synced();
    let mut ctl = controller(&nb, &store).await;
    settle(&mut ctl, &mut rx).await;
    assert_eq!(
        store.service_events(),
        vec![format!("demo/partly: {problem}")],
        "reported once"
    );
    lb_uuid(&nb, "Service_demo/partly_TCP");

    // rows, names, owner marks, VIPs
    let web = lb_uuid(&nb, "Service_demo/web_TCP");
    let vips = get(&nb, "Load_Balancer", &web, "vips");
    assert!(
        vips.contains(r#""10.96.0.10:80"="10.16.0.5:8080,10.16.0.6:8080""#),
        "{vips}"
    );
    assert!(
        vips.contains(r#""172.18.0.11:30080"="10.16.0.5:8080,10.16.0.6:8080""#)
            && vips.contains(r#""172.18.0.12:30080""#),
        "NodePort on every node address: {vips}"
    );
    assert_eq!(get(&nb, "Load_Balancer", &web, "protocol"), "tcp");
    assert_eq!(
        get(&nb, "Load_Balancer", &web, "external_ids:zstack.io/object"),
        "\"demo/web\""
    );
    let udp = lb_uuid(&nb, "Service_demo/web_UDP");
    assert!(get(&nb, "Load_Balancer", &udp, "vips").contains("10.16.0.5:5353"));
    let sctp = lb_uuid(&nb, "Service_demo/sig_SCTP");
    assert_eq!(get(&nb, "Load_Balancer", &sctp, "protocol"), "sctp");
    let empty = lb_uuid(&nb, "Service_demo/empty_TCP");
    assert_eq!(
        get(&nb, "Load_Balancer", &empty, "vips"),
        r#"{"10.96.0.30:80"=""}"#
    );
    assert_eq!(
        get(&nb, "Load_Balancer", &empty, "options:reject"),
        "\"true\""
    );

    // the group holds every row and is attached to the Subnet and join switches
    let group = "zstack-ovn-services_zstack-ovn";
    let members = get(&nb, "Load_Balancer_Group", group, "load_balancer");
    for u in [&web, &udp, &sctp, &empty] {
        assert!(members.contains(u.as_str()), "{u} in group: {members}");
    }
    let group_uuid = get(&nb, "Load_Balancer_Group", group, "_uuid");
    for sw in ["subnet-blue", "join"] {
        assert!(
            get(&nb, "Logical_Switch", sw, "load_balancer_group").contains(&group_uuid),
            "group attached to {sw}"
        );
    }

    // northd programs the VIPs (SCTP included) into the switch pipelines
    let sb_has = |needle: &str| sb_has(&sb, &[needle]);
    assert!(
        sb_has("ip4.dst == 10.96.0.10 && tcp.dst == 80"),
        "TCP VIP flow"
    );
    assert!(
        sb_has("ip4.dst == 10.96.0.20 && sctp.dst == 3868"),
        "SCTP VIP flow"
    );
    assert!(sb_has("reject"), "no-backend VIP rejects");

    // an endpoint change rewrites exactly one row
    let udp_before = get(&nb, "Load_Balancer", &udp, "vips");
    store.apply_endpoint_slice(slice(
        "web",
        &[("10.16.0.5", "n1"), ("10.16.0.7", "n2")],
        &[("http", Proto::Tcp, 8080)],
    ));
    let r = pass(&mut ctl, &mut rx).await;
    assert_eq!(
        (r.nb.inserts, r.nb.updates, r.nb.deletes),
        (0, 2, 0),
        "TCP and UDP rows of web change, nothing else: {r:?}"
    );
    assert!(get(&nb, "Load_Balancer", &web, "vips").contains("10.16.0.7:8080"));
    assert_ne!(get(&nb, "Load_Balancer", &udp, "vips"), udp_before);
    let sig_vips = get(&nb, "Load_Balancer", &sctp, "vips");
    store.apply_endpoint_slice(slice(
        "sig",
        &[("10.16.0.9", "n1")],
        &[("", Proto::Sctp, 3868)],
    ));
    let r = pass(&mut ctl, &mut rx).await;
    assert_eq!(
        (r.nb.inserts, r.nb.updates, r.nb.deletes),
        (0, 1, 0),
        "{r:?}"
    );
    assert_ne!(get(&nb, "Load_Balancer", &sctp, "vips"), sig_vips);
    assert_eq!(
        lb_uuid(&nb, "Service_demo/web_TCP"),
        web,
        "updated in place"
    );

    // restart: nothing to write
    drop(ctl);
    let mut rx2 = store.replay();
    let mut ctl = controller(&nb, &store).await;
    let r = pass(&mut ctl, &mut rx2).await;
    assert_eq!(r.nb.transactions, 0, "restart writes nothing: {r:?}");

    // delete a Service: its rows go, the foreign namesake stays
    store.delete_service("demo/web");
    let r = pass(&mut ctl, &mut rx).await; // the store's own stream
    assert_eq!(r.nb.deletes, 2, "{r:?}");
    let left = nbctl(&nb, &["--bare", "--columns=name", "list", "Load_Balancer"]);
    assert!(
        left.contains("Service_demo/web_TCP"),
        "foreign row kept: {left}"
    );
    let foreign = nbctl(
        &nb,
        &[
            "--bare",
            "--columns=vips",
            "find",
            "Load_Balancer",
            "name=\"Service_demo/web_TCP\"",
        ],
    );
    assert!(
        foreign.contains("192.0.2.2:80"),
        "foreign row untouched: {foreign}"
    );
    assert!(!left.contains("Service_demo/web_UDP"), "{left}");
    tests::record_real_run("services_nb");
}

/// A namespace's user claims an allowed externalIP and a node's address: the first is a
/// VIP, the second is refused (no VIP, one Warning event naming the allowlist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_ips_outside_the_allowlist_get_no_vip_on_real_nb() {
    let Some((_scratch, central)) = central("svcext") else {
        return;
    };
    let nb = central.nb_remote();
    let (store, mut rx) = store_with_subnet();
    store.apply_node(node("n1", "172.18.0.11"));
    store.apply_node(node("n2", "172.18.0.12"));
    // a namespace's user claims an allowed address and node n2's
    let mut grab = service("grab", "10.96.0.50", &[("", Proto::Tcp, 80, None)]);
    grab.external_ips = vec![
        "192.0.2.5".parse().expect("ip"),
        "172.18.0.12".parse().expect("ip"),
    ];
    store.apply_service(grab);
    store.apply_endpoint_slice(slice(
        "grab",
        &[("10.16.0.5", "n1")],
        &[("", Proto::Tcp, 80)],
    ));
    store.mark_synced();
    let cfg = ClusterConfig {
        external_ips: api::services::ExternalIpPolicy::parse("192.0.2.0/28").expect("allowlist"),
        ..ClusterConfig::default()
    };
    let mut ctl = controller_with(&nb, &store, cfg).await;
    settle(&mut ctl, &mut rx).await;
    let vips = get(
        &nb,
        "Load_Balancer",
        &lb_uuid(&nb, "Service_demo/grab_TCP"),
        "vips",
    );
    assert!(vips.contains(r#""192.0.2.5:80"="10.16.0.5:80""#), "{vips}");
    assert!(
        !vips.contains("172.18.0.12"),
        "node n2's address taken: {vips}"
    );
    assert_eq!(
        store.service_events(),
        vec![
            "demo/grab: externalIP 172.18.0.12 refused: outside \
             services.externalIPs.allowedCIDRs (192.0.2.0/28)"
                .to_string()
        ]
    );
}

/// `internalTrafficPolicy: Local` on template load balancers: the cluster IP moves to
/// `Service_<ns>/<name>_<PROTO>_local4` (`options:template=true`), each node's chassis gets
/// one `Chassis_Template_Var` row of ours with that node's endpoints, northd emits the
/// templated flows; an endpoint change on one node rewrites only that node's row; a
/// restart writes nothing; a foreign row for a chassis is left alone (a conflict);
/// deleting the Service deletes our rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_traffic_policy_local_on_real_nb() {
    let Some((_scratch, central)) = central("svcitp") else {
        return;
    };
    let nb = central.nb_remote();
    let sb = central.sb_remote();
    // another CMS's template variables for the chassis of n3
    nbctl(
        &nb,
        &[
            "create",
            "Chassis_Template_Var",
            "chassis=n3",
            "variables:theirs=1.2.3.4",
        ],
    );

    let (store, mut rx) = store_with_subnet();
    store.apply_node(node("n1", "172.18.0.11"));
    let mut n2 = node("n2", "172.18.0.12");
    n2.annotations
        .insert(api::keys::CHASSIS_ID.into(), "chassis-2".into());
    store.apply_node(n2);
    store.apply_node(node("n3", "172.18.0.13"));
    let mut loc = service("loc", "10.96.0.50", &[("http", Proto::Tcp, 80, None)]);
    loc.internal_local = true;
    // ClientIP affinity cannot go on a template row (OVN 23.03, see
    // `template_affinity_is_not_usable_in_ovn_23_03`): left off and reported
    loc.affinity_timeout = Some(60);
    let limitation = loc.limitations();
    assert_eq!(limitation.len(), 1, "{limitation:?}");
    store.apply_service(loc);
    store.apply_endpoint_slice(slice(
        "loc",
        &[("10.16.0.5", "n1")],
        &[("http", Proto::Tcp, 8080)],
    ));
    store.mark_synced();
    let mut ctl = controller(&nb, &store).await;
    settle(&mut ctl, &mut rx).await;

    let names = nbctl(&nb, &["--bare", "--columns=name", "list", "Load_Balancer"]);
    assert!(!names.contains("Service_demo/loc_TCP\n"), "{names}");
    let t4 = lb_uuid(&nb, "Service_demo/loc_TCP_local4");
    assert_eq!(
        get(&nb, "Load_Balancer", &t4, "options:template"),
        "\"true\""
    );
    assert!(
        !get(&nb, "Load_Balancer", &t4, "options").contains("affinity_timeout"),
        "no affinity on the template row"
    );
    assert_eq!(
        store.service_events(),
        vec![format!("demo/loc: {}", limitation[0])],
        "the affinity left off is reported once"
    );
    let members = get(
        &nb,
        "Load_Balancer_Group",
        "zstack-ovn-services_zstack-ovn",
        "load_balancer",
    );
    assert!(
        members.contains(&t4),
        "template row in the group: {members}"
    );
    let ipv = control::translate::service::local::ip_var("demo/loc", true);
    let bv = control::translate::service::local::backends_var("demo/loc", Proto::Tcp, 80, true);
    assert_eq!(
        get(&nb, "Load_Balancer", &t4, "vips"),
        format!("{{\"^{ipv}:80\"=\"^{bv}\"}}")
    );
    let var = |chassis: &str, key: &str| {
        get(
            &nb,
            "Chassis_Template_Var",
            chassis,
            &format!("variables:{key}"),
        )
    };
    assert_eq!(var("n1", &ipv), "\"10.96.0.50\"");
    assert_eq!(var("n1", &bv), "\"10.16.0.5:8080\"");
    assert_eq!(var("chassis-2", &bv), "\"\"", "no endpoint on n2");
    assert_eq!(
        get(
            &nb,
            "Chassis_Template_Var",
            "n1",
            "external_ids:zstack.io/owner"
        ),
        "zstack-ovn"
    );
    assert_eq!(
        get(&nb, "Chassis_Template_Var", "n3", "variables"),
        "{theirs=\"1.2.3.4\"}",
        "foreign row untouched"
    );

    // northd emits the templated VIP and backends into the switch pipeline
    assert!(
        sb_has(
            &sb,
            &[
                &format!("ip4.dst == ^{ipv} && tcp.dst == 80"),
                &format!("backends=^{bv}"),
            ]
        ),
        "templated flows"
    );

    // an endpoint appears on n2: only n2's row changes
    let n1_before = get(&nb, "Chassis_Template_Var", "n1", "variables");
    store.apply_endpoint_slice(slice(
        "loc",
        &[("10.16.0.5", "n1"), ("10.16.0.6", "n2")],
        &[("http", Proto::Tcp, 8080)],
    ));
    let r = pass(&mut ctl, &mut rx).await;
    assert_eq!(
        (r.nb.inserts, r.nb.updates, r.nb.deletes),
        (0, 1, 0),
        "one chassis row: {r:?}"
    );
    assert_eq!(var("chassis-2", &bv), "\"10.16.0.6:8080\"");
    assert_eq!(
        get(&nb, "Chassis_Template_Var", "n1", "variables"),
        n1_before
    );
    assert_eq!(
        lb_uuid(&nb, "Service_demo/loc_TCP_local4"),
        t4,
        "LB untouched"
    );

    // restart: nothing to write
    drop(ctl);
    let mut rx2 = store.replay();
    let mut ctl = controller(&nb, &store).await;
    let r = pass(&mut ctl, &mut rx2).await;
    assert_eq!(r.nb.transactions, 0, "restart writes nothing: {r:?}");
    assert_eq!(r.nb.conflicts.len(), 1, "n3's foreign row: {r:?}");

    // delete the Service: the template row and our variable rows go, the foreign one stays
    store.delete_service("demo/loc");
    let r = pass(&mut ctl, &mut rx).await;
    assert_eq!(
        r.nb.deletes, 3,
        "1 Load_Balancer + 2 Chassis_Template_Var: {r:?}"
    );
    let left = nbctl(
        &nb,
        &[
            "--bare",
            "--columns=chassis",
            "list",
            "Chassis_Template_Var",
        ],
    );
    assert_eq!(left.trim(), "n3", "{left}");
    tests::record_real_run("services_nb");
}

/// Why `internalTrafficPolicy: Local` Services get no `affinity_timeout` on their template
/// rows: OVN 23.03's northd builds the affinity flows of a template VIP as IPv6 even with
/// `address-family=ipv4` (`ip6 && xxreg1 == ^var`: never matches IPv4 traffic) and uses the
/// backends variable as one address (`ip6.dst == ^backends`: a list of `ip:port` does not
/// parse). The rows here are the test's own, on a switch of its own. When this test
/// fails, northd builds usable flows: put `affinity_timeout` on the template rows
/// (`control/src/translate/service/local.rs`) and drop `ServiceInfo::limitations`' entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_affinity_is_not_usable_in_ovn_23_03() {
    let Some((_scratch, central)) = central("svcaff") else {
        return;
    };
    let nb = central.nb_remote();
    let sb = central.sb_remote();
    nbctl(&nb, &["ls-add", "probe"]);
    nbctl(&nb, &["lsp-add", "probe", "p1"]);
    let lb = nbctl(
        &nb,
        &[
            "create",
            "Load_Balancer",
            "name=probe-template",
            "protocol=tcp",
            r#"vips:"^pvip:80"="^pbe""#,
            "options:template=true",
            "options:address-family=ipv4",
            "options:affinity_timeout=60",
        ],
    );
    nbctl(&nb, &["ls-lb-add", "probe", lb.trim()]);
    nbctl(
        &nb,
        &[
            "create",
            "Chassis_Template_Var",
            "chassis=c1",
            "variables:pvip=10.96.0.9",
            r#"variables:pbe="10.16.0.5:8080,10.16.0.6:8080""#,
        ],
    );
    // the templated VIP itself is fine (IPv4)...
    assert!(
        sb_has_on(
            &sb,
            "probe",
            &["ip4.dst == ^pvip && tcp.dst == 80", "backends=^pbe"]
        ),
        "templated LB flows"
    );
    // ...its affinity flows are not
    let flows = lab::ctl::sbctl(&sb, &["lflow-list", "probe"]).unwrap_or_default();
    let aff: Vec<&str> = flows.lines().filter(|l| l.contains("lb_aff")).collect();
    assert!(
        aff.iter()
            .any(|l| l.contains("ls_in_lb_aff_check") && l.contains("ip6 && xxreg1 == ^pvip")),
        "northd no longer builds an IPv4 template's affinity check as IPv6: {aff:#?}"
    );
    assert!(
        !aff.iter().any(|l| l.contains("ip4") && l.contains("^pvip")),
        "northd now builds IPv4 affinity flows for a template VIP: {aff:#?}"
    );
    assert!(
        flows.contains("ip6.dst == ^pbe"),
        "northd no longer uses the backends variable as one address: {aff:#?}"
    );
    tests::record_real_run("services_nb");
}
