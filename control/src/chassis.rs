//! Node deletion in the OVN Southbound: a deleted node's `Chassis` (and `Chassis_Private`)
//! rows are removed, as ovn-kubernetes does, so northd stops tunnelling to it. Standalone
//! mode only: in external mode the platform owns the Southbound.
//!
//! The chassis is named by the node annotation [`CHASSIS_ID`] (written by the node agent),
//! or matched by `hostname` = node name.
//!
//! With the chart's PKI the Southbound listener applies OVN's RBAC (`role=ovn-controller`)
//! to every client: a chassis may delete its own rows and nobody else's. The controller
//! then holds no privileged Southbound credential at all: it removes a deleted node's rows
//! as that node, with a certificate it mints for the purpose from the chassis CA
//! ([`Southbound::AsChassis`]).

use std::sync::Arc;
use std::time::Duration;

use ovsdb::sb::{Chassis, ChassisPrivate};
use ovsdb::typed::Table;
use ovsdb::{Client, ClientConfig, Condition, Operation, TlsConfig, Value};

use crate::chassis_signer::{CaError, ChassisCa};

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
    let [by_name, private] = by_name_ops(chassis);
    let ops = vec![
        by_name,
        Operation::delete(
            Chassis::TABLE,
            vec![Condition::eq("hostname", Value::string(node))],
        ),
        private,
    ];
    let res = sb.transact(SB, ops).await?;
    Ok(res.iter().take(2).filter_map(|r| r.count()).sum())
}

/// Deletes of the `Chassis` and `Chassis_Private` rows named `chassis`.
fn by_name_ops(chassis: &str) -> [Operation; 2] {
    let named = || vec![Condition::eq("name", Value::string(chassis))];
    [
        Operation::delete(Chassis::TABLE, named()),
        Operation::delete(ChassisPrivate::TABLE, named()),
    ]
}

/// How the controller reaches the Southbound to remove a deleted node's chassis.
pub enum Southbound {
    /// One connection with the controller's own credentials (plain, or the platform's TLS).
    Shared(Client),
    /// A connection per deletion, as the chassis deleted (RBAC lets it delete only its own
    /// rows, so only the rows named `chassis` go, not the `hostname` match).
    AsChassis(Box<ChassisLogin>),
}

/// What a connection as a chassis needs.
pub struct ChassisLogin {
    /// The Southbound remotes (no TLS: added per connection).
    pub config: ClientConfig,
    /// The CA that signed the Southbound server's certificate (PEM).
    pub server_ca_pem: Vec<u8>,
    /// The name the server's certificate holds, when not the dialled host.
    pub server_name: Option<String>,
    pub ca: Arc<ChassisCa>,
}

/// A chassis could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error(transparent)]
    Ovsdb(#[from] ovsdb::Error),
    #[error("a certificate for chassis {chassis}: {source}")]
    Mint { chassis: String, source: CaError },
}

/// Lifetime of a certificate minted for one deletion.
const MINTED_VALIDITY: Duration = Duration::from_secs(600);

impl Southbound {
    /// Deletes the chassis of a deleted node; returns how many Chassis rows went.
    pub async fn delete_node_chassis(
        &self,
        node: &str,
        chassis: &str,
    ) -> Result<i64, CleanupError> {
        match self {
            Southbound::Shared(sb) => Ok(delete_node_chassis(sb, node, chassis).await?),
            Southbound::AsChassis(login) => {
                let (cert, key) = login.ca.mint(chassis, MINTED_VALIDITY).map_err(|source| {
                    CleanupError::Mint {
                        chassis: chassis.to_string(),
                        source,
                    }
                })?;
                let mut tls = TlsConfig::from_pem(
                    &login.server_ca_pem,
                    Some((cert.as_bytes(), key.as_bytes())),
                )?;
                if let Some(n) = &login.server_name {
                    tls = tls.with_server_name(n)?;
                }
                let sb = Client::connect(login.config.clone().with_tls(tls)).await?;
                let res = sb.transact(SB, by_name_ops(chassis).to_vec()).await?;
                Ok(res.first().and_then(|r| r.count()).unwrap_or(0))
            }
        }
    }
}
