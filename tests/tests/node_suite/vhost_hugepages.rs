//! A vhost-user pod on a DPDK node whose hugepages are exhausted, for real: a 1-node lab
//! (`--datapath dpdk`, the agent initialises OVS-DPDK), then every free 2 MiB page is
//! given back to the kernel (`nr_hugepages` 0: only the pages ovs-vswitchd-dpdk holds
//! stay), so `HugePages_Free` is 0.
//!
//! - the DPDK pod of `examples/vhost/` is refused with a reason that names the problem,
//!   and the refused attempt leaves no OVS port and no socket directory;
//! - the node keeps its DPDK datapath (DPDK's own pages are in use, not missing);
//! - the pages come back: the lab runtime's retry succeeds and the pod carries TCP.

use std::path::Path;
use std::time::Duration;

use tests::vhost_lab::DpdkLab;
use tests::zovn::{pod_ip, wait_until};

use lab::hugepages::NR_2M as NR_HUGEPAGES;

const PODS: &str = r#"
apiVersion: network.zstack.io/v1
kind: Subnet
metadata: {name: vhost-hp}
spec: {cidr: 10.68.0.0/16, gateway: 10.68.0.1, default: true}
---
apiVersion: v1
kind: Pod
metadata: {name: web1, namespace: default}
spec:
  nodeName: node1
  containers: [{name: c, image: x, ports: [{containerPort: 80}]}]
"#;

fn nr_hugepages() -> u64 {
    lab::hugepages::nr_pages_2m().expect("nr_hugepages")
}

fn meminfo_free() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    dataplane::attach::vhost::hugepages_of(&m)
        .expect("hugepage lines")
        .1
}

/// Puts the page count back however the test ends (before the lab's own `down`).
struct RestorePages(u64);

impl Drop for RestorePages {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_HUGEPAGES, format!("{}\n", self.0));
    }
}

#[test]
fn vhost_pod_is_refused_while_hugepages_are_exhausted_then_starts() {
    const T: &str =
        "vhost_hugepages::vhost_pod_is_refused_while_hugepages_are_exhausted_then_starts";
    if !tests::vhost_lab::available(T) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("vhh");
    let DpdkLab {
        lab,
        z,
        db1: db,
        down: _down,
        ..
    } = DpdkLab::up(&s, &["dpdk"], T);
    let node = lab.node(1).expect("node1").clone();
    let vsctl = |args: &[&str]| tests::vhost_lab::vsctl(&db, args);
    let pods_file = s.dir.path().join("pods.yaml");
    std::fs::write(&pods_file, PODS).expect("write pods");
    z.ok(&["apply", "-f", pods_file.to_str().expect("utf-8")]);
    z.wait_ready(&["default/web1"], Duration::from_secs(60));

    // exhaust: the kernel keeps only the pages in use (ovs-vswitchd-dpdk's)
    let _restore = RestorePages(nr_hugepages());
    std::fs::write(NR_HUGEPAGES, "0\n").expect("give the free hugepages back");
    assert_eq!(meminfo_free(), 0, "HugePages_Free is 0 now");

    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/vhost/10-dpdk-pod.yaml");
    z.ok(&["apply", "-f", app.to_str().expect("utf-8")]);
    let msg = z.wait_message(
        "default/dpdk-app",
        "hugepages exhausted",
        Duration::from_secs(60),
    );
    eprintln!("refused: {msg}");
    assert!(msg.contains("HugePages_Free 0"), "{msg}");
    assert!(msg.contains("default/dpdk-app"), "names the pod: {msg}");
    let ports = vsctl(&[
        "--bare",
        "--columns=name",
        "find",
        "Interface",
        "type=dpdkvhostuserclient",
    ]);
    assert!(ports.is_empty(), "a refused request left a port: {ports}");
    // the agent's vhost root next to this node's OVS ($OVS_RUNDIR/zstack-vhost)
    let sockets = node.dir.join("run/zstack-vhost");
    let left: Vec<_> = std::fs::read_dir(&sockets)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "socket dirs or records left: {left:?}");
    assert_eq!(
        vsctl(&["get", "Open_vSwitch", ".", "dpdk_initialized"]),
        "true",
        "DPDK keeps its pages and the node its datapath"
    );

    // the pages come back: the runtime's retry goes through
    drop(_restore);
    assert!(meminfo_free() > 0);
    let pods = z.wait_ready(&["default/dpdk-app"], Duration::from_secs(90));
    let app_ip = pod_ip(&pods["default/dpdk-app"]);
    let web1_ip = pod_ip(&pods["default/web1"]);
    wait_until(
        "dpdk-app → web1 over TCP",
        Duration::from_secs(30),
        || {
            let (code, out, _) = z.run(&[
                "probe",
                "default/dpdk-app",
                &format!("{web1_ip}:80"),
                "--timeout",
                "1s",
            ]);
            code == 0 && out.trim() == "default/web1"
        },
    );
    wait_until(
        "web1 → dpdk-app over TCP",
        Duration::from_secs(30),
        || {
            let (code, out, _) = z.run(&[
                "probe",
                "default/web1",
                &format!("{app_ip}:8080"),
                "--timeout",
                "1s",
            ]);
            code == 0 && out.trim() == "default/dpdk-app"
        },
    );
    let ports = vsctl(&[
        "--bare",
        "--columns=name",
        "find",
        "Interface",
        "type=dpdkvhostuserclient",
    ]);
    assert_eq!(ports.split_whitespace().count(), 1, "{ports}");
}
