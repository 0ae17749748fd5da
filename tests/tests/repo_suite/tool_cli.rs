//! The small code-generation binaries answer `--help` and refuse unknown arguments instead
//! of acting on them (`crdgen --help` used to write the CRD into a file named `--help`,
//! `ovsdb-codegen --help` to regenerate the typed-row sources); the operator's `zovn`
//! (no lab) names the build that has `zovn lab`.

use std::process::Command;

use tests::workspace_bin;

#[test]
fn crdgen_help_writes_no_file_and_unknown_options_fail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let help = Command::new(workspace_bin("crdgen"))
        .arg("--help")
        .current_dir(dir.path())
        .output()
        .expect("run crdgen --help");
    assert!(help.status.success(), "crdgen --help: {help:?}");
    assert!(String::from_utf8_lossy(&help.stdout).starts_with("usage: crdgen"));
    assert!(
        std::fs::read_dir(dir.path())
            .expect("read temp dir")
            .next()
            .is_none(),
        "crdgen --help created a file"
    );
    let bad = Command::new(workspace_bin("crdgen"))
        .arg("--bogus")
        .current_dir(dir.path())
        .output()
        .expect("run crdgen --bogus");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown option --bogus"));
    let yaml = Command::new(workspace_bin("crdgen"))
        .output()
        .expect("run crdgen");
    assert!(String::from_utf8_lossy(&yaml.stdout).contains("kind: CustomResourceDefinition"));
}

#[test]
fn ovsdb_codegen_help_regenerates_nothing() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ovsdb/src/vswitch.rs");
    let before = std::fs::metadata(&src)
        .and_then(|m| m.modified())
        .expect("mtime");
    for (arg, code) in [("--help", 0), ("--bogus", 2)] {
        let out = Command::new(workspace_bin("ovsdb-codegen"))
            .arg(arg)
            .output()
            .expect("run ovsdb-codegen");
        assert_eq!(
            out.status.code(),
            Some(code),
            "ovsdb-codegen {arg}: {out:?}"
        );
    }
    let after = std::fs::metadata(&src)
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_eq!(before, after, "ovsdb-codegen rewrote {}", src.display());
}

/// The operator's `zovn` (built without the lab, as `make install-cli` ships it) says
/// where `zovn lab` and `zovn cluster` are instead of not knowing them.
#[test]
fn the_operators_zovn_points_lab_commands_at_the_full_build() {
    for cmd in ["lab", "cluster"] {
        let out = Command::new(tests::operator_cli())
            .args([cmd, "up"])
            .output()
            .expect("run the operator's zovn");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains("operator's build") && err.contains("target/debug/zovn"),
            "{cmd}: {err}"
        );
    }
}
