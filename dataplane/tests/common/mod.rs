//! Test scaffolding for real-kernel tests (the `tests` crate's `require_real` /
//! `record_real_run` convention, re-done here since dataplane cannot depend on it).

#![allow(dead_code)]

use std::process::Command;

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
