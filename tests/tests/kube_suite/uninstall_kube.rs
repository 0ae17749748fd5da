//! "Uninstall only when asked" on a real kube-apiserver 1.20 + etcd: the agent's marker
//! watch ([`dataplane::uninstall::watch_marker`]), the chart's pre-delete hook
//! ([`dataplane::uninstall::hook::run`]) and the SIGTERM decision's DaemonSet question
//! ([`dataplane::uninstall::read_daemonset`]), in-process. Pod objects stand for the agent
//! pods (no kubelet: they stay Pending on the node named in their spec).
//!
//! - `marker_watch_hook_and_daemonset_question`: a marker there before the agent started
//!   is ignored (no flag, no acknowledgement) even when modified; a marker created while it
//!   runs is recorded (flag file with its UID) and acknowledged; the hook replaces a leftover
//!   marker, waits for the agents of the release's node pods only and deletes the marker;
//!   with an agent pod whose node never answers, the hook returns at its timeout naming
//!   that node; the DaemonSet question answers Present, Deleting, Gone and Hidden(403) and
//!   the decision follows.
//! - `chart_rbac_is_enough_and_no_more`: the chart's own Roles (rendered by Helm), used
//!   through impersonated ServiceAccounts: the agent's watch and acknowledgement and the
//!   hook work with the chart's arguments; the agent cannot patch another ConfigMap, the
//!   hook cannot delete one.
//! - `external_hook_stops_the_controller_first`: the external profile's hook Job (the NB
//!   step after the hook), and under its Role the controller's Deployment scaled to 0;
//!   the stop returns only once the last controller pod is gone (deleted here, as the
//!   ReplicaSet controller would), fails at its timeout while one stays, and cannot scale
//!   another Deployment.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::uninstall::hook::{self, HookConfig};
use dataplane::uninstall::marker::{self, MarkerWatch, UninstallSignal};
use dataplane::uninstall::stop_controller::{self, Stopped};
use dataplane::uninstall::{DaemonSetState, Decision, decide, read_daemonset, watch_marker};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tests::kube_objects::eventually;

const WITHIN: Duration = Duration::from_secs(20);

fn marker_obj(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("configmap")
}

/// A pod standing for an agent (or another component) of `release` on `node`.
async fn pod(pods: &Api<Pod>, name: &str, release: &str, component: &str, node: Option<&str>) {
    let mut spec = json!({"containers": [{"name": "c", "image": "x"}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "app.kubernetes.io/name": "zstack-ovn",
            "app.kubernetes.io/instance": release,
            "app.kubernetes.io/component": component,
        }},
        "spec": spec,
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &p)
        .await
        .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
}

/// Starts an agent's marker watch; returns its signal and task.
fn start_watch(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    flag_dir: &Path,
) -> (Arc<UninstallSignal>, tokio::task::JoinHandle<()>) {
    let signal = Arc::new(UninstallSignal::default());
    let task = tokio::spawn(watch_marker(
        client.clone(),
        MarkerWatch {
            namespace: ns.into(),
            name: name.into(),
            node: node.into(),
            flag_dir: Some(flag_dir.to_path_buf()),
        },
        signal.clone(),
    ));
    (signal, task)
}

async fn wait_listed(signal: &UninstallSignal, what: &str) {
    eventually(what, WITHIN, || async {
        signal.progress().listed.then_some(())
    })
    .await;
}

/// The annotations of the marker, or None when it is absent.
async fn annotations(cms: &Api<ConfigMap>, name: &str) -> Option<BTreeMap<String, String>> {
    cms.get_opt(name)
        .await
        .expect("get marker")
        .map(|cm| cm.metadata.annotations.unwrap_or_default())
}

fn nodes(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marker_watch_hook_and_daemonset_question() {
    if !tests::require_real(
        "uninstall_kube_marker_watch_hook_and_daemonset_question",
        &["etcd"],
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("unin");
    let kube_api = tests::kube::KubeApi::start(s.dir.path())
        .await
        .expect("etcd + kube-apiserver");
    let client = kube_api.client().await.expect("kube client");
    let ns = "zovn-uninstall";
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
        )
        .await
        .expect("namespace");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let name = "zs-zstack-ovn-uninstalling";
    let ack1 = api::keys::uninstall_ack_key("n1");

    // 1. a marker there before the agent starts is stale: not recorded, not acknowledged,
    //    also when it changes while the agent runs
    let old = cms
        .create(&PostParams::default(), &marker_obj(name))
        .await
        .expect("stale marker");
    let old_uid = old.metadata.uid.clone().expect("uid");
    let flag_a = s.dir.path().join("flag-a");
    let (sig_a, task_a) = start_watch(&client, ns, name, "n1", &flag_a);
    wait_listed(&sig_a, "the first list of the marker watch").await;
    assert_eq!(sig_a.progress().stale, vec![old_uid.clone()]);
    let before = sig_a.progress().events;
    cms.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"poke": "1"}}})),
    )
    .await
    .expect("modify the stale marker");
    eventually("the watch to handle the modification", WITHIN, || async {
        (sig_a.progress().events > before).then_some(())
    })
    .await;
    assert_eq!(sig_a.get(), None, "a stale marker was taken as a request");
    assert_eq!(
        marker::read_flag(&flag_a),
        None,
        "flag written for a stale marker"
    );
    let a = annotations(&cms, name)
        .await
        .expect("stale marker still there");
    assert!(!a.contains_key(&ack1), "stale marker acknowledged: {a:?}");

    // 2. replaced by a new object (a new UID) while the agent runs: a request, recorded in
    //    the flag file (before) and acknowledged with a time
    cms.delete(name, &DeleteParams::default())
        .await
        .expect("delete stale marker");
    let new = cms
        .create(&PostParams::default(), &marker_obj(name))
        .await
        .expect("new marker");
    let new_uid = new.metadata.uid.clone().expect("uid");
    assert_ne!(new_uid, old_uid);
    let acked_at = eventually("n1's acknowledgement of the new marker", WITHIN, || async {
        annotations(&cms, name)
            .await
            .and_then(|a| a.get(&ack1).cloned())
    })
    .await;
    assert!(
        acked_at.parse::<k8s_openapi::jiff::Timestamp>().is_ok(),
        "acknowledgement value {acked_at:?} is not an RFC 3339 time"
    );
    let flag = marker::read_flag(&flag_a).expect("flag file written before the ack");
    assert_eq!(flag.uid, new_uid);
    assert_eq!(flag.marker, format!("{ns}/{name}"));
    assert_eq!(sig_a.get().map(|r| r.uid), Some(new_uid.clone()));
    assert!(flag_a.join(marker::FLAG_FILE).is_file());
    task_a.abort();

    // 3. the hook: agent pods of the release (component node and node-<pool>) on n1, n2;
    //    pods it must not wait for: the controller, an unscheduled agent, another release
    pod(&pods, "agent-n1", "zs", "node", Some("n1")).await;
    pod(&pods, "agent-n2", "zs", "node-dpdk", Some("n2")).await;
    pod(&pods, "controller-n3", "zs", "controller", Some("n3")).await;
    pod(&pods, "agent-unscheduled", "zs", "node", None).await;
    pod(&pods, "other-release-n4", "other", "node", Some("n4")).await;
    // the agents start while the previous marker is still there: stale for both
    let (flag1, flag2) = (s.dir.path().join("flag-1"), s.dir.path().join("flag-2"));
    let (sig1, task1) = start_watch(&client, ns, name, "n1", &flag1);
    let (sig2, task2) = start_watch(&client, ns, name, "n2", &flag2);
    wait_listed(&sig1, "agent n1's first list").await;
    wait_listed(&sig2, "agent n2's first list").await;
    assert_eq!(sig1.progress().stale, vec![new_uid.clone()]);
    let cfg = HookConfig {
        namespace: ns.into(),
        marker: name.into(),
        marker_labels: BTreeMap::from([("app.kubernetes.io/instance".into(), "zs".into())]),
        agents_selector: "app.kubernetes.io/name=zstack-ovn,app.kubernetes.io/instance=zs".into(),
        agents_component: "node".into(),
        timeout: Duration::from_secs(30),
        poll: Duration::from_millis(200),
    };
    let t0 = Instant::now();
    let report = hook::run(client.clone(), &cfg).await.expect("hook");
    let took = t0.elapsed();
    assert_eq!(report.acknowledged, nodes(&["n1", "n2"]), "{report:?}");
    assert!(report.missing.is_empty(), "{report:?}");
    assert!(report.marker_deleted);
    assert!(
        took < cfg.timeout,
        "the hook waited for its timeout: {took:?}"
    );
    assert_ne!(
        report.marker_uid, new_uid,
        "the leftover marker was not replaced"
    );
    assert_eq!(annotations(&cms, name).await, None, "marker left behind");
    for (sig, dir) in [(&sig1, &flag1), (&sig2, &flag2)] {
        assert_eq!(
            marker::read_flag(dir).map(|f| f.uid),
            Some(report.marker_uid.clone()),
            "{}",
            dir.display()
        );
        assert_eq!(sig.get().map(|r| r.uid), Some(report.marker_uid.clone()));
    }

    // 4. an agent pod on n5 whose agent never answers: the hook returns at its timeout,
    //    names n5, still deletes the marker; the marker carries the given labels meanwhile
    pod(&pods, "agent-n5", "zs", "node", Some("n5")).await;
    let short = HookConfig {
        timeout: Duration::from_secs(4),
        ..cfg.clone()
    };
    let t0 = Instant::now();
    let running = tokio::spawn({
        let (client, short) = (client.clone(), short.clone());
        async move { hook::run(client, &short).await }
    });
    let labels = eventually("the hook's marker", WITHIN, || async {
        cms.get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|cm| cm.metadata.labels)
    })
    .await;
    assert_eq!(labels, cfg.marker_labels);
    let report = running.await.expect("hook task").expect("hook");
    let took = t0.elapsed();
    assert_eq!(report.missing, nodes(&["n5"]), "{report:?}");
    assert_eq!(report.acknowledged, nodes(&["n1", "n2"]), "{report:?}");
    assert!(
        took >= short.timeout,
        "returned before its timeout: {took:?}"
    );
    assert!(took < short.timeout + Duration::from_secs(10), "{took:?}");
    assert!(report.marker_deleted);
    assert_eq!(annotations(&cms, name).await, None, "marker left behind");
    let msg = hook::missing_message(&report.missing);
    assert!(
        msg.contains("n5") && msg.contains("docs/install.md"),
        "{msg}"
    );
    task1.abort();
    task2.abort();

    // 5. the DaemonSet question at SIGTERM, and the decision it leads to with a marker seen
    let dss: Api<k8s_openapi::api::apps::v1::DaemonSet> = Api::namespaced(client.clone(), ns);
    let ds: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "zs-zstack-ovn-node"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}}
        }
    }))
    .expect("daemonset");
    dss.create(&PostParams::default(), &ds)
        .await
        .expect("create DaemonSet");
    let state = read_daemonset(client.clone(), ns, "zs-zstack-ovn-node").await;
    assert_eq!(state, DaemonSetState::Present);
    assert!(matches!(decide(Some("u"), &state), Decision::Keep(_)));
    assert!(matches!(decide(None, &state), Decision::Keep(_)));
    // foreground deletion: no garbage collector runs here, so it stays "being deleted"
    dss.delete("zs-zstack-ovn-node", &DeleteParams::foreground())
        .await
        .expect("delete DaemonSet");
    let state = read_daemonset(client.clone(), ns, "zs-zstack-ovn-node").await;
    assert_eq!(state, DaemonSetState::Deleting);
    assert!(matches!(decide(Some("u"), &state), Decision::Clean(_)));
    assert!(matches!(decide(None, &state), Decision::Keep(_)));
    let state = read_daemonset(client.clone(), ns, "no-such-daemonset").await;
    assert_eq!(state, DaemonSetState::Gone);
    assert!(matches!(decide(Some("u"), &state), Decision::Clean(_)));
    assert!(matches!(decide(None, &state), Decision::Keep(_)));
    // a ServiceAccount without any role: 403, cannot tell, the marker decides
    let nobody = impersonating(&kube_api, ns, "nobody").await;
    let state = read_daemonset(nobody, ns, "zs-zstack-ovn-node").await;
    assert_eq!(state, DaemonSetState::Hidden(403));
    assert!(matches!(decide(Some("u"), &state), Decision::Clean(_)));
    assert!(matches!(decide(None, &state), Decision::Keep(_)));
}

/// A client acting as the ServiceAccount `ns/name` (impersonated by the admin).
async fn impersonating(kube_api: &tests::kube::KubeApi, ns: &str, name: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kube_api.kubeconfig_path()).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{ns}:{name}"));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{ns}"),
        "system:authenticated".into(),
    ]);
    kube::Client::try_from(config).expect("client")
}

/// Creates a rendered RBAC object (ServiceAccount, Role, RoleBinding, ClusterRole,
/// ClusterRoleBinding) as the admin.
async fn create_rbac(client: &kube::Client, ns: &str, o: &Value) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let pp = PostParams::default();
    let name = o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let r = match o["kind"].as_str().unwrap_or_default() {
        "ServiceAccount" => Api::<ServiceAccount>::namespaced(client.clone(), ns)
            .create(&pp, &serde_json::from_value(o.clone()).expect("sa"))
            .await
            .map(drop),
        "Role" => Api::<Role>::namespaced(client.clone(), ns)
            .create(&pp, &serde_json::from_value(o.clone()).expect("role"))
            .await
            .map(drop),
        "RoleBinding" => Api::<RoleBinding>::namespaced(client.clone(), ns)
            .create(&pp, &serde_json::from_value(o.clone()).expect("rb"))
            .await
            .map(drop),
        "ClusterRole" => Api::<ClusterRole>::all(client.clone())
            .create(&pp, &serde_json::from_value(o.clone()).expect("cr"))
            .await
            .map(drop),
        "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(client.clone())
            .create(&pp, &serde_json::from_value(o.clone()).expect("crb"))
            .await
            .map(drop),
        _ => return,
    };
    r.unwrap_or_else(|e| panic!("create {} {name}: {e}", o["kind"]));
}

/// `--flag=value` from a container's args.
fn arg(args: &[String], flag: &str) -> String {
    let p = format!("{flag}=");
    args.iter()
        .find_map(|a| a.strip_prefix(&p))
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_rbac_is_enough_and_no_more() {
    let test = "uninstall_kube_chart_rbac_is_enough_and_no_more";
    let Some(helm) = tests::helm::require_helm(test) else {
        return;
    };
    if !tests::require_real(test, &["etcd"]) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("unrb");
    let kube_api = tests::kube::KubeApi::start(s.dir.path())
        .await
        .expect("etcd + kube-apiserver");
    let admin = kube_api.client().await.expect("kube client");
    let ns = tests::helm::NAMESPACE;
    let objs = tests::helm::render_profile(&helm, "single");
    for o in &objs {
        create_rbac(&admin, ns, o).await;
    }
    let job = tests::helm::named(&objs, "Job", "zs-zstack-ovn-uninstall-hook").expect("hook Job");
    let hook_args = tests::helm::args(tests::helm::container(job, "uninstall-hook"));
    let marker_name = arg(&hook_args, "--marker");
    let cfg = HookConfig {
        namespace: ns.into(),
        marker: marker_name.clone(),
        marker_labels: hook::parse_labels(&arg(&hook_args, "--marker-labels")).expect("labels"),
        agents_selector: arg(&hook_args, "--agents-selector"),
        agents_component: arg(&hook_args, "--agents-component"),
        timeout: Duration::from_secs(30),
        poll: Duration::from_millis(200),
    };
    // one agent pod of the release, as the chart labels it
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    pod(
        &pods,
        "zs-zstack-ovn-node-abcde",
        tests::helm::RELEASE,
        "node",
        Some("n1"),
    )
    .await;

    let agent = impersonating(&kube_api, ns, "zs-zstack-ovn-node").await;
    let hook_client = impersonating(&kube_api, ns, "zs-zstack-ovn-uninstall-hook").await;
    let flag = s.dir.path().join("flag");
    let (sig, task) = start_watch(&agent, ns, &marker_name, "n1", &flag);
    // the first list only succeeds when the Role lets the field-selected list through
    wait_listed(&sig, "the agent's first list under the chart's Role").await;
    let report = hook::run(hook_client.clone(), &cfg)
        .await
        .expect("hook under the chart's Role");
    assert_eq!(report.acknowledged, nodes(&["n1"]), "{report:?}");
    assert!(
        report.missing.is_empty() && report.marker_deleted,
        "{report:?}"
    );
    assert_eq!(
        marker::read_flag(&flag).map(|f| f.uid),
        Some(report.marker_uid.clone())
    );
    task.abort();
    // the marker's labels are the chart's
    assert_eq!(
        cfg.marker_labels
            .get("app.kubernetes.io/instance")
            .map(String::as_str),
        Some(tests::helm::RELEASE)
    );

    // no more than that: another ConfigMap is out of reach of both
    let cms_admin: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    cms_admin
        .create(&PostParams::default(), &marker_obj("coredns"))
        .await
        .expect("another configmap");
    let as_agent: Api<ConfigMap> = Api::namespaced(agent.clone(), ns);
    let refused = as_agent
        .patch(
            "coredns",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"x": "y"}}})),
        )
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "the agent patched another ConfigMap: {refused:?}"
    );
    let listed = as_agent.list(&Default::default()).await;
    assert!(
        matches!(&listed, Err(kube::Error::Api(s)) if s.code == 403),
        "the agent listed every ConfigMap: {listed:?}"
    );
    let as_hook: Api<ConfigMap> = Api::namespaced(hook_client, ns);
    let refused = as_hook.delete("coredns", &DeleteParams::default()).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "the hook deleted another ConfigMap: {refused:?}"
    );
    // the agent's DaemonSet question still works with the chart's ClusterRole
    let state = read_daemonset(agent, ns, "zs-zstack-ovn-node").await;
    assert_eq!(state, DaemonSetState::Gone, "{state}");
}

/// A Deployment `name` whose pods carry `component` of release `zs` (as the chart's).
async fn deployment(client: &kube::Client, ns: &str, name: &str, component: &str) {
    let labels = json!({
        "app.kubernetes.io/name": "zstack-ovn",
        "app.kubernetes.io/instance": tests::helm::RELEASE,
        "app.kubernetes.io/component": component,
    });
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }))
    .expect("deployment");
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap_or_else(|e| panic!("create deployment {name}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_hook_stops_the_controller_first() {
    let test = "uninstall_kube_external_hook_stops_the_controller_first";
    let Some(helm) = tests::helm::require_helm(test) else {
        return;
    };
    if !tests::require_real(test, &["etcd"]) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("unst");
    let kube_api = tests::kube::KubeApi::start(s.dir.path())
        .await
        .expect("etcd + kube-apiserver");
    let admin = kube_api.client().await.expect("kube client");
    let ns = tests::helm::NAMESPACE;
    let objs = tests::helm::render_profile(&helm, "external-tls");
    for o in &objs {
        create_rbac(&admin, ns, o).await;
    }
    // the Job: the hook first (an init container, told to stop the controller), then the
    // NB step with the controller's NB flags
    let job = tests::helm::named(&objs, "Job", "zs-zstack-ovn-uninstall-hook").expect("hook Job");
    let spec = &job["spec"]["template"]["spec"];
    assert_eq!(
        spec["initContainers"][0]["name"], "uninstall-hook",
        "{spec:#}"
    );
    let hook_args: Vec<String> =
        serde_json::from_value(spec["initContainers"][0]["args"].clone()).expect("args");
    let controller = arg(&hook_args, "--stop-deployment");
    assert_eq!(controller, "zs-zstack-ovn-controller");
    let nb_step = tests::helm::container(job, "uninstall-nb");
    let nb_args = tests::helm::args(nb_step);
    assert!(nb_args.iter().any(|a| a == "--uninstall-nb"), "{nb_args:?}");
    let deploy = tests::helm::named(&objs, "Deployment", "zs-zstack-ovn-controller")
        .expect("controller Deployment");
    let controller_args = tests::helm::args(tests::helm::container(deploy, "controller"));
    for flag in ["--mode", "--nb", "--nb-ca", "--nb-cert", "--nb-key"] {
        assert_eq!(
            arg(&nb_args, flag),
            arg(&controller_args, flag),
            "{flag}: the NB step talks to another NB than the controller"
        );
    }
    let ovn_tls = |list: &Value| {
        list.as_array()
            .and_then(|l| l.iter().find(|v| v["name"] == "ovn-tls"))
            .cloned()
    };
    let controller_pod = &deploy["spec"]["template"]["spec"];
    assert_eq!(
        (ovn_tls(&nb_step["volumeMounts"]), ovn_tls(&spec["volumes"])),
        (
            ovn_tls(&tests::helm::container(deploy, "controller")["volumeMounts"]),
            ovn_tls(&controller_pod["volumes"])
        ),
        "the NB step mounts other TLS material than the controller"
    );
    assert!(ovn_tls(&spec["volumes"]).is_some(), "{spec:#}");

    deployment(&admin, ns, &controller, "controller").await;
    deployment(&admin, ns, "coredns", "dns").await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    pod(
        &pods,
        "zs-zstack-ovn-controller-a",
        "zs",
        "controller",
        Some("n1"),
    )
    .await;
    pod(
        &pods,
        "zs-zstack-ovn-controller-b",
        "zs",
        "controller",
        Some("n2"),
    )
    .await;
    let hook_client = impersonating(&kube_api, ns, "zs-zstack-ovn-uninstall-hook").await;

    // a pod that stays: the stop fails at its timeout, naming the Deployment
    let t0 = Instant::now();
    let err = stop_controller::stop(
        hook_client.clone(),
        ns,
        &controller,
        Duration::from_secs(2),
        Duration::from_millis(200),
    )
    .await
    .expect_err("the pods never went");
    assert!(
        err.to_string().contains("zs-zstack-ovn-controller")
            && t0.elapsed() >= Duration::from_secs(1),
        "{err}"
    );
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let replicas = |d: Deployment| d.spec.and_then(|s| s.replicas);
    assert_eq!(
        replicas(deployments.get(&controller).await.expect("get")),
        Some(0),
        "not scaled under the chart's Role"
    );

    // the pods go (as the ReplicaSet controller would delete them): the stop returns
    let running = tokio::spawn({
        let (c, n) = (hook_client.clone(), controller.clone());
        async move { stop_controller::stop(c, ns, &n, WITHIN, Duration::from_millis(100)).await }
    });
    for p in ["zs-zstack-ovn-controller-a", "zs-zstack-ovn-controller-b"] {
        // no kubelet here to finish a graceful deletion
        pods.delete(p, &DeleteParams::default().grace_period(0))
            .await
            .unwrap_or_else(|e| panic!("delete {p}: {e}"));
    }
    let stopped = tokio::time::timeout(WITHIN, running)
        .await
        .expect("the stop returns once the pods are gone")
        .expect("task")
        .expect("stop");
    assert!(matches!(stopped, Stopped::Stopped { .. }), "{stopped:?}");

    // nothing else: another Deployment is out of reach; a missing one is no error
    let refused = stop_controller::stop(
        hook_client.clone(),
        ns,
        "coredns",
        Duration::from_secs(2),
        Duration::from_millis(200),
    )
    .await;
    assert!(
        refused.is_err(),
        "the hook stopped another Deployment: {refused:?}"
    );
    assert_eq!(
        replicas(deployments.get("coredns").await.expect("get")),
        Some(2)
    );
    deployments
        .delete(&controller, &DeleteParams::default())
        .await
        .expect("delete");
    let absent = stop_controller::stop(
        admin,
        ns,
        &controller,
        Duration::from_secs(2),
        Duration::from_millis(200),
    )
    .await
    .expect("absent");
    assert_eq!(absent, Stopped::Absent);
}
