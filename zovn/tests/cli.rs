//! The `zovn lab apply/delete/get` CLI without a lab: manifest checks happen before the
//! store is contacted, and a missing lab is a clear error (no root or OVN needed).

use std::path::{Path, PathBuf};
use std::process::Command;

fn zovn(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_zovn"))
        .args(args)
        .env_remove("ZOVN_LAB_DIR")
        .output()
        .expect("run zovn");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab")
}

fn scratch(name: &str, text: &str) -> (tempfile_dir::Dir, PathBuf) {
    let d = tempfile_dir::Dir::new(name);
    let f = d.0.join(name);
    std::fs::write(&f, text).expect("write manifest");
    (d, f)
}

/// A temp dir removed on drop (the lab crate has no tempfile dependency).
mod tempfile_dir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Dir {
            let d = std::env::temp_dir().join(format!("zovn-cli-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&d).expect("temp dir");
            Dir(d)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[test]
fn get_without_a_lab_says_so() {
    let (ok, _, err) = zovn(&["lab", "get", "pods", "--dir", "/nonexistent/zovn-lab"]);
    assert!(!ok);
    assert!(
        err.contains("the lab is not up in /nonexistent/zovn-lab (run `zovn lab up`)"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn examples_parse_then_the_missing_lab_is_reported() {
    let ex = examples();
    let (ok, _, err) = zovn(&[
        "lab",
        "apply",
        "-f",
        ex.to_str().expect("utf-8 path"),
        "--dir",
        "/nonexistent/zovn-lab",
    ]);
    assert!(!ok);
    assert!(err.contains("the lab is not up in"), "{err}");
}

#[test]
fn unsupported_kind_names_kind_and_file() {
    let (_d, f) = scratch(
        "deploy.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
    );
    let path = f.to_str().expect("utf-8 path");
    let (ok, _, err) = zovn(&["lab", "apply", "-f", path, "--dir", "/nonexistent/x"]);
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "{path}:5: kind Deployment (apps/v1) is not supported"
        )),
        "{err}"
    );
    assert!(err.contains("nothing applied"), "{err}");
}

#[test]
fn bad_yaml_names_file_and_line() {
    let (_d, f) = scratch(
        "bad.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers: [\n",
    );
    let path = f.to_str().expect("utf-8 path");
    let (ok, _, err) = zovn(&["lab", "delete", "-f", path, "--dir", "/nonexistent/x"]);
    assert!(!ok);
    assert!(err.contains(&format!("{path}:7:")), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn empty_directory_is_an_error() {
    let d = tempfile_dir::Dir::new("empty");
    let (ok, _, err) = zovn(&[
        "lab",
        "apply",
        "-f",
        d.0.to_str().expect("utf-8 path"),
        "--dir",
        "/nonexistent/x",
    ]);
    assert!(!ok);
    assert!(err.contains("no *.yaml, *.yml or *.json files"), "{err}");
}

#[test]
fn delete_needs_only_kind_namespace_and_name() {
    // a Pod without its spec, a Service without ports, a VMI without a spec: kubectl
    // deletes these by kind, namespace and name, and so does the lab
    let (_d, f) = scratch(
        "del.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p01}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: demo}\n---\n\
         apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: vm1}\n",
    );
    let path = f.to_str().expect("utf-8 path");
    let (ok, _, err) = zovn(&["lab", "delete", "-f", path, "--dir", "/nonexistent/x"]);
    assert!(!ok);
    assert!(!err.contains("no spec"), "{err}");
    assert!(
        err.contains("the lab is not up in /nonexistent/x"),
        "the manifest is accepted, the missing lab reported: {err}"
    );
    // apply still wants the spec
    let (ok, _, err) = zovn(&["lab", "apply", "-f", path, "--dir", "/nonexistent/x"]);
    assert!(!ok);
    assert!(err.contains("Pod p01: no spec"), "{err}");
    // a nameless object is still a problem for delete
    let (_d2, f2) = scratch("noname.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {}\n");
    let path2 = f2.to_str().expect("utf-8 path");
    let (ok, _, err) = zovn(&["lab", "delete", "-f", path2, "--dir", "/nonexistent/x"]);
    assert!(!ok);
    assert!(
        err.contains(&format!("{path2}:1: Pod: metadata.name is missing")),
        "{err}"
    );
    assert!(err.contains("nothing deleted"), "{err}");
}

/// `zovn lab down` on a lab whose manifest records nothing running, with one daemon under
/// its run dir that no manifest names: that daemon is stopped with a warning (a normal
/// down of a lab with pods is quiet: tests/tests/lab_suite/lab_pods.rs `pods_reach_each_other`), and
/// the warning, written to a pipe, carries no colour codes.
#[test]
fn down_warns_for_an_unrecorded_daemon_without_colour_on_a_pipe() {
    let d = tempfile_dir::Dir::new("down");
    let dir = d.0.join("lab");
    std::fs::create_dir_all(dir.join("run")).expect("run dir");
    lab::Manifest::new(lab::LabConfig::new(&dir, "zc"))
        .save(&dir.join("lab.json"))
        .expect("manifest");
    let pf = dir.join("run/stray.pid");
    let mut stray = Command::new("sh")
        .arg("-c")
        .arg("echo $$ > \"$0\"; while :; do sleep 1; done")
        .arg(&pf)
        .spawn()
        .expect("start the stray daemon");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !std::fs::read_to_string(&pf).is_ok_and(|t| t.trim().parse::<i32>().is_ok()) {
        assert!(std::time::Instant::now() < deadline, "no stray pidfile");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (ok, out, err) = zovn(&["lab", "down", "--dir", dir.to_str().expect("utf-8 path")]);
    let status = stray.wait().expect("reap the stray daemon");
    assert!(ok, "{out}\n{err}");
    assert!(
        !status.success(),
        "the stray daemon was stopped by a signal"
    );
    assert!(err.contains("stopped unrecorded daemon"), "{err}");
    assert!(err.contains("stray.pid"), "{err}");
    assert!(!err.contains('\x1b'), "colour codes on a pipe: {err:?}");
    assert!(!dir.exists(), "state dir left");
}
