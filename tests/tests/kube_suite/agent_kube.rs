//! The node agent's `--pods kube` mode against a real kube-apiserver 1.20 + etcd: a 2-node
//! lab (central NB/SB + nodes, without the lab's object store), the Subnet CRD, the real
//! `zstack-ovnkube-controller` on the lab's NB/SB, Node objects named like the lab's
//! chassis, a default Subnet and a pod per node created through the API; one agent per
//! node (inside the node netns) reads pods, its Node and the Subnets from the API. The
//! real shim's ADD returns the address of the pod's `k8s.ovn.org/pod-networks`
//! annotation, the pods ping each other, the management port carries the Node's
//! `network.zstack.io/mgmt-port` address and reaches a pod; DEL removes the OVS port; an
//! ADD for a Pod the API does not have fails with code 100 within the timeout; the agents
//! watch Services (a NodePort Service created or deleted is in or out of both nodes'
//! host NAT table well before their 60 s Service resync) and their endpoints (core v1
//! Endpoints on 1.20) with their node: an `externalTrafficPolicy: Local` NodePort DNATs to
//! the node's own endpoint, drops on the node without one, and follows a new endpoint.
//!
//! The API server listens on 127.0.0.1 of the host netns; the agents run in the node
//! netns, so each node netns gets a small forwarder on its own 127.0.0.1 at the same
//! port (the kubeconfig and the serving certificate stay valid).

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use api::pod_networks::{NODE_MGMT_PORT, POD_NETWORKS, decode_pod_networks};
use api::subnet::Subnet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use lab::{Lab, LabConfig};
use nix::sched::{CloneFlags, setns};
use serde_json::{Value, json};
use tests::agent::{self, in_ns, ovs_ifaces, ping, result_ip, shim};
use tests::kube_objects::{create, eventually};

/// Everything the test started, undone on drop (also on panic): processes by pid,
/// network namespaces, the lab.
struct Cleanup {
    procs: Vec<Child>,
    netns: Vec<String>,
    lab_dir: Option<std::path::PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in self.procs.iter_mut() {
            let _ = p.kill();
            let _ = p.wait();
        }
        for n in &self.netns {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        if let Some(dir) = self.lab_dir.take()
            && let Ok(lab) = Lab::open(&dir)
        {
            let _ = lab.down();
        }
    }
}

/// Listens on 127.0.0.1:`port` inside netns `ns` and forwards every connection to
/// 127.0.0.1:`port` of this process's netns (a thread per direction).
fn forward_into_netns(ns: &str, port: u16) {
    let path = format!("/var/run/netns/{ns}");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let bind = || -> std::io::Result<TcpListener> {
            let host = std::fs::File::open("/proc/thread-self/ns/net")?;
            let target = std::fs::File::open(&path)?;
            setns(target.as_fd(), CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
            let l = TcpListener::bind(("127.0.0.1", port));
            setns(host.as_fd(), CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
            l
        };
        let l = match bind() {
            Ok(l) => {
                let _ = tx.send(Ok(()));
                l
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        for down in l.incoming().flatten() {
            let Ok(up) = TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            let (Ok(mut d2), Ok(mut u2)) = (down.try_clone(), up.try_clone()) else {
                continue;
            };
            let (mut d, mut u) = (down, up);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut d, &mut u);
                let _ = u.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut u2, &mut d2);
                let _ = d2.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    rx.recv()
        .expect("forwarder thread")
        .unwrap_or_else(|e| panic!("listen on 127.0.0.1:{port} in {ns}: {e}"));
}

/// Starts the agent of `node` with `--pods kube` inside its netns; waits for its socket.
fn start_kube_agent(node: &agent::Node, kubeconfig: &std::path::Path) -> Child {
    let log = std::fs::File::create(&node.log).expect("agent log");
    let mut child = Command::new("ip")
        .args(["netns", "exec", &node.netns])
        .arg(tests::workspace_bin("zstack-ovnkube-node"))
        .args(["--node-name", &node.name, "--ovs-db", &node.db])
        .arg("--cni-socket")
        .arg(&node.socket)
        .args(["--pods", "kube", "--kubeconfig"])
        .arg(kubeconfig)
        .arg("--state-dir")
        .arg(&node.state)
        .args(["--metrics-addr", "127.0.0.1:0", "--mtu", "1400"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start agent");
    let t = Instant::now();
    while std::os::unix::net::UnixStream::connect(&node.socket).is_err() {
        if t.elapsed() > Duration::from_secs(30) || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "agent of {} not serving {}:\n{}",
                node.name,
                node.socket.display(),
                std::fs::read_to_string(&node.log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn logs(nodes: &[agent::Node], ctl_log: &std::path::Path) -> String {
    let mut s: Vec<String> = nodes
        .iter()
        .map(|n| std::fs::read_to_string(&n.log).unwrap_or_default())
        .collect();
    s.push(std::fs::read_to_string(ctl_log).unwrap_or_default());
    s.join("\n----\n")
}

/// Waits (30 s at most) until object `name` of `api` carries annotation `key`; its value.
async fn annotation_of<K>(api: &Api<K>, name: &str, key: &str, what: &str) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(what, Duration::from_secs(30), || async {
        api.get(name)
            .await
            .ok()?
            .meta()
            .annotations
            .as_ref()?
            .get(key)
            .cloned()
    })
    .await
}

/// What every test here starts with: a real kube-apiserver (+ etcd), a lab of `n` nodes
/// (central NB/SB, no object store), the Subnet CRD, the controller on both, and a Node
/// object per lab node (named like its chassis). The agents are the tests' own.
struct KubeLab {
    kube_api: tests::kube::KubeApi,
    client: kube::Client,
    /// The API server's port (forwarded into each node's netns by [`forward_into_netns`]).
    port: u16,
    nodes: Vec<agent::Node>,
    ctl_log: std::path::PathBuf,
    lab_dir: std::path::PathBuf,
    cleanup: Cleanup,
}

async fn kube_lab(s: &tests::Scratch, n: usize) -> KubeLab {
    let base = s.dir.path().to_path_buf();
    let kube_api = tests::kube::KubeApi::start(&base.join("kube"))
        .await
        .expect("etcd + kube-apiserver");
    let client = kube_api.client().await.expect("kube client");
    let port: u16 = kube_api
        .server_url()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("API server port");
    let lab_dir = base.join("lab");
    let mut cleanup = Cleanup {
        procs: Vec::new(),
        netns: Vec::new(),
        lab_dir: Some(lab_dir.clone()),
    };
    let mut lab = Lab::up(LabConfig {
        nodes: n,
        ..LabConfig::new(lab_dir.clone(), &s.prefix)
    })
    .expect("lab up");
    lab.keep_running();
    let (nb, sb) = (lab.nb_remote(), lab.sb_remote());
    let nodes: Vec<agent::Node> = lab
        .nodes()
        .iter()
        .map(|st| agent::Node {
            name: st.system_id.clone(),
            netns: st.netns.clone(),
            db: st.db_remote.clone(),
            socket: base.join(format!("agent{}/run/cni.sock", st.index)),
            state: base.join(format!("agent{}/state", st.index)),
            log: base.join(format!("agent{}.log", st.index)),
            ovn_controller: None,
        })
        .collect();
    assert_eq!(nodes.len(), n);
    let ctl_log = base.join("controller.log");
    tests::kube_objects::install_subnet_crd(&client).await;
    cleanup.procs.push(
        Command::new(tests::workspace_bin("zstack-ovnkube-controller"))
            .args(["--nb", &nb, "--sb", &sb, "--kubeconfig"])
            .arg(kube_api.kubeconfig_path())
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&ctl_log).expect("controller log"))
            .spawn()
            .expect("start zstack-ovnkube-controller"),
    );
    let node_api: Api<Node> = Api::all(client.clone());
    for node in &nodes {
        create(
            &node_api,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name}}),
        )
        .await;
    }
    KubeLab {
        kube_api,
        client,
        port,
        nodes,
        ctl_log,
        lab_dir,
        cleanup,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_pods_kube_on_real_kube_apiserver() {
    let mut bins = vec!["etcd"];
    bins.extend_from_slice(tests::LAB_BINS);
    if !tests::require_real("agent_kube_agent_pods_kube_on_real_kube_apiserver", &bins) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("akube");
    let KubeLab {
        kube_api,
        client,
        port,
        nodes,
        ctl_log,
        lab_dir,
        mut cleanup,
    } = kube_lab(&s, 2).await;
    let node_api: Api<Node> = Api::all(client.clone());

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, node) in [("ka", &nodes[0]), ("kb", &nodes[1])] {
        create(
            &pods,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "default"},
                   "spec": {"nodeName": node.name,
                            "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await;
    }

    // the agents, inside the node netns, reaching the API through the forwarders
    for n in &nodes {
        forward_into_netns(&n.netns, port);
    }
    for n in &nodes {
        let c = start_kube_agent(n, kube_api.kubeconfig_path());
        cleanup.procs.push(c);
    }

    // pod netns, ADD through the real shim
    let mut pod_ns = Vec::new();
    for tag in ["ka", "kb", "kg"] {
        let ns = format!("{}{tag}", s.prefix);
        assert!(
            Command::new("ip")
                .args(["netns", "add", &ns])
                .status()
                .expect("ip netns add")
                .success()
        );
        cleanup.netns.push(ns.clone());
        pod_ns.push(ns);
    }
    let cid_a = format!("{:0<64}", "ka1");
    let cid_b = format!("{:0<64}", "kb2");
    // The race a cluster start produces: the controller sees the pods before any Subnet
    // and marks them with an IPAM error; the Subnet arrives and the ADD comes at once. The
    // agent gives the error a grace to be replaced by addresses instead of refusing.
    eventually(
        "the transient IPAM error on ka",
        Duration::from_secs(30),
        || {
            let api = pods.clone();
            async move {
                let a = api.get("ka").await.ok()?.metadata.annotations?;
                a.get("network.zstack.io/ipam-error")
                    .filter(|e| e.contains("no Subnet"))
                    .map(|_| ())
            }
        },
    )
    .await;
    // The ADD starts while ka still carries the IPAM error; the agent must hold on (its
    // log says so) rather than refuse, and the Subnet created now gives it addresses.
    let add_a = {
        let (node, cid, ns) = (nodes[0].clone(), cid_a.clone(), pod_ns[0].clone());
        std::thread::spawn(move || shim("ADD", &node, &cid, &ns, "ka", 30.0))
    };
    eventually(
        "the agent waiting out ka's IPAM error",
        Duration::from_secs(20),
        || {
            let log = nodes[0].log.clone();
            async move {
                std::fs::read_to_string(log)
                    .ok()?
                    .contains("waiting briefly for addresses")
                    .then_some(())
            }
        },
    )
    .await;
    let subnets: Api<Subnet> = Api::all(client.clone());
    create(
        &subnets,
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "main"},
        "spec": {"cidr": "10.40.0.0/24", "gateway": "10.40.0.1", "default": true}}),
    )
    .await;
    let (ok, ra) = add_a.join().expect("ADD thread");
    assert!(ok, "ADD ka: {ra}\n{}", logs(&nodes, &ctl_log));
    let (ok, rb) = shim("ADD", &nodes[1], &cid_b, &pod_ns[1], "kb", 30.0);
    assert!(ok, "ADD kb: {rb}\n{}", logs(&nodes, &ctl_log));
    let (ip_a, ip_b) = (result_ip(&ra), result_ip(&rb));
    for (pod, r) in [("ka", &ra), ("kb", &rb)] {
        let ann = pods
            .get(pod)
            .await
            .expect("get pod")
            .metadata
            .annotations
            .and_then(|a| a.get(POD_NETWORKS).cloned())
            .unwrap_or_else(|| panic!("{pod} has no {POD_NETWORKS}"));
        let net = decode_pod_networks(&ann).expect("pod-networks");
        assert_eq!(
            Some(net.ip_addresses[0].as_str()),
            r["ips"][0]["address"].as_str(),
            "{pod}: {r}"
        );
        assert_eq!(r["ips"][0]["gateway"], "10.40.0.1", "{r}");
    }
    assert!(ip_a.starts_with("10.40.0.") && ip_b.starts_with("10.40.0."));
    assert_ne!(ip_a, ip_b);

    // cross-node pod-to-pod
    assert!(
        ping(&pod_ns[0], &ip_b, Duration::from_secs(15)),
        "ka -> kb\n{}",
        logs(&nodes, &ctl_log)
    );
    assert!(ping(&pod_ns[1], &ip_a, Duration::from_secs(10)), "kb -> ka");

    // the management port: the Node annotation's address on ovn-k8s-mp0, host → pod
    for n in &nodes {
        let ann = annotation_of(
            &node_api,
            &n.name,
            NODE_MGMT_PORT,
            "the Node's mgmt-port annotation",
        )
        .await;
        let v: Value = serde_json::from_str(&ann).expect("mgmt-port JSON");
        let addr = v["ip_addresses"][0]
            .as_str()
            .unwrap_or_else(|| panic!("no address in {ann}"))
            .to_string();
        let t = Instant::now();
        loop {
            let out = in_ns(
                &n.netns,
                &["ip", "-o", "addr", "show", "dev", "ovn-k8s-mp0"],
            );
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if text.contains(&format!(" {addr} ")) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{}: ovn-k8s-mp0 lacks {addr}: {text}\n{}",
                n.name,
                logs(&nodes, &ctl_log)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // the datapath report through the API: Node annotation and an Event per node (written
    // as events.k8s.io/v1 by the Recorder, listed here through core v1)
    for n in &nodes {
        let status = annotation_of(
            &node_api,
            &n.name,
            "network.zstack.io/datapath-status",
            "the Node's datapath-status annotation",
        )
        .await;
        let v: Value = serde_json::from_str(&status).expect("datapath-status JSON");
        // plain ovs-vswitchd (no DPDK build): auto takes AF_XDP, says why, and raises no
        // alarm (what auto is for on a node without DPDK)
        assert_eq!(v["datapath"], "afxdp", "{v:#}");
        assert_eq!(v["fallbacks"][0]["reason"], "no_dpdk_build", "{v:#}");
        assert_eq!(v["fallbacks"][0]["designed"], true, "{v:#}");
        assert!(
            v["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("auto: afxdp (")),
            "{v:#}"
        );
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(client.clone(), "default");
        for reason in ["DatapathSelected", "DatapathAuto"] {
            let name = n.name.clone();
            let e = eventually(
                &format!("a {reason} event"),
                Duration::from_secs(30),
                || {
                    let events = events.clone();
                    let name = name.clone();
                    async move {
                        events
                            .list(&Default::default())
                            .await
                            .ok()?
                            .items
                            .into_iter()
                            .find(|e| {
                                e.involved_object.name.as_deref() == Some(name.as_str())
                                    && e.reason.as_deref() == Some(reason)
                            })
                    }
                },
            )
            .await;
            assert_eq!(e.type_.as_deref(), Some("Normal"), "{e:?}");
        }
        let warnings: Vec<String> = events
            .list(&Default::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.name.as_deref() == Some(n.name.as_str())
                    && e.type_.as_deref() == Some("Warning")
            })
            .map(|e| format!("{:?}: {:?}", e.reason, e.message))
            .collect();
        assert!(warnings.is_empty(), "{}: {warnings:?}", n.name);
    }
    assert!(
        ping(&nodes[0].netns, &ip_b, Duration::from_secs(20)),
        "node1 -> kb via ovn-k8s-mp0\n{}",
        logs(&nodes, &ctl_log)
    );
    assert!(
        ping(&nodes[1].netns, &ip_a, Duration::from_secs(20)),
        "node2 -> ka via ovn-k8s-mp0"
    );

    // the agents watch Services: a new NodePort Service is in each node's host NAT table
    // well before the agents' Service resync (60 s; their refresh no longer re-reads
    // Services while the watch runs), and a deleted one leaves it as fast
    let svc_api: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "default");
    let svc: k8s_openapi::api::core::v1::Service = create(
        &svc_api,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "watched", "namespace": "default"},
            "spec": {"type": "NodePort", "selector": {"app": "watched"},
                     "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}
        }),
    )
    .await;
    let node_port = svc
        .spec
        .and_then(|s| s.ports?.first()?.node_port)
        .expect("the apiserver allocated a nodePort");
    let nat = |ns: &str| {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "nft",
                "list",
                "table",
                "inet",
                "zstack-ovn",
            ])
            .output()
            .expect("nft");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let wanted = format!(" dport {node_port} ");
    let bound = dataplane::agent::SERVICE_RESYNC / 3;
    for present in [true, false] {
        if !present {
            svc_api
                .delete("watched", &Default::default())
                .await
                .expect("delete the Service");
        }
        let t = Instant::now();
        for n in &nodes {
            while nat(&n.netns).contains(&wanted) != present {
                assert!(
                    t.elapsed() < bound,
                    "{}: nodePort {node_port} {} the host NAT after {:?}:\n{}\n{}",
                    n.name,
                    if present { "not in" } else { "still in" },
                    t.elapsed(),
                    nat(&n.netns),
                    logs(&nodes, &ctl_log)
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        eprintln!(
            "Service {}: host NAT of both nodes in {:?}",
            if present { "created" } else { "deleted" },
            t.elapsed()
        );
    }

    // externalTrafficPolicy: Local from the watched endpoints (core v1 Endpoints on 1.20,
    // written by hand: no kube-controller-manager here) with their nodeName: the node of
    // the endpoint DNATs to it without the masquerade mark, the other drops; a second
    // endpoint on node 2 reaches node 2's table through the watch (well before the resync)
    let local: k8s_openapi::api::core::v1::Service = create(
        &svc_api,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "etp-local", "namespace": "default"},
            "spec": {"type": "NodePort", "externalTrafficPolicy": "Local",
                     "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}
        }),
    )
    .await;
    let local_port = local
        .spec
        .and_then(|s| s.ports?.first()?.node_port)
        .expect("the apiserver allocated a nodePort");
    let ep_api: Api<k8s_openapi::api::core::v1::Endpoints> =
        Api::namespaced(client.clone(), "default");
    let endpoints = |addresses: Value| {
        json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "etp-local", "namespace": "default"},
            "subsets": [{"addresses": addresses, "ports": [{"port": 8080, "protocol": "TCP"}]}]
        })
    };
    create(
        &ep_api,
        endpoints(json!([{"ip": "10.244.7.10", "nodeName": nodes[0].name}])),
    )
    .await;
    let rule = |ns: &str, tail: &str| {
        nat(ns)
            .lines()
            .any(|l| l.contains(&format!("dport {local_port} {tail}")))
    };
    let t = Instant::now();
    let wait = |what: &str, ok: &dyn Fn() -> bool| {
        while !ok() {
            assert!(
                t.elapsed() < bound,
                "{what} after {:?}:\n{}\n{}\n{}",
                t.elapsed(),
                nat(&nodes[0].netns),
                nat(&nodes[1].netns),
                logs(&nodes, &ctl_log)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait("node 1 DNATs to its endpoint, unmarked", &|| {
        rule(&nodes[0].netns, "dnat ip to 10.244.7.10:8080")
    });
    wait("node 2 drops (no endpoint there)", &|| {
        rule(&nodes[1].netns, "drop")
    });
    let mut ep = ep_api.get("etp-local").await.expect("get Endpoints");
    let with_two: k8s_openapi::api::core::v1::Endpoints =
        serde_json::from_value(endpoints(json!([
            {"ip": "10.244.7.10", "nodeName": nodes[0].name},
            {"ip": "10.244.8.10", "nodeName": nodes[1].name}
        ])))
        .expect("Endpoints");
    ep.subsets = with_two.subsets;
    ep_api
        .replace("etp-local", &Default::default(), &ep)
        .await
        .expect("replace Endpoints");
    wait("node 2 DNATs to its new endpoint", &|| {
        rule(&nodes[1].netns, "dnat ip to 10.244.8.10:8080")
    });
    eprintln!(
        "externalTrafficPolicy: Local endpoints in the host NAT in {:?}",
        t.elapsed()
    );
    svc_api
        .delete("etp-local", &Default::default())
        .await
        .expect("delete the Service");

    // a Pod the API does not have: 100 within the short timeout
    let t = Instant::now();
    let cid = format!("{:0<64}", "kg3");
    let mut c = cni::invoke::Invocation::pod("ADD", &cid, &pod_ns[2], "eth0", "default", "ghost")
        .with_env("ZSTACK_OVN_CNI_TIMEOUT", "3")
        .command(tests::workspace_bin("zstack-ovn-cni"))
        .spawn()
        .expect("run shim");
    let mut conf = agent::shim_conf(&nodes[0], 3.0, &json!({}));
    conf.as_object_mut().unwrap().remove("timeoutSeconds");
    c.stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
        .unwrap();
    let (ok, r) = agent::shim_output(c, "ADD");
    assert!(!ok && r["code"] == 100, "ghost ADD: {r}");
    assert!(
        r["msg"].as_str().unwrap_or("").contains("default/ghost"),
        "{r}"
    );
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());

    // DEL → the OVS ports go
    for (node, cid, ns, pod) in [
        (&nodes[0], &cid_a, &pod_ns[0], "ka"),
        (&nodes[1], &cid_b, &pod_ns[1], "kb"),
    ] {
        assert!(!ovs_ifaces(&node.db, &format!("default_{pod}")).is_empty());
        let (ok, r) = shim("DEL", node, cid, ns, pod, 10.0);
        assert!(ok, "DEL {pod}: {r}");
        assert!(
            ovs_ifaces(&node.db, &format!("default_{pod}")).is_empty(),
            "{pod}'s port left on {}",
            node.name
        );
    }

    // stop everything, by pid, and check nothing is left
    let pids: Vec<u32> = cleanup.procs.iter().map(Child::id).collect();
    for p in cleanup.procs.iter_mut() {
        p.kill().expect("kill");
        p.wait().expect("reap");
    }
    cleanup.procs.clear();
    for pid in pids {
        assert!(agent::pid_gone(pid), "pid {pid} still alive");
    }
    for n in std::mem::take(&mut cleanup.netns) {
        assert!(
            Command::new("ip")
                .args(["netns", "del", &n])
                .status()
                .expect("ip netns del")
                .success()
        );
    }
    cleanup.lab_dir = None;
    Lab::open(&lab_dir).expect("lab").down().expect("lab down");
    let mut kube_api = kube_api;
    let (etcd, apiserver) = kube_api.pids();
    kube_api.stop();
    for pid in [etcd, apiserver].into_iter().flatten() {
        assert!(agent::pid_gone(pid), "kube pid {pid} still alive");
    }
    let left: Vec<String> = lab::netns::list()
        .into_iter()
        .filter(|n| n.starts_with(&s.prefix))
        .collect();
    assert!(left.is_empty(), "netns left: {left:?}");
}

/// How many API requests one pod ADD costs the node agent in `--pods kube` mode, on the
/// real kube-apiserver 1.20: a 1-node lab, the controller, a Subnet, N pods
/// (`ZOVN_KUBE_ADDS`, default 10). Phase 1: the pods are annotated before the count
/// starts, then N ADDs one after another through the real shim. Phase 2: N more pods, each
/// created and at once ADDed (the ADD waits for the controller's annotation, as a kubelet's
/// does; the test's POST and the controller's PATCH are in this window too).
/// `apiserver_request_total` is read around each phase, then over an idle window (at least
/// 10 s: what the agent and the controller ask anyway, e.g. periodic re-lists), scaled to
/// the phase's length and subtracted (kube-apiserver's own `kubernetes` Service
/// reconciler asks GET namespaces, services, endpoints and POST endpoints every 10 s: that
/// noise comes out near 0). Prints the requests per ADD by verb and resource. A
/// measurement, so ignored by default: `ZOVN_REQUIRE_REAL=1 cargo test -p tests --test
/// agent_kube -- --ignored --nocapture requests_per_pod_add` (`ZOVN_KUBE_REQUESTS_OUT`:
/// also write the tables to that file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints the apiserver requests per pod ADD"]
async fn requests_per_pod_add() {
    let mut bins = vec!["etcd"];
    bins.extend_from_slice(tests::LAB_BINS);
    if !tests::require_real("agent_kube_requests_per_pod_add", &bins) {
        return;
    }
    let n_adds: usize = std::env::var("ZOVN_KUBE_ADDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(10);
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("kreq");
    let KubeLab {
        kube_api,
        client,
        port,
        nodes,
        ctl_log,
        lab_dir: _,
        mut cleanup,
    } = kube_lab(&s, 1).await;
    let node = nodes[0].clone();
    let node_api: Api<Node> = Api::all(client.clone());
    let subnets: Api<Subnet> = Api::all(client.clone());
    create(
        &subnets,
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "main"},
        "spec": {"cidr": "10.41.0.0/24", "gateway": "10.41.0.1", "default": true}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let names: Vec<String> = (0..n_adds).map(|i| format!("m{i}")).collect();
    for name in &names {
        create(
            &pods,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "default"},
                   "spec": {"nodeName": node.name,
                            "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await;
    }
    forward_into_netns(&node.netns, port);
    cleanup
        .procs
        .push(start_kube_agent(&node, kube_api.kubeconfig_path()));
    // settled: every pod annotated, the agent's datapath report written
    for name in &names {
        annotation_of(&pods, name, POD_NETWORKS, "the pod's annotation").await;
    }
    annotation_of(
        &node_api,
        &node.name,
        "network.zstack.io/datapath-status",
        "the datapath-status annotation",
    )
    .await;
    let mut netns = Vec::new();
    for i in 0..n_adds {
        let ns = format!("{}m{i}", s.prefix);
        assert!(
            Command::new("ip")
                .args(["netns", "add", &ns])
                .status()
                .expect("ip netns add")
                .success()
        );
        cleanup.netns.push(ns.clone());
        netns.push(ns);
    }
    // the start-up writes (events, annotations) have landed
    tokio::time::sleep(Duration::from_secs(3)).await;

    let counts = || async {
        tests::kube::request_counts(&client)
            .await
            .expect("/metrics")
    };
    let c0 = counts().await;
    assert!(
        c0.keys().any(|k| k.ends_with(" pods")),
        "no pod request counted so far: /metrics unreadable? {c0:?}"
    );
    let t = Instant::now();
    for (i, name) in names.iter().enumerate() {
        let cid = format!("{:0<64}", format!("m{i}x"));
        let (ok, r) = shim("ADD", &node, &cid, &netns[i], name, 30.0);
        assert!(ok, "ADD {name}: {r}\n{}", logs(&nodes, &ctl_log));
        assert!(result_ip(&r).starts_with("10.41.0."), "{r}");
    }
    let took1 = t.elapsed();
    let c1 = counts().await;
    let t = Instant::now();
    for i in 0..n_adds {
        let name = format!("w{i}");
        create(
            &pods,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "default"},
                   "spec": {"nodeName": node.name,
                            "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await;
        let ns = format!("{}w{i}", s.prefix);
        assert!(
            Command::new("ip")
                .args(["netns", "add", &ns])
                .status()
                .expect("ip netns add")
                .success()
        );
        cleanup.netns.push(ns.clone());
        let cid = format!("{:0<64}", format!("w{i}x"));
        let (ok, r) = shim("ADD", &node, &cid, &ns, &name, 30.0);
        assert!(ok, "ADD {name}: {r}\n{}", logs(&nodes, &ctl_log));
    }
    let took2 = t.elapsed();
    let c2 = counts().await;
    let idle_len = took1.max(took2).max(Duration::from_secs(10));
    tokio::time::sleep(idle_len).await;
    let c3 = counts().await;
    let idle = tests::kube::count_delta(&c2, &c3);
    let mut out = String::new();
    for (phase, took, adds) in [
        (
            "phase 1, pods annotated before the ADD",
            took1,
            tests::kube::count_delta(&c0, &c1),
        ),
        (
            "phase 2, ADD right after the pod's creation",
            took2,
            tests::kube::count_delta(&c1, &c2),
        ),
    ] {
        let scale = took.as_secs_f64() / idle_len.as_secs_f64();
        let keys: std::collections::BTreeSet<&String> = adds.keys().chain(idle.keys()).collect();
        out.push_str(&format!(
            "apiserver requests per pod ADD, {phase}: N={n_adds} sequential ADDs in {took:.1?}; \
             idle window {idle_len:.1?}, scaled by {scale:.2}\n{:<40} {:>8} {:>8} {:>8}\n",
            "verb resource", "window", "idle", "per ADD"
        ));
        let mut total = 0.0;
        for k in keys {
            let a = adds.get(k).copied().unwrap_or(0.0);
            let i = idle.get(k).copied().unwrap_or(0.0);
            let per = (a - i * scale) / n_adds as f64;
            total += per;
            out.push_str(&format!("{k:<40} {a:>8} {i:>8} {per:>8.2}\n"));
        }
        out.push_str(&format!(
            "{:<40} {:>8} {:>8} {total:>8.2}\n\n",
            "total", "", ""
        ));
    }
    eprintln!("{out}");
    if let Ok(path) = std::env::var("ZOVN_KUBE_REQUESTS_OUT") {
        std::fs::write(&path, &out).expect("write ZOVN_KUBE_REQUESTS_OUT");
    }
    // the ADDs of annotated pods read this node's pod store: no pod request at all
    let pod_requests: Vec<_> = tests::kube::count_delta(&c0, &c1)
        .into_iter()
        .filter(|(k, _)| k.ends_with(" pods"))
        .collect();
    assert!(
        pod_requests.is_empty(),
        "pod requests during ADDs of annotated pods: {pod_requests:?}\n{out}"
    );
}
