//! [`ApiClient`]: talks to a lab's object store over its unix socket (blocking).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

use super::protocol::{Change, ObjectRef, Request, ResourceKind, Response};
use crate::state::Layout;

/// How long a request may take, beyond a `wait` request's own timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to the object store of the lab in `dir`.
pub struct ApiClient {
    dir: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl ApiClient {
    /// Connects to the store of the lab in `dir`. Errors say whether the lab is not up at
    /// all or only its store is not running.
    pub fn connect(dir: &Path) -> anyhow::Result<ApiClient> {
        let layout = Layout::new(dir);
        if !layout.manifest().exists() {
            bail!("the lab is not up in {} (run `zovn lab up`)", dir.display());
        }
        let sock = layout.api_socket();
        let stream = UnixStream::connect(&sock).map_err(|e| {
            anyhow::anyhow!(
                "the lab in {} has no object store running ({}: {e}); run `zovn lab up` \
                 to start it again",
                dir.display(),
                sock.display()
            )
        })?;
        let writer = stream
            .try_clone()
            .with_context(|| format!("socket {}", sock.display()))?;
        Ok(ApiClient {
            dir: dir.to_path_buf(),
            reader: BufReader::new(stream),
            writer,
        })
    }

    /// Sends one request and reads its answer; a [`Response::Error`] becomes an error.
    pub fn request(&mut self, req: &Request, timeout: Duration) -> anyhow::Result<Response> {
        let mut line = serde_json::to_string(req).context("encode request")?;
        line.push('\n');
        let what = || format!("the object store of the lab in {}", self.dir.display());
        self.writer
            .set_write_timeout(Some(timeout))
            .and_then(|_| self.reader.get_ref().set_read_timeout(Some(timeout)))
            .with_context(what)?;
        self.writer
            .write_all(line.as_bytes())
            .with_context(|| format!("send to {}", what()))?;
        let mut answer = String::new();
        let n = self
            .reader
            .read_line(&mut answer)
            .with_context(|| format!("no answer from {}", what()))?;
        if n == 0 {
            bail!("{} closed the connection", what());
        }
        let resp: Response = serde_json::from_str(&answer)
            .with_context(|| format!("unreadable answer from {}: {answer:?}", what()))?;
        if let Response::Error { message } = resp {
            bail!("{message}");
        }
        Ok(resp)
    }

    /// The daemon's pid and the lab's Node names.
    pub fn ping(&mut self) -> anyhow::Result<(u32, Vec<String>)> {
        match self.request(&Request::Ping, REQUEST_TIMEOUT)? {
            Response::Pong { pid, nodes } => Ok((pid, nodes)),
            other => bail!("unexpected answer to ping: {other:?}"),
        }
    }

    /// Applies objects (their Kubernetes JSON).
    pub fn apply(&mut self, objects: Vec<Value>) -> anyhow::Result<Vec<Change>> {
        match self.request(&Request::Apply { objects }, REQUEST_TIMEOUT)? {
            Response::Applied { changes } => Ok(changes),
            other => bail!("unexpected answer to apply: {other:?}"),
        }
    }

    /// Deletes objects (missing ones are reported, not an error).
    pub fn delete(&mut self, objects: Vec<ObjectRef>) -> anyhow::Result<Vec<Change>> {
        match self.request(&Request::Delete { objects }, REQUEST_TIMEOUT)? {
            Response::Deleted { changes } => Ok(changes),
            other => bail!("unexpected answer to delete: {other:?}"),
        }
    }

    /// Every object of `kind`.
    pub fn get(&mut self, kind: ResourceKind) -> anyhow::Result<Vec<Value>> {
        match self.request(&Request::Get { kind }, REQUEST_TIMEOUT)? {
            Response::Objects { items } => Ok(items),
            other => bail!("unexpected answer to get: {other:?}"),
        }
    }

    /// Waits until the controller has caught up (see [`super::progress`]); returns what
    /// is still pending when `timeout` ran out (empty: settled).
    /// The events node agents recorded, oldest first.
    pub fn events(&mut self) -> anyhow::Result<Vec<Value>> {
        match self.request(&Request::Events, Duration::from_secs(10))? {
            Response::Objects { items } => Ok(items),
            other => anyhow::bail!("unexpected answer to events: {other:?}"),
        }
    }

    pub fn wait(&mut self, timeout: Duration) -> anyhow::Result<Vec<String>> {
        let req = Request::Wait {
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        };
        match self.request(&req, timeout + REQUEST_TIMEOUT)? {
            Response::Waited { pending, .. } => Ok(pending),
            other => bail!("unexpected answer to wait: {other:?}"),
        }
    }
}
