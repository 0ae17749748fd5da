//! `make test-images` on real tools: `deploy/images/build-test-images.sh` (Debian's
//! busybox-static through apt, umoci) writes one OCI archive with the cluster's workload
//! and sandbox images; the test checks:
//! - `index.json` names `localhost/zovn/busybox:1` and `localhost/zovn/pause:1` (both
//!   annotations), the two share one layer, busybox's Cmd is `sh` and pause's Entrypoint
//!   sleeps forever;
//! - a second run with unchanged inputs leaves the archive as it is (cached);
//! - a private containerd (Debian's 1.6) imports the archive with `ctr images import` and
//!   lists both names; `ctr run` of busybox runs a shell script (the applets the e2e uses
//!   are there, a line on stdin comes back on stdout) and pause runs until SIGKILL.
//!
//! Holds the heavy lock (a containerd with running tasks); prints its durations.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::containerd::Containerd;
use tests::zovn::wait_until;

const BUSYBOX: &str = "localhost/zovn/busybox:1";
const PAUSE: &str = "localhost/zovn/pause:1";

const BINS: &[&str] = &[
    "containerd",
    "containerd-shim-runc-v2",
    "runc",
    "ctr",
    "unshare",
    "umoci",
    "dpkg-deb",
    "apt-get",
    "tar",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

fn blob(layout: &Path, digest: &serde_json::Value) -> PathBuf {
    let d = digest.as_str().expect("digest string");
    let (alg, hex) = d.split_once(':').expect("algorithm:hex digest");
    layout.join("blobs").join(alg).join(hex)
}

/// Runs the build script with `OUT=out`; returns its stderr (the log).
fn build(root: &Path, out: &Path) -> String {
    let run = Command::new(root.join("deploy/images/build-test-images.sh"))
        .env("OUT", out)
        .stdin(Stdio::null())
        .output()
        .expect("run build-test-images.sh");
    let log = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(
        run.status.success(),
        "build-test-images.sh: {}\n{log}",
        run.status
    );
    log
}

/// Kills a task on drop, so a failed assertion leaves no shim or sleep behind.
struct Task<'a>(&'a Containerd, String);

impl Drop for Task<'_> {
    fn drop(&mut self) {
        let _ = self.0.ctr(&["tasks", "kill", "-s", "SIGKILL", &self.1]);
    }
}

/// The status column of `ctr tasks ls` for `id` (None: not listed).
fn task_status(ctd: &Containerd, id: &str) -> Option<String> {
    let out = ctd.ctr(&["tasks", "ls"]);
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first() == Some(&id)).then(|| f.last().unwrap_or(&"").to_string())
    })
}

#[test]
fn test_images_build_import_and_run() {
    if !tests::require_real("test_images_build_import_and_run", BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("timg");
    let root = workspace_root();
    let out = s.dir.path().join("out");
    let archive = out.join("zovn-test-images.oci.tar");

    let t = Instant::now();
    let log = build(&root, &out);
    let size = std::fs::metadata(&archive)
        .unwrap_or_else(|e| panic!("{archive:?}: {e}\n{log}"))
        .len();
    eprintln!(
        "test-images: build {:.1} s, archive {} KiB",
        t.elapsed().as_secs_f64(),
        size >> 10
    );
    let before = std::fs::read(&archive).expect("read archive");
    let t = Instant::now();
    let again = build(&root, &out);
    assert!(again.contains("up to date"), "second build: {again}");
    assert_eq!(
        std::fs::read(&archive).expect("read archive"),
        before,
        "the cached archive changed"
    );
    eprintln!(
        "test-images: cached build {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // the layout: both names, one shared layer, the commands
    let layout = s.dir.path().join("layout");
    std::fs::create_dir_all(&layout).expect("mkdir layout");
    tests::sh(&[
        "tar",
        "-xf",
        &archive.to_string_lossy(),
        "-C",
        &layout.to_string_lossy(),
    ]);
    let index = json(&layout.join("index.json"));
    let manifests = index["manifests"].as_array().expect("index manifests");
    assert_eq!(manifests.len(), 2, "two images in {index}");
    let mut layers = Vec::new();
    for name in [BUSYBOX, PAUSE] {
        let m = manifests
            .iter()
            .find(|m| m["annotations"]["io.containerd.image.name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {index}"));
        assert_eq!(
            m["annotations"]["org.opencontainers.image.ref.name"], name,
            "{index}"
        );
        let manifest = json(&blob(&layout, &m["digest"]));
        let config = json(&blob(&layout, &manifest["config"]["digest"]));
        let c = &config["config"];
        if name == BUSYBOX {
            assert_eq!(c["Cmd"], serde_json::json!(["sh"]), "{name}: {config}");
        } else {
            assert_eq!(
                c["Entrypoint"],
                serde_json::json!(["/bin/busybox", "sleep", "2147483647"]),
                "{name}: {config}"
            );
            assert!(c["Cmd"].is_null(), "{name} has a Cmd: {config}");
        }
        layers.push(manifest["layers"].clone());
    }
    assert_eq!(layers[0], layers[1], "busybox and pause share their layer");
    assert_eq!(layers[0].as_array().map(Vec::len), Some(1), "{:?}", layers);

    // a private containerd imports both names
    let ctd = Containerd::start(&s.dir.path().join("containerd"), "k8s.io");
    let t = Instant::now();
    let import = ctd.ctr(&["images", "import", &archive.to_string_lossy()]);
    assert!(
        import.status.success(),
        "ctr images import: {}",
        String::from_utf8_lossy(&import.stderr)
    );
    eprintln!("test-images: ctr import {:.1} s", t.elapsed().as_secs_f64());
    let ls = ctd.ctr(&["images", "ls", "-q"]);
    let listed = String::from_utf8_lossy(&ls.stdout);
    for name in [BUSYBOX, PAUSE] {
        assert!(
            listed.lines().any(|l| l.trim() == name),
            "{name} not in ctr images ls: {listed}"
        );
    }

    // busybox: a script using the applets the e2e needs, and a stdin -> stdout round trip
    let id = format!("{}-bb", s.prefix);
    let script = "echo sum-$((6*7)); for a in httpd nc wget ping ip sleep; do echo $a=$(readlink /bin/$a); done; \
                  cat /www/index.html; read line; echo got-$line";
    let mut run = ctd
        .ctr_cmd()
        .args(["run", "--rm", BUSYBOX, &id, "sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ctr run busybox");
    run.stdin
        .take()
        .expect("stdin")
        .write_all(b"zovn-ping\n")
        .expect("write stdin");
    let done = run.wait_with_output().expect("ctr run busybox");
    let text = String::from_utf8_lossy(&done.stdout);
    assert!(
        done.status.success(),
        "ctr run {BUSYBOX}: {}\n{text}\n{}\n{}",
        done.status,
        String::from_utf8_lossy(&done.stderr),
        ctd.log()
    );
    let want = "sum-42\nhttpd=busybox\nnc=busybox\nwget=busybox\nping=busybox\nip=busybox\nsleep=busybox\n\
                zovn busybox\ngot-zovn-ping\n";
    assert_eq!(text, want, "ctr run {BUSYBOX} output");

    // pause: its entrypoint keeps the task running until SIGKILL
    let pid = format!("{}-pause", s.prefix);
    let pause_run = ctd.ctr(&["run", "-d", PAUSE, &pid]).status.success();
    assert!(pause_run, "ctr run -d {PAUSE}: {}", ctd.log());
    let task = Task(&ctd, pid.clone());
    wait_until("pause task RUNNING", Duration::from_secs(20), || {
        task_status(&ctd, &pid).as_deref() == Some("RUNNING")
    });
    // its process is the entrypoint (busybox sleep, which does not exit by itself)
    let ps = ctd.ctr(&["tasks", "ps", &pid]);
    let ps = String::from_utf8_lossy(&ps.stdout).into_owned();
    let task_pid = ps
        .lines()
        .skip(1)
        .find_map(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("ctr tasks ps {pid}: {ps}"));
    let cmdline = std::fs::read(format!("/proc/{task_pid}/cmdline")).expect("task cmdline");
    assert_eq!(
        String::from_utf8_lossy(&cmdline),
        "/bin/busybox\x00sleep\x002147483647\x00",
        "pause's process"
    );
    assert_eq!(task_status(&ctd, &pid).as_deref(), Some("RUNNING"));
    let kill = ctd.ctr(&["tasks", "kill", "-s", "SIGKILL", &pid]);
    assert!(kill.status.success(), "ctr tasks kill: {:?}", kill);
    wait_until("pause task STOPPED", Duration::from_secs(20), || {
        task_status(&ctd, &pid).as_deref() == Some("STOPPED")
    });
    drop(task);
    for args in [["tasks", "rm", &pid], ["containers", "rm", &pid]] {
        let out = ctd.ctr(&args);
        assert!(out.status.success(), "ctr {args:?}: {out:?}");
    }
}
