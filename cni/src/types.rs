//! The network configuration a runtime passes on stdin.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{CniError, code};
use crate::result::CniResult;
use crate::version::CniVersion;

/// Log levels accepted in the `logLevel` field.
pub const LOG_LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

pub use crate::dns::Dns;

/// One entry of the GC input `cni.dev/valid-attachments` (spec 1.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GcAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// The network configuration of our plugin, as the runtime passes it on stdin (one
/// plugin of a conflist, with `name` and `cniVersion` injected by the runtime).
///
/// Unknown fields are kept in `extra`, so the agent sees everything the runtime sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetConf {
    /// Validated by [`NetConf::parse`]; read it with [`NetConf::version`].
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    #[serde(default)]
    pub name: String,
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// The previous result (DEL, CHECK), in whatever version the runtime cached it;
    /// decode with [`NetConf::prev_result`].
    #[serde(
        rename = "prevResult",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub prev_result: Option<Value>,
    #[serde(
        rename = "runtimeConfig",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub runtime_config: Option<Value>,
    /// GC input (spec 1.1). Read with [`NetConf::valid_attachments`].
    #[serde(
        rename = "cni.dev/valid-attachments",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub valid_attachments: Option<Vec<GcAttachment>>,
    /// The same list under the name an earlier 1.1 draft used; libcni sends both.
    #[serde(
        rename = "cni.dev/attachments",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub attachments: Option<Vec<GcAttachment>>,

    // ---- zstack-ovn fields ----
    /// The agent's socket (default [`crate::DEFAULT_SOCKET`]; env `ZSTACK_OVN_CNI_SOCKET`
    /// overrides both).
    #[serde(
        rename = "serverSocket",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub server_socket: Option<PathBuf>,
    /// MTU of the pod interface (68..=65535); the agent's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// One of [`LOG_LEVELS`]; `debug`/`trace` make the shim log to stderr.
    #[serde(rename = "logLevel", default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// How long the shim waits for the agent, in seconds (env `ZSTACK_OVN_CNI_TIMEOUT`
    /// overrides). Defaults: see [`crate::request::Command::default_timeout`].
    #[serde(
        rename = "timeoutSeconds",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout_seconds: Option<f64>,

    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl NetConf {
    /// Parses and validates the stdin JSON.
    ///
    /// Errors: not JSON → 6 (decode failure); JSON of the wrong shape, a missing
    /// `cniVersion`/`name`/`type` or a bad value of our fields → 7 (invalid config);
    /// an unsupported `cniVersion` → 1.
    pub fn parse(bytes: &[u8]) -> Result<NetConf, CniError> {
        let conf: NetConf = serde_json::from_slice(bytes).map_err(json_error)?;
        conf.validate()?;
        Ok(conf)
    }

    fn validate(&self) -> Result<(), CniError> {
        for (field, value) in [
            ("cniVersion", &self.cni_version),
            ("name", &self.name),
            ("type", &self.plugin_type),
        ] {
            if value.is_empty() {
                return Err(invalid(format!(
                    "network configuration is missing \"{field}\""
                )));
            }
        }
        self.cni_version.parse::<CniVersion>()?;
        if let Some(mtu) = self.mtu
            && !(68..=65535).contains(&mtu)
        {
            return Err(invalid(format!("mtu {mtu} is out of range 68..=65535")));
        }
        if let Some(level) = &self.log_level
            && !LOG_LEVELS.contains(&level.as_str())
        {
            return Err(invalid(format!(
                "logLevel {level:?} is not one of {}",
                LOG_LEVELS.join(", ")
            )));
        }
        if let Some(t) = self.timeout_seconds
            && !(t.is_finite() && t > 0.0)
        {
            return Err(invalid(format!("timeoutSeconds {t} must be > 0")));
        }
        if let Some(p) = &self.server_socket
            && p.as_os_str().is_empty()
        {
            return Err(invalid("serverSocket is empty"));
        }
        Ok(())
    }

    /// The validated `cniVersion` (the latest for a config that did not go through
    /// [`NetConf::parse`] and carries a bad one).
    pub fn version(&self) -> CniVersion {
        self.cni_version.parse().unwrap_or(CniVersion::LATEST)
    }

    /// The GC attachments that are still valid (empty when none were given).
    pub fn valid_attachments(&self) -> &[GcAttachment] {
        self.valid_attachments
            .as_deref()
            .or(self.attachments.as_deref())
            .unwrap_or(&[])
    }

    /// `prevResult` decoded (any supported version); `None` when absent.
    pub fn prev_result(&self) -> Result<Option<CniResult>, CniError> {
        match &self.prev_result {
            None | Some(Value::Null) => Ok(None),
            Some(v) => CniResult::from_value(v.clone()).map(Some),
        }
    }
}

fn invalid(msg: impl Into<String>) -> CniError {
    CniError::new(code::INVALID_CONFIG, msg)
}

/// Maps a serde_json error: malformed JSON → 6, well-formed but wrong shape → 7.
pub(crate) fn json_error(e: serde_json::Error) -> CniError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Data => CniError::new(code::INVALID_CONFIG, "invalid network configuration")
            .with_details(e.to_string()),
        Category::Syntax | Category::Eof | Category::Io => CniError::new(
            code::DECODE_FAILURE,
            "cannot decode the network configuration",
        )
        .with_details(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_of(s: &str) -> u32 {
        match NetConf::parse(s.as_bytes()) {
            Ok(_) => 0,
            Err(e) => e.code,
        }
    }

    #[test]
    fn parses_ours_and_keeps_unknown_fields() {
        let c = NetConf::parse(
            br#"{"cniVersion":"1.0.0","name":"zstack-ovn","type":"zstack-ovn-cni",
                "serverSocket":"/run/x.sock","mtu":1400,"logLevel":"debug",
                "runtimeConfig":{"portMappings":[]},"custom":{"a":1}}"#,
        )
        .unwrap();
        assert_eq!(c.version(), CniVersion::V1_0_0);
        assert_eq!(c.server_socket, Some(PathBuf::from("/run/x.sock")));
        assert_eq!(c.mtu, Some(1400));
        assert_eq!(c.extra.get("custom"), Some(&serde_json::json!({"a": 1})));
        assert!(c.runtime_config.is_some());
    }

    #[test]
    fn config_errors_have_the_right_codes() {
        assert_eq!(code_of("not json"), code::DECODE_FAILURE);
        assert_eq!(code_of(""), code::DECODE_FAILURE);
        assert_eq!(
            code_of(r#"{"cniVersion":"1.0.0","name":"n""#),
            code::DECODE_FAILURE
        );
        assert_eq!(code_of("[1,2]"), code::INVALID_CONFIG);
        assert_eq!(
            code_of(r#"{"cniVersion":"1.0.0","type":"t"}"#),
            code::INVALID_CONFIG
        );
        assert_eq!(code_of(r#"{"name":"n","type":"t"}"#), code::INVALID_CONFIG);
        assert_eq!(
            code_of(r#"{"cniVersion":"0.2.0","name":"n","type":"t"}"#),
            code::INCOMPATIBLE_VERSION
        );
        assert_eq!(
            code_of(r#"{"cniVersion":"1.1.0","name":"n","type":"t","mtu":"big"}"#),
            code::INVALID_CONFIG
        );
        assert_eq!(
            code_of(r#"{"cniVersion":"1.1.0","name":"n","type":"t","mtu":20}"#),
            code::INVALID_CONFIG
        );
        assert_eq!(
            code_of(r#"{"cniVersion":"1.1.0","name":"n","type":"t","logLevel":"loud"}"#),
            code::INVALID_CONFIG
        );
        assert_eq!(
            code_of(r#"{"cniVersion":"1.1.0","name":"n","type":"t","timeoutSeconds":0}"#),
            code::INVALID_CONFIG
        );
        let e = NetConf::parse(br#"{"cniVersion":"1.1.0","type":"t"}"#).unwrap_err();
        assert!(e.msg.contains("\"name\""), "{e}");
    }

    #[test]
    fn gc_attachments_under_either_name() {
        let c = NetConf::parse(
            br#"{"cniVersion":"1.1.0","name":"n","type":"t",
                "cni.dev/attachments":[{"containerID":"c1","ifname":"eth0"}]}"#,
        )
        .unwrap();
        assert_eq!(c.valid_attachments().len(), 1);
        let c = NetConf::parse(
            br#"{"cniVersion":"1.1.0","name":"n","type":"t",
                "cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"},
                                             {"containerID":"c2","ifname":"eth0"}],
                "cni.dev/attachments":[{"containerID":"c1","ifname":"eth0"}]}"#,
        )
        .unwrap();
        assert_eq!(c.valid_attachments()[1].container_id, "c2");
    }

    #[test]
    fn prev_result_of_an_old_version_decodes() {
        let c = NetConf::parse(
            br#"{"cniVersion":"0.4.0","name":"n","type":"t","prevResult":{
                "cniVersion":"0.4.0",
                "ips":[{"version":"4","address":"10.0.0.5/24","interface":0}]}}"#,
        )
        .unwrap();
        let r = c.prev_result().unwrap().unwrap();
        assert_eq!(r.ips[0].address.to_string(), "10.0.0.5/24");
    }
}
