//! The control plane in the host's network namespace: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler 1.20.2, each a detached daemon recorded in
//! the cluster manifest.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{LabError, Result};
use crate::process::{DaemonRecord, DetachedSpec, spawn_detached};
use crate::wait::wait_for;

use super::config::{API_PORT, ClusterConfig, SERVICE_CIDR, host_mgmt_ip};
use super::kubectl;
use super::pki::Pki;

/// How long the API server may take to answer `/readyz` (10-30 s on 2 busy cores).
pub const APISERVER_READY_TIMEOUT: Duration = Duration::from_secs(180);

fn spec(
    cfg: &ClusterConfig,
    name: &str,
    program: &Path,
    args: Vec<String>,
    ident: &Path,
) -> DetachedSpec {
    DetachedSpec {
        name: name.into(),
        program: program.to_path_buf(),
        args,
        netns: None,
        mount_ns: None,
        log_file: cfg.dir.join("log").join(format!("{name}.log")),
        pidfile: cfg.dir.join("run").join(format!("{name}.pid")),
        ident: Some(ident.to_string_lossy().into_owned()),
        env: Vec::new(),
    }
}

/// `N` distinct free TCP ports on 127.0.0.1 (all listeners are held until every port is
/// picked, so they differ; they are free again when this returns).
pub fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let mut listeners = Vec::with_capacity(N);
    let mut ports = [0u16; N];
    for p in ports.iter_mut() {
        let l =
            TcpListener::bind("127.0.0.1:0").map_err(|e| LabError::io("bind", "127.0.0.1:0", e))?;
        *p = l
            .local_addr()
            .map_err(|e| LabError::io("local address of", "127.0.0.1:0", e))?
            .port();
        listeners.push(l);
    }
    Ok(ports)
}

/// etcd's command line: one member `zovn` with its data in `data`, client and peer URLs
/// on 127.0.0.1 (the lab cluster's and the tests' bare API server use the same).
pub fn etcd_args(data: &Path, client_port: u16, peer_port: u16) -> Vec<String> {
    let url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    vec![
        "--name=zovn".into(),
        format!("--data-dir={}", data.display()),
        format!("--listen-client-urls={url}"),
        format!("--advertise-client-urls={url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=zovn={peer_url}"),
        "--initial-cluster-state=new".into(),
        format!("--initial-cluster-token=zovn-{}", std::process::id()),
        "--logger=zap".into(),
    ]
}

/// Whether etcd's `/health` response (headers and body) says healthy.
pub fn etcd_healthy(response: &str) -> bool {
    response.contains("\"health\":\"true\"")
}

/// Which API server [`apiserver_args`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiServerProfile {
    /// The lab cluster's: kubelets (Node authorizer, `NodeRestriction`), the controllers
    /// (service-account tokens), webhooks dialled at their Service's endpoints.
    Cluster,
    /// The tests' bare server: no kubelet and no controller, so Pods are admitted without
    /// a service account (`ServiceAccount` admission off) and RBAC alone authorises.
    Bare,
}

/// Where and how a kube-apiserver serves.
#[derive(Debug, Clone, Copy)]
pub struct ApiServerFlags<'a> {
    pub etcd_url: &'a str,
    /// Bind and advertise address.
    pub address: &'a str,
    pub port: u16,
    pub pki: &'a Pki,
    pub profile: ApiServerProfile,
}

/// kube-apiserver 1.20's command line for `f`: one code for the lab cluster and the
/// tests, so both run the API server the same way where they do not differ on purpose.
pub fn apiserver_args(f: &ApiServerFlags<'_>) -> Vec<String> {
    let p = |f: PathBuf| f.display().to_string();
    let pki = f.pki;
    let mut args = vec![
        format!("--etcd-servers={}", f.etcd_url),
        format!("--bind-address={}", f.address),
        format!("--advertise-address={}", f.address),
        format!("--secure-port={}", f.port),
        "--insecure-port=0".into(),
        format!("--tls-cert-file={}", p(pki.serving_cert())),
        format!("--tls-private-key-file={}", p(pki.serving_key())),
        format!("--client-ca-file={}", p(pki.ca_cert())),
        format!("--token-auth-file={}", p(pki.token_file())),
        format!("--service-account-key-file={}", p(pki.sa_pub())),
        format!("--service-account-signing-key-file={}", p(pki.sa_key())),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
        "--v=1".into(),
    ];
    match f.profile {
        ApiServerProfile::Cluster => args.extend([
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            "--kubelet-preferred-address-types=InternalIP".into(),
            // webhooks (the chart's admission webhook) are dialled at their Service's
            // endpoints: this API server runs in the host's namespace, outside every
            // node, so nothing routes the Service CIDR for it (docs/install.md)
            "--enable-aggregator-routing=true".into(),
        ]),
        ApiServerProfile::Bare => args.extend([
            "--authorization-mode=RBAC".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
        ]),
    }
    args
}

/// Starts etcd; returns its record and client URL once it answers.
pub fn start_etcd(cfg: &ClusterConfig) -> Result<(DaemonRecord, String)> {
    let [client, peer] = free_ports::<2>()?;
    let data = cfg.dir.join("etcd");
    let url = format!("http://127.0.0.1:{client}");
    let args = etcd_args(&data, client, peer);
    let rec = spawn_detached(&spec(cfg, "etcd", Path::new("/usr/bin/etcd"), args, &data))?;
    wait_for(
        "etcd to answer /health",
        Duration::from_secs(60),
        Duration::from_millis(100),
        |last| {
            if !rec.is_alive() {
                return Err(LabError::Daemon {
                    name: "etcd".into(),
                    program: rec.program.clone(),
                    detail: format!("exited{}", crate::process::log_tail(&rec.log_file)),
                });
            }
            match etcd_health(client) {
                Ok(body) if etcd_healthy(&body) => Ok(Some(())),
                Ok(body) => {
                    *last = Some(body);
                    Ok(None)
                }
                Err(e) => {
                    *last = Some(e.to_string());
                    Ok(None)
                }
            }
        },
    )?;
    Ok((rec, url))
}

/// GET `/health` from etcd on 127.0.0.1 over plain HTTP/1.0: the response, headers and
/// body ([`etcd_healthy`] reads it).
pub fn etcd_health(port: u16) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Starts kube-apiserver on the host's management address and waits for `/readyz`.
pub fn start_apiserver(cfg: &ClusterConfig, pki: &Pki, etcd_url: &str) -> Result<DaemonRecord> {
    let ip = host_mgmt_ip();
    let args = apiserver_args(&ApiServerFlags {
        etcd_url,
        address: &ip,
        port: API_PORT,
        pki,
        profile: ApiServerProfile::Cluster,
    });
    let bin = cfg.kube_binary("kube-apiserver");
    let rec = spawn_detached(&spec(cfg, "kube-apiserver", &bin, args, &pki.token_file()))?;
    let admin = pki.kubeconfig("admin");
    wait_for(
        "kube-apiserver /readyz",
        APISERVER_READY_TIMEOUT,
        Duration::from_millis(500),
        |last| {
            if !rec.is_alive() {
                return Err(LabError::Daemon {
                    name: "kube-apiserver".into(),
                    program: rec.program.clone(),
                    detail: format!("exited{}", crate::process::log_tail(&rec.log_file)),
                });
            }
            match kubectl(&admin, &["get", "--raw", "/readyz"]) {
                Ok(body) if body.trim() == "ok" => Ok(Some(())),
                Ok(body) => {
                    *last = Some(body);
                    Ok(None)
                }
                Err(e) => {
                    *last = Some(e.to_string());
                    Ok(None)
                }
            }
        },
    )?;
    Ok(rec)
}

/// Starts kube-controller-manager (service-account tokens, Endpoints, Deployments,
/// DaemonSets, node lifecycle…); no serving ports, no leader election.
pub fn start_controller_manager(cfg: &ClusterConfig, pki: &Pki) -> Result<DaemonRecord> {
    let kc = pki.kubeconfig("controller-manager");
    let p = |f: &Path| f.display().to_string();
    let args = vec![
        format!("--kubeconfig={}", p(&kc)),
        format!("--service-account-private-key-file={}", p(&pki.sa_key())),
        format!("--root-ca-file={}", p(&pki.ca_cert())),
        "--use-service-account-credentials=true".into(),
        "--cluster-name=zovn".into(),
        "--leader-elect=false".into(),
        "--port=0".into(),
        "--secure-port=0".into(),
        // a node whose kubelet stopped is NotReady after 20 s (the default 40 s)
        "--node-monitor-grace-period=20s".into(),
        "--v=1".into(),
    ];
    let bin = cfg.kube_binary("kube-controller-manager");
    spawn_detached(&spec(cfg, "kube-controller-manager", &bin, args, &kc))
}

/// Starts kube-scheduler; no serving ports, no leader election.
pub fn start_scheduler(cfg: &ClusterConfig, pki: &Pki) -> Result<DaemonRecord> {
    let kc = pki.kubeconfig("scheduler");
    let args = vec![
        format!("--kubeconfig={}", kc.display()),
        "--leader-elect=false".into(),
        "--port=0".into(),
        "--secure-port=0".into(),
        "--v=1".into(),
    ];
    let bin = cfg.kube_binary("kube-scheduler");
    spawn_detached(&spec(cfg, "kube-scheduler", &bin, args, &kc))
}
