//! Warning events of the controller through kube-runtime's [`Recorder`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event as RecorderEvent, EventType, Recorder, Reporter};

use super::FIELD_MANAGER;

/// How many (object, reason) pairs [`Events`] remembers before it starts afresh.
const MAX_RECORDERS: usize = 1024;

/// `(apiVersion, kind, namespace, name)` of the object an event is about.
type Regarding<'a> = (&'a str, &'a str, &'a str, &'a str);

/// Warning events from our component (`events.k8s.io/v1`, reporting controller
/// [`FIELD_MANAGER`], reporting instance the host name).
///
/// kube-runtime's [`Recorder`] counts a repeat of the same (object, reason) in the first
/// event's `series` and keeps that event's note; so that a new problem is not hidden
/// behind an old message, each (object, reason) keeps its last message and gets a fresh
/// recorder, hence a new Event object, when the message changes.
#[derive(Clone)]
pub(super) struct Events {
    client: Client,
    #[allow(clippy::type_complexity)]
    recorders: Arc<Mutex<HashMap<(String, String), (String, Recorder)>>>,
}

impl Events {
    pub(super) fn new(client: Client) -> Events {
        Events {
            client,
            recorders: Arc::default(),
        }
    }

    /// Publishes a Warning about `regarding` (the reason is also the event's `action`).
    pub(super) async fn warning(
        &self,
        (api_version, kind, namespace, name): Regarding<'_>,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let recorder = {
            let mut map = self.recorders.lock().unwrap_or_else(|e| e.into_inner());
            let key = (
                format!("{api_version}/{kind}/{namespace}/{name}"),
                reason.to_string(),
            );
            match map.get(&key) {
                Some((last, r)) if last == message => r.clone(),
                _ => {
                    if map.len() >= MAX_RECORDERS {
                        map.clear();
                    }
                    let r = Recorder::new(self.client.clone(), Reporter::from(FIELD_MANAGER));
                    map.insert(key, (message.to_string(), r.clone()));
                    r
                }
            }
        };
        let regarding = ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
            namespace: Some(namespace.to_string()),
            name: Some(name.to_string()),
            ..Default::default()
        };
        let ev = RecorderEvent {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(message.to_string()),
            action: reason.into(),
            secondary: None,
        };
        recorder.publish(&ev, &regarding).await
    }
}
