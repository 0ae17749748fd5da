//! The attachments' life on the in-memory OVS ([`crate::ovs::memory`]) and a plumbing
//! fake that records its calls: no root, no OVS, no netns.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cni::{Command, Request};
use futures::future::BoxFuture;

use super::*;
use crate::agent::metrics::Metrics;
use crate::agent::report::AgentEvent;
use crate::attach::node::{NodeCtx, NodeParts};
use crate::attach::plumbing::{Plumbing, PlumbingError};
use crate::attach::pod_iface::PlumbError;
use crate::attach::state::StateStore;
use crate::attach::vhost_state::VhostPorts;
use crate::ovs::NodeOvs;
use crate::ovs::memory::MemoryOvs;
use crate::source::{PodInfo, PodSource, SourceError};

/// Records every call; `teardown` of a name in `fail_teardown` fails; a netns exists
/// when its path is in `netns`, a socket directory once "prepared" (nothing is created:
/// no root needed).
#[derive(Default)]
struct FakePlumbing {
    calls: Mutex<Vec<String>>,
    fail_teardown: Mutex<BTreeSet<String>>,
    netns: Mutex<BTreeSet<PathBuf>>,
    /// Socket directories "created".
    dirs: Mutex<BTreeSet<PathBuf>>,
}

impl FakePlumbing {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().expect("calls").clone()
    }
    fn call(&self, c: String) {
        self.calls.lock().expect("calls").push(c);
    }
}

impl Plumbing for FakePlumbing {
    fn setup(
        &self,
        spec: crate::attach::pod_iface::PodInterfaceSpec,
    ) -> BoxFuture<'_, Result<(), PlumbingError>> {
        self.call(format!("setup {}", spec.host_ifname));
        Box::pin(async { Ok(()) })
    }
    fn teardown(&self, host_ifname: String) -> BoxFuture<'_, Result<(), PlumbingError>> {
        self.call(format!("teardown {host_ifname}"));
        let fail = self
            .fail_teardown
            .lock()
            .expect("fail")
            .contains(&host_ifname);
        Box::pin(async move {
            if fail {
                Err(PlumbingError::Interface(PlumbError::Step {
                    step: "netlink".into(),
                    source: format!("cannot delete {host_ifname}").into(),
                }))
            } else {
                Ok(())
            }
        })
    }
    fn check(
        &self,
        spec: crate::attach::pod_iface::PodInterfaceSpec,
    ) -> BoxFuture<'_, Result<(), PlumbingError>> {
        self.call(format!("check {}", spec.host_ifname));
        Box::pin(async { Ok(()) })
    }
    fn prepare_socket_dir(
        &self,
        layout: ::vhost::SocketLayout,
        _cfg: ::vhost::VhostUserConfig,
        _clear_stale: bool,
        _volume_target: Option<PathBuf>,
    ) -> BoxFuture<'_, Result<(), PlumbingError>> {
        self.call(format!("prepare {}", layout.dir.display()));
        self.dirs.lock().expect("dirs").insert(layout.dir);
        Box::pin(async { Ok(()) })
    }
    fn remove_socket_dir(
        &self,
        layout: ::vhost::SocketLayout,
        _volume_target: Option<PathBuf>,
        keep_dir: bool,
    ) -> BoxFuture<'_, Result<(), PlumbingError>> {
        self.call(format!("remove {}", layout.dir.display()));
        if !keep_dir {
            self.dirs.lock().expect("dirs").remove(&layout.dir);
        }
        Box::pin(async { Ok(()) })
    }
    fn dir_exists(&self, dir: &Path) -> bool {
        self.dirs.lock().expect("dirs").contains(dir)
    }
    fn netns_exists(&self, path: &Path) -> bool {
        self.netns.lock().expect("netns").contains(path)
    }
    fn meminfo(&self) -> String {
        "HugePages_Total: 8\nHugePages_Free: 4\n".into()
    }
}

/// Pods from a map.
#[derive(Default)]
struct FakePods(Mutex<BTreeMap<String, PodInfo>>);

impl PodSource for FakePods {
    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, SourceError>> {
        let p = self
            .0
            .lock()
            .expect("pods")
            .get(&format!("{namespace}/{name}"))
            .cloned();
        Box::pin(async move { Ok(p) })
    }
    fn node_annotations<'a>(
        &'a self,
        _node: &'a str,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, SourceError>> {
        Box::pin(async { Ok(Some(BTreeMap::new())) })
    }
    fn subnet_cidrs(&self) -> BoxFuture<'_, Result<Vec<ipnet::IpNet>, SourceError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn annotate_node<'a>(
        &'a self,
        _node: &'a str,
        _annotations: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(async { Ok(()) })
    }
    fn event<'a>(&'a self, _ev: &'a AgentEvent) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(async { Ok(()) })
    }
}

struct Node {
    ctx: NodeCtx,
    ovs: Arc<MemoryOvs>,
    host: Arc<FakePlumbing>,
    dir: tempfile::TempDir,
}

const NETS: &str = r#"{"default":{"ip_addresses":["10.1.0.5/24"],"mac_address":"0a:58:0a:01:00:05","gateway_ips":["10.1.0.1"]},
    "ns/sec":{"ip_addresses":["10.77.0.5/16"],"mac_address":"0a:58:0a:4d:00:05"}}"#;

fn node() -> Node {
    let dir = tempfile::tempdir().expect("dir");
    node_in(dir)
}

/// A node context on `dir`'s records (a restarted agent reads the same ones).
fn node_in(dir: tempfile::TempDir) -> Node {
    let ovs = Arc::new(MemoryOvs::new());
    ovs.set_open_vswitch(ovsdb::vswitch::OpenVSwitch {
        dpdk_initialized: true,
        iface_types: ["dpdkvhostuserclient".to_string()].into(),
        ..Default::default()
    });
    let host = Arc::new(FakePlumbing::default());
    let pods = FakePods::default();
    for name in ["p1", "p2", "vm"] {
        let mut annotations =
            BTreeMap::from([("k8s.ovn.org/pod-networks".to_string(), NETS.to_string())]);
        if name == "vm" {
            annotations.insert("k8s.v1.cni.cncf.io/networks".into(), "sec".into());
        }
        pods.0.lock().expect("pods").insert(
            format!("ns/{name}"),
            PodInfo {
                namespace: "ns".into(),
                name: name.into(),
                node_name: Some("n1".into()),
                annotations,
            },
        );
    }
    let ctx = NodeCtx::new(NodeParts {
        node_name: "n1".into(),
        mtu: 1400,
        ovs: ovs.clone(),
        plumbing: host.clone(),
        pods: Arc::new(pods),
        state: StateStore::open(Some(&dir.path().join("state"))).expect("state"),
        vhost: VhostPorts::open(dir.path().join("vhost")),
        metrics: Arc::new(Metrics::new()),
        datapath: crate::datapath::DatapathManager::new(Default::default()),
    });
    Node {
        ctx,
        ovs,
        host,
        dir,
    }
}

impl Node {
    fn req(&self, command: Command, cid: &str, pod: &str, ifname: &str, extra: &str) -> Request {
        let netns = self.dir.path().join(format!("netns-{cid}"));
        self.host.netns.lock().expect("netns").insert(netns.clone());
        Request {
            command,
            container_id: cid.into(),
            netns: netns.display().to_string(),
            ifname: ifname.into(),
            args: cni::CniArgs {
                pod_namespace: Some("ns".into()),
                pod_name: Some(pod.into()),
                ..Default::default()
            },
            path: Vec::new(),
            config: format!(
                r#"{{"cniVersion":"1.1.0","name":"zstack-ovn","type":"zstack-ovn"{extra}}}"#
            ),
            timeout_ms: 5000,
        }
    }

    async fn add(&self, cid: &str, pod: &str, ifname: &str, extra: &str) -> cni::CniResult {
        add(&self.ctx, &self.req(Command::Add, cid, pod, ifname, extra))
            .await
            .unwrap_or_else(|e| panic!("ADD {cid}/{ifname}: {}", e.msg))
    }

    fn ports(&self) -> Vec<String> {
        self.ovs.port_names()
    }
}

const VHOST: &str = r#","interfaceType":"vhost-user""#;

fn veth_port(cid: &str) -> String {
    crate::attach::pod_iface::host_ifname_for(cid)
}

#[tokio::test]
async fn veth_add_check_del() {
    let n = node();
    let r = n.add("c1", "p1", "eth0", "").await;
    assert_eq!(r.ips.len(), 1);
    assert_eq!(n.ports(), vec![veth_port("c1")]);
    assert!(
        n.host
            .calls()
            .contains(&format!("setup {}", veth_port("c1")))
    );
    let iface = n.ovs.interface(&veth_port("c1")).expect("iface");
    assert_eq!(
        iface.external_ids.get("iface-id").map(String::as_str),
        Some("ns_p1")
    );
    check(&n.ctx, &n.req(Command::Check, "c1", "p1", "eth0", ""))
        .await
        .expect("check");
    del(&n.ctx, "c1", "eth0").await.expect("del");
    assert!(n.ports().is_empty());
    assert!(n.ctx.state().all().is_empty());
    del(&n.ctx, "c1", "eth0")
        .await
        .expect("a second DEL is fine");
    let e = check(&n.ctx, &n.req(Command::Check, "c1", "p1", "eth0", ""))
        .await
        .expect_err("gone");
    assert_eq!(e.code, cni::error::code::UNKNOWN_CONTAINER);
}

#[tokio::test]
async fn vhost_and_secondary_add_check_del() {
    let n = node();
    let r = n.add("c2", "vm", "eth0", VHOST).await;
    let pod_if = r
        .interfaces
        .iter()
        .find(|i| i.sandbox.is_some())
        .expect("pod if");
    assert!(
        pod_if.socket_path.is_some(),
        "a vhost-user result has a socket"
    );
    n.add("c2", "vm", "net1", VHOST).await;
    assert_eq!(n.ctx.vhost().all().len(), 2);
    assert_eq!(n.ports().len(), 2);
    let sec = n.ctx.vhost().get("c2", "net1").expect("secondary record");
    let iface = n.ovs.interface(&sec.sandbox.host_ifname).expect("iface");
    assert_eq!(
        iface.external_ids.get("iface-id").map(String::as_str),
        Some("ns_vm_ns.sec"),
        "bound to the pod's LSP on the secondary network"
    );
    check(&n.ctx, &n.req(Command::Check, "c2", "vm", "net1", VHOST))
        .await
        .expect("check");
    del(&n.ctx, "c2", "net1").await.expect("del net1");
    assert_eq!(n.ports().len(), 1, "the primary interface stays");
    del(&n.ctx, "c2", "eth0").await.expect("del eth0");
    assert!(n.ports().is_empty());
    assert!(n.ctx.vhost().all().is_empty());
    assert!(
        n.host.dirs.lock().expect("dirs").is_empty(),
        "socket dirs removed"
    );
}

#[tokio::test]
async fn a_secondary_network_must_be_vhost_user() {
    let n = node();
    let e = add(&n.ctx, &n.req(Command::Add, "c3", "vm", "net1", ""))
        .await
        .expect_err("refused");
    assert!(e.msg.contains("only vhost-user"), "{}", e.msg);
    assert!(n.ports().is_empty());
}

#[tokio::test]
async fn reconcile_re_adds_a_missing_port_of_a_recorded_sandbox() {
    let n = node();
    n.add("c1", "p1", "eth0", "").await;
    n.add("c2", "vm", "eth0", VHOST).await;
    let vhu = n
        .ctx
        .vhost()
        .get("c2", "eth0")
        .expect("rec")
        .sandbox
        .host_ifname;
    n.ovs.lose_port(&veth_port("c1"));
    n.ovs.lose_port(&vhu);
    assert_eq!(reconcile(&n.ctx).await, 2);
    let mut want = vec![veth_port("c1"), vhu];
    want.sort();
    assert_eq!(n.ports(), want);
    assert_eq!(reconcile(&n.ctx).await, 0, "nothing missing, nothing done");
}

#[tokio::test]
async fn reconcile_does_not_undo_a_del_in_flight() {
    let n = node();
    n.add("c1", "p1", "eth0", "").await;
    n.add("c2", "vm", "eth0", VHOST).await;
    for cid in ["c1", "c2"] {
        // a DEL in flight holds the lock and has removed the port, not yet the record
        let lock = n.ctx.sandbox_lock(cid);
        let guard = lock.lock().await;
        let port = lookup(&n.ctx, cid, "eth0")
            .expect("recorded")
            .port()
            .to_string();
        assert!(n.ovs.delete_port(&port).await.expect("delete"));
        assert_eq!(
            reconcile(&n.ctx).await,
            0,
            "{cid}: the reconcile re-added the port"
        );
        assert!(!n.ports().contains(&port));
        drop(guard);
        del(&n.ctx, cid, "eth0").await.expect("the DEL finishes");
        assert_eq!(reconcile(&n.ctx).await, 0, "no record, no port");
    }
    assert!(n.ports().is_empty());
}

#[tokio::test]
async fn gc_keeps_going_past_a_failing_sandbox_and_reports_both_errors() {
    let n = node();
    n.add("c1", "p1", "eth0", "").await;
    n.add("c2", "p2", "eth0", "").await;
    n.add("c3", "vm", "eth0", VHOST).await;
    n.ovs.fail_deletes_of(&veth_port("c1"));
    n.host
        .fail_teardown
        .lock()
        .expect("fail")
        .insert(veth_port("c2"));
    // only c3 is still valid
    let valid = BTreeSet::from([("c3".to_string(), "eth0".to_string())]);
    let e = gc(&n.ctx, &valid).await.expect_err("two failures");
    assert!(e.msg.contains(&veth_port("c1")), "{}", e.msg);
    assert!(e.msg.contains(&veth_port("c2")), "{}", e.msg);
    // both failing sandboxes were worked on to the end; c2's port went
    assert!(
        n.host
            .calls()
            .contains(&format!("teardown {}", veth_port("c1")))
    );
    assert!(!n.ports().contains(&veth_port("c2")));
    // their records stay for a retry; the valid one is untouched
    assert!(n.ctx.state().get("c1", "eth0").is_some());
    assert!(n.ctx.state().get("c2", "eth0").is_some());
    assert!(n.ctx.vhost().get("c3", "eth0").is_some());
    assert!(n.ports().contains(&veth_port("c1")), "its deletion failed");
    // once the teardown works again, a second GC finishes c2 and still reports c1
    n.host.fail_teardown.lock().expect("fail").clear();
    let e = gc(&n.ctx, &valid).await.expect_err("c1 still fails");
    assert!(!e.msg.contains(&veth_port("c2")), "{}", e.msg);
    assert!(n.ctx.state().get("c2", "eth0").is_none());
}

#[tokio::test]
async fn gc_removes_stale_records_and_orphan_ports() {
    let n = node();
    n.add("c1", "p1", "eth0", "").await;
    n.add("c2", "vm", "eth0", VHOST).await;
    n.add("c2", "vm", "net1", VHOST).await;
    gc(&n.ctx, &BTreeSet::new()).await.expect("gc");
    assert!(n.ports().is_empty());
    assert!(recorded(&n.ctx).is_empty());
}

#[tokio::test]
async fn restart_restore_is_idempotent() {
    let n = node();
    n.add("c1", "p1", "eth0", "").await;
    n.add("c2", "vm", "eth0", VHOST).await;
    n.add("c4", "p2", "eth0", "").await;
    let netns = n.ctx.state().get("c4", "eth0").expect("rec").netns;
    // a restarted agent: same records, an empty OVS; c4's netns is gone
    let Node { dir, host, .. } = n;
    let n = node_in(dir);
    for p in host.netns.lock().expect("netns").iter() {
        if *p != netns {
            n.host.netns.lock().expect("netns").insert(p.clone());
        }
    }
    restore(&n.ctx).await.expect("restore");
    let after_first = n.ports();
    assert_eq!(after_first.len(), 2, "{after_first:?}");
    assert!(
        n.ctx.state().get("c4", "eth0").is_none(),
        "a sandbox without netns goes"
    );
    let writes = n.ovs.writes();
    restore(&n.ctx).await.expect("again");
    assert_eq!(n.ports(), after_first);
    assert_eq!(
        n.ovs.writes(),
        writes,
        "a second restore changes nothing in OVS"
    );
    assert_eq!(recorded(&n.ctx).len(), 2);
}

#[tokio::test]
async fn add_times_out_without_the_annotation() {
    let n = node();
    let mut req = n.req(Command::Add, "c9", "nosuch", "eth0", "");
    req.timeout_ms = 600;
    let e = add(&n.ctx, &req).await.expect_err("no pod");
    assert_eq!(e.code, cni::error::code::ANNOTATION_TIMEOUT);
    assert!(e.msg.contains("(the pod does not exist)"), "{}", e.msg);
}
