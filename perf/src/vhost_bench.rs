//! 64-byte packet rate through the OVS-DPDK PMD between two vhost-user ports: the ports
//! the node agent creates for two vhost-user pods versus the same ports created by hand
//! with `ovs-vsctl` and hand-tuned settings, in one run on the same node.
//!
//! A 1-node lab with OVS-DPDK (one PMD thread on core 1), its object store and controller,
//! and a node agent started inside the node netns (with no CNI config dir, so the lab's
//! pod runtime leaves the pods to us). Agent ports: two Pods with the
//! `network.zstack.io/vhost-user` annotation, `ADD` through the real shim (CNI 1.1, the
//! result names each socket). Hand ports: two LSPs made with `ovn-nbctl` (addresses and
//! port security like the pods'), two `dpdkvhostuserclient` Interfaces made with
//! `ovs-vsctl` bound to them, pinned to the PMD core (`pmd-rxq-affinity`, with
//! `pmd-rxq-assign=group` and `pmd-rxq-isolate=false` so the core keeps polling the
//! agent's ports too), MTU 1500.
//! Both pairs sit on br-int behind the same OVN pipeline, so the figures compare the
//! ports, not the flows.
//!
//! `dpdk-testpmd` is the guest (virtio-user, server mode: it creates the sockets OVS
//! connects to), forwarding on core 0:
//! - **txonly → rxonly**: one testpmd sends 64 B frames A→B (`txonly`, MACs/IPs of the
//!   LSPs), a second one receives on B (`rxonly`);
//! - **io loop**: one testpmd with both ports in `io` mode, paired: a frame A→B received
//!   on B leaves again by A unchanged (valid for A's port security), seeded with one
//!   burst of 64 (`--tx-first`); a closed loop, so it measures OVS and testpmd together.
//!
//! The rate is what the PMD received (`dpif-netdev/pmd-stats-show`, packets received
//! over `seconds` after a warm-up), in Mpps per PMD core. Setups alternate for `rounds`
//! rounds (who goes first alternates); the median is reported with the agent/hand ratio. Everything is removed at the
//! end, also after a failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use lab::apiserver::ApiClient;
use lab::{Dpdk, Lab, LabConfig};
use serde_json::{Value, json};

use crate::host::{heavy_lock, run_ok, teardown_lab, which};

/// Target from the issue: agent ≥ 0.95 × hand-tuned.
pub const TARGET_RATIO: f64 = 0.95;
const SUBNET_CIDR: &str = "10.55.0.0/16";
const SUBNET_GW: &str = "10.55.0.1";
use api::keys::VHOST_USER as ANNOTATION;

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    pub dir: PathBuf,
    /// Measured seconds per sample (after a 2 s warm-up).
    pub seconds: u32,
    /// Rounds (agent, hand, agent, hand, ...).
    pub rounds: usize,
}

/// One vhost-user port and the LSP addresses behind it.
#[derive(Debug, Clone)]
struct Port {
    name: String,
    socket: PathBuf,
    mac: String,
    ip: String,
}

/// Measured samples (Mpps) per mode and setup.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub seconds: u32,
    pub rounds: usize,
    pub txonly_agent: Vec<f64>,
    pub txonly_hand: Vec<f64>,
    pub loop_agent: Vec<f64>,
    pub loop_hand: Vec<f64>,
    /// The agent's and the hand-made Interface rows as OVS shows them.
    pub agent_ports: Vec<String>,
    pub hand_ports: Vec<String>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

impl Report {
    pub fn table(&self) -> String {
        let mut s = format!(
            "vhost-user 64 B through one OVS PMD core ({} s per sample, {} rounds, median Mpps)\n",
            self.seconds, self.rounds
        );
        s += &format!(
            "{:<22} {:>10} {:>10} {:>8}  {}\n",
            "mode", "agent", "by hand", "ratio", "target"
        );
        for (mode, a, h) in [
            ("txonly -> rxonly", &self.txonly_agent, &self.txonly_hand),
            ("io loop", &self.loop_agent, &self.loop_hand),
        ] {
            let (ma, mh) = (median(a), median(h));
            let ratio = if mh > 0.0 { ma / mh } else { 0.0 };
            s += &format!(
                "{mode:<22} {ma:>10.2} {mh:>10.2} {ratio:>8.3}  >= {TARGET_RATIO} {}\n",
                if ratio >= TARGET_RATIO {
                    "ok"
                } else {
                    "MISSED"
                }
            );
        }
        s += "samples (Mpps):\n";
        for (what, v) in [
            ("txonly agent", &self.txonly_agent),
            ("txonly hand", &self.txonly_hand),
            ("loop agent", &self.loop_agent),
            ("loop hand", &self.loop_hand),
        ] {
            let list: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
            s += &format!("  {what:<13} {}\n", list.join(" "));
        }
        s += "ports:\n";
        for p in self.agent_ports.iter().chain(&self.hand_ports) {
            s += &format!("  {p}\n");
        }
        s
    }

    pub fn to_json(&self) -> Value {
        json!({
            "seconds": self.seconds, "rounds": self.rounds, "target_ratio": TARGET_RATIO,
            "txonly": {"agent_mpps": self.txonly_agent, "hand_mpps": self.txonly_hand,
                "ratio": median(&self.txonly_agent) / median(&self.txonly_hand).max(1e-9)},
            "loop": {"agent_mpps": self.loop_agent, "hand_mpps": self.loop_hand,
                "ratio": median(&self.loop_agent) / median(&self.loop_hand).max(1e-9)},
            "agent_ports": self.agent_ports, "hand_ports": self.hand_ports,
        })
    }
}

struct Bench {
    cfg: Config,
    lab_dir: PathBuf,
    prefix: String,
    lab_started: bool,
    agent: Option<Child>,
    netns: Vec<String>,
    testpmds: Vec<Child>,
    db: String,
    nb: String,
    ctl: PathBuf,
    hand_made: bool,
}

/// Runs the benchmark (see the module docs).
pub fn run(cfg: Config) -> Result<Report> {
    ensure!(
        cfg.seconds > 0 && cfg.rounds > 0,
        "--seconds and --rounds must be > 0"
    );
    for tool in ["dpdk-testpmd", "ovs-vsctl", "ovs-appctl", "ovn-nbctl", "ip"] {
        ensure!(
            which(tool).is_some(),
            "`{tool}` is not installed (run `make deps`)"
        );
    }
    let zovn = lab::apiserver::zovn_exe()?;
    let agent = lab::agent::agent_exe()?;
    let shim = lab::agent::shim_exe()?;
    let _lock = heavy_lock("zovn-perf vhost")?;
    std::fs::create_dir_all(&cfg.dir).with_context(|| format!("create {}", cfg.dir.display()))?;
    let mut b = Bench {
        lab_dir: cfg.dir.join("lab"),
        prefix: format!("pv{:x}", std::process::id() % 0xfff),
        cfg,
        lab_started: false,
        agent: None,
        netns: Vec::new(),
        testpmds: Vec::new(),
        db: String::new(),
        nb: String::new(),
        ctl: PathBuf::new(),
        hand_made: false,
    };
    let r = b.measure(&zovn, &agent, &shim);
    let t = b.teardown(&shim);
    match (r, t) {
        (Ok(r), Ok(())) => Ok(r),
        (Err(e), t) => {
            if let Err(te) = t {
                eprintln!("teardown after the failure also failed: {te:#}");
            }
            Err(e)
        }
        (Ok(_), Err(e)) => Err(e.context("teardown")),
    }
}

impl Bench {
    fn measure(&mut self, zovn: &Path, agent: &Path, shim: &Path) -> Result<Report> {
        eprintln!("vhost: lab up (1 node, OVS-DPDK, prefix {})", self.prefix);
        self.lab_started = true;
        let mut cfg = LabConfig::new(&self.lab_dir, &self.prefix);
        cfg.dpdk = Dpdk::All;
        let mut lab = Lab::up(cfg).context("lab up")?;
        lab.keep_running();
        lab.start_apiserver(zovn).context("object store")?;
        let st = lab.node(1).context("node 1")?.clone();
        self.db = st.db_remote.clone();
        self.nb = lab.nb_remote();
        self.ctl = st.dir.join("run/ovs-vswitchd.ctl");
        let api = lab::state::Layout::new(&self.lab_dir).api_socket();
        ApiClient::connect(&self.lab_dir)?.apply(vec![json!({
            "apiVersion": "network.zstack.io/v1", "kind": "Subnet",
            "metadata": {"name": "vhost-bench"},
            "spec": {"cidr": SUBNET_CIDR, "gateway": SUBNET_GW, "default": true}})])?;
        self.start_agent(agent, &api, &st.netns, &st.system_id)?;

        // the agent's ports: two vhost-user pods through the shim
        let mut agent_ports = Vec::new();
        for name in ["vb-a", "vb-b"] {
            ApiClient::connect(&self.lab_dir)?.apply(vec![json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default",
                    "annotations": {ANNOTATION: "{\"queues\": 1, \"owner\": \"0:0\"}"}},
                "spec": {"nodeName": st.system_id, "containers": []}})])?;
            let ns = format!("{}{name}", self.prefix);
            run_ok(Command::new("ip").args(["netns", "add", &ns]))?;
            self.netns.push(ns.clone());
            let (ok, v) = shim_call(shim, &self.cni_socket(), "ADD", name, &ns)?;
            ensure!(ok, "ADD of {name} failed: {v}");
            let pod_if = &v["interfaces"][1];
            agent_ports.push(Port {
                name: v["interfaces"][0]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
                socket: PathBuf::from(
                    pod_if["socketPath"]
                        .as_str()
                        .ok_or_else(|| anyhow!("ADD of {name}: no socketPath in {v}"))?,
                ),
                mac: pod_if["mac"].as_str().unwrap_or_default().into(),
                ip: v["ips"][0]["address"]
                    .as_str()
                    .and_then(|a| a.split('/').next())
                    .unwrap_or_default()
                    .into(),
            });
        }
        // the same by hand: LSPs with port security, Interfaces with ovs-vsctl, tuned
        let ls = self.nbctl(&["lsp-get-ls", "default_vb-a"])?;
        let ls = ls
            .split('(')
            .nth(1)
            .and_then(|s| s.split(')').next())
            .ok_or_else(|| anyhow!("logical switch of default_vb-a: {ls:?}"))?
            .to_string();
        // pinning would isolate the only PMD core from the agent's (unpinned) ports
        self.vsctl(&[
            "set",
            "Open_vSwitch",
            ".",
            "other_config:pmd-rxq-assign=group",
            "other_config:pmd-rxq-isolate=false",
        ])?;
        let hand_dir = self.cfg.dir.join("hand");
        std::fs::create_dir_all(&hand_dir)?;
        let mut hand_ports = Vec::new();
        self.hand_made = true;
        for (i, name) in ["hand-a", "hand-b"].into_iter().enumerate() {
            let p = Port {
                name: name.into(),
                socket: hand_dir.join(format!("{name}.sock")),
                mac: format!("0a:58:0a:37:00:{:02x}", 0xc8 + i),
                ip: format!("10.55.0.{}", 200 + i),
            };
            let addr = format!("{} {}", p.mac, p.ip);
            self.nbctl(&[
                "lsp-add",
                &ls,
                name,
                "--",
                "lsp-set-addresses",
                name,
                &addr,
                "--",
                "lsp-set-port-security",
                name,
                &addr,
            ])?;
            self.vsctl(&[
                "add-port",
                "br-int",
                name,
                "--",
                "set",
                "Interface",
                name,
                "type=dpdkvhostuserclient",
                &format!("options:vhost-server-path={}", p.socket.display()),
                &format!("external_ids:iface-id={name}"),
                "other_config:pmd-rxq-affinity=0:1",
                "mtu_request=1500",
            ])?;
            self.vsctl(&[
                "--timeout=30",
                "wait-until",
                "Interface",
                name,
                "external_ids:ovn-installed=\"true\"",
            ])?;
            hand_ports.push(p);
        }
        let show = |ports: &[Port]| -> Vec<String> {
            ports
                .iter()
                .map(|p| {
                    let cols = "type,options,mtu_request,other_config";
                    self.vsctl(&[
                        "--format=csv",
                        "--no-headings",
                        &format!("--columns={cols}"),
                        "list",
                        "Interface",
                        &p.name,
                    ])
                    .map(|s| format!("{}: {}", p.name, s.trim()))
                    .unwrap_or_default()
                })
                .collect()
        };
        let mut report = Report {
            seconds: self.cfg.seconds,
            rounds: self.cfg.rounds,
            agent_ports: show(&agent_ports),
            hand_ports: show(&hand_ports),
            ..Default::default()
        };
        for round in 1..=self.cfg.rounds {
            // alternate who goes first, so a drift in the machine's load hits both alike
            let mut order = [("agent", &agent_ports), ("hand", &hand_ports)];
            if round % 2 == 0 {
                order.reverse();
            }
            for (setup, ports) in order {
                let t = self.sample_txonly(&ports[0], &ports[1])?;
                let l = self.sample_loop(&ports[0], &ports[1])?;
                eprintln!(
                    "vhost: round {round} {setup}: txonly->rxonly {t:.2} Mpps, loop {l:.2} Mpps"
                );
                if setup == "agent" {
                    report.txonly_agent.push(t);
                    report.loop_agent.push(l);
                } else {
                    report.txonly_hand.push(t);
                    report.loop_hand.push(l);
                }
            }
        }
        Ok(report)
    }

    fn cni_socket(&self) -> PathBuf {
        self.cfg.dir.join("agent/cni.sock")
    }

    fn start_agent(&mut self, agent: &Path, api: &Path, netns: &str, node: &str) -> Result<()> {
        let state = self.cfg.dir.join("agent/state");
        std::fs::create_dir_all(&state)?;
        let log = std::fs::File::create(self.cfg.dir.join("agent.log"))?;
        let child = Command::new("ip")
            .args(["netns", "exec", netns])
            .arg(agent)
            .args(["--node-name", node, "--ovs-db", &self.db])
            .arg("--cni-socket")
            .arg(self.cni_socket())
            .arg("--pods")
            .arg(format!("lab:{}", api.display()))
            .arg("--state-dir")
            .arg(&state)
            .env("ZSTACK_OVN_VHOST_DIR", self.cfg.dir.join("vs"))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", agent.display()))?;
        self.agent = Some(child);
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(self.cni_socket()).is_err() {
            if let Some(c) = self.agent.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                bail!("the agent exited ({status})");
            }
            ensure!(
                t.elapsed() < Duration::from_secs(20),
                "the agent does not serve"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn vsctl(&self, args: &[&str]) -> Result<String> {
        let out = run_ok(
            Command::new("ovs-vsctl")
                .arg(format!("--db={}", self.db))
                .args(args),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn nbctl(&self, args: &[&str]) -> Result<String> {
        let out = run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={}", self.nb))
                .args(args),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn appctl(&self, args: &[&str]) -> Result<String> {
        let out = run_ok(
            Command::new("ovs-appctl")
                .arg("-t")
                .arg(&self.ctl)
                .args(args),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A testpmd on `ports` (forwarding on core 0) with `fwd` arguments.
    fn testpmd(&mut self, tag: &str, ports: &[&Port], fwd: &[String]) -> Result<()> {
        let mut args: Vec<String> = [
            "-l",
            "0,1",
            "--main-lcore",
            "1",
            "--no-pci",
            "--in-memory",
            "--single-file-segments",
            "--socket-mem",
            "256",
        ]
        .map(String::from)
        .to_vec();
        args.push(format!("--file-prefix={}{tag}", self.prefix));
        for (i, p) in ports.iter().enumerate() {
            let _ = std::fs::remove_file(&p.socket);
            args.push(format!(
                "--vdev=net_virtio_user{i},path={},server=1,queues=1,mac={}",
                p.socket.display(),
                p.mac
            ));
        }
        args.push("--".into());
        args.extend(fwd.iter().cloned());
        args.extend(
            [
                "--auto-start",
                "--nb-cores=1",
                "--stats-period",
                "3600",
                "--total-num-mbufs=16384",
            ]
            .map(String::from),
        );
        let log = std::fs::File::create(self.cfg.dir.join(format!("testpmd-{tag}.log")))?;
        let child = Command::new("dpdk-testpmd")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("start dpdk-testpmd")?;
        self.testpmds.push(child);
        // OVS (the client) reconnects to the new socket
        let t = Instant::now();
        for p in ports {
            loop {
                let st = self.vsctl(&["get", "Interface", &p.name, "link_state"])?;
                if st.trim() == "up" {
                    break;
                }
                ensure!(
                    t.elapsed() < Duration::from_secs(30),
                    "port {} not up with testpmd {tag} (see testpmd-{tag}.log)",
                    p.name
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    fn stop_testpmds(&mut self) {
        for mut c in std::mem::take(&mut self.testpmds) {
            let _ = nix_kill(c.id(), "INT");
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// PMD packets received per second (Mpps) over the configured window.
    fn pmd_rate(&self) -> Result<f64> {
        std::thread::sleep(Duration::from_secs(2));
        self.appctl(&["dpif-netdev/pmd-stats-clear"])?;
        let t = Instant::now();
        std::thread::sleep(Duration::from_secs(u64::from(self.cfg.seconds)));
        let text = self.appctl(&["dpif-netdev/pmd-stats-show"])?;
        let secs = t.elapsed().as_secs_f64();
        let pkts: u64 = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("packets received:"))
            .filter_map(|v| v.trim().parse::<u64>().ok())
            .sum();
        Ok(pkts as f64 / secs / 1e6)
    }

    fn sample_txonly(&mut self, a: &Port, b: &Port) -> Result<f64> {
        self.testpmd("rx", &[b], &["--forward-mode=rxonly".into()])?;
        self.testpmd(
            "tx",
            &[a],
            &[
                "--forward-mode=txonly".into(),
                format!("--eth-peer=0,{}", b.mac),
                format!("--tx-ip={},{}", a.ip, b.ip),
            ],
        )?;
        let r = self.pmd_rate();
        self.stop_testpmds();
        self.nonzero(r, &["rx", "tx"])
    }

    /// A sample of zero means a broken setup, not a slow one: fail with testpmd's words.
    fn nonzero(&self, r: Result<f64>, tags: &[&str]) -> Result<f64> {
        let r = r?;
        if r > 0.001 {
            return Ok(r);
        }
        let logs: Vec<String> = tags
            .iter()
            .map(|t| {
                let text = std::fs::read_to_string(self.cfg.dir.join(format!("testpmd-{t}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(25).collect();
                format!(
                    "--- testpmd {t}:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect();
        let rxqs = self
            .appctl(&["dpif-netdev/pmd-rxq-show"])
            .unwrap_or_else(|e| e.to_string());
        bail!(
            "the PMD received no packets\n{}\n--- pmd-rxq-show:\n{rxqs}",
            logs.join("\n")
        )
    }

    /// The io loop: frames A→B come back in on B and leave again by A unchanged (still
    /// valid for A's port security), 64 seeded by `--tx-first`. A closed loop can lose its
    /// frames (a full ring drops them): one more try before giving up.
    fn sample_loop(&mut self, a: &Port, b: &Port) -> Result<f64> {
        match self.sample_loop_once(a, b) {
            Ok(r) => Ok(r),
            Err(e) => {
                eprintln!(
                    "vhost: the io loop lost its frames ({}); once more",
                    e.to_string().lines().next().unwrap_or("")
                );
                self.sample_loop_once(a, b)
            }
        }
    }

    fn sample_loop_once(&mut self, a: &Port, b: &Port) -> Result<f64> {
        self.testpmd(
            "loop",
            &[a, b],
            &[
                "--forward-mode=io".into(),
                "--port-topology=paired".into(),
                format!("--eth-peer=0,{}", b.mac),
                format!("--eth-peer=1,{}", a.mac),
                format!("--tx-ip={},{}", a.ip, b.ip),
                "--burst=64".into(),
                "--tx-first".into(),
            ],
        )?;
        let r = self.pmd_rate();
        self.stop_testpmds();
        self.nonzero(r, &["loop"])
    }

    fn teardown(&mut self, shim: &Path) -> Result<()> {
        self.stop_testpmds();
        if self.agent.is_some() {
            for name in ["vb-a", "vb-b"] {
                let ns = format!("{}{name}", self.prefix);
                let _ = shim_call(shim, &self.cni_socket(), "DEL", name, &ns);
            }
        }
        if self.hand_made {
            for name in ["hand-a", "hand-b"] {
                let _ = self.vsctl(&["--if-exists", "del-port", "br-int", name]);
                let _ = self.nbctl(&["--if-exists", "lsp-del", name]);
            }
        }
        if let Some(mut a) = self.agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
        teardown_lab(&mut self.netns, &self.lab_dir, self.lab_started)
    }
}

fn nix_kill(pid: u32, sig: &str) -> Result<()> {
    run_ok(Command::new("kill").args([&format!("-{sig}"), &pid.to_string()])).map(drop)
}

/// One shim call for pod `name` (CNI 1.1: the result carries `socketPath`).
fn shim_call(
    bin: &Path,
    socket: &Path,
    cmd: &str,
    name: &str,
    netns: &str,
) -> Result<(bool, Value)> {
    crate::host::Shim {
        bin,
        socket,
        cni_version: "1.1.0",
        timeout_s: 30.0,
    }
    .call(cmd, &format!("{:0>64}", name.replace('-', "")), netns, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_table() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let r = Report {
            seconds: 5,
            rounds: 1,
            txonly_agent: vec![4.6],
            txonly_hand: vec![4.6],
            loop_agent: vec![4.0],
            loop_hand: vec![5.0],
            ..Default::default()
        };
        let t = r.table();
        assert!(t.contains("1.000  >= 0.95 ok"), "{t}");
        assert!(t.contains("0.800  >= 0.95 MISSED"), "{t}");
    }
}
