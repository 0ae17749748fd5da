//! `make images` on real tools: `deploy/images/build.sh` (mmdebstrap + umoci, the release
//! binaries) writes the OCI archive; the test opens it as a runtime would and checks:
//! - `index.json` names the image `docker.io/zstack-ovn/zstack-ovn:<version>` in both
//!   `org.opencontainers.image.ref.name` and `io.containerd.image.name`, and that name is
//!   the chart's default (`image.repository` + Chart `appVersion`), and again as the
//!   build's tag `<version>-<short commit>[-dirty]` (the same manifest);
//! - the manifest's layers, unpacked in order, hold every program the chart runs at the
//!   path it runs it from (executable) and the OVSDB schemas;
//! - our binaries, the DPDK and kernel builds of ovs-vswitchd and the OVN daemons answer
//!   `--version` in a chroot of that root filesystem (their libraries are all there), and
//!   `ldd` finds every library of dpdk-testpmd (taken out of dpdk-dev) there;
//! - the operator's `zovn` CLI is not in the image, and the agent answers
//!   `zstack-ovnkube-node debug capture --version` (the node side of `zovn capture`);
//! - a private containerd (Debian's 1.6, `unshare -m -n`, sockets and root under the
//!   scratch dir) imports the archive with `ctr images import` and lists it by that name.
//!
//! Heavy (a cold build runs mmdebstrap and a release build): it holds the heavy lock and
//! prints its durations. The Debian layer is cached in /var/cache/zovn/images/.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use tests::containerd::Containerd;

/// Docs and chart agree on this name (docs/images.md, deploy/helm/zstack-ovn).
const REPOSITORY: &str = "zstack-ovn/zstack-ovn";

/// Programs the chart's containers run, at the paths its start scripts use.
const PROGRAMS: &[&str] = &[
    "/usr/local/bin/zstack-ovnkube-controller",
    "/usr/local/bin/zstack-ovnkube-node",
    "/usr/local/bin/zstack-ovn-cni",
    "/usr/local/bin/zstack-ovn-dbexporter",
    "/usr/sbin/ovsdb-server",
    "/usr/lib/openvswitch-switch/ovs-vswitchd",
    "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk",
    // a DPDK application for the other end of a vhost-user port (the cluster e2e)
    "/usr/bin/dpdk-testpmd",
    "/usr/bin/ovs-vsctl",
    "/usr/bin/ovs-appctl",
    "/usr/bin/ovsdb-tool",
    "/usr/bin/ovn-controller",
    "/usr/bin/ovn-northd",
    "/usr/bin/ovn-nbctl",
    "/usr/bin/ovn-sbctl",
    "/usr/bin/ovn-appctl",
    "/usr/sbin/ip",
    "/usr/sbin/nft",
    "/usr/sbin/ethtool",
    "/usr/bin/bash",
];

/// Data files the start scripts read.
const FILES: &[&str] = &[
    "/usr/share/openvswitch/vswitch.ovsschema",
    "/usr/share/ovn/ovn-nb.ovsschema",
    "/usr/share/ovn/ovn-sb.ovsschema",
    "/etc/ssl/certs/ca-certificates.crt",
];

/// `--version` in the chroot: program and a string its output must hold.
fn versions(version: &str) -> Vec<(&'static str, String)> {
    vec![
        ("/usr/local/bin/zstack-ovnkube-controller", version.into()),
        ("/usr/local/bin/zstack-ovnkube-node", version.into()),
        ("/usr/local/bin/zstack-ovn-dbexporter", version.into()),
        (
            "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk",
            "DPDK".into(),
        ),
        (
            "/usr/lib/openvswitch-switch/ovs-vswitchd",
            "Open vSwitch".into(),
        ),
        ("/usr/sbin/ovsdb-server", "Open vSwitch".into()),
        ("/usr/bin/ovn-controller", "ovn-controller".into()),
        ("/usr/bin/ovn-northd", "ovn-northd".into()),
        ("/usr/bin/ovn-nbctl", "ovn-nbctl".into()),
    ]
}

const BINS: &[&str] = &[
    "containerd",
    "ctr",
    "unshare",
    "chroot",
    "tar",
    "objcopy",
    "git",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The workspace version (Cargo.toml `[workspace.package] version`).
fn workspace_version(root: &Path) -> String {
    let toml = std::fs::read_to_string(root.join("Cargo.toml")).expect("read Cargo.toml");
    toml.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("workspace version")
        .to_string()
}

/// `key: value` of the first line starting with `indent` + `key:` after `after`
/// (a line at column 0), in a YAML file: enough for the chart's flat `image:` block.
fn yaml_value(text: &str, after: Option<&str>, key: &str) -> Option<String> {
    let mut inside = after.is_none();
    let prefix = if after.is_some() { "  " } else { "" };
    for l in text.lines() {
        if let Some(a) = after
            && !l.starts_with(' ')
            && !l.is_empty()
        {
            inside = l.trim_end() == format!("{a}:");
            continue;
        }
        if inside && let Some(v) = l.strip_prefix(&format!("{prefix}{key}:")) {
            return Some(v.trim().trim_matches('"').to_string());
        }
    }
    None
}

/// The image name the chart uses by default (`image.repository`, `image.tag` or the Chart's
/// `appVersion`).
fn chart_default_image(root: &Path) -> String {
    let chart = root.join("deploy/helm/zstack-ovn");
    let values = std::fs::read_to_string(chart.join("values.yaml")).expect("chart values.yaml");
    let meta = std::fs::read_to_string(chart.join("Chart.yaml")).expect("Chart.yaml");
    let repo = yaml_value(&values, Some("image"), "repository").expect("values image.repository");
    let tag = yaml_value(&values, Some("image"), "tag").unwrap_or_default();
    let app = yaml_value(&meta, None, "appVersion").expect("Chart appVersion");
    let tag = if tag.is_empty() { app } else { tag };
    format!("docker.io/{repo}:{tag}")
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
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

#[test]
fn images_make_import_and_run() {
    if !tests::require_real("images_make_import_and_run", BINS) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("img");
    let root = workspace_root();
    let version = workspace_version(&root);
    let name = format!("docker.io/{REPOSITORY}:{version}");
    assert_eq!(
        chart_default_image(&root),
        name,
        "the chart's default image"
    );

    // make images (into the scratch dir), from the commit read now
    let head = tests::sh(&["git", "-C", &root.to_string_lossy(), "rev-parse", "HEAD"]);
    let out = s.dir.path().join("out");
    let t = Instant::now();
    // the environment of `make images` from a shell (see tests::shell_build_env)
    let mut build = Command::new(root.join("deploy/images/build.sh"));
    tests::shell_build_env(&mut build).env("OUT", &out);
    let build = build
        .stdin(Stdio::null())
        .output()
        .expect("run deploy/images/build.sh");
    let build_secs = t.elapsed().as_secs_f64();
    assert!(
        build.status.success(),
        "build.sh: {}\n{}",
        build.status,
        String::from_utf8_lossy(&build.stderr)
    );
    let archive = out.join(format!("zstack-ovn-{version}.oci.tar"));
    let size = std::fs::metadata(&archive)
        .unwrap_or_else(|e| panic!("{archive:?}: {e}"))
        .len();
    eprintln!(
        "images: build {build_secs:.0} s, archive {} MiB",
        size >> 20
    );

    // the layout: index names the image; the manifest's config carries PATH and labels
    let layout = s.dir.path().join("layout");
    std::fs::create_dir_all(&layout).expect("mkdir layout");
    run(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout));
    let index = json(&layout.join("index.json"));
    let manifests = index["manifests"].as_array().expect("index manifests");
    // the build's own tag: <version>-<short HEAD>[-dirty] (no release tag here)
    let build_tag = std::fs::read_to_string(out.join(format!("zstack-ovn-{version}.tag")))
        .expect("the build's tag file");
    let build_tag = build_tag.trim();
    let short = &head.trim()[..7];
    assert!(
        build_tag == version || build_tag.starts_with(&format!("{version}-{short}")),
        "build tag {build_tag:?}, HEAD {short}"
    );
    let build_name = format!("docker.io/{REPOSITORY}:{build_tag}");
    let names: Vec<&str> = if build_tag == version {
        vec![name.as_str()]
    } else {
        vec![name.as_str(), build_name.as_str()]
    };
    assert_eq!(
        manifests.len(),
        names.len(),
        "one entry per name in {index}"
    );
    for (m, want) in manifests.iter().zip(&names) {
        for a in [
            "org.opencontainers.image.ref.name",
            "io.containerd.image.name",
        ] {
            assert_eq!(m["annotations"][a], *want, "{a} in {index}");
        }
        assert_eq!(m["digest"], manifests[0]["digest"], "one image: {index}");
    }
    let manifest = json(&blob(&layout, &manifests[0]["digest"]));
    let config = json(&blob(&layout, &manifest["config"]["digest"]));
    let labels = &config["config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], version.as_str());
    assert_eq!(labels["org.opencontainers.image.revision"], head.trim());
    let env = config["config"]["Env"].to_string();
    assert!(
        env.contains("PATH=/usr/local/sbin:/usr/local/bin:"),
        "{env}"
    );
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 2, "Debian + binaries: {manifest}");

    // unpack the layers in order (neither has whiteouts) and check the paths
    let rootfs = s.dir.path().join("rootfs");
    std::fs::create_dir_all(&rootfs).expect("mkdir rootfs");
    for l in layers {
        let mt = l["mediaType"].as_str().unwrap_or_default();
        assert!(mt.ends_with("tar+gzip"), "layer media type {mt}");
        run(Command::new("tar")
            .args(["--numeric-owner", "-xzf"])
            .arg(blob(&layout, &l["digest"]))
            .arg("-C")
            .arg(&rootfs));
    }
    let du = tests::sh(&["du", "-sm", &rootfs.to_string_lossy()]);
    let unpacked = du.split_whitespace().next().unwrap_or("?");
    eprintln!("images: unpacked root filesystem {unpacked} MiB");
    for p in PROGRAMS {
        let f = rootfs.join(p.trim_start_matches('/'));
        let meta = std::fs::metadata(&f).unwrap_or_else(|e| panic!("{p} in the image: {e}"));
        assert!(
            meta.is_file() && meta.permissions().mode() & 0o111 != 0,
            "{p} is not an executable file in the image"
        );
    }
    for p in FILES {
        assert!(
            rootfs.join(p.trim_start_matches('/')).is_file(),
            "{p} missing in the image"
        );
    }
    // the operator's CLI (and the lab it could link) stays on the operator's machine
    assert!(
        !rootfs.join("usr/local/bin/zovn").exists(),
        "the zovn CLI is in the image: it belongs on the operator's machine (make install-cli)"
    );
    // the node side of `zovn capture` is the agent's own subcommand, of this version
    let out = run(Command::new("chroot").arg(&rootfs).args([
        "/usr/local/bin/zstack-ovnkube-node",
        "debug",
        "capture",
        "--version",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&version), "debug capture --version: {text}");

    // --version in a chroot: every library the programs link is in the image
    for (prog, want) in versions(&version) {
        let out = run(Command::new("chroot")
            .arg(&rootfs)
            .args([prog, "--version"]));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&want), "{prog} --version: {text}");
    }

    // dpdk-testpmd comes out of dpdk-dev without its package's dependencies: every
    // library it links (librte_*, libpcap, ...) must be in the image
    let ldd = run(Command::new("chroot")
        .arg(&rootfs)
        .args(["ldd", "/usr/bin/dpdk-testpmd"]));
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(
        ldd.contains("librte_ethdev") && !ldd.contains("not found"),
        "ldd dpdk-testpmd in the image:\n{ldd}"
    );

    // a private containerd imports it under the chart's name
    let ctd = Containerd::start(&s.dir.path().join("containerd"), "k8s.io");
    let t = Instant::now();
    let import = ctd.ctr(&["images", "import", &archive.to_string_lossy()]);
    assert!(
        import.status.success(),
        "ctr images import: {}",
        String::from_utf8_lossy(&import.stderr)
    );
    eprintln!("images: ctr import {:.0} s", t.elapsed().as_secs_f64());
    let ls = ctd.ctr(&["images", "ls", "-q"]);
    let listed = String::from_utf8_lossy(&ls.stdout);
    for n in &names {
        assert!(
            listed.lines().any(|l| l.trim() == *n),
            "{n} not in ctr images ls: {listed}"
        );
    }
}
