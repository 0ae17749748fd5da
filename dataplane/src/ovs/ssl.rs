//! The `SSL` row of the local OVS database: where ovn-controller finds the key, the
//! certificate and the CA of its TLS connection to the Southbound. ovn-controller reads
//! this row on every pass, so a running one switches to TLS (or to a renewed certificate)
//! without a restart, and the OVS pod needs no TLS material of its own.
//!
//! The row is ours (marked) or absent: a row someone else set (`ovs-vsctl set-ssl`) is
//! never replaced; the agent reports it instead.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ovsdb::typed::{Column, Table};
use ovsdb::vswitch::{OpenVSwitch, OpenVSwitchColumn as OC, Ssl};
use ovsdb::{Operation, Row, Value};

use super::spec::{is_owned, owned};
use super::{Ovs, OvsError};

/// The TLS files ovn-controller should use (paths as ovn-controller sees them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SslFiles {
    pub private_key: PathBuf,
    pub certificate: PathBuf,
    pub ca_cert: PathBuf,
}

/// What [`Ovs::set_ovn_ssl`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslChange {
    Unchanged,
    Written,
}

fn matches(row: &Ssl, want: &SslFiles) -> bool {
    row.private_key == want.private_key.display().to_string()
        && row.certificate == want.certificate.display().to_string()
        && row.ca_cert == want.ca_cert.display().to_string()
        && !row.bootstrap_ca_cert
}

impl Ovs {
    /// Points the `Open_vSwitch` row's `ssl` at a row of ours holding `want`.
    pub async fn set_ovn_ssl(&self, want: &SslFiles) -> Result<SslChange, OvsError> {
        let current = self.replica.read(|v| {
            let r = v.iter_typed::<OpenVSwitch>().next()?.ok()?;
            let u = r.ssl?;
            Some(v.get_typed::<Ssl>(&u).and_then(Result::ok))
        });
        let root_missing = || OvsError::Op {
            what: "configure ovn-controller's TLS".into(),
            source: ovsdb::Error::Config("the Open_vSwitch table has no row".into()),
        };
        if self.open_vswitch().is_none() {
            return Err(root_missing());
        }
        match &current {
            Some(Some(row)) if !is_owned(&row.external_ids) => {
                return Err(OvsError::Foreign {
                    port: "SSL".into(),
                    detail: format!(
                        "the Open_vSwitch SSL row was set by someone else (key {}, certificate {}): remove it (`ovs-vsctl del-ssl`) to let the agent give ovn-controller the node's certificate",
                        row.private_key, row.certificate
                    ),
                });
            }
            Some(Some(row)) if matches(row, want) => return Ok(SslChange::Unchanged),
            _ => {}
        }
        let row = Ssl {
            private_key: want.private_key.display().to_string(),
            certificate: want.certificate.display().to_string(),
            ca_cert: want.ca_cert.display().to_string(),
            bootstrap_ca_cert: false,
            external_ids: owned(BTreeMap::new()),
            ..Ssl::default()
        };
        let mut set = Row::new();
        set.insert(OC::Ssl.name().into(), Value::named_uuid("zovn_ssl"));
        // the old row of ours, no longer referenced, is garbage-collected (SSL is not a
        // root table)
        self.transact(
            "configure ovn-controller's TLS",
            vec![
                Operation::insert(Ssl::TABLE, row.to_row()).with_uuid_name("zovn_ssl"),
                Operation::update(OpenVSwitch::TABLE, vec![], set),
            ],
        )
        .await?;
        tracing::info!(key = %want.private_key.display(), certificate = %want.certificate.display(), ca = %want.ca_cert.display(), "ovn-controller TLS files set in OVS");
        Ok(SslChange::Written)
    }

    /// The `SSL` row the `Open_vSwitch` row points at, as this replica has it: its files
    /// and whether it is ours.
    pub fn ovn_ssl(&self) -> Option<(SslFiles, bool)> {
        self.replica.read(|v| {
            let r = v.iter_typed::<OpenVSwitch>().next()?.ok()?;
            let row = v.get_typed::<Ssl>(&r.ssl?)?.ok()?;
            let files = SslFiles {
                private_key: row.private_key.into(),
                certificate: row.certificate.into(),
                ca_cert: row.ca_cert.into(),
            };
            Some((files, is_owned(&row.external_ids)))
        })
    }

    /// Unhooks ovn-controller's TLS files at uninstall: clears the `Open_vSwitch` row's
    /// `ssl` when it points at a row of ours (which is then garbage-collected). A row
    /// someone else set stays. True when one of ours was removed.
    pub async fn clear_ovn_ssl(&self) -> Result<bool, OvsError> {
        if !self.ovn_ssl().is_some_and(|(_, ours)| ours) {
            return Ok(false);
        }
        let mut set = Row::new();
        set.insert(OC::Ssl.name().into(), Value::empty());
        self.transact(
            "remove ovn-controller's TLS files",
            vec![Operation::update(OpenVSwitch::TABLE, vec![], set)],
        )
        .await?;
        tracing::info!("ovn-controller TLS files unset in OVS");
        Ok(true)
    }
}
