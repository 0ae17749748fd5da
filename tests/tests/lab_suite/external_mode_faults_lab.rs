//! External mode when the platform's switch is not what the Subnet says, or goes away
//! under running pods: the Subnet says so (status and a `SubnetInvalid` Warning event),
//! and its pods are left as they are.
//!
//! A 1-node lab in external mode; the platform (played with `ovn-nbctl`) has a switch
//! `platform-ls` behind its router port 10.99.0.1/24. Checked:
//! - a Subnet naming it with cidr 10.98.0.0/24 is `Failed`, with the platform's network,
//!   where the platform declares it, and the Subnet's cidr in the reason and in an event;
//! - fixed to 10.99.0.0/24 it serves a pod, which the host reaches (its management port
//!   on the platform switch);
//! - the platform deletes its switch: the Subnet is `Failed` ("not found ... still
//!   serving the last valid spec") with an event, and the pod keeps its address;
//! - the platform builds the switch again: the Subnet is `Active`, our ports are back on
//!   the new switch and the host reaches the pod again.

use std::time::Duration;

use serde_json::Value;
use tests::nbctl::nbctl;
use tests::zovn::{Zovn, start_agents, wait_until};

fn build_switch(nb: &str) {
    tests::platform::routed_switch(
        nb,
        "platform-ls",
        "platform-lr",
        "0a:99:00:00:00:01",
        "10.99.0.1/24",
    );
}

/// The Subnet's (phase, reason).
fn status(z: &Zovn) -> (String, String) {
    let s = z
        .items("subnets")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "platform")
        .unwrap_or(Value::Null);
    let field = |k: &str| s["status"][k].as_str().unwrap_or_default().to_string();
    (field("phase"), field("reason"))
}

/// Waits until the Subnet is in `phase` with every one of `words` in its reason, and a
/// `SubnetInvalid` event says the same (when `phase` is `Failed`).
fn wait_status(z: &Zovn, phase: &str, words: &[&str]) {
    let mut last = (String::new(), String::new());
    wait_until(
        &format!("Subnet platform {phase} {words:?}"),
        Duration::from_secs(30),
        || {
            last = status(z);
            last.0 == phase && words.iter().all(|w| last.1.contains(w))
        },
    );
    eprintln!("Subnet platform: {last:?}");
    if phase == "Failed" {
        wait_until(
            &format!("a SubnetInvalid event with {words:?}"),
            Duration::from_secs(30),
            || {
                z.items("events").iter().any(|e| {
                    e["reason"] == "SubnetInvalid"
                        && e["involvedObject"]["name"] == "platform"
                        && e["message"]
                            .as_str()
                            .is_some_and(|m| words.iter().all(|w| m.contains(w)))
                })
            },
        );
    }
}

fn host_reaches(lab: &lab::Lab, ip: &str) {
    let netns = lab.nodes()[0].netns.clone();
    let target = format!("{ip}:8080");
    let mut last = Err(String::new());
    wait_until(
        &format!("the host reaches {target}"),
        Duration::from_secs(30),
        || {
            last = tests::zovn::probe_netns(&netns, &target, false, Duration::from_secs(2));
            last.is_ok()
        },
    );
    assert_eq!(last.as_deref(), Ok("default/p1"));
}

#[test]
fn a_wrong_or_deleted_platform_switch_is_reported_and_pods_stay() {
    if !tests::require_real("external_mode_faults_lab", tests::LAB_BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("xmf");
    let (mut lab, z, _down) =
        tests::zovn::start_lab_with(&s, 1, &["kernel"], tests::platform::external_mode);
    let nb = lab.nb_remote();
    build_switch(&nb);
    start_agents(&mut lab);
    let p = &s.prefix;
    let file = s.dir.path().join("subnet.yaml");
    let subnet = |cidr: &str| {
        std::fs::write(
            &file,
            format!(
                "apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {{name: platform}}\n\
                 spec: {{cidr: {cidr}, externalLogicalSwitch: platform-ls, default: true}}\n"
            ),
        )
        .expect("write");
        z.ok(&["apply", "-f", file.to_str().expect("utf-8")]);
    };

    // another network than the platform's switch
    subnet("10.98.0.0/24");
    wait_status(
        &z,
        "Failed",
        &[
            "serves 10.99.0.0/24",
            "router port lrp-platform-ls 10.99.0.1/24",
            "not cidr 10.98.0.0/24",
        ],
    );

    // fixed: it serves a pod, which the host reaches
    subnet("10.99.0.0/24");
    wait_status(&z, "Active", &[]);
    let pod = s.dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p1, namespace: default}}\n\
             spec: {{nodeName: {p}-node1, containers: [{{name: c, ports: [{{containerPort: 8080}}]}}]}}\n"
        ),
    )
    .expect("write");
    z.ok(&["apply", "-f", pod.to_str().expect("utf-8"), "--wait"]);
    let ready = z.wait_ready(&["default/p1"], Duration::from_secs(60));
    let ip = tests::zovn::pod_ip(&ready["default/p1"]);
    host_reaches(&lab, &ip);

    // the platform deletes its switch under the running pod
    nbctl(&nb, &["ls-del", "platform-ls"]);
    wait_status(
        &z,
        "Failed",
        &[
            "\"platform-ls\" not found",
            "still serving the last valid spec",
        ],
    );
    let pods = z.pods();
    assert_eq!(
        tests::zovn::pod_ip(&pods["default/p1"]),
        ip,
        "the pod keeps its address"
    );

    // and builds it again: our ports come back to the new switch, the host reaches the pod
    nbctl(&nb, &["lrp-del", "lrp-platform-ls"]);
    build_switch(&nb);
    wait_status(&z, "Active", &[]);
    wait_until(
        "our pod's and management ports on the new switch",
        Duration::from_secs(30),
        || {
            let ports = nbctl(&nb, &["lsp-list", "platform-ls"]);
            ports.contains("(default_p1)") && ports.contains(&format!("(mgmt.{p}-node1_platform)"))
        },
    );
    host_reaches(&lab, &ip);
}
