//! A real QEMU guest on vhost-user (issue #34), on a real 2-node lab (`--datapath
//! dpdk,kernel`): a KubeVirt VMI with a boot source (`firmware.kernelBoot`, the guest of
//! `scripts/vm-guest-image.sh`) becomes its virt-launcher pod, whose vhost-user `eth0`
//! socket QEMU serves (TCG, 1 vCPU, 256 MiB memfd) and OVS-DPDK's `dpdkvhostuserclient`
//! port joins to OVN.
//!
//! - boot split: QEMU start → guest `/init` → address → console shell → the first ping
//!   answered from a pod on the other node (Geneve);
//! - traffic: pods → guest (ping, TCP with iperf3 into the guest's server), guest → pods
//!   (ping, TCP to their responders), same node and across nodes;
//! - ovs-vswitchd killed and restarted under the running guest: traffic resumes by itself
//!   (QEMU is the server, OVS reconnects), measured;
//! - NetworkPolicy on the VM's port: an isolating policy stops the pods' traffic to the
//!   guest, admitting one pod restores that pod's;
//! - multiqueue: a 2-vCPU VMI with `networkInterfaceMultiqueue` negotiates 2 queue pairs
//!   with OVS and the guest sends on both (one ping per vCPU) and receives;
//! - deleting the VMIs: QEMU, its files, the OVS port, the socket dir and the LSP are gone;
//!   `down` leaves nothing.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lab::pods::vm_pod::{self, Console, VmFiles};
use lab::state::Layout;
use tests::vhost_lab::{DpdkLab, ping, vhost_port_names, vsctl};
use tests::zovn::{Zovn, assert_down_clean, netns_of, pod_ip, wait_until};

const OBJECTS: &str = r#"
apiVersion: network.zstack.io/v1
kind: Subnet
metadata: {name: vm-test}
spec: {cidr: 10.67.0.0/16, gateway: 10.67.0.1, default: true}
---
apiVersion: v1
kind: Pod
metadata: {name: web1, namespace: default}
spec:
  nodeName: node1
  containers: [{name: c, image: x, ports: [{containerPort: 80}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: web2, namespace: default, labels: {app: web2}}
spec:
  nodeName: node2
  containers: [{name: c, image: x, ports: [{containerPort: 80}]}]
---
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: guest1, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: node1}
  domain:
    cpu: {cores: 1}
    memory: {guest: 256Mi}
    firmware:
      kernelBoot:
        kernelArgs: 'zovn.run="iperf3 -s -D"'
        container: {image: zovn/vm-guest, kernelPath: /vmlinux, initrdPath: /initramfs.cpio.gz}
    devices:
      interfaces: [{name: default, binding: {name: vhostuser}}]
  networks: [{name: default, pod: {}}]
"#;

/// Isolates guest1 (ingress), then admits web2 only.
const DENY: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: guest1-isolated, namespace: default}
spec:
  podSelector: {matchLabels: {vm.kubevirt.io/name: guest1}}
  policyTypes: [Ingress]
"#;
const ADMIT_WEB2: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: guest1-from-web2, namespace: default}
spec:
  podSelector: {matchLabels: {vm.kubevirt.io/name: guest1}}
  policyTypes: [Ingress]
  ingress: [{from: [{podSelector: {matchLabels: {app: web2}}}]}]
"#;

/// A 2-vCPU guest asking for one queue pair per vCPU.
const MQ_VMI: &str = r#"
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: guest2, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: node1}
  domain:
    cpu: {cores: 2}
    memory: {guest: 256Mi}
    firmware:
      kernelBoot:
        container: {image: zovn/vm-guest}
    devices:
      networkInterfaceMultiqueue: true
      interfaces: [{name: default, binding: {name: vhostuser}}]
  networks: [{name: default, pod: {}}]
"#;

/// The interrupt counts of the guest's virtio-net queues (`virtio0-input.0` → count),
/// from its `/proc/interrupts`.
fn queue_interrupts(console: &Console) -> std::collections::BTreeMap<String, u64> {
    let (rc, out) = console
        .run("grep virtio /proc/interrupts", Duration::from_secs(60))
        .expect("console");
    assert_eq!(rc, 0, "{out}");
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let name = w.last()?;
            if !(name.contains("-input.") || name.contains("-output.")) {
                return None;
            }
            let n = w.iter().skip(1).map_while(|x| x.parse::<u64>().ok()).sum();
            Some((name.to_string(), n))
        })
        .collect()
}

fn now_ms() -> u64 {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    u64::try_from(d.as_millis()).expect("ms")
}

/// Whether one ping from pod `from` to `ip` is answered within a second.
fn answered(z: &Zovn, from: &str, ip: &str) -> bool {
    let (rc, _, _) = z.run(&["exec", from, "--", "ping", "-c", "1", "-W", "1", ip]);
    rc == 0
}

/// The receiver's Mbit/s of an `iperf3 -f m` client run.
fn receiver_mbits(out: &str) -> f64 {
    out.lines()
        .filter(|l| l.contains("receiver"))
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "Mbits/sec")?;
            w.get(i.checked_sub(1)?)?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no receiver line: {out}"))
}

#[test]
fn a_qemu_guest_on_vhost_user_boots_carries_traffic_and_survives_vswitchd() {
    const T: &str =
        "vm_guest::a_qemu_guest_on_vhost_user_boots_carries_traffic_and_survives_vswitchd";
    if !tests::vhost_lab::available(T) || !tests::vhost_lab::qemu_available(T) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("vmg");
    let DpdkLab {
        mut lab,
        dir,
        z,
        db1,
        down: _down,
        ..
    } = DpdkLab::up(&s, &["dpdk", "kernel"], T);
    let layout = Layout::new(&dir);

    let file = s.dir.path().join("objects.yaml");
    std::fs::write(&file, OBJECTS).expect("write");
    z.ok(&["apply", "-f", file.to_str().expect("utf-8")]);
    let launcher = lab::kubevirt::launcher_name("default", "guest1");
    let vm = &format!("default/{launcher}");
    let pods = z.wait_ready(
        &["default/web1", "default/web2", vm],
        Duration::from_secs(300),
    );
    let (web1, web2, vm_ip) = (
        pod_ip(&pods["default/web1"]),
        pod_ip(&pods["default/web2"]),
        pod_ip(&pods[vm]),
    );
    let vm_ns = netns_of(&pods[vm]);
    let qemu = vm_pod::recorded(&layout, &vm_ns).expect("QEMU recorded");
    assert!(qemu.is_alive(), "QEMU runs");
    assert_eq!(qemu.program, vm_pod::QEMU);
    let ann = &pods[vm]["metadata"]["annotations"];
    assert_eq!(ann["lab.zstack.io/datapath"], "vhost-user");
    assert!(
        ann.get("lab.zstack.io/vm-boot").is_some(),
        "the launcher pod carries the boot request: {ann:#}"
    );

    // the first ping answered from the other node, and the boot split
    let first_ping_ms = {
        let t0 = Instant::now();
        while !answered(&z, "default/web2", &vm_ip) {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "web2 (node2) → guest {vm_ip}: no answer"
            );
        }
        now_ms()
    };
    let tl = vm_pod::timeline(&layout, &vm_ns).expect("boot timeline");
    let (booted, addr, ready) = (
        tl.booted_ms.expect("booted"),
        tl.addr_ms.expect("addr"),
        tl.ready_ms.expect("ready"),
    );
    assert!(booted <= addr && addr <= ready, "{tl:?}");
    let first = first_ping_ms - tl.started_unix_ms;
    assert!(first >= ready, "{first} ms vs {tl:?}");
    eprintln!(
        "boot split (ms after QEMU's start): guest /init {booted} (QEMU waits for OVS's \
         vhost-user connection first), eth0 {:?}, address {addr}, console shell {ready}, \
         first ping from node2 answered {first}",
        tl.eth0_ms
    );

    // the OVS side: one dpdkvhostuserclient port bound to the launcher's LSP, up
    let port = vsctl(
        &db1,
        &[
            "--bare",
            "--columns=name",
            "find",
            "Interface",
            "type=dpdkvhostuserclient",
            &format!("external_ids:iface-id=default_{launcher}"),
        ],
    );
    assert!(!port.is_empty(), "guest1's OVS port");
    let sock = vsctl(
        &db1,
        &["get", "Interface", &port, "options:vhost-server-path"],
    );
    assert!(
        qemu.marker().to_string_lossy() == sock.trim_matches('"'),
        "QEMU serves the socket OVS connects to: {sock} vs {:?}",
        qemu.marker()
    );
    assert_eq!(
        vsctl(&db1, &["get", "Interface", &port, "link_state"]),
        "up"
    );

    // pods → guest: ping and TCP into the guest's iperf3 server
    ping(&z, "default/web1", &vm_ip);
    ping(&z, "default/web2", &vm_ip);
    let out = z.ok(&[
        "exec",
        "default/web2",
        "--",
        "iperf3",
        "-c",
        &vm_ip,
        "-t",
        "5",
        "-f",
        "m",
    ]);
    let mbits = receiver_mbits(&out);
    assert!(mbits > 1.0, "web2 → guest TCP: {out}");
    eprintln!("web2 (node2) → guest TCP, iperf3 5 s: {mbits} Mbit/s (TCG guest)");

    // guest → pods: ping and TCP to their responders, same node and across nodes
    let console = Console::of(&layout, &vm_ns);
    let run = |cmd: &str| console.run(cmd, Duration::from_secs(60)).expect("console");
    for (name, ip) in [("web1", &web1), ("web2", &web2)] {
        let (rc, out) = run(&format!("ping -c 3 -W 2 {ip}"));
        assert_eq!(rc, 0, "guest → {name} ping: {out}");
        let (rc, out) = run(&format!("nc -w 3 {ip} 80 </dev/null"));
        assert!(
            rc == 0 && out.contains(&format!("default/{name}")),
            "guest → {name}:80 TCP: {out}"
        );
    }

    // ovs-vswitchd crash + restart: the guest's traffic resumes by itself
    let t_restart = Instant::now();
    lab.restart_vswitchd(1).expect("restart vswitchd");
    let restarted = t_restart.elapsed();
    let t0 = Instant::now();
    while !answered(&z, "default/web2", &vm_ip) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no answer from the guest 60 s after the ovs-vswitchd restart"
        );
    }
    eprintln!(
        "guest answered again {:?} after ovs-vswitchd was back ({restarted:?} to restart)",
        t0.elapsed()
    );
    let (rc, out) = run(&format!("ping -c 3 -W 2 {web1}"));
    assert_eq!(rc, 0, "guest → web1 after the restart: {out}");
    assert!(qemu.is_alive(), "the same QEMU");
    assert_eq!(vhost_port_names(&db1), port, "one port, the same");

    // NetworkPolicy on the VM's port: isolated, then web2 admitted
    let write = |name: &str, body: &str| {
        let f = s.dir.path().join(name);
        std::fs::write(&f, body).expect("write");
        f.to_str().expect("utf-8").to_string()
    };
    let deny = write("deny.yaml", DENY);
    z.ok(&["apply", "-f", &deny]);
    wait_until("guest1 isolated", Duration::from_secs(30), || {
        !answered(&z, "default/web2", &vm_ip) && !answered(&z, "default/web1", &vm_ip)
    });
    let admit = write("admit.yaml", ADMIT_WEB2);
    z.ok(&["apply", "-f", &admit]);
    wait_until("web2 admitted to guest1", Duration::from_secs(30), || {
        answered(&z, "default/web2", &vm_ip)
    });
    assert!(
        !answered(&z, "default/web1", &vm_ip),
        "web1 is still not admitted"
    );
    z.ok(&["delete", "-f", &deny]);
    z.ok(&["delete", "-f", &admit]);
    wait_until("guest1 open again", Duration::from_secs(30), || {
        answered(&z, "default/web1", &vm_ip)
    });

    // multiqueue: 2 vCPUs, 2 queue pairs negotiated, traffic on both
    let mq = write("mq.yaml", MQ_VMI);
    z.ok(&["apply", "-f", &mq]);
    let mq_launcher = lab::kubevirt::launcher_name("default", "guest2");
    let mq_key = format!("default/{mq_launcher}");
    let pods = z.wait_ready(&[mq_key.as_str()], Duration::from_secs(300));
    let (mq_ip, mq_ns) = (pod_ip(&pods[&mq_key]), netns_of(&pods[&mq_key]));
    let mq_port = vsctl(
        &db1,
        &[
            "--bare",
            "--columns=name",
            "find",
            "Interface",
            &format!("external_ids:iface-id=default_{mq_launcher}"),
        ],
    );
    wait_until(
        "guest2's port negotiated 2 queue pairs",
        Duration::from_secs(30),
        || {
            vsctl(
                &db1,
                &["get", "Interface", &mq_port, "status:num_of_vrings"],
            ) == "4"
        },
    );
    let mq_console = Console::of(&layout, &mq_ns);
    let (rc, out) = mq_console
        .run(
            "nproc; ls /sys/class/net/eth0/queues",
            Duration::from_secs(60),
        )
        .expect("console");
    assert!(
        rc == 0 && out.contains("rx-1") && out.contains("tx-1"),
        "the guest's eth0 has 2 queue pairs: {out}"
    );
    let before = queue_interrupts(&mq_console);
    for cpu in ["1", "2"] {
        let (rc, out) = mq_console
            .run(
                &format!("taskset {cpu} ping -c 20 -i 0.05 -W 2 {web2}"),
                Duration::from_secs(60),
            )
            .expect("console");
        assert_eq!(rc, 0, "guest2 (vCPU mask {cpu}) → web2: {out}");
    }
    ping(&z, "default/web1", &mq_ip);
    let after = queue_interrupts(&mq_console);
    eprintln!("guest2 queue interrupts before {before:?} after {after:?}");
    for q in ["output.0", "output.1"] {
        let (name, n) = after
            .iter()
            .find(|(k, _)| k.ends_with(q))
            .unwrap_or_else(|| panic!("no {q} queue in {after:?}"));
        assert!(
            *n > before.get(name).copied().unwrap_or(0),
            "{name} carried no traffic: {before:?} → {after:?}"
        );
    }
    let rx: u64 = after
        .iter()
        .filter(|(k, _)| k.contains("-input."))
        .map(|(k, n)| n - before.get(k).copied().unwrap_or(0))
        .sum();
    assert!(rx > 0, "guest2 received: {before:?} → {after:?}");
    let mq_pid = i64::from(vm_pod::recorded(&layout, &mq_ns).expect("QEMU").pid);
    z.ok(&["delete", "-f", &mq]);
    wait_until("guest2's QEMU stopped", Duration::from_secs(30), || {
        !tests::zovn::alive(mq_pid)
    });

    // delete the VMI: QEMU, its files, the port, the socket dir, the LSP are gone
    let files = VmFiles::of(&layout, &vm_ns);
    let sock_dir = Path::new(sock.trim_matches('"'))
        .parent()
        .expect("dir")
        .to_path_buf();
    let pid = i64::from(qemu.pid);
    let vmi = s.dir.path().join("vmi.yaml");
    let vmi_doc = OBJECTS
        .split("---")
        .find(|d| d.contains("VirtualMachineInstance"))
        .expect("vmi");
    std::fs::write(&vmi, vmi_doc).expect("write");
    z.ok(&["delete", "-f", vmi.to_str().expect("utf-8")]);
    wait_until("guest1's QEMU stopped", Duration::from_secs(30), || {
        !tests::zovn::alive(pid)
    });
    wait_until("guest1's port removed", Duration::from_secs(30), || {
        vhost_port_names(&db1).is_empty()
    });
    wait_until(
        "guest1's socket dir removed",
        Duration::from_secs(10),
        || !sock_dir.exists(),
    );
    for f in [
        &files.record,
        &files.console_sock,
        &files.qmp_sock,
        &files.boot,
    ] {
        assert!(!f.exists(), "{} left", f.display());
    }
    let nb = lab.nb_remote();
    let lsps = Command::new("ovn-nbctl")
        .args([
            "--db",
            &nb,
            "--bare",
            "--columns=name",
            "list",
            "Logical_Switch_Port",
        ])
        .output()
        .expect("ovn-nbctl");
    let lsps = String::from_utf8_lossy(&lsps.stdout);
    assert!(!lsps.contains(&launcher), "the LSP is gone: {lsps}");

    assert_down_clean(&dir, &s.prefix, &[pid, mq_pid]);
}
