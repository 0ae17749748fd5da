//! The lab's private state directory and its `lab.json` manifest.
//!
//! Layout: `<dir>/lab.json`, `<dir>/central/{run,db,log}`, `<dir>/node<i>/{run,db,log,etc}`,
//! `<dir>/hugepages` (only if the lab mounted hugetlbfs), and the object store's
//! `<dir>/run/{lab-api.sock,lab-apiserver.pid}`, `<dir>/log/lab-apiserver.log`,
//! `<dir>/store.json`; the node agents' `<dir>/node<i>/{cni/net.d,cni/bin,agent}`,
//! `<dir>/node<i>/run/cni.sock`, `<dir>/node<i>/log/agent.log`; the pod runtime's
//! `<dir>/pods.json` and `<dir>/pods/{run,log}`; the external server's
//! `<dir>/run/external-server.pid`, `<dir>/log/external-server.log`. The manifest records
//! everything the lab created — daemons (pid, program, pidfile), network namespaces,
//! hugepage changes, the external network — and is saved after every step, so `down` (or
//! the stale-state cleanup of the next `up`) removes exactly that.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::central::CentralState;
use crate::config::LabConfig;
use crate::error::{LabError, Result};
use crate::hugepages::HugepageChange;
use crate::process::DaemonRecord;

/// Manifest format version.
pub const MANIFEST_VERSION: u32 = 1;

/// Paths inside a lab's state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub dir: PathBuf,
}

impl Layout {
    pub fn new(dir: impl Into<PathBuf>) -> Layout {
        Layout { dir: dir.into() }
    }
    pub fn manifest(&self) -> PathBuf {
        self.dir.join("lab.json")
    }
    pub fn central(&self) -> PathBuf {
        self.dir.join("central")
    }
    pub fn node(&self, i: usize) -> PathBuf {
        self.dir.join(format!("node{i}"))
    }
    pub fn hugepages(&self) -> PathBuf {
        self.dir.join("hugepages")
    }
    /// The object store's socket.
    pub fn api_socket(&self) -> PathBuf {
        self.dir.join("run/lab-api.sock")
    }
    /// The object store daemon's pidfile.
    pub fn api_pidfile(&self) -> PathBuf {
        self.dir.join("run/lab-apiserver.pid")
    }
    /// The object store daemon's log (its stdout and stderr).
    pub fn api_log(&self) -> PathBuf {
        self.dir.join("log/lab-apiserver.log")
    }
    /// The object store's saved objects.
    pub fn store_file(&self) -> PathBuf {
        self.dir.join("store.json")
    }
    /// The pod runtime's record of every pod it set up (netns, responder): `pods.json`,
    /// written only by the object-store daemon, read by `down` and the stale cleanup.
    pub fn pods_file(&self) -> PathBuf {
        self.dir.join("pods.json")
    }
    /// Pidfiles of the pods' responders (`<dir>/pods/run/<netns>.pid`).
    pub fn pods_run(&self) -> PathBuf {
        self.dir.join("pods/run")
    }
    /// Logs of the pods' responders.
    pub fn pods_log(&self) -> PathBuf {
        self.dir.join("pods/log")
    }
    /// Node `i`'s CNI config directory (the agent writes its conflist there).
    pub fn node_cni_conf(&self, i: usize) -> PathBuf {
        self.node(i).join("cni/net.d")
    }
    /// Node `i`'s CNI binary directory (the agent installs the shim there).
    pub fn node_cni_bin(&self, i: usize) -> PathBuf {
        self.node(i).join("cni/bin")
    }
    /// Node `i`'s CNI socket, served by its agent.
    pub fn node_cni_socket(&self, i: usize) -> PathBuf {
        self.node(i).join("run/cni.sock")
    }
    /// Node `i`'s agent state directory.
    pub fn node_agent_state(&self, i: usize) -> PathBuf {
        self.node(i).join("agent")
    }
    /// Node `i`'s agent log.
    pub fn node_agent_log(&self, i: usize) -> PathBuf {
        self.node(i).join("log/agent.log")
    }
    /// Creates `<dir>/{run,log}`.
    pub fn create_api_dirs(&self) -> Result<()> {
        for sub in ["run", "log"] {
            let d = self.dir.join(sub);
            std::fs::create_dir_all(&d).map_err(|e| LabError::io("create dir", &d, e))?;
        }
        Ok(())
    }
    /// Creates `node<i>/{run,db,log,etc}`.
    pub fn create_node_dirs(&self, i: usize) -> Result<PathBuf> {
        let n = self.node(i);
        for sub in ["run", "db", "log", "etc"] {
            let d = n.join(sub);
            std::fs::create_dir_all(&d).map_err(|e| LabError::io("create dir", &d, e))?;
        }
        Ok(n)
    }
}

/// One simulated node as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    /// 1-based.
    pub index: usize,
    /// Chassis name (`external_ids:system-id`).
    pub system_id: String,
    pub netns: String,
    pub dir: PathBuf,
    /// `unix:<node>/run/db.sock` — the node's Open_vSwitch database.
    pub db_remote: String,
    /// Tunnel endpoint IP on br-phy.
    pub encap_ip: String,
    /// Runs the DPDK build of ovs-vswitchd.
    pub dpdk: bool,
    /// The datapath its agent is configured with (`None`: no datapath config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath: Option<String>,
    /// Started daemons in start order (ovsdb-server, ovs-vswitchd, ovn-controller).
    pub daemons: Vec<DaemonRecord>,
}

/// A test pod attached to a node's br-int.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodState {
    pub name: String,
    pub node: usize,
    pub netns: String,
    /// Interface inside the pod netns.
    pub ifname: String,
    /// br-int port in the node netns.
    pub host_veth: String,
    /// `external_ids:iface-id` (the LSP name).
    pub iface_id: String,
    pub mac: String,
    pub ip_cidr: String,
}

/// The lab's external network ([`crate::external`]) as recorded in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalState {
    /// The external host's netns.
    pub netns: String,
    pub host_v4: String,
    pub host_v6: String,
    pub router_v4: String,
    pub router_v6: String,
    pub underlay_router_v4: String,
    pub underlay_router_v6: String,
    /// The server answering TCP [`crate::external::TCP_PORT`] and UDP [`crate::external::UDP_PORT`], once started.
    #[serde(default)]
    pub server: Option<DaemonRecord>,
}

/// Start-up time of each step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    pub stale_cleanup: Option<Duration>,
    pub hugepages: Option<Duration>,
    pub central: Duration,
    pub underlay: Duration,
    /// The external network (netns, router).
    #[serde(default)]
    pub external: Option<Duration>,
    /// Per node, in order.
    pub nodes: Vec<Duration>,
    /// Waiting for every chassis (with Encap) in the SB.
    pub chassis: Duration,
    pub total: Duration,
}

/// Everything a lab created, saved as `<dir>/lab.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub config: LabConfig,
    pub central: Option<CentralState>,
    pub nodes: Vec<NodeState>,
    pub pods: Vec<PodState>,
    /// Network namespaces in creation order (recorded before creation).
    pub netns: Vec<String>,
    pub hugepages: HugepageChange,
    pub timings: Timings,
    /// Set once `up` completed.
    pub complete: bool,
    /// The object store daemon (`zovn lab serve`), once started.
    #[serde(default)]
    pub apiserver: Option<DaemonRecord>,
    /// The node agents (`zstack-ovnkube-node`, one per node, in node order), once started.
    #[serde(default)]
    pub agents: Vec<DaemonRecord>,
    /// The external network and its server ([`crate::external`]), once created.
    #[serde(default)]
    pub external: Option<ExternalState>,
}

impl Manifest {
    /// An empty manifest for `config`.
    pub fn new(config: LabConfig) -> Manifest {
        Manifest {
            version: MANIFEST_VERSION,
            config,
            central: None,
            nodes: Vec::new(),
            pods: Vec::new(),
            netns: Vec::new(),
            hugepages: HugepageChange::default(),
            timings: Timings::default(),
            complete: false,
            apiserver: None,
            agents: Vec::new(),
            external: None,
        }
    }

    /// Every recorded daemon, in stop order: the external server, the object store (and
    /// its pod runtime), the node agents, nodes last-to-first (ovn-controller,
    /// ovs-vswitchd, ovsdb-server), then central (northd, NB, SB).
    pub fn daemons_stop_order(&self) -> Vec<&DaemonRecord> {
        let mut v: Vec<&DaemonRecord> = self.external_server().into_iter().collect();
        v.extend(self.apiserver.iter());
        v.extend(self.agents.iter().rev());
        for n in self.nodes.iter().rev() {
            v.extend(n.daemons.iter().rev());
        }
        if let Some(c) = &self.central {
            v.extend(c.northd.iter());
            v.extend(c.nb.iter().chain(&c.sb).map(|m| &m.daemon));
        }
        v
    }

    /// Every recorded daemon, in start order: central (NB, SB, northd), each node's
    /// ovsdb-server, ovs-vswitchd, ovn-controller, then the object store, then the agents,
    /// then the external server.
    pub fn daemons_start_order(&self) -> Vec<&DaemonRecord> {
        let mut v = self.ovn_daemons();
        v.extend(self.apiserver.iter());
        v.extend(self.agents.iter());
        v.extend(self.external_server());
        v
    }

    /// The external network's server, if started.
    pub fn external_server(&self) -> Option<&DaemonRecord> {
        self.external.as_ref().and_then(|e| e.server.as_ref())
    }

    /// The OVN/OVS daemons (start order), without the object store.
    pub fn ovn_daemons(&self) -> Vec<&DaemonRecord> {
        let mut v: Vec<&DaemonRecord> = Vec::new();
        if let Some(c) = &self.central {
            v.extend(c.nb.iter().chain(&c.sb).map(|m| &m.daemon));
            v.extend(c.northd.iter());
        }
        for n in &self.nodes {
            v.extend(n.daemons.iter());
        }
        v
    }

    /// True if `up` completed and every recorded OVN/OVS daemon is still alive: a running
    /// lab, not stale state. (A dead object store or agent alone does not make a lab stale:
    /// `zovn lab up` starts them again.)
    pub fn is_running(&self) -> bool {
        self.complete && self.ovn_daemons().iter().all(|d| d.is_alive())
    }

    /// True if the object store daemon is recorded and alive.
    pub fn apiserver_alive(&self) -> bool {
        self.apiserver.as_ref().is_some_and(DaemonRecord::is_alive)
    }

    /// Records a netns (before it is created); no duplicates.
    pub fn record_netns(&mut self, name: &str) {
        if !self.netns.iter().any(|n| n == name) {
            self.netns.push(name.to_string());
        }
    }

    /// Reads `path`.
    pub fn load(path: &Path) -> Result<Manifest> {
        let text = std::fs::read_to_string(path).map_err(|e| LabError::io("read", path, e))?;
        let m: Manifest = serde_json::from_str(&text).map_err(|e| LabError::Manifest {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        if m.version != MANIFEST_VERSION {
            return Err(LabError::Manifest {
                path: path.to_path_buf(),
                detail: format!("version {} (expected {MANIFEST_VERSION})", m.version),
            });
        }
        Ok(m)
    }

    /// Writes `path` atomically (temp file + rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(|e| LabError::Manifest {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        // rewritten at every change of the lab: a crash may lose the last one
        hostio::write_atomic(path, text.as_bytes(), 0o644, hostio::Durability::Volatile)
            .map_err(|e| LabError::io("write", path, e))
    }
}

/// Pidfiles (`*.pid`) under `<dir>/run/` and `<dir>/*/run/`: daemons a crashed run may
/// have started without recording them.
pub fn pidfiles(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    let subdirs = rd.filter_map(|e| e.ok()).map(|e| e.path());
    for d in std::iter::once(dir.to_path_buf()).chain(subdirs) {
        let run = d.join("run");
        if let Ok(files) = std::fs::read_dir(&run) {
            out.extend(
                files
                    .filter_map(|f| f.ok())
                    .map(|f| f.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "pid")),
            );
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Dpdk, Encap};

    fn sample() -> Manifest {
        let mut cfg = LabConfig::new("/tmp/lab", "lab");
        cfg.nodes = 2;
        cfg.dpdk = Dpdk::Nodes(vec![2]);
        cfg.encap = Encap::Vxlan;
        let mut m = Manifest::new(cfg);
        let rec = |name: &str, pid| DaemonRecord {
            name: name.into(),
            program: "ovs-vswitchd".into(),
            pid,
            pidfile: format!("/tmp/lab/{name}.pid").into(),
            unixctl: None,
            log_file: "/tmp/lab/x.log".into(),
            netns: Some("labn1".into()),
            ident: None,
        };
        m.nodes.push(NodeState {
            index: 1,
            system_id: "lab-node1".into(),
            netns: "labn1".into(),
            dir: "/tmp/lab/node1".into(),
            db_remote: "unix:/tmp/lab/node1/run/db.sock".into(),
            encap_ip: "172.16.0.1".into(),
            dpdk: false,
            datapath: None,
            daemons: vec![rec("a", 10), rec("b", 11)],
        });
        m.record_netns("labul");
        m.record_netns("labn1");
        m.record_netns("labn1");
        m.hugepages.pages = Some((0, 512));
        m.timings.nodes.push(Duration::from_millis(250));
        m
    }

    #[test]
    fn manifest_round_trip() {
        let dir = std::env::temp_dir().join(format!("lab-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("lab.json");
        let m = sample();
        m.save(&path).expect("save");
        let back = Manifest::load(&path).expect("load");
        assert_eq!(back, m);
        assert_eq!(back.netns, vec!["labul", "labn1"]);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn stop_order_is_reverse_start_order() {
        let m = sample();
        let names: Vec<&str> = m
            .daemons_stop_order()
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(names, vec!["b", "a"]);
        let start: Vec<&str> = m
            .daemons_start_order()
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(start, vec!["a", "b"]);
        assert!(!m.is_running(), "incomplete manifest is never running");
    }

    #[test]
    fn object_store_stops_first_and_does_not_make_a_lab_stale() {
        let mut m = sample();
        m.apiserver = Some(DaemonRecord {
            name: "lab-apiserver".into(),
            program: "zovn".into(),
            pid: 12,
            pidfile: "/tmp/lab/run/lab-apiserver.pid".into(),
            unixctl: None,
            log_file: "/tmp/lab/log/lab-apiserver.log".into(),
            netns: None,
            ident: None,
        });
        let names = |v: Vec<&DaemonRecord>| v.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(m.daemons_stop_order()), ["lab-apiserver", "b", "a"]);
        assert_eq!(names(m.daemons_start_order()), ["a", "b", "lab-apiserver"]);
        assert_eq!(names(m.ovn_daemons()), ["a", "b"]);
        assert!(!m.apiserver_alive());
        // an older manifest without the field still loads
        let mut v = serde_json::to_value(&m).expect("encode");
        v.as_object_mut().expect("object").remove("apiserver");
        let old: Manifest = serde_json::from_value(v).expect("decode");
        assert!(old.apiserver.is_none());
    }

    #[test]
    fn pidfiles_include_the_lab_run_dir() {
        let dir = std::env::temp_dir().join(format!("lab-pidfiles-{}", std::process::id()));
        for d in ["run", "node1/run"] {
            std::fs::create_dir_all(dir.join(d)).expect("dir");
        }
        std::fs::write(dir.join("run/lab-apiserver.pid"), "1\n").expect("pid");
        std::fs::write(dir.join("node1/run/ovsdb-server.pid"), "1\n").expect("pid");
        let found = pidfiles(&dir);
        std::fs::remove_dir_all(&dir).expect("cleanup");
        assert_eq!(
            found,
            [
                dir.join("node1/run/ovsdb-server.pid"),
                dir.join("run/lab-apiserver.pid")
            ]
        );
    }

    #[test]
    fn layout_paths() {
        let l = Layout::new("/tmp/lab");
        assert_eq!(l.manifest(), Path::new("/tmp/lab/lab.json"));
        assert_eq!(l.node(3), Path::new("/tmp/lab/node3"));
        assert_eq!(l.central(), Path::new("/tmp/lab/central"));
        assert_eq!(l.api_socket(), Path::new("/tmp/lab/run/lab-api.sock"));
        assert_eq!(l.store_file(), Path::new("/tmp/lab/store.json"));
    }
}
