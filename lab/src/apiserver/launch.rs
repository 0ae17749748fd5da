//! Starting the object-store daemon as its own process: `zovn lab serve --dir DIR
//! --pidfile PIDFILE`, stdin from /dev/null, stdout/stderr appended to
//! `<dir>/log/lab-apiserver.log`; it calls `setsid` itself. Returns once it answers a
//! ping on its socket, with the record the manifest keeps (its cmdline names the pidfile,
//! so `down` and the stale-state cleanup can verify the pid before stopping it).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::client::ApiClient;
use crate::process::{DaemonRecord, log_tail};
use crate::state::Layout;

/// The daemon's name in the manifest and in `zovn lab status`.
pub const DAEMON_NAME: &str = "lab-apiserver";
/// Environment variable naming the `zovn` binary to run the daemon with.
pub const ZOVN_BIN_ENV: &str = "ZOVN_BIN";
/// How long [`spawn`] waits for the daemon to answer.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The `zovn` binary: `$ZOVN_BIN`; this process if it is `zovn`; `zovn` next to this
/// executable or one directory up (a test binary in `target/<profile>/deps/` finds
/// `target/<profile>/zovn`); `zovn` in `PATH`.
pub fn zovn_exe() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(ZOVN_BIN_ENV) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("{ZOVN_BIN_ENV}={} is not a file", p.display());
    }
    let me = std::env::current_exe().context("the current executable")?;
    if me.file_name().is_some_and(|n| n == "zovn") {
        return Ok(me);
    }
    let mut looked = Vec::new();
    for dir in me
        .parent()
        .into_iter()
        .flat_map(|d| [Some(d), d.parent()])
        .flatten()
    {
        let p = dir.join("zovn");
        if p.is_file() {
            return Ok(p);
        }
        looked.push(p.display().to_string());
    }
    let path = std::env::var("PATH").unwrap_or_default();
    if let Some(p) = path
        .split(':')
        .map(|d| Path::new(d).join("zovn"))
        .find(|p| p.is_file())
    {
        return Ok(p);
    }
    bail!(
        "cannot find the zovn binary (looked at {} and in PATH): build it with \
         `cargo build -p lab --bin zovn`, or set {ZOVN_BIN_ENV}",
        looked.join(", ")
    )
}

/// Starts the daemon for the lab in `layout` with the `zovn` binary `exe`.
pub fn spawn(layout: &Layout, exe: &Path) -> anyhow::Result<DaemonRecord> {
    layout.create_api_dirs()?;
    let pidfile = layout.api_pidfile();
    let log_file = layout.api_log();
    let _ = std::fs::remove_file(&pidfile);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_file)
        .with_context(|| format!("open {}", log_file.display()))?;
    let log2 = log
        .try_clone()
        .with_context(|| format!("open {}", log_file.display()))?;
    let mut child = Command::new(exe)
        .arg("lab")
        .arg("serve")
        .arg("--dir")
        .arg(&layout.dir)
        .arg("--pidfile")
        .arg(&pidfile)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .with_context(|| format!("start {}", exe.display()))?;
    let pid = i32::try_from(child.id()).context("pid out of range")?;
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().context("wait for the daemon")? {
            bail!(
                "{} lab serve exited ({status}) before serving{}",
                exe.display(),
                log_tail(&log_file)
            );
        }
        let last_err = match ApiClient::connect(&layout.dir).and_then(|mut c| c.ping()) {
            Ok((p, _)) if i64::from(p) == i64::from(pid) => break,
            Ok((p, _)) => bail!(
                "{} is served by another process (pid {p})",
                layout.api_socket().display()
            ),
            Err(e) => format!("{e:#}"),
        };
        if t0.elapsed() >= READY_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the object store did not answer within {READY_TIMEOUT:?} (last: {last_err}){}",
                log_tail(&log_file)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // reap it whenever it exits, so it never lingers as a zombie of a long-lived caller
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    tracing::info!(
        pid,
        elapsed_ms = t0.elapsed().as_millis() as u64,
        "lab object store started"
    );
    Ok(DaemonRecord {
        name: DAEMON_NAME.into(),
        program: exe.to_string_lossy().into_owned(),
        pid,
        pidfile,
        unixctl: None,
        log_file,
        netns: None,
        ident: None,
    })
}
