//! A bare ovsdb-server + ovs-vswitchd pair (no OVN: nothing else changes their bridges or
//! flows), all their files (database, sockets, pidfiles, logs) in one directory,
//! ovs-vswitchd inside a given network namespace (its bridges' internal ports appear
//! there). Both are stopped by pidfile on drop, whatever state a failed start left.
//!
//! Used by [`crate::bare_ovs`] (the megaflow guard's bench) and [`crate::vlan_host`]
//! (a host on a VLAN of the underlay).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{LabError, Result};
use crate::process::{cmd, run, run_args};

/// The programs, in the order they are stopped.
const PROGRAMS: [&str; 2] = ["ovs-vswitchd", "ovsdb-server"];

/// The running pair; stopped on drop.
#[derive(Debug)]
pub struct OvsDaemons {
    dir: PathBuf,
}

impl OvsDaemons {
    /// Creates the database under `dir` (created if missing), starts ovsdb-server (in the
    /// caller's namespace, on `<dir>/db.sock`) and ovs-vswitchd inside netns `netns`
    /// (which must exist).
    pub fn start(dir: &Path, netns: &str) -> Result<OvsDaemons> {
        std::fs::create_dir_all(dir).map_err(|e| LabError::io("create", dir, e))?;
        // from here on, a failure stops whatever was started (drop)
        let daemons = OvsDaemons {
            dir: dir.to_path_buf(),
        };
        let d = |f: &str| daemons.file(f).to_string_lossy().into_owned();
        run_args(
            "ovsdb-tool",
            [
                "create",
                &d("conf.db"),
                "/usr/share/openvswitch/vswitch.ovsschema",
            ],
        )?;
        run(&mut daemons.with_env(cmd(
            "ovsdb-server",
            [
                d("conf.db"),
                format!("--remote=punix:{}", d("db.sock")),
                format!("--pidfile={}", d("ovsdb-server.pid")),
                format!("--unixctl={}", d("ovsdb-server.ctl")),
                format!("--log-file={}", d("ovsdb-server.log")),
                "--detach".into(),
                "-vconsole:off".into(),
            ],
        )))?;
        daemons.vsctl(&["--no-wait", "init"])?;
        run(&mut daemons.with_env(cmd(
            "ip",
            [
                "netns".to_string(),
                "exec".into(),
                netns.into(),
                "/usr/lib/openvswitch-switch/ovs-vswitchd".into(),
                format!("unix:{}", d("db.sock")),
                format!("--pidfile={}", d("ovs-vswitchd.pid")),
                format!("--unixctl={}", d("ovs-vswitchd.ctl")),
                format!("--log-file={}", d("ovs-vswitchd.log")),
                "--detach".into(),
                "-vconsole:off".into(),
            ],
        )))?;
        Ok(daemons)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The OVS run/db/log/sysconf dirs all point at `dir` (nothing touches the host's).
    fn with_env(&self, mut c: Command) -> Command {
        for k in ["OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"] {
            c.env(k, &self.dir);
        }
        c
    }

    /// The directory holding the daemons' files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `--db=unix:<dir>/db.sock`, for `ovs-vsctl`.
    pub fn db(&self) -> String {
        format!("--db=unix:{}", self.file("db.sock").display())
    }

    /// ovs-vswitchd's unixctl socket.
    pub fn ctl(&self) -> PathBuf {
        self.file("ovs-vswitchd.ctl")
    }

    /// `ovs-vsctl --db=<ours> <args>`: its stdout.
    pub fn vsctl(&self, args: &[&str]) -> Result<String> {
        run(cmd("ovs-vsctl", [self.db()]).args(args))
    }

    /// `ovs-appctl -t <ctl> <args>`: its stdout.
    pub fn appctl(&self, args: &[&str]) -> Result<String> {
        let ctl = self.ctl();
        run(cmd("ovs-appctl", ["-t".as_ref(), ctl.as_os_str()]).args(args))
    }

    /// The pids of the daemons running now (from their pidfiles).
    pub fn pids(&self) -> Vec<i32> {
        PROGRAMS
            .iter()
            .filter_map(|p| crate::process::read_pidfile(&self.file(&format!("{p}.pid"))).ok())
            .filter(|pid| crate::process::is_alive(*pid))
            .collect()
    }

    /// Stops both daemons (by pidfile, after checking each pid still runs that program
    /// with our pidfile); what is not running is skipped. Safe to call twice.
    pub fn stop(&mut self) {
        for program in PROGRAMS {
            let pidfile = self.file(&format!("{program}.pid"));
            if let Ok(pid) = crate::process::read_pidfile(&pidfile) {
                let _ = crate::process::stop_pid(pid, program, Some(&pidfile));
            }
        }
    }
}

impl Drop for OvsDaemons {
    fn drop(&mut self) {
        self.stop();
    }
}
