//! An async client for the OVS "unixctl" control protocol (what `ovs-appctl` speaks):
//! JSON-RPC 1.0 over a unix socket, one request `{"method": CMD, "params": [ARGS..],
//! "id": N}`, one reply `{"result": TEXT, "error": null, "id": N}` or
//! `{"error": TEXT, "id": N}` (vswitchd omits `result` on errors).
//!
//! Every call is bounded by the client's timeout (connect, write and read together), and
//! every error names the socket and the command.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ovsdb::codec::Decoder;
use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Default bound of one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Largest reply accepted (`pmd-rxq-show` with thousands of ports stays far below).
const MAX_REPLY: usize = 16 * 1024 * 1024;

/// Errors of one unixctl call.
#[derive(Debug, thiserror::Error)]
pub enum UnixctlError {
    #[error("unixctl {socket}: connect for `{command}`: {source}")]
    Connect {
        socket: PathBuf,
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("unixctl {socket}: `{command}`: {source}")]
    Io {
        socket: PathBuf,
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("unixctl {socket}: `{command}`: no reply within {timeout:?}")]
    Timeout {
        socket: PathBuf,
        command: String,
        timeout: Duration,
    },
    #[error("unixctl {socket}: `{command}` failed: {message}")]
    Command {
        socket: PathBuf,
        command: String,
        message: String,
    },
    #[error("unixctl {socket}: `{command}`: bad reply: {detail}")]
    Protocol {
        socket: PathBuf,
        command: String,
        detail: String,
    },
}

/// A unixctl client for one daemon's control socket (e.g. `ovs-vswitchd.ctl`).
#[derive(Debug)]
pub struct Unixctl {
    socket: PathBuf,
    timeout: Duration,
    next_id: AtomicU64,
}

impl Unixctl {
    /// A client for `socket` with [`DEFAULT_TIMEOUT`]; nothing is connected yet.
    pub fn new(socket: impl Into<PathBuf>) -> Unixctl {
        Unixctl {
            socket: socket.into(),
            timeout: DEFAULT_TIMEOUT,
            next_id: AtomicU64::new(1),
        }
    }

    /// Bounds every call by `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Unixctl {
        self.timeout = timeout;
        self
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Runs `command` with `args` and returns its text output. One connection per call
    /// (the daemon serves each connection in turn; a call never waits behind another).
    pub async fn call(&self, command: &str, args: &[&str]) -> Result<String, UnixctlError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.timeout, self.exchange(id, command, args)).await {
            Ok(r) => r,
            Err(_) => Err(UnixctlError::Timeout {
                socket: self.socket.clone(),
                command: command.to_string(),
                timeout: self.timeout,
            }),
        }
    }

    async fn exchange(
        &self,
        id: u64,
        command: &str,
        args: &[&str],
    ) -> Result<String, UnixctlError> {
        let io = |source| UnixctlError::Io {
            socket: self.socket.clone(),
            command: command.to_string(),
            source,
        };
        let mut conn =
            UnixStream::connect(&self.socket)
                .await
                .map_err(|source| UnixctlError::Connect {
                    socket: self.socket.clone(),
                    command: command.to_string(),
                    source,
                })?;
        let req = json!({"method": command, "params": args, "id": id});
        conn.write_all(req.to_string().as_bytes())
            .await
            .map_err(io)?;
        let mut decoder = Decoder::new(MAX_REPLY);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match decoder.decode() {
                Ok(Some(msg)) => {
                    // a notification or a reply to another id is skipped
                    if msg.get("id").and_then(Json::as_u64) == Some(id) {
                        return self.reply(command, &msg);
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => return Err(self.protocol(command, e.to_string())),
            }
            let n = conn.read(&mut buf).await.map_err(io)?;
            if n == 0 {
                return Err(self.protocol(command, "connection closed before the reply".into()));
            }
            decoder.push(&buf[..n]);
        }
    }

    fn reply(&self, command: &str, msg: &Json) -> Result<String, UnixctlError> {
        match msg.get("error") {
            None | Some(Json::Null) => {}
            Some(e) => {
                let message = e
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| e.to_string());
                return Err(UnixctlError::Command {
                    socket: self.socket.clone(),
                    command: command.to_string(),
                    message: message.trim_end().to_string(),
                });
            }
        }
        match msg.get("result") {
            Some(Json::String(s)) => Ok(s.clone()),
            Some(other) => Err(self.protocol(command, format!("result is not a string: {other}"))),
            None => Err(self.protocol(command, "neither result nor error".into())),
        }
    }

    fn protocol(&self, command: &str, detail: String) -> UnixctlError {
        UnixctlError::Protocol {
            socket: self.socket.clone(),
            command: command.to_string(),
            detail,
        }
    }
}
