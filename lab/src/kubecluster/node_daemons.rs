//! What runs on a node itself: containerd (CRI, runc, overlayfs, the CNI directories) and
//! kubelet 1.20.2 (cgroupfs under the node's cgroup root), both inside the node's netns and
//! mount namespace, started with `nsenter` so the recorded pid is the daemon's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{LabError, Result};
use crate::process::{DaemonRecord, DetachedSpec, log_tail, run, spawn_detached};
use crate::wait::wait_for;

use super::config::{ClusterConfig, PAUSE_IMAGE, node_mgmt_ip, node_name};
use super::node_ns::{NodeNames, nsenter};
use super::pki::Pki;

/// containerd's socket inside a node.
pub const CONTAINERD_SOCK: &str = "/run/containerd/containerd.sock";

/// containerd's configuration for a node: every path is the node's own (its mount
/// namespace maps them to `<root>/…` and its tmpfs /run).
pub fn containerd_config() -> String {
    format!(
        r#"# written by `zovn cluster up`
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "{CONTAINERD_SOCK}"
[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # kubelet asks for oom_score_adj down to -998; lowering it below containerd's own needs
  # CAP_SYS_RESOURCE, which this machine's root does not have (runc init fails with EACCES)
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
"#
    )
}

fn node_dir(cfg: &ClusterConfig, i: usize) -> PathBuf {
    cfg.dir.join("nodes").join(node_name(i))
}

fn spec(
    cfg: &ClusterConfig,
    n: &NodeNames,
    daemon: &str,
    program: &Path,
    args: Vec<String>,
    ident: &Path,
) -> DetachedSpec {
    let dir = node_dir(cfg, n.index);
    DetachedSpec {
        name: format!("{}/{daemon}", node_name(n.index)),
        program: program.to_path_buf(),
        args,
        netns: Some(n.netns.clone()),
        mount_ns: Some(n.mount_ns.clone()),
        log_file: dir.join(format!("{daemon}.log")),
        pidfile: dir.join(format!("{daemon}.pid")),
        ident: Some(ident.to_string_lossy().into_owned()),
        env: vec![(
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        )],
    }
}

/// Starts the node's containerd and waits until `ctr version` answers.
pub fn start_containerd(cfg: &ClusterConfig, n: &NodeNames) -> Result<DaemonRecord> {
    let conf = node_dir(cfg, n.index).join("containerd.toml");
    std::fs::write(&conf, containerd_config()).map_err(|e| LabError::io("write", &conf, e))?;
    let args = vec!["--config".into(), conf.display().to_string()];
    let rec = spawn_detached(&spec(
        cfg,
        n,
        "containerd",
        Path::new("/usr/bin/containerd"),
        args,
        &conf,
    ))?;
    wait_for(
        &format!("{} containerd to answer", node_name(n.index)),
        Duration::from_secs(30),
        Duration::from_millis(100),
        |last| {
            if !rec.is_alive() {
                return Err(LabError::Daemon {
                    name: rec.name.clone(),
                    program: rec.program.clone(),
                    detail: format!("exited{}", log_tail(&rec.log_file)),
                });
            }
            match ctr(n, &["version"]) {
                Ok(_) => Ok(Some(())),
                Err(e) => {
                    *last = Some(e.to_string());
                    Ok(None)
                }
            }
        },
    )?;
    Ok(rec)
}

/// `ctr --address <node socket> --namespace k8s.io ARGS` inside the node.
pub fn ctr(n: &NodeNames, args: &[&str]) -> Result<String> {
    let mut a = vec!["ctr", "--address", CONTAINERD_SOCK, "--namespace", "k8s.io"];
    a.extend_from_slice(args);
    run(&mut nsenter(n, &a))
}

/// Imports an OCI archive into the node's containerd (namespace `k8s.io`, what the CRI
/// plugin uses), returning the image names it now lists.
pub fn import_image(n: &NodeNames, archive: &Path) -> Result<Vec<String>> {
    // nsenter --mount starts the command at the namespace's root: a relative path would miss
    let path = archive
        .canonicalize()
        .map_err(|e| LabError::io("find image archive", archive, e))?
        .display()
        .to_string();
    ctr(n, &["images", "import", &path])?;
    let names = ctr(n, &["images", "ls", "-q"])?;
    Ok(names.lines().map(str::to_string).collect())
}

/// Kubelet's arguments for node `n`.
pub fn kubelet_args(n: &NodeNames, kubeconfig: &Path) -> Vec<String> {
    let i = n.index;
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--hostname-override={}", node_name(i)),
        format!("--node-ip={}", node_mgmt_ip(i)),
        "--container-runtime=remote".into(),
        format!("--container-runtime-endpoint=unix://{CONTAINERD_SOCK}"),
        "--runtime-request-timeout=5m".into(),
        "--cgroup-driver=cgroupfs".into(),
        format!("--cgroup-root={}", n.cgroup),
        "--root-dir=/var/lib/kubelet".into(),
        "--volume-plugin-dir=/var/lib/kubelet/volumeplugins".into(),
        // the machine has swap; the host's kernel settings are restored by `down`
        "--fail-swap-on=false".into(),
        "--protect-kernel-defaults=false".into(),
        // the API server reaches /logs and /exec without a client certificate
        "--anonymous-auth=true".into(),
        "--authorization-mode=AlwaysAllow".into(),
        "--read-only-port=0".into(),
        // image GC and disk-pressure eviction off: the images are imported, not pulled
        "--image-gc-high-threshold=100".into(),
        "--image-gc-low-threshold=99".into(),
        "--eviction-hard=memory.available<100Mi,nodefs.available<1%,imagefs.available<1%".into(),
        "--make-iptables-util-chains=false".into(),
        // kubelet's default 5 requests/s to the API server (burst 10) throttles the status
        // updates of a burst of pods by tens of seconds: "pod created to Ready" would
        // measure the throttle, not the node
        "--kube-api-qps=50".into(),
        "--kube-api-burst=100".into(),
        "--cluster-domain=cluster.local".into(),
        "--resolv-conf=/etc/resolv.conf".into(),
        "--v=1".into(),
    ]
}

/// kube-proxy's arguments: iptables mode in the node's netns, so host-network pods (the
/// plugin's own: the node agent, ovn-controller) reach ClusterIPs such as OVN central's
/// before the pod network exists, as on a kubeadm cluster. It leaves the machine-wide
/// conntrack limits alone.
pub fn kube_proxy_args(n: &NodeNames, kubeconfig: &Path, pod_cidr: &str) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        // masquerade Service traffic from outside the pod network (see ClusterConfig::pod_cidr)
        format!("--cluster-cidr={pod_cidr}"),
        format!("--hostname-override={}", node_name(n.index)),
        format!("--bind-address={}", node_mgmt_ip(n.index)),
        "--proxy-mode=iptables".into(),
        "--conntrack-max-per-core=0".into(),
        "--conntrack-tcp-timeout-established=0".into(),
        "--conntrack-tcp-timeout-close-wait=0".into(),
        "--metrics-bind-address=127.0.0.1:10249".into(),
        "--healthz-bind-address=127.0.0.1:10256".into(),
        "--v=1".into(),
    ]
}

/// Starts the node's kube-proxy.
pub fn start_kube_proxy(cfg: &ClusterConfig, n: &NodeNames, pki: &Pki) -> Result<DaemonRecord> {
    let kc = pki.kubeconfig("kube-proxy");
    let bin = cfg.kube_binary("kube-proxy");
    // the one kubeconfig is shared by every node's kube-proxy: its --hostname-override
    // names this instance
    let ident = PathBuf::from(format!("--hostname-override={}", node_name(n.index)));
    spawn_detached(&spec(
        cfg,
        n,
        "kube-proxy",
        &bin,
        kube_proxy_args(n, &kc, &cfg.pod_cidr),
        &ident,
    ))
}

/// Starts the node's kubelet.
pub fn start_kubelet(cfg: &ClusterConfig, n: &NodeNames, pki: &Pki) -> Result<DaemonRecord> {
    let kc = pki.kubeconfig(&format!("kubelet-{}", node_name(n.index)));
    let bin = cfg.kube_binary("kubelet");
    spawn_detached(&spec(cfg, n, "kubelet", &bin, kubelet_args(n, &kc), &kc))
}
