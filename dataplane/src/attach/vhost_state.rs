//! The vhost-user interfaces' records ([`VhostRecord`], [`VhostPorts`]): one JSON file
//! per interface under `<root>/.records/` (host only: the per-interface directories are
//! what pods see), loaded at start. The attachment itself is [`crate::attach::vhost`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use vhost::config::DEFAULT_SOCKET_ROOT;
use vhost::{SocketLayout, VhostUserConfig};

use crate::attach::state::{SandboxRecord, sandbox_key};

/// Environment variable overriding the agent's socket root.
pub const VHOST_DIR_ENV: &str = "ZSTACK_OVN_VHOST_DIR";
/// Records directory under the root.
const RECORDS_DIR: &str = ".records";

/// What the agent set up for one vhost-user interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VhostRecord {
    /// The pod side, as for a veth (`host_ifname` is the OVS port name).
    pub sandbox: SandboxRecord,
    pub config: VhostUserConfig,
    /// The owner name the path derives from (VMI name, annotation or pod name).
    pub owner: String,
    /// The host root the directory is under.
    pub root: PathBuf,
    /// The pod's `emptyDir` the directory is bind-mounted onto.
    pub volume_target: Option<PathBuf>,
    /// The CNI device-info file written.
    pub device_info_file: Option<PathBuf>,
    /// A Multus secondary network's NAD (`<ns>/<name>`): the port binds to the pod's LSP
    /// on that network ([`api::names::network_port`]); `None`: the primary network.
    #[serde(default)]
    pub network: Option<String>,
}

impl VhostRecord {
    /// The socket layout (recomputed: it is a pure function of the record).
    pub fn layout(&self) -> Result<SocketLayout, vhost::LayoutError> {
        SocketLayout::new(
            &self.root,
            &self.sandbox.pod_namespace,
            &self.owner,
            &self.sandbox.ifname,
            self.config.pod_socket_dir.as_deref(),
        )
    }

    pub fn key(&self) -> String {
        self.sandbox.key()
    }

    /// The logical switch port the OVS port binds to (`external_ids:iface-id`).
    pub fn iface_id(&self) -> String {
        match &self.network {
            Some(nad) => api::names::network_port(&self.sandbox.iface_id(), nad),
            None => self.sandbox.iface_id(),
        }
    }
}

/// The vhost-user records of this agent (see the module docs).
#[derive(Debug)]
pub struct VhostPorts {
    root: PathBuf,
    records: Mutex<BTreeMap<String, VhostRecord>>,
}

fn record_file(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{}.json", key.replace('/', "@")))
}

impl VhostPorts {
    /// Records under the root: [`VHOST_DIR_ENV`], else `$OVS_RUNDIR/zstack-vhost` (next to
    /// the OVS it serves: each lab node has its own), else [`DEFAULT_SOCKET_ROOT`].
    pub fn from_env() -> VhostPorts {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let root = var(VHOST_DIR_ENV)
            .or_else(|| var("OVS_RUNDIR").map(|d| d.join("zstack-vhost")))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET_ROOT));
        VhostPorts::open(root)
    }

    /// Loads the records of `root` (unreadable ones are skipped with a warning).
    pub fn open(root: PathBuf) -> VhostPorts {
        let mut records = BTreeMap::new();
        if let Ok(entries) = std::fs::read_dir(root.join(RECORDS_DIR)) {
            for p in entries.filter_map(|e| e.ok().map(|e| e.path())) {
                if p.extension().is_none_or(|e| e != "json") {
                    continue;
                }
                match std::fs::read(&p).map_err(|e| e.to_string()).and_then(|b| {
                    serde_json::from_slice::<VhostRecord>(&b).map_err(|e| e.to_string())
                }) {
                    Ok(r) => {
                        records.insert(r.key(), r);
                    }
                    Err(e) => {
                        tracing::warn!(file = %p.display(), error = %e, "skipping vhost record")
                    }
                }
            }
        }
        VhostPorts {
            root,
            records: Mutex::new(records),
        }
    }

    /// The default host root of the socket directories.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, VhostRecord>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, container_id: &str, ifname: &str) -> Option<VhostRecord> {
        self.lock().get(&sandbox_key(container_id, ifname)).cloned()
    }

    pub fn all(&self) -> Vec<VhostRecord> {
        self.lock().values().cloned().collect()
    }

    pub fn put(&self, r: &VhostRecord) -> std::io::Result<()> {
        let dir = self.root.join(RECORDS_DIR);
        std::fs::create_dir_all(&dir)?;
        let path = record_file(&dir, &r.key());
        let body = serde_json::to_vec_pretty(r).map_err(std::io::Error::other)?;
        hostio::write_atomic(&path, &body, 0o644, hostio::Durability::FileAndDir)?;
        self.lock().insert(r.key(), r.clone());
        Ok(())
    }

    pub fn remove(&self, key: &str) -> std::io::Result<()> {
        match std::fs::remove_file(record_file(&self.root.join(RECORDS_DIR), key)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        self.lock().remove(key);
        Ok(())
    }
}
