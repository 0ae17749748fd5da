//! Per-sandbox state persisted in `--state-dir` (one JSON file per sandbox, written
//! atomically), so a restarted agent can rebuild what it set up.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::attach::pod_iface::PodInterfaceSpec;

/// What the agent set up for one sandbox (container id + ifname).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub container_id: String,
    pub ifname: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub netns: PathBuf,
    pub host_ifname: String,
    pub mac: String,
    pub addresses: Vec<IpNet>,
    pub gateways: Vec<IpAddr>,
    #[serde(default)]
    pub routes: Vec<(IpNet, Option<IpAddr>)>,
    pub mtu: u32,
    /// The port's datapath (`None` in records of older agents: a kernel port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath: Option<crate::datapath::Datapath>,
    /// Why that datapath.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath_reason: Option<String>,
    /// AF_XDP settings the port was attached with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub afxdp: Option<crate::datapath::decide::AfxdpPorts>,
    /// The datapath the port still has to move to (`afxdp.fastStart`: the pod started on
    /// a kernel port; [`crate::attach::promote`] moves it). `None`: where it belongs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promote_to: Option<crate::datapath::Datapath>,
}

impl SandboxRecord {
    /// `container_id/ifname`.
    pub fn key(&self) -> String {
        sandbox_key(&self.container_id, &self.ifname)
    }

    /// `namespace_name`, the OVN logical port name.
    pub fn iface_id(&self) -> String {
        api::names::pod_port(&self.pod_namespace, &self.pod_name)
    }

    /// The pod interface spec (MAC must parse).
    pub fn spec(&self) -> Option<PodInterfaceSpec> {
        Some(PodInterfaceSpec {
            netns_path: self.netns.clone(),
            host_netns_path: None,
            ifname: self.ifname.clone(),
            host_ifname: self.host_ifname.clone(),
            mac: parse_mac(&self.mac)?,
            addresses: self.addresses.clone(),
            gateways: self.gateways.clone(),
            routes: self.routes.clone(),
            mtu: self.mtu,
            tx_checksum_offload_off: true,
            queues: self.afxdp.as_ref().map_or(1, |a| a.queues),
            rps_cpus: self
                .afxdp
                .as_ref()
                .and_then(|a| a.rx_cpus.as_deref())
                .and_then(|l| crate::datapath::cpus::parse_list(l).ok())
                .map(|set| crate::datapath::cpus::to_sysfs_mask(&set)),
        })
    }
}

/// `container_id/ifname`.
pub fn sandbox_key(container_id: &str, ifname: &str) -> String {
    format!("{container_id}/{ifname}")
}

/// `aa:bb:cc:dd:ee:ff` → bytes (the contract's parser, [`api::Mac`]: unicast only).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    s.parse::<api::Mac>().ok().map(api::Mac::octets)
}

/// The records, in memory and (when a directory is configured) on disk.
#[derive(Debug)]
pub struct StateStore {
    dir: Option<PathBuf>,
    records: Mutex<BTreeMap<String, SandboxRecord>>,
}

fn file_name(key: &str) -> String {
    // container ids are [A-Za-z0-9_.-], ifnames have no '/': '/' → '@' is unambiguous
    format!("{}.json", key.replace('/', "@"))
}

impl StateStore {
    /// Opens (creating) `dir` and loads every record; unreadable files are skipped with a
    /// warning.
    pub fn open(dir: Option<&Path>) -> std::io::Result<StateStore> {
        let mut records = BTreeMap::new();
        if let Some(d) = dir {
            std::fs::create_dir_all(d)?;
            for entry in std::fs::read_dir(d)? {
                let p = entry?.path();
                if p.extension().is_none_or(|e| e != "json") {
                    continue;
                }
                match std::fs::read(&p).map_err(|e| e.to_string()).and_then(|b| {
                    serde_json::from_slice::<SandboxRecord>(&b).map_err(|e| e.to_string())
                }) {
                    Ok(r) => {
                        records.insert(r.key(), r);
                    }
                    Err(e) => {
                        tracing::warn!(file = %p.display(), error = %e, "skipping state file")
                    }
                }
            }
        }
        Ok(StateStore {
            dir: dir.map(Path::to_path_buf),
            records: Mutex::new(records),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, SandboxRecord>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn all(&self) -> Vec<SandboxRecord> {
        self.lock().values().cloned().collect()
    }

    pub fn get(&self, container_id: &str, ifname: &str) -> Option<SandboxRecord> {
        self.lock().get(&sandbox_key(container_id, ifname)).cloned()
    }

    /// Stores (and persists) a record.
    pub fn put(&self, r: &SandboxRecord) -> std::io::Result<()> {
        if let Some(d) = &self.dir {
            write_record(d, r)?;
        }
        self.lock().insert(r.key(), r.clone());
        Ok(())
    }

    /// [`StateStore::put`] with the file write (and its fsync) on a blocking thread, so
    /// concurrent ADDs do not stall the runtime's worker threads.
    pub async fn put_async(&self, r: &SandboxRecord) -> std::io::Result<()> {
        if let Some(d) = self.dir.clone() {
            let rec = r.clone();
            tokio::task::spawn_blocking(move || write_record(&d, &rec))
                .await
                .map_err(std::io::Error::other)??;
        }
        self.lock().insert(r.key(), r.clone());
        Ok(())
    }

    /// Drops a record (missing is fine).
    pub fn remove(&self, container_id: &str, ifname: &str) -> std::io::Result<()> {
        let key = sandbox_key(container_id, ifname);
        if let Some(d) = &self.dir {
            match std::fs::remove_file(d.join(file_name(&key))) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        self.lock().remove(&key);
        Ok(())
    }
}

/// Writes a record's file atomically; it survives a crash once written (the agent's GC
/// and DEL trust it after a restart).
fn write_record(d: &Path, r: &SandboxRecord) -> std::io::Result<()> {
    let path = d.join(file_name(&r.key()));
    let body = serde_json::to_vec_pretty(r).map_err(std::io::Error::other)?;
    hostio::write_atomic(&path, &body, 0o644, hostio::Durability::FileAndDir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(cid: &str) -> SandboxRecord {
        SandboxRecord {
            container_id: cid.into(),
            ifname: "eth0".into(),
            pod_namespace: "demo".into(),
            pod_name: "web".into(),
            netns: "/var/run/netns/x".into(),
            host_ifname: "abc_h".into(),
            mac: "0a:58:0a:10:00:05".into(),
            addresses: vec!["10.16.0.5/16".parse().unwrap()],
            gateways: vec!["10.16.0.1".parse().unwrap()],
            routes: vec![],
            mtu: 1400,
            datapath: None,
            datapath_reason: None,
            afxdp: None,
            promote_to: None,
        }
    }

    #[test]
    fn persists_and_reloads() {
        let d = tempfile::tempdir().unwrap();
        let s = StateStore::open(Some(d.path())).unwrap();
        s.put(&rec("c1")).unwrap();
        s.put(&rec("c2")).unwrap();
        s.remove("c2", "eth0").unwrap();
        s.remove("c3", "eth0").unwrap();
        std::fs::write(d.path().join("junk.json"), b"{").unwrap();
        let s2 = StateStore::open(Some(d.path())).unwrap();
        assert_eq!(s2.all(), vec![rec("c1")]);
        assert_eq!(s2.get("c1", "eth0").unwrap().iface_id(), "demo_web");
        assert_eq!(
            rec("c1").spec().unwrap().mac,
            [0x0a, 0x58, 0x0a, 0x10, 0, 5]
        );
        assert_eq!(parse_mac("0a:58"), None);
        assert_eq!(parse_mac("0a:58:0a:10:00:05:01"), None);
    }
}
