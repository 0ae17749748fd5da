//! The uplink port of a bridge (the NIC of the bridge holding the node's address, br-phy)
//! as the database shows it, and changing its type: what [`crate::host::uplink`] needs of OVS.
//! Only a port marked as ours is ever changed.

use std::collections::BTreeMap;

use ovsdb::typed::Table;
use ovsdb::vswitch::{Interface, InterfaceColumn as IC, Port};
use ovsdb::{Condition, Operation, Uuid};

use super::client::{find_bridge, find_interface, rows};
use super::spec::is_owned;
use super::{Ovs, OvsError};

/// Interface types that are a device of the host (an uplink), not a port OVS makes up.
const DEVICE_TYPES: &[&str] = &["", "system", "afxdp", "dpdk"];

/// The keys of `options` an AF_XDP or DPDK uplink gets (removed again on another type).
pub const AFXDP_OPTION_KEYS: &[&str] = &["xdp-mode", "n_rxq", "dpdk-devargs"];

/// One device port of a bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UplinkPort {
    pub name: String,
    /// `""`/`system`, `afxdp` or `dpdk`.
    pub iface_type: String,
    pub options: BTreeMap<String, String>,
    /// The Port carries `external_ids:zstack.io/owner=zstack-ovn-node` (the chart's uplink
    /// container, the lab).
    pub owned: bool,
    pub ofport: Option<i64>,
    /// Why ovs-vswitchd could not open it.
    pub error: Option<String>,
    iface_uuid: Uuid,
}

impl UplinkPort {
    /// A kernel (AF_PACKET) port.
    pub fn is_kernel(&self) -> bool {
        matches!(self.iface_type.as_str(), "" | "system")
    }
}

impl Ovs {
    /// The device ports of `bridge` (neither internal, patch nor tunnel ports); `None`
    /// when the bridge does not exist.
    pub fn uplink_ports(&self, bridge: &str) -> Option<Vec<UplinkPort>> {
        self.replica().read(|v| {
            let b = find_bridge(v, bridge)?;
            let ports: Vec<Port> = rows::<Port>(v)
                .filter(|p| b.ports.contains(&p.uuid))
                .collect();
            let mut out = Vec::new();
            for p in ports {
                for iface in rows::<Interface>(v).filter(|i| p.interfaces.contains(&i.uuid)) {
                    if iface.name == bridge || !DEVICE_TYPES.contains(&iface.type_.as_str()) {
                        continue;
                    }
                    out.push(UplinkPort {
                        name: iface.name,
                        iface_type: iface.type_,
                        options: iface.options,
                        owned: is_owned(&p.external_ids),
                        ofport: iface.ofport,
                        error: iface.error.filter(|e| !e.is_empty()),
                        iface_uuid: iface.uuid,
                    });
                }
            }
            out.sort_by(|a, b| a.name.cmp(&b.name));
            Some(out)
        })
    }

    /// Sets the type of an uplink of ours: `afxdp` or `dpdk` with `options` added, or a
    /// kernel port (`system`), each without the others' [`AFXDP_OPTION_KEYS`]. The operator's other options stay. A
    /// port that is not ours is an error (never touched).
    pub async fn set_uplink_type(
        &self,
        port: &UplinkPort,
        iface_type: &str,
        options: &BTreeMap<String, String>,
    ) -> Result<(), OvsError> {
        if !port.owned {
            return Err(OvsError::Foreign {
                port: port.name.clone(),
                detail: "is not marked as the node agent's: its type is left alone".into(),
            });
        }
        let mut opts = port.options.clone();
        opts.retain(|k, _| !AFXDP_OPTION_KEYS.contains(&k.as_str()));
        opts.extend(options.clone());
        let row = Interface {
            type_: iface_type.to_string(),
            options: opts.clone(),
            ..Interface::default()
        };
        let op = Operation::update_typed(
            &row,
            &[IC::Type, IC::Options],
            vec![Condition::uuid(port.iface_uuid)],
        );
        self.transact(
            &format!("set uplink {} type {iface_type}", port.name),
            vec![op],
        )
        .await?;
        let (name, ty) = (port.name.clone(), iface_type.to_string());
        self.settle(move |v| {
            find_interface(v, &name).is_some_and(|i| i.type_ == ty && i.options == opts)
        })
        .await;
        tracing::debug!(table = Interface::TABLE, port = %port.name, iface_type, "uplink type written");
        Ok(())
    }
}
