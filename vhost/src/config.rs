//! What a user asks for: a vhost-user interface, from the NetworkAttachmentDefinition's
//! CNI config (admin-controlled) or from the pod/VMI annotation [`ANNOTATION`] on the
//! cluster's default network (pod-controlled, so it cannot name host paths).
//!
//! NAD config (the pod's default network through Multus `v1.multus-cni.io/default-network`,
//! or KubeVirt `multus: {networkName: vhost-net, default: true}`):
//!
//! ```json
//! {"cniVersion": "1.0.0", "name": "vhost-net", "type": "zstack-ovn-cni",
//!  "interfaceType": "vhost-user",
//!  "capabilities": {"CNIDeviceInfoFile": true},
//!  "vhostUser": {"queues": 2, "owner": "107:107", "mode": "0775",
//!                "socketDir": "/var/run/zstack-ovn/vhost",
//!                "socketVolume": "vhost-sockets", "podSocketDir": "/var/run/kubevirt/sockets"}}
//! ```
//!
//! Annotation: `network.zstack.io/vhost-user: '{"queues": 2}'` (`{}` for the defaults).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// NAD config key selecting the interface type.
pub const INTERFACE_TYPE_KEY: &str = "interfaceType";
/// NAD config key of the vhost-user settings.
pub const VHOST_USER_KEY: &str = "vhostUser";
/// The vhost-user interface type.
pub const INTERFACE_TYPE: &str = "vhost-user";
/// The kernel veth interface type (the default).
pub const VETH_TYPE: &str = "veth";
/// Pod/VMI annotation asking for a vhost-user interface on the default network.
pub const ANNOTATION: &str = api::keys::VHOST_USER;
/// Pod annotation naming the owner the socket path is derived from (default: the VMI name
/// from [`KUBEVIRT_DOMAIN_ANNOTATION`], else the pod name).
pub const OWNER_ANNOTATION: &str = api::keys::VHOST_OWNER;
/// Annotation KubeVirt puts on a virt-launcher pod: the VMI's name.
pub const KUBEVIRT_DOMAIN_ANNOTATION: &str = api::keys::KUBEVIRT_DOMAIN;
/// Default host root of the socket directories.
pub const DEFAULT_SOCKET_ROOT: &str = "/var/run/zstack-ovn/vhost";
/// Default kubelet root (for `socketVolume`).
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";
/// uid/gid of QEMU in KubeVirt's virt-launcher.
pub const KUBEVIRT_QEMU_ID: u32 = 107;
/// Most queue pairs accepted (virtio-net in QEMU allows 1024; OVS polls each one).
pub const MAX_QUEUES: u16 = 64;

/// Why a vhost-user request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "{INTERFACE_TYPE_KEY} {0:?} is not supported (use \"{VETH_TYPE}\" or \"{INTERFACE_TYPE}\")"
    )]
    UnknownType(String),
    #[error("{VHOST_USER_KEY} is set but {INTERFACE_TYPE_KEY} is not \"{INTERFACE_TYPE}\"")]
    StrayVhostUser,
    #[error("{where_}: {detail}")]
    Invalid { where_: String, detail: String },
}

fn invalid(where_: &str, detail: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        where_: where_.to_string(),
        detail: detail.into(),
    }
}

/// uid and gid owning the socket directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Default for Owner {
    fn default() -> Self {
        Owner {
            uid: KUBEVIRT_QEMU_ID,
            gid: KUBEVIRT_QEMU_ID,
        }
    }
}

/// An owner that is not `"uid:gid"` or `"uid"` with numeric ids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("owner {0:?} is not \"uid:gid\" with numeric ids")]
pub struct BadOwner(pub String);

impl std::str::FromStr for Owner {
    type Err = BadOwner;
    /// `"uid:gid"` or `"uid"` (gid = uid), numeric.
    fn from_str(s: &str) -> Result<Owner, BadOwner> {
        let num = |p: &str| p.trim().parse::<u32>().map_err(|_| BadOwner(s.to_string()));
        match s.split_once(':') {
            Some((u, g)) => Ok(Owner {
                uid: num(u)?,
                gid: num(g)?,
            }),
            None => {
                let id = num(s)?;
                Ok(Owner { uid: id, gid: id })
            }
        }
    }
}

/// A validated vhost-user request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VhostUserConfig {
    /// Queue pairs the workload opens (multiqueue = vCPUs for a VM).
    pub queues: u16,
    pub owner: Owner,
    /// Permission bits of the socket directory.
    pub mode: u32,
    /// Host root of the socket directories (NAD only; the agent's default otherwise).
    pub socket_root: Option<PathBuf>,
    /// An `emptyDir` volume of the pod the socket directory is bind-mounted onto, so the
    /// pod sees it without a hostPath volume.
    pub socket_volume: Option<String>,
    /// Where the pod mounts the socket directory (the device-info path uses it).
    pub pod_socket_dir: Option<PathBuf>,
    /// kubelet's root directory (NAD only), for `socketVolume`.
    pub kubelet_dir: Option<PathBuf>,
}

impl Default for VhostUserConfig {
    fn default() -> Self {
        VhostUserConfig {
            queues: 1,
            owner: Owner::default(),
            mode: 0o775,
            socket_root: None,
            socket_volume: None,
            pod_socket_dir: None,
            kubelet_dir: None,
        }
    }
}

/// The user-facing shape (both sources).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Raw {
    queues: Option<Value>,
    owner: Option<String>,
    mode: Option<Value>,
    socket_dir: Option<PathBuf>,
    socket_volume: Option<String>,
    pod_socket_dir: Option<PathBuf>,
    kubelet_dir: Option<PathBuf>,
}

fn parse_mode(where_: &str, v: &Value) -> Result<u32, ConfigError> {
    let m = match v {
        Value::String(s) => u32::from_str_radix(s.trim_start_matches("0o"), 8)
            .map_err(|_| invalid(where_, format!("mode {s:?} is not an octal number")))?,
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| invalid(where_, format!("mode {n} is not a permission mode")))?,
        other => return Err(invalid(where_, format!("mode {other} is not a string"))),
    };
    if m > 0o777 {
        return Err(invalid(
            where_,
            format!("mode {m:o} has bits beyond 0777 (setuid/setgid/sticky are not allowed)"),
        ));
    }
    if m & 0o002 != 0 {
        return Err(invalid(
            where_,
            format!(
                "mode {m:03o} lets every user of the node write into the socket directory \
                 (replace the socket, or put their own in its place): clear the others' w bit, e.g. 0775"
            ),
        ));
    }
    if m & 0o700 != 0o700 {
        return Err(invalid(
            where_,
            format!("mode {m:03o} must give the owner rwx (QEMU creates the socket in it)"),
        ));
    }
    Ok(m)
}

fn parse_queues(where_: &str, v: &Value) -> Result<u16, ConfigError> {
    let q = v
        .as_u64()
        .ok_or_else(|| invalid(where_, format!("queues {v} is not a whole number")))?;
    if q == 0 || q > u64::from(MAX_QUEUES) {
        return Err(invalid(
            where_,
            format!("queues {q} is out of range 1..={MAX_QUEUES}"),
        ));
    }
    Ok(q as u16)
}

fn check_abs(where_: &str, field: &str, p: &Path) -> Result<(), ConfigError> {
    let s = p.to_string_lossy();
    if !p.is_absolute() || s.split('/').any(|c| c == "..") {
        return Err(invalid(
            where_,
            format!("{field} {s:?} must be an absolute path without \"..\""),
        ));
    }
    Ok(())
}

impl VhostUserConfig {
    fn from_raw(where_: &str, raw: Raw, admin: bool) -> Result<VhostUserConfig, ConfigError> {
        let mut c = VhostUserConfig::default();
        if let Some(q) = &raw.queues {
            c.queues = parse_queues(where_, q)?;
        }
        if let Some(o) = &raw.owner {
            c.owner = o
                .parse()
                .map_err(|e: BadOwner| invalid(where_, e.to_string()))?;
        }
        if let Some(m) = &raw.mode {
            c.mode = parse_mode(where_, m)?;
        }
        for (field, p) in [
            ("socketDir", &raw.socket_dir),
            ("kubeletDir", &raw.kubelet_dir),
        ] {
            if let Some(p) = p {
                if !admin {
                    return Err(invalid(
                        where_,
                        format!(
                            "{field} names a host path and may only be set in the \
                             NetworkAttachmentDefinition, not in a pod annotation"
                        ),
                    ));
                }
                check_abs(where_, field, p)?;
            }
        }
        if let Some(p) = &raw.pod_socket_dir {
            check_abs(where_, "podSocketDir", p)?;
        }
        if let Some(v) = &raw.socket_volume {
            let ok = !v.is_empty()
                && v.len() <= 63
                && v.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !ok {
                return Err(invalid(
                    where_,
                    format!("socketVolume {v:?} is not a volume name (DNS-1123 label)"),
                ));
            }
        }
        c.socket_root = raw.socket_dir;
        c.socket_volume = raw.socket_volume;
        c.pod_socket_dir = raw.pod_socket_dir;
        c.kubelet_dir = raw.kubelet_dir;
        Ok(c)
    }

    /// The request in a network config's extra fields: `None` for a veth interface (no
    /// `interfaceType`, or `"veth"`).
    pub fn from_net_conf(extra: &Map<String, Value>) -> Result<Option<Self>, ConfigError> {
        let ty = match extra.get(INTERFACE_TYPE_KEY) {
            None | Some(Value::Null) => VETH_TYPE.to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => return Err(ConfigError::UnknownType(other.to_string())),
        };
        match ty.as_str() {
            VETH_TYPE => {
                if extra.get(VHOST_USER_KEY).is_some_and(|v| !v.is_null()) {
                    return Err(ConfigError::StrayVhostUser);
                }
                Ok(None)
            }
            INTERFACE_TYPE => {
                let where_ = "network config vhostUser";
                let raw = match extra.get(VHOST_USER_KEY) {
                    None | Some(Value::Null) => Raw::default(),
                    Some(v) => serde_json::from_value(v.clone())
                        .map_err(|e| invalid(where_, e.to_string()))?,
                };
                Self::from_raw(where_, raw, true).map(Some)
            }
            other => Err(ConfigError::UnknownType(other.to_string())),
        }
    }

    /// The request in the [`ANNOTATION`] value (JSON object; `{}` = defaults).
    pub fn from_annotation(value: &str) -> Result<Self, ConfigError> {
        let where_ = &format!("annotation {ANNOTATION}");
        let raw: Raw = serde_json::from_str(value)
            .map_err(|e| invalid(where_, format!("{e} (expected a JSON object)")))?;
        Self::from_raw(where_, raw, false)
    }

    /// The request of a pod: the network config's (wins) or the pod annotation's.
    pub fn requested(
        extra: &Map<String, Value>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Option<Self>, ConfigError> {
        if let Some(c) = Self::from_net_conf(extra)? {
            return Ok(Some(c));
        }
        match annotations.get(ANNOTATION).filter(|v| !v.trim().is_empty()) {
            Some(v) => Self::from_annotation(v).map(Some),
            None => Ok(None),
        }
    }
}

/// The name the socket path is derived from: [`OWNER_ANNOTATION`], else the VMI name
/// ([`KUBEVIRT_DOMAIN_ANNOTATION`] on a virt-launcher pod), else the pod name. Stable
/// across VM restarts (a new virt-launcher pod) and migrations.
pub fn owner_name<'a>(pod_name: &'a str, annotations: &'a BTreeMap<String, String>) -> &'a str {
    [OWNER_ANNOTATION, KUBEVIRT_DOMAIN_ANNOTATION]
        .iter()
        .find_map(|k| {
            annotations
                .get(*k)
                .map(String::as_str)
                .filter(|v| !v.is_empty())
        })
        .unwrap_or(pod_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn extra(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn veth_is_the_default() {
        assert_eq!(VhostUserConfig::from_net_conf(&Map::new()), Ok(None));
        assert_eq!(
            VhostUserConfig::from_net_conf(&extra(json!({"interfaceType": "veth"}))),
            Ok(None)
        );
        assert_eq!(
            VhostUserConfig::from_net_conf(&extra(json!({"vhostUser": {}}))),
            Err(ConfigError::StrayVhostUser)
        );
        let e = VhostUserConfig::from_net_conf(&extra(json!({"interfaceType": "sriov"})))
            .expect_err("sriov");
        assert!(e.to_string().contains("\"sriov\" is not supported"), "{e}");
    }

    #[test]
    fn nad_config_full_and_defaults() {
        let c = VhostUserConfig::from_net_conf(&extra(json!({
            "interfaceType": "vhost-user",
            "vhostUser": {"queues": 2, "owner": "1000:2000", "mode": "0770",
                "socketDir": "/run/v", "socketVolume": "vhost-sockets",
                "podSocketDir": "/var/run/kubevirt/sockets", "kubeletDir": "/k"}})))
        .expect("valid")
        .expect("vhost");
        assert_eq!(c.queues, 2);
        assert_eq!(
            c.owner,
            Owner {
                uid: 1000,
                gid: 2000
            }
        );
        assert_eq!(c.mode, 0o770);
        assert_eq!(c.socket_root.as_deref(), Some(Path::new("/run/v")));
        assert_eq!(c.socket_volume.as_deref(), Some("vhost-sockets"));
        let d = VhostUserConfig::from_net_conf(&extra(json!({"interfaceType": "vhost-user"})))
            .expect("valid")
            .expect("vhost");
        assert_eq!(d, VhostUserConfig::default());
        assert_eq!(d.owner, Owner { uid: 107, gid: 107 });
        assert_eq!(d.mode, 0o775);
    }

    #[test]
    fn bad_values_are_named() {
        let bad = |v: Value| {
            VhostUserConfig::from_net_conf(&extra(
                json!({"interfaceType": "vhost-user", "vhostUser": v}),
            ))
            .expect_err("refused")
            .to_string()
        };
        assert!(bad(json!({"queues": 0})).contains("queues 0 is out of range"));
        assert!(bad(json!({"queues": 65})).contains("out of range 1..=64"));
        assert!(bad(json!({"queues": "2"})).contains("not a whole number"));
        assert!(bad(json!({"owner": "qemu"})).contains("numeric ids"));
        assert!(bad(json!({"mode": "0888"})).contains("not an octal"));
        assert!(bad(json!({"mode": "4775"})).contains("setuid"));
        assert!(bad(json!({"mode": "0575"})).contains("owner rwx"));
        for writable in ["0777", "0773", "0702"] {
            assert!(
                bad(json!({"mode": writable})).contains("lets every user of the node write"),
                "{writable}"
            );
        }
        assert!(bad(json!({"socketDir": "run/v"})).contains("absolute"));
        assert!(bad(json!({"socketDir": "/run/../etc"})).contains("absolute"));
        assert!(bad(json!({"socketVolume": "Vol_1"})).contains("DNS-1123"));
        assert!(bad(json!({"queue": 2})).contains("unknown field `queue`"));
        assert!(bad(json!([1])).contains("vhostUser"));
    }

    #[test]
    fn annotation_cannot_name_host_paths() {
        let a = VhostUserConfig::from_annotation(r#"{"queues": 4}"#).expect("valid");
        assert_eq!(a.queues, 4);
        assert_eq!(
            VhostUserConfig::from_annotation("{}"),
            Ok(Default::default())
        );
        let e = VhostUserConfig::from_annotation(r#"{"socketDir": "/etc"}"#).expect_err("host");
        assert!(
            e.to_string()
                .contains("only be set in the NetworkAttachmentDefinition")
        );
        let e = VhostUserConfig::from_annotation("yes").expect_err("not json");
        assert!(e.to_string().contains(ANNOTATION), "{e}");
    }

    #[test]
    fn net_conf_wins_over_the_annotation() {
        let ann = BTreeMap::from([(ANNOTATION.to_string(), r#"{"queues": 3}"#.to_string())]);
        let from_ann = VhostUserConfig::requested(&Map::new(), &ann).expect("ok");
        assert_eq!(from_ann.map(|c| c.queues), Some(3));
        let nad = extra(json!({"interfaceType": "vhost-user", "vhostUser": {"queues": 5}}));
        let from_nad = VhostUserConfig::requested(&nad, &ann).expect("ok");
        assert_eq!(from_nad.map(|c| c.queues), Some(5));
        assert_eq!(
            VhostUserConfig::requested(&Map::new(), &BTreeMap::new()),
            Ok(None)
        );
    }

    #[test]
    fn owner_name_prefers_annotation_then_vmi() {
        let mut a = BTreeMap::new();
        assert_eq!(
            owner_name("virt-launcher-vm1-abcde", &a),
            "virt-launcher-vm1-abcde"
        );
        a.insert(KUBEVIRT_DOMAIN_ANNOTATION.to_string(), "vm1".to_string());
        assert_eq!(owner_name("virt-launcher-vm1-abcde", &a), "vm1");
        a.insert(OWNER_ANNOTATION.to_string(), "db".to_string());
        assert_eq!(owner_name("virt-launcher-vm1-abcde", &a), "db");
    }
}
