//! CNI spec versions this plugin speaks and the `VERSION` answer.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{CniError, code};

/// A CNI spec version the plugin supports. Ordered oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CniVersion {
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

impl CniVersion {
    /// The newest version; used when the caller did not say which one it wants.
    pub const LATEST: CniVersion = CniVersion::V1_1_0;

    /// Every supported version, oldest first (the `supportedVersions` answer).
    pub const ALL: [CniVersion; 5] = [
        CniVersion::V0_3_0,
        CniVersion::V0_3_1,
        CniVersion::V0_4_0,
        CniVersion::V1_0_0,
        CniVersion::V1_1_0,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CniVersion::V0_3_0 => "0.3.0",
            CniVersion::V0_3_1 => "0.3.1",
            CniVersion::V0_4_0 => "0.4.0",
            CniVersion::V1_0_0 => "1.0.0",
            CniVersion::V1_1_0 => "1.1.0",
        }
    }

    /// Results of 0.3.x/0.4.0 carry `ips[].version` ("4"/"6"); 1.0.0 dropped it.
    pub fn has_ip_version_field(self) -> bool {
        self < CniVersion::V1_0_0
    }

    /// 1.1.0 added interface `mtu`/`socketPath`/`pciID` and route
    /// `mtu`/`advmss`/`priority`/`table`/`scope`.
    pub fn has_1_1_fields(self) -> bool {
        self >= CniVersion::V1_1_0
    }
}

impl fmt::Display for CniVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CniVersion {
    type Err = CniError;

    /// Unsupported or malformed versions are error code 1 (incompatible CNI version).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CniVersion::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                CniError::new(
                    code::INCOMPATIBLE_VERSION,
                    format!("incompatible CNI version {s:?}"),
                )
                .with_details(format!("supported versions: {}", supported_list()))
            })
    }
}

fn supported_list() -> String {
    CniVersion::ALL.map(CniVersion::as_str).join(", ")
}

impl Serialize for CniVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CniVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The answer to `VERSION`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    #[serde(rename = "supportedVersions")]
    pub supported_versions: Vec<String>,
}

impl VersionInfo {
    /// The answer for a caller that asked with `requested` (the `cniVersion` it put on
    /// stdin, if any): echo it when we support it, else answer in the latest version.
    pub fn answer(requested: Option<&str>) -> VersionInfo {
        let v = requested
            .and_then(|r| r.parse::<CniVersion>().ok())
            .unwrap_or(CniVersion::LATEST);
        VersionInfo {
            cni_version: v.as_str().to_owned(),
            supported_versions: CniVersion::ALL.map(|v| v.as_str().to_owned()).to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_order() {
        assert_eq!("0.3.1".parse::<CniVersion>().ok(), Some(CniVersion::V0_3_1));
        assert!(CniVersion::V0_4_0 < CniVersion::V1_0_0);
        let err = "0.2.0".parse::<CniVersion>().err();
        assert_eq!(err.map(|e| e.code), Some(code::INCOMPATIBLE_VERSION));
        assert!("1.1".parse::<CniVersion>().is_err());
    }

    #[test]
    fn version_answer_json() {
        let got = serde_json::to_value(VersionInfo::answer(Some("0.4.0"))).unwrap();
        let want = serde_json::json!({
            "cniVersion": "0.4.0",
            "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
        });
        assert_eq!(got, want);
        assert_eq!(VersionInfo::answer(Some("9.9.9")).cni_version, "1.1.0");
        assert_eq!(VersionInfo::answer(None).cni_version, "1.1.0");
    }
}
