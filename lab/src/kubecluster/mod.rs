//! # kubecluster — a real Kubernetes cluster on this machine (`zovn cluster`)
//!
//! What kind builds with containers, built with namespaces: the control plane (etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler 1.20.2) runs in the host's
//! network namespace; each node is a network namespace plus a persistent mount namespace
//! with its own containerd + runc, kubelet and kube-proxy (iptables mode), joined to the host by two bridges
//! (management 172.30.0.0/24 with the API server on .1; data 172.31.0.0/24 for the tunnel
//! endpoints). No CNI plugin is installed: nodes stay `NotReady` until one is (the chart,
//! `helm install`). No cluster DNS.
//!
//! - [`config`]: [`ClusterConfig`], the fixed addresses and names.
//! - [`pki`]: the CA, serving certificate, service-account key, tokens and kubeconfigs.
//! - [`control_plane`]: the host-side daemons.
//! - [`node_ns`]: a node's netns, mount namespace (`node-mounts.sh`), cgroup root, and the
//!   sweep that stops every process inside a node.
//! - [`node_daemons`]: containerd, kubelet and kube-proxy of a node; image import.
//! - [`kernel`]: host kernel settings kubelet changes, restored by `down`.
//!
//! `up` records every step in `<dir>/cluster.json` as it goes, so `down` (or the next `up`
//! on the same dir) removes exactly what was made, even after a failure half-way.

pub mod config;
pub mod control_plane;
pub mod kernel;
pub mod node_daemons;
pub mod node_ns;
pub mod pki;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::error::{LabError, Result};
use crate::hugepages;
use crate::lab::Step;
use crate::process::{DaemonRecord, run, stop_daemon};
use crate::wait::wait_for;

pub use config::{
    ClusterConfig, host_mgmt_ip, node_data_ip, node_mgmt_ip, node_mgmt_ip6, node_name,
};
use node_ns::NodeNames;

/// How long `up` waits for every kubelet to register its Node.
pub const NODES_TIMEOUT: Duration = Duration::from_secs(120);

/// One node as recorded: names, and the daemons started for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeRecord {
    pub names: NodeNames,
    /// containerd, kubelet, kube-proxy.
    pub daemons: Vec<DaemonRecord>,
}

/// `<dir>/cluster.json`: what `up` made, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterManifest {
    pub config: ClusterConfig,
    /// `up` finished.
    pub complete: bool,
    /// The bridges exist.
    pub bridges: bool,
    /// etcd, kube-apiserver, kube-controller-manager, kube-scheduler (as started).
    pub control_plane: Vec<DaemonRecord>,
    pub nodes: Vec<NodeRecord>,
    /// Kernel settings before kubelet started ([`kernel::snapshot`]).
    pub kernel: Vec<(String, String)>,
    /// `(previous, set)` 2 MiB page counts if `up` raised the pool.
    pub hugepages: Option<(u64, u64)>,
    /// `(step, seconds)` of `up`.
    pub timings: Vec<(String, f64)>,
}

/// A running (or half-built) cluster.
pub struct KubeCluster {
    m: ClusterManifest,
}

/// What [`KubeCluster::status`] reports.
#[derive(Debug)]
pub struct ClusterStatus {
    pub dir: PathBuf,
    pub complete: bool,
    pub api_server: String,
    pub kubeconfig: PathBuf,
    /// `(name, pid, alive)` of every daemon.
    pub daemons: Vec<(String, i32, bool)>,
    /// `kubectl get nodes -o wide`, or why it failed.
    pub nodes: Result<String>,
}

/// `kubectl --kubeconfig K ARGS` (5 s request timeout), stdout.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let mut c = std::process::Command::new("kubectl");
    c.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--request-timeout=5s")
        .args(args);
    run(&mut c)
}

fn manifest_path(dir: &Path) -> PathBuf {
    dir.join("cluster.json")
}

impl KubeCluster {
    /// Builds the cluster (see the module docs); a stale cluster recorded in the same dir
    /// is torn down first.
    pub fn up(cfg: ClusterConfig) -> Result<KubeCluster> {
        Self::up_with_progress(cfg, |_| {})
    }

    /// [`KubeCluster::up`], reporting each step as it finishes.
    pub fn up_with_progress(
        cfg: ClusterConfig,
        mut progress: impl FnMut(&Step),
    ) -> Result<KubeCluster> {
        cfg.validate()?;
        check_tools(&cfg)?;
        if manifest_path(&cfg.dir).exists() {
            warn!(dir = %cfg.dir.display(), "a cluster is recorded here: tearing it down first");
            KubeCluster::open(&cfg.dir)?.down()?;
        }
        // the state of a cluster taken down with its files kept (for reading its logs):
        // a new cluster never starts on its etcd data or its nodes' kubelet and containerd
        // state (a Helm release of the old cluster would still be "in use")
        for d in ["etcd", "nodes", "run", "pki"] {
            let p = cfg.dir.join(d);
            if p.exists() {
                std::fs::remove_dir_all(&p).map_err(|e| LabError::io("remove stale", &p, e))?;
            }
        }
        let host = host_mgmt_ip();
        let taken = crate::process::run_args(
            "ip",
            ["-4", "-o", "addr", "show", "to", &format!("{host}/32")],
        )?;
        if !taken.trim().is_empty() {
            return Err(LabError::Invalid(format!(
                "{host} is already in use ({}): another zovn cluster is up; `zovn cluster down --dir DIR` it first",
                taken.split_whitespace().nth(1).unwrap_or("?")
            )));
        }
        for d in ["log", "run", "ns", "nodes"] {
            let p = cfg.dir.join(d);
            std::fs::create_dir_all(&p).map_err(|e| LabError::io("create dir", &p, e))?;
        }
        let mut c = KubeCluster {
            m: ClusterManifest {
                config: cfg.clone(),
                complete: false,
                bridges: false,
                control_plane: Vec::new(),
                nodes: Vec::new(),
                kernel: kernel::snapshot(),
                hugepages: None,
                timings: Vec::new(),
            },
        };
        c.save()?;
        match c.build(&mut progress) {
            Ok(()) => Ok(c),
            Err(e) => {
                warn!(error = %e, "cluster up failed; the manifest records what was made (zovn cluster down)");
                let _ = c.save();
                Err(e)
            }
        }
    }

    fn build(&mut self, progress: &mut impl FnMut(&Step)) -> Result<()> {
        let t0 = Instant::now();
        let mut last = Instant::now();
        let cfg = self.m.config.clone();
        let mut step = |m: &mut ClusterManifest, what: &str| {
            let took = last.elapsed();
            last = Instant::now();
            m.timings.push((what.to_string(), took.as_secs_f64()));
            progress(&Step {
                what,
                took,
                since_start: t0.elapsed(),
            });
        };

        if cfg.hugepages_2m > 0 {
            self.m.hugepages = hugepages::raise_pages_2m(cfg.hugepages_2m)?;
            self.save()?;
        }
        let host = host_mgmt_ip();
        let server = self.api_server();
        let mut sans = vec![host.clone(), "10.96.0.1".into(), "127.0.0.1".into()];
        sans.extend(
            [
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ]
            .map(String::from),
        );
        let pki = pki::write(&cfg.dir, &server, &sans, &pki::identities(cfg.nodes))?;
        let kc = self.kubeconfig();
        std::fs::copy(pki.kubeconfig("admin"), &kc).map_err(|e| LabError::io("write", &kc, e))?;
        step(&mut self.m, "credentials");

        node_ns::add_bridges(&cfg.prefix, &format!("{host}/24"))?;
        self.m.bridges = true;
        self.save()?;
        step(&mut self.m, "host bridges");

        let (etcd, etcd_url) = control_plane::start_etcd(&cfg)?;
        self.m.control_plane.push(etcd);
        self.save()?;
        step(&mut self.m, "etcd");
        let api = control_plane::start_apiserver(&cfg, &pki, &etcd_url)?;
        self.m.control_plane.push(api);
        self.save()?;
        step(&mut self.m, "kube-apiserver ready");
        let kcm = control_plane::start_controller_manager(&cfg, &pki)?;
        self.m.control_plane.push(kcm);
        let sched = control_plane::start_scheduler(&cfg, &pki)?;
        self.m.control_plane.push(sched);
        self.save()?;
        step(&mut self.m, "controller-manager, scheduler");

        for i in 1..=cfg.nodes {
            let names = NodeNames::new(&cfg.prefix, &cfg.dir, i);
            self.m.nodes.push(NodeRecord {
                names: names.clone(),
                daemons: Vec::new(),
            });
            self.save()?;
            node_ns::add_netns(&cfg.prefix, &names)?;
            if cfg.single_nic {
                node_ns::make_single_nic(&names)?;
            }
            node_ns::add_mount_ns(&names)?;
            node_ns::add_cgroup(&names)?;
            let containerd = node_daemons::start_containerd(&cfg, &names)?;
            self.node_mut(i)?.daemons.push(containerd);
            self.save()?;
            let mut listed = Vec::new();
            for image in &cfg.images {
                listed = node_daemons::import_image(&names, image)?;
            }
            if !listed.iter().any(|n| n == config::PAUSE_IMAGE) {
                return Err(LabError::Invalid(format!(
                    "{} has no {} after importing {:?}: pass the test-images archive (make test-images) with --image",
                    node_name(i),
                    config::PAUSE_IMAGE,
                    cfg.images
                )));
            }
            let kubelet = node_daemons::start_kubelet(&cfg, &names, &pki)?;
            self.node_mut(i)?.daemons.push(kubelet);
            self.save()?;
            let proxy = node_daemons::start_kube_proxy(&cfg, &names, &pki)?;
            self.node_mut(i)?.daemons.push(proxy);
            self.save()?;
            step(
                &mut self.m,
                &format!(
                    "{} (netns, mounts, containerd, images, kubelet, kube-proxy)",
                    node_name(i)
                ),
            );
        }

        let want: Vec<String> = (1..=cfg.nodes)
            .map(|i| format!("node/{}", node_name(i)))
            .collect();
        wait_for(
            "every kubelet to register its Node",
            NODES_TIMEOUT,
            Duration::from_millis(500),
            |last| {
                self.check_daemons()?;
                let have = kubectl(&kc, &["get", "nodes", "-o", "name"]).unwrap_or_default();
                let have: Vec<&str> = have.lines().collect();
                if want.iter().all(|w| have.contains(&w.as_str())) {
                    return Ok(Some(()));
                }
                *last = Some(format!("registered: {have:?}"));
                Ok(None)
            },
        )?;
        step(&mut self.m, "nodes registered");
        self.m.complete = true;
        self.save()?;
        info!(dir = %cfg.dir.display(), "cluster up");
        Ok(())
    }

    fn node_mut(&mut self, i: usize) -> Result<&mut NodeRecord> {
        self.m
            .nodes
            .get_mut(i - 1)
            .ok_or_else(|| LabError::Invalid(format!("no node {i}")))
    }

    fn node(&self, i: usize) -> Result<&NodeRecord> {
        if i == 0 {
            return Err(LabError::Invalid("nodes are numbered from 1".into()));
        }
        self.m.nodes.get(i - 1).ok_or_else(|| {
            LabError::Invalid(format!(
                "no node {i} (the cluster has {})",
                self.m.nodes.len()
            ))
        })
    }

    /// Fails naming the first recorded daemon that is gone.
    fn check_daemons(&self) -> Result<()> {
        for d in self.daemons() {
            if !d.is_alive() {
                return Err(LabError::Daemon {
                    name: d.name.clone(),
                    program: d.program.clone(),
                    detail: format!(
                        "pid {} exited{}",
                        d.pid,
                        crate::process::log_tail(&d.log_file)
                    ),
                });
            }
        }
        Ok(())
    }

    /// Every recorded daemon, control plane first.
    pub fn daemons(&self) -> impl Iterator<Item = &DaemonRecord> {
        self.m
            .control_plane
            .iter()
            .chain(self.m.nodes.iter().flat_map(|n| n.daemons.iter()))
    }

    /// The cluster recorded in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<KubeCluster> {
        let path = manifest_path(dir.as_ref());
        let text = std::fs::read_to_string(&path).map_err(|e| LabError::Manifest {
            path: path.clone(),
            detail: format!("{e} (no cluster here? zovn cluster up --dir DIR)"),
        })?;
        let m = serde_json::from_str(&text).map_err(|e| LabError::Manifest {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        Ok(KubeCluster { m })
    }

    fn save(&self) -> Result<()> {
        let path = manifest_path(&self.m.config.dir);
        let text = serde_json::to_string_pretty(&self.m).map_err(|e| LabError::Manifest {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        hostio::write_atomic(&path, text.as_bytes(), 0o644, hostio::Durability::Volatile)
            .map_err(|e| LabError::io("write", &path, e))
    }

    /// The recorded manifest.
    pub fn manifest(&self) -> &ClusterManifest {
        &self.m
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.m.config.dir
    }

    /// `https://172.30.0.1:6443`.
    pub fn api_server(&self) -> String {
        format!("https://{}:{}", host_mgmt_ip(), config::API_PORT)
    }

    /// The admin kubeconfig (`<dir>/kubeconfig`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.m.config.dir.join("kubeconfig")
    }

    /// Kubernetes name of node `i` (1-based).
    pub fn node_name(&self, i: usize) -> String {
        node_name(i)
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.m.nodes.len()
    }

    /// Host-side names of node `i`.
    pub fn node_names(&self, i: usize) -> Result<&NodeNames> {
        Ok(&self.node(i)?.names)
    }

    /// Runs a command inside node `i` (its netns and mount namespace); stdout.
    pub fn node_exec(&self, i: usize, args: &[&str]) -> Result<String> {
        run(&mut node_ns::nsenter(&self.node(i)?.names, args))
    }

    /// Makes node `i` single-NIC on a running cluster (see [`ClusterConfig::single_nic`]):
    /// for a node without a CNI plugin's changes on eth0 (the chart uninstalled).
    pub fn make_single_nic(&self, i: usize) -> Result<()> {
        node_ns::make_single_nic(&self.node(i)?.names)
    }

    /// Imports an OCI archive into every node's containerd.
    pub fn import_image(&self, archive: &Path) -> Result<()> {
        for n in &self.m.nodes {
            node_daemons::import_image(&n.names, archive)?;
        }
        Ok(())
    }

    /// Stops node `i`'s kubelet and starts it again (containers keep running).
    pub fn restart_kubelet(&mut self, i: usize) -> Result<DaemonRecord> {
        let names = self.node(i)?.names.clone();
        if let Some(old) = self
            .node(i)?
            .daemons
            .iter()
            .find(|d| d.name.ends_with("/kubelet"))
        {
            stop_daemon(old)?;
        }
        let pki = pki::Pki {
            dir: self.m.config.dir.join("pki"),
        };
        let rec = node_daemons::start_kubelet(&self.m.config, &names, &pki)?;
        let node = self.node_mut(i)?;
        node.daemons.retain(|d| !d.name.ends_with("/kubelet"));
        node.daemons.push(rec.clone());
        self.save()?;
        Ok(rec)
    }

    /// Daemons, nodes, addresses.
    pub fn status(&self) -> ClusterStatus {
        ClusterStatus {
            dir: self.m.config.dir.clone(),
            complete: self.m.complete,
            api_server: self.api_server(),
            kubeconfig: self.kubeconfig(),
            daemons: self
                .daemons()
                .map(|d| (d.name.clone(), d.pid, d.is_alive()))
                .collect(),
            nodes: kubectl(&self.kubeconfig(), &["get", "nodes", "-o", "wide"]),
        }
    }

    /// Stops everything by pid (kubelets, then every process inside each node, then the
    /// control plane), deletes the nodes' namespaces and cgroups and the bridges, restores
    /// the kernel settings and hugepages, and removes the state directory.
    pub fn down(self) -> Result<()> {
        self.teardown(false)
    }

    /// [`KubeCluster::down`] keeping the state directory (logs).
    pub fn down_keep_files(self) -> Result<()> {
        self.teardown(true)
    }

    fn teardown(self, keep: bool) -> Result<()> {
        let mut errors = Vec::new();
        let mut note = |r: Result<()>| {
            if let Err(e) = r {
                warn!(error = %e, "cluster down");
                errors.push(e.to_string());
            }
        };
        for n in self.m.nodes.iter().rev() {
            for d in n.daemons.iter().rev() {
                note(stop_daemon(d).map(drop));
            }
            note(node_ns::kill_all(&n.names));
            note(node_ns::delete(&n.names));
        }
        for d in self.m.control_plane.iter().rev() {
            note(stop_daemon(d).map(drop));
        }
        if self.m.bridges {
            note(node_ns::delete_bridges(&self.m.config.prefix));
        }
        note(kernel::restore(&self.m.kernel));
        if let Some((previous, _)) = self.m.hugepages {
            note(hugepages::set_nr_pages_2m(previous));
        }
        if !errors.is_empty() {
            return Err(LabError::Invalid(format!(
                "cluster down left work undone (the manifest stays in {}): {}",
                self.m.config.dir.display(),
                errors.join("; ")
            )));
        }
        if keep {
            let _ = std::fs::remove_file(manifest_path(&self.m.config.dir));
        } else {
            let dir = &self.m.config.dir;
            std::fs::remove_dir_all(dir).map_err(|e| LabError::io("remove", dir, e))?;
        }
        info!("cluster down");
        Ok(())
    }
}

/// Fails naming the first missing program or Kubernetes binary.
fn check_tools(cfg: &ClusterConfig) -> Result<()> {
    for c in [
        "kube-apiserver",
        "kubelet",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        let b = cfg.kube_binary(c);
        if !b.is_file() {
            return Err(LabError::Invalid(format!(
                "{} is missing: build it with tests/kube/build-kube.sh (~10 min the first time)",
                b.display()
            )));
        }
    }
    for (tool, pkg) in [
        ("/usr/bin/etcd", "etcd-server"),
        ("/usr/bin/containerd", "containerd"),
        ("/usr/sbin/runc", "runc"),
        ("/usr/bin/kubectl", "kubernetes-client"),
        ("/usr/lib/cni/loopback", "containernetworking-plugins"),
        ("/usr/bin/nsenter", "util-linux"),
    ] {
        if !Path::new(tool).exists() {
            return Err(LabError::Invalid(format!(
                "{tool} is missing (apt-get install {pkg})"
            )));
        }
    }
    Ok(())
}
