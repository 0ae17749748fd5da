//! `<dir>/store.json`: the store's objects saved after every change, so a restarted
//! object-store daemon starts from where the last one stopped (with the annotations and
//! statuses the controller wrote, from which the controller rebuilds its IPAM).
//!
//! Apply and delete save before they answer; the controller's writes are saved by a
//! background task shortly after (bursts are coalesced), and once more on shutdown.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::store::{LabStore, Snapshot};

/// Format version of `store.json`.
pub const STORE_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct StoreFile {
    version: u32,
    #[serde(flatten)]
    snapshot: Snapshot,
}

/// Reads `path`; `None` if it does not exist.
pub fn load(path: &Path) -> anyhow::Result<Option<Snapshot>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let file: StoreFile = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a lab object store file", path.display()))?;
    if file.version != STORE_VERSION {
        bail!(
            "{}: version {} (expected {STORE_VERSION})",
            path.display(),
            file.version
        );
    }
    Ok(Some(file.snapshot))
}

/// Writes `snapshot` to `path` atomically (temp file + rename).
pub fn save(path: &Path, snapshot: Snapshot) -> anyhow::Result<()> {
    let file = StoreFile {
        version: STORE_VERSION,
        snapshot,
    };
    let text = serde_json::to_string_pretty(&file).context("encode the store")?;
    // saved often (see below): a crash may lose the last save, never leave half of one
    hostio::write_atomic(path, text.as_bytes(), 0o644, hostio::Durability::Volatile)
        .with_context(|| format!("write {}", path.display()))
}

/// Saves a [`LabStore`] to its file, now or soon.
pub struct Persister {
    path: PathBuf,
    store: Arc<LabStore>,
    dirty: Notify,
    /// One writer of the file at a time.
    writing: Mutex<()>,
}

impl Persister {
    pub fn new(path: PathBuf, store: Arc<LabStore>) -> Persister {
        Persister {
            path,
            store,
            dirty: Notify::new(),
            writing: Mutex::new(()),
        }
    }

    /// Saves now.
    pub fn save_now(&self) -> anyhow::Result<()> {
        let _guard = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        save(&self.path, self.store.snapshot())
    }

    /// Asks the background task ([`Persister::run`]) to save.
    pub fn mark_dirty(&self) {
        self.dirty.notify_one();
    }

    /// Saves whenever marked dirty (marks made while saving collapse into one more save).
    pub async fn run(self: Arc<Self>) {
        loop {
            self.dirty.notified().await;
            let me = self.clone();
            let r = tokio::task::spawn_blocking(move || me.save_now()).await;
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %format!("{e:#}"), "saving the store failed"),
                Err(e) => tracing::warn!(error = %e, "saving the store panicked"),
            }
        }
    }
}
