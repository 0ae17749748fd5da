//! Driving a lab through the real `zovn` CLI from tests: [`Zovn`] runs `zovn lab ...`
//! against one lab dir, [`DownOnDrop`] takes the lab down when a test ends (also on
//! panic), and small helpers read pods, nodes and events and wait for conditions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lab::Lab;
use serde_json::Value;

/// Takes the lab in the directory down when dropped (also when the test panics, after
/// printing and keeping its logs: [`crate::lab_logs`]).
pub struct DownOnDrop(pub PathBuf);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        crate::lab_logs::on_down(&self.0);
        if let Ok(lab) = Lab::open(&self.0) {
            let _ = lab.down();
        }
    }
}

pub struct Zovn {
    pub exe: PathBuf,
    pub dir: PathBuf,
}

impl Zovn {
    /// `zovn lab ARGS... --dir DIR` (the `--dir` before a `--`): (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        let out = Command::new(&self.exe)
            .arg("lab")
            .args(&args[..split])
            .arg("--dir")
            .arg(&self.dir)
            .args(&args[split..])
            .output()
            .expect("run zovn");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args);
        assert_eq!(code, 0, "zovn lab {args:?} failed:\n{out}\n{err}");
        out
    }

    pub fn pods(&self) -> BTreeMap<String, Value> {
        let out = self.ok(&["get", "pods", "-o", "json"]);
        let list: Value = serde_json::from_str(&out).expect("get -o json");
        list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let key = format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap_or(""),
                    p["metadata"]["name"].as_str().unwrap_or("")
                );
                (key, p)
            })
            .collect()
    }

    /// The Ready condition's message of pod `key`, once it contains `want` (bounded).
    pub fn wait_message(&self, key: &str, want: &str, timeout: Duration) -> String {
        let t0 = Instant::now();
        loop {
            let msg = self.pods().get(key).map(|p| {
                p["status"]["conditions"][0]["message"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            });
            if let Some(m) = &msg
                && m.contains(want)
            {
                return m.clone();
            }
            assert!(
                t0.elapsed() < timeout,
                "pod {key}: no message containing {want:?} after {timeout:?}; last {msg:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits (bounded) until every pod in `keys` has the Ready condition; their pod JSON.
    pub fn wait_ready(&self, keys: &[&str], timeout: Duration) -> BTreeMap<String, Value> {
        let t0 = Instant::now();
        loop {
            let pods = self.pods();
            let ready = |k: &&str| pods.get(*k).is_some_and(api::pod_json::is_ready);
            if keys.iter().all(ready) {
                return pods;
            }
            assert!(
                t0.elapsed() < timeout,
                "pods not ready after {timeout:?}:\n{}\n{}",
                self.ok(&["get", "pods"]),
                keys.iter()
                    .map(|k| format!(
                        "{k}: {}",
                        pods.get(*k).map(|p| &p["status"]).unwrap_or(&Value::Null)
                    ))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub fn netns_of(pod: &Value) -> String {
    api::pod_json::lab_netns(pod)
        .unwrap_or_else(|| panic!("no netns annotation: {pod}"))
        .to_string()
}

pub fn pod_ip(pod: &Value) -> String {
    pod["status"]["podIP"]
        .as_str()
        .unwrap_or_else(|| panic!("no podIP: {pod}"))
        .to_string()
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .and_then(|i| s[i + 1..].trim_start().chars().next())
        })
        .is_some_and(|c| c != 'Z' && c != 'X')
}

/// Every lab process and netns gone after `down`.
pub fn assert_down_clean(dir: &Path, prefix: &str, pids: &[i64]) {
    let lab = Lab::open(dir).expect("open");
    lab.down().expect("down");
    for pid in pids {
        wait_until(&format!("pid {pid} gone"), Duration::from_secs(5), || {
            !alive(*pid)
        });
    }
    let left: Vec<String> = lab::netns::list()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    assert!(left.is_empty(), "netns left: {left:?}");
    assert!(!dir.exists(), "state dir left");
}

/// `zovn lab down` through the CLI (stderr a pipe, as in a log or CI), with one stray
/// daemon the lab never recorded (`<dir>/pods/run/stray.pid`, its cmdline naming it):
/// the stray one is stopped with the one "stopped unrecorded daemon" warning, every daemon
/// the lab knows (pod responders included) quietly; no colour codes; then as
/// [`assert_down_clean`].
pub fn assert_cli_down_clean(z: &Zovn, prefix: &str, pids: &[i64]) {
    let pf = z.dir.join("pods/run/stray.pid");
    std::fs::create_dir_all(z.dir.join("pods/run")).expect("pods/run");
    let mut stray = Command::new("sh")
        .arg("-c")
        .arg("echo $$ > \"$0\"; while :; do sleep 1; done")
        .arg(&pf)
        .spawn()
        .expect("start the stray daemon");
    wait_until("the stray pidfile", Duration::from_secs(5), || {
        std::fs::read_to_string(&pf).is_ok_and(|t| t.trim().parse::<i32>().is_ok())
    });
    let (code, out, err) = z.run(&["down"]);
    let _ = stray.wait();
    assert_eq!(code, 0, "zovn lab down failed:\n{out}\n{err}");
    let unrecorded: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("stopped unrecorded daemon"))
        .collect();
    assert_eq!(
        unrecorded.len(),
        1,
        "only the stray daemon is unrecorded:\n{err}"
    );
    assert!(unrecorded[0].contains("stray.pid"), "{err}");
    assert!(!err.contains('\x1b'), "colour codes on a pipe: {err:?}");
    for pid in pids {
        wait_until(&format!("pid {pid} gone"), Duration::from_secs(5), || {
            !alive(*pid)
        });
    }
    let left: Vec<String> = lab::netns::list()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    assert!(left.is_empty(), "netns left: {left:?}");
    assert!(!z.dir.exists(), "state dir left");
}

impl Zovn {
    /// `zovn` from the workspace's target dir, for the lab in `dir`.
    pub fn new(dir: &Path) -> Zovn {
        Zovn {
            exe: crate::workspace_bin("zovn"),
            dir: dir.to_path_buf(),
        }
    }

    /// `zovn lab get <kind> -o json` items.
    pub fn items(&self, kind: &str) -> Vec<Value> {
        let out = self.ok(&["get", kind, "-o", "json"]);
        let list: Value = serde_json::from_str(&out).expect("get -o json");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// Subnet `name` as the lab's API serves it.
    pub fn subnet(&self, name: &str) -> Value {
        self.items("subnets")
            .into_iter()
            .find(|s| s["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no Subnet {name}"))
    }

    /// A Node's annotation `key`, parsed as JSON.
    pub fn node_annotation_json(&self, node: &str, key: &str) -> Option<Value> {
        self.items("nodes")
            .into_iter()
            .find(|n| n["metadata"]["name"] == node)
            .and_then(|n| n["metadata"]["annotations"][key].as_str().map(String::from))
            .and_then(|s| serde_json::from_str(&s).ok())
    }

    /// Merges `annotations` into Node `node` through the object store.
    pub fn annotate_node(&self, node: &str, annotations: BTreeMap<String, String>) {
        let mut c = lab::apiserver::ApiClient::connect(&self.dir).expect("object store client");
        let r = c
            .request(
                &lab::apiserver::protocol::Request::AnnotateNode {
                    name: node.to_string(),
                    annotations,
                },
                Duration::from_secs(10),
            )
            .expect("annotate node");
        assert!(
            matches!(r, lab::apiserver::protocol::Response::Applied { .. }),
            "annotate node {node}: {r:?}"
        );
    }
}

/// `zovn lab up --prefix <scratch's prefix> ARGS...` in `<scratch>/lab`: the CLI and the
/// guard that takes the lab down (keep it bound).
pub fn cli_up(scratch: &crate::Scratch, args: &[&str]) -> (Zovn, DownOnDrop) {
    let dir = scratch.dir.path().join("lab");
    let z = Zovn::new(&dir);
    let down = DownOnDrop(dir);
    let mut a = vec!["up", "--prefix", scratch.prefix.as_str()];
    a.extend(args);
    z.ok(&a);
    (z, down)
}

/// Brings up a lab of `nodes` nodes in `<scratch>/lab` (names prefixed by the scratch's
/// prefix), its object store and the external host's server, kept running until the returned [`DownOnDrop`] goes
/// (keep it bound: `let (mut lab, z, _down) = ...`). `datapath` is
/// [`lab::LabConfig::datapath`]: empty = no datapath config, one value = every node, else
/// one per node. The node agents are not started ([`start_agents`]), so a test can
/// prepare the nodes first.
pub fn start_lab(
    scratch: &crate::Scratch,
    nodes: usize,
    datapath: &[&str],
) -> (Lab, Zovn, DownOnDrop) {
    start_lab_with_gateway(scratch, nodes, datapath, lab::Gateway::Local)
}

/// [`start_lab`] in gateway mode `gateway`.
pub fn start_lab_with_gateway(
    scratch: &crate::Scratch,
    nodes: usize,
    datapath: &[&str],
    gateway: lab::Gateway,
) -> (Lab, Zovn, DownOnDrop) {
    start_lab_with(scratch, nodes, datapath, |c| c.gateway = gateway)
}

/// Allows the externalIPs of `examples/services/` (192.0.2.0/24): a lab allows none
/// unless told (`--external-ip-cidrs`).
pub fn allow_example_external_ips(cfg: &mut lab::LabConfig) {
    cfg.external_ip_cidrs = vec!["192.0.2.0/24".parse().expect("CIDR")];
}

/// [`start_lab`] with the lab's configuration edited by `edit` first.
pub fn start_lab_with(
    scratch: &crate::Scratch,
    nodes: usize,
    datapath: &[&str],
    edit: impl FnOnce(&mut lab::LabConfig),
) -> (Lab, Zovn, DownOnDrop) {
    let dir = scratch.dir.path().join("lab");
    let mut cfg = lab::LabConfig::new(&dir, &scratch.prefix);
    cfg.nodes = nodes;
    cfg.datapath = datapath.iter().map(|d| d.to_string()).collect();
    edit(&mut cfg);
    let mut lab = Lab::up(cfg).expect("lab up");
    lab.keep_running();
    let down = DownOnDrop(dir.clone());
    let z = Zovn::new(&dir);
    lab.start_apiserver(&z.exe).expect("object store");
    lab.start_external_server(&z.exe)
        .expect("the external host's server");
    (lab, z, down)
}

/// Starts every node's agent (`zstack-ovnkube-node`, with the real `zstack-ovn-cni` shim
/// installed) from the workspace's target dir.
pub fn start_agents(lab: &mut Lab) -> Vec<lab::process::DaemonRecord> {
    let agent = crate::workspace_bin("zstack-ovnkube-node");
    let shim = crate::workspace_bin("zstack-ovn-cni");
    lab.start_agents(&agent, Some(&shim)).expect("agents")
}

impl Zovn {
    /// `zovn lab apply -f examples/<name>` (a directory or file of the repository's
    /// `examples/`).
    /// `zovn lab probe FROM TARGET --timeout 2s [--udp]`: Ok(what answered) or Err(why
    /// not, as the command printed it).
    pub fn probe(&self, from: &str, target: &str, udp: bool) -> Result<String, String> {
        let mut args = vec!["probe", from, target, "--timeout", "2s"];
        if udp {
            args.push("--udp");
        }
        let (code, out, err) = self.run(&args);
        if code == 0 {
            Ok(out.trim().to_string())
        } else {
            Err(format!("{out}{err}"))
        }
    }

    pub fn apply_example(&self, name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples")
            .join(name);
        self.ok(&["apply", "-f", path.to_str().expect("utf-8")])
    }
}

/// Node `node`'s `ct_zero_snat` as its agent leaves it: `Some(what)` once the agent's pass
/// is done (nothing to do on an OVS it does not correct, else every Datapath row reports
/// `ct_zero_snat=false`), `None` while not (or while ovs-vswitchd does not answer).
fn ct_zero_snat_settled(lab: &Lab, node: &lab::NodeState) -> Option<String> {
    let ctl = lab
        .dir()
        .join(format!("node{}/run/ovs-vswitchd.ctl", node.index));
    let version = lab::ctl::appctl(&ctl, &["version"]).ok()?;
    let version = version
        .lines()
        .next()?
        .split_whitespace()
        .last()?
        .to_string();
    if !dataplane::ovs::ct_zero_snat_affected(&version) {
        return Some(format!("OVS {version}: left as reported"));
    }
    let caps = lab::ctl::vsctl(
        &node.db_remote,
        &["--bare", "--columns=capabilities", "list", "Datapath"],
    )
    .ok()?;
    (caps.contains("ct_zero_snat=false") && !caps.contains("ct_zero_snat=true"))
        .then(|| format!("OVS {version}: reported false"))
}

/// Waits (bounded) until the data plane of `lab` has caught up with the northbound
/// database as it is now: every node agent's `ct_zero_snat` pass is done (ovn-controller
/// recomputes all its flows when that capability changes, which the agent does when the
/// first pods arrive on a fresh node), then `ovn-nbctl --wait=hv sync`: every chassis's
/// ovn-controller has installed the flows of the current NB contents (its Chassis_Private
/// `nb_cfg` caught up with NB_Global's). Call it after the NB holds what a test is about to
/// probe, instead of probing while the flows are still being written. `timeout` bounds the
/// wait for each agent; the sync is bounded at 30 s.
pub fn wait_dataplane_synced(lab: &Lab, timeout: Duration) {
    for node in lab.nodes() {
        let mut state = None;
        wait_until(
            &format!("node {}'s agent's ct_zero_snat pass", node.index),
            timeout,
            || {
                state = ct_zero_snat_settled(lab, node);
                state.is_some()
            },
        );
        eprintln!(
            "node {}: ct_zero_snat {}",
            node.index,
            state.unwrap_or_default()
        );
    }
    // `--wait=hv` bumps NB_Global nb_cfg and waits (bounded by ctl's --timeout=30) until
    // northd's hv_cfg, the lowest Chassis_Private nb_cfg, has caught up with it
    lab::ctl::nbctl(&lab.nb_remote(), &["--wait=hv", "sync"])
        .unwrap_or_else(|e| panic!("the chassis did not catch up with the NB: {e}"));
}

/// A TCP (or UDP) probe from any network namespace — a node's host, a platform VM, a VLAN
/// host — to `target` (`ip:port`), `timeout` at most: Ok(what answered: a lab pod's
/// `namespace/name`) or Err(why not).
pub fn probe_netns(
    netns: &str,
    target: &str,
    udp: bool,
    timeout: Duration,
) -> Result<String, String> {
    match lab::pods::probe::probe(netns, target, udp, timeout) {
        Ok(lab::pods::probe::ProbeOutcome::Reachable(who)) => Ok(who),
        Ok(lab::pods::probe::ProbeOutcome::Unreachable(why)) => Err(why),
        Err(e) => Err(format!("{e:#}")),
    }
}

impl Zovn {
    /// `zovn status ARGS --dir DIR`'s output (the operator's command; it must succeed).
    pub fn status(&self, args: &[&str]) -> String {
        let out = Command::new(&self.exe)
            .arg("status")
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .output()
            .expect("run zovn status");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `zovn trace ARGS --dir DIR` (the operator's command, not `zovn lab ...`): (exit
    /// code, stdout, stderr).
    pub fn trace(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(&self.exe)
            .arg("trace")
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .output()
            .expect("run zovn trace");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}
