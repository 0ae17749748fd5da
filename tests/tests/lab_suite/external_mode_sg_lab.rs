//! External mode: a pod in the platform's security group is governed by the platform's
//! rules on traffic, and follows the platform's rule changes.
//!
//! A 2-node lab in external mode with `--platform-security-groups`. The platform (played
//! with `ovn-nbctl`): `platform-ls` (10.99.0.0/24) and `platform-ls2` (10.98.0.0/24) behind
//! one router, a VM on `platform-ls2` bound on node 1, and a security group `sg-web`
//! (Port_Group) whose rules drop everything to its members but TCP 22 from 10.98.0.0/24.
//! A Subnet on `platform-ls` names `sg-web`; its pod (node 2, AF_XDP) declares ports 22
//! and 80. Checked:
//! - the pod's port is in `sg-web`, which the Subnet's status and `zovn status` name; from
//!   the VM, port 22 answers and port 80 does not;
//! - the platform adds a rule for port 80: it opens (the time it took is printed); the
//!   platform removes it: closed again;
//! - `zovn trace` from another pod of the group to port 80 names the group and the rule
//!   that dropped it;
//! - the host of the pod's node reaches port 80 (kubelet's probes), which the group drops
//!   for everyone else;
//! - a NetworkPolicy admitting only port 80 on top: 22 closes although the group allows
//!   it, 80 stays closed until the platform adds its rule for 80, then opens (the time it
//!   took is printed) and closes with the rule's removal; the node's host still gets in;
//!   the policy deleted, 22 answers the VM again;
//! - the Subnet names no group any more: the pod's port leaves `sg-web` (the group holds
//!   only the platform's members again) and port 80 answers.

use std::time::{Duration, Instant};

use tests::nbctl::nbctl;
use tests::zovn::{start_agents, wait_until};

const ALLOW_80: &str = "outport == @sg_web && ip4.src == 10.98.0.0/24 && tcp.dst == 80";

/// One probe from the VM: who answered, or why not.
fn probe(netns: &str, target: &str, timeout: Duration) -> Result<String, String> {
    tests::zovn::probe_netns(netns, target, false, timeout)
}

/// Waits until the VM's probe of `target` succeeds (`open`) or fails; how long it took.
fn wait_state(netns: &str, target: &str, open: bool) -> Duration {
    let t0 = Instant::now();
    wait_until(
        &format!(
            "{target} {} from the VM",
            if open { "open" } else { "closed" }
        ),
        Duration::from_secs(30),
        || probe(netns, target, Duration::from_millis(300)).is_ok() == open,
    );
    t0.elapsed()
}

/// Closed stays closed: three probes, each given a whole second, get no answer.
fn assert_closed(netns: &str, target: &str) {
    for _ in 0..3 {
        let r = probe(netns, target, Duration::from_secs(1));
        assert!(r.is_err(), "{target} answered the VM: {r:?}");
    }
}

/// Waits until `zovn trace default/p2 → target` reports a drop saying `want`.
fn wait_trace(z: &tests::zovn::Zovn, target: &str, want: &str) {
    let t0 = Instant::now();
    let last = loop {
        let last = z.trace(&["default/p2", target]);
        // the report wraps its lines: compare with the whitespace collapsed
        let flat = last.1.split_whitespace().collect::<Vec<_>>().join(" ");
        if last.0 == 1 && flat.contains(want) {
            break last;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "trace p2 → {target} does not say {want:?}: exit {}\n{}\n{}",
            last.0,
            last.1,
            last.2
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("{}", last.1);
}

/// The platform adds its rule for port 80 from the VM's network.
fn open_80(nb: &str) {
    nbctl(
        nb,
        &[
            "acl-add",
            "sg_web",
            "to-lport",
            "1002",
            ALLOW_80,
            "allow-related",
        ],
    );
}

fn group_ports(nb: &str) -> String {
    nbctl(
        nb,
        &["--bare", "--columns=ports", "list", "Port_Group", "sg_web"],
    )
}

#[test]
fn the_platforms_security_group_governs_the_pod() {
    if !tests::require_real("external_mode_sg_lab", tests::LAB_BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("xsg");
    let (mut lab, z, _down) = tests::zovn::start_lab_with(&s, 2, &["kernel", "afxdp"], |c| {
        tests::platform::external_mode(c);
        c.platform_security_groups = true;
    });
    let nb = lab.nb_remote();

    // the platform
    let mac = ["0a:99:00:00:00:01", "0a:99:00:00:00:03"];
    tests::platform::routed_switch(&nb, "platform-ls", "platform-lr", mac[0], "10.99.0.1/24");
    tests::platform::routed_switch(&nb, "platform-ls2", "platform-lr", mac[1], "10.98.0.1/24");
    tests::platform::vm_port(
        &nb,
        "platform-ls2",
        "vm-2",
        "fa:16:3e:98:00:05",
        "10.98.0.5",
    );
    // OVN port group names are address-set-like identifiers: `_`, not `-`
    nbctl(&nb, &["pg-add", "sg_web"]);
    for (prio, m, verdict) in [
        ("1000", "outport == @sg_web && ip4", "drop"),
        (
            "1001",
            "outport == @sg_web && ip4.src == 10.98.0.0/24 && tcp.dst == 22",
            "allow-related",
        ),
    ] {
        nbctl(&nb, &["acl-add", "sg_web", "to-lport", prio, m, verdict]);
    }
    let nodes = lab.nodes().to_vec();
    let vm = tests::platform::PlatformVm::bind(
        &s.prefix,
        "vm2",
        &nodes[0],
        "vm-2",
        "fa:16:3e:98:00:05",
        "10.98.0.5/24",
        "10.98.0.1",
    );

    start_agents(&mut lab);
    let p = &s.prefix;
    let file = s.dir.path().join("objects.yaml");
    let write = |groups: &str| {
        std::fs::write(
            &file,
            format!(
                "apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {{name: platform}}\n\
                 spec: {{cidr: 10.99.0.0/24, externalLogicalSwitch: platform-ls, default: true, \
                 securityGroups: [{groups}]}}\n---\n\
                 apiVersion: v1\nkind: Pod\nmetadata: {{name: p1, namespace: default}}\n\
                 spec: {{nodeName: {p}-node2, containers: [{{name: c, ports: \
                 [{{containerPort: 22}}, {{containerPort: 80}}]}}]}}\n---\n\
                 apiVersion: v1\nkind: Pod\nmetadata: {{name: p2, namespace: default}}\n\
                 spec: {{nodeName: {p}-node1, containers: [{{name: c}}]}}\n"
            ),
        )
        .expect("write");
        z.ok(&["apply", "-f", file.to_str().expect("utf-8"), "--wait"]);
    };
    write("sg_web");
    let ready = z.wait_ready(&["default/p1", "default/p2"], Duration::from_secs(60));
    let ip = tests::zovn::pod_ip(&ready["default/p1"]);
    let port = |n: u16| format!("{ip}:{n}");
    wait_until("the pod's port in sg_web", Duration::from_secs(30), || {
        !group_ports(&nb).trim().is_empty()
    });
    // the Subnet's status and `zovn status` name the group
    assert_eq!(
        z.subnet("platform")["status"]["securityGroups"],
        serde_json::json!(["sg_web"])
    );
    let status = z.status(&[]);
    assert!(
        status.contains("platform-ls (platform)")
            && status.contains("  platform security groups: sg_web\n"),
        "{status}"
    );

    // the platform's rules: 22 from the VM's network, nothing else
    wait_state(&vm.netns, &port(22), true);
    assert_eq!(
        probe(&vm.netns, &port(22), Duration::from_secs(2)).as_deref(),
        Ok("default/p1")
    );
    assert_closed(&vm.netns, &port(80));
    // the trace names the group and the rule: p2 (in the group too, but not in the VM's
    // network) → p1:80
    let want = "dropped by the platform's security group sg_web: \
                ACL outport == @sg_web && ip4 (priority 1000)";
    wait_trace(&z, "default/p1:80", want);

    // the platform opens 80, then closes it again
    open_80(&nb);
    let took = wait_state(&vm.netns, &port(80), true);
    eprintln!("the platform's new rule for port 80 took effect on the pod in {took:?}");
    nbctl(&nb, &["acl-del", "sg_web", "to-lport", "1002", ALLOW_80]);
    let took = wait_state(&vm.netns, &port(80), false);
    eprintln!("the platform's removed rule for port 80 took effect on the pod in {took:?}");
    assert_closed(&vm.netns, &port(80));

    // the host of p1's node gets in although the group drops everything but 22 from the
    // VM's network: kubelet's probes come from there
    let host = &nodes[1].netns;
    wait_until("node 2's host → p1:80", Duration::from_secs(30), || {
        probe(host, &port(80), Duration::from_secs(1)).is_ok()
    });

    // NetworkPolicy on top of the group: p1 may be reached on 80 only
    let np = s.dir.path().join("policy.yaml");
    std::fs::write(
        &np,
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
         metadata: {name: web-80, namespace: default}\n\
         spec: {podSelector: {}, ingress: [{ports: [{port: 80}]}]}\n",
    )
    .expect("write");
    let np = np.to_str().expect("utf-8");
    z.ok(&["apply", "-f", np, "--wait"]);
    // the policy closes what the group allows; the group closes what the policy allows
    wait_state(&vm.netns, &port(22), false);
    assert_closed(&vm.netns, &port(22));
    assert_closed(&vm.netns, &port(80));
    // the trace names the platform's rule that decided, through the controller's mirror
    wait_trace(
        &z,
        "default/p1:80",
        "ingress dropped by the platform's security group sg_web: \
         ACL outport == @sg_web && ip4 (priority 1000)",
    );
    // both allow: open, within the same time as without a policy
    open_80(&nb);
    let took = wait_state(&vm.netns, &port(80), true);
    eprintln!("under a NetworkPolicy, the platform's new rule for port 80 took effect in {took:?}");
    assert_closed(&vm.netns, &port(22));
    assert!(
        probe(host, &port(22), Duration::from_secs(2)).is_ok(),
        "node 2's host no longer reaches p1:22 under the policy"
    );
    nbctl(&nb, &["acl-del", "sg_web", "to-lport", "1002", ALLOW_80]);
    let took = wait_state(&vm.netns, &port(80), false);
    eprintln!("under a NetworkPolicy, the platform's removed rule took effect in {took:?}");
    assert_closed(&vm.netns, &port(80));
    // the policy gone: the group alone decides again
    z.ok(&["delete", "-f", np, "--wait"]);
    wait_state(&vm.netns, &port(22), true);

    // the Subnet names no group any more: the pod leaves it, 80 answers
    write("");
    wait_until(
        "the pod's port out of sg_web",
        Duration::from_secs(30),
        || group_ports(&nb).trim().is_empty(),
    );
    wait_state(&vm.netns, &port(80), true);
}
