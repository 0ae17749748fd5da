//! The Helm chart `deploy/helm/zstack-ovn` through the real Helm engine.
//!
//! - **Binary.** Helm is not a Debian package: `scripts/install-helm.sh` (run by
//!   `make deps`) puts helm v3.17.2 at `${ZOVN_CACHE:-/var/cache/zovn}/helm-3.17.2/helm`.
//!   [`require_helm`] finds it there (or at `$ZOVN_HELM`); when it is missing the test skips
//!   with the reason, or fails under `ZOVN_REQUIRE_REAL=1`.
//! - **Profiles.** `single`, `ha`, `external-tls`, `dpdk-pools`: the shipped profiles
//!   ([`SHIPPED_PROFILES`], `values-standalone.yaml` and the like beside `values.yaml`), each
//!   with its CI additions from the chart's `ci/*-values.yaml` (helm's convention for CI
//!   values files) given after it ([`profile_files`]).
//! - [`render`] runs `helm template` against Kubernetes 1.20.2 (the tests' apiserver) and
//!   parses every document into JSON values; [`lint`] runs `helm lint --strict`.
//! - The tests render release [`RELEASE`] into [`NAMESPACE`] ([`render_profile`]), find
//!   objects ([`of_kind`], [`named`], [`container`]) and write the start scripts of the
//!   rendered ConfigMap to a directory ([`write_scripts`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde_json::Value;

/// The Helm version `scripts/install-helm.sh` installs.
pub const HELM_VERSION: &str = "3.17.2";

/// The release name the tests render.
pub const RELEASE: &str = "zs";

/// The namespace the tests render into.
pub const NAMESPACE: &str = "kube-system";

/// The ConfigMap holding the start scripts (release [`RELEASE`]).
pub const SCRIPTS_CONFIGMAP: &str = "zs-zstack-ovn-scripts";

/// The four value profiles the tests render ([`profile_files`]).
pub const PROFILES: &[&str] = &["single", "ha", "external-tls", "dpdk-pools"];

/// The profiles shipped beside the chart's `values.yaml`, written in its own keys
/// (docs/install.md).
pub const SHIPPED_PROFILES: &[&str] = &[
    "values-standalone.yaml",
    "values-standalone-ha.yaml",
    "values-external.yaml",
];

/// `deploy/helm/zstack-ovn` in this source tree.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/zstack-ovn")
}

/// The values files of `profile`, in the order helm takes them: a shipped profile, then
/// what CI adds to it under `ci/`.
pub fn profile_files(profile: &str) -> Vec<PathBuf> {
    let chart = chart_dir();
    let ci = |f: &str| chart.join("ci").join(f);
    match profile {
        "single" => vec![chart.join("values-standalone.yaml")],
        "ha" => vec![
            chart.join("values-standalone-ha.yaml"),
            ci("ha-values.yaml"),
        ],
        "external-tls" => vec![
            chart.join("values-external.yaml"),
            ci("external-tls-values.yaml"),
        ],
        other => vec![ci(&format!("{other}-values.yaml"))],
    }
}

/// `-f FILE` for each of `files`.
fn file_args(files: &[PathBuf]) -> Vec<String> {
    files
        .iter()
        .flat_map(|f| ["-f".to_string(), f.to_string_lossy().into_owned()])
        .collect()
}

/// Where `scripts/install-helm.sh` puts helm (or `$ZOVN_HELM`).
pub fn helm_path() -> PathBuf {
    std::env::var_os("ZOVN_HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            crate::kube::cache_dir()
                .join(format!("helm-{HELM_VERSION}"))
                .join("helm")
        })
}

/// The helm binary, or None after printing why the test skips (a panic under
/// `ZOVN_REQUIRE_REAL=1`). Records the run for `scripts/run-tests.sh`.
pub fn require_helm(test: &str) -> Option<PathBuf> {
    let p = helm_path();
    if p.is_file() {
        crate::record_real_run(test);
        return Some(p);
    }
    let reason = format!(
        "helm is not installed at {} (run scripts/install-helm.sh)",
        p.display()
    );
    if std::env::var("ZOVN_REQUIRE_REAL").as_deref() == Ok("1") {
        panic!("{test}: real components required (ZOVN_REQUIRE_REAL=1) but {reason}");
    }
    eprintln!("SKIP {test}: {reason}");
    None
}

/// The outcome of one helm command.
pub struct HelmRun {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs helm with `args`.
pub fn run(helm: &Path, args: &[&str]) -> Result<HelmRun> {
    let out = Command::new(helm)
        .args(args)
        .output()
        .with_context(|| format!("run {} {args:?}", helm.display()))?;
    Ok(HelmRun {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// `helm template <release> <chart> -n <namespace> --kube-version 1.20.2 <extra>`.
pub fn template(helm: &Path, release: &str, namespace: &str, extra: &[&str]) -> Result<HelmRun> {
    let chart = chart_dir();
    let chart = chart.to_string_lossy();
    let mut args = vec![
        "template",
        release,
        &chart,
        "-n",
        namespace,
        "--kube-version",
        crate::kube::KUBE_VERSION,
    ];
    args.extend_from_slice(extra);
    run(helm, &args)
}

/// Renders `profile` and returns every object (in helm's install order).
pub fn render(helm: &Path, profile: &str, release: &str, namespace: &str) -> Result<Vec<Value>> {
    render_with(helm, profile, release, namespace, &[])
}

/// [`render`] with extra helm arguments (e.g. `--set`, another `--kube-version`).
pub fn render_with(
    helm: &Path,
    profile: &str,
    release: &str,
    namespace: &str,
    extra: &[&str],
) -> Result<Vec<Value>> {
    render_files(helm, &profile_files(profile), release, namespace, extra)
        .with_context(|| format!("profile {profile}"))
}

/// Renders the values `files` (in order) with extra helm arguments and returns every object.
pub fn render_files(
    helm: &Path,
    files: &[PathBuf],
    release: &str,
    namespace: &str,
    extra: &[&str],
) -> Result<Vec<Value>> {
    let fargs = file_args(files);
    let mut args: Vec<&str> = fargs.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    let r = template(helm, release, namespace, &args)?;
    if !r.ok {
        bail!("helm template {files:?}: {}", r.stderr);
    }
    parse_documents(&r.stdout)
}

/// [`render`] of release [`RELEASE`] into [`NAMESPACE`]; panics on failure (test support).
pub fn render_profile(helm: &Path, profile: &str) -> Vec<Value> {
    render(helm, profile, RELEASE, NAMESPACE).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Every non-empty YAML document of `text`, as JSON.
pub fn parse_documents(text: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let v = Value::deserialize(doc).context("parse a rendered document")?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// `helm lint --strict` of `profile` (Kubernetes 1.20.2).
pub fn lint(helm: &Path, profile: &str) -> Result<HelmRun> {
    lint_files(helm, &profile_files(profile))
}

/// `helm lint --strict` with the values `files` (Kubernetes 1.20.2).
pub fn lint_files(helm: &Path, files: &[PathBuf]) -> Result<HelmRun> {
    let chart = chart_dir().to_string_lossy().into_owned();
    let fargs = file_args(files);
    let mut args = vec!["lint", "--strict", &chart];
    args.extend(fargs.iter().map(String::as_str));
    args.extend(["--kube-version", crate::kube::KUBE_VERSION]);
    run(helm, &args)
}

/// The objects of `kind`.
pub fn of_kind<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| o["kind"] == kind).collect()
}

/// The object of `kind` named `name`.
pub fn named<'a>(objs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

/// Every container and init container of a workload's pod template.
pub fn containers(workload: &Value) -> Vec<&Value> {
    let spec = &workload["spec"]["template"]["spec"];
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec[*k].as_array())
        .flatten()
        .collect()
}

/// The string items of a container's `args`.
pub fn args(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect()
}

/// The container `name` of a workload; panics if there is none (test support).
pub fn container<'a>(workload: &'a Value, name: &str) -> &'a Value {
    containers(workload)
        .into_iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name} in {}", workload["metadata"]["name"]))
}

/// The start scripts of the rendered ConfigMap (file name to body); panics if it is
/// missing (test support).
pub fn scripts(objs: &[Value]) -> &serde_json::Map<String, Value> {
    named(objs, "ConfigMap", SCRIPTS_CONFIGMAP)
        .and_then(|cm| cm["data"].as_object())
        .unwrap_or_else(|| panic!("no ConfigMap {SCRIPTS_CONFIGMAP} with data"))
}

/// Writes every start script of the rendered ConfigMap into `dir/scripts` and returns that
/// directory; panics on failure (test support).
pub fn write_scripts(objs: &[Value], dir: &Path) -> PathBuf {
    let out = dir.join("scripts");
    std::fs::create_dir_all(&out).unwrap_or_else(|e| panic!("mkdir {}: {e}", out.display()));
    for (name, body) in scripts(objs) {
        let body = body
            .as_str()
            .unwrap_or_else(|| panic!("script {name} is not a string"));
        std::fs::write(out.join(name), body).unwrap_or_else(|e| panic!("write {name}: {e}"));
    }
    out
}

/// Writes the rendered Secret `name`'s `data` (base64, decoded with `base64 -d`) into
/// `dir`, one file per key, as kubelet mounts a Secret volume.
pub fn write_secret(objs: &[Value], name: &str, dir: &Path) {
    let secret = objs
        .iter()
        .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no Secret {name} rendered"));
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    let data = secret["data"]
        .as_object()
        .unwrap_or_else(|| panic!("Secret {name} has no data"));
    for (key, v) in data {
        let b64 = v
            .as_str()
            .unwrap_or_else(|| panic!("{name}/{key} is not a string"));
        let mut child = std::process::Command::new("base64")
            .arg("-d")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("base64");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(b64.as_bytes()).expect("write base64");
        }
        let out = child.wait_with_output().expect("base64 -d");
        assert!(out.status.success(), "{name}/{key}: not base64");
        std::fs::write(dir.join(key), out.stdout).unwrap_or_else(|e| panic!("write {key}: {e}"));
    }
}
