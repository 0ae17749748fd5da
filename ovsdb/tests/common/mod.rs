//! Helpers for tests against a real `ovsdb-server`: the real-environment gate, a
//! standalone OVN_Northbound server, a 3-member Raft cluster, `ovn-nbctl` as the second
//! opinion. Every server lives in the test's own temp dir and is killed by pid on drop.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const NB_SCHEMA: &str = "/usr/share/ovn/ovn-nb.ovsschema";
pub const NB: &str = "OVN_Northbound";

/// True when real-server tests can run. Otherwise prints `SKIP <name>: <reason>` and
/// returns false — or panics when `ZOVN_REQUIRE_REAL=1` (CI must not pass on skips).
pub fn real_env(name: &str) -> bool {
    let reason = if !is_root() {
        Some("not running as root".to_string())
    } else {
        ["ovsdb-server", "ovsdb-tool", "ovn-nbctl", "ovs-appctl"]
            .iter()
            .find(|b| which(b).is_none())
            .map(|b| format!("`{b}` is not installed"))
            .or_else(|| (!Path::new(NB_SCHEMA).exists()).then(|| format!("{NB_SCHEMA} is missing")))
    };
    match reason {
        None => true,
        Some(r) => {
            if std::env::var("ZOVN_REQUIRE_REAL").as_deref() == Ok("1") {
                panic!("{name}: real ovsdb-server required (ZOVN_REQUIRE_REAL=1) but {r}");
            }
            eprintln!("SKIP {name}: {r}");
            false
        }
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.is_file())
}

/// A private temp dir for one test.
pub fn tempdir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ovsdb-{tag}-"))
        .tempdir()
        .expect("create temp dir")
}

pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `ovn-nbctl` against a server's unix socket.
pub fn nbctl(sock: &Path, args: &[&str]) -> String {
    let db = format!("--db=unix:{}", sock.display());
    let mut all = vec![db.as_str(), "--timeout=20"];
    all.extend_from_slice(args);
    run("ovn-nbctl", &all)
}

/// Values of one column of every row, via `ovn-nbctl --bare --columns=COL list TABLE`.
pub fn nbctl_column(sock: &Path, table: &str, column: &str) -> Vec<String> {
    let cols = format!("--columns={column}");
    let mut v: Vec<String> = nbctl(sock, &["--bare", &cols, "list", table])
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// One `ovsdb-server` process.
pub struct Server {
    pub db: PathBuf,
    pub sock: PathBuf,
    pub ctl: PathBuf,
    pidfile: PathBuf,
    log: PathBuf,
    extra: Vec<String>,
    pub pid: Option<u32>,
}

impl Server {
    /// Creates a standalone OVN_Northbound db in `dir` and starts a server on it.
    pub fn standalone(dir: &Path, extra: &[String]) -> Server {
        let db = dir.join("nb.db");
        run("ovsdb-tool", &["create", db.to_str().unwrap(), NB_SCHEMA]);
        let mut s = Server::new(dir, "nb", db, extra);
        s.start();
        s
    }

    fn new(dir: &Path, name: &str, db: PathBuf, extra: &[String]) -> Server {
        Server {
            db,
            sock: dir.join(format!("{name}.sock")),
            ctl: dir.join(format!("{name}.ctl")),
            pidfile: dir.join(format!("{name}.pid")),
            log: dir.join(format!("{name}.log")),
            extra: extra.to_vec(),
            pid: None,
        }
    }

    /// Starts (or restarts) the server on the same db, socket and control socket.
    pub fn start(&mut self) {
        let remote = format!("--remote=punix:{}", self.sock.display());
        let pidfile = format!("--pidfile={}", self.pidfile.display());
        let unixctl = format!("--unixctl={}", self.ctl.display());
        let log = format!("--log-file={}", self.log.display());
        let mut args = vec![
            self.db.to_str().unwrap().to_string(),
            remote,
            pidfile,
            unixctl,
            log,
            "--detach".into(),
            "--no-chdir".into(),
            "-vconsole:off".into(),
            "-vfile:info".into(),
        ];
        args.extend(self.extra.iter().cloned());
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        run("ovsdb-server", &argv);
        let pid = std::fs::read_to_string(&self.pidfile)
            .expect("read pidfile")
            .trim()
            .parse()
            .expect("pid");
        self.pid = Some(pid);
    }

    /// `kill -9` and wait until the process is gone (or a zombie).
    pub fn kill9(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            wait_dead(pid);
        }
    }

    pub fn appctl(&self, args: &[&str]) -> String {
        let t = format!("--target={}", self.ctl.display());
        let mut all = vec![t.as_str()];
        all.extend_from_slice(args);
        run("ovs-appctl", &all)
    }

    pub fn is_leader(&self) -> bool {
        self.pid.is_some()
            && self
                .appctl(&["cluster/status", NB])
                .lines()
                .any(|l| l.trim() == "Role: leader")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn wait_dead(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return,
            Ok(s) => {
                // state is the field after the parenthesised command name
                if s.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
                {
                    return;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("process {pid} did not die");
}

/// A 3-member Raft cluster of OVN_Northbound.
pub struct Cluster {
    pub members: Vec<Server>,
}

impl Cluster {
    pub fn start(dir: &Path) -> Cluster {
        let raft = |i: usize| format!("unix:{}", dir.join(format!("raft{i}")).display());
        let mut members = Vec::new();
        for i in 1..=3 {
            let db = dir.join(format!("nb{i}.db"));
            let dbs = db.to_str().unwrap().to_string();
            if i == 1 {
                run("ovsdb-tool", &["create-cluster", &dbs, NB_SCHEMA, &raft(1)]);
            } else {
                run(
                    "ovsdb-tool",
                    &["join-cluster", &dbs, NB, &raft(i), &raft(1)],
                );
            }
            members.push(Server::new(dir, &format!("nb{i}"), db, &[]));
        }
        for m in &mut members {
            m.start();
        }
        let c = Cluster { members };
        c.wait_for_leader(&[0, 1, 2], Duration::from_secs(30));
        // all members joined
        let deadline = Instant::now() + Duration::from_secs(30);
        while !c.members.iter().all(|m| {
            m.appctl(&["cluster/status", NB])
                .lines()
                .any(|l| l.trim() == "Status: cluster member")
        }) {
            assert!(Instant::now() < deadline, "cluster members did not join");
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    /// Index of the leader among the listed live members.
    pub fn wait_for_leader(&self, among: &[usize], bound: Duration) -> usize {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(&i) = among.iter().find(|&&i| self.members[i].is_leader()) {
                return i;
            }
            assert!(Instant::now() < deadline, "no leader elected");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn remotes(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("unix:{}", m.sock.display()))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Polls `cond` until true, at most `bound` (for conditions outside the replica, e.g.
/// what `ovn-nbctl` or `cluster/status` reports).
pub async fn eventually(bound: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
