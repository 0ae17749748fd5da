//! The NetworkAttachmentDefinition watch (`k8s.cni.cncf.io/v1`, Multus's CRD) through
//! kube-rs's dynamic API: NADs are not in k8s-openapi. Where the CRD is not installed the
//! kind is reported as an empty list (no pod can then name a secondary network of ours)
//! and discovery is retried every [`DISCOVERY_RETRY`], so Multus installed later is
//! picked up without a restart.

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use tokio::sync::mpsc;

use super::{Event, Kind};
use crate::multus::NadInfo;

/// How often the controller looks again for the NAD API while it is not installed.
pub const DISCOVERY_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// The NAD as the controller sees it.
pub fn nad_info(o: &DynamicObject) -> NadInfo {
    let config = o
        .data
        .pointer("/spec/config")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("");
    NadInfo::new(
        o.metadata.namespace.as_deref().unwrap_or("default"),
        o.metadata.name.as_deref().unwrap_or(""),
        config,
    )
}

/// Starts the watch; its events arrive on `tx`.
pub fn spawn_watch(client: Client, tx: mpsc::UnboundedSender<Event>) {
    tokio::spawn(async move {
        let gvk = kube::api::GroupVersionKind::gvk(
            "k8s.cni.cncf.io",
            "v1",
            "NetworkAttachmentDefinition",
        );
        // Multus may be installed after the controller: until its API exists the kind is
        // an empty list, and discovery is retried
        let mut reported = false;
        let resource = loop {
            match kube::discovery::pinned_kind(&client, &gvk).await {
                Ok((resource, _)) => break resource,
                Err(e) => {
                    if !reported {
                        tracing::info!(error = %e, retry_s = DISCOVERY_RETRY.as_secs(), "NetworkAttachmentDefinition API not found; no secondary networks until it appears");
                        reported = true;
                        if tx.send(Event::Relist(Kind::Nad)).is_err()
                            || tx.send(Event::Synced(Kind::Nad)).is_err()
                        {
                            return;
                        }
                    }
                    if tx.is_closed() {
                        return;
                    }
                    tokio::time::sleep(DISCOVERY_RETRY).await;
                }
            }
        };
        if reported {
            tracing::info!("NetworkAttachmentDefinition API found; watching NADs");
        }
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let mut stream = watcher::watcher(api, super::watch::watch_config())
            .default_backoff()
            .boxed();
        while let Some(item) = stream.next().await {
            let ev = match item {
                Ok(WatchEvent::Apply(o)) | Ok(WatchEvent::InitApply(o)) => {
                    Event::Nad(Box::new(nad_info(&o)))
                }
                Ok(WatchEvent::Delete(o)) => Event::NadDeleted(nad_info(&o).key()),
                Ok(WatchEvent::Init) => Event::Relist(Kind::Nad),
                Ok(WatchEvent::InitDone) => Event::Synced(Kind::Nad),
                Err(e) => {
                    tracing::warn!(error = %e, "NetworkAttachmentDefinition watch error; retrying");
                    continue;
                }
            };
            if tx.send(ev).is_err() {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nad_from_dynamic_object() {
        let o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "vhost-net", "namespace": "vms"},
            "spec": {"config": "{\"type\":\"zstack-ovn-cni\",\"subnet\":\"sec\"}"}
        }))
        .unwrap();
        let n = nad_info(&o);
        assert_eq!(n.key(), "vms/vhost-net");
        assert_eq!(n.subnet().unwrap(), "sec");
    }
}
