//! A private Kubernetes API server for tests: etcd + kube-apiserver 1.20.2, no controllers,
//! no scheduler, no kubelet.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let scratch = tests::scratch("kube");
//! let api = tests::kube::KubeApi::start(scratch.dir.path()).await?;
//! let client = api.client().await?;
//! // ... kube::Api::<Pod>::namespaced(client, "ns") ...
//! # Ok(()) }
//! ```
//!
//! - **Binary.** No Debian package ships kube-apiserver; [`apiserver_binary`] takes it from
//!   the cache (`${ZOVN_CACHE:-/var/cache/zovn}/kube-apiserver-1.20.2/kube-apiserver`, or
//!   `$ZOVN_KUBE_APISERVER`), and when it is missing runs `tests/kube/build-kube.sh` (every component:
//!   `zovn cluster` needs the others, [`cluster_binaries`]),
//!   which builds it from Debian's `kubernetes` source package. **The first run on a fresh
//!   machine therefore takes ~10 minutes** (apt + Go build on 2 cores); later runs find the
//!   cached binary at once.
//! - **etcd** is Debian's `etcd-server` 3.4 (`etcd` in PATH), with a data dir under the
//!   caller's directory and client/peer URLs on free 127.0.0.1 ports.
//! - **kube-apiserver** serves HTTPS on a free 127.0.0.1 port with a certificate from a
//!   private CA (rcgen), authenticates one static token (user `admin`, group
//!   `system:masters`), authorises with RBAC, signs service-account tokens with a private
//!   key, allocates Service IPs from 10.96.0.0/16, and runs without the `ServiceAccount`
//!   admission plugin, so Pods are accepted although no token controller runs. A Pod with
//!   `spec.nodeName` set needs no scheduler; with no kubelet it stays `Pending`.
//! - **One command line with the lab cluster.** Both daemons' flags come from
//!   `lab::kubecluster::control_plane` (`etcd_args`, `apiserver_args` with the `Bare`
//!   profile), the credentials from `lab::kubecluster::pki`: only the process handling
//!   differs (this harness owns and reaps its children; `zovn cluster` detaches them).
//! - [`KubeApi::start`] returns once `/readyz` answers `ok` (bounded wait), with a kubeconfig
//!   written to `<dir>/kubeconfig`. Dropping the [`KubeApi`] stops both processes (SIGTERM,
//!   then SIGKILL after a grace period) and reaps them.
//!
//! Limits of 1.20: no `discovery.k8s.io/v1` EndpointSlice (v1beta1 only), no NetworkPolicy
//! `endPort`, namespaces lack the `kubernetes.io/metadata.name` label.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// The kube-apiserver version the build script produces.
pub const KUBE_VERSION: &str = "1.20.2";

/// The Service CIDR the API server allocates ClusterIPs from (the lab cluster's).
pub use lab::kubecluster::config::SERVICE_CIDR;

/// How long [`KubeApi::start`] waits for etcd, then for kube-apiserver, to become ready.
/// Generous: the API server needs 10-30 s on 2 busy cores.
const ETCD_READY_TIMEOUT: Duration = Duration::from_secs(60);
const APISERVER_READY_TIMEOUT: Duration = Duration::from_secs(180);
/// Grace period between SIGTERM and SIGKILL when stopping a daemon.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// The directory the build script caches binaries in (`$ZOVN_CACHE`, default
/// `/var/cache/zovn`).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("ZOVN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/zovn"))
}

/// Where the build script installs kube-apiserver.
pub fn cached_apiserver_path() -> PathBuf {
    cache_dir()
        .join(format!("kube-apiserver-{KUBE_VERSION}"))
        .join("kube-apiserver")
}

/// `tests/kube/build-kube.sh` in this source tree.
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kube/build-kube.sh")
}

/// The kube-apiserver binary: `$ZOVN_KUBE_APISERVER` if set, else the cached build, which is
/// built first (~10 min on a fresh machine, output on the terminal) when missing.
pub fn apiserver_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("ZOVN_KUBE_APISERVER") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("ZOVN_KUBE_APISERVER={} is not a file", p.display());
        }
        return Ok(p);
    }
    // One build per process; the script itself holds a file lock across processes.
    static BUILD: Mutex<()> = Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let bin = cached_apiserver_path();
    if bin.is_file() {
        return Ok(bin);
    }
    let script = build_script();
    eprintln!(
        "kube-apiserver {KUBE_VERSION} is not cached at {}: building it with {} \
         (first run only, ~10 minutes)",
        bin.display(),
        script.display()
    );
    let status = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("run {}", script.display()))?;
    if !status.success() {
        bail!("{} failed: {status}", script.display());
    }
    if !bin.is_file() {
        bail!(
            "{} succeeded but {} does not exist",
            script.display(),
            bin.display()
        );
    }
    Ok(bin)
}

/// The server components `zovn cluster` runs.
pub const CLUSTER_COMPONENTS: &[&str] = &[
    "kube-apiserver",
    "kubelet",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
];

/// Makes sure every one of [`CLUSTER_COMPONENTS`] is in the cache ([`cache_dir`]), running
/// `tests/kube/build-kube.sh` for the missing ones (first run on a machine: ~10 minutes);
/// returns the cache directory (`lab::kubecluster::ClusterConfig::kube_cache`).
pub fn cluster_binaries() -> Result<PathBuf> {
    static BUILD: Mutex<()> = Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache_dir();
    let path = |c: &str| cache.join(format!("{c}-{KUBE_VERSION}")).join(c);
    let missing: Vec<&str> = CLUSTER_COMPONENTS
        .iter()
        .copied()
        .filter(|c| !path(c).is_file())
        .collect();
    if missing.is_empty() {
        return Ok(cache);
    }
    let script = build_script();
    eprintln!(
        "{} not cached under {}: building with {} (first run only, ~10 minutes)",
        missing.join(", "),
        cache.display(),
        script.display()
    );
    let status = Command::new("bash")
        .arg(&script)
        .args(&missing)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("run {}", script.display()))?;
    if !status.success() {
        bail!(
            "{} {} failed: {status}",
            script.display(),
            missing.join(" ")
        );
    }
    if let Some(c) = CLUSTER_COMPONENTS.iter().find(|c| !path(c).is_file()) {
        bail!(
            "{} succeeded but {} is missing",
            script.display(),
            path(c).display()
        );
    }
    Ok(cache)
}

/// A running etcd + kube-apiserver pair; stopped on drop.
pub struct KubeApi {
    dir: PathBuf,
    server_url: String,
    etcd_url: String,
    token: String,
    kubeconfig: PathBuf,
    ca_cert: PathBuf,
    apiserver: Option<Daemon>,
    etcd: Option<Daemon>,
}

impl KubeApi {
    /// Starts etcd and kube-apiserver with all state (etcd data, certificates, keys, token
    /// file, logs, kubeconfig) under `dir`, and waits until the API server is ready.
    pub async fn start(dir: &Path) -> Result<KubeApi> {
        let apiserver_bin = apiserver_binary()?;
        let etcd_bin = crate::find_in_path("etcd")
            .ok_or_else(|| anyhow!("`etcd` not found in PATH (apt-get install etcd-server)"))?;
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let dir = dir
            .canonicalize()
            .with_context(|| format!("canonicalize {}", dir.display()))?;

        // A port picked free may be taken by someone else before the daemon binds it: retry
        // the whole start with new ports when a daemon reports exactly that.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::try_start(&dir, &etcd_bin, &apiserver_bin).await {
                Ok(api) => return Ok(api),
                Err(e) if attempt < 3 && format!("{e:#}").contains("address already in use") => {
                    eprintln!("kube: port race ({e:#}); retrying with new ports");
                    let _ = std::fs::remove_dir_all(dir.join("etcd-data"));
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn try_start(dir: &Path, etcd_bin: &Path, apiserver_bin: &Path) -> Result<KubeApi> {
        use lab::kubecluster::control_plane::{
            ApiServerFlags, ApiServerProfile, apiserver_args, etcd_args, free_ports,
        };
        let [client_port, peer_port, secure_port] = free_ports::<3>()?;
        let server_url = format!("https://127.0.0.1:{secure_port}");
        let pki = write_credentials(dir, &server_url)?;

        let mut etcd_cmd = Command::new(etcd_bin);
        etcd_cmd.args(etcd_args(&dir.join("etcd-data"), client_port, peer_port));
        let mut api = KubeApi {
            dir: dir.to_path_buf(),
            server_url,
            etcd_url: format!("http://127.0.0.1:{client_port}"),
            token: pki.token("admin").context("the admin token")?,
            kubeconfig: pki.kubeconfig("admin"),
            ca_cert: pki.ca_cert(),
            apiserver: None,
            etcd: None,
        };
        api.etcd = Some(Daemon::spawn("etcd", etcd_cmd, &dir.join("etcd.log"))?);
        api.wait_etcd_healthy(client_port).await?;

        let mut cmd = Command::new(apiserver_bin);
        cmd.args(apiserver_args(&ApiServerFlags {
            etcd_url: &api.etcd_url,
            address: "127.0.0.1",
            port: secure_port,
            pki: &pki,
            profile: ApiServerProfile::Bare,
        }));
        api.apiserver = Some(Daemon::spawn(
            "kube-apiserver",
            cmd,
            &dir.join("kube-apiserver.log"),
        )?);
        api.wait_apiserver_ready().await?;
        Ok(api)
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The admin bearer token (user `admin`, group `system:masters`).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A kubeconfig (context `zovn`, user `admin`) for this server.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The CA certificate (PEM) that signed the serving certificate.
    pub fn ca_cert_path(&self) -> &Path {
        &self.ca_cert
    }

    /// `http://127.0.0.1:<port>` of the private etcd.
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The state directory passed to [`KubeApi::start`] (canonicalised).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The kube-apiserver log (stdout + stderr).
    pub fn apiserver_log(&self) -> PathBuf {
        self.dir.join("kube-apiserver.log")
    }

    /// Process ids of (etcd, kube-apiserver) while they run.
    pub fn pids(&self) -> (Option<u32>, Option<u32>) {
        (
            self.etcd.as_ref().map(|d| d.child.id()),
            self.apiserver.as_ref().map(|d| d.child.id()),
        )
    }

    /// A kube-rs client from the kubeconfig (trusting the private CA, admin token).
    pub async fn client(&self) -> Result<::kube::Client> {
        use ::kube::config::{KubeConfigOptions, Kubeconfig};
        let kc = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("read kubeconfig {}", self.kubeconfig.display()))?;
        let config = ::kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .context("kube config from kubeconfig")?;
        ::kube::Client::try_from(config).context("build kube client")
    }

    /// Stops kube-apiserver, then etcd, and reaps both. Also done on drop.
    pub fn stop(&mut self) {
        if let Some(d) = self.apiserver.take() {
            d.stop();
        }
        if let Some(d) = self.etcd.take() {
            d.stop();
        }
    }

    /// A kube-rs client that authenticates with `token` (a service account's, a tenant's)
    /// instead of the admin's.
    pub async fn client_with_token(&self, token: &str) -> Result<::kube::Client> {
        use ::kube::config::{KubeConfigOptions, Kubeconfig};
        let yaml =
            lab::kubecluster::pki::kubeconfig_yaml(&self.server_url, &self.ca_cert, "admin", token);
        let kc = Kubeconfig::from_yaml(&yaml).context("kubeconfig for a token")?;
        let config = ::kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .context("kube config for a token")?;
        ::kube::Client::try_from(config).context("build kube client")
    }

    async fn wait_etcd_healthy(&mut self, port: u16) -> Result<()> {
        let deadline = Instant::now() + ETCD_READY_TIMEOUT;
        loop {
            self.check_running("etcd")?;
            let last = match tokio::task::spawn_blocking(move || {
                lab::kubecluster::control_plane::etcd_health(port)
            })
            .await
            {
                Ok(Ok(body)) if lab::kubecluster::control_plane::etcd_healthy(&body) => {
                    return Ok(());
                }
                Ok(Ok(body)) => body,
                Ok(Err(e)) => format!("GET /health: {e}"),
                Err(e) => format!("health probe task: {e}"),
            };
            if Instant::now() >= deadline {
                bail!(
                    "etcd not healthy after {ETCD_READY_TIMEOUT:?} ({last}); log tail:\n{}",
                    log_tail(&self.dir.join("etcd.log"))
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_apiserver_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + APISERVER_READY_TIMEOUT;
        let client = self.client().await?;
        loop {
            self.check_running("kube-apiserver")?;
            self.check_running("etcd")?;
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .context("build /readyz request")?;
            let last = match tokio::time::timeout(Duration::from_secs(5), client.request_text(req))
                .await
            {
                Ok(Ok(body)) if body.trim() == "ok" => return Ok(()),
                Ok(Ok(body)) => body,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "/readyz timed out".into(),
            };
            if Instant::now() >= deadline {
                bail!(
                    "kube-apiserver not ready after {APISERVER_READY_TIMEOUT:?} ({last}); \
                     log tail:\n{}",
                    log_tail(&self.apiserver_log())
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Fails with the daemon's log tail when it has exited.
    fn check_running(&mut self, name: &str) -> Result<()> {
        let d = match name {
            "etcd" => self.etcd.as_mut(),
            _ => self.apiserver.as_mut(),
        };
        let Some(d) = d else {
            bail!("{name} is not running")
        };
        if let Some(status) = d
            .child
            .try_wait()
            .with_context(|| format!("wait for {name}"))?
        {
            let tail = log_tail(&d.log);
            bail!("{name} exited during start-up ({status}); log tail:\n{tail}");
        }
        Ok(())
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        // A failing test usually removes `dir` right after: show the server's view first.
        if std::thread::panicking() {
            eprintln!(
                "kube: test failed; kube-apiserver log tail ({}):\n{}",
                self.apiserver_log().display(),
                log_tail(&self.apiserver_log())
            );
        }
        self.stop();
    }
}

/// A daemon this harness spawned. The [`Child`] is not reaped until [`Daemon::stop`], so its
/// pid cannot be reused by another process meanwhile.
struct Daemon {
    name: &'static str,
    exe: PathBuf,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn spawn(name: &'static str, mut cmd: Command, log: &Path) -> Result<Daemon> {
        let out =
            std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
        let err = out
            .try_clone()
            .with_context(|| format!("dup {}", log.display()))?;
        let exe = PathBuf::from(cmd.get_program());
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("spawn {name} ({})", exe.display()))?;
        Ok(Daemon {
            name,
            exe,
            child,
            log: log.to_path_buf(),
        })
    }

    /// SIGTERM, wait up to [`STOP_GRACE`], then SIGKILL; always reaps the child.
    fn stop(mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pid = self.child.id();
        // Our unreaped child keeps its pid, but check the command line anyway before
        // signalling (an empty cmdline is the zombie of our exited child).
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
        let ours = argv0.is_empty() || Path::new(&*String::from_utf8_lossy(argv0)) == self.exe;
        if !ours {
            eprintln!(
                "kube: pid {pid} is not our {} ({}); not signalling it",
                self.name,
                String::from_utf8_lossy(argv0)
            );
            return;
        }
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        eprintln!(
            "kube: {} (pid {pid}) ignored SIGTERM for {STOP_GRACE:?}; killing it",
            self.name
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lab cluster's credentials (`lab::kubecluster::pki`, one writer for both): a private
/// CA, a serving certificate for 127.0.0.1/localhost/kubernetes.default (and the first
/// Service IP), a service-account signing key and a static token file with one admin.
fn write_credentials(dir: &Path, server: &str) -> Result<lab::kubecluster::pki::Pki> {
    use lab::kubecluster::pki::{self, Identity};
    let sans = [
        "127.0.0.1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "10.96.0.1",
    ]
    .map(String::from);
    let admin = Identity::new("admin", "admin", &["system:masters"]);
    pki::write(dir, server, &sans, &[admin]).context("write the credentials")
}

/// The last lines of a log file, for error messages.
fn log_tail(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// `apiserver_request_total` from the API server's `/metrics`, summed by
/// `VERB resource[/subresource][.group]` (requests to non-resource paths such as
/// `/metrics` itself are left out). A watch is counted when it ends (1.20 records a
/// request's metrics when its handler returns).
pub async fn request_counts(
    client: &::kube::Client,
) -> Result<std::collections::BTreeMap<String, f64>> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .context("build the /metrics request")?;
    let text = client
        .request_text(req)
        .await
        .context("GET /metrics from kube-apiserver")?;
    Ok(parse_request_counts(&text))
}

/// The `apiserver_request_total` lines of a Prometheus text page, summed as
/// [`request_counts`] does.
pub fn parse_request_counts(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split("\",")
                .filter_map(|kv| kv.split_once("=\""))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let resource = label("resource");
        if resource.is_empty() {
            continue;
        }
        let mut key = format!("{} {resource}", label("verb"));
        let sub = label("subresource");
        if !sub.is_empty() {
            key = format!("{key}/{sub}");
        }
        let group = label("group");
        if !group.is_empty() {
            key = format!("{key}.{group}");
        }
        *out.entry(key).or_insert(0.0) += value;
    }
    out
}

/// `after - before` per key, zero differences left out.
pub fn count_delta(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
) -> std::collections::BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d != 0.0)
        .collect()
}

#[cfg(test)]
mod request_count_tests {
    use super::*;

    #[test]
    fn request_counts_by_verb_and_resource() {
        let page = r#"# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 3
apiserver_request_total{code="404",component="apiserver",contentType="application/json",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",contentType="application/json",dry_run="",group="events.k8s.io",resource="events",scope="namespace",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="network.zstack.io",resource="subnets",scope="cluster",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_total{code="200",component="",contentType="text/plain",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 9
"#;
        let c = parse_request_counts(page);
        assert_eq!(c.get("GET pods"), Some(&5.0));
        assert_eq!(c.get("POST events.events.k8s.io"), Some(&1.0));
        assert_eq!(c.get("PATCH subnets/status.network.zstack.io"), Some(&4.0));
        assert_eq!(c.len(), 3, "{c:?}");
        let mut after = c.clone();
        *after.get_mut("GET pods").unwrap() += 2.0;
        assert_eq!(
            count_delta(&c, &after),
            std::collections::BTreeMap::from([("GET pods".to_string(), 2.0)])
        );
    }
}
