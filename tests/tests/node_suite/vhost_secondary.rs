//! vhost-user on a Multus SECONDARY network, end to end on a real 2-node lab
//! (`--datapath dpdk,kernel`): `examples/vhost/secondary/` (a Subnet, a vhost-user NAD
//! naming it, a KubeVirt VMI with the pod network on eth0 and the NAD on net1) applied
//! through `zovn lab apply`; the real controller, agents and shim; the lab's runtime
//! emulating Multus (eth0 ADD, then net1 ADD with the NAD's config); testpmd with 2 queue
//! pairs behind net1's socket.
//!
//! - the VM pod's eth0 (veth) reaches a pod of the default Subnet on the other node, and
//!   is reached back;
//! - its net1 (vhost-user, an OVS `dpdkvhostuserclient` port bound to the second LSP
//!   `default_<pod>_default.vhost-sec`) pings and carries TCP to veth pods of the
//!   secondary Subnet on the same node and on the other node, and is reached back;
//! - `network-status` has two entries: `zstack-ovn` (eth0, default) and
//!   `default/vhost-sec` (net1, with the vhost-user device-info);
//! - OVS negotiated 2 queue pairs (Interface status `num_of_vrings` 4) and CNI CHECK of
//!   net1 passes (it compares them with the request);
//! - a guest that opens 1 of the 2 queue pairs its NAD asks for: CHECK fails and says so;
//! - the node agent is killed and restarted: same Interface row, same LSP binding, CHECK
//!   passes, traffic on net1;
//! - deleting the VMI leaves no LSP, no port, no socket dir, no testpmd.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::vhost_lab::{DpdkLab, ping, probe_until, vsctl};
use tests::zovn::{Zovn, alive, assert_down_clean, pod_ip, wait_until};

/// The default Subnet, a pod on it (node2), and veth pods of the secondary Subnet's
/// namespace on both nodes.
const SUBNET: &str = r#"
apiVersion: network.zstack.io/v1
kind: Subnet
metadata: {name: vsec-default}
spec: {cidr: 10.66.0.0/16, gateway: 10.66.0.1, default: true}
"#;
const PODS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: vhost-sec}
---
apiVersion: v1
kind: Pod
metadata: {name: web0, namespace: default}
spec:
  nodeName: node2
  containers: [{name: c, image: x, ports: [{containerPort: 80}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: web1, namespace: vhost-sec}
spec:
  nodeName: node1
  containers: [{name: c, image: x, ports: [{containerPort: 80}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: web2, namespace: vhost-sec}
spec:
  nodeName: node2
  containers: [{name: c, image: x, ports: [{containerPort: 80}]}]
"#;

/// A NAD asking for 2 queue pairs whose lab guest opens 1, and a pod on it.
const ONE_QUEUE: &str = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: vhost-sec-1q, namespace: default}
spec:
  config: '{"cniVersion": "1.0.0", "name": "vhost-sec-1q", "type": "zstack-ovn-cni",
    "subnet": "vhost-sec", "interfaceType": "vhost-user", "vhostUser": {"queues": 2},
    "labGuestQueues": 1}'
---
apiVersion: v1
kind: Pod
metadata:
  name: mq
  namespace: default
  annotations: {k8s.v1.cni.cncf.io/networks: vhost-sec-1q}
spec: {nodeName: node1, containers: []}
"#;

/// The `ip -o addr` line of `ifname` in pod `key`'s netns.
fn addr_of(z: &Zovn, key: &str, ifname: &str) -> String {
    z.ok(&[
        "exec", key, "--", "ip", "-o", "-4", "addr", "show", "dev", ifname,
    ])
}

/// CNI CHECK of interface `ifname` through the real shim.
fn check(socket: &Path, cid: &str, netns: &str, pod: &str, ifname: &str) -> (bool, Value) {
    let conf = json!({"cniVersion": "1.1.0", "name": "vhost-sec", "type": "zstack-ovn-cni",
        "serverSocket": socket, "timeoutSeconds": 10.0, "interfaceType": "vhost-user",
        "subnet": "vhost-sec", "vhostUser": {"queues": 2}});
    let mut c = cni::invoke::Invocation::pod("CHECK", cid, netns, ifname, "default", pod)
        .command(tests::workspace_bin("zstack-ovn-cni"))
        .spawn()
        .expect("run shim");
    use std::io::Write;
    c.stdin
        .take()
        .expect("stdin")
        .write_all(conf.to_string().as_bytes())
        .expect("stdin");
    let out = c.wait_with_output().expect("shim");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(text.trim()).unwrap_or(Value::Null);
    (out.status.success(), v)
}

#[test]
fn vhost_user_on_a_secondary_network() {
    const T: &str = "vhost_secondary::vhost_user_on_a_secondary_network";
    if !tests::vhost_lab::available(T) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let t_all = Instant::now();
    let s = tests::scratch("vhs");
    let mut dl = DpdkLab::up(&s, &["dpdk", "kernel"], T);
    let (dir, db1) = (dl.dir.clone(), dl.db1.clone());
    let z = Zovn::new(&dir);

    let write = |name: &str, body: &str| {
        let p = s.dir.path().join(name);
        std::fs::write(&p, body).expect("write");
        p.to_str().expect("utf-8").to_string()
    };
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/vhost/secondary");
    z.ok(&["apply", "-f", &write("subnet.yaml", SUBNET)]);
    z.ok(&["apply", "-f", examples.to_str().expect("utf-8")]);
    z.ok(&["apply", "-f", &write("pods.yaml", PODS)]);
    let launcher = lab::kubevirt::launcher_name("default", "vm2");
    let vm = &format!("default/{launcher}");
    let keys = [
        vm.as_str(),
        "default/web0",
        "vhost-sec/web1",
        "vhost-sec/web2",
    ];
    let t0 = Instant::now();
    let pods = z.wait_ready(&keys, Duration::from_secs(120));
    eprintln!("4 pods ready in {:?}", t0.elapsed());
    eprintln!("{}", z.ok(&["get", "pods"]));

    // the virt-launcher pod names the NAD as Multus does; eth0 is a veth
    let ann = &pods[vm]["metadata"]["annotations"];
    let nets: Value = serde_json::from_str(
        ann["k8s.v1.cni.cncf.io/networks"]
            .as_str()
            .expect("networks"),
    )
    .expect("json");
    assert_eq!(
        nets,
        json!([{"name": "vhost-sec", "namespace": "default", "interface": "net1"}])
    );
    assert!(
        ann["lab.zstack.io/datapath"]
            .as_str()
            .unwrap_or("")
            .contains("/veth"),
        "eth0 is a veth (fast start: `kernel/veth→afxdp` until it moved): {ann}"
    );
    assert!(ann.get("network.zstack.io/vhost-user").is_none());
    let pn: Value = serde_json::from_str(
        ann["k8s.ovn.org/pod-networks"]
            .as_str()
            .expect("pod-networks"),
    )
    .expect("json");
    let eth0_ip = pod_ip(&pods[vm]);
    let net1_cidr = pn["default/vhost-sec"]["ip_addresses"][0]
        .as_str()
        .expect("secondary address")
        .to_string();
    let net1_ip = net1_cidr.split('/').next().expect("ip").to_string();
    assert!(eth0_ip.starts_with("10.66."), "{eth0_ip}");
    assert!(net1_ip.starts_with("10.77."), "{net1_ip}");
    assert!(
        addr_of(&z, vm, "net1").contains(&net1_cidr),
        "the tap net1 carries the secondary address"
    );

    // network-status: the default network and the NAD, device-info on net1
    let status: Value = serde_json::from_str(
        ann["k8s.v1.cni.cncf.io/network-status"]
            .as_str()
            .expect("network-status"),
    )
    .expect("json");
    assert_eq!(status.as_array().map(Vec::len), Some(2), "{status}");
    assert_eq!(status[0]["name"], "zstack-ovn");
    assert_eq!(status[0]["interface"], "eth0");
    assert_eq!(status[0]["default"], true);
    assert_eq!(status[0]["ips"][0], eth0_ip.as_str());
    assert!(status[0].get("device-info").is_none());
    assert_eq!(status[1]["name"], "default/vhost-sec");
    assert_eq!(status[1]["interface"], "net1");
    assert_eq!(status[1]["default"], false);
    assert_eq!(status[1]["ips"][0], net1_ip.as_str());
    assert_eq!(status[1]["device-info"]["type"], "vhost-user");
    assert_eq!(status[1]["device-info"]["vhost-user"]["mode"], "server");
    let sock = status[1]["device-info"]["vhost-user"]["path"]
        .as_str()
        .expect("socket")
        .to_string();
    assert!(
        sock.ends_with("/net1.sock") && Path::new(&sock).exists(),
        "{sock}"
    );

    // OVS: the vhost-user port bound to the second LSP, 2 queue pairs negotiated
    let port = vsctl(
        &db1,
        &[
            "--bare",
            "--columns=name",
            "find",
            "Interface",
            "type=dpdkvhostuserclient",
        ],
    );
    assert_eq!(port.lines().count(), 1, "one vhost-user port: {port}");
    let lsp = format!("default_{launcher}_default.vhost-sec");
    assert_eq!(
        vsctl(&db1, &["get", "Interface", &port, "external_ids:iface-id"]),
        lsp
    );
    assert_eq!(
        vsctl(
            &db1,
            &["get", "Interface", &port, "options:vhost-server-path"]
        ),
        sock
    );
    wait_until(
        "net1's port negotiated 2 queue pairs",
        Duration::from_secs(20),
        || {
            vsctl(&db1, &["get", "Interface", &port, "status:num_of_vrings"]) == "4"
                && vsctl(&db1, &["get", "Interface", &port, "status:status"]) == "connected"
        },
    );
    eprintln!(
        "net1 port {port}: status {}",
        vsctl(&db1, &["get", "Interface", &port, "status"])
    );
    let nb = dl.lab.nb_remote();
    let nbctl = |args: &[&str]| {
        let out = Command::new("ovn-nbctl")
            .arg("--db")
            .arg(&nb)
            .args(args)
            .output()
            .expect("ovn-nbctl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let sec_ports = nbctl(&["lsp-list", "subnet-vhost-sec"]);
    assert!(sec_ports.contains(&format!("({lsp})")), "{sec_ports}");
    assert!(
        nbctl(&["lsp-list", "subnet-vsec-default"]).contains(&format!("(default_{launcher})")),
        "the primary LSP stays on the default Subnet"
    );

    // traffic on net1: same node, other node (Geneve), both ways; and on eth0
    let sec1 = pod_ip(&pods["vhost-sec/web1"]);
    let sec2 = pod_ip(&pods["vhost-sec/web2"]);
    assert!(sec1.starts_with("10.77.") && sec2.starts_with("10.77."));
    let web0 = pod_ip(&pods["default/web0"]);
    let p = |port: u16, addr: &str| format!("{addr}:{port}");
    // (from, to ip:port, who answers): net1 → same node, net1 → other node, both back;
    // eth0 → the default Subnet's pod on the other node, and back
    let flows = [
        (vm.as_str(), p(80, &sec1), "vhost-sec/web1"),
        (vm, p(80, &sec2), "vhost-sec/web2"),
        ("vhost-sec/web2", p(22, &net1_ip), vm),
        ("vhost-sec/web1", p(22, &net1_ip), vm),
        (vm, p(80, &web0), "default/web0"),
        ("default/web0", p(22, &eth0_ip), vm),
    ];
    for (from, target, to) in &flows {
        let d = probe_until(&z, from, target, to, Duration::from_secs(30));
        eprintln!("{from} → {target} ({to}) TCP after {d:?}");
    }
    ping(&z, vm, &sec1);
    ping(&z, vm, &sec2);

    // CNI CHECK of net1 (port, binding, socket dir, negotiated queues) passes
    let rec = dl.lab.runtime_pods().expect("pods.json").pods[vm].clone();
    let socket = lab::state::Layout::new(&dir).node_cni_socket(1);
    let (ok, v) = check(&socket, &rec.container_id, &rec.netns, &launcher, "net1");
    assert!(ok, "CHECK of net1: {v}");

    // a guest opening fewer queue pairs than the NAD asks (the lab's `labGuestQueues`):
    // the port works, CHECK names the mismatch
    let one_queue = write("one-queue.yaml", ONE_QUEUE);
    z.ok(&["apply", "-f", &one_queue]);
    let mq = z.wait_ready(&["default/mq"], Duration::from_secs(60));
    let mq_port = vsctl(
        &db1,
        &[
            "--bare",
            "--columns=name",
            "find",
            "Interface",
            "external_ids:iface-id=default_mq_default.vhost-sec-1q",
        ],
    );
    assert!(!mq_port.is_empty(), "mq's net1 port");
    wait_until(
        "mq's port negotiated 1 queue pair",
        Duration::from_secs(20),
        || {
            vsctl(
                &db1,
                &["get", "Interface", &mq_port, "status:num_of_vrings"],
            ) == "2"
        },
    );
    let mq_rec = dl.lab.runtime_pods().expect("pods.json").pods["default/mq"].clone();
    let (ok, v) = check(&socket, &mq_rec.container_id, &mq_rec.netns, "mq", "net1");
    let msg = v["msg"].as_str().unwrap_or_default();
    assert!(!ok, "CHECK passed a port with 1 of 2 queue pairs: {v}");
    assert!(
        msg.contains("negotiated 1 queue pair(s)") && msg.contains("asks for 2"),
        "CHECK names the mismatch: {msg}"
    );
    eprintln!("CHECK with 1 of 2 queue pairs: {msg}");
    assert_eq!(
        mq["default/mq"]["metadata"]["annotations"]["lab.zstack.io/datapath"]
            .as_str()
            .map(|d| d.contains("/veth")),
        Some(true)
    );
    z.ok(&["delete", "-f", &one_queue]);
    wait_until("mq's port removed", Duration::from_secs(30), || {
        vsctl(&db1, &["get", "Interface", &mq_port, "name"]).is_empty()
    });

    // agent SIGKILL + restart: the restored port keeps its row and its binding to net1's LSP
    let uuid = vsctl(&db1, &["get", "Interface", &port, "_uuid"]);
    dl.restart_agent(1);
    // (the restarted agent restores its records before it serves CNI)
    wait_until(
        "CHECK of net1 passes after the agent restart",
        Duration::from_secs(20),
        || check(&socket, &rec.container_id, &rec.netns, &launcher, "net1").0,
    );
    assert_eq!(vsctl(&db1, &["get", "Interface", &port, "_uuid"]), uuid);
    assert_eq!(
        vsctl(&db1, &["get", "Interface", &port, "external_ids:iface-id"]),
        lsp
    );
    probe_until(
        &z,
        vm,
        &flows[1].1,
        "vhost-sec/web2",
        Duration::from_secs(20),
    );

    // delete: both LSPs, the port, the socket dir, the testpmd and the record go
    let testpmd: Value = serde_json::from_slice(
        &std::fs::read(dir.join(format!("pods/run/{}.net1.vhost.json", rec.netns)))
            .expect("net1 testpmd record"),
    )
    .expect("json");
    let testpmd = testpmd["pid"].as_i64().expect("pid");
    assert!(alive(testpmd));
    let vm_file = examples.join("20-vmi-vm2.yaml");
    z.ok(&["delete", "-f", vm_file.to_str().expect("utf-8")]);
    wait_until("net1's port removed", Duration::from_secs(30), || {
        tests::vhost_lab::vhost_port_names(&db1).is_empty()
    });
    let sock_dir = PathBuf::from(&sock).parent().expect("dir").to_path_buf();
    wait_until("socket dir removed", Duration::from_secs(10), || {
        !sock_dir.exists()
    });
    wait_until("testpmd stopped", Duration::from_secs(10), || {
        !alive(testpmd)
    });
    wait_until("both LSPs removed", Duration::from_secs(10), || {
        !nbctl(&["--bare", "--columns=name", "list", "Logical_Switch_Port"]).contains(&launcher)
    });
    assert!(
        !dir.join(format!("pods/run/{}.networks.json", rec.netns))
            .exists(),
        "the runtime forgot net1"
    );
    eprintln!("whole test body {:?}", t_all.elapsed());
    assert_down_clean(&dir, &s.prefix, &[testpmd]);
}
