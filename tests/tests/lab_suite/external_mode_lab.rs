//! External mode on traffic: the platform's gateway carries the pods' egress, and nothing
//! of the platform's is modified.
//!
//! A 2-node lab (node 1 on kernel ports, node 2 on AF_XDP) whose controller runs in
//! external mode (`zovn lab up --mode external`).
//! Before the controller starts, the test plays the platform (as ZStack would), with
//! `ovn-nbctl` and no external_ids of ours:
//! - a switch `platform-ls` (10.99.0.0/24) with a VM's port (10.99.0.5) and a router
//!   `platform-lr` on 10.99.0.1;
//! - a gateway on that router: a distributed gateway port (172.16.0.200/24 on the lab's
//!   underlay) bound to node 1's chassis (`Gateway_Chassis`), on a switch `platform-ext`
//!   whose `localnet` port (`network_name=physnet`) every node maps to `br-phy`; a default
//!   route via the underlay router 172.16.0.254; an SNAT row 10.99.0.0/24 → 172.16.0.200.
//!
//! The platform also has a Load_Balancer_Group of its own on `platform-ls`.
//!
//! Then a Subnet with `externalLogicalSwitch: platform-ls`, pods `p1` (node 1) and `p2`,
//! `p3` (node 2), `p1` and `p3` behind a NodePort Service and an `internalTrafficPolicy:
//! Local` one. Checked:
//! - each node's host reaches the ClusterIP, and node 2's host node 1's NodePort (through
//!   the nodes' management ports on the platform switch);
//! - both pods reach the lab's external host (198.51.100.10) on TCP 8080 and UDP 5353,
//!   and the host saw 172.16.0.200: the platform's SNAT, on its gateway chassis (node 2's
//!   pod crosses to node 1 through the platform's router);
//! - Services from a pod on the platform's switch: the ClusterIP reaches both backends
//!   (same node and across nodes), node 1's address at the nodePort answers, and the
//!   `internalTrafficPolicy: Local` Service answers from the client's node only;
//! - the controller (gateway mode `local`, the default) created no router, router port,
//!   policy, static route, NAT or gateway row: the only rows of ours in these tables are
//!   the pods' ports (and our Service load balancers with their group);
//! - platform VMs (namespaces bound to the platform's ports on a node) reach the pods on
//!   one L2 and through the platform's router, and the pods reach them;
//! - every platform row is as it was before the controller ran, `_version` included (no
//!   write touched it), except `platform-ls`'s `ports`, which holds our pods' ports too,
//!   and its `load_balancer_group`, which holds our group beside the platform's;
//! - once the pods and the Subnet are deleted, `platform-ls` is back as it was too (ports
//!   and groups), although the Services (and so our group) remain.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tests::nbctl::nbctl;
use tests::zovn::{DownOnDrop, Zovn, start_agents, wait_until};

const EXTERNAL: &str = "198.51.100.10";
/// The platform's SNAT address: its gateway port on the lab's underlay.
const PLATFORM_SNAT: &str = "172.16.0.200";
const PLATFORM_LS: &str = "platform-ls";
const OWNER: &str = "zstack.io/owner";

/// The NB tables a platform's switches, router and gateway live in.
const TABLES: &[&str] = &[
    "Logical_Switch",
    "Logical_Switch_Port",
    "Logical_Router",
    "Logical_Router_Port",
    "Logical_Router_Policy",
    "Logical_Router_Static_Route",
    "NAT",
    "Gateway_Chassis",
    "HA_Chassis_Group",
    "HA_Chassis",
    "Load_Balancer_Group",
];

/// Our Load_Balancer_Group (the table has no `external_ids`: the name marks it).
const OUR_LB_GROUP_PREFIX: &str = "zstack-ovn-services_";

/// The platform's topology, as an IaaS platform builds it: nothing of it is ours.
fn build_platform(nb: &str, gateway_chassis: &str) {
    let router_port = |switch: &str, lsp: &str, lrp: &str| {
        tests::platform::router_port(nb, switch, lsp, lrp);
    };
    nbctl(nb, &["ls-add", PLATFORM_LS]);
    // a load balancer group of the platform's own on its switch: ours joins it there
    nbctl(
        nb,
        &[
            "--id=@g",
            "create",
            "Load_Balancer_Group",
            "name=platform-lbg",
            "--",
            "add",
            "Logical_Switch",
            PLATFORM_LS,
            "load_balancer_group",
            "@g",
        ],
    );
    tests::platform::vm_port(nb, PLATFORM_LS, "vm-1", "fa:16:3e:99:00:05", "10.99.0.5");
    nbctl(nb, &["lr-add", "platform-lr"]);
    nbctl(
        nb,
        &[
            "lrp-add",
            "platform-lr",
            "lrp-platform-ls",
            "0a:99:00:00:00:01",
            "10.99.0.1/24",
        ],
    );
    router_port(PLATFORM_LS, "platform-ls-lr", "lrp-platform-ls");
    // the gateway: a distributed gateway port on node 1's chassis, on a switch whose
    // localnet port leaves through br-phy (ovn-bridge-mappings physnet:br-phy)
    nbctl(nb, &["ls-add", "platform-ext"]);
    nbctl(
        nb,
        &[
            "lsp-add",
            "platform-ext",
            "platform-ext-physnet",
            "--",
            "lsp-set-type",
            "platform-ext-physnet",
            "localnet",
            "--",
            "lsp-set-addresses",
            "platform-ext-physnet",
            "unknown",
            "--",
            "lsp-set-options",
            "platform-ext-physnet",
            "network_name=physnet",
        ],
    );
    nbctl(
        nb,
        &[
            "lrp-add",
            "platform-lr",
            "lrp-platform-ext",
            "0a:99:00:00:00:02",
            &format!("{PLATFORM_SNAT}/24"),
        ],
    );
    router_port("platform-ext", "platform-ext-lr", "lrp-platform-ext");
    nbctl(
        nb,
        &[
            "lrp-set-gateway-chassis",
            "lrp-platform-ext",
            gateway_chassis,
            "10",
        ],
    );
    nbctl(
        nb,
        &[
            "lr-route-add",
            "platform-lr",
            "0.0.0.0/0",
            lab::external::UNDERLAY_ROUTER_V4,
        ],
    );
    nbctl(
        nb,
        &[
            "lr-nat-add",
            "platform-lr",
            "snat",
            PLATFORM_SNAT,
            "10.99.0.0/24",
        ],
    );
    // a second network of the platform's with a VM, behind the same router
    tests::platform::routed_switch(
        nb,
        "platform-ls2",
        "platform-lr",
        "0a:99:00:00:00:03",
        "10.98.0.1/24",
    );
    tests::platform::vm_port(nb, "platform-ls2", "vm-2", "fa:16:3e:98:00:05", "10.98.0.5");
}

/// Every row of [`TABLES`], all columns (`_uuid` and `_version` too), by "TABLE UUID".
type Rows = BTreeMap<String, Value>;

fn snapshot(nb: &str) -> Rows {
    let mut rows = Rows::new();
    for table in TABLES {
        let query =
            serde_json::json!(["OVN_Northbound", {"op": "select", "table": table, "where": []}]);
        let out = Command::new("ovsdb-client")
            .args(["--timeout=30", "transact", nb, &query.to_string()])
            .output()
            .expect("ovsdb-client");
        assert!(
            out.status.success(),
            "select {table}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let reply: Value = serde_json::from_slice(&out.stdout).expect("transact reply");
        for row in reply[0]["rows"].as_array().expect("rows") {
            let uuid = row["_uuid"][1].as_str().expect("_uuid");
            rows.insert(format!("{table} {uuid}"), row.clone());
        }
    }
    rows
}

/// Whether `row` carries our owner mark (or is our load balancer group).
fn ours(row: &Value) -> bool {
    row["external_ids"][1]
        .as_array()
        .is_some_and(|kv| kv.iter().any(|p| p[0] == OWNER))
        || row["name"]
            .as_str()
            .is_some_and(|n| n.starts_with(OUR_LB_GROUP_PREFIX))
}

/// The uuids of an OVSDB set of references (`["uuid", u]` or `["set", [...]]`).
fn uuids(v: &Value) -> BTreeSet<String> {
    match v[0].as_str() {
        Some("uuid") => v[1].as_str().map(String::from).into_iter().collect(),
        Some("set") => v[1]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|u| u[1].as_str().map(String::from))
            .collect(),
        _ => BTreeSet::new(),
    }
}

/// The platform's rows: ours left out, our ports taken out of the switches' `ports` and
/// our group out of their `load_balancer_group`. A switch that holds either has its
/// `_version` left out too (those two columns are the writes the platform's rows take).
fn platform_view(rows: &Rows) -> Rows {
    let our_uuids = |table: &str| -> BTreeSet<String> {
        rows.iter()
            .filter(|(k, r)| k.starts_with(&format!("{table} ")) && ours(r))
            .filter_map(|(_, r)| r["_uuid"][1].as_str().map(String::from))
            .collect()
    };
    let our_ports = our_uuids("Logical_Switch_Port");
    let our_groups = our_uuids("Load_Balancer_Group");
    rows.iter()
        .filter(|(_, r)| !ours(r))
        .map(|(k, r)| {
            let mut r = r.clone();
            // a VM's port: northd sets `up` as the platform's VM binds and leaves (not a
            // write of ours)
            if k.starts_with("Logical_Switch_Port ") && r["type"] == "" {
                r.as_object_mut().map(|o| {
                    o.remove("up");
                    o.remove("_version")
                });
            }
            if k.starts_with("Logical_Switch ") {
                for (column, of_ours) in
                    [("ports", &our_ports), ("load_balancer_group", &our_groups)]
                {
                    let refs = uuids(&r[column]);
                    if refs.iter().any(|p| of_ours.contains(p)) {
                        let mut kept: Vec<Value> = refs
                            .difference(of_ours)
                            .map(|u| serde_json::json!(["uuid", u]))
                            .collect();
                        // OVSDB's JSON writes a one-element set as the element itself
                        r[column] = match kept.len() {
                            1 => kept.remove(0),
                            _ => serde_json::json!(["set", kept]),
                        };
                    }
                }
                r.as_object_mut().map(|o| o.remove("_version"));
            }
            (k.clone(), r)
        })
        .collect()
}

/// Asserts `now`'s platform rows equal `before`'s, naming every row that differs.
fn assert_platform_unchanged(before: &Rows, now: &Rows, when: &str) {
    let (b, n) = (platform_view(before), platform_view(now));
    let keys: BTreeSet<&String> = b.keys().chain(n.keys()).collect();
    let diffs: Vec<String> = keys
        .into_iter()
        .filter(|k| b.get(*k) != n.get(*k))
        .map(|k| {
            format!(
                "{k}:\n  before {}\n  {when} {}",
                b.get(k).map_or("-".into(), Value::to_string),
                n.get(k).map_or("-".into(), Value::to_string)
            )
        })
        .collect();
    assert!(
        diffs.is_empty(),
        "the platform's rows changed {when}:\n{}",
        diffs.join("\n")
    );
}

/// The names (or uuids) of our rows, as "TABLE NAME".
fn our_rows(rows: &Rows) -> Vec<String> {
    rows.iter()
        .filter(|(_, r)| ours(r))
        .map(|(k, r)| {
            let table = k.split(' ').next().unwrap_or_default();
            format!("{table} {}", r["name"].as_str().unwrap_or(k))
        })
        .collect()
}

/// Waits until `pod` reaches the external host on `port`; what the host answered.
fn reach(z: &Zovn, pod: &str, port: u16, udp: bool) -> String {
    let mut last = Err(String::new());
    wait_until(
        &format!("{pod} reaches {EXTERNAL}:{port}"),
        Duration::from_secs(30),
        || {
            last = z.probe(pod, &format!("{EXTERNAL}:{port}"), udp);
            last.is_ok()
        },
    );
    last.unwrap_or_default()
}

/// The source address the external host saw.
fn seen(reply: &str) -> String {
    lab::pods::responder::parse_source_reply(reply)
        .map(|(_, addr)| addr.ip().to_string())
        .unwrap_or_else(|| panic!("not an external host reply: {reply:?}"))
}

#[test]
fn the_platforms_gateway_carries_egress_and_nothing_of_it_changes() {
    if !tests::require_real(
        "external_mode_lab_the_platforms_gateway_carries_egress_and_nothing_of_it_changes",
        tests::LAB_BINS,
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("xmd");
    let dir = s.dir.path().join("lab");
    let mut cfg = lab::LabConfig::new(&dir, &s.prefix);
    cfg.nodes = 2;
    cfg.datapath = vec!["kernel".into(), "afxdp".into()];
    cfg.cluster_cidr = Vec::new();
    cfg.mode = lab::ControllerMode::External;
    let mut lab = lab::Lab::up(cfg).expect("lab up");
    lab.keep_running();
    let _down = DownOnDrop(dir.clone());
    let z = Zovn::new(&dir);
    let nb = lab.nb_remote();
    let gateway_chassis = lab.nodes()[0].system_id.clone();

    // the platform, before the controller runs
    build_platform(&nb, &gateway_chassis);
    // northd's own writes to the platform's rows (`up` of its router ports) come first:
    // the baseline is what the platform's NB looks like at rest
    nbctl(&nb, &["--wait=hv", "sync"]);
    wait_until(
        "northd marks the platform's router ports up",
        Duration::from_secs(30),
        || {
            nbctl(
                &nb,
                &[
                    "--bare",
                    "--columns=up",
                    "find",
                    "Logical_Switch_Port",
                    "type=router",
                ],
            )
            .split_whitespace()
            .filter(|u| *u == "true")
            .count()
                == 3
        },
    );
    let before = snapshot(&nb);
    assert!(our_rows(&before).is_empty(), "{:?}", our_rows(&before));

    lab.start_apiserver(&z.exe).expect("object store");
    lab.start_external_server(&z.exe)
        .expect("the external host's server");
    start_agents(&mut lab);
    let p = &s.prefix;
    let subnet = s.dir.path().join("subnet.yaml");
    std::fs::write(
        &subnet,
        "apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {name: platform}\n\
         spec: {cidr: 10.99.0.0/24, externalLogicalSwitch: platform-ls, default: true}\n",
    )
    .expect("write");
    let pods = s.dir.path().join("pods.yaml");
    // p1 (node 1) and p3 (node 2) serve; p2 (node 2) is the client
    std::fs::write(
        &pods,
        [(1, 1, "{app: web}"), (2, 2, "{}"), (3, 2, "{app: web}")]
            .map(|(i, node, labels)| {
                // a lab pod answers (with its name) on the ports it declares
                format!(
                    "apiVersion: v1\nkind: Pod\n\
                     metadata: {{name: p{i}, namespace: default, labels: {labels}}}\n\
                     spec: {{nodeName: {p}-node{node}, \
                     containers: [{{name: c, ports: [{{containerPort: 8080}}]}}]}}\n"
                )
            })
            .join("---\n"),
    )
    .expect("write");
    let services = s.dir.path().join("services.yaml");
    std::fs::write(&services, SERVICES).expect("write");
    let path = |f: &std::path::Path| f.to_str().expect("utf-8").to_string();
    z.ok(&[
        "apply",
        "-f",
        &path(&subnet),
        "-f",
        &path(&pods),
        "-f",
        &path(&services),
        "--wait",
    ]);
    let all = ["default/p1", "default/p2", "default/p3"];
    let ready = z.wait_ready(&all, Duration::from_secs(60));
    for key in all {
        let ip = tests::zovn::pod_ip(&ready[key]);
        assert!(ip.starts_with("10.99.0."), "{key}: {ip}");
        assert_ne!(ip, "10.99.0.5", "{key} got the platform VM's address");
    }
    // node 1 runs kernel ports, node 2 AF_XDP: wait until p2 has moved to AF_XDP
    let mut datapaths = Vec::new();
    wait_until(
        "p1 on kernel ports, p2 on AF_XDP",
        Duration::from_secs(60),
        || {
            let pods = z.pods();
            datapaths = ["default/p1", "default/p2"]
                .map(|k| pods[k]["metadata"]["annotations"]["lab.zstack.io/datapath"].clone())
                .to_vec();
            datapaths == ["kernel/veth", "afxdp/veth"]
        },
    );

    // egress through the platform's gateway: the outside sees the platform's SNAT
    for pod in ["default/p1", "default/p2"] {
        for (port, udp) in [
            (lab::external::TCP_PORT, false),
            (lab::external::UDP_PORT, true),
        ] {
            let reply = reach(&z, pod, port, udp);
            eprintln!("{pod} → {EXTERNAL}:{port}: {reply}");
            assert_eq!(seen(&reply), PLATFORM_SNAT, "{pod} → {port}: {reply}");
        }
    }

    // the NB first: our group on the platform's switch (beside the platform's), then
    // every chassis caught up
    wait_until(
        "our Service group on the platform's switch",
        Duration::from_secs(30),
        || {
            nbctl(
                &nb,
                &["get", "Logical_Switch", PLATFORM_LS, "load_balancer_group"],
            )
            .split(',')
            .count()
                == 2
        },
    );
    nbctl(&nb, &["--wait=hv", "sync"]);
    services_from_the_platform_switch(&z, &lab);
    hosts_reach_their_pods(&z, &lab, &ready, &s.dir.path().join("deny.yaml"));
    vms_and_pods_talk(&lab, &ready, p);

    // ours: the pods' ports on the platform's switch and the Services' group, nothing else
    // (no gateway router, policy, route or NAT in external mode, whatever the gateway mode)
    let during = snapshot(&nb);
    let mut mine = our_rows(&during);
    mine.sort();
    assert_eq!(
        mine,
        [
            "Load_Balancer_Group zstack-ovn-services_zstack-ovn".to_string(),
            "Logical_Switch_Port default_p1".into(),
            "Logical_Switch_Port default_p2".into(),
            "Logical_Switch_Port default_p3".into(),
            format!("Logical_Switch_Port mgmt.{p}-node1_platform"),
            format!("Logical_Switch_Port mgmt.{p}-node2_platform"),
        ],
        "rows of ours in external mode"
    );
    let groups_of = |rows: &Rows| {
        rows.iter()
            .find(|(k, r)| k.starts_with("Logical_Switch ") && r["name"] == PLATFORM_LS)
            .map(|(_, r)| uuids(&r["load_balancer_group"]))
            .unwrap_or_default()
    };
    let group_named = |rows: &Rows, name: &str| {
        rows.iter()
            .find(|(k, r)| k.starts_with("Load_Balancer_Group ") && r["name"] == name)
            .and_then(|(_, r)| r["_uuid"][1].as_str().map(String::from))
            .unwrap_or_else(|| panic!("no group {name}"))
    };
    assert_eq!(
        groups_of(&during),
        BTreeSet::from([
            group_named(&during, "platform-lbg"),
            group_named(&during, "zstack-ovn-services_zstack-ovn"),
        ]),
        "{PLATFORM_LS}'s load balancer groups: the platform's and ours"
    );
    let ls = during
        .values()
        .find(|r| r["name"] == PLATFORM_LS && r.get("ports").is_some())
        .expect("platform-ls");
    let our_ports: BTreeSet<String> = during
        .iter()
        .filter(|(k, r)| k.starts_with("Logical_Switch_Port ") && ours(r))
        .filter_map(|(_, r)| r["_uuid"][1].as_str().map(String::from))
        .collect();
    assert!(
        our_ports.is_subset(&uuids(&ls["ports"])),
        "the pods' ports are not on {PLATFORM_LS}: {ls}"
    );
    assert_eq!(
        tests::nbctl::column(&nb, "Logical_Router", "name"),
        ["platform-lr"]
    );
    assert_platform_unchanged(&before, &during, "with the pods up");

    // pods and Subnet gone: our ports go, the platform's switch is as it was
    z.ok(&["delete", "-f", &path(&pods), "--wait"]);
    z.ok(&["delete", "-f", &path(&subnet), "--wait"]);
    let mut after = Rows::new();
    wait_until(
        "the pods' ports gone from the NB and our group off the platform's switch",
        Duration::from_secs(30),
        || {
            after = snapshot(&nb);
            our_rows(&after)
                .iter()
                .all(|r| r.starts_with("Load_Balancer_Group "))
                && groups_of(&after) == groups_of(&before)
        },
    );
    assert_platform_unchanged(
        &before,
        &after,
        "after the pods and the Subnet were deleted",
    );
    let ports_of = |rows: &Rows| {
        rows.values()
            .find(|r| r["name"] == PLATFORM_LS && r.get("ports").is_some())
            .map(|r| uuids(&r["ports"]))
    };
    assert_eq!(ports_of(&after), ports_of(&before), "{PLATFORM_LS} ports");
    // the Services remain, and so does our group, attached to no platform switch
    assert_eq!(
        our_rows(&after),
        ["Load_Balancer_Group zstack-ovn-services_zstack-ovn"]
    );
}

/// `web` (NodePort 30080) and `web-itp` (`internalTrafficPolicy: Local`), both in front of
/// p1 (node 1) and p3 (node 2).
const SERVICES: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\n\
    spec: {type: NodePort, selector: {app: web}, ports: [{port: 80, targetPort: 8080, nodePort: 30080}]}\n\
    ---\napiVersion: v1\nkind: Service\nmetadata: {name: web-itp, namespace: default}\n\
    spec: {internalTrafficPolicy: Local, selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}\n";

/// Which backends answer `n` probes of `target` from `from` (a probe that fails is tried
/// once more: the 2 vCPUs are shared with busy-polling PMD threads).
fn backends(z: &Zovn, from: &str, target: &str, n: usize) -> BTreeSet<String> {
    (0..n)
        .map(|_| {
            z.probe(from, target, false)
                .or_else(|_| z.probe(from, target, false))
                .unwrap_or_else(|e| panic!("{from} → {target}: {e}"))
        })
        .collect()
}

/// Waits until `from` reaches `target` at all (the load balancer is on every chassis);
/// fails with the last error and the load balancers in the NB.
fn reaches(z: &Zovn, nb: &str, from: &str, target: &str) {
    let t0 = std::time::Instant::now();
    loop {
        let last = match z.probe(from, target, false) {
            Ok(_) => return,
            Err(e) => e,
        };
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{from} → {target}: {last}\n{}",
            nbctl(nb, &["lb-list"])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Platform VMs with real traffic (network namespaces bound to the platform's ports `vm-1`
/// on node 1, same switch as the pods, and `vm-2` on node 2, the platform's other
/// network): they reach the pods (TCP, answered by the pod), on one L2 and through the
/// platform's router, and the pods reach them (ping).
fn vms_and_pods_talk(lab: &lab::Lab, pods: &BTreeMap<String, Value>, p: &str) {
    let nodes = lab.nodes().to_vec();
    let vm1 = tests::platform::PlatformVm::bind(
        p,
        "vm1",
        &nodes[0],
        "vm-1",
        "fa:16:3e:99:00:05",
        "10.99.0.5/24",
        "10.99.0.1",
    );
    let vm2 = tests::platform::PlatformVm::bind(
        p,
        "vm2",
        &nodes[1],
        "vm-2",
        "fa:16:3e:98:00:05",
        "10.98.0.5/24",
        "10.98.0.1",
    );
    let vm_probe = |vm: &tests::platform::PlatformVm, pod: &str| {
        let target = format!("{}:8080", tests::zovn::pod_ip(&pods[pod]));
        let mut last = String::new();
        wait_until(
            &format!("{} → {pod} ({target})", vm.netns),
            Duration::from_secs(30),
            || {
                let r = tests::zovn::probe_netns(&vm.netns, &target, false, Duration::from_secs(2));
                let ok = r.is_ok();
                last = r.unwrap_or_else(|e| e);
                ok
            },
        );
        assert_eq!(last, pod, "{} → {target}", vm.netns);
    };
    // one L2: vm-1 (node 1) → p1 (node 1) and p3 (node 2)
    vm_probe(&vm1, "default/p1");
    vm_probe(&vm1, "default/p3");
    // routed by the platform: vm-2 (10.98.0.0/24, node 2) → p1 (node 1)
    vm_probe(&vm2, "default/p1");
    // and back: the pods ping the VMs
    for (pod, vm_ip) in [("default/p2", "10.99.0.5"), ("default/p1", "10.98.0.5")] {
        let ns = tests::zovn::netns_of(&pods[pod]);
        wait_until(
            &format!("{pod} pings {vm_ip}"),
            Duration::from_secs(30),
            || lab::netns::exec(&ns, &["ping", "-c", "1", "-W", "2", vm_ip]).is_ok(),
        );
    }
    vm2.ping(&tests::zovn::pod_ip(&pods["default/p3"]))
        .expect("vm-2 pings p3");
}

/// Host → pod: each node reaches the pods it hosts on the platform's switch through its
/// management port there (`zpm*`, an address of the Subnet), also when a NetworkPolicy
/// isolates the pod (as kubelet's probes must).
fn hosts_reach_their_pods(
    z: &Zovn,
    lab: &lab::Lab,
    pods: &BTreeMap<String, Value>,
    deny: &std::path::Path,
) {
    let nodes = lab.nodes().to_vec();
    let served = [(&nodes[0], "default/p1"), (&nodes[1], "default/p3")];
    let host_probe = |netns: &str, target: &str| {
        tests::zovn::probe_netns(netns, target, false, Duration::from_secs(2))
    };
    let check = |when: &str| {
        for (node, pod) in served {
            let target = format!("{}:8080", tests::zovn::pod_ip(&pods[pod]));
            let mut last = Err(String::new());
            wait_until(
                &format!("host of {} → {pod} ({target}) {when}", node.netns),
                Duration::from_secs(30),
                || {
                    last = host_probe(&node.netns, &target);
                    last.is_ok()
                },
            );
            assert_eq!(last.as_deref(), Ok(pod), "{} → {target}", node.netns);
        }
    };
    check("");
    // the host's device: an address of the Subnet, on-link
    let dev = api::platform_mgmt::device_name("platform");
    let addr = lab::netns::exec(&nodes[0].netns, &["ip", "-br", "addr", "show", &dev])
        .unwrap_or_else(|e| panic!("{dev} on {}: {e}", nodes[0].netns));
    assert!(addr.contains("10.99.0."), "{dev}: {addr}");

    // isolated by a NetworkPolicy: other pods are refused, the hosts still get in
    std::fs::write(
        deny,
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
         metadata: {name: deny-web, namespace: default}\n\
         spec: {podSelector: {matchLabels: {app: web}}, policyTypes: [Ingress]}\n",
    )
    .expect("write");
    let deny_arg = deny.to_str().expect("utf-8");
    z.ok(&["apply", "-f", deny_arg, "--wait"]);
    let p1 = format!("{}:8080", tests::zovn::pod_ip(&pods["default/p1"]));
    wait_until(
        "the policy isolates p1 from p2",
        Duration::from_secs(30),
        || z.probe("default/p2", &p1, false).is_err(),
    );
    check("under a deny-all NetworkPolicy");
    z.ok(&["delete", "-f", deny_arg, "--wait"]);
}

/// Services from pods on the platform's switch: ClusterIP to both backends, NodePort at
/// node 1's address, and `internalTrafficPolicy: Local` kept to the client's node.
fn services_from_the_platform_switch(z: &Zovn, lab: &lab::Lab) {
    let nb = lab.nb_remote();
    let cluster_ip = |name: &str| {
        z.items("services")
            .into_iter()
            .find(|s| s["metadata"]["name"] == name)
            .and_then(|s| s["spec"]["clusterIP"].as_str().map(String::from))
            .unwrap_or_else(|| panic!("Service {name} has no cluster IP"))
    };
    let (web, itp) = (
        format!("{}:80", cluster_ip("web")),
        format!("{}:80", cluster_ip("web-itp")),
    );
    let webs = BTreeSet::from(["default/p1".to_string(), "default/p3".to_string()]);
    let client = "default/p2";
    reaches(z, &nb, client, &web);
    assert_eq!(
        backends(z, client, &web, 16),
        webs,
        "{client} → ClusterIP {web}: both backends, same node and across"
    );
    let node1 = format!("{}:30080", lab.nodes()[0].encap_ip);
    reaches(z, &nb, client, &node1);
    let seen = backends(z, client, &node1, 4);
    assert!(
        seen.is_subset(&webs),
        "{client} → NodePort {node1}: {seen:?}"
    );
    // internalTrafficPolicy: Local — each client's node serves it
    for (from, local) in [(client, "default/p3"), ("default/p1", "default/p1")] {
        reaches(z, &nb, from, &itp);
        assert_eq!(
            backends(z, from, &itp, 8),
            BTreeSet::from([local.to_string()]),
            "{from} → {itp} (internalTrafficPolicy: Local)"
        );
    }
    // the nodes' hosts: the ClusterIP through their management port on the platform
    // switch (via the platform's router, as the pods), and node 1's NodePort from node 2's
    // host (DNATed to the ClusterIP there, masqueraded to node 1's port address)
    let nodes = lab.nodes();
    for (host, target) in [
        (&nodes[0].netns, &web),
        (&nodes[1].netns, &web),
        (&nodes[1].netns, &node1),
    ] {
        let mut last = Err(String::new());
        wait_until(
            &format!("host {host} → {target}"),
            Duration::from_secs(30),
            || {
                last = tests::zovn::probe_netns(host, target, false, Duration::from_secs(1));
                last.is_ok()
            },
        );
        let who = last.unwrap_or_default();
        assert!(webs.contains(&who), "host {host} → {target}: {who}");
    }
}
