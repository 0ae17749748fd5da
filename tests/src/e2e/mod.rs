//! What `tests/tests/cluster_e2e.rs` stands on (a real cluster, `lab::kubecluster`):
//!
//! - [`Steps`]: named steps printing `step <name>: ok (<secs>)` or
//!   `step <name>: FAILED: <why>`, and the `N passed, M failed` summary;
//! - [`ClusterGuard`]: the cluster torn down when the test ends, however it ends (the state
//!   directory and its logs are kept when a step failed or the test panicked);
//! - [`wait_until`]: a bounded wait whose timeout names what did not happen and the last
//!   error seen;
//! - `kubectl` helpers: [`kubectl`], [`exec`] (a command in a pod's container) and
//!   [`describe`] (what to print about a stuck object);
//! - [`histogram`], [`histogram_quantile`]: a Prometheus histogram scraped over HTTP and a
//!   quantile of what it observed between two scrapes;
//! - [`objects`]: the client, object creation, pod accessors, the test workloads and the
//!   OVS ports of ours on a node.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lab::kubecluster::KubeCluster;

pub mod objects;
pub mod ovn_client;
pub mod ping_probe;
pub mod usage;
pub mod vswitchd;

/// The outcome of every step so far.
#[derive(Default)]
pub struct Steps {
    passed: usize,
    failed: Vec<String>,
    unselected: Vec<String>,
    /// Every step line is appended here too ([`Steps::log_to`]): the cluster's state
    /// directory, kept when a step failed, holds the reasons after the run.
    log: Option<PathBuf>,
}

/// The environment variable naming the steps a developer's run runs (comma-separated;
/// unset: every step, as CI runs them).
pub const STEPS_ENV: &str = "ZOVN_E2E_STEPS";

/// Whether this run runs step `name` (`ZOVN_E2E_STEPS` unset: every step), for what a
/// suite prepares before its steps start.
pub fn step_selected(name: &str) -> bool {
    std::env::var(STEPS_ENV).map_or(true, |list| list.split(',').any(|s| s.trim() == name))
}

impl Steps {
    /// Also appends every step line to `path`.
    pub fn log_to(&mut self, path: PathBuf) {
        self.log = Some(path);
    }

    fn say(&self, line: &str) {
        println!("{line}");
        if let Some(p) = &self.log {
            use std::io::Write;
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p);
            if let Err(e) = f.and_then(|mut f| writeln!(f, "{line}")) {
                println!("(step log {}: {e})", p.display());
            }
        }
    }

    /// False (and printed) when `ZOVN_E2E_STEPS` is set and does not name `name`.
    pub fn selected(&mut self, name: &str) -> bool {
        if step_selected(name) {
            return true;
        }
        let list = std::env::var(STEPS_ENV).unwrap_or_default();
        println!("step {name}: not selected ({STEPS_ENV}={list})");
        self.unselected.push(name.to_string());
        false
    }

    /// Records step `name` started at `t0`; prints its line. True when it passed.
    pub fn record(&mut self, name: &str, t0: Instant, r: Result<()>) -> bool {
        let secs = t0.elapsed().as_secs_f64();
        match r {
            Ok(()) => {
                self.say(&format!("step {name}: ok ({secs:.1} s)"));
                self.passed += 1;
                true
            }
            Err(e) => {
                self.say(&format!("step {name}: FAILED: {e:#} (after {secs:.1} s)"));
                self.failed.push(name.to_string());
                false
            }
        }
    }

    /// A step not run because one it depends on failed (counted as failed).
    pub fn skip(&mut self, name: &str, because: &str) {
        self.say(&format!("step {name}: FAILED: not run ({because} failed)"));
        self.failed.push(name.to_string());
    }

    /// Prints `N passed, M failed`; returns the failed steps.
    pub fn summary(&self) -> &[String] {
        self.say(&format!(
            "{} passed, {} failed",
            self.passed,
            self.failed.len()
        ));
        if !self.unselected.is_empty() {
            println!(
                "a partial run: {} step(s) not selected by {STEPS_ENV}: {}",
                self.unselected.len(),
                self.unselected.join(", ")
            );
        }
        &self.failed
    }
}

/// Tears the cluster down on drop: `down` when everything passed, else `down_keep_files`
/// (the state directory keeps every daemon's log; the next `up` on it removes it).
pub struct ClusterGuard {
    pub cluster: Option<KubeCluster>,
    /// Keep the state directory (set when a step failed).
    pub keep: bool,
}

impl ClusterGuard {
    /// The cluster (present until drop).
    pub fn get(&self) -> &KubeCluster {
        self.cluster
            .as_ref()
            .expect("the cluster is up until the guard drops")
    }

    /// The cluster, mutably (kubelet restarts).
    pub fn get_mut(&mut self) -> &mut KubeCluster {
        self.cluster
            .as_mut()
            .expect("the cluster is up until the guard drops")
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        let Some(c) = self.cluster.take() else {
            return;
        };
        let dir = c.dir().to_path_buf();
        let t = Instant::now();
        let keep = self.keep || std::thread::panicking();
        let r = if keep { c.down_keep_files() } else { c.down() };
        match r {
            Ok(()) if keep => println!(
                "cluster down ({:.1} s); logs kept in {}",
                t.elapsed().as_secs_f64(),
                dir.display()
            ),
            Ok(()) => println!("cluster down ({:.1} s)", t.elapsed().as_secs_f64()),
            Err(e) => eprintln!("cluster down failed: {e} (state in {})", dir.display()),
        }
    }
}

/// Polls `f` every 500 ms until it returns `Ok(Some(_))`, at most `bound`. The timeout
/// error names `what` and the last error `f` returned.
pub async fn wait_until<T, F, Fut>(what: &str, bound: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let t = Instant::now();
    let mut last = String::new();
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if t.elapsed() >= bound {
            if last.is_empty() {
                bail!("timed out after {bound:?} waiting for {what}");
            }
            bail!("timed out after {bound:?} waiting for {what} (last error: {last})");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `kubectl --kubeconfig K ARGS`: stdout, or an error with stderr.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("kubectl")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--request-timeout=20s")
        .args(args)
        .output()
        .context("run kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `kubectl exec -n NS POD -- CMD`: stdout, or an error with stderr.
pub fn exec(kubeconfig: &Path, ns: &str, pod: &str, cmd: &[&str]) -> Result<String> {
    let mut args = vec!["exec", "-n", ns, pod, "--"];
    args.extend_from_slice(cmd);
    kubectl(kubeconfig, &args)
}

/// `kubectl describe` of an object and the tail of its logs (every container), for a
/// failure message about an object that did not get where it should.
pub fn describe(kubeconfig: &Path, ns: &str, kind_name: &str) -> String {
    let mut s = kubectl(kubeconfig, &["describe", "-n", ns, kind_name])
        .unwrap_or_else(|e| format!("(describe failed: {e:#})"));
    if kind_name.starts_with("pod/") {
        let logs = kubectl(
            kubeconfig,
            &["logs", "-n", ns, kind_name, "--all-containers", "--tail=30"],
        )
        .unwrap_or_else(|e| format!("(logs failed: {e:#})"));
        s.push_str("\n--- logs ---\n");
        s.push_str(&logs);
    }
    s
}

/// `ovs-vsctl ARGS` inside node `i` (its OVS, run by the chart's node pod).
pub fn ovs_vsctl(c: &KubeCluster, i: usize, args: &[&str]) -> Result<String> {
    let mut cmd = vec!["ovs-vsctl", "--timeout=10"];
    cmd.extend_from_slice(args);
    Ok(c.node_exec(i, &cmd)?)
}

/// The cumulative buckets `(le, count)` of histogram `metric` on the Prometheus endpoint
/// `http://<addr>/metrics` (the `+Inf` bucket as `f64::INFINITY`).
pub fn histogram(addr: &str, metric: &str) -> Result<Vec<(f64, u64)>> {
    let body = metrics_page(addr)?;
    prometheus_buckets(&body, metric, None).with_context(|| addr.to_string())
}

/// The Prometheus text page at `http://<addr>/metrics` (the HTTP head included).
pub fn metrics_page(addr: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(body)
}

/// The values label `label` takes on histogram `metric`'s bucket lines, sorted.
pub fn label_values(text: &str, metric: &str, label: &str) -> Vec<String> {
    let prefix = format!("{metric}_bucket{{");
    let key = format!("{label}=\"");
    let mut out: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.split(&key).nth(1)?.split('"').next().map(str::to_string))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The cumulative buckets `(le, count)` of histogram `metric` in a Prometheus text page,
/// summed over its series, or over those whose labels hold `label` (e.g.
/// `operation_type="run_podsandbox"`) when given.
pub fn prometheus_buckets(
    text: &str,
    metric: &str,
    label: Option<&str>,
) -> Result<Vec<(f64, u64)>> {
    let prefix = format!("{metric}_bucket{{");
    let mut out: Vec<(f64, u64)> = Vec::new();
    for l in text
        .lines()
        .filter(|l| l.starts_with(&prefix) && label.is_none_or(|want| l.contains(want)))
    {
        let le = l
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .context("bucket without le")?;
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse()?
        };
        let n: u64 = l
            .rsplit(' ')
            .next()
            .context("bucket without count")?
            .parse()?;
        match out.iter_mut().find(|(b, _)| *b == le) {
            Some((_, sum)) => *sum += n,
            None => out.push((le, n)),
        }
    }
    if out.is_empty() {
        bail!(
            "no {metric}_bucket lines{}",
            label.map_or(String::new(), |l| format!(" with {l}"))
        );
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(out)
}

/// The upper bound of the bucket holding quantile `q` (0..1) of the observations made
/// between two scrapes of the same cumulative histogram.
pub fn histogram_quantile(before: &[(f64, u64)], after: &[(f64, u64)], q: f64) -> f64 {
    let delta: Vec<(f64, u64)> = after
        .iter()
        .map(|(le, n)| {
            let b = before.iter().find(|(l, _)| l == le).map_or(0, |(_, n)| *n);
            (*le, n.saturating_sub(b))
        })
        .collect();
    let total = delta.last().map_or(0, |(_, n)| *n);
    let want = (q * total as f64).ceil() as u64;
    delta
        .iter()
        .find(|(_, n)| *n >= want.max(1))
        .map_or(f64::NAN, |(le, _)| *le)
}

/// The release `cluster_e2e` upgrades from (`deploy/previous-release`): its chart, its
/// image archive and the archive's build tag, built once per machine by
/// `scripts/previous-release.sh` (cached under `/var/cache/zovn/previous/`).
#[derive(Debug, Clone)]
pub struct PreviousRelease {
    pub version: String,
    pub chart: PathBuf,
    pub archive: PathBuf,
    pub tag: String,
}

/// Builds (first time on a machine: a cold release build of that commit) or finds the
/// previous release; the script's progress goes to this process's stderr.
pub fn previous_release() -> Result<PreviousRelease> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join("scripts/previous-release.sh"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("run scripts/previous-release.sh")?;
    if !out.status.success() {
        bail!("scripts/previous-release.sh failed ({})", out.status);
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let tag = std::fs::read_to_string(dir.join("tag"))
        .with_context(|| format!("{}/tag", dir.display()))?
        .trim()
        .to_string();
    let version = tag.split('-').next().unwrap_or_default().to_string();
    let archive = dir.join(format!("zstack-ovn-{version}.oci.tar"));
    if !archive.is_file() {
        bail!("{} is missing", archive.display());
    }
    if version == env!("CARGO_PKG_VERSION") {
        bail!(
            "deploy/previous-release names version {version}, the current one: bump the workspace and chart version first"
        );
    }
    Ok(PreviousRelease {
        version,
        chart: dir.join("chart"),
        archive,
        tag,
    })
}

/// The archives `make images` and `make test-images` write under `target/images/`.
pub fn image_archives() -> (PathBuf, PathBuf) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/images");
    (
        dir.join(format!("zstack-ovn-{}.oci.tar", env!("CARGO_PKG_VERSION"))),
        dir.join("zovn-test-images.oci.tar"),
    )
}

/// The archives `cfg.images` needs, built with `make images` / `make test-images` when
/// absent (the Debian layers are cached; a cold product build takes minutes).
pub fn ensure_images() -> Vec<PathBuf> {
    let (product, test) = image_archives();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (archive, target) in [(&product, "images"), (&test, "test-images")] {
        if archive.is_file() {
            continue;
        }
        println!("{} is missing: make {target}", archive.display());
        let t = Instant::now();
        // a shell's environment: the images test then finds this release build current
        let st = crate::shell_build_env(&mut std::process::Command::new("make"))
            .arg("-C")
            .arg(&root)
            .arg(target)
            .status()
            .unwrap_or_else(|e| panic!("run make {target}: {e}"));
        assert!(st.success(), "make {target} failed ({st})");
        assert!(
            archive.is_file(),
            "make {target} did not write {}",
            archive.display()
        );
        println!("make {target}: {:.0} s", t.elapsed().as_secs_f64());
    }
    vec![product, test]
}

/// p-th percentile (nearest rank) of sorted `v`.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=50).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 25.0);
        assert_eq!(percentile(&v, 99.0), 50.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn quantiles_of_a_histogram_delta() {
        let before = [(0.005, 1), (0.01, 1), (0.02, 1), (f64::INFINITY, 1)];
        let after = [(0.005, 1), (0.01, 51), (0.02, 100), (f64::INFINITY, 101)];
        assert_eq!(histogram_quantile(&before, &after, 0.5), 0.01);
        assert_eq!(histogram_quantile(&before, &after, 0.99), 0.02);
        assert_eq!(histogram_quantile(&before, &after, 1.0), f64::INFINITY);
    }

    #[test]
    fn buckets_of_one_labelled_series_or_all_summed() {
        let page = "# TYPE kubelet_runtime_operations_duration_seconds histogram\n\
kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"run_podsandbox\",le=\"0.5\"} 3\n\
kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"run_podsandbox\",le=\"+Inf\"} 4\n\
kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"version\",le=\"0.5\"} 10\n\
kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"version\",le=\"+Inf\"} 10\n\
kubelet_runtime_operations_duration_seconds_count{operation_type=\"version\"} 10\n";
        let m = "kubelet_runtime_operations_duration_seconds";
        let sandbox = prometheus_buckets(page, m, Some("operation_type=\"run_podsandbox\""));
        assert_eq!(sandbox.ok(), Some(vec![(0.5, 3), (f64::INFINITY, 4)]));
        let all = prometheus_buckets(page, m, None);
        assert_eq!(all.ok(), Some(vec![(0.5, 13), (f64::INFINITY, 14)]));
        assert_eq!(
            label_values(page, m, "operation_type"),
            ["run_podsandbox", "version"]
        );
        let none = prometheus_buckets(page, m, Some("operation_type=\"stop\""));
        assert!(none.is_err_and(|e| e.to_string().contains("operation_type=\"stop\"")));
    }
}
