//! Leader election of `zstack-ovnkube-controller` on a real kube-apiserver 1.20 + etcd and
//! a real OVN NB + northd: two controller processes with short timings (lease 6 s, renew
//! deadline 4.5 s, retry 0.5 s: short enough to measure, long enough that a slow apiserver
//! on a loaded 2-core machine does not make a leader miss its renew deadline) on one Lease.
//!
//! - exactly one leads: the Lease names it, its `zstack_ovn_controller_leader` is 1 and the
//!   other's 0, `/readyz` says `leader: synced` and `standby: leader is …`;
//! - while both run, pods get addresses and the standby writes nothing
//!   (`zstack_ovn_controller_nb_transactions_total` stays 0); no two pods share an address;
//! - SIGKILL of the leader: the other holds the Lease and annotates a new pod within
//!   lease duration + 2 × retry period + start-up slack (the figures are printed);
//!   `leaseTransitions` grew;
//! - SIGTERM of a leader: it releases the Lease, a standby takes over well before the
//!   lease duration, and the SIGTERMed process exits 0;
//! - a leader that finds another holder in the Lease stops and exits non-zero;
//! - a leader whose apiserver stops answering (SIGSTOP) exits non-zero within the renew
//!   deadline.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use api::pod_networks::{POD_NETWORKS, decode_pod_networks};
use api::subnet::Subnet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use tests::kube_objects::{KillOnDrop, KubeAndOvn, create, eventually};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LEASE: &str = "zstack-ovn-controller";
const NS: &str = "kube-system";
const LEASE_SECS: f64 = 6.0;
const RENEW_SECS: f64 = 4.5;
const RETRY_SECS: f64 = 0.5;
/// NB connect, replica, the watchers' initial lists and the first pass after a takeover.
const START_SLACK_SECS: f64 = 4.0;

struct Ctl {
    id: String,
    proc: KillOnDrop,
    log: PathBuf,
}

fn start(kube: &tests::kube::KubeApi, nb: &str, dir: &Path, id: &str) -> Ctl {
    let log = dir.join(format!("{id}.log"));
    let out = std::fs::File::create(&log).expect("controller log");
    let err = out.try_clone().expect("controller log");
    let child = std::process::Command::new(tests::workspace_bin("zstack-ovnkube-controller"))
        .args(["--nb", nb, "--kubeconfig"])
        .arg(kube.kubeconfig_path())
        .args(["--leader-elect", "--leader-elect-namespace", NS])
        .args([
            "--leader-elect-lease-name",
            LEASE,
            "--leader-elect-identity",
            id,
        ])
        .args(["--leader-elect-lease-duration", &LEASE_SECS.to_string()])
        .args(["--leader-elect-renew-deadline", &RENEW_SECS.to_string()])
        .args(["--leader-elect-retry-period", &RETRY_SECS.to_string()])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("POD_NAME")
        .env_remove("POD_NAMESPACE")
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("start zstack-ovnkube-controller");
    Ctl {
        id: id.to_string(),
        proc: KillOnDrop(child),
        log,
    }
}

impl Ctl {
    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.proc.0.id()).expect("pid"))
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The bound `--metrics-addr` from the log line.
    async fn addr(&self) -> SocketAddr {
        eventually(
            &format!("{}'s metrics address in its log", self.id),
            Duration::from_secs(20),
            || async {
                let text = self.log_text();
                let rest = text.split("metrics listening on http://").nth(1)?;
                rest.split("/metrics").next()?.parse().ok()
            },
        )
        .await
    }
}

/// `GET path` → (status, body).
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut c = tokio::net::TcpStream::connect(addr).await.ok()?;
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    c.read_to_string(&mut out).await.ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, out.split_once("\r\n\r\n")?.1.to_string()))
}

/// The value of a metric: `name` is the name with its labels as exposed, e.g.
/// `x_total` or `x{subnet="main"}`.
async fn metric(addr: SocketAddr, name: &str) -> Option<f64> {
    let (_, text) = get(addr, "/metrics").await?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.trim().parse().ok())
}

async fn holder(leases: &Api<Lease>) -> Option<(String, i32)> {
    let spec = leases.get(LEASE).await.ok()?.spec?;
    let h = spec.holder_identity.filter(|h| !h.is_empty())?;
    Some((h, spec.lease_transitions.unwrap_or(0)))
}

fn pod_json(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "busybox"}]}})
}

/// The pod's first address once annotated.
async fn address(pods: &Api<Pod>, name: &str) -> Option<String> {
    let p = pods.get(name).await.ok()?;
    let a = p.metadata.annotations?.get(POD_NETWORKS).cloned()?;
    decode_pod_networks(&a).ok()?.ip_addresses.first().cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_takeover_on_kill_and_release_on_term() {
    let mut bins = vec!["etcd"];
    bins.extend_from_slice(tests::OVSDB_BINS);
    if !tests::require_real("control_leader_one_leader_takeover_and_release", &bins) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("cleader");
    let dir = s.dir.path();
    let KubeAndOvn {
        kube_api,
        client,
        central: _central,
        nb,
    } = KubeAndOvn::start(dir, true).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);

    // Exactly one leads.
    let mut ctls = vec![
        start(&kube_api, &nb, dir, "ctl-a"),
        start(&kube_api, &nb, dir, "ctl-b"),
    ];
    let (leader_id, transitions0) = eventually("a Lease holder", Duration::from_secs(30), || {
        holder(&leases)
    })
    .await;
    let li = ctls
        .iter()
        .position(|c| c.id == leader_id)
        .expect("holder is one of ours");
    let si = 1 - li;
    let (la, sa) = (ctls[li].addr().await, ctls[si].addr().await);
    eventually(
        "leader gauge 1 on the leader",
        Duration::from_secs(20),
        || async { (metric(la, "zstack_ovn_controller_leader").await == Some(1.0)).then_some(()) },
    )
    .await;
    assert_eq!(
        metric(sa, "zstack_ovn_controller_leader").await,
        Some(0.0),
        "the standby's leader gauge"
    );
    assert_eq!(get(sa, "/healthz").await, Some((200, "ok\n".into())));
    let standby_ready = eventually("the standby's /readyz", Duration::from_secs(10), || async {
        get(sa, "/readyz").await.filter(|(c, _)| *c == 200)
    })
    .await;
    assert_eq!(
        standby_ready.1.trim(),
        format!("standby: leader is {leader_id}")
    );

    // Pods while both run: addresses from the leader only.
    let subnets: Api<Subnet> = Api::all(client.clone());
    create(
        &subnets,
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "main"}, "spec": {"cidr": "10.2.0.0/16", "default": true}}),
    )
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    create(
        &nodes,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node1"}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut names: Vec<String> = (0..6).map(|i| format!("p{i}")).collect();
    for n in &names {
        create(&pods, pod_json(n)).await;
    }
    let mut seen = BTreeSet::new();
    for n in &names {
        let a = eventually(&format!("{n}'s address"), Duration::from_secs(30), || {
            address(&pods, n)
        })
        .await;
        assert!(seen.insert(a.clone()), "address {a} given twice");
    }
    let leader_ready = eventually("the leader's /readyz", Duration::from_secs(10), || async {
        get(la, "/readyz").await.filter(|(c, _)| *c == 200)
    })
    .await;
    assert_eq!(leader_ready.1.trim(), "leader: synced");
    assert!(
        metric(la, "zstack_ovn_controller_nb_transactions_total")
            .await
            .unwrap_or(0.0)
            > 0.0
    );
    assert_eq!(
        metric(sa, "zstack_ovn_controller_nb_transactions_total").await,
        Some(0.0),
        "the standby wrote to the NB"
    );
    // the leader's per-Subnet usage counts the pods' addresses; the standby serves none
    eventually(
        "the leader's zstack_ovn_subnet_addresses_used{subnet=\"main\"} = 6",
        Duration::from_secs(10),
        || async {
            (metric(la, r#"zstack_ovn_subnet_addresses_used{subnet="main"}"#).await == Some(6.0))
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        metric(sa, r#"zstack_ovn_subnet_addresses_used{subnet="main"}"#).await,
        None,
        "the standby reports Subnet usage"
    );
    assert_eq!(holder(&leases).await.map(|h| h.0), Some(leader_id.clone()));

    // SIGKILL the leader: the standby takes over and reconciles a new pod.
    let killed = Instant::now();
    kill(ctls[li].pid(), Signal::SIGKILL).expect("SIGKILL the leader");
    create(&pods, pod_json("after-kill")).await;
    let new_id = ctls[si].id.clone();
    let (_, transitions1) = eventually(
        "the standby holds the Lease",
        Duration::from_secs(20),
        || async { holder(&leases).await.filter(|(h, _)| *h == new_id) },
    )
    .await;
    let to_lease = killed.elapsed();
    let a = eventually("after-kill's address", Duration::from_secs(30), || {
        address(&pods, "after-kill")
    })
    .await;
    let to_reconciled = killed.elapsed();
    names.push("after-kill".into());
    println!(
        "takeover after SIGKILL: Lease held after {:.2} s, new pod annotated after {:.2} s \
         (lease {LEASE_SECS} s, retry {RETRY_SECS} s)",
        to_lease.as_secs_f64(),
        to_reconciled.as_secs_f64()
    );
    assert!(
        seen.insert(a.clone()),
        "address {a} given twice after the takeover"
    );
    assert!(
        to_lease.as_secs_f64() <= LEASE_SECS + 2.0 * RETRY_SECS + 1.0,
        "Lease taken after {to_lease:?}"
    );
    assert!(
        to_reconciled.as_secs_f64() <= LEASE_SECS + 2.0 * RETRY_SECS + START_SLACK_SECS,
        "reconciled after {to_reconciled:?}"
    );
    assert!(
        transitions1 > transitions0,
        "leaseTransitions {transitions0} → {transitions1}"
    );
    let log = ctls[si].log_text();
    assert!(log.contains("became leader"), "{log}");
    assert!(
        log.contains(&format!("standby: leader is {leader_id}")),
        "{log}"
    );

    // SIGTERM: the leader releases, a fresh standby takes over at once.
    ctls.push(start(&kube_api, &nb, dir, "ctl-c"));
    let ca = ctls[2].addr().await;
    eventually("ctl-c stands by", Duration::from_secs(20), || async {
        get(ca, "/readyz")
            .await
            .filter(|(c, b)| *c == 200 && b.contains("standby"))
    })
    .await;
    let termed = Instant::now();
    kill(ctls[si].pid(), Signal::SIGTERM).expect("SIGTERM the leader");
    eventually("ctl-c holds the Lease", Duration::from_secs(20), || async {
        holder(&leases).await.filter(|(h, _)| h == "ctl-c")
    })
    .await;
    let to_release = termed.elapsed();
    println!(
        "takeover after SIGTERM (released Lease): {:.2} s (lease {LEASE_SECS} s)",
        to_release.as_secs_f64()
    );
    assert!(
        to_release.as_secs_f64() < LEASE_SECS / 2.0,
        "a released Lease should be taken well before its duration: {to_release:?}"
    );
    let status = eventually(
        "the SIGTERMed leader exits",
        Duration::from_secs(10),
        || {
            let st = ctls[si].proc.0.try_wait().ok().flatten();
            async move { st }
        },
    )
    .await;
    assert!(status.success(), "SIGTERMed leader exited with {status}");
    create(&pods, pod_json("after-term")).await;
    let a = eventually("after-term's address", Duration::from_secs(30), || {
        address(&pods, "after-term")
    })
    .await;
    assert!(
        seen.insert(a.clone()),
        "address {a} given twice after the release"
    );
    eventually(
        "leader gauge 1 on ctl-c",
        Duration::from_secs(10),
        || async { (metric(ca, "zstack_ovn_controller_leader").await == Some(1.0)).then_some(()) },
    )
    .await;

    // Another identity writes the Lease (as a partitioned leader's successor would): ctl-c
    // sees it at its next renewal, stops and exits non-zero.
    let mut lease = leases.get(LEASE).await.expect("get Lease");
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = Some("intruder".into());
        spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        ));
    }
    leases
        .replace(LEASE, &Default::default(), &lease)
        .await
        .expect("write the intruder into the Lease");
    let status = eventually(
        "ctl-c exits after losing the Lease",
        Duration::from_secs(10),
        || {
            let st = ctls[2].proc.0.try_wait().ok().flatten();
            async move { st }
        },
    )
    .await;
    assert!(
        !status.success(),
        "ctl-c exited with {status} after losing the Lease"
    );
    let log = ctls[2].log_text();
    assert!(
        log.contains("lost leadership") && log.contains("held by intruder"),
        "{log}"
    );
}

/// Sends SIGCONT to a stopped process when dropped (the test's end, however it ends).
struct ContOnDrop(Pid);

impl Drop for ContOnDrop {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_within_the_renew_deadline() {
    let mut bins = vec!["etcd"];
    bins.extend_from_slice(tests::OVSDB_BINS);
    if !tests::require_real("control_leader_cannot_renew_stops", &bins) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("cleader-renew");
    let dir = s.dir.path();
    let KubeAndOvn {
        kube_api,
        client,
        central: _central,
        nb,
    } = KubeAndOvn::start(dir, true).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let mut ctl = start(&kube_api, &nb, dir, "ctl-a");
    eventually("ctl-a holds the Lease", Duration::from_secs(30), || async {
        holder(&leases).await.filter(|(h, _)| h == "ctl-a")
    })
    .await;
    let addr = ctl.addr().await;
    eventually("ctl-a leads", Duration::from_secs(20), || async {
        (metric(addr, "zstack_ovn_controller_leader").await == Some(1.0)).then_some(())
    })
    .await;

    // The apiserver stops answering: no renewal can succeed.
    let apiserver =
        Pid::from_raw(i32::try_from(kube_api.pids().1.expect("kube-apiserver runs")).expect("pid"));
    kill(apiserver, Signal::SIGSTOP).expect("SIGSTOP kube-apiserver");
    let _cont = ContOnDrop(apiserver);
    let stopped = Instant::now();
    let status = eventually("ctl-a exits", Duration::from_secs(15), || {
        let st = ctl.proc.0.try_wait().ok().flatten();
        async move { st }
    })
    .await;
    let after = stopped.elapsed();
    println!(
        "leader without the apiserver exited after {:.2} s (renew deadline {RENEW_SECS} s, retry {RETRY_SECS} s)",
        after.as_secs_f64()
    );
    assert!(!status.success(), "ctl-a exited with {status}");
    // the last renewal was at most a retry period before the stop
    assert!(
        after.as_secs_f64() <= RENEW_SECS + RETRY_SECS + 1.0,
        "exited after {after:?}"
    );
    let log = ctl.log_text();
    assert!(
        log.contains("lost leadership") && log.contains("renew deadline"),
        "{log}"
    );
}
