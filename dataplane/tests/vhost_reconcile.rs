//! The agent's vhost-user port reconcile against a real ovsdb-server (Open_vSwitch schema;
//! no ovs-vswitchd: only the database rows matter here).
//!
//! The reconcile re-adds a recorded vhost-user port missing from OVS. A CNI DEL removes the
//! port first and the record last, holding the sandbox's lock: a reconcile that ran in
//! between (the port's removal is itself a change that starts one) re-added the port for
//! good, and the pod's vhost-user port outlived the pod — the likely cause of a CI run
//! where vhost_pod's "vm1's port removed" timed out (not caught live). The DEL in flight
//! is played by holding the sandbox lock the way a request does.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{OvsDb, require_real};
use dataplane::agent::metrics::Metrics;
use dataplane::agent::{Agent, AgentConfig};
use dataplane::attach;
use dataplane::attach::state::{SandboxRecord, StateStore};
use dataplane::attach::vhost_state::{VhostPorts, VhostRecord};
use dataplane::ovs::Ovs;
use dataplane::source::LabSource;

/// The names of the database's Interfaces of type `dpdkvhostuserclient`.
fn vhost_ifaces(db: &OvsDb) -> Vec<String> {
    db.vsctl(&[
        "--bare",
        "--columns=name",
        "find",
        "Interface",
        "type=dpdkvhostuserclient",
    ])
    .split_whitespace()
    .map(str::to_string)
    .collect()
}

fn record(root: &Path) -> VhostRecord {
    VhostRecord {
        sandbox: SandboxRecord {
            container_id: "c0ffee".into(),
            ifname: "eth0".into(),
            pod_namespace: "vms".into(),
            pod_name: "virt-launcher-vm1-x7".into(),
            netns: "/var/run/netns/none".into(),
            host_ifname: "vhu0123456789a".into(),
            mac: "0a:58:0a:10:00:05".into(),
            addresses: vec!["10.16.0.5/16".parse().expect("net")],
            gateways: vec!["10.16.0.1".parse().expect("ip")],
            routes: Vec::new(),
            mtu: 1400,
            datapath: None,
            datapath_reason: None,
            afxdp: None,
            promote_to: None,
        },
        config: Default::default(),
        owner: "vm1".into(),
        root: root.to_path_buf(),
        volume_target: None,
        device_info_file: None,
        network: None,
    }
}

/// Writes `rec` where [`VhostPorts::open`] loads records from.
fn write_record(root: &Path, rec: &VhostRecord) -> PathBuf {
    let dir = root.join(".records");
    std::fs::create_dir_all(&dir).expect("records dir");
    let path = dir.join(format!("{}.json", rec.key().replace('/', "@")));
    std::fs::write(&path, serde_json::to_vec(rec).expect("json")).expect("write record");
    path
}

#[test]
fn reconcile_never_re_adds_a_port_a_request_in_flight_removed() {
    if !require_real(
        "vhost_reconcile::reconcile_never_re_adds_a_port_a_request_in_flight_removed",
        &["ovsdb-server", "ovsdb-tool", "ovs-vsctl"],
    ) {
        return;
    }
    let d = tempfile::tempdir().expect("dir");
    let db = OvsDb::start(d.path());
    let root = d.path().join("vhost");
    let rec = record(&root);
    let record_path = write_record(&root, &rec);
    let port = rec.sandbox.host_ifname.clone();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let ovs = Ovs::connect(&db.remote).await.expect("connect");
        let agent = Agent::with_vhost(
            AgentConfig {
                node_name: "n1".into(),
                mtu: 1400,
                ovn: None,
                refresh: Duration::from_secs(5),
                datapath: Default::default(),
                vswitchd_ctl: None,
                gateway: None,
                uplink_bridge: "br-phy".into(),
                external_ips: Default::default(),
            },
            ovs,
            Box::new(LabSource::new(d.path().join("no-store.sock"))),
            StateStore::open(Some(&d.path().join("state"))).expect("state"),
            Arc::new(Metrics::new()),
            VhostPorts::open(root.clone()),
        );
        let ctx = agent.ctx();
        assert_eq!(ctx.vhost().all().len(), 1, "the record is loaded");
        agent.ovs().ensure_br_int("netdev").await.expect("br-int");

        // a recorded port missing from OVS is re-added
        assert_eq!(attach::reconcile(ctx).await, 1);
        assert_eq!(vhost_ifaces(&db), vec![port.clone()], "re-added");

        // a DEL in flight: it holds the sandbox lock, has removed the port and not yet the
        // record; the reconcile leaves the port alone
        let lock = ctx.sandbox_lock(&rec.sandbox.container_id);
        let guard = lock.lock().await;
        assert!(agent.ovs().delete_port(&port).await.expect("delete"));
        assert!(vhost_ifaces(&db).is_empty());
        attach::reconcile(ctx).await;
        assert!(
            vhost_ifaces(&db).is_empty(),
            "the reconcile re-added a port a request in flight had removed"
        );
        // the DEL finishes: the record goes, then the lock
        ctx.vhost().remove(&rec.key()).expect("remove record");
        assert!(!record_path.exists());
        drop(guard);
        attach::reconcile(ctx).await;
        assert!(vhost_ifaces(&db).is_empty(), "no record, no port");
    });
}
