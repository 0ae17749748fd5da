//! The logic of the `zstack-ovn-cni` binary, kept here so it is testable without a
//! process: environment + stdin in, stdout text + exit code out.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::client;
use crate::error::{CniError, code};
use crate::request::{Command, Request, Response};
use crate::types::NetConf;
use crate::version::{CniVersion, VersionInfo};

/// Where the agent listens unless `serverSocket` or [`SOCKET_ENV`] say otherwise.
pub const DEFAULT_SOCKET: &str = "/var/run/zstack-ovn/cni-server.sock";
/// Overrides the socket path (wins over the config's `serverSocket`).
pub const SOCKET_ENV: &str = "ZSTACK_OVN_CNI_SOCKET";
/// Overrides the wait for the agent, in seconds (fractions allowed); wins over the
/// config's `timeoutSeconds`.
pub const TIMEOUT_ENV: &str = "ZSTACK_OVN_CNI_TIMEOUT";
/// Largest network configuration accepted on stdin.
pub const MAX_STDIN: usize = 1 << 20;

/// What the binary prints on stdout and the exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Empty for commands that print nothing on success (DEL, CHECK, GC, STATUS).
    pub stdout: String,
    pub exit_code: u8,
}

/// Reads at most [`MAX_STDIN`] bytes; more is error 7, a read failure is error 5.
pub fn read_stdin(r: impl Read) -> Result<Vec<u8>, CniError> {
    let mut buf = Vec::new();
    r.take(MAX_STDIN as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| {
            CniError::new(code::IO_FAILURE, "cannot read stdin").with_details(e.to_string())
        })?;
    if buf.len() > MAX_STDIN {
        return Err(CniError::new(
            code::INVALID_CONFIG,
            format!("the network configuration on stdin exceeds {MAX_STDIN} bytes"),
        ));
    }
    Ok(buf)
}

/// Runs one CNI invocation. `env` looks up a variable; `stdin` is read only when the
/// command is valid; `stderr` gets debug logs when `logLevel` is `debug`/`trace`.
pub fn run(
    env: impl Fn(&str) -> Option<String>,
    stdin: impl Read,
    stderr: &mut dyn Write,
) -> Outcome {
    let mut version_hint = CniVersion::LATEST;
    match run_inner(&env, stdin, stderr, &mut version_hint) {
        Ok(stdout) => Outcome {
            stdout,
            exit_code: 0,
        },
        Err(e) => Outcome {
            stdout: e.with_version(version_hint.as_str()).to_json(),
            exit_code: 1,
        },
    }
}

#[derive(Deserialize)]
struct VersionOnly {
    #[serde(rename = "cniVersion", default)]
    cni_version: Option<String>,
}

fn run_inner(
    env: &impl Fn(&str) -> Option<String>,
    stdin: impl Read,
    stderr: &mut dyn Write,
    version_hint: &mut CniVersion,
) -> Result<String, CniError> {
    let command: Command = env("CNI_COMMAND")
        .filter(|c| !c.is_empty())
        .ok_or_else(|| CniError::new(code::INVALID_ENV, "CNI_COMMAND is not set"))?
        .parse()?;
    let stdin = read_stdin(stdin)?;

    // Errors from here on are reported in the caller's version when it is readable.
    let requested = serde_json::from_slice::<VersionOnly>(&stdin)
        .ok()
        .and_then(|v| v.cni_version);
    if let Some(v) = requested.as_deref().and_then(|v| v.parse().ok()) {
        *version_hint = v;
    }

    if command == Command::Version {
        if !stdin.iter().all(u8::is_ascii_whitespace) {
            serde_json::from_slice::<VersionOnly>(&stdin).map_err(crate::types::json_error)?;
        }
        return serde_json::to_string(&VersionInfo::answer(requested.as_deref())).map_err(|e| {
            CniError::new(code::IO_FAILURE, "cannot encode the VERSION answer")
                .with_details(e.to_string())
        });
    }

    let conf = NetConf::parse(&stdin)?;
    let version = conf.version();
    let socket = env(SOCKET_ENV)
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .or_else(|| conf.server_socket.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
    let timeout = match env(TIMEOUT_ENV).filter(|s| !s.is_empty()) {
        Some(s) => parse_seconds(&s).ok_or_else(|| {
            CniError::new(
                code::INVALID_ENV,
                format!("{TIMEOUT_ENV}={s:?} is not a positive number of seconds"),
            )
        })?,
        None => conf
            .timeout_seconds
            .and_then(|t| Duration::try_from_secs_f64(t).ok())
            .unwrap_or_else(|| command.default_timeout()),
    };
    let request = Request::from_env(command, env, &stdin, timeout)?;
    let debug = matches!(conf.log_level.as_deref(), Some("debug" | "trace"));
    if debug {
        let _ = writeln!(
            stderr,
            "zstack-ovn-cni: {command} container={} ifname={} netns={} socket={} timeout={:?}",
            request.container_id,
            request.ifname,
            request.netns,
            socket.display(),
            timeout
        );
    }

    let response = client::call(&socket, &request, timeout).map_err(|e| e.to_cni_error(command))?;
    if debug {
        let _ = writeln!(stderr, "zstack-ovn-cni: {command} answer: {response:?}");
    }
    match (command, response) {
        (_, Response::Error(e)) => Err(e),
        (Command::Add, Response::Result(r)) => Ok(r.to_json(version)),
        (Command::Add, Response::Ok) => Err(CniError::new(
            code::AGENT_PROTOCOL,
            "the zstack-ovn node agent answered ADD without a result",
        )),
        // DEL/CHECK/GC/STATUS print nothing on success.
        (_, Response::Ok | Response::Result(_)) => Ok(String::new()),
    }
}

fn parse_seconds(s: &str) -> Option<Duration> {
    let t: f64 = s.trim().parse().ok()?;
    if t > 0.0 {
        Duration::try_from_secs_f64(t).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_limit() {
        assert_eq!(
            read_stdin(&vec![b' '; MAX_STDIN][..]).map(|b| b.len()).ok(),
            Some(MAX_STDIN)
        );
        let e = read_stdin(&vec![b' '; MAX_STDIN + 1][..]).unwrap_err();
        assert_eq!(e.code, code::INVALID_CONFIG);
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("0.25"), Some(Duration::from_millis(250)));
        assert_eq!(parse_seconds("2"), Some(Duration::from_secs(2)));
        for bad in ["0", "-1", "x", "NaN", "inf", "1e300"] {
            assert_eq!(parse_seconds(bad), None, "{bad}");
        }
    }
}
