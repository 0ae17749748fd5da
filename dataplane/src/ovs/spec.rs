//! What the agent asks of a port ([`PortSpec`]) and what it reads back ([`IfaceView`],
//! [`OwnedPort`]), as typed `ovsdb::vswitch` rows.

use std::collections::BTreeMap;

use ovsdb::Uuid;
use ovsdb::vswitch::{Interface, InterfaceColumn as IC};

use super::{OWNER, OWNER_KEY};

/// What a port the agent creates should look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// Port and Interface name (the host-side device name).
    pub name: String,
    /// Interface type: `""` (system device) or `"internal"`.
    pub iface_type: String,
    /// Interface `mac` column (internal ports only).
    pub mac: Option<String>,
    /// Interface `external_ids` (the owner mark is added).
    pub iface_external_ids: BTreeMap<String, String>,
    /// Port `external_ids` (the owner mark is added).
    pub port_external_ids: BTreeMap<String, String>,
    /// Interface `options` (e.g. `xdp-mode`/`n_rxq` of an `afxdp` port,
    /// `vhost-server-path` of a `dpdkvhostuserclient` port).
    pub options: BTreeMap<String, String>,
    /// Interface `other_config` (e.g. `pmd-rxq-affinity`).
    pub other_config: BTreeMap<String, String>,
    /// Interface `mtu_request`.
    pub mtu_request: Option<i64>,
}

impl PortSpec {
    /// A plain port (type `""`) with the given external ids and nothing else.
    pub fn new(name: impl Into<String>) -> PortSpec {
        PortSpec {
            name: name.into(),
            iface_type: String::new(),
            mac: None,
            iface_external_ids: BTreeMap::new(),
            port_external_ids: BTreeMap::new(),
            options: BTreeMap::new(),
            other_config: BTreeMap::new(),
            mtu_request: None,
        }
    }

    /// The Interface row this spec asks for (owner mark included) and the columns it
    /// sets: `mac` only when the spec names one.
    pub(crate) fn interface(&self) -> (Interface, Vec<IC>) {
        let iface = Interface {
            name: self.name.clone(),
            type_: self.iface_type.clone(),
            external_ids: owned(self.iface_external_ids.clone()),
            options: self.options.clone(),
            other_config: self.other_config.clone(),
            mtu_request: self.mtu_request,
            mac: self.mac.clone(),
            ..Interface::default()
        };
        let mut cols = vec![
            IC::Name,
            IC::Type,
            IC::ExternalIds,
            IC::Options,
            IC::OtherConfig,
            IC::MtuRequest,
        ];
        if self.mac.is_some() {
            cols.push(IC::Mac);
        }
        (iface, cols)
    }

    /// The Port `external_ids` this spec asks for (owner mark included).
    pub(crate) fn port_ids(&self) -> BTreeMap<String, String> {
        owned(self.port_external_ids.clone())
    }

    /// Whether the interface `have` differs from this spec in what the agent sets (keys
    /// others added to `external_ids`, such as `ovn-installed`, do not count).
    pub(crate) fn iface_differs(&self, have: &IfaceView) -> bool {
        let want = owned(self.iface_external_ids.clone());
        !want
            .iter()
            .all(|(k, v)| have.external_ids.get(k) == Some(v))
            // a key of ours the spec no longer has (e.g. `zstack.io/datapath-pending`)
            || have
                .external_ids
                .keys()
                .any(|k| k.starts_with(OURS_PREFIX) && !want.contains_key(k))
            || have.iface_type != self.iface_type
            || have.options != self.options
            || have.other_config != self.other_config
            || have.mtu_request != self.mtu_request
    }
}

/// The prefix of every `external_ids` key the agent writes (others' keys, such as
/// ovn-controller's `ovn-installed`, are left alone).
use api::external_ids::PREFIX as OURS_PREFIX;

/// `m` with the owner mark.
pub(crate) fn owned(mut m: BTreeMap<String, String>) -> BTreeMap<String, String> {
    m.insert(OWNER_KEY.into(), OWNER.into());
    m
}

/// Whether a row's `external_ids` carry the owner mark.
pub(crate) fn is_owned(ids: &BTreeMap<String, String>) -> bool {
    ids.get(OWNER_KEY).map(String::as_str) == Some(OWNER)
}

/// What the database shows of an Interface (see [`super::NodeOvs::interface`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IfaceView {
    pub uuid: Option<Uuid>,
    pub iface_type: String,
    pub external_ids: BTreeMap<String, String>,
    pub options: BTreeMap<String, String>,
    pub other_config: BTreeMap<String, String>,
    pub mtu_request: Option<i64>,
    pub ofport: Option<i64>,
    /// The `error` column: why ovs-vswitchd could not open the device.
    pub error: Option<String>,
}

impl From<Interface> for IfaceView {
    fn from(i: Interface) -> IfaceView {
        IfaceView {
            uuid: Some(i.uuid),
            iface_type: i.type_,
            external_ids: i.external_ids,
            options: i.options,
            other_config: i.other_config,
            mtu_request: i.mtu_request,
            ofport: i.ofport,
            error: i.error.filter(|e| !e.is_empty()),
        }
    }
}

impl IfaceView {
    /// Opened by ovs-vswitchd (an ofport) or refused (an error): no longer pending.
    pub fn settled(&self) -> bool {
        self.error.is_some() || self.ofport.is_some_and(|p| p > 0)
    }
}

/// One port of ours, as read from the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedPort {
    pub uuid: Uuid,
    pub name: String,
    pub external_ids: BTreeMap<String, String>,
}

/// External ids of the `Open_vSwitch` row that configure ovn-controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvnConfig {
    pub remote: String,
    pub encap_type: String,
    pub encap_ip: String,
    pub system_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_rows_carry_the_owner_mark_and_only_set_columns() {
        let mut s = PortSpec::new("veth1");
        s.iface_external_ids
            .insert("iface-id".into(), "ns_p".into());
        let (iface, cols) = s.interface();
        assert!(is_owned(&iface.external_ids));
        assert_eq!(
            iface.external_ids.get("iface-id").map(String::as_str),
            Some("ns_p")
        );
        assert!(!cols.contains(&IC::Mac), "no mac asked, none written");
        assert!(is_owned(&s.port_ids()));
        let mut have = IfaceView::from(iface);
        have.external_ids
            .insert("ovn-installed".into(), "true".into());
        assert!(
            !s.iface_differs(&have),
            "ovn-controller's keys do not count"
        );
        have.external_ids.insert(
            api::external_ids::ovs::DATAPATH_PENDING.into(),
            "afxdp".into(),
        );
        assert!(
            s.iface_differs(&have),
            "a key of ours that went away counts"
        );
        have.external_ids
            .remove(api::external_ids::ovs::DATAPATH_PENDING);
        have.iface_type = "afxdp".into();
        assert!(s.iface_differs(&have));
        assert!(!IfaceView::default().settled());
        assert!(
            IfaceView {
                ofport: Some(3),
                ..Default::default()
            }
            .settled()
        );
        assert!(
            IfaceView {
                error: Some("x".into()),
                ..Default::default()
            }
            .settled()
        );
    }
}

/// One of ovn-controller's tunnel ports (see [`super::Ovs::tunnel_ports`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelPort {
    /// The remote chassis' name (its `system-id`).
    pub chassis: String,
    /// Its tunnel endpoint.
    pub remote_ip: std::net::IpAddr,
    /// `geneve`, `vxlan`, `stt`.
    pub kind: String,
}
