//! `zstack-ovnkube-node debug capture` as the CLI meets it: a CLI speaking another capture
//! protocol is refused before anything is touched on the node (no OVS needed: the check
//! comes first), with both versions named and the input exit code.

use std::process::Command;

fn debug_capture(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_zstack-ovnkube-node"))
        .args(["debug", "capture"])
        .args(args)
        .output()
        .expect("run zstack-ovnkube-node debug capture");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn another_capture_protocol_is_refused_with_both_versions() {
    let theirs = api::pcap::CAPTURE_PROTOCOL + 1;
    let (code, out, err) = debug_capture(&[
        "--protocol",
        &theirs.to_string(),
        "--db",
        "unix:/nonexistent/db.sock",
        "--iface-id",
        "default_web",
    ]);
    assert_eq!(code, Some(api::pcap::EXIT_INPUT), "stderr: {err}");
    assert!(out.is_empty(), "no pcap may be written: {out:?}");
    assert!(
        err.contains(&format!("reads capture protocol {theirs}"))
            && err.contains(&format!("writes {}", api::pcap::CAPTURE_PROTOCOL)),
        "{err}"
    );
}

#[test]
fn the_subcommand_answers_its_version_and_needs_the_protocol() {
    let (code, out, _) = debug_capture(&["--version"]);
    assert_eq!(code, Some(0));
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
    let (code, _, err) = debug_capture(&["--iface-id", "default_web"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--protocol"), "{err}");
}
