//! The production source: kube-runtime watchers on Subnets, Pods and Nodes, patches
//! through the Kubernetes API, and Warning events through kube-runtime's `Recorder`.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use serde_json::json;
use tokio::sync::mpsc;

use super::convert::{node_info, pod_info};
use super::{Event, Kind, WriteError, Writer};
use crate::crd::{Subnet, SubnetStatus};

pub use super::FIELD_MANAGER;
use super::events::Events;
use super::watch::spawn_watch;

/// Starts the watchers (Subnets, Pods, Nodes, and KubeVirt VirtualMachines where that API
/// exists); their events arrive on `tx` until it is closed.
pub fn spawn_watchers(client: Client, tx: mpsc::UnboundedSender<Event>) {
    spawn_vm_watch(client.clone(), tx.clone());
    super::nad::spawn_watch(client.clone(), tx.clone());
    super::services::spawn_watchers(client.clone(), tx.clone());
    super::netpol::spawn_watchers(client.clone(), tx.clone());
    spawn_watch(
        Api::<Subnet>::all(client.clone()),
        Kind::Subnet,
        tx.clone(),
        |s: Subnet| Event::Subnet(Box::new(s)),
        |s: Subnet| Event::SubnetDeleted(s.metadata.name.unwrap_or_default()),
    );
    spawn_watch(
        Api::<Pod>::all(client.clone()),
        Kind::Pod,
        tx.clone(),
        |p: Pod| Event::Pod(Box::new(pod_info(&p))),
        |p: Pod| {
            Event::PodDeleted(format!(
                "{}/{}",
                p.metadata.namespace.unwrap_or_default(),
                p.metadata.name.unwrap_or_default()
            ))
        },
    );
    spawn_watch(
        Api::<Node>::all(client),
        Kind::Node,
        tx,
        |n: Node| Event::Node(Box::new(node_info(&n))),
        |n: Node| Event::NodeDeleted(n.metadata.name.unwrap_or_default()),
    );
}

/// Watches `kubevirt.io/v1` VirtualMachines when KubeVirt is installed; otherwise reports
/// an empty list once (no VM can exist, so no VM lease is kept beyond its pods). KubeVirt
/// installed later is picked up on the controller's next start.
fn spawn_vm_watch(client: Client, tx: mpsc::UnboundedSender<Event>) {
    tokio::spawn(async move {
        let gvk = kube::api::GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine");
        let resource = match kube::discovery::pinned_kind(&client, &gvk).await {
            Ok((resource, _)) => resource,
            Err(e) => {
                tracing::info!(error = %e, "KubeVirt VirtualMachine API not found; VM leases end with their pods");
                let _ = tx.send(Event::Relist(Kind::Vm));
                let _ = tx.send(Event::Synced(Kind::Vm));
                return;
            }
        };
        let api: Api<kube::api::DynamicObject> = Api::all_with(client, &resource);
        let key = |o: &kube::api::DynamicObject| {
            format!(
                "{}/{}",
                o.metadata.namespace.clone().unwrap_or_default(),
                o.metadata.name.clone().unwrap_or_default()
            )
        };
        let mut stream = watcher::watcher(api, super::watch::watch_config())
            .default_backoff()
            .boxed();
        while let Some(item) = stream.next().await {
            let ev = match item {
                Ok(WatchEvent::Apply(o)) | Ok(WatchEvent::InitApply(o)) => Event::Vm(key(&o)),
                Ok(WatchEvent::Delete(o)) => Event::VmDeleted(key(&o)),
                Ok(WatchEvent::Init) => Event::Relist(Kind::Vm),
                Ok(WatchEvent::InitDone) => Event::Synced(Kind::Vm),
                Err(e) => {
                    tracing::warn!(error = %e, "VirtualMachine watch error; retrying");
                    continue;
                }
            };
            if tx.send(ev).is_err() {
                return;
            }
        }
    });
}

/// Patches through the Kubernetes API; Warning events through kube-runtime's
/// [`Recorder`].
#[derive(Clone)]
pub struct KubeWriter {
    client: Client,
    events: Events,
}

impl KubeWriter {
    pub fn new(client: Client) -> Self {
        KubeWriter {
            events: Events::new(client.clone()),
            client,
        }
    }
}

fn write_error(object: String, e: kube::Error) -> WriteError {
    match &e {
        kube::Error::Api(s) if s.code == 404 => WriteError::NotFound { object },
        _ => WriteError::Failed {
            object,
            detail: e.to_string(),
        },
    }
}

impl Writer for KubeWriter {
    async fn service_event(
        &self,
        namespace: &str,
        name: &str,
        message: &str,
    ) -> Result<(), WriteError> {
        let object = ("v1", "Service", namespace, name);
        let reason = crate::services::SERVICE_PROBLEM;
        self.events
            .warning(object, reason, message)
            .await
            .map_err(|e| write_error(format!("event on service {namespace}/{name}"), e))
    }

    /// A core `v1` Event in `default`, as for Nodes (both are cluster-scoped).
    async fn subnet_event(&self, name: &str, message: &str) -> Result<(), WriteError> {
        let object = ("network.zstack.io/v1", "Subnet", name);
        cluster_scoped_event(
            &self.client,
            object,
            crate::validate::SUBNET_INVALID,
            message,
        )
        .await
        .map_err(|e| write_error(format!("event on subnet {name}"), e))
    }

    /// A core `v1` Event in `default` (an API server of this project's era refuses an
    /// `events.k8s.io` Event about a cluster-scoped Node there with 422, as the node agent
    /// found).
    async fn node_event(&self, name: &str, reason: &str, message: &str) -> Result<(), WriteError> {
        cluster_scoped_event(&self.client, ("v1", "Node", name), reason, message)
            .await
            .map_err(|e| write_error(format!("event on node {name}"), e))
    }

    async fn policy_event(
        &self,
        namespace: &str,
        name: &str,
        message: &str,
    ) -> Result<(), WriteError> {
        super::netpol::create_event(&self.events, namespace, name, message)
            .await
            .map_err(|e| write_error(format!("event on networkpolicy {namespace}/{name}"), e))
    }

    async fn annotate_pod(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), WriteError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({"metadata": {"annotations": annotations}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| write_error(format!("pod {namespace}/{name}"), e))
    }

    async fn annotate_node(
        &self,
        name: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), WriteError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"metadata": {"annotations": annotations}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| write_error(format!("node {name}"), e))
    }

    async fn create_subnet(&self, subnet: &Subnet) -> Result<Subnet, WriteError> {
        let api: Api<Subnet> = Api::all(self.client.clone());
        let name = subnet.metadata.name.clone().unwrap_or_default();
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        match api.create(&params, subnet).await {
            // created meanwhile (our watch is behind): that one stands
            Err(kube::Error::Api(s)) if s.code == 409 => api
                .get(&name)
                .await
                .map_err(|e| write_error(format!("subnet {name}"), e)),
            r => r.map_err(|e| write_error(format!("subnet {name}"), e)),
        }
    }

    async fn subnet_status(&self, name: &str, status: &SubnetStatus) -> Result<(), WriteError> {
        let api: Api<Subnet> = Api::all(self.client.clone());
        // JSON Patch "add" on /status replaces the whole status (a merge patch would keep
        // fields the new status omits, such as a stale `reason`).
        let value = serde_json::to_value(status).map_err(|e| WriteError::Failed {
            object: format!("subnet {name}"),
            detail: e.to_string(),
        })?;
        let patch: json_patch::Patch =
            serde_json::from_value(json!([{"op": "add", "path": "/status", "value": value}]))
                .map_err(|e| WriteError::Failed {
                    object: format!("subnet {name}"),
                    detail: e.to_string(),
                })?;
        api.patch_status(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
            .map(|_| ())
            .map_err(|e| write_error(format!("subnet {name}"), e))
    }
}

/// A core `v1` Warning Event in `default` about the cluster-scoped object
/// `(apiVersion, kind, name)`.
async fn cluster_scoped_event(
    client: &kube::Client,
    (api_version, kind, name): (&str, &str, &str),
    reason: &str,
    message: &str,
) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    let now = k8s_openapi::jiff::Timestamp::now();
    let ev = CoreEvent {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some("default".into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
            name: Some(name.into()),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some("Warning".into()),
        source: Some(EventSource {
            component: Some(super::FIELD_MANAGER.into()),
            host: None,
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..Default::default()
    };
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &ev).await.map(|_| ())
}
