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
