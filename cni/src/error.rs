//! The CNI error object and the error codes this plugin uses.

use serde::{Deserialize, Serialize};

/// Error codes. 0–99 are the spec's well-known codes; 100+ are ours.
pub mod code {
    /// Incompatible CNI version.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// Unsupported field in the network configuration (the message names the field).
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// Container unknown or does not exist.
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// Invalid necessary environment variables (the message names them).
    pub const INVALID_ENV: u32 = 4;
    /// I/O failure.
    pub const IO_FAILURE: u32 = 5;
    /// Failed to decode content (stdin is not JSON, a result does not parse).
    pub const DECODE_FAILURE: u32 = 6;
    /// Invalid network configuration.
    pub const INVALID_CONFIG: u32 = 7;
    /// Try again later: a transient condition; the runtime should retry.
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS (1.1): the plugin is not available, i.e. cannot service ADD.
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    /// STATUS (1.1): not available, and existing containers may have limited connectivity.
    pub const PLUGIN_NOT_AVAILABLE_LIMITED: u32 = 51;

    /// Ours, agent side: timed out waiting for the controller to write the pod's
    /// `k8s.ovn.org/pod-networks` annotation.
    pub const ANNOTATION_TIMEOUT: u32 = 100;
    /// Ours, agent side: the agent refused the request (e.g. the pod is not scheduled
    /// on this node, or the annotation is unusable); the message says why.
    pub const AGENT_REFUSED: u32 = 101;
    /// Ours, shim side: no answer from the agent within the shim's timeout.
    pub const AGENT_TIMEOUT: u32 = 102;
    /// Ours, shim side: the agent's answer was truncated or not valid protocol
    /// (e.g. the connection closed mid-reply).
    pub const AGENT_PROTOCOL: u32 = 103;
    /// Ours, agent side: timed out waiting for ovn-controller to report the pod's OVS
    /// port installed.
    pub const PORT_NOT_READY: u32 = 104;
}

/// The CNI error object printed on stdout (with a non-zero exit) when a command fails.
/// Also the error type the agent answers with over the socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("CNI error {code}: {msg}{}", details.as_deref().map(|d| format!("; {d}")).unwrap_or_default())]
pub struct CniError {
    /// Filled in with the caller's version before printing (see [`CniError::with_version`]).
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    pub code: u32,
    pub msg: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
}

impl CniError {
    /// An error with the latest `cniVersion`; the shim overwrites it with the version
    /// the runtime asked for.
    pub fn new(code: u32, msg: impl Into<String>) -> CniError {
        CniError {
            cni_version: crate::CniVersion::LATEST.as_str().to_owned(),
            code,
            msg: msg.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> CniError {
        self.details = Some(details.into());
        self
    }

    pub fn with_version(mut self, version: impl Into<String>) -> CniError {
        self.cni_version = version.into();
        self
    }

    /// The JSON printed on stdout.
    pub fn to_json(&self) -> String {
        // Serializing a struct of strings and an integer cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| {
            format!(
                r#"{{"cniVersion":"1.1.0","code":{},"msg":"unprintable error"}}"#,
                self.code
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn error_json_shape() {
        let e = CniError::new(code::TRY_AGAIN_LATER, "try again later")
            .with_details("socket /x: connection refused")
            .with_version("0.4.0");
        let got: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(
            got,
            json!({
                "cniVersion": "0.4.0",
                "code": 11,
                "msg": "try again later",
                "details": "socket /x: connection refused"
            })
        );
        // `details` is optional and left out when empty.
        let got: serde_json::Value =
            serde_json::from_str(&CniError::new(code::INVALID_ENV, "m").to_json()).unwrap();
        assert_eq!(got, json!({"cniVersion": "1.1.0", "code": 4, "msg": "m"}));
    }

    #[test]
    fn display_includes_details() {
        let e = CniError::new(6, "bad").with_details("line 1");
        assert_eq!(e.to_string(), "CNI error 6: bad; line 1");
        assert_eq!(CniError::new(6, "bad").to_string(), "CNI error 6: bad");
    }
}
