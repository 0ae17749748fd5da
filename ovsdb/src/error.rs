//! The crate's error type.

use std::time::Duration;

use crate::value::ValueError;

/// Everything that can go wrong talking to an OVSDB server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("TLS error: {0}")]
    Tls(String),
    /// The server sent something that is not valid JSON-RPC / OVSDB.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A single message from the server exceeded the configured maximum size.
    #[error("message exceeds the maximum size of {max} bytes")]
    MessageTooLarge { max: usize },
    #[error("bad value: {0}")]
    Value(#[from] ValueError),
    /// The server answered a request with a JSON-RPC error.
    #[error("{method} failed: {error}")]
    Rpc {
        method: String,
        error: serde_json::Value,
    },
    /// One operation of a transaction failed (index `ops.len()` means the commit-time
    /// constraint checks: referential integrity, unique indexes, ...).
    #[error("transaction failed at op {index} ({op}): {error}{}", details.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    Transaction {
        index: usize,
        op: String,
        error: String,
        details: Option<String>,
    },
    /// The connection dropped while this request was in flight: its outcome is unknown
    /// (a transaction may or may not have committed); the caller must check.
    #[error("connection lost while {method} was in flight (outcome unknown): {reason}")]
    ConnectionLost { method: String, reason: String },
    /// The connection dropped (no request of the caller was in flight).
    #[error("disconnected: {0}")]
    Disconnected(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The server is a Raft member that is not the leader (or not connected to the cluster).
    #[error("server {0} is not the cluster leader")]
    NotLeader(String),
    /// The client was closed.
    #[error("client closed")]
    Closed,
    #[error("bad remote {0:?}: expected unix:PATH, tcp:HOST:PORT or ssl:HOST:PORT")]
    BadRemote(String),
    #[error("bad configuration: {0}")]
    Config(String),
}

impl Error {
    pub(crate) fn protocol(msg: impl Into<String>) -> Self {
        Error::Protocol(msg.into())
    }

    /// True when the server's answer said the method is unknown (used for fallbacks).
    pub(crate) fn is_unknown_method(&self) -> bool {
        match self {
            Error::Rpc { error, .. } => {
                let s = match error {
                    serde_json::Value::String(s) => s.clone(),
                    other => other
                        .get("error")
                        .and_then(|e| e.as_str())
                        .unwrap_or_default()
                        .to_string(),
                };
                s.contains("unknown method")
            }
            _ => false,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
