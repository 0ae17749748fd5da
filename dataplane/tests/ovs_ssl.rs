//! The agent's OVS `SSL` row (ovn-controller's TLS files) against a real ovsdb-server:
//! set, kept, cleared at uninstall; a row someone else set is neither replaced nor
//! cleared.

mod common;

use common::{OvsDb, require_real};
use dataplane::ovs::Ovs;
use dataplane::ovs::ssl::{SslChange, SslFiles};

fn files(dir: &str) -> SslFiles {
    SslFiles {
        private_key: format!("{dir}/key.pem").into(),
        certificate: format!("{dir}/cert.pem").into(),
        ca_cert: format!("{dir}/ca.pem").into(),
    }
}

#[tokio::test]
async fn the_ssl_row_is_ours_to_set_and_to_clear_and_no_one_elses() {
    if !require_real(
        "ovs_ssl::the_ssl_row_is_ours_to_set_and_to_clear_and_no_one_elses",
        &["ovsdb-server", "ovsdb-tool", "ovs-vsctl"],
    ) {
        return;
    }
    let d = tempfile::tempdir().expect("tempdir");
    let db = OvsDb::start(d.path());
    let ovs = Ovs::connect(&db.remote).await.expect("connect");
    let want = files("/var/run/ovn/zovn-chassis");
    assert_eq!(
        ovs.set_ovn_ssl(&want).await.expect("set"),
        SslChange::Written
    );
    let shown = db.vsctl(&["get-ssl"]);
    assert!(
        shown.contains("/var/run/ovn/zovn-chassis/cert.pem"),
        "{shown}"
    );
    assert_eq!(
        ovs.set_ovn_ssl(&want).await.expect("again"),
        SslChange::Unchanged
    );

    // uninstall: gone, row and reference
    assert!(ovs.clear_ovn_ssl().await.expect("clear"));
    assert_eq!(db.vsctl(&["get-ssl"]).trim(), "");
    assert_eq!(
        db.vsctl(&["--bare", "--columns=_uuid", "list", "SSL"])
            .trim(),
        ""
    );
    assert!(!ovs.clear_ovn_ssl().await.expect("nothing to clear"));

    // an administrator's own row
    db.vsctl(&[
        "set-ssl",
        "/etc/admin/key.pem",
        "/etc/admin/cert.pem",
        "/etc/admin/ca.pem",
    ]);
    // the agent's replica learns of it from its monitor
    let t0 = std::time::Instant::now();
    while ovs.ovn_ssl().is_none() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "the replica never saw the row"
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(ovs.ovn_ssl().map(|(_, ours)| ours), Some(false));
    let foreign = ovs.set_ovn_ssl(&want).await.expect_err("not replaced");
    assert!(
        foreign.to_string().contains("ovs-vsctl del-ssl"),
        "{foreign}"
    );
    assert!(!ovs.clear_ovn_ssl().await.expect("not cleared"));
    assert!(db.vsctl(&["get-ssl"]).contains("/etc/admin/cert.pem"));
}
