//! Scaffolding for tests of the node agent (`zstack-ovnkube-node`) on a real 2-node lab:
//! the lab with its object store and a default Subnet, one agent per node started inside
//! the node netns, the real `zstack-ovn-cni` shim called like a runtime, and probes
//! (ping, OVS ports, links). [`AgentLab`] undoes everything it started on drop (also on
//! panic); [`AgentLab::finish`] does the same with assertions.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lab::apiserver::ApiClient;
use lab::apiserver::protocol::ResourceKind;
use lab::{Lab, LabConfig};
use serde_json::{Value, json};

/// One lab node as the agent sees it.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub netns: String,
    /// `unix:<path>` of the node's Open_vSwitch database.
    pub db: String,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub log: PathBuf,
    /// ovn-controller's pid (tests may SIGSTOP it).
    pub ovn_controller: Option<i32>,
}

/// A 2-node lab with the object store, a default Subnet and one agent per node.
pub struct AgentLab {
    /// The lab's state directory.
    pub dir: PathBuf,
    pub api: PathBuf,
    pub prefix: String,
    pub nodes: Vec<Node>,
    /// Per node: the running agent.
    pub agents: Vec<Option<Child>>,
    /// Network namespaces the test created (deleted on drop).
    pub netns: Vec<String>,
    /// Processes SIGSTOPped by the test (SIGCONTed on drop).
    pub stopped: Vec<i32>,
}

impl AgentLab {
    /// Brings the lab up under `scratch`, applies a default Subnet `cidr` with `gateway`
    /// and starts both agents.
    pub fn up(scratch: &crate::Scratch, cidr: &str, gateway: &str) -> AgentLab {
        let zovn = crate::workspace_bin("zovn");
        let dir = scratch.dir.path().join("lab");
        let mut me = AgentLab {
            dir: dir.clone(),
            api: lab::state::Layout::new(&dir).api_socket(),
            prefix: scratch.prefix.clone(),
            nodes: Vec::new(),
            agents: Vec::new(),
            netns: Vec::new(),
            stopped: Vec::new(),
        };
        let mut lab = Lab::up(LabConfig {
            nodes: 2,
            ..LabConfig::new(dir.clone(), &scratch.prefix)
        })
        .expect("lab up");
        lab.keep_running();
        lab.start_apiserver(&zovn).expect("object store");
        ApiClient::connect(&dir)
            .expect("object store client")
            .apply(vec![json!({
                "apiVersion": "network.zstack.io/v1", "kind": "Subnet",
                "metadata": {"name": format!("{}-net", scratch.prefix)},
                "spec": {"cidr": cidr, "gateway": gateway, "default": true}})])
            .expect("apply Subnet");
        for i in 1..=2 {
            let st = lab.node(i).expect("node");
            let base = scratch.dir.path();
            me.nodes.push(Node {
                name: st.system_id.clone(),
                netns: st.netns.clone(),
                db: st.db_remote.clone(),
                socket: base.join(format!("agent{i}/run/cni.sock")),
                state: base.join(format!("agent{i}/state")),
                log: base.join(format!("agent{i}.log")),
                ovn_controller: st
                    .daemons
                    .iter()
                    .find(|d| d.name.contains("ovn-controller"))
                    .map(|d| d.pid),
            });
            me.agents.push(None);
        }
        for i in 0..2 {
            me.start_agent(i);
        }
        me
    }

    /// Applies pod `name` in namespace `default`, scheduled on node `node` (0-based).
    pub fn apply_pod(&self, name: &str, node: usize) {
        self.apply_pod_with(name, node, json!({}));
    }

    /// [`AgentLab::apply_pod`] with `annotations` (a JSON object).
    pub fn apply_pod_with(&self, name: &str, node: usize, annotations: Value) {
        ApiClient::connect(&self.dir)
            .expect("object store client")
            .apply(vec![json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "annotations": annotations},
                "spec": {"nodeName": self.nodes[node].name, "containers": []}})])
            .expect("apply pod");
    }

    /// Starts the agent of node `i` (0-based) and waits until its socket accepts.
    pub fn start_agent(&mut self, i: usize) {
        assert!(self.agents[i].is_none(), "agent {i} already running");
        self.agents[i] = Some(start_agent(&self.nodes[i], &self.api));
    }

    /// SIGKILLs and reaps the agent of node `i`; returns its pid.
    pub fn kill_agent(&mut self, i: usize) -> u32 {
        let mut a = self.agents[i].take().expect("agent running");
        let pid = a.id();
        a.kill().expect("SIGKILL agent");
        a.wait().expect("reap agent");
        pid
    }

    /// Creates network namespace `<prefix><tag>` (deleted on drop).
    pub fn add_netns(&mut self, tag: &str) -> String {
        let ns = format!("{}{tag}", self.prefix);
        assert!(
            Command::new("ip")
                .args(["netns", "add", &ns])
                .status()
                .expect("ip netns add")
                .success()
        );
        self.netns.push(ns.clone());
        ns
    }

    /// The agents' logs, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| std::fs::read_to_string(&n.log).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n----\n")
    }

    /// The `k8s.ovn.org/pod-networks` default address (`a.b.c.d/len`) of pod `name`,
    /// waited for (bounded).
    pub fn pod_ip(&self, name: &str) -> String {
        let t = Instant::now();
        loop {
            if let Some(n) = pod_annotations(&self.dir, name)
                .get("k8s.ovn.org/pod-networks")
                .and_then(Value::as_str)
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
                && let Some(a) = n["default"]["ip_addresses"][0].as_str()
            {
                return a.to_string();
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "pod {name} not annotated"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops everything with assertions: agents gone, netns deleted, lab down, no netns
    /// with the prefix left.
    pub fn finish(mut self) {
        let pids: Vec<u32> = self.agents.iter().flatten().map(Child::id).collect();
        for a in self.agents.iter_mut().filter_map(Option::take) {
            let mut a = a;
            a.kill().expect("stop agent");
            a.wait().expect("reap agent");
        }
        for pid in pids {
            assert!(pid_gone(pid), "agent pid {pid} still alive");
        }
        for n in std::mem::take(&mut self.netns) {
            assert!(
                Command::new("ip")
                    .args(["netns", "del", &n])
                    .status()
                    .expect("ip netns del")
                    .success()
            );
        }
        Lab::open(&self.dir).expect("lab").down().expect("lab down");
        let left: Vec<String> = lab::netns::list()
            .into_iter()
            .filter(|n| n.starts_with(&self.prefix))
            .collect();
        assert!(left.is_empty(), "netns left: {left:?}");
    }
}

impl Drop for AgentLab {
    fn drop(&mut self) {
        crate::lab_logs::on_down(&self.dir);
        for pid in self.stopped.drain(..) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGCONT,
            );
        }
        for a in self.agents.iter_mut().filter_map(Option::take) {
            let mut a = a;
            let _ = a.kill();
            let _ = a.wait();
        }
        for n in &self.netns {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        if let Ok(lab) = Lab::open(&self.dir) {
            let _ = lab.down();
        }
    }
}

/// Starts `zstack-ovnkube-node` for `node` inside its netns, waits until the CNI socket
/// accepts connections.
pub fn start_agent(node: &Node, api: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&node.log)
        .expect("agent log");
    let child = Command::new("ip")
        .args(["netns", "exec", &node.netns])
        .arg(crate::workspace_bin("zstack-ovnkube-node"))
        .args(["--node-name", &node.name, "--ovs-db", &node.db])
        .arg("--cni-socket")
        .arg(&node.socket)
        .arg("--pods")
        .arg(format!("lab:{}", api.display()))
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
    // connectable, not just present: a killed agent leaves its socket file behind
    while std::os::unix::net::UnixStream::connect(&node.socket).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "agent of {} did not create {} in 20 s:\n{}",
            node.name,
            node.socket.display(),
            std::fs::read_to_string(&node.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// The shim's network configuration for `node`: cniVersion 1.0.0, or 1.1.0 with the
/// `extra` fields (a JSON object) added.
pub fn shim_conf(node: &Node, timeout_s: f64, extra: &Value) -> Value {
    let mut conf = json!({
        "cniVersion": "1.0.0",
        "name": "zstack-ovn",
        "type": "zstack-ovn-cni",
        "serverSocket": node.socket,
        "timeoutSeconds": timeout_s,
    });
    if let (Some(c), Some(e)) = (conf.as_object_mut(), extra.as_object())
        && !e.is_empty()
    {
        c.insert("cniVersion".into(), "1.1.0".into());
        c.extend(e.clone());
    }
    conf
}

/// Spawns the shim for `cmd` on pod `default/<pod>` in `/var/run/netns/<netns>`, with
/// the config on stdin already written; stdout/stderr piped.
pub fn spawn_shim(
    cmd: &str,
    node: &Node,
    cid: &str,
    netns: &str,
    pod: &str,
    timeout_s: f64,
) -> Child {
    spawn_shim_with(cmd, node, cid, netns, pod, timeout_s, &json!({}))
}

/// [`spawn_shim`] with extra network config fields (see [`shim_conf`]).
pub fn spawn_shim_with(
    cmd: &str,
    node: &Node,
    cid: &str,
    netns: &str,
    pod: &str,
    timeout_s: f64,
    extra: &Value,
) -> Child {
    let mut c = cni::invoke::Invocation::pod(cmd, cid, netns, "eth0", "default", pod)
        .command(crate::workspace_bin("zstack-ovn-cni"))
        .spawn()
        .expect("run shim");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(shim_conf(node, timeout_s, extra).to_string().as_bytes())
        .expect("write stdin");
    c
}

/// Collects a shim started by [`spawn_shim`]: (exit ok, stdout JSON or null).
pub fn shim_output(c: Child, cmd: &str) -> (bool, Value) {
    let out = c.wait_with_output().expect("shim output");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("shim {cmd} printed {text:?}: {e}"))
    };
    (out.status.success(), v)
}

/// Runs the shim: (exit ok, stdout JSON).
pub fn shim(
    cmd: &str,
    node: &Node,
    cid: &str,
    netns: &str,
    pod: &str,
    timeout_s: f64,
) -> (bool, Value) {
    shim_output(spawn_shim(cmd, node, cid, netns, pod, timeout_s), cmd)
}

/// [`shim`] with extra network config fields (see [`shim_conf`]).
pub fn shim_with(
    cmd: &str,
    node: &Node,
    cid: &str,
    netns: &str,
    pod: &str,
    timeout_s: f64,
    extra: &Value,
) -> (bool, Value) {
    shim_output(
        spawn_shim_with(cmd, node, cid, netns, pod, timeout_s, extra),
        cmd,
    )
}

/// The first address of a CNI result, without the prefix length.
pub fn result_ip(r: &Value) -> String {
    r["ips"][0]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .unwrap_or_else(|| panic!("no address in {r}"))
        .to_string()
}

/// Runs `args` inside netns `ns`.
pub fn in_ns(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .expect("ip netns exec")
}

/// Pings from netns `ns` until one reply arrives (bounded).
pub fn ping(ns: &str, ip: &str, within: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < within {
        if in_ns(ns, &["ping", "-c", "1", "-W", "1", ip])
            .status
            .success()
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// The annotations of pod `default/<name>` in the lab's object store.
pub fn pod_annotations(dir: &Path, name: &str) -> serde_json::Map<String, Value> {
    let pods = ApiClient::connect(dir)
        .and_then(|mut c| c.get(ResourceKind::Pod))
        .expect("get pods");
    pods.iter()
        .find(|p| p["metadata"]["name"] == name)
        .and_then(|p| p["metadata"]["annotations"].as_object().cloned())
        .unwrap_or_default()
}

/// Names of the OVS Interfaces whose `external_ids:iface-id` is `iface_id`.
pub fn ovs_ifaces(db: &str, iface_id: &str) -> Vec<String> {
    let out = Command::new("ovs-vsctl")
        .args(["--db", db, "--bare", "--columns=name", "find", "Interface"])
        .arg(format!("external_ids:iface-id={iface_id}"))
        .output()
        .expect("ovs-vsctl find Interface");
    assert!(
        out.status.success(),
        "ovs-vsctl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Names of the OVS Ports on the node's `br-int`.
pub fn ovs_ports(db: &str) -> Vec<String> {
    let out = Command::new("ovs-vsctl")
        .args(["--db", db, "list-ports", "br-int"])
        .output()
        .expect("ovs-vsctl list-ports");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Link names in netns `ns` (`ip -o link`, without the `@peer` suffix).
pub fn links(ns: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["-n", ns, "-o", "link", "show"])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect()
}

/// True when `pid` is gone or a zombie.
pub fn pid_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    }
}
