//! One kube-runtime watcher per kind, turned into the controller's [`Event`]s.

use std::fmt::Debug;

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::{Event, Kind};

/// Watches `api` with backoff, sending `apply`/`delete` of each object and the relist
/// markers on `tx` until it is closed.
pub(super) fn spawn_watch<K>(
    api: Api<K>,
    kind: Kind,
    tx: mpsc::UnboundedSender<Event>,
    apply: fn(K) -> Event,
    delete: fn(K) -> Event,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let mut stream = watcher(api).default_backoff().boxed();
        while let Some(item) = stream.next().await {
            let ev = match item {
                Ok(WatchEvent::Apply(o)) | Ok(WatchEvent::InitApply(o)) => apply(o),
                Ok(WatchEvent::Delete(o)) => delete(o),
                Ok(WatchEvent::Init) => Event::Relist(kind),
                Ok(WatchEvent::InitDone) => Event::Synced(kind),
                Err(e) => {
                    tracing::warn!(?kind, error = %e, "watch error; retrying with backoff");
                    continue;
                }
            };
            if tx.send(ev).is_err() {
                return;
            }
        }
    });
}

fn watcher<K>(api: Api<K>) -> impl futures::Stream<Item = Result<WatchEvent<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher::watcher(api, watch_config())
}

/// Every watch of the controller: ended by the server within
/// [`api::api_timeouts::WATCH_TIMEOUT_SECS`], so a dead connection is noticed.
pub(super) fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(api::api_timeouts::WATCH_TIMEOUT_SECS)
}
