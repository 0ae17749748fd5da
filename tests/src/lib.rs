//! # tests — end-to-end tests on real components
//!
//! Shared helpers for the integration tests under `tests/tests/`:
//!
//! - [`require_real`]: the real-component gate. A test that needs root and the OVN/OVS
//!   binaries calls it first; when something is missing it prints `SKIP <test>: <reason>`
//!   and the test returns early — unless `ZOVN_REQUIRE_REAL=1` (set by `scripts/run-tests.sh`, which `.ci/run` runs), in
//!   which case the missing prerequisite fails the test, so CI can never pass on skips.
//!   A test that runs records its name in `$ZOVN_REAL_LOG`, which `scripts/run-tests.sh`
//!   counts.
//! - [`heavy_lock`]: a file lock that serialises the heavy lab tests (daemons in network
//!   namespaces) on this 2-core machine; light tests run in parallel.
//! - [`scratch`]: a private state directory and a short, unique name prefix per test, so
//!   concurrent tests never share sockets, databases or namespaces.
//! - [`nbctl`]: `ovn-nbctl` as the second opinion on what an OVN_Northbound server holds.
//! - [`agent`]: a 2-node lab with the object store and one node agent per node, the CNI
//!   shim called like a runtime, and probes (ping, OVS interfaces, links).
//! - [`containerd`]: a private containerd in its own mount and network namespaces.
//! - [`e2e`]: named steps, the cluster's teardown guard and waits of `cluster_e2e.rs` (a
//!   real cluster, `lab::kubecluster`).
//! - [`helm`]: the Helm chart rendered and linted by the real Helm engine.
//! - [`kube`]: a private etcd + kube-apiserver (built once from Debian's source package and
//!   cached outside the repository) for tests against a real Kubernetes API.

use std::fs::File;
use std::path::{Path, PathBuf};

pub mod agent;
pub mod containerd;
pub mod e2e;
pub mod egress;
pub mod helm;
pub mod kube;
pub mod kube_objects;
pub mod lab_logs;
pub mod nbctl;
pub mod node_status;
pub mod platform;
pub mod process_group;
pub mod vhost_lab;
pub mod zovn;

/// Binaries a lab (OVN central + OVS nodes in namespaces, pods, traffic checks) needs.
pub const LAB_BINS: &[&str] = &[
    "ovsdb-server",
    "ovsdb-tool",
    "ovsdb-client",
    "ovn-nbctl",
    "ovn-sbctl",
    "ovn-northd",
    "ovn-controller",
    "ovs-vsctl",
    "ovs-appctl",
    "ovs-vswitchd",
    "ip",
    "ethtool",
    "ping",
];

/// Binaries every real-component test needs.
pub const OVSDB_BINS: &[&str] = &["ovsdb-server", "ovsdb-tool", "ovn-nbctl"];

/// Binaries a `lab::Central` without northd runs: NB and SB ovsdb-servers (standalone or
/// Raft), initialised and waited for with the OVS/OVN tools.
pub const CENTRAL_DB_BINS: &[&str] = &[
    "ovsdb-server",
    "ovsdb-tool",
    "ovsdb-client",
    "ovn-nbctl",
    "ovn-sbctl",
    "ovs-appctl",
];

/// Returns true when the test can run on real components. Otherwise prints the skip reason
/// and returns false, or panics with it when `ZOVN_REQUIRE_REAL=1`.
pub fn require_real(test: &str, bins: &[&str]) -> bool {
    match missing_prerequisite(bins) {
        None => {
            record_real_run(test);
            true
        }
        Some(reason) => {
            if std::env::var("ZOVN_REQUIRE_REAL").as_deref() == Ok("1") {
                panic!("{test}: real components required (ZOVN_REQUIRE_REAL=1) but {reason}");
            }
            eprintln!("SKIP {test}: {reason}");
            false
        }
    }
}

/// Appends `test` to the file named by `ZOVN_REAL_LOG` (set by `scripts/run-tests.sh`), so
/// the test script can prove the real-component suites ran rather than skipped.
pub fn record_real_run(test: &str) {
    use std::io::Write;
    if let Ok(path) = std::env::var("ZOVN_REAL_LOG")
        && let Ok(mut f) = File::options().create(true).append(true).open(path)
    {
        // one write(2) per line: with O_APPEND, lines from concurrent tests never interleave
        // (`writeln!` may split the name and the newline into two writes)
        let _ = f.write_all(format!("{test}\n").as_bytes());
    }
}

fn missing_prerequisite(bins: &[&str]) -> Option<String> {
    if !nix_is_root() {
        return Some("not running as root".into());
    }
    for b in bins {
        if find_in_path(b).is_none() {
            return Some(format!("`{b}` is not installed (run `make deps`)"));
        }
    }
    None
}

fn nix_is_root() -> bool {
    // effective uid from /proc, to avoid a libc dependency here
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Runs a command to completion and returns its stdout; panics (naming the command and
/// its stderr) when it cannot start or fails.
pub fn sh(args: &[&str]) -> String {
    let out = std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Gives `cmd` the environment a shell's `make images` sees: only `PATH`, `HOME`,
/// `TMPDIR`, the Rust toolchain's homes, `SOURCE_DATE_EPOCH` and `ZOVN_IMAGE_*` /
/// `DEBIAN_*`. A release build nested in a test otherwise sees the variables `cargo test`
/// sets (`CARGO_PKG_*`, `LD_LIBRARY_PATH`, …) and fingerprints differently: two suites
/// building the image then each paid a cold release build (~12 min on this machine).
pub fn shell_build_env(cmd: &mut std::process::Command) -> &mut std::process::Command {
    cmd.env_clear();
    for (k, v) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if [
            "PATH",
            "HOME",
            "TMPDIR",
            "RUSTUP_HOME",
            "CARGO_HOME",
            "SOURCE_DATE_EPOCH",
        ]
        .contains(&name.as_ref())
            || name.starts_with("ZOVN_IMAGE_")
            || name.starts_with("DEBIAN_")
        {
            cmd.env(k, v);
        }
    }
    cmd
}

/// Looks a program up in `PATH` (and the Debian sbin/libexec places OVS uses).
pub fn find_in_path(bin: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/lib/openvswitch-switch"])
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.is_file())
}

/// Holds the heavy-test lock until dropped. On drop it also checks the machine's 2 MiB
/// hugepage reservation: a test that leaves more reserved than it found is appended to
/// the file named by `ZOVN_HUGEPAGES_LOG` (set by `scripts/run-tests.sh`, which reports
/// it and puts the count back).
pub struct HeavyLock {
    _file: File,
    hugepages: Option<u64>,
}

impl Drop for HeavyLock {
    fn drop(&mut self) {
        use std::io::Write;
        let now = lab::hugepages::nr_pages_2m().ok();
        if let (Some(before), Some(now)) = (self.hugepages, now)
            && now > before
            && let Ok(path) = std::env::var("ZOVN_HUGEPAGES_LOG")
            && let Ok(mut f) = File::options().create(true).append(true).open(path)
        {
            let test = std::thread::current()
                .name()
                .unwrap_or("a test")
                .to_string();
            let _ = f.write_all(format!("{test}: nr_hugepages {before} -> {now}\n").as_bytes());
        }
    }
}

/// Serialises heavy tests across test binaries (an advisory `flock` on a file in the
/// system temp dir). Blocks until the lock is free.
pub fn heavy_lock() -> HeavyLock {
    let path = std::env::temp_dir().join("zovn-heavy-tests.lock");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    f.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    HeavyLock {
        _file: f,
        hugepages: lab::hugepages::nr_pages_2m().ok(),
    }
}

/// A private scratch area for one test: a temp dir (removed on drop) and a short unique
/// prefix for network namespace and interface names.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    pub prefix: String,
}

/// Creates a [`Scratch`] for `tag` (a few letters naming the test).
pub fn scratch(tag: &str) -> Scratch {
    let dir = tempfile::Builder::new()
        .prefix(&format!("zovn-{tag}-"))
        .tempdir()
        .expect("create scratch dir");
    // pid-derived suffix keeps names unique across concurrently running test binaries
    let prefix = format!(
        "{}{:x}",
        &tag[..tag.len().min(3)],
        std::process::id() % 0xfff
    );
    Scratch { dir, prefix }
}

/// The operator's `zovn` as `make install-cli` builds it (`--no-default-features`: no
/// lab), in `target/cli/<profile>/` beside this workspace's `target/<profile>/`.
pub fn operator_cli() -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    // target/<profile>/deps/<test>-<hash> → target/cli/<profile>/zovn
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable under target/<profile>/deps");
    let (Some(target), Some(name)) = (profile.parent(), profile.file_name()) else {
        panic!("no target dir above {}", profile.display());
    };
    let bin = target.join("cli").join(name).join("zovn");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p zovn --no-default-features --target-dir target/cli` (scripts/run-tests.sh does)",
        bin.display()
    );
    bin
}

/// A binary of this workspace, built next to the test executables (`target/<profile>/`).
/// `scripts/run-tests.sh` builds every binary first (`cargo test` alone builds only those
/// of crates with integration tests). Panics with a build hint if absent.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable under target/<profile>/deps");
    let bin = dir.join(name);
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build --workspace --bins` (scripts/run-tests.sh does)",
        bin.display()
    );
    bin
}
