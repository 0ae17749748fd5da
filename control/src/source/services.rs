//! Watches Services and their endpoints on a real kube-apiserver: discovery.k8s.io/v1
//! EndpointSlices where the server has them, core v1 Endpoints otherwise (Kubernetes
//! before 1.21, such as the 1.20 test apiserver, whose v1beta1 slices k8s-openapi no
//! longer models).

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use tokio::sync::mpsc;

use super::watch::spawn_watch;
use super::{Event, Kind};
use crate::services::convert::{endpoints_info, service_info, slice_info};

fn key(ns: Option<String>, name: Option<String>) -> String {
    format!("{}/{}", ns.unwrap_or_default(), name.unwrap_or_default())
}

/// Starts the Service watch and the endpoints watch.
pub fn spawn_watchers(client: Client, tx: mpsc::UnboundedSender<Event>) {
    spawn_watch(
        Api::<Service>::all(client.clone()),
        Kind::Service,
        tx.clone(),
        |s: Service| Event::Service(Box::new(service_info(&s))),
        |s: Service| Event::ServiceDeleted(key(s.metadata.namespace, s.metadata.name)),
    );
    tokio::spawn(async move {
        let gvk = GroupVersionKind::gvk("discovery.k8s.io", "v1", "EndpointSlice");
        if kube::discovery::pinned_kind(&client, &gvk).await.is_ok() {
            spawn_watch(
                Api::<EndpointSlice>::all(client),
                Kind::EndpointSlice,
                tx,
                |s: EndpointSlice| match slice_info(&s) {
                    Some(info) => Event::EndpointSlice(Box::new(info)),
                    // a slice of no Service: nothing to balance; forget any older version
                    None => Event::EndpointSliceDeleted(key(s.metadata.namespace, s.metadata.name)),
                },
                |s: EndpointSlice| {
                    Event::EndpointSliceDeleted(key(s.metadata.namespace, s.metadata.name))
                },
            );
        } else {
            tracing::info!("discovery.k8s.io/v1 EndpointSlice not served; using core v1 Endpoints");
            watch_endpoints(Api::<Endpoints>::all(client), tx).await;
        }
    });
}

/// Core v1 Endpoints: one object may become several slices (one per subset), so
/// deletions and updates retract the slices of the previous version.
async fn watch_endpoints(api: Api<Endpoints>, tx: mpsc::UnboundedSender<Event>) {
    let mut known: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut stream = watcher::watcher(api, super::watch::watch_config())
        .default_backoff()
        .boxed();
    while let Some(item) = stream.next().await {
        let mut events = Vec::new();
        match item {
            Ok(WatchEvent::Apply(o)) | Ok(WatchEvent::InitApply(o)) => {
                let k = key(o.metadata.namespace.clone(), o.metadata.name.clone());
                let slices = endpoints_info(&o);
                let keys: Vec<String> = slices.iter().map(|s| s.key()).collect();
                for old in known.get(&k).into_iter().flatten() {
                    if !keys.contains(old) {
                        events.push(Event::EndpointSliceDeleted(old.clone()));
                    }
                }
                events.extend(
                    slices
                        .into_iter()
                        .map(|s| Event::EndpointSlice(Box::new(s))),
                );
                known.insert(k, keys);
            }
            Ok(WatchEvent::Delete(o)) => {
                let k = key(o.metadata.namespace, o.metadata.name);
                for old in known.remove(&k).into_iter().flatten() {
                    events.push(Event::EndpointSliceDeleted(old));
                }
            }
            Ok(WatchEvent::Init) => events.push(Event::Relist(Kind::EndpointSlice)),
            Ok(WatchEvent::InitDone) => events.push(Event::Synced(Kind::EndpointSlice)),
            Err(e) => {
                tracing::warn!(error = %e, "Endpoints watch error; retrying with backoff");
            }
        }
        for ev in events {
            if tx.send(ev).is_err() {
                return;
            }
        }
    }
}
