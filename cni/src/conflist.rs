//! Installing the plugin on a node: the conflist the runtime reads and the shim binary.
//! Both are written atomically (temporary file in the same directory + rename), so a
//! runtime never sees a half-written file. The agent calls these at start-up.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use hostio::Durability;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// File name of our conflist in the CNI config directory (e.g. `/etc/cni/net.d`).
pub const CONFLIST_NAME: &str = "10-zstack-ovn.conflist";
/// File name of the shim in the CNI binary directory (e.g. `/opt/cni/bin`); also the
/// plugin `type`.
pub const BINARY_NAME: &str = api::multus::PLUGIN_TYPE;
/// Default network name.
pub const NETWORK_NAME: &str = "zstack-ovn";

/// A network configuration list (spec 1.x).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfList {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    /// 1.1: every version the list may be used with; newer runtimes pick the highest
    /// they support, older ones ignore the field and use `cniVersion`.
    #[serde(rename = "cniVersions", default, skip_serializing_if = "Vec::is_empty")]
    pub cni_versions: Vec<String>,
    pub name: String,
    #[serde(rename = "disableCheck", default, skip_serializing_if = "is_false")]
    pub disable_check: bool,
    #[serde(rename = "disableGC", default, skip_serializing_if = "is_false")]
    pub disable_gc: bool,
    pub plugins: Vec<Value>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Our fields of the plugin entry; `None` leaves the shim's/agent's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PluginOptions {
    pub server_socket: Option<PathBuf>,
    pub mtu: Option<u32>,
    pub log_level: Option<String>,
    pub timeout_seconds: Option<f64>,
}

impl ConfList {
    /// The conflist with our single plugin. `cniVersion` is 1.0.0 so runtimes whose
    /// libcni predates 1.1 accept it; `cniVersions` lets newer ones use 1.1.0.
    pub fn zstack_ovn(opts: &PluginOptions) -> ConfList {
        let mut plugin = Map::new();
        plugin.insert("type".into(), BINARY_NAME.into());
        if let Some(s) = &opts.server_socket {
            plugin.insert(
                "serverSocket".into(),
                s.to_string_lossy().into_owned().into(),
            );
        }
        if let Some(m) = opts.mtu {
            plugin.insert("mtu".into(), m.into());
        }
        if let Some(l) = &opts.log_level {
            plugin.insert("logLevel".into(), l.clone().into());
        }
        if let Some(t) = opts.timeout_seconds {
            plugin.insert("timeoutSeconds".into(), t.into());
        }
        ConfList {
            cni_version: "1.0.0".into(),
            cni_versions: vec!["1.0.0".into(), "1.1.0".into()],
            name: NETWORK_NAME.into(),
            disable_check: false,
            disable_gc: false,
            plugins: vec![Value::Object(plugin)],
        }
    }

    pub fn to_json_pretty(&self) -> String {
        // Strings, bools and JSON values: serialization cannot fail.
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// Writes `conflist` to `dir/10-zstack-ovn.conflist` (mode 0644), creating `dir` if
/// needed. Leaves the file untouched when it already has this content.
pub fn write(dir: &Path, conflist: &ConfList) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let path = dir.join(CONFLIST_NAME);
    let text = conflist.to_json_pretty();
    if fs::read(&path).is_ok_and(|old| old == text.as_bytes()) {
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
        return Ok(path);
    }
    // a reader (kubelet, the runtime) sees the old file or the new one, never a part
    hostio::write_atomic(&path, text.as_bytes(), 0o644, Durability::FileAndDir)?;
    Ok(path)
}

/// Copies the shim binary `src` to `cni_bin_dir/zstack-ovn-cni` (mode 0755), creating
/// the directory if needed. Replacing a binary a runtime is executing is safe: the
/// rename swaps the directory entry, the running process keeps the old inode.
pub fn install_binary(src: &Path, cni_bin_dir: &Path) -> io::Result<PathBuf> {
    fs::create_dir_all(cni_bin_dir)?;
    let path = cni_bin_dir.join(BINARY_NAME);
    let mut input = fs::File::open(src)?;
    hostio::write_atomic_with(&path, 0o755, Durability::FileAndDir, |f| {
        io::copy(&mut input, f).map(|_| ())
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_conflist_atomically_with_mode_0644() {
        let dir = tempfile::tempdir().unwrap();
        let opts = PluginOptions {
            server_socket: Some("/run/zstack-ovn/cni.sock".into()),
            mtu: Some(1400),
            log_level: Some("info".into()),
            timeout_seconds: None,
        };
        let path = write(dir.path(), &ConfList::zstack_ovn(&opts)).unwrap();
        assert_eq!(path, dir.path().join("10-zstack-ovn.conflist"));
        let got: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            got,
            json!({
                "cniVersion": "1.0.0",
                "cniVersions": ["1.0.0", "1.1.0"],
                "name": "zstack-ovn",
                "plugins": [{
                    "type": "zstack-ovn-cni",
                    "serverSocket": "/run/zstack-ovn/cni.sock",
                    "mtu": 1400,
                    "logLevel": "info"
                }]
            })
        );
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
        // Rewriting is a no-op and leaves no temporary files behind.
        write(dir.path(), &ConfList::zstack_ovn(&opts)).unwrap();
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["10-zstack-ovn.conflist"]);
        // The plugin entry parses as our network config once the runtime injects
        // name and cniVersion.
        let mut plugin = got["plugins"][0].clone();
        plugin["name"] = got["name"].clone();
        plugin["cniVersion"] = "1.1.0".into();
        let conf = crate::NetConf::parse(plugin.to_string().as_bytes()).unwrap();
        assert_eq!(conf.mtu, Some(1400));
    }

    #[test]
    fn installs_binary_with_mode_0755() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("build-output");
        fs::write(&src, b"#!/bin/sh\nexit 0\n").unwrap();
        let bin_dir = dir.path().join("opt/cni/bin");
        let dst = install_binary(&src, &bin_dir).unwrap();
        assert_eq!(dst, bin_dir.join("zstack-ovn-cni"));
        assert_eq!(fs::read(&dst).unwrap(), b"#!/bin/sh\nexit 0\n");
        assert_eq!(
            fs::metadata(&dst).unwrap().permissions().mode() & 0o777,
            0o755
        );
        // Reinstalling over an existing binary works.
        fs::write(&src, b"v2").unwrap();
        install_binary(&src, &bin_dir).unwrap();
        assert_eq!(fs::read(&dst).unwrap(), b"v2");
        assert!(install_binary(&dir.path().join("missing"), &bin_dir).is_err());
    }
}
