//! Node deletion in the OVN Southbound: a deleted node's `Chassis` (and `Chassis_Private`)
//! rows are removed, as ovn-kubernetes does, so northd stops tunnelling to it. Standalone
//! mode only: in external mode the platform owns the Southbound.
//!
//! The chassis is named by the node annotation [`CHASSIS_ID`] (written by the node agent),
//! or matched by `hostname` = node name.

use ovsdb::sb::{Chassis, ChassisPrivate};
use ovsdb::typed::Table;
use ovsdb::{Client, Condition, Operation, Value};

pub use api::keys::CHASSIS_ID;

/// The SB database name.
pub const SB: &str = "OVN_Southbound";

/// Deletes the chassis of a deleted node: rows named `chassis` or with `hostname` = `node`.
/// Returns how many Chassis rows went.
pub async fn delete_node_chassis(
    sb: &Client,
    node: &str,
    chassis: &str,
) -> Result<i64, ovsdb::Error> {
    let ops = vec![
        Operation::delete(
            Chassis::TABLE,
            vec![Condition::eq("name", Value::string(chassis))],
        ),
        Operation::delete(
            Chassis::TABLE,
            vec![Condition::eq("hostname", Value::string(node))],
        ),
        Operation::delete(
            ChassisPrivate::TABLE,
            vec![Condition::eq("name", Value::string(chassis))],
        ),
    ];
    let res = sb.transact(SB, ops).await?;
    Ok(res.iter().take(2).filter_map(|r| r.count()).sum())
}
