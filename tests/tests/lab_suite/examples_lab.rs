//! The examples written for zstack-ovn-kubernetes users (issue #36), applied as a user
//! would (`zovn lab apply -f examples/<dir>/`) on one 2-node lab (kernel datapath, the
//! real controller, agents and CNI shim), each checked by what it promises:
//! - `subnet-per-namespace/`: each namespace's pod takes its address from its Subnet
//!   (outside the reserved range), and the two Subnets route to each other;
//! - `network-policy/`: the three tiers' matrix (frontend → api allowed, frontend →
//!   database refused, api → database allowed, another namespace → frontend allowed, → api
//!   refused) and the database's egress limited to DNS;
//! - `underlay-vlan/`: the VLAN Subnet gets a localnet port tagged 100, its pods take
//!   addresses outside `excludeIPs` and reach each other across the nodes.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tests::zovn::{Zovn, pod_ip, start_agents, start_lab, wait_until};

fn example(dir: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(dir)
        .to_str()
        .expect("utf-8")
        .to_string()
}

/// Waits until `from` → `target` answers with `who` (`Some`) or is refused (`None`).
fn settles(z: &Zovn, from: &str, target: &str, who: Option<&str>) {
    let mut last = Err(String::new());
    wait_until(
        &format!("{from} → {target}: {who:?}"),
        Duration::from_secs(30),
        || {
            last = z.probe(from, target, false);
            match who {
                Some(w) => last.as_deref() == Ok(w),
                None => last.is_err(),
            }
        },
    );
}

fn ip4(s: &str) -> Ipv4Addr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn the_examples_for_zstack_ovn_kubernetes_users_do_what_they_say() {
    const T: &str = "examples_lab::the_examples_for_zstack_ovn_kubernetes_users_do_what_they_say";
    if !tests::require_real(T, tests::LAB_BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("exm");
    let (mut lab, z, _down) = start_lab(&s, 2, &["kernel"]);
    start_agents(&mut lab);

    // a Subnet per namespace
    z.ok(&["apply", "-f", &example("subnet-per-namespace")]);
    let pods = z.wait_ready(&["app/web", "db/postgres"], Duration::from_secs(60));
    let web = ip4(&pod_ip(&pods["app/web"]));
    let pg = ip4(&pod_ip(&pods["db/postgres"]));
    assert!(
        web.octets()[..2] == [10, 245] && web > ip4("10.245.0.10"),
        "app/web from Subnet app, outside its reserved range: {web}"
    );
    assert!(
        pg.octets()[..2] == [10, 246],
        "db/postgres from Subnet db: {pg}"
    );
    settles(&z, "app/web", &format!("{pg}:5432"), Some("db/postgres"));

    // the NetworkPolicy set
    z.ok(&["apply", "-f", &example("network-policy")]);
    let keys = ["shop/frontend", "shop/api", "shop/database", "other/client"];
    let pods = z.wait_ready(&keys, Duration::from_secs(60));
    let at = |k: &str, port: u16| format!("{}:{port}", pod_ip(&pods[k]));
    let (fe, api, db) = (
        at("shop/frontend", 80),
        at("shop/api", 8080),
        at("shop/database", 5432),
    );
    settles(&z, "shop/frontend", &api, Some("shop/api"));
    settles(&z, "shop/frontend", &db, None);
    settles(&z, "shop/api", &db, Some("shop/database"));
    settles(&z, "other/client", &fe, Some("shop/frontend"));
    settles(&z, "other/client", &api, None);
    // the database opens no connection of its own (egress: DNS only)
    settles(&z, "shop/database", &fe, None);

    // the VLAN Subnet
    z.ok(&["apply", "-f", &example("underlay-vlan")]);
    let pods = z.wait_ready(&["vlan/a", "vlan/b"], Duration::from_secs(60));
    let (a, b) = (pod_ip(&pods["vlan/a"]), pod_ip(&pods["vlan/b"]));
    for ip in [&a, &b] {
        let ip = ip4(ip);
        assert!(
            ip > ip4("192.168.100.2") && ip < ip4("192.168.100.200"),
            "{ip} outside excludeIPs"
        );
    }
    let out = Command::new("ovn-nbctl")
        .args([
            "--db",
            &lab.nb_remote(),
            "--bare",
            "--columns=tag",
            "find",
            "Logical_Switch_Port",
            "type=localnet",
        ])
        .output()
        .expect("ovn-nbctl");
    let tags = String::from_utf8_lossy(&out.stdout);
    assert!(
        tags.split_whitespace().any(|t| t == "100"),
        "a localnet port tagged 100: {tags:?}"
    );
    settles(&z, "vlan/a", &format!("{b}:8080"), Some("vlan/b"));
    settles(&z, "vlan/b", &format!("{a}:8080"), Some("vlan/a"));
}
