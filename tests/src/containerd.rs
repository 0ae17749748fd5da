//! A private containerd (Debian's 1.6): config, root, state and the gRPC/ttrpc sockets
//! under a scratch directory, the CRI plugin disabled, inside `unshare -m -n` so its
//! mounts and network stay private. [`Containerd::ctr`] talks to it; the daemon is killed
//! on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A running private containerd. Panics on failure (test support).
pub struct Containerd {
    /// The scratch directory holding its config, root, state, sockets and log.
    pub dir: PathBuf,
    /// Its gRPC socket.
    pub sock: PathBuf,
    /// The `ctr --namespace` of [`Containerd::ctr`].
    pub ns: String,
    daemon: Option<Child>,
}

impl Containerd {
    /// Starts containerd under `dir` and waits (20 s at most) until `ctr version` answers.
    pub fn start(dir: &Path, ns: &str) -> Containerd {
        for d in ["root", "state", "opt"] {
            std::fs::create_dir_all(dir.join(d)).expect("mkdir");
        }
        let sock = dir.join("containerd.sock");
        let config = format!(
            "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\n\
             disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{sock}\"\n\
             [ttrpc]\n  address = \"{sock}.ttrpc\"\n\
             [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{opt}\"\n",
            root = dir.join("root").display(),
            state = dir.join("state").display(),
            sock = sock.display(),
            opt = dir.join("opt").display(),
        );
        std::fs::write(dir.join("config.toml"), config).expect("write config");
        let log = std::fs::File::create(dir.join("containerd.log")).expect("containerd log");
        let daemon = Command::new("unshare")
            .args(["-m", "-n", "--propagation", "private", "containerd"])
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start containerd");
        let me = Containerd {
            dir: dir.to_path_buf(),
            sock,
            ns: ns.to_string(),
            daemon: Some(daemon),
        };
        let t = Instant::now();
        while !me.ctr(&["version"]).status.success() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "containerd did not start:\n{}",
                std::fs::read_to_string(dir.join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        me
    }

    /// `ctr --address <our socket> --namespace <ns>`, for more arguments.
    pub fn ctr_cmd(&self) -> Command {
        let mut c = Command::new("ctr");
        c.arg("--address")
            .arg(&self.sock)
            .args(["--namespace", &self.ns]);
        c
    }

    /// Runs `ctr <args>` (stdin closed) and returns its output.
    pub fn ctr(&self, args: &[&str]) -> Output {
        self.ctr_cmd()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr")
    }

    /// The last 20 lines of containerd's log.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The daemon's pid while it runs.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Child::id)
    }

    /// Kills and reaps the daemon (again: nothing).
    pub fn kill_daemon(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.kill_daemon();
    }
}
