//! Running commands and managing OVS/OVN daemons by pid.
//!
//! - [`run`]: run a command, capture stdout, fail with program, args, exit status and stderr.
//! - [`start_daemon`]: start an OVS-style daemon (`--pidfile --unixctl --log-file --detach
//!   --no-chdir -vconsole:off`), optionally inside a netns via `ip netns exec`, and read its pid.
//! - [`stop_daemon`] / [`stop_pid`]: stop a pid only after checking `/proc/PID/cmdline` still
//!   names the expected program (and our pidfile): SIGTERM, wait until gone or zombie (PID 1
//!   reaps lazily), then SIGKILL.
//! - [`kill9`], [`signal_daemon`]: fault injection.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use crate::error::{LabError, Result};

/// How long [`stop_pid`] waits after SIGTERM (and again after SIGKILL).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Builds a [`Command`] for `program` with `args`.
pub fn cmd<I, S>(program: &str, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(program);
    c.args(args);
    c
}

/// Runs `command` to completion and returns its stdout; a non-zero exit is an error naming
/// the program, its arguments, the exit status and stderr.
pub fn run(command: &mut Command) -> Result<String> {
    let program = command.get_program().to_string_lossy().into_owned();
    let args = command
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    debug!(%program, %args, "run");
    let out = command.output().map_err(|source| LabError::Spawn {
        program: program.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(LabError::Command {
            program,
            args,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Shorthand for `run(&mut cmd(program, args))`.
pub fn run_args<I, S>(program: &str, args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run(&mut cmd(program, args))
}

/// What to start: an OVS/OVN daemon and where its files go.
#[derive(Debug, Clone)]
pub struct DaemonSpec {
    /// Lab-level name, e.g. `nb1` or `node2/ovs-vswitchd`.
    pub name: String,
    /// Program path or name looked up in `PATH`.
    pub program: String,
    /// Daemon-specific arguments (database file, remotes...).
    pub args: Vec<String>,
    pub pidfile: PathBuf,
    /// `--unixctl=` path; `None` for daemons that reject it (ovn-controller 23.03).
    pub unixctl: Option<PathBuf>,
    pub log_file: PathBuf,
    /// Run inside this network namespace (`ip netns exec`).
    pub netns: Option<String>,
    /// Extra environment (`OVS_RUNDIR`...).
    pub env: Vec<(String, String)>,
}

impl DaemonSpec {
    /// A spec with no arguments, no unixctl, no netns.
    pub fn new(name: &str, program: &str, pidfile: PathBuf, log_file: PathBuf) -> Self {
        DaemonSpec {
            name: name.to_string(),
            program: program.to_string(),
            args: Vec::new(),
            pidfile,
            unixctl: None,
            log_file,
            netns: None,
            env: Vec::new(),
        }
    }

    /// The full argument vector after the program.
    fn daemon_args(&self) -> Vec<String> {
        let mut a = self.args.clone();
        a.push(format!("--pidfile={}", self.pidfile.display()));
        if let Some(ctl) = &self.unixctl {
            a.push(format!("--unixctl={}", ctl.display()));
        }
        a.push(format!("--log-file={}", self.log_file.display()));
        a.extend(["--detach", "--no-chdir", "-vconsole:off"].map(String::from));
        a
    }
}

/// A started daemon, as recorded in the lab manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonRecord {
    pub name: String,
    /// Program as started (path or name); its basename is checked against `/proc/PID/cmdline`.
    pub program: String,
    pub pid: i32,
    pub pidfile: PathBuf,
    pub unixctl: Option<PathBuf>,
    pub log_file: PathBuf,
    pub netns: Option<String>,
    /// What one of the process's arguments contains, identifying this very instance; the
    /// pidfile path when `None` (OVS daemons are started with `--pidfile=`). Set for
    /// programs that take no pidfile argument (the node agent: its `--state-dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ident: Option<String>,
}

impl DaemonRecord {
    /// True while the recorded pid is alive (not gone, not a zombie) and still ours.
    pub fn is_alive(&self) -> bool {
        is_alive(self.pid) && cmdline_matches(self.pid, &self.program, Some(&self.marker()))
    }

    /// The argument text [`cmdline_matches`] looks for: `ident`, or the pidfile.
    pub fn marker(&self) -> PathBuf {
        self.ident
            .as_ref()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.pidfile.clone())
    }
}

/// A foreground program to run as a daemon of the lab (see [`spawn_detached`]).
#[derive(Debug, Clone)]
pub struct DetachedSpec {
    /// Lab-level name, e.g. `node1/zstack-ovnkube-node`.
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Run inside this network namespace (`ip netns exec`, which execs in place: the pid
    /// stays the program's).
    pub netns: Option<String>,
    /// stdout and stderr are appended here.
    pub log_file: PathBuf,
    /// Also enter this persistent mount namespace (a file bound by `unshare --mount=FILE`);
    /// with it the program runs under `nsenter` (which also execs in place) instead of
    /// `ip netns exec` (whose private /sys remount would hide the mount namespace's).
    pub mount_ns: Option<PathBuf>,
    /// Recorded; the program may write it (the responder does) or not (the agent).
    pub pidfile: PathBuf,
    /// See [`DaemonRecord::ident`].
    pub ident: Option<String>,
    pub env: Vec<(String, String)>,
}

/// Starts a foreground program detached from the caller: own session (no terminal
/// signals), stdin from /dev/null, output appended to the log file, reaped by a thread of
/// the caller while it lives (init afterwards). Returns its record once `/proc/PID/cmdline`
/// shows the program (i.e. `ip netns exec` has exec'ed it), or an error with the log tail
/// if it exited first.
pub fn spawn_detached(spec: &DetachedSpec) -> Result<DaemonRecord> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;

    let fail = |detail: String| LabError::Daemon {
        name: spec.name.clone(),
        program: spec.program.display().to_string(),
        detail,
    };
    if let Some(dir) = spec.log_file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| LabError::io("create dir", dir, e))?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log_file)
        .map_err(|e| LabError::io("open log", &spec.log_file, e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| LabError::io("open log", &spec.log_file, e))?;
    let mut c = match (&spec.netns, &spec.mount_ns) {
        (net, Some(mnt)) => {
            let mut c = Command::new("nsenter");
            if let Some(ns) = net {
                c.arg(format!("--net=/run/netns/{ns}"));
            }
            c.arg(format!("--mount={}", mnt.display()))
                .arg("--")
                .arg(&spec.program);
            c
        }
        (Some(ns), None) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&spec.program);
            c
        }
        (None, None) => Command::new(&spec.program),
    };
    c.args(&spec.args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    for (k, v) in &spec.env {
        c.env(k, v);
    }
    // SAFETY: setsid(2) is async-signal-safe and touches no memory of the parent.
    unsafe {
        c.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    let mut child = c
        .spawn()
        .map_err(|e| fail(format!("cannot start it: {e}")))?;
    let pid = i32::try_from(child.id()).map_err(|_| fail("pid out of range".into()))?;
    let program = spec.program.to_string_lossy().into_owned();
    let marker = spec
        .ident
        .as_ref()
        .map(PathBuf::from)
        .unwrap_or_else(|| spec.pidfile.clone());
    let t0 = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(fail(format!(
                "exited right after start ({status}){}",
                log_tail(&spec.log_file)
            )));
        }
        if cmdline_matches(pid, &program, Some(&marker)) {
            break;
        }
        if t0.elapsed() >= STOP_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(fail(format!(
                "pid {pid} never became {program}{}",
                log_tail(&spec.log_file)
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    info!(name = %spec.name, pid, "daemon started");
    Ok(DaemonRecord {
        name: spec.name.clone(),
        program,
        pid,
        pidfile: spec.pidfile.clone(),
        unixctl: None,
        log_file: spec.log_file.clone(),
        netns: spec.netns.clone(),
        ident: spec.ident.clone(),
    })
}

/// Starts a daemon and returns its record once `--detach` has returned and the pidfile
/// names a live process.
pub fn start_daemon(spec: &DaemonSpec) -> Result<DaemonRecord> {
    // a stale pidfile from a crashed run would make us read a wrong pid
    remove_file_if_exists(&spec.pidfile)?;
    let mut c = match &spec.netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, &spec.program]);
            c
        }
        None => Command::new(&spec.program),
    };
    c.args(spec.daemon_args());
    for (k, v) in &spec.env {
        c.env(k, v);
    }
    let t = Instant::now();
    run(&mut c).map_err(|e| LabError::Daemon {
        name: spec.name.clone(),
        program: spec.program.clone(),
        detail: format!("{e}{}", log_tail(&spec.log_file)),
    })?;
    let pid = read_pidfile(&spec.pidfile).map_err(|e| LabError::Daemon {
        name: spec.name.clone(),
        program: spec.program.clone(),
        detail: format!("no pid after --detach: {e}"),
    })?;
    if !is_alive(pid) {
        return Err(LabError::Daemon {
            name: spec.name.clone(),
            program: spec.program.clone(),
            detail: format!(
                "pid {pid} exited right after start{}",
                log_tail(&spec.log_file)
            ),
        });
    }
    info!(name = %spec.name, pid, elapsed_ms = t.elapsed().as_millis() as u64, "daemon started");
    Ok(DaemonRecord {
        name: spec.name.clone(),
        program: spec.program.clone(),
        pid,
        pidfile: spec.pidfile.clone(),
        unixctl: spec.unixctl.clone(),
        log_file: spec.log_file.clone(),
        netns: spec.netns.clone(),
        ident: None,
    })
}

/// The last lines of a log file, formatted for an error message ("" if unreadable).
pub fn log_tail(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(s) => {
            let lines: Vec<&str> = s.lines().collect();
            let tail = lines[lines.len().saturating_sub(5)..].join("\n  ");
            if tail.is_empty() {
                String::new()
            } else {
                format!("\n  log {}:\n  {tail}", path.display())
            }
        }
        Err(_) => String::new(),
    }
}

/// Reads a pid from an OVS pidfile.
pub fn read_pidfile(path: &Path) -> Result<i32> {
    let s = std::fs::read_to_string(path).map_err(|e| LabError::io("read pidfile", path, e))?;
    s.trim().parse::<i32>().map_err(|e| {
        LabError::io(
            "parse pidfile",
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })
}

fn remove_file_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LabError::io("remove", path, e)),
    }
}

/// The process state letter from `/proc/PID/stat` (`R`, `S`, `Z`...), `None` if gone.
pub fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ..." — comm may hold spaces and parens, so split after the last ')'
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

/// True if `pid` exists and is not a zombie.
pub fn is_alive(pid: i32) -> bool {
    pid > 0 && matches!(proc_state(pid), Some(s) if s != 'Z' && s != 'X')
}

/// True if `/proc/PID/cmdline` names `program` (same basename as argv\[0\]) and, when given,
/// one of its arguments mentions `pidfile` (so a reused pid of another lab never matches).
pub fn cmdline_matches(pid: i32, program: &str, pidfile: Option<&Path>) -> bool {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let argv: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let Some(argv0) = argv.first() else {
        return false;
    };
    if basename(argv0) != basename(program) {
        return false;
    }
    match pidfile {
        None => true,
        Some(pf) => {
            let pf = pf.to_string_lossy();
            argv.iter().any(|a| a.contains(pf.as_ref()))
        }
    }
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// What [`stop_pid`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// The pid was already gone (or a zombie).
    NotRunning,
    /// The pid now belongs to another program: left untouched.
    NotOurs,
    /// Exited after SIGTERM.
    Terminated,
    /// Needed SIGKILL.
    Killed,
}

/// Stops `pid` if its cmdline still matches `program` (and `pidfile`): SIGTERM, wait until
/// gone or zombie for up to [`STOP_TIMEOUT`], then SIGKILL and wait again.
pub fn stop_pid(pid: i32, program: &str, pidfile: Option<&Path>) -> Result<StopOutcome> {
    if !is_alive(pid) {
        return Ok(StopOutcome::NotRunning);
    }
    if !cmdline_matches(pid, program, pidfile) {
        warn!(
            pid,
            program, "pid no longer runs the expected program, not touching it"
        );
        return Ok(StopOutcome::NotOurs);
    }
    send(pid, program, Signal::SIGTERM)?;
    if wait_gone(pid, STOP_TIMEOUT) {
        debug!(pid, program, "stopped by SIGTERM");
        return Ok(StopOutcome::Terminated);
    }
    warn!(pid, program, "still alive after SIGTERM, sending SIGKILL");
    send(pid, program, Signal::SIGKILL)?;
    if wait_gone(pid, STOP_TIMEOUT) {
        return Ok(StopOutcome::Killed);
    }
    Err(LabError::Daemon {
        name: format!("pid {pid}"),
        program: program.to_string(),
        detail: "still alive after SIGKILL".into(),
    })
}

/// [`stop_pid`] for a recorded daemon; also removes its pidfile.
pub fn stop_daemon(rec: &DaemonRecord) -> Result<StopOutcome> {
    let mut outcome = stop_pid(rec.pid, &rec.program, Some(&rec.marker()))?;
    // The pidfile may name a newer instance than the record: a restart by another process
    // since the record was read (the agents' `--vswitchd-restart-cmd` runs `zovn lab
    // restart-vswitchd` while the test's `Lab` holds the old pid). Removing the pidfile
    // without stopping it would leave that daemon, and its hugepages, behind.
    if let Ok(pid) = read_pidfile(&rec.pidfile)
        && pid != rec.pid
    {
        let newer = stop_pid(pid, &rec.program, Some(&rec.marker()))?;
        if matches!(newer, StopOutcome::Terminated | StopOutcome::Killed) {
            info!(name = %rec.name, pid, "stopped the instance its pidfile names (restarted since recorded)");
            outcome = newer;
        }
    }
    if outcome != StopOutcome::NotOurs {
        remove_file_if_exists(&rec.pidfile)?;
    }
    info!(name = %rec.name, pid = rec.pid, ?outcome, "daemon stopped");
    Ok(outcome)
}

/// Sends `sig` to a recorded daemon (after the cmdline check) and, for fatal signals,
/// waits until it is gone or a zombie.
pub fn signal_daemon(rec: &DaemonRecord, sig: Signal) -> Result<()> {
    if !rec.is_alive() {
        return Err(LabError::Daemon {
            name: rec.name.clone(),
            program: rec.program.clone(),
            detail: format!("pid {} is not running", rec.pid),
        });
    }
    send(rec.pid, &rec.program, sig)?;
    if matches!(sig, Signal::SIGKILL | Signal::SIGTERM | Signal::SIGINT)
        && !wait_gone(rec.pid, STOP_TIMEOUT)
    {
        return Err(LabError::Daemon {
            name: rec.name.clone(),
            program: rec.program.clone(),
            detail: format!("pid {} still alive after {sig}", rec.pid),
        });
    }
    Ok(())
}

/// SIGKILL a recorded daemon (fault tests) and wait until it is gone or a zombie.
pub fn kill9(rec: &DaemonRecord) -> Result<()> {
    signal_daemon(rec, Signal::SIGKILL)
}

fn send(pid: i32, program: &str, sig: Signal) -> Result<()> {
    match kill(Pid::from_raw(pid), sig) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(source) => Err(LabError::Signal {
            pid,
            program: program.to_string(),
            signal: sig.to_string(),
            source,
        }),
    }
}

/// Waits until `pid` is gone or a zombie; false on timeout.
pub fn wait_gone(pid: i32, timeout: Duration) -> bool {
    let start = Instant::now();
    while is_alive(pid) {
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_reports_program_status_and_stderr() {
        let err = run_args("sh", ["-c", "echo boom >&2; exit 3"]).expect_err("must fail");
        let msg = err.to_string();
        assert!(
            msg.contains("sh -c") && msg.contains("boom") && msg.contains('3'),
            "{msg}"
        );
        assert_eq!(run_args("echo", ["hi"]).expect("echo").trim(), "hi");
    }

    #[test]
    fn own_process_is_alive_and_matches() {
        let me = std::process::id() as i32;
        assert!(is_alive(me));
        let exe = std::env::current_exe().expect("exe");
        assert!(cmdline_matches(me, &exe.to_string_lossy(), None));
        assert!(!cmdline_matches(me, "ovsdb-server", None));
        assert!(!cmdline_matches(
            me,
            &exe.to_string_lossy(),
            Some(Path::new("/no/such.pid"))
        ));
    }

    #[test]
    fn stop_child_by_pid() {
        let mut child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        // until exec has happened the child still shows the test binary's cmdline
        crate::wait::wait_for("sleep exec", STOP_TIMEOUT, Duration::from_millis(2), |_| {
            Ok(cmdline_matches(pid, "sleep", None).then_some(()))
        })
        .expect("sleep runs");
        assert_eq!(
            stop_pid(pid, "ovsdb-server", None).expect("stop"),
            StopOutcome::NotOurs
        );
        assert_eq!(
            stop_pid(pid, "sleep", None).expect("stop"),
            StopOutcome::Terminated
        );
        let _ = child.wait();
        assert_eq!(
            stop_pid(pid, "sleep", None).expect("stop"),
            StopOutcome::NotRunning
        );
    }
}
