//! Calling the CNI plugin the way a container runtime does: the network configuration
//! from the node's CNI config directory (first `*.conflist`/`*.conf`/`*.json` in name
//! order, as libcni picks it), the plugin binary `<CNI_PATH>/<type>`, `CNI_*` variables,
//! the configuration on stdin, the result or error JSON on stdout.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cni::CniError;
use serde_json::{Map, Value};
use tokio::io::AsyncWriteExt;

mod config_error;
pub use config_error::{CniConfigError, ConfigProblem, DelegateError};

/// The pod interface name (CNI_IFNAME of the default network).
pub const IFNAME: &str = "eth0";

/// Longest a plugin call may take (the shim itself waits up to 60 s for ADD).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// What the runtime knows of one node for CNI calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniNode {
    /// Node name (`<prefix>-node<i>`).
    pub name: String,
    pub index: usize,
    /// The node's netns: plugins run there (the node's "host" namespace).
    pub netns: String,
    pub conf_dir: PathBuf,
    pub bin_dir: PathBuf,
    /// The agent's socket (`ZSTACK_OVN_CNI_SOCKET`).
    pub socket: PathBuf,
    /// The node's address (a pod's `hostIP`).
    pub host_ip: String,
    /// The node's Open_vSwitch database (`unix:...`), to read which datapath the agent
    /// gave a pod's port.
    pub ovs_db: String,
}

/// The network configuration for the first plugin of the node's config, as libcni
/// passes it: the plugin entry with the list's `name` and `cniVersion` injected.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfig {
    /// The file it came from.
    pub file: PathBuf,
    /// The plugin `type` (the binary name).
    pub plugin: String,
    pub cni_version: String,
    pub config: Map<String, Value>,
}

/// Reads the node's CNI configuration. `Ok(None)` when the directory holds none yet
/// (the agent writes it at start-up).
pub fn load_network_config(conf_dir: &Path) -> Result<Option<NetworkConfig>, CniConfigError> {
    let rd = match std::fs::read_dir(conf_dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(CniConfigError::ReadDir {
                dir: conf_dir.to_path_buf(),
                source,
            });
        }
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "conflist" || x == "conf" || x == "json")
        })
        .collect();
    files.sort();
    let Some(file) = files.into_iter().next() else {
        return Ok(None);
    };
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(source) => return Err(CniConfigError::Read { file, source }),
    };
    let v: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(source) => return Err(CniConfigError::NotJson { file, source }),
    };
    network_config(&file, v).map(Some)
}

/// Builds the plugin configuration from a conflist (or a single-plugin `.conf`).
pub fn network_config(file: &Path, v: Value) -> Result<NetworkConfig, CniConfigError> {
    let bad = |problem: ConfigProblem| CniConfigError::Invalid {
        file: file.to_path_buf(),
        problem,
    };
    let obj = v
        .as_object()
        .ok_or_else(|| bad(ConfigProblem::NotAnObject))?;
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(ConfigProblem::NoName))?;
    let version = obj
        .get("cniVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(ConfigProblem::NoCniVersion))?;
    // like libcni ≥ 1.2: the highest version of `cniVersions` the runtime speaks (1.1.0
    // results carry `socketPath` for vhost-user interfaces)
    let listed: Vec<&str> = obj
        .get("cniVersions")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let version = ["1.1.0", "1.0.0"]
        .into_iter()
        .find(|v| listed.contains(v))
        .unwrap_or(version);
    let mut config = match obj.get("plugins") {
        Some(Value::Array(plugins)) => plugins
            .first()
            .and_then(Value::as_object)
            .cloned()
            .ok_or_else(|| bad(ConfigProblem::NoPlugins))?,
        Some(_) => return Err(bad(ConfigProblem::PluginsNotAList)),
        None => obj.clone(),
    };
    config.insert("name".into(), name.into());
    config.insert("cniVersion".into(), version.into());
    let plugin = config
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty() && !t.contains('/'))
        .ok_or_else(|| bad(ConfigProblem::NoPluginType))?
        .to_string();
    Ok(NetworkConfig {
        file: file.to_path_buf(),
        plugin,
        cni_version: version.to_string(),
        config,
    })
}

/// One plugin invocation.
#[derive(Debug, Clone)]
pub struct CniCall<'a> {
    /// `ADD`, `DEL`, `CHECK`.
    pub command: &'a str,
    pub node: &'a CniNode,
    pub container_id: &'a str,
    /// The pod netns name (CNI_NETNS is `/var/run/netns/<name>`).
    pub netns: &'a str,
    pub ifname: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub net: &'a NetworkConfig,
    /// The ADD result, passed as `prevResult` on DEL/CHECK.
    pub prev_result: Option<&'a Value>,
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq)]
pub enum CniFailure {
    /// The plugin reported an error (exit 1, error JSON on stdout).
    Plugin(CniError),
    /// The plugin could not be run, timed out, or printed something unreadable.
    Exec(String),
}

impl CniFailure {
    /// Worth retrying soon: the agent is not up yet (11) or the controller has not
    /// annotated the pod yet (100).
    pub fn transient(&self) -> bool {
        matches!(self, CniFailure::Plugin(e)
            if e.code == cni::error::code::TRY_AGAIN_LATER
                || e.code == cni::error::code::ANNOTATION_TIMEOUT)
    }
}

impl std::fmt::Display for CniFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CniFailure::Plugin(e) => write!(f, "{e}"),
            CniFailure::Exec(s) => f.write_str(s),
        }
    }
}

impl CniCall<'_> {
    /// `CNI_ARGS` as kubelet sets it.
    pub fn cni_args(&self) -> String {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
            self.namespace, self.name, self.container_id, self.uid
        )
    }

    /// The stdin JSON.
    pub fn stdin(&self) -> Value {
        let mut c = self.net.config.clone();
        if let Some(prev) = self.prev_result {
            c.insert("prevResult".into(), prev.clone());
        }
        Value::Object(c)
    }

    /// Runs the plugin inside the node's netns and returns its stdout JSON (the ADD
    /// result; `Null` for commands that print nothing).
    pub async fn run(&self) -> Result<Value, CniFailure> {
        let what = format!(
            "CNI {} of pod {}/{} (netns {}) on {}",
            self.command, self.namespace, self.name, self.netns, self.node.name
        );
        let plugin = self.node.bin_dir.join(&self.net.plugin);
        if !plugin.is_file() {
            return Err(CniFailure::Plugin(CniError::new(
                cni::error::code::TRY_AGAIN_LATER,
                format!(
                    "{what}: plugin {} is not installed (the node agent installs it)",
                    plugin.display()
                ),
            )));
        }
        let stdin = serde_json::to_vec(&self.stdin())
            .map_err(|e| CniFailure::Exec(format!("{what}: encode the config: {e}")))?;
        let inv = cni::invoke::Invocation {
            args: self.cni_args(),
            path: self.node.bin_dir.clone(),
            ..cni::invoke::Invocation::pod(
                self.command,
                self.container_id,
                self.netns,
                self.ifname,
                self.namespace,
                self.name,
            )
        }
        .with_env(cni::shim::SOCKET_ENV, &self.node.socket);
        let mut std_cmd = inv.command("ip");
        std_cmd
            .args(["netns", "exec", &self.node.netns])
            .arg(&plugin);
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| {
            CniFailure::Exec(format!("{what}: cannot run {}: {e}", plugin.display()))
        })?;
        if let Some(mut w) = child.stdin.take() {
            w.write_all(&stdin)
                .await
                .map_err(|e| CniFailure::Exec(format!("{what}: write stdin: {e}")))?;
        }
        let out = tokio::time::timeout(CALL_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| CniFailure::Exec(format!("{what}: no answer within {CALL_TIMEOUT:?}")))?
            .map_err(|e| CniFailure::Exec(format!("{what}: {e}")))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            if stdout.trim().is_empty() {
                return Ok(Value::Null);
            }
            return serde_json::from_str(&stdout).map_err(|e| {
                CniFailure::Exec(format!("{what}: unreadable result ({e}): {stdout}"))
            });
        }
        match serde_json::from_str::<CniError>(&stdout) {
            Ok(mut e) => {
                e.msg = format!("{what}: {}", e.msg);
                Err(CniFailure::Plugin(e))
            }
            Err(_) => Err(CniFailure::Exec(format!(
                "{what}: {} ({}){}",
                out.status,
                stdout.trim(),
                if stderr.trim().is_empty() {
                    String::new()
                } else {
                    format!("; stderr: {}", stderr.trim())
                }
            ))),
        }
    }
}

/// The host-side interface of a veth result (the entry without a sandbox).
pub fn host_ifname(result: &Value) -> Option<String> {
    let r = cni::CniResult::from_value(result.clone()).ok()?;
    r.interfaces
        .iter()
        .find(|i| i.sandbox.is_none() && i.socket_path.is_none())
        .map(|i| i.name.clone())
}

/// What a fast-start port shows until the agent has moved it to AF_XDP.
pub const PENDING_AFXDP: &str = "kernel/veth→afxdp";

/// `afxdp/veth`, `kernel/veth`, [`PENDING_AFXDP`] or `vhost-user`: the OVS Interface type
/// the agent gave the pod's port (`None` when it cannot be read).
pub fn veth_datapath(ovs_db: &str, host_ifname: &str) -> Option<String> {
    let out = crate::ctl::vsctl(
        ovs_db,
        &[
            "get",
            "Interface",
            host_ifname,
            "type",
            "external_ids:zstack.io/datapath-pending",
        ],
    )
    .ok();
    // `get` of a missing map key fails: read the type alone then
    let out = match out {
        Some(o) => o,
        None => crate::ctl::vsctl(ovs_db, &["get", "Interface", host_ifname, "type"]).ok()?,
    };
    let mut lines = out.lines().map(|l| l.trim().trim_matches('"'));
    let ty = lines.next().unwrap_or_default();
    let pending = lines.next().unwrap_or_default();
    Some(match ty {
        // a vhost-user result names the OVS port as its host interface too
        "dpdkvhostuserclient" => "vhost-user".into(),
        // pending until ovs-vswitchd confirmed the switch (the type changes before)
        _ if pending == "afxdp" => PENDING_AFXDP.into(),
        "afxdp" => "afxdp/veth".into(),
        _ => "kernel/veth".into(),
    })
}

/// Addresses, MAC and datapath from an ADD result.
pub fn summarize(result: &Value) -> Result<(Vec<String>, Option<String>, String), CniError> {
    let r = cni::CniResult::from_value(result.clone())?;
    let ips = r.ips.iter().map(|i| i.address.to_string()).collect();
    let pod_if = r.interfaces.iter().find(|i| i.sandbox.is_some());
    let mac = pod_if.and_then(|i| i.mac.clone());
    let datapath = if r.interfaces.iter().any(|i| i.socket_path.is_some()) {
        "vhost-user"
    } else {
        "kernel/veth"
    };
    Ok((ips, mac, datapath.to_string()))
}

/// The node's network config with a NetworkAttachmentDefinition's plugin config laid over
/// it (Multus's delegation, see [`crate::multus`]): the NAD's keys
/// win, the node's local keys the NAD does not set (the agent's socket, timeouts) stay,
/// the `cniVersion` the lab's runtime negotiated stays. The NAD must name the plugin the
/// node runs.
pub fn delegate_config(
    node: &NetworkConfig,
    nad_config: &str,
) -> Result<NetworkConfig, DelegateError> {
    let nad: Map<String, Value> =
        serde_json::from_str(nad_config).map_err(DelegateError::NotAnObject)?;
    let plugin = nad.get("type").and_then(Value::as_str).unwrap_or("");
    if plugin != node.plugin {
        return Err(DelegateError::OtherPlugin {
            nad: plugin.to_string(),
            node: node.plugin.clone(),
        });
    }
    let mut out = node.clone();
    for (k, v) in nad {
        if k != "cniVersion" {
            out.config.insert(k, v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conflist_to_plugin_config() {
        let dir = tempfile::tempdir().expect("dir");
        assert!(matches!(load_network_config(dir.path()), Ok(None)));
        assert!(matches!(
            load_network_config(&dir.path().join("missing")),
            Ok(None)
        ));
        std::fs::write(dir.path().join("README"), "not a config").expect("write");
        let list = json!({"cniVersion": "1.0.0", "cniVersions": ["1.0.0", "1.1.0"],
            "name": "zstack-ovn",
            "plugins": [{"type": "zstack-ovn-cni", "serverSocket": "/x/cni.sock"}]});
        std::fs::write(dir.path().join("10-zstack-ovn.conflist"), list.to_string()).expect("write");
        std::fs::write(dir.path().join("20-other.conflist"), "{").expect("write");
        let net = load_network_config(dir.path())
            .expect("config")
            .expect("present");
        assert_eq!(net.plugin, "zstack-ovn-cni");
        assert_eq!(
            Value::Object(net.config.clone()),
            json!({"type": "zstack-ovn-cni", "serverSocket": "/x/cni.sock",
                "name": "zstack-ovn", "cniVersion": "1.1.0"})
        );
        let e = network_config(
            Path::new("x"),
            json!({"name": "n", "cniVersion": "1.0.0",
            "plugins": []}),
        )
        .expect_err("empty");
        assert_eq!(e.to_string(), "CNI config x: \"plugins\" is empty");
        assert!(network_config(Path::new("x"), json!({"name": "n"})).is_err());
    }

    #[test]
    fn args_stdin_and_transient_codes() {
        let node = CniNode {
            name: "lab-node1".into(),
            index: 1,
            netns: "labn1".into(),
            conf_dir: "/c".into(),
            bin_dir: "/b".into(),
            socket: "/s".into(),
            host_ip: "172.16.0.1".into(),
            ovs_db: "unix:/db.sock".into(),
        };
        let net = network_config(
            Path::new("x"),
            json!({"name": "n", "cniVersion": "1.0.0", "plugins": [{"type": "t"}]}),
        )
        .expect("config");
        let prev = json!({"cniVersion": "1.0.0"});
        let call = CniCall {
            command: "DEL",
            node: &node,
            container_id: "c1",
            netns: "labp-1",
            ifname: "eth0",
            namespace: "demo",
            name: "web",
            uid: "u1",
            net: &net,
            prev_result: Some(&prev),
        };
        assert!(
            call.cni_args()
                .contains("K8S_POD_NAMESPACE=demo;K8S_POD_NAME=web;")
        );
        assert!(call.cni_args().ends_with("K8S_POD_UID=u1"));
        assert_eq!(call.stdin()["prevResult"], prev);
        let e = |c| CniFailure::Plugin(CniError::new(c, "m"));
        assert!(e(11).transient() && e(100).transient());
        assert!(!e(101).transient() && !CniFailure::Exec("x".into()).transient());
    }

    #[test]
    fn result_summary() {
        let r = json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "veth1"}, {"name": "eth0", "mac": "0a:58:0a:10:00:05",
                "sandbox": "/var/run/netns/x"}],
            "ips": [{"address": "10.16.0.5/16", "gateway": "10.16.0.1", "interface": 1}]});
        let (ips, mac, dp) = summarize(&r).expect("summary");
        assert_eq!(ips, ["10.16.0.5/16"]);
        assert_eq!(mac.as_deref(), Some("0a:58:0a:10:00:05"));
        assert_eq!(dp, "kernel/veth");
    }

    #[test]
    fn nad_config_overlays_the_node_config() {
        let node = NetworkConfig {
            file: "x.conflist".into(),
            plugin: "zstack-ovn-cni".into(),
            cni_version: "1.1.0".into(),
            config: serde_json::from_value(json!({"type": "zstack-ovn-cni", "name": "zstack-ovn",
                "cniVersion": "1.1.0", "socket": "/run/a.sock"}))
            .unwrap(),
        };
        let nad = r#"{"cniVersion": "1.0.0", "name": "vhost-net", "type": "zstack-ovn-cni",
            "interfaceType": "vhost-user", "vhostUser": {"queues": 2}}"#;
        let c = delegate_config(&node, nad).unwrap();
        assert_eq!(c.config["socket"], "/run/a.sock");
        assert_eq!(c.config["cniVersion"], "1.1.0");
        assert_eq!(c.config["name"], "vhost-net");
        assert_eq!(c.config["vhostUser"]["queues"], 2);
        let e = delegate_config(&node, r#"{"type": "bridge"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the NAD's plugin \"bridge\" is not the node's plugin \"zstack-ovn-cni\" (the \
             lab runs only that one)"
        );
    }
}
