//! `<dir>/pods.json`: what the pod runtime created for each pod (netns, container id,
//! responder) and what it learnt (addresses, readiness). Written atomically by the
//! object-store daemon after every change, recorded *before* a netns or process is
//! created, read by `down` and the stale cleanup ([`teardown`]) and by `zovn lab
//! exec/probe`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::warn;

use crate::error::{LabError, Result};
use crate::netns;
use crate::process::{DaemonRecord, stop_daemon};
use crate::state::Layout;

/// Format version of `pods.json`.
pub const PODS_FILE_VERSION: u32 = 1;

/// A transport protocol of a container port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
}

/// One port the pod's responder serves: `80/tcp`, `53/udp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PortSpec {
    pub port: u16,
    pub proto: Proto,
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = match self.proto {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        };
        write!(f, "{}/{p}", self.port)
    }
}

/// A port that is not `PORT[/tcp|/udp]`; `spec`: as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortSpecError {
    #[error("port {spec:?}: expected 1-65535[/tcp|/udp]")]
    Number { spec: String },
    #[error("port {spec:?}: protocol {proto:?} is not tcp or udp")]
    Protocol { spec: String, proto: String },
}

impl FromStr for PortSpec {
    type Err = PortSpecError;

    /// `80`, `80/tcp`, `53/udp` (case-insensitive protocol).
    fn from_str(s: &str) -> Result<PortSpec, PortSpecError> {
        let (port, proto) = s.trim().split_once('/').unwrap_or((s.trim(), "tcp"));
        let port: u16 =
            port.parse()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| PortSpecError::Number {
                    spec: s.to_string(),
                })?;
        let proto = match proto.to_ascii_lowercase().as_str() {
            "tcp" => Proto::Tcp,
            "udp" => Proto::Udp,
            other => {
                return Err(PortSpecError::Protocol {
                    spec: s.to_string(),
                    proto: other.to_string(),
                });
            }
        };
        Ok(PortSpec { port, proto })
    }
}

/// `80/tcp,53/udp` → ports (duplicates dropped, sorted).
pub fn parse_ports(s: &str) -> Result<Vec<PortSpec>, PortSpecError> {
    let mut v: Vec<PortSpec> = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    v.sort();
    v.dedup();
    Ok(v)
}

/// Ports as `80/tcp,53/udp`.
pub fn format_ports(ports: &[PortSpec]) -> String {
    ports
        .iter()
        .map(PortSpec::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Where a pod is in its life in the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum PodPhase {
    /// Waiting for the CNI config, or CNI ADD not (yet) successful.
    #[default]
    Pending,
    /// CNI ADD succeeded and the responder (if any) runs.
    Running,
    /// Deleted from the store: DEL, responder stop and netns removal under way.
    Terminating,
}

/// One pod as the runtime set it up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodRecord {
    /// `namespace/name`.
    pub key: String,
    pub uid: String,
    /// The Node name (`<prefix>-node<i>`) and the lab node index.
    pub node: String,
    pub node_index: usize,
    /// The pod's network namespace (`/var/run/netns/<netns>`).
    pub netns: String,
    /// CNI_CONTAINERID.
    pub container_id: String,
    /// From the containers' `ports`.
    pub ports: Vec<PortSpec>,
    pub phase: PodPhase,
    /// CNI ADD succeeded (and the responder runs).
    pub ready: bool,
    /// Addresses from the CNI result (with prefix length).
    #[serde(default)]
    pub ips: Vec<String>,
    #[serde(default)]
    pub mac: Option<String>,
    /// `kernel/veth`, or `vhost-user` when the result names a socket.
    #[serde(default)]
    pub datapath: Option<String>,
    /// Why the pod is not ready (the last CNI error, or what it waits for).
    #[serde(default)]
    pub message: Option<String>,
    /// The CNI result as printed by the plugin (passed back as `prevResult` on DEL).
    #[serde(default)]
    pub result: Option<Value>,
    /// ADD attempts so far.
    #[serde(default)]
    pub attempts: u32,
    /// The pod's responder process.
    #[serde(default)]
    pub responder: Option<DaemonRecord>,
}

/// The content of `pods.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodsFile {
    pub version: u32,
    /// By `namespace/name`.
    pub pods: BTreeMap<String, PodRecord>,
}

impl Default for PodsFile {
    fn default() -> Self {
        PodsFile {
            version: PODS_FILE_VERSION,
            pods: BTreeMap::new(),
        }
    }
}

impl PodsFile {
    /// Reads `path`; a missing file is an empty record.
    pub fn load(path: &Path) -> Result<PodsFile> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PodsFile::default()),
            Err(e) => return Err(LabError::io("read", path, e)),
        };
        let f: PodsFile = serde_json::from_str(&text).map_err(|e| LabError::Manifest {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        if f.version != PODS_FILE_VERSION {
            return Err(LabError::Manifest {
                path: path.to_path_buf(),
                detail: format!("version {} (expected {PODS_FILE_VERSION})", f.version),
            });
        }
        Ok(f)
    }

    /// Writes `path` atomically (temp file + rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(|e| LabError::Manifest {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        hostio::write_atomic(path, text.as_bytes(), 0o644, hostio::Durability::Volatile)
            .map_err(|e| LabError::io("write", path, e))
    }

    /// The record of pod `key` (`namespace/name`).
    pub fn pod(&self, key: &str) -> Option<&PodRecord> {
        self.pods.get(key)
    }
}

/// Stops every recorded responder and deletes every recorded pod netns (no CNI DEL: the
/// agents and nodes go away with the lab). Called by `down` and the stale cleanup after
/// the object store (the only writer of `pods.json`) has stopped. Continues past errors
/// and returns the first.
pub fn teardown(layout: &Layout) -> Result<()> {
    let path = layout.pods_file();
    let file = PodsFile::load(&path)?;
    let mut first: Option<LabError> = None;
    for rec in file.pods.values() {
        if let Some(r) = &rec.responder
            && let Err(e) = stop_daemon(r)
        {
            warn!(pod = %rec.key, error = %e, "stopping the responder failed");
            first.get_or_insert(e);
        }
        if let Err(e) = super::vhost_pod::stop(layout, &rec.netns) {
            warn!(pod = %rec.key, error = %e, "stopping the vhost-user testpmd failed");
            first.get_or_insert(e);
        }
        if let Err(e) = super::vm_pod::stop(layout, &rec.netns) {
            warn!(pod = %rec.key, error = %e, "stopping the QEMU guest failed");
            first.get_or_insert(e);
        }
        if let Err(e) = netns::delete(&rec.netns) {
            warn!(pod = %rec.key, netns = %rec.netns, error = %e, "deleting the pod netns failed");
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse_and_print() {
        let p = parse_ports("80/tcp, 53/UDP,53/tcp,80").expect("ports");
        assert_eq!(format_ports(&p), "53/tcp,53/udp,80/tcp");
        assert!(parse_ports("0/tcp").is_err());
        assert_eq!(
            parse_ports("80/sctp").unwrap_err().to_string(),
            "port \"80/sctp\": protocol \"sctp\" is not tcp or udp"
        );
        assert!(parse_ports("x").is_err());
        assert_eq!(parse_ports("").expect("empty"), vec![]);
    }

    #[test]
    fn pods_file_round_trip_and_missing() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("pods.json");
        assert_eq!(PodsFile::load(&path).expect("missing"), PodsFile::default());
        let mut f = PodsFile::default();
        f.pods.insert(
            "demo/web".into(),
            PodRecord {
                key: "demo/web".into(),
                uid: "u".into(),
                node: "lab-node1".into(),
                node_index: 1,
                netns: "labp-1234abcd".into(),
                container_id: "c".repeat(64),
                ports: vec![PortSpec {
                    port: 80,
                    proto: Proto::Tcp,
                }],
                phase: PodPhase::Running,
                ready: true,
                ips: vec!["10.16.0.10/16".into()],
                mac: None,
                datapath: Some("kernel/veth".into()),
                message: None,
                result: None,
                attempts: 1,
                responder: None,
            },
        );
        f.save(&path).expect("save");
        assert_eq!(PodsFile::load(&path).expect("load"), f);
    }
}
