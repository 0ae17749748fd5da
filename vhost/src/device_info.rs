//! Network Plumbing WG device-info (spec 1.1.0, §3.1.5 vhost-user): what Multus copies
//! into the `k8s.v1.cni.cncf.io/network-status` entry of the interface, and what
//! KubeVirt's vhost-user binding reads to point QEMU at the socket.
//!
//! Mode `server`: the workload (QEMU, testpmd) creates the socket and the host (OVS
//! `dpdkvhostuserclient`) connects to it, so an ovs-vswitchd restart reconnects without
//! the VM noticing more than a link flap.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The spec version written.
pub const VERSION: &str = "1.1.0";
/// `runtimeConfig` key (and capability) carrying the CNI device-info file path.
pub const DEVICE_INFO_FILE_KEY: &str = "CNIDeviceInfoFile";
/// The pod annotation Multus writes.
pub const NETWORK_STATUS_ANNOTATION: &str = api::keys::NETWORK_STATUS;

/// `vhost-user` block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VhostUserInfo {
    pub mode: String,
    pub path: String,
}

/// A device-info map for a vhost-user interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    #[serde(rename = "type")]
    pub kind: String,
    pub version: String,
    #[serde(rename = "vhost-user")]
    pub vhost_user: VhostUserInfo,
}

impl DeviceInfo {
    /// Server mode (the workload owns the socket) at `path` (the workload's view).
    pub fn server(path: &Path) -> DeviceInfo {
        DeviceInfo {
            kind: "vhost-user".into(),
            version: VERSION.into(),
            vhost_user: VhostUserInfo {
                mode: "server".into(),
                path: path.display().to_string(),
            },
        }
    }

    pub fn to_value(&self) -> Value {
        // plain strings: serialisation cannot fail
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Writes the CNI device-info file (spec §4.2, §5.1.2): creates the parent
    /// directory, writes atomically. An existing file written by a device plugin is kept.
    pub fn write_file(&self, path: &Path) -> std::io::Result<()> {
        if path.exists() {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // QEMU / KubeVirt read it: whole, and still there after a crash
        hostio::write_atomic(
            path,
            self.to_value().to_string().as_bytes(),
            0o644,
            hostio::Durability::FileAndDir,
        )
    }
}

/// The `network-status` entry Multus would write for this interface.
pub fn network_status_entry(
    network: &str,
    ifname: &str,
    ips: &[String],
    mac: &str,
    default: bool,
    info: &DeviceInfo,
) -> Value {
    json!({
        "name": network,
        "interface": ifname,
        "ips": ips,
        "mac": mac,
        "default": default,
        "device-info": info.to_value(),
    })
}

/// The device-info file named in a network config's `runtimeConfig`, if any.
pub fn device_info_file(runtime_config: Option<&Value>) -> Option<&str> {
    runtime_config?
        .get(DEVICE_INFO_FILE_KEY)?
        .as_str()
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_shape() {
        let d = DeviceInfo::server(Path::new("/var/run/kubevirt/sockets/eth0.sock"));
        assert_eq!(
            d.to_value(),
            json!({"type": "vhost-user", "version": "1.1.0",
                "vhost-user": {"mode": "server", "path": "/var/run/kubevirt/sockets/eth0.sock"}})
        );
        let back: DeviceInfo = serde_json::from_value(d.to_value()).expect("round trip");
        assert_eq!(back, d);
        let e = network_status_entry(
            "vms/vhost-net",
            "eth0",
            &["10.0.0.5".into()],
            "0a:58:0a:00:00:05",
            true,
            &d,
        );
        assert_eq!(e["device-info"]["vhost-user"]["mode"], "server");
        assert_eq!(e["interface"], "eth0");
    }

    #[test]
    fn device_info_file_written_once() {
        let dir = tempfile::tempdir().expect("dir");
        let f = dir.path().join("devinfo/cni/net1-abc-eth0.json");
        let d = DeviceInfo::server(Path::new("/s/eth0.sock"));
        d.write_file(&f).expect("write");
        let read: DeviceInfo =
            serde_json::from_slice(&std::fs::read(&f).expect("read")).expect("json");
        assert_eq!(read, d);
        // a file already there (from a device plugin) is kept
        DeviceInfo::server(Path::new("/other"))
            .write_file(&f)
            .expect("keep");
        let again: DeviceInfo =
            serde_json::from_slice(&std::fs::read(&f).expect("read")).expect("json");
        assert_eq!(again, d);
        let rc = json!({"CNIDeviceInfoFile": "/x.json"});
        assert_eq!(device_info_file(Some(&rc)), Some("/x.json"));
        assert_eq!(device_info_file(None), None);
    }
}
