//! A command spawned as the leader of its own process group: the whole group (a shell and
//! every daemon it started) gets SIGKILL on drop, and [`ProcessGroup::inside`] runs a
//! command in the leader's mount and network namespaces (`nsenter -m -n`).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

/// A process group, killed whole on drop.
pub struct ProcessGroup(Child);

impl ProcessGroup {
    /// Spawns `cmd` in a new process group (its pid is the group id).
    pub fn spawn(cmd: &mut Command) -> std::io::Result<ProcessGroup> {
        cmd.process_group(0).spawn().map(ProcessGroup)
    }

    /// The leader's pid.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Runs `args` inside the leader's mount and network namespaces: its trimmed stdout
    /// when it succeeds, None when it fails. Panics if `nsenter` cannot be run.
    pub fn inside(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("nsenter")
            .args(["-t", &self.id().to_string(), "-m", "-n", "--"])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("nsenter {args:?}: {e}"));
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(-(self.0.id() as i32));
        let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}
