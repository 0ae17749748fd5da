//! [`Lab`]: central + N nodes + underlay (+ the external network), built from a
//! [`LabConfig`], recorded in a manifest, torn down exactly.
//!
//! `down` stops every daemon by pid (confirmed gone), deletes every netns the lab created
//! (which removes their veths), undoes hugepage changes the lab made, and removes the state
//! directory. [`Lab::down_keep_files`] keeps the directory (logs, databases) for debugging.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::apiserver;
use crate::central::{Central, CentralConfig};
use crate::config::LabConfig;
use crate::ctl;
use crate::error::{LabError, Result};
use crate::external;
use crate::hugepages;
use crate::names::{Names, check_pod_name};
use crate::netns;
use crate::node::{self, NodeSpec};
use crate::process::{
    DaemonRecord, StopOutcome, cmdline_matches, read_pidfile, stop_daemon, stop_pid,
};
use crate::state::{ExternalState, Layout, Manifest, NodeState, PodState, Timings, pidfiles};
use crate::wait::wait_for;

/// How long `up` waits for every chassis to appear in the SB.
pub const CHASSIS_TIMEOUT: Duration = Duration::from_secs(60);

/// A step of `up` that just finished (for progress output).
#[derive(Debug, Clone)]
pub struct Step<'a> {
    pub what: &'a str,
    /// Duration of this step.
    pub took: Duration,
    /// Time since `up` started.
    pub since_start: Duration,
}

/// A test pod to attach to a node's br-int (see [`Lab::add_pod`]).
#[derive(Debug, Clone)]
pub struct PodConfig<'a> {
    /// 1-based node index.
    pub node: usize,
    /// Short name (≤ 5 chars `[a-z0-9]`), also the `iface-id` / LSP name.
    pub name: &'a str,
    pub mac: &'a str,
    /// e.g. `10.0.0.11/24`.
    pub ip_cidr: &'a str,
    /// Pod MTU (1400 leaves room for Geneve over the 1500 underlay).
    pub mtu: u32,
}

/// Liveness of one daemon, for [`LabStatus`].
#[derive(Debug, Clone)]
pub struct DaemonStatus {
    pub name: String,
    pub program: String,
    pub pid: i32,
    pub alive: bool,
}

/// What [`Lab::status`] reports.
#[derive(Debug)]
pub struct LabStatus {
    pub dir: PathBuf,
    pub prefix: String,
    pub complete: bool,
    pub nb_remote: String,
    pub sb_remote: String,
    pub daemons: Vec<DaemonStatus>,
    /// Chassis (with Encap) in the SB, or why they could not be listed.
    pub chassis: Result<Vec<String>>,
    /// Recorded netns and whether each exists.
    pub netns: Vec<(String, bool)>,
    /// The external network ([`crate::external`]), if the lab has one.
    pub external: Option<ExternalState>,
    pub timings: Timings,
}

/// A running lab.
#[derive(Debug)]
pub struct Lab {
    layout: Layout,
    names: Names,
    manifest: Manifest,
    central: Option<Central>,
    stop_on_drop: bool,
}

impl Lab {
    /// Builds the lab (see [`Lab::up_with_progress`]).
    pub fn up(cfg: LabConfig) -> Result<Lab> {
        Lab::up_with_progress(cfg, |_| {})
    }

    /// Builds the lab, calling `progress` after each step. A state dir left by a crashed
    /// lab is cleaned first (only what its manifest/pidfiles name); a lab that is complete
    /// and fully alive in `cfg.dir` is an error (take it down first). Returns once every
    /// node's chassis is in the SB with an Encap. The external network
    /// ([`crate::external`]) is built too, without its server
    /// ([`Lab::start_external_server`]). On failure everything started is torn down before
    /// the error is returned. The returned lab stops on drop unless
    /// [`Lab::keep_running`] is called.
    pub fn up_with_progress(cfg: LabConfig, mut progress: impl FnMut(&Step)) -> Result<Lab> {
        let names = cfg.validate()?;
        let layout = Layout::new(&cfg.dir);
        let t0 = Instant::now();
        let mut step_start = t0;
        let mut step = |what: &str, progress: &mut dyn FnMut(&Step)| -> Duration {
            let took = step_start.elapsed();
            step_start = Instant::now();
            progress(&Step {
                what,
                took,
                since_start: t0.elapsed(),
            });
            took
        };
        let stale = cleanup_stale(&layout)?;
        let stale_took = step("stale state cleaned", &mut progress);

        std::fs::create_dir_all(&layout.dir)
            .map_err(|e| LabError::io("create dir", &layout.dir, e))?;
        let mut lab = Lab {
            layout,
            names,
            manifest: Manifest::new(cfg.clone()),
            central: None,
            stop_on_drop: true,
        };
        if stale {
            lab.manifest.timings.stale_cleanup = Some(stale_took);
        }
        lab.save()?;
        // any error below: Drop tears down what the manifest recorded
        if (1..=cfg.nodes).any(|i| cfg.dpdk_build(i)) {
            let r = hugepages::ensure(&lab.layout.hugepages(), &mut lab.manifest.hugepages);
            lab.save()?;
            r?;
            lab.manifest.timings.hugepages = Some(step("hugepages", &mut progress));
        }

        let mut central = Central::start(CentralConfig {
            dir: lab.layout.central(),
            raft: cfg.raft,
            northd: true,
            tcp: false,
        })?;
        central.keep_running();
        lab.manifest.central = Some(central.state().clone());
        lab.central = Some(central);
        lab.save()?;
        lab.manifest.timings.central = step(
            if cfg.raft {
                "central up (Raft NB+SB, northd)"
            } else {
                "central up (NB, SB, northd)"
            },
            &mut progress,
        );

        let ul_ns = lab.names.underlay_netns();
        let ul_br = lab.names.underlay_bridge();
        lab.add_netns(&ul_ns)?;
        netns::add_bridge(&ul_ns, &ul_br)?;
        lab.manifest.timings.underlay = step("underlay bridge", &mut progress);

        let ext_ns = lab.names.external_netns();
        lab.add_netns(&ext_ns)?;
        lab.manifest.external = Some(external::create(&lab.names, &ul_ns, &ul_br)?);
        lab.save()?;
        lab.manifest.timings.external = Some(step(
            "external network (198.51.100.0/24, 2001:db8:5100::/64 behind the underlay router)",
            &mut progress,
        ));

        let sb_remote = lab.sb_remote();
        let (names, layout) = (lab.names.clone(), lab.layout.clone());
        for i in 1..=cfg.nodes {
            let spec = NodeSpec {
                index: i,
                names: &names,
                layout: &layout,
                sb_remote: &sb_remote,
                encap: cfg.encap,
                dpdk: cfg.dpdk_build(i),
                datapath: cfg.datapath_of(i),
            };
            let mut st = node::initial_state(&spec);
            lab.add_netns(&st.netns)?;
            let r = node::start(&spec, &ul_ns, &ul_br, &mut st)
                .and_then(|()| external::route_node(&st.netns));
            lab.manifest.nodes.push(st);
            lab.save()?;
            r?;
            let label = format!(
                "node{i} up ({}{})",
                if cfg.dpdk_build(i) {
                    "ovs-vswitchd-dpdk"
                } else {
                    "ovs-vswitchd"
                },
                cfg.datapath_of(i)
                    .map(|d| format!(", agent datapath {d}"))
                    .unwrap_or_default()
            );
            let took = step(&label, &mut progress);
            lab.manifest.timings.nodes.push(took);
        }

        lab.wait_chassis()?;
        lab.manifest.timings.chassis = step("all chassis registered in SB", &mut progress);
        lab.manifest.timings.total = t0.elapsed();
        lab.manifest.complete = true;
        lab.save()?;
        info!(dir = %cfg.dir.display(), total_ms = t0.elapsed().as_millis() as u64, "lab up");
        Ok(lab)
    }

    /// Attaches to the lab recorded in `<dir>/lab.json`. The result does not stop the lab
    /// on drop.
    pub fn open(dir: impl AsRef<Path>) -> Result<Lab> {
        let layout = Layout::new(dir.as_ref());
        let manifest = Manifest::load(&layout.manifest())?;
        let names = Names::new(&manifest.config.prefix)?;
        let central = manifest.central.clone().map(Central::attach);
        Ok(Lab {
            layout,
            names,
            manifest,
            central,
            stop_on_drop: false,
        })
    }

    /// Leave the lab running when this value is dropped (e.g. `zovn lab up`).
    pub fn keep_running(&mut self) {
        self.stop_on_drop = false;
    }

    pub fn config(&self) -> &LabConfig {
        &self.manifest.config
    }
    pub fn dir(&self) -> &Path {
        &self.layout.dir
    }
    pub fn names(&self) -> &Names {
        &self.names
    }
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    pub fn nodes(&self) -> &[NodeState] {
        &self.manifest.nodes
    }
    pub fn timings(&self) -> &Timings {
        &self.manifest.timings
    }
    /// The central daemons.
    pub fn central(&self) -> Option<&Central> {
        self.central.as_ref()
    }
    /// NB remote for clients ("" before central started).
    pub fn nb_remote(&self) -> String {
        self.central
            .as_ref()
            .map(Central::nb_remote)
            .unwrap_or_default()
    }
    /// SB remote for clients ("" before central started).
    pub fn sb_remote(&self) -> String {
        self.central
            .as_ref()
            .map(Central::sb_remote)
            .unwrap_or_default()
    }
    /// Node `i` (1-based).
    pub fn node(&self, i: usize) -> Result<&NodeState> {
        self.manifest
            .nodes
            .iter()
            .find(|n| n.index == i)
            .ok_or_else(|| LabError::Invalid(format!("lab has no node {i}")))
    }

    /// Every recorded daemon (stop order).
    pub fn daemons(&self) -> Vec<&DaemonRecord> {
        self.manifest.daemons_stop_order()
    }

    /// Daemons, chassis, remotes and netns.
    pub fn status(&self) -> LabStatus {
        let chassis = if self.central.is_some() {
            ctl::sb_chassis_with_encap(&self.sb_remote())
        } else {
            Err(LabError::NoCentral)
        };
        let daemons: Vec<DaemonStatus> = self
            .manifest
            .daemons_start_order()
            .into_iter()
            .map(|d| DaemonStatus {
                name: d.name.clone(),
                program: d.program.clone(),
                pid: d.pid,
                alive: d.is_alive(),
            })
            .collect();
        LabStatus {
            dir: self.layout.dir.clone(),
            prefix: self.manifest.config.prefix.clone(),
            complete: self.manifest.complete,
            nb_remote: self.nb_remote(),
            sb_remote: self.sb_remote(),
            daemons,
            chassis,
            netns: self
                .manifest
                .netns
                .iter()
                .cloned()
                .chain(
                    self.runtime_pods()
                        .map(|f| f.pods.into_values().map(|p| p.netns).collect::<Vec<_>>())
                        .unwrap_or_default(),
                )
                .map(|n| {
                    let ok = netns::exists(&n);
                    (n, ok)
                })
                .collect(),
            external: self.manifest.external.clone(),
            timings: self.manifest.timings.clone(),
        }
    }

    /// Waits (bounded) until every node's chassis is in the SB with an Encap.
    pub fn wait_chassis(&self) -> Result<Vec<String>> {
        let sb = self.sb_remote();
        let mut want: Vec<String> = self
            .manifest
            .nodes
            .iter()
            .map(|n| n.system_id.clone())
            .collect();
        want.sort();
        wait_for(
            "every chassis (with Encap) in the SB",
            CHASSIS_TIMEOUT,
            Duration::from_millis(20),
            |last| {
                let have = ctl::sb_chassis_with_encap(&sb)?;
                let ok = want.iter().all(|w| have.contains(w));
                *last = Some(format!("have {have:?}, want {want:?}"));
                Ok(ok.then_some(have))
            },
        )
    }

    /// Attaches a test pod to node `cfg.node`: netns `<prefix>q<name>` with `eth0` (MAC,
    /// IP, MTU, tx checksum offload off — OVS userspace forwards partial checksums as-is)
    /// ⇄ `<prefix>v<name>` on br-int with `external_ids:iface-id=<name>`. The LSP is the
    /// caller's business. The netns is recorded, so `down` removes it.
    pub fn add_pod(&mut self, cfg: &PodConfig) -> Result<PodState> {
        check_pod_name(cfg.name)?;
        let node = self.node(cfg.node)?.clone();
        let pod = PodState {
            name: cfg.name.to_string(),
            node: cfg.node,
            netns: self.names.pod_netns(cfg.name),
            ifname: "eth0".into(),
            host_veth: self.names.pod_host_veth(cfg.name),
            iface_id: cfg.name.to_string(),
            mac: cfg.mac.to_string(),
            ip_cidr: cfg.ip_cidr.to_string(),
        };
        self.add_netns(&pod.netns)?;
        self.manifest.pods.push(pod.clone());
        self.save()?;
        netns::add_veth(&pod.host_veth, &node.netns, &pod.ifname, &pod.netns)?;
        netns::link_up(&node.netns, &pod.host_veth)?;
        netns::set_mac_mtu_up(&pod.netns, &pod.ifname, cfg.mac, cfg.mtu)?;
        netns::addr_add(&pod.netns, &pod.ifname, cfg.ip_cidr)?;
        netns::exec(&pod.netns, &["ethtool", "-K", &pod.ifname, "tx", "off"])?;
        let iface_id = format!("external_ids:iface-id={}", pod.iface_id);
        ctl::vsctl(
            &node.db_remote,
            &[
                "add-port",
                "br-int",
                &pod.host_veth,
                "--",
                "set",
                "Interface",
                &pod.host_veth,
                &iface_id,
            ],
        )?;
        Ok(pod)
    }

    /// Starts the object-store daemon (`<exe> lab serve`, see [`crate::apiserver`]) and
    /// records it in the manifest. `exe` is the `zovn` binary
    /// ([`crate::apiserver::zovn_exe`] finds it). A recorded daemon that is still alive is
    /// an error; a dead one is replaced (the new one reloads `store.json`).
    pub fn start_apiserver(&mut self, exe: &Path) -> Result<DaemonRecord> {
        if let Some(old) = &self.manifest.apiserver
            && old.is_alive()
        {
            return Err(LabError::Daemon {
                name: old.name.clone(),
                program: old.program.clone(),
                detail: format!("already running (pid {})", old.pid),
            });
        }
        let rec = apiserver::launch::spawn(&self.layout, exe).map_err(|e| LabError::Daemon {
            name: apiserver::launch::DAEMON_NAME.into(),
            program: exe.display().to_string(),
            detail: format!("{e:#}"),
        })?;
        self.manifest.apiserver = Some(rec.clone());
        self.save()?;
        Ok(rec)
    }

    /// Starts one node agent (`agent`, see [`crate::agent`]) per node inside the node's
    /// netns, pointing it at the object store's socket, and records each. A node whose
    /// recorded agent is alive keeps it; a dead one is replaced. `shim` is passed as
    /// `--cni-shim` (the agent installs it into the node's CNI bin dir).
    pub fn start_agents(&mut self, agent: &Path, shim: Option<&Path>) -> Result<Vec<DaemonRecord>> {
        let nodes = self.manifest.nodes.clone();
        let mut out = Vec::new();
        for node in &nodes {
            let name = format!("node{}/{}", node.index, crate::agent::AGENT_BIN);
            if let Some(old) = self.manifest.agents.iter().find(|a| a.name == name)
                && old.is_alive()
            {
                out.push(old.clone());
                continue;
            }
            let rec = crate::agent::start(&self.layout, node, agent, shim, self.config());
            if let Ok(rec) = &rec {
                self.manifest.agents.retain(|a| a.name != name);
                self.manifest.agents.push(rec.clone());
                self.save()?;
            }
            out.push(rec?);
        }
        Ok(out)
    }

    /// Stops node `i`'s agent (by its recorded pid) and starts it again with the lab's
    /// arguments as `edit` changes them (tests: a bad flag on one node); the manifest
    /// records the new agent.
    pub fn restart_agent_with(
        &mut self,
        i: usize,
        agent: &Path,
        shim: Option<&Path>,
        edit: impl FnOnce(&mut Vec<String>),
    ) -> Result<DaemonRecord> {
        let node = self
            .manifest
            .nodes
            .iter()
            .find(|n| n.index == i)
            .cloned()
            .ok_or_else(|| LabError::Invalid(format!("no node {i} in this lab")))?;
        let name = format!("node{i}/{}", crate::agent::AGENT_BIN);
        if let Some(old) = self.manifest.agents.iter().find(|a| a.name == name) {
            crate::process::stop_daemon(old)?;
        }
        let mut args = crate::agent::agent_args(&self.layout, &node, shim, self.config());
        edit(&mut args);
        let rec = crate::agent::start_with_args(&self.layout, &node, agent, args)?;
        self.manifest.agents.retain(|a| a.name != name);
        self.manifest.agents.push(rec.clone());
        self.save()?;
        Ok(rec)
    }

    /// Kills node `i`'s ovs-vswitchd (SIGKILL, a crash) and starts it again with the same
    /// database, run directory and control socket; the manifest records the new pid.
    /// For restart tests: the node agent and ovn-controller must recover on their own.
    pub fn restart_vswitchd(&mut self, i: usize) -> Result<DaemonRecord> {
        self.restart_vswitchd_with(i, true)
    }

    /// Stops node `i`'s ovs-vswitchd cleanly (SIGTERM) and starts it again: what an
    /// operator's restart does (`zovn lab restart-vswitchd`, the agents'
    /// `--vswitchd-restart-cmd` in the lab). The running instance is found by its
    /// pidfile, so a restart done by another process since this `Lab` was opened counts.
    pub fn restart_vswitchd_clean(&mut self, i: usize) -> Result<DaemonRecord> {
        self.restart_vswitchd_with(i, false)
    }

    fn restart_vswitchd_with(&mut self, i: usize, crash: bool) -> Result<DaemonRecord> {
        let name = format!("node{i}/ovs-vswitchd");
        let node = self.node(i)?.clone();
        let mut old = node
            .daemons
            .iter()
            .find(|d| d.name == name)
            .cloned()
            .ok_or_else(|| LabError::Daemon {
                name: name.clone(),
                program: crate::node::VSWITCHD.into(),
                detail: "not recorded in the manifest".into(),
            })?;
        if let Ok(pid) = crate::process::read_pidfile(&old.pidfile) {
            old.pid = pid;
        }
        if old.is_alive() {
            if crash {
                crate::process::kill9(&old)?;
            } else {
                crate::process::stop_daemon(&old)?;
            }
        }
        let spec =
            crate::node::vswitchd_spec(i, &node.dir, &node.netns, &node.db_remote, node.dpdk);
        let rec = crate::process::start_daemon(&spec)?;
        if let Some(n) = self.manifest.nodes.iter_mut().find(|n| n.index == i) {
            for d in n.daemons.iter_mut().filter(|d| d.name == name) {
                *d = rec.clone();
            }
        }
        self.save()?;
        Ok(rec)
    }

    /// The external network, as recorded (labs brought up before it existed have none).
    pub fn external(&self) -> Option<&ExternalState> {
        self.manifest.external.as_ref()
    }

    /// Starts the external network's server (`<exe> lab responder --echo-source`, TCP
    /// 8080 and UDP 5353, see [`crate::external`]) in the external netns and records it.
    /// `exe` is the `zovn` binary. A recorded server that is still alive is an error; a
    /// dead one is replaced.
    pub fn start_external_server(&mut self, exe: &Path) -> Result<DaemonRecord> {
        let Some(ext) = self.manifest.external.clone() else {
            return Err(LabError::Invalid(format!(
                "the lab in {} has no external network (brought up by an older zovn)",
                self.layout.dir.display()
            )));
        };
        if let Some(old) = &ext.server
            && old.is_alive()
        {
            return Err(LabError::Daemon {
                name: old.name.clone(),
                program: old.program.clone(),
                detail: format!("already running (pid {})", old.pid),
            });
        }
        let rec = external::start_server(&self.layout, exe, &ext)?;
        if let Some(e) = self.manifest.external.as_mut() {
            e.server = Some(rec.clone());
        }
        self.save()?;
        Ok(rec)
    }

    /// The node agents, as recorded.
    pub fn agents(&self) -> &[DaemonRecord] {
        &self.manifest.agents
    }

    /// The pod runtime's records (`pods.json`), if readable.
    pub fn runtime_pods(&self) -> Result<crate::pods::PodsFile> {
        crate::pods::PodsFile::load(&self.layout.pods_file())
    }

    /// The object-store daemon, if one was started.
    pub fn apiserver(&self) -> Option<&DaemonRecord> {
        self.manifest.apiserver.as_ref()
    }

    /// Tears the lab down and removes the state directory.
    pub fn down(mut self) -> Result<()> {
        self.stop_on_drop = false;
        teardown(&self.layout, &self.manifest, true)
    }

    /// Tears the lab down but keeps the state directory (logs, databases); the manifest is
    /// removed so a later `up` starts fresh.
    pub fn down_keep_files(mut self) -> Result<()> {
        self.stop_on_drop = false;
        teardown(&self.layout, &self.manifest, false)
    }

    fn add_netns(&mut self, name: &str) -> Result<()> {
        self.manifest.record_netns(name);
        self.save()?;
        netns::add(name)
    }

    fn save(&self) -> Result<()> {
        self.manifest.save(&self.layout.manifest())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.stop_on_drop
            && let Err(e) = teardown(&self.layout, &self.manifest, true)
        {
            warn!(dir = %self.layout.dir.display(), error = %e, "lab teardown on drop failed");
        }
    }
}

/// Stops everything `manifest` names (daemons by pid after a cmdline check, netns in
/// reverse order, hugepage changes), plus daemons whose pidfiles are in the state dir, then
/// removes the state dir (`purge`) or just the manifest. Continues past errors and returns
/// the first.
fn teardown(layout: &Layout, manifest: &Manifest, purge: bool) -> Result<()> {
    let mut first_err: Option<LabError> = None;
    let mut note = |r: Result<()>| {
        if let Err(e) = r {
            warn!(error = %e, "teardown step failed");
            first_err.get_or_insert(e);
        }
    };
    for d in manifest.daemons_stop_order() {
        note(stop_daemon(d).map(drop));
    }
    // daemons the manifest missed, except the pods' (an object store among them must stop
    // before the pods are torn down: it is the only writer of pods.json)
    let pods_run = layout.pods_run();
    note(stop_unrecorded(layout, |pf| !pf.starts_with(&pods_run)));
    // the pods' responders and testpmds, as pods.json records them
    note(crate::pods::record::teardown(layout));
    // whatever pods.json did not know
    note(stop_unrecorded(layout, |_| true));
    for ns in manifest.netns.iter().rev() {
        note(netns::delete(ns));
    }
    note(hugepages::restore(&manifest.hugepages));
    let r = if purge {
        remove_dir_all(&layout.dir)
    } else {
        remove_file(&layout.manifest())
    };
    note(r);
    info!(dir = %layout.dir.display(), purge, "lab down");
    first_err.map_or(Ok(()), Err)
}

/// Stops daemons with a pidfile under `<dir>/*/run` (those `which` selects) not (or no
/// longer) in the manifest — only if their cmdline names that very pidfile — with a
/// warning for each: a normal teardown stops every daemon it knows before.
fn stop_unrecorded(layout: &Layout, which: impl Fn(&Path) -> bool) -> Result<()> {
    for pf in pidfiles(&layout.dir).into_iter().filter(|p| which(p)) {
        let Ok(pid) = read_pidfile(&pf) else { continue };
        let argv0 = std::fs::read(format!("/proc/{pid}/cmdline"))
            .ok()
            .and_then(|c| {
                c.split(|b| *b == 0)
                    .next()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
            });
        if let Some(program) = argv0
            && cmdline_matches(pid, &program, Some(&pf))
        {
            let outcome = stop_pid(pid, &program, Some(&pf))?;
            if outcome != StopOutcome::NotRunning {
                warn!(pid, %program, pidfile = %pf.display(), ?outcome, "stopped unrecorded daemon");
            }
        }
    }
    Ok(())
}

/// If `layout.dir` holds a manifest (or pidfiles) from a crashed or never-downed lab,
/// tears that down first. Returns whether there was anything.
fn cleanup_stale(layout: &Layout) -> Result<bool> {
    let path = layout.manifest();
    if path.exists() {
        let m = Manifest::load(&path)?;
        if m.is_running() {
            return Err(LabError::Invalid(format!(
                "a lab is already running in {} ({} daemons alive): take it down first",
                layout.dir.display(),
                m.daemons_start_order().len()
            )));
        }
        warn!(dir = %layout.dir.display(), "stale lab state found, cleaning up");
        teardown(layout, &m, true)?;
        return Ok(true);
    }
    if !pidfiles(&layout.dir).is_empty() {
        warn!(dir = %layout.dir.display(), "stale pidfiles without manifest, cleaning up");
        stop_unrecorded(layout, |_| true)?;
        crate::pods::record::teardown(layout)?;
        remove_dir_all(&layout.dir)?;
        return Ok(true);
    }
    Ok(false)
}

fn remove_dir_all(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LabError::io("remove dir", dir, e)),
    }
}

fn remove_file(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LabError::io("remove", path, e)),
    }
}
