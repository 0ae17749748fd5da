//! A DPDK device as the node's uplink (`uplink: dpdk`, `uplinkDevargs`) on real
//! components: a 2-node lab (node 1 on the dpdk datapath, node 2 kernel). DPDK's
//! `net_af_packet` vdev over node 1's underlay veth stands in for a NIC bound to vfio-pci:
//! the agent takes the same path (host checks, `type=dpdk` with `options:dpdk-devargs`,
//! ovs-vswitchd opens it through DPDK), only the device differs.
//!
//! Checked:
//! - node 1's br-phy uplink becomes a DPDK port that ovs-vswitchd opened; the status says
//!   so and why, an `UplinkDpdk` event was sent; pods on both nodes reach each other
//!   through the Geneve tunnel over it, and node 1's pod reaches the lab's external host
//!   (egress SNATed to node 1's address, out through the DPDK uplink);
//! - refusals by name, each with an `UplinkRefused` Warning event and the port left as it
//!   was: devargs that name nothing DPDK can take, and this machine's real PCI devices —
//!   one without a driver, one bound to the kernel's virtio-pci — and one that does not
//!   exist (the vfio-pci/IOMMU refusals need a vfio host: unit-tested on a fake sysfs in
//!   `dataplane::host::dpdk_nic`);
//! - `uplink: auto` again: the port goes back to AF_XDP, traffic flows.
//!
//! Needs root, hugepages (set up by the lab), OVS (both builds), OVN.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tests::node_status::{events, has_event, wait_status};
use tests::zovn::{Zovn, wait_until};

const BINS: &[&str] = &[
    "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk",
    "/usr/lib/openvswitch-switch/ovs-vswitchd",
    "ovsdb-server",
    "ovn-northd",
    "ovn-controller",
    "ovs-vsctl",
];

/// (type, error, ofport, options:dpdk-devargs) of Interface `port` on node 1.
fn iface(dir: &Path, port: &str) -> (String, String, String, String) {
    let out = Command::new("ovs-vsctl")
        .arg(format!("--db=unix:{}/node1/run/db.sock", dir.display()))
        .args(["get", "Interface", port, "type", "error", "ofport"])
        .output()
        .expect("ovs-vsctl");
    let v = String::from_utf8_lossy(&out.stdout).to_string();
    let mut l = v.lines().map(|s| s.trim().trim_matches('"').to_string());
    let devargs = Command::new("ovs-vsctl")
        .arg(format!("--db=unix:{}/node1/run/db.sock", dir.display()))
        .args([
            "--if-exists",
            "get",
            "Interface",
            port,
            "options:dpdk-devargs",
        ])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .trim_matches('"')
                .to_string()
        })
        .unwrap_or_default();
    (
        l.next().unwrap_or_default(),
        l.next().unwrap_or_default(),
        l.next().unwrap_or_default(),
        devargs,
    )
}

/// Writes node 1's agent config file (the lab's for dpdk plus `extra`) and restarts it.
fn file_config(z: &Zovn, extra: &str) {
    let text = format!("{}{extra}", lab::node::datapath_config("dpdk"));
    std::fs::write(z.dir.join("node1/datapath.yaml"), text).expect("write datapath.yaml");
    let mut lab = lab::Lab::open(&z.dir).expect("open lab");
    let agent = tests::workspace_bin("zstack-ovnkube-node");
    let shim = tests::workspace_bin("zstack-ovn-cni");
    lab.restart_agent_with(1, &agent, Some(&shim), |_| {})
        .expect("restart agent 1");
}

/// Pod `from` reaches `ip:8080` (its responder answers with the pod's name), within 20 s.
fn reaches(z: &Zovn, from: &str, ip: &str, name: &str) {
    let mut last = String::new();
    wait_until(
        &format!("{from} → {ip}:8080 ({name})"),
        Duration::from_secs(20),
        || match z.probe(from, &format!("{ip}:8080"), false) {
            Ok(out) if out.contains(name) => true,
            Ok(out) | Err(out) => {
                last = out;
                false
            }
        },
    );
}

#[test]
fn a_dpdk_vdev_uplink_carries_the_tunnel_and_egress_and_bad_devices_are_refused() {
    if !tests::require_real("dpdk_uplink_lab", BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("dul");
    let (z, _down) = tests::zovn::cli_up(&s, &["--nodes", "2", "--datapath", "dpdk,kernel"]);
    let (dir, p) = (z.dir.clone(), s.prefix.clone());
    let (n1, n2) = (format!("{p}-node1"), format!("{p}-node2"));
    let u1 = format!("{p}u1");
    let devargs = format!("net_af_packet0,iface={u1}");

    file_config(&z, &format!("uplink: dpdk\nuplinkDevargs: \"{devargs}\"\n"));
    let st = wait_status(&z, &n1, "DPDK uplink", |s| s["uplink"]["type"] == "dpdk");
    assert_eq!(st["uplink"]["port"], u1.as_str(), "{st:#}");
    let reason = st["uplink"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(&devargs), "{st:#}");
    let (t, err, ofport, da) = iface(&dir, &u1);
    assert_eq!((t.as_str(), da.as_str()), ("dpdk", devargs.as_str()));
    assert!(
        err == "[]" && ofport.parse::<i64>().is_ok_and(|o| o > 0),
        "{err} {ofport}"
    );
    wait_until("UplinkDpdk event", Duration::from_secs(10), || {
        has_event(&events(&z), &n1, "UplinkDpdk", &devargs)
    });

    // the tunnel and egress ride the DPDK uplink
    let f = s.dir.path().join("pods.yaml");
    let pod = |name: &str, node: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
             spec: {{nodeName: {node}, containers: [{{name: c, ports: [{{containerPort: 8080}}]}}]}}\n"
        )
    };
    std::fs::write(&f, format!("{}---\n{}", pod("d1", &n1), pod("k2", &n2))).expect("write");
    z.ok(&["apply", "-f", f.to_str().expect("utf-8"), "--wait"]);
    let pods = z.wait_ready(&["default/d1", "default/k2"], Duration::from_secs(60));
    let ip = |k: &str| tests::zovn::pod_ip(&pods[k]);
    let (d1, k2) = (ip("default/d1"), ip("default/k2"));
    reaches(&z, "default/d1", &k2, "k2");
    reaches(&z, "default/k2", &d1, "d1");
    let reply = tests::egress::reach(&z, "default/d1", "8080", false);
    assert_eq!(tests::egress::seen(&reply), "172.16.0.1", "{reply}");
    assert_eq!(iface(&dir, &u1).0, "dpdk", "still the DPDK uplink");

    // refusals, each by name; the port stays as it is
    let mut refusals: Vec<(String, String)> = vec![
        ("net_bogus0,iface=x".into(), "neither a PCI address".into()),
        ("0000:7f:1f.7".into(), "does not exist".into()),
    ];
    let pci = |a: &str| Path::new("/sys/bus/pci/devices").join(a);
    let driver = |a: &str| {
        std::fs::read_link(pci(a).join("driver"))
            .ok()
            .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
    };
    let mut devices: Vec<String> = std::fs::read_dir("/sys/bus/pci/devices")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    devices.sort();
    if let Some(a) = devices.iter().find(|a| driver(a).is_none()) {
        refusals.push((a.clone(), "no driver bound".into()));
    }
    if let Some((a, d)) = devices.iter().find_map(|a| {
        driver(a)
            .filter(|d| !dataplane::host::dpdk_nic::USERSPACE_DRIVERS.contains(&d.as_str()))
            .map(|d| (a.clone(), d))
    }) {
        refusals.push((a, format!("bound to {d}")));
    }
    for (bad, says) in &refusals {
        file_config(&z, &format!("uplink: dpdk\nuplinkDevargs: \"{bad}\"\n"));
        let st = wait_status(&z, &n1, &format!("{bad} refused"), |s| {
            s["uplink"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("refused") && r.contains(says.as_str()))
        });
        assert_eq!(st["uplink"]["type"], "dpdk", "left as it was: {st:#}");
        let extra = Command::new("ovs-vsctl")
            .arg(format!("--db=unix:{}/node1/run/db.sock", dir.display()))
            .args(["get", "Open_vSwitch", ".", "other_config:dpdk-extra"])
            .output()
            .expect("ovs-vsctl");
        let extra = String::from_utf8_lossy(&extra.stdout);
        assert_eq!(
            extra.trim().trim_matches('"'),
            "--no-pci",
            "a refused device never reaches DPDK"
        );
        wait_until(
            &format!("UplinkRefused for {bad}"),
            Duration::from_secs(10),
            || has_event(&events(&z), &n1, "UplinkRefused", says),
        );
        eprintln!("{bad}: {}", st["uplink"]["reason"]);
    }
    assert!(refusals.len() >= 2, "{refusals:?}");

    // back to auto: AF_XDP again, traffic flows
    file_config(&z, "");
    wait_status(&z, &n1, "AF_XDP uplink again", |s| {
        s["uplink"]["type"] == "afxdp"
    });
    let (t, _, _, da) = iface(&dir, &u1);
    assert_eq!(
        (t.as_str(), da.as_str()),
        ("afxdp", ""),
        "dpdk-devargs removed"
    );
    reaches(&z, "default/k2", &d1, "d1");
}
