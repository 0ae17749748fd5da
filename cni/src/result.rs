//! The ADD result and its conversion to the version the runtime asked for.
//!
//! [`CniResult`] holds a 1.1.0 result without a version; [`CniResult::to_value`] renders
//! it for a given version:
//!
//! | version        | `ips[].version` | interface `mtu`/`socketPath`/`pciID`, route `mtu`/`advmss`/`priority`/`table`/`scope` |
//! |----------------|-----------------|------------------------------------------|
//! | 0.3.0 – 0.4.0  | `"4"` / `"6"`   | dropped                                  |
//! | 1.0.0          | absent          | dropped                                  |
//! | 1.1.0          | absent          | kept                                     |
//!
//! Empty `interfaces`/`ips`/`routes` are left out; `dns` is always present (as libcni does).

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dns::Dns;
use crate::error::{CniError, code};
use crate::version::CniVersion;

/// One interface of the result. `sandbox` is set for interfaces inside the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// 1.1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// 1.1.0: the vhost-user (or similar) socket of the interface.
    #[serde(
        rename = "socketPath",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub socket_path: Option<String>,
    /// 1.1.0: the PCI address of a device-backed interface.
    #[serde(rename = "pciID", default, skip_serializing_if = "Option::is_none")]
    pub pci_id: Option<String>,
}

/// One address. The 0.x `version` field is derived from `address`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// Address with prefix length, e.g. `10.0.0.5/24`.
    pub address: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<u32>,
}

/// One route. All but `dst`/`gw` are 1.1.0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u8>,
}

impl Route {
    /// A route with only `dst` and `gw`.
    pub fn new(dst: IpNet, gw: Option<IpAddr>) -> Route {
        Route {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

/// The result of ADD (and the `prevResult` of DEL/CHECK), version-independent.
///
/// Its own serde form is the 1.1.0 shape without `cniVersion` (used on the agent
/// socket); deserializing accepts any 0.3.0–1.1.0 result (`version`/`cniVersion` are
/// ignored, use [`CniResult::from_value`] to have `cniVersion` checked).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniResult {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub dns: Dns,
}

impl CniResult {
    /// Decodes a result of any supported version (e.g. a `prevResult`).
    /// A `cniVersion` we do not support → 1; a malformed result → 6.
    pub fn from_value(v: Value) -> Result<CniResult, CniError> {
        if let Some(ver) = v.get("cniVersion").and_then(Value::as_str) {
            ver.parse::<CniVersion>()?;
        }
        serde_json::from_value(v).map_err(|e| {
            CniError::new(code::DECODE_FAILURE, "cannot decode the CNI result")
                .with_details(e.to_string())
        })
    }

    /// The result in the shape of `version`, with `cniVersion` set.
    pub fn to_value(&self, version: CniVersion) -> Value {
        let v11 = version.has_1_1_fields();
        let out = Out {
            cni_version: version,
            interfaces: self
                .interfaces
                .iter()
                .map(|i| OutInterface {
                    name: &i.name,
                    mac: i.mac.as_deref(),
                    mtu: i.mtu.filter(|_| v11),
                    sandbox: i.sandbox.as_deref(),
                    socket_path: i.socket_path.as_deref().filter(|_| v11),
                    pci_id: i.pci_id.as_deref().filter(|_| v11),
                })
                .collect(),
            ips: self
                .ips
                .iter()
                .map(|ip| OutIp {
                    version: version.has_ip_version_field().then_some(match ip.address {
                        IpNet::V4(_) => "4",
                        IpNet::V6(_) => "6",
                    }),
                    address: &ip.address,
                    gateway: ip.gateway,
                    interface: ip.interface,
                })
                .collect(),
            routes: self
                .routes
                .iter()
                .map(|r| OutRoute {
                    dst: &r.dst,
                    gw: r.gw,
                    mtu: r.mtu.filter(|_| v11),
                    advmss: r.advmss.filter(|_| v11),
                    priority: r.priority.filter(|_| v11),
                    table: r.table.filter(|_| v11),
                    scope: r.scope.filter(|_| v11),
                })
                .collect(),
            dns: &self.dns,
        };
        // Plain structs of strings/numbers: serialization cannot fail.
        serde_json::to_value(out).unwrap_or(Value::Null)
    }

    /// [`CniResult::to_value`] as the JSON text printed on stdout.
    pub fn to_json(&self, version: CniVersion) -> String {
        self.to_value(version).to_string()
    }
}

#[derive(Serialize)]
struct Out<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: CniVersion,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    interfaces: Vec<OutInterface<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ips: Vec<OutIp<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    routes: Vec<OutRoute<'a>>,
    dns: &'a Dns,
}

#[derive(Serialize)]
struct OutInterface<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    mac: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<&'a str>,
    #[serde(rename = "socketPath", skip_serializing_if = "Option::is_none")]
    socket_path: Option<&'a str>,
    #[serde(rename = "pciID", skip_serializing_if = "Option::is_none")]
    pci_id: Option<&'a str>,
}

#[derive(Serialize)]
struct OutIp<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'static str>,
    address: &'a IpNet,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interface: Option<u32>,
}

#[derive(Serialize)]
struct OutRoute<'a> {
    dst: &'a IpNet,
    #[serde(skip_serializing_if = "Option::is_none")]
    gw: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    advmss: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    table: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<u8>,
}

/// A dual-stack result using every 1.1.0 field; shared by unit and integration tests.
#[doc(hidden)]
pub fn sample_result() -> CniResult {
    let net = |s: &str| s.parse::<IpNet>().ok();
    let ip = |s: &str| s.parse::<IpAddr>().ok();
    let mut default_v4 = Route::new(net("0.0.0.0/0").unwrap_or_default(), ip("10.1.0.1"));
    default_v4.mtu = Some(1400);
    default_v4.advmss = Some(1360);
    default_v4.priority = Some(100);
    default_v4.table = Some(254);
    default_v4.scope = Some(0);
    CniResult {
        interfaces: vec![
            Interface {
                name: "veth1a2b3c".into(),
                mac: Some("0a:58:0a:01:00:01".into()),
                ..Interface::default()
            },
            Interface {
                name: "eth0".into(),
                mac: Some("0a:58:0a:01:00:05".into()),
                mtu: Some(1400),
                sandbox: Some("/var/run/netns/cni-1".into()),
                socket_path: Some("/var/run/zstack-ovn/vhost/pod.sock".into()),
                pci_id: Some("0000:3b:00.2".into()),
            },
        ],
        ips: vec![
            IpConfig {
                address: net("10.1.0.5/24").unwrap_or_default(),
                gateway: ip("10.1.0.1"),
                interface: Some(1),
            },
            IpConfig {
                address: net("fd00:10:1::5/64").unwrap_or_default(),
                gateway: ip("fd00:10:1::1"),
                interface: Some(1),
            },
        ],
        routes: vec![
            default_v4,
            Route::new(net("::/0").unwrap_or_default(), ip("fd00:10:1::1")),
        ],
        dns: Dns {
            nameservers: vec!["10.96.0.10".into()],
            domain: None,
            search: vec!["default.svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // The expected documents below were written by hand from the spec text of each
    // version (Result section), not captured from this code's output.

    #[test]
    fn to_1_1_0_keeps_everything() {
        let want = json!({
            "cniVersion": "1.1.0",
            "interfaces": [
                {"name": "veth1a2b3c", "mac": "0a:58:0a:01:00:01"},
                {"name": "eth0", "mac": "0a:58:0a:01:00:05", "mtu": 1400,
                 "sandbox": "/var/run/netns/cni-1",
                 "socketPath": "/var/run/zstack-ovn/vhost/pod.sock",
                 "pciID": "0000:3b:00.2"}
            ],
            "ips": [
                {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 1},
                {"address": "fd00:10:1::5/64", "gateway": "fd00:10:1::1", "interface": 1}
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1400, "advmss": 1360,
                 "priority": 100, "table": 254, "scope": 0},
                {"dst": "::/0", "gw": "fd00:10:1::1"}
            ],
            "dns": {"nameservers": ["10.96.0.10"],
                    "search": ["default.svc.cluster.local"], "options": ["ndots:5"]}
        });
        assert_eq!(sample_result().to_value(CniVersion::V1_1_0), want);
    }

    #[test]
    fn to_1_0_0_drops_the_1_1_fields() {
        let want = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "veth1a2b3c", "mac": "0a:58:0a:01:00:01"},
                {"name": "eth0", "mac": "0a:58:0a:01:00:05", "sandbox": "/var/run/netns/cni-1"}
            ],
            "ips": [
                {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 1},
                {"address": "fd00:10:1::5/64", "gateway": "fd00:10:1::1", "interface": 1}
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "10.1.0.1"},
                {"dst": "::/0", "gw": "fd00:10:1::1"}
            ],
            "dns": {"nameservers": ["10.96.0.10"],
                    "search": ["default.svc.cluster.local"], "options": ["ndots:5"]}
        });
        assert_eq!(sample_result().to_value(CniVersion::V1_0_0), want);
    }

    fn want_0x(version: &str) -> Value {
        json!({
            "cniVersion": version,
            "interfaces": [
                {"name": "veth1a2b3c", "mac": "0a:58:0a:01:00:01"},
                {"name": "eth0", "mac": "0a:58:0a:01:00:05", "sandbox": "/var/run/netns/cni-1"}
            ],
            "ips": [
                {"version": "4", "address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 1},
                {"version": "6", "address": "fd00:10:1::5/64", "gateway": "fd00:10:1::1",
                 "interface": 1}
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "10.1.0.1"},
                {"dst": "::/0", "gw": "fd00:10:1::1"}
            ],
            "dns": {"nameservers": ["10.96.0.10"],
                    "search": ["default.svc.cluster.local"], "options": ["ndots:5"]}
        })
    }

    #[test]
    fn to_0_4_0_adds_ip_version() {
        assert_eq!(
            sample_result().to_value(CniVersion::V0_4_0),
            want_0x("0.4.0")
        );
    }

    #[test]
    fn to_0_3_1_and_0_3_0_add_ip_version() {
        assert_eq!(
            sample_result().to_value(CniVersion::V0_3_1),
            want_0x("0.3.1")
        );
        assert_eq!(
            sample_result().to_value(CniVersion::V0_3_0),
            want_0x("0.3.0")
        );
    }

    #[test]
    fn empty_result_keeps_only_version_and_dns() {
        assert_eq!(
            CniResult::default().to_value(CniVersion::V1_0_0),
            json!({"cniVersion": "1.0.0", "dns": {}})
        );
    }

    #[test]
    fn round_trip_through_every_version() {
        for v in CniVersion::ALL {
            let back = CniResult::from_value(sample_result().to_value(v)).unwrap();
            if v == CniVersion::V1_1_0 {
                assert_eq!(back, sample_result());
            } else {
                assert_eq!(back.ips, sample_result().ips, "{v}");
                assert_eq!(back.interfaces[1].mtu, None, "{v}");
            }
        }
    }

    #[test]
    fn from_value_errors() {
        let e = CniResult::from_value(json!({"cniVersion": "0.2.0", "ip4": {}})).unwrap_err();
        assert_eq!(e.code, code::INCOMPATIBLE_VERSION);
        let e = CniResult::from_value(json!({"ips": [{"address": "10.0.0.1"}]})).unwrap_err();
        assert_eq!(e.code, code::DECODE_FAILURE);
    }
}
