//! Test scaffolding for real-kernel tests (the `tests` crate's `require_real` /
//! `record_real_run` convention, re-done here since dataplane cannot depend on it), and a
//! private ovsdb-server with the Open_vSwitch schema.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

fn in_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

/// `true` if the test may run (root, tools present); records the run in `ZOVN_REAL_LOG`.
/// Otherwise prints `SKIP <test>: <reason>` — or panics under `ZOVN_REQUIRE_REAL=1`.
pub fn require_real(test: &str, bins: &[&str]) -> bool {
    let reason = if !is_root() {
        Some("not root".to_string())
    } else {
        bins.iter()
            .find(|b| !in_path(b))
            .map(|b| format!("`{b}` is not installed"))
    };
    match reason {
        None => {
            record_real_run(test);
            true
        }
        Some(r) => {
            if std::env::var("ZOVN_REQUIRE_REAL").as_deref() == Ok("1") {
                panic!("{test}: real kernel required (ZOVN_REQUIRE_REAL=1) but {r}");
            }
            eprintln!("SKIP {test}: {r}");
            false
        }
    }
}

/// Appends `test` to the file named by `ZOVN_REAL_LOG`, one `write(2)` per line.
pub fn record_real_run(test: &str) {
    use std::io::Write;
    if let Ok(path) = std::env::var("ZOVN_REAL_LOG")
        && let Ok(mut f) = std::fs::File::options()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = f.write_all(format!("{test}\n").as_bytes());
    }
}

/// Runs a command, returns stdout; panics with stderr on failure.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command, returns whether it succeeded (output discarded).
pub fn sh_ok(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `ip -n NS -j ARGS…` parsed as JSON.
pub fn ip_json(ns: &str, args: &[&str]) -> serde_json::Value {
    let mut v = vec!["ip", "-n", ns, "-j"];
    v.extend_from_slice(args);
    serde_json::from_str(&sh(&v)).unwrap_or_else(|e| panic!("ip {args:?} JSON: {e}"))
}

/// Named network namespaces (`ip netns add`), deleted on drop, even when the test panics.
pub struct Netns {
    pub names: Vec<String>,
}

impl Netns {
    /// Creates `dpt<pid><suffix>` for each suffix (deleting leftovers of that name first).
    pub fn new(suffixes: &[&str]) -> Self {
        let pid = std::process::id();
        let mut g = Netns { names: Vec::new() };
        for s in suffixes {
            let name = format!("dpt{pid}{s}");
            let _ = sh_ok(&["ip", "netns", "del", &name]);
            sh(&["ip", "netns", "add", &name]);
            g.names.push(name);
        }
        g
    }

    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    pub fn path(&self, i: usize) -> std::path::PathBuf {
        format!("/var/run/netns/{}", self.names[i]).into()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            if !sh_ok(&["ip", "netns", "del", n]) {
                eprintln!("warning: could not delete netns {n}");
            }
        }
    }
}

/// `true` if `ip netns list` still names `ns`.
pub fn netns_listed(ns: &str) -> bool {
    sh(&["ip", "netns", "list"])
        .lines()
        .any(|l| l.split_whitespace().next() == Some(ns))
}

const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// A private ovsdb-server with a fresh Open_vSwitch database (no ovs-vswitchd: only the
/// rows matter), killed when dropped.
pub struct OvsDb {
    child: Child,
    /// `unix:<dir>/db.sock`
    pub remote: String,
}

impl OvsDb {
    pub fn start(dir: &Path) -> OvsDb {
        let db = dir.join("conf.db");
        let sock = dir.join("db.sock");
        let ok = Command::new("ovsdb-tool")
            .args(["create"])
            .arg(&db)
            .arg(SCHEMA)
            .status()
            .expect("ovsdb-tool");
        assert!(ok.success(), "ovsdb-tool create");
        let child = Command::new("ovsdb-server")
            .arg(&db)
            .arg(format!("--remote=punix:{}", sock.display()))
            .arg(format!("--unixctl={}", dir.join("ctl").display()))
            .arg("--no-chdir")
            .spawn()
            .expect("ovsdb-server");
        let remote = format!("unix:{}", sock.display());
        let t0 = Instant::now();
        loop {
            let init = Command::new("ovs-vsctl")
                .args([
                    &format!("--db={remote}"),
                    "--no-wait",
                    "--timeout=2",
                    "init",
                ])
                .output()
                .expect("ovs-vsctl");
            if init.status.success() {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "ovsdb-server not up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        OvsDb { child, remote }
    }

    /// `ovs-vsctl --no-wait ARGS` on this database: its output (panics if it fails).
    pub fn vsctl(&self, args: &[&str]) -> String {
        let out = Command::new("ovs-vsctl")
            .arg(format!("--db={}", self.remote))
            .arg("--no-wait")
            .args(args)
            .output()
            .expect("ovs-vsctl");
        assert!(
            out.status.success(),
            "ovs-vsctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for OvsDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
