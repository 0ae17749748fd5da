//! Helpers the lab benchmarks share: running host tools, the heavy-test lock, and the
//! lab teardown.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Context, Result, anyhow, bail};
use lab::Lab;
use serde_json::{Value, json};

/// Runs `cmd` (stdin closed) and fails with its stderr and stdout when it exits non-zero.
pub fn run_ok(cmd: &mut Command) -> Result<Output> {
    let what = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(out)
}

/// Looks `bin` up in `PATH` and the sbin directories.
pub fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.is_file())
}

/// The lock the heavy lab tests share (`tests::heavy_lock`): no lab test runs meanwhile.
/// `who` names the benchmark in the message printed while waiting.
/// Starts `argv` in netns `ns` in the background (no stdio); the caller stops it.
pub fn spawn_in_netns(ns: &str, argv: &[&str]) -> Result<std::process::Child> {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("start {argv:?} in {ns}"))
}

pub fn heavy_lock(who: &str) -> Result<File> {
    let path = std::env::temp_dir().join("zovn-heavy-tests.lock");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    if f.try_lock().is_err() {
        eprintln!(
            "{who}: waiting for {} (a heavy test is running)",
            path.display()
        );
        f.lock()
            .with_context(|| format!("lock {}", path.display()))?;
    }
    Ok(f)
}

/// Deletes the network namespaces `netns` (emptied) and brings the lab in `lab_dir` down
/// when `started`; the first error is returned after trying everything.
pub fn teardown_lab(netns: &mut Vec<String>, lab_dir: &Path, started: bool) -> Result<()> {
    let mut first_err: Option<anyhow::Error> = None;
    for ns in std::mem::take(netns) {
        if let Err(e) = run_ok(Command::new("ip").args(["netns", "del", &ns])) {
            first_err.get_or_insert(e);
        }
    }
    if started && lab_dir.join("lab.json").exists() {
        match Lab::open(lab_dir) {
            Ok(l) => {
                if let Err(e) = l.down() {
                    first_err.get_or_insert(anyhow!("lab down: {e}"));
                }
            }
            Err(e) => {
                first_err.get_or_insert(anyhow!("open the lab for teardown: {e}"));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// How a benchmark calls the CNI shim binary (`zstack-ovn-cni`) the way a runtime does.
pub struct Shim<'a> {
    pub bin: &'a Path,
    /// The agent's CNI socket.
    pub socket: &'a Path,
    pub cni_version: &'a str,
    pub timeout_s: f64,
}

impl Shim<'_> {
    /// Runs the shim once for pod `default/<pod>` on `eth0` of netns `netns`: (exit ok,
    /// stdout JSON or null).
    pub fn call(&self, cmd: &str, cid: &str, netns: &str, pod: &str) -> Result<(bool, Value)> {
        use std::io::Write;
        let conf = json!({
            "cniVersion": self.cni_version,
            "name": "zstack-ovn",
            "type": "zstack-ovn-cni",
            "serverSocket": self.socket,
            "timeoutSeconds": self.timeout_s,
        });
        let mut c = cni::invoke::Invocation::pod(cmd, cid, netns, "eth0", "default", pod)
            .command(self.bin)
            .spawn()
            .with_context(|| format!("run {}", self.bin.display()))?;
        c.stdin
            .take()
            .ok_or_else(|| anyhow!("shim stdin"))?
            .write_all(conf.to_string().as_bytes())
            .context("write the network config to the shim")?;
        let out = c.wait_with_output().context("shim output")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let v = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).with_context(|| {
                format!(
                    "shim {cmd} printed {text:?} (stderr {:?})",
                    String::from_utf8_lossy(&out.stderr)
                )
            })?
        };
        Ok((out.status.success(), v))
    }
}

/// `Open_vSwitch other_config` of the node's database.
pub fn other_config(db: &str) -> Result<BTreeMap<String, String>> {
    let o = run_ok(Command::new("ovs-vsctl").args([
        "--db",
        db,
        "get",
        "Open_vSwitch",
        ".",
        "other_config",
    ]));
    // `get` prints the OVSDB map syntax; parse `{k=v, k2="v 2"}` by hand
    let text = String::from_utf8_lossy(&o?.stdout).trim().to_string();
    let inner = text.trim_start_matches('{').trim_end_matches('}');
    Ok(inner
        .split(", ")
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        .collect())
}

/// The servers a benchmark started and its lab: on drop the servers are killed and the lab
/// is torn down, also after a failure.
pub struct LabGuard {
    pub servers: Vec<std::process::Child>,
    pub lab_dir: PathBuf,
}

impl LabGuard {
    pub fn new(lab_dir: &Path) -> LabGuard {
        LabGuard {
            servers: Vec::new(),
            lab_dir: lab_dir.to_path_buf(),
        }
    }

    /// Starts `argv` in netns `ns` until the guard drops.
    pub fn server(&mut self, ns: &str, argv: &[&str]) -> Result<()> {
        self.servers.push(spawn_in_netns(ns, argv)?);
        Ok(())
    }
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        for mut c in self.servers.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = teardown_lab(&mut Vec::new(), &self.lab_dir, true);
    }
}

/// Waits (at most `timeout`) until every pod `default/<name>` of `pods` (name, node index,
/// on AF_XDP) is ready and, where asked, its port on its node is an AF_XDP one; their
/// (netns, IPv4) by name.
pub fn wait_pods(
    lab: &Lab,
    lab_dir: &Path,
    pods: &[(String, usize, bool)],
    timeout: std::time::Duration,
) -> Result<BTreeMap<String, (String, String)>> {
    let layout = lab::state::Layout::new(lab_dir);
    let t = std::time::Instant::now();
    loop {
        let file = lab::pods::record::PodsFile::load(&layout.pods_file())?;
        let mut out = BTreeMap::new();
        for (name, node, afxdp) in pods {
            let Some(r) = file.pod(&format!("default/{name}")).filter(|r| r.ready) else {
                continue;
            };
            let Some(ip) = r
                .ips
                .iter()
                .find(|a| !a.contains(':'))
                .and_then(|a| a.split('/').next())
            else {
                continue;
            };
            if *afxdp {
                let db = &lab.node(*node)?.db_remote;
                let o = run_ok(Command::new("ovs-vsctl").args([
                    "--db",
                    db,
                    "--bare",
                    "--columns=type",
                    "find",
                    "Interface",
                    &format!("external_ids:iface-id=default_{name}"),
                ]))?;
                if String::from_utf8_lossy(&o.stdout).trim() != "afxdp" {
                    continue;
                }
            }
            out.insert(name.clone(), (r.netns.clone(), ip.to_string()));
        }
        if out.len() == pods.len() {
            return Ok(out);
        }
        if t.elapsed() > timeout {
            bail!(
                "only {} of {} pods ready (and on AF_XDP where asked) after {timeout:?}",
                out.len(),
                pods.len()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
