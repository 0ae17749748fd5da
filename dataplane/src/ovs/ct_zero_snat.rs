//! A workaround for OVS 3.1.0's userspace conntrack: hide the `ct_zero_snat` datapath
//! capability from ovn-controller on the userspace (`netdev`) datapath.
//!
//! Why: when the datapath reports `ct_zero_snat=true`, ovn-controller commits every
//! connection of a stateful switch with an all-zero SNAT (`ct(commit, nat(src), ...)`).
//! OVS 3.1.0's userspace conntrack then keeps, next to each connection, an un-NAT entry
//! for its reply tuple; the connection hash is symmetric, so both land under one hash.
//! Once the connection has expired but the sweeper has not yet removed it, the next
//! packet on the same 5-tuple finds only the un-NAT entry, and ovs-vswitchd aborts
//! (`conntrack.c:1063: assertion conn->conn_type == CT_CONN_TYPE_DEFAULT failed in
//! conn_update_state()`). Any UDP client that reuses a source port ~30 s after its last
//! packet kills the node's datapath; `tests/tests/netpol_conntrack.rs` reproduces it.
//! Upstream conntrack later stopped keeping an un-NAT entry that shares its connection's
//! hash (recalled as "conntrack: Release nat_conn in case both keys have the same hash",
//! on the stable branches; not verified here, the 3.1.x sources were not reachable);
//! Debian 12's 3.1.0-2+deb12u1 carries only CVE patches.
//!
//! With the capability reported false, ovn-controller commits without NAT, which no
//! longer creates the un-NAT entries. What is lost: zero-SNAT resolves a rare tuple
//! collision between a load-balanced and a direct connection with the same reply tuple;
//! without it the second one fails to commit (a failed connection, not a dead datapath).
//!
//! The row is not ours (ovn-controller creates it, ovs-vswitchd writes `capabilities`
//! when it starts): this is the one key of a foreign row the agent changes, only on an
//! affected version, and again after every ovs-vswitchd restart (level-triggered).

use std::path::Path;
use std::time::Duration;

use ovsdb::typed::Table;
use ovsdb::vswitch::{Datapath, DatapathColumn as DC};
use ovsdb::{Mutation, Mutator, Operation, Uuid, Value};

use super::{BR_INT, Ovs, OvsError};

/// The capability ovn-controller reads.
const CAP: &str = "ct_zero_snat";
/// `ovs_version`s whose userspace conntrack aborts (measured here: Debian 12's 3.1.0).
const AFFECTED: &[&str] = &["3.1.0"];

/// Whether `version` (`3.1.0`, or `ovs-vswitchd (Open vSwitch) 3.1.0`) has the abort.
pub fn affected(version: &str) -> bool {
    version
        .split_whitespace()
        .last()
        .is_some_and(|v| AFFECTED.contains(&v))
}

/// The `Datapath` row of br-int's datapath type when it may need correcting (br-int on
/// `netdev` and the row reports `ct_zero_snat=true`), with the database's `ovs_version`.
fn candidate(ovs: &Ovs) -> Option<(Uuid, String)> {
    let row = ovs.open_vswitch()?;
    let dp_type = ovs.bridge(BR_INT)?.datapath_type;
    if dp_type != "netdev" {
        return None;
    }
    let uuid = *row.datapaths.get(&dp_type)?;
    (ovs.datapath(&uuid)?
        .capabilities
        .get(CAP)
        .map(String::as_str)
        == Some("true"))
    .then(|| (uuid, row.ovs_version.unwrap_or_default()))
}

impl Ovs {
    /// Reports `ct_zero_snat=false` on br-int's `Datapath` row where OVS 3.1.0's userspace
    /// conntrack would abort on zero-SNAT commits (see the module doc). The version comes
    /// from the database, else from ovs-vswitchd's `vswitchd_ctl` socket (`version`).
    /// True when it wrote.
    pub async fn hide_ct_zero_snat(&self, vswitchd_ctl: Option<&Path>) -> Result<bool, OvsError> {
        let Some((uuid, mut version)) = candidate(self) else {
            return Ok(false);
        };
        if version.is_empty()
            && let Some(ctl) = vswitchd_ctl
        {
            let c = crate::ovs::unixctl::Unixctl::new(ctl).with_timeout(Duration::from_secs(2));
            version = c.call("version", &[]).await.unwrap_or_default();
        }
        let version = version.lines().next().unwrap_or("").trim().to_string();
        if !affected(&version) {
            return Ok(false);
        }
        self.transact(
            "hide the ct_zero_snat capability",
            vec![Operation::mutate(
                Datapath::TABLE,
                vec![ovsdb::Condition::uuid(uuid)],
                vec![
                    Mutation::on(DC::Capabilities, Mutator::Delete, Value::string_set([CAP])),
                    Mutation::on(
                        DC::Capabilities,
                        Mutator::Insert,
                        Value::string_map([(CAP, "false")]),
                    ),
                ],
            )],
        )
        .await?;
        tracing::warn!(
            datapath = %uuid,
            %version,
            "userspace conntrack of this OVS aborts on zero-SNAT commits: ct_zero_snat \
             reported false to ovn-controller"
        );
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::affected;

    #[test]
    fn only_known_versions_are_corrected() {
        assert!(affected("3.1.0"));
        assert!(affected("ovs-vswitchd (Open vSwitch) 3.1.0"));
        assert!(!affected("3.1.2"));
        assert!(!affected("3.3.0"));
        assert!(!affected(""));
    }
}
