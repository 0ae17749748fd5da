//! [`LabError`]: what failed while building, inspecting or tearing down a lab.

use std::path::PathBuf;
use std::time::Duration;

/// An error of the lab library. Every variant names what failed: the command and its
/// stderr, the daemon, the file, or the condition that was waited for.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A command ran and exited unsuccessfully.
    #[error("`{program} {args}` failed ({status}): {stderr}")]
    Command {
        program: String,
        args: String,
        status: String,
        stderr: String,
    },
    /// A program could not be executed at all.
    #[error("cannot run `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// A daemon did not start, or is not in the expected state.
    #[error("daemon {name} (`{program}`): {detail}")]
    Daemon {
        name: String,
        program: String,
        detail: String,
    },
    /// Sending a signal failed.
    #[error("signal {signal} to pid {pid} (`{program}`): {source}")]
    Signal {
        pid: i32,
        program: String,
        signal: String,
        #[source]
        source: nix::Error,
    },
    /// A filesystem operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The lab manifest could not be read or written.
    #[error("manifest {}: {detail}", path.display())]
    Manifest { path: PathBuf, detail: String },
    /// A bounded wait ran out.
    #[error("timed out after {:.1}s waiting for {what}{}", elapsed.as_secs_f64(), last.as_deref().map(|l| format!(" (last: {l})")).unwrap_or_default())]
    Timeout {
        what: String,
        elapsed: Duration,
        last: Option<String>,
    },
    /// A configuration or argument is not acceptable.
    #[error("invalid lab configuration: {0}")]
    Invalid(String),
    /// The lab's OVN central is not running (its databases cannot be read).
    #[error("central not started")]
    NoCentral,
}

impl LabError {
    /// Builds an [`LabError::Io`] for `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LabError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

/// Result alias of the lab library.
pub type Result<T, E = LabError> = std::result::Result<T, E>;
