//! Shim side: one blocking request/response exchange with the agent.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{CniError, code};
use crate::protocol::{self, ProtocolError};
use crate::request::{Command, Request, Response};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket does not exist or nobody listens on it.
    #[error("the zstack-ovn node agent is not running (socket {}): {source}", socket.display())]
    NotRunning { socket: PathBuf, source: io::Error },
    #[error("cannot connect to the zstack-ovn node agent socket {}: {source}", socket.display())]
    Connect { socket: PathBuf, source: io::Error },
    #[error("no answer from the zstack-ovn node agent within {after:?} (socket {})", socket.display())]
    Timeout { socket: PathBuf, after: Duration },
    #[error("talking to the zstack-ovn node agent (socket {}): {source}", socket.display())]
    Protocol {
        socket: PathBuf,
        source: ProtocolError,
    },
}

impl ClientError {
    /// The CNI error the shim prints for this failure of `command`:
    /// agent not running → 11 (50 for STATUS), timeout → 102, a broken or truncated
    /// answer → 103, other I/O → 5.
    pub fn to_cni_error(&self, command: Command) -> CniError {
        match self {
            ClientError::NotRunning { socket, source } => {
                let (c, prefix) = if command == Command::Status {
                    (code::PLUGIN_NOT_AVAILABLE, "plugin not available")
                } else {
                    (code::TRY_AGAIN_LATER, "try again later")
                };
                CniError::new(
                    c,
                    format!(
                        "{prefix}: the zstack-ovn node agent is not running (socket {})",
                        socket.display()
                    ),
                )
                .with_details(source.to_string())
            }
            ClientError::Connect { .. } => CniError::new(code::IO_FAILURE, self.to_string()),
            ClientError::Timeout { socket, after } => CniError::new(
                code::AGENT_TIMEOUT,
                format!(
                    "timed out after {} waiting for the zstack-ovn node agent to answer {command}",
                    human(*after)
                ),
            )
            .with_details(format!(
                "socket {}; raise timeoutSeconds in the network config or ZSTACK_OVN_CNI_TIMEOUT",
                socket.display()
            )),
            ClientError::Protocol { socket, source } => {
                let msg = match source {
                    ProtocolError::Closed => {
                        "the zstack-ovn node agent closed the connection without answering".into()
                    }
                    ProtocolError::Truncated { got, expected } => format!(
                        "the zstack-ovn node agent closed the connection mid-reply \
                         ({got} of {expected} bytes received)"
                    ),
                    ProtocolError::Io(e) => {
                        return CniError::new(
                            code::IO_FAILURE,
                            "I/O error talking to the zstack-ovn node agent",
                        )
                        .with_details(format!("socket {}: {e}", socket.display()));
                    }
                    other => format!("invalid answer from the zstack-ovn node agent: {other}"),
                };
                CniError::new(code::AGENT_PROTOCOL, msg)
                    .with_details(format!("socket {}", socket.display()))
            }
        }
    }
}

fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Sends `request` to the agent listening on `socket` and waits at most `timeout`
/// (for connect, send and answer together) for its [`Response`].
pub fn call(socket: &Path, request: &Request, timeout: Duration) -> Result<Response, ClientError> {
    let deadline = Instant::now() + timeout;
    let stream = UnixStream::connect(socket).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ClientError::NotRunning {
            socket: socket.to_owned(),
            source,
        },
        _ => ClientError::Connect {
            socket: socket.to_owned(),
            source,
        },
    })?;
    let mut io = DeadlineStream {
        stream: &stream,
        deadline,
    };
    let wrap = |source: ProtocolError| {
        if source.is_timeout() {
            ClientError::Timeout {
                socket: socket.to_owned(),
                after: timeout,
            }
        } else {
            ClientError::Protocol {
                socket: socket.to_owned(),
                source,
            }
        }
    };
    protocol::write_request(&mut io, request).map_err(wrap)?;
    // Tell the agent the request is complete; it may answer any time after.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    protocol::read_response(&mut io).map_err(wrap)
}

/// Applies what is left of one deadline to every read and write.
struct DeadlineStream<'a> {
    stream: &'a UnixStream,
    deadline: Instant,
}

impl DeadlineStream<'_> {
    fn left(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"))
        } else {
            Ok(left)
        }
    }
}

impl Read for DeadlineStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        (&mut &*self.stream).read(buf)
    }
}

impl Write for DeadlineStream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        (&mut &*self.stream).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
