//! Events through kube-runtime's `Recorder` on a real kube-apiserver 1.20 + etcd, from
//! both writers: the controller's Warning events (`control::source::kube::KubeWriter`, on
//! a Service) and the node agent's (`dataplane::agent::report::KubeEvents`, on a Node and a Pod).
//! Each shows up, with its reason and message, in the core `v1` Event list (`kubectl get
//! events`); those about namespaced objects are `events.k8s.io/v1` Events where a repeat
//! of the same message is counted on the same Event and a new message gets a new Event.
//! (A Node's events are `v1` Events here: kube-apiserver 1.20 refuses `events.k8s.io`
//! Events about cluster-scoped objects outside `kube-system`.)

use std::time::Duration;

use control::source::Writer;
use control::source::kube::KubeWriter;
use dataplane::agent::report::{AgentEvent, EventType, KubeEvents, Subject};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use tests::kube_objects::eventually;

/// The `events.k8s.io/v1` Events in `namespace` about `name` with `reason`.
async fn events_about(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    reason: &str,
) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    api.list(&Default::default())
        .await
        .expect("list events.k8s.io/v1 Events")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

/// The core `v1` view of the same Event: (type, message, reporting component).
async fn core_event(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    reason: &str,
    message: &str,
) -> Option<CoreEvent> {
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    api.list(&Default::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find(|e| {
            e.involved_object.name.as_deref() == Some(name)
                && e.reason.as_deref() == Some(reason)
                && e.message.as_deref() == Some(message)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorder_events_on_real_kube_apiserver() {
    if !tests::require_real(
        "events_kube_recorder_events_on_real_kube_apiserver",
        &["etcd"],
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("kevt");
    let kube_api = tests::kube::KubeApi::start(s.dir.path())
        .await
        .expect("etcd + kube-apiserver");
    let client = kube_api.client().await.expect("kube client");
    let within = Duration::from_secs(10);

    // the controller: a Warning on a Service (the object need not exist), twice the same
    // message, then another
    let writer = KubeWriter::new(client.clone());
    let reason = control::services::SERVICE_PROBLEM;
    for msg in ["port 80 twice", "port 80 twice", "no ports"] {
        writer
            .service_event("default", "web", msg)
            .await
            .unwrap_or_else(|e| panic!("service event {msg:?}: {e}"));
    }
    let evs = events_about(&client, "default", "web", reason).await;
    assert_eq!(evs.len(), 2, "one Event per message: {evs:#?}");
    let first = evs
        .iter()
        .find(|e| e.note.as_deref() == Some("port 80 twice"))
        .expect("the first message's Event");
    assert_eq!(
        first.series.as_ref().map(|s| s.count),
        Some(2),
        "{first:#?}"
    );
    assert_eq!(first.type_.as_deref(), Some("Warning"));
    assert_eq!(
        first.reporting_controller.as_deref(),
        Some(control::source::kube::FIELD_MANAGER)
    );
    let core = eventually("the core v1 view", within, || {
        core_event(&client, "default", "web", reason, "no ports")
    })
    .await;
    assert_eq!(core.involved_object.kind.as_deref(), Some("Service"));
    assert_eq!(core.type_.as_deref(), Some("Warning"));

    // the node agent: a Node event (into `default`) and a Pod event (into its namespace)
    let agent = KubeEvents::new(client.clone());
    let node_ev = AgentEvent {
        subject: Subject::Node("n1".into()),
        event_type: EventType::Normal,
        reason: "DatapathSelected".into(),
        message: "datapath afxdp".into(),
        node: "n1".into(),
    };
    let pod_ev = AgentEvent {
        subject: Subject::Pod {
            namespace: "kube-system".into(),
            name: "p1".into(),
        },
        event_type: EventType::Warning,
        reason: "DatapathFallback".into(),
        message: "no hugepages".into(),
        node: "n1".into(),
    };
    for ev in [&node_ev, &node_ev, &pod_ev, &pod_ev] {
        agent.publish(ev).await.expect("agent event");
    }
    let core = eventually("the Node event's core v1 view", within, || {
        core_event(
            &client,
            "default",
            "n1",
            "DatapathSelected",
            "datapath afxdp",
        )
    })
    .await;
    assert_eq!(core.involved_object.kind.as_deref(), Some("Node"));
    let evs = events_about(&client, "kube-system", "p1", "DatapathFallback").await;
    assert_eq!(evs.len(), 1, "{evs:#?}");
    assert_eq!(evs[0].series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(
        evs[0].reporting_controller.as_deref(),
        Some(dataplane::agent::report::COMPONENT)
    );
    assert_eq!(evs[0].reporting_instance.as_deref(), Some("n1"));
    let core = eventually("the Pod event's core v1 view", within, || {
        core_event(
            &client,
            "kube-system",
            "p1",
            "DatapathFallback",
            "no hugepages",
        )
    })
    .await;
    assert_eq!(core.type_.as_deref(), Some("Warning"));
    assert_eq!(core.involved_object.kind.as_deref(), Some("Pod"));
    assert_eq!(
        core.involved_object.namespace.as_deref(),
        Some("kube-system")
    );
}
