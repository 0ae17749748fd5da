//! NetworkPolicy benchmarks (`zovn-perf netpol`).
//!
//! - **enforce**: a 2-node lab with the real controller, node agents and CNI shim, and
//!   100 pods (10 namespaces × 10) serving TCP 80. For each of 20 target pods in turn, a
//!   policy is created that isolates it (deny), then updated to admit one client (allow);
//!   the time from the create/update request to the first probe that sees the new verdict
//!   is one sample (probes back to back from the client's netns, 50 ms connect bound; the
//!   sample is the start of the probe that first sees it). The 20 policies accumulate.
//! - **rows**: the NB rows the translator produces (Port_Group, Address_Set, ACL) as pods
//!   and policies grow, with the address-set entries, to show growth is linear.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use control::model::{Mac, NamespaceInfo, PodAddresses, PodInfo};
use control::netpol::{PolicyInput, translate};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use lab::apiserver::{ApiClient, ResourceKind};
use lab::pods::probe::{ProbeOutcome, probe};
use lab::{Lab, LabConfig};
use serde_json::{Value, json};

use crate::cni_add::percentile;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub dir: PathBuf,
    pub pods: usize,
    pub policies: usize,
    /// Skip the lab part (rows only).
    pub rows_only: bool,
}

/// One row-count measurement.
#[derive(Debug, Clone)]
pub struct Rows {
    pub pods: usize,
    pub policies: usize,
    pub port_groups: usize,
    pub address_sets: usize,
    pub acls: usize,
    pub set_entries: usize,
    pub translate_ms: f64,
}

/// The results.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Seconds, policy create → isolated.
    pub deny: Vec<f64>,
    /// Seconds, policy update → client admitted.
    pub allow: Vec<f64>,
    pub pods: usize,
    pub rows: Vec<Rows>,
}

impl Report {
    fn all(&self) -> Vec<f64> {
        self.deny.iter().chain(&self.allow).copied().collect()
    }

    pub fn to_json(&self) -> Value {
        let ms = |v: &[f64], q: f64| percentile(v, q) * 1e3;
        json!({
            "pods": self.pods,
            "enforce_ms": {
                "deny": {"n": self.deny.len(), "p50": ms(&self.deny, 0.5), "p99": ms(&self.deny, 0.99)},
                "allow": {"n": self.allow.len(), "p50": ms(&self.allow, 0.5), "p99": ms(&self.allow, 0.99)},
                "all": {"n": self.all().len(), "p50": ms(&self.all(), 0.5), "p99": ms(&self.all(), 0.99)},
            },
            "rows": self.rows.iter().map(|r| json!({
                "pods": r.pods, "policies": r.policies, "port_groups": r.port_groups,
                "address_sets": r.address_sets, "acls": r.acls, "set_entries": r.set_entries,
                "translate_ms": r.translate_ms})).collect::<Vec<_>>(),
        })
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        if !self.deny.is_empty() {
            let ms = |v: &[f64], q: f64| percentile(v, q) * 1e3;
            out.push_str(&format!(
                "policy create → enforced, {} pods on 2 nodes, {} policies (first probe with the new verdict)\n",
                self.pods,
                self.deny.len()
            ));
            out.push_str("  verdict   n    p50 ms   p99 ms   max ms\n");
            for (name, v) in [
                ("deny", &self.deny),
                ("allow", &self.allow),
                ("all", &self.all()),
            ] {
                out.push_str(&format!(
                    "  {name:<7} {:>3} {:>9.0} {:>8.0} {:>8.0}\n",
                    v.len(),
                    ms(v, 0.5),
                    ms(v, 0.99),
                    ms(v, 1.0)
                ));
            }
        }
        out.push_str("NB rows from the translator as pods and policies grow\n");
        out.push_str("   pods  policies  Port_Group  Address_Set   ACL   rows/policy  set entries  translate ms\n");
        for r in &self.rows {
            let rows = r.port_groups + r.address_sets + r.acls;
            out.push_str(&format!(
                "  {:>5} {:>9} {:>11} {:>12} {:>5} {:>13.2} {:>12} {:>13.1}\n",
                r.pods,
                r.policies,
                r.port_groups,
                r.address_sets,
                r.acls,
                rows as f64 / r.policies.max(1) as f64,
                r.set_entries,
                r.translate_ms
            ));
        }
        out
    }
}

/// Runs the benchmark.
pub fn run(cfg: Config) -> Result<Report> {
    let mut report = Report {
        rows: row_growth(),
        pods: cfg.pods,
        ..Default::default()
    };
    if !cfg.rows_only {
        let _lock = crate::host::heavy_lock("netpol")?;
        let lab_dir = cfg.dir.join("lab");
        let result = enforce(&cfg, &lab_dir, &mut report);
        if lab_dir.join("lab.json").exists()
            && let Ok(lab) = Lab::open(&lab_dir)
        {
            let _ = lab.down();
        }
        result?;
    }
    Ok(report)
}

/// `namespaces × per_ns` pods; one policy per namespace (own pods by label, a peer in the
/// namespace, a namespace peer, two ports) times `per_ns_policies`.
fn synthetic(pods: usize, policies: usize) -> Rows {
    let per_ns = 10;
    let nss = pods.div_ceil(per_ns).max(1);
    let mut infos = Vec::new();
    let mut namespaces = BTreeMap::new();
    for n in 0..nss {
        let ns = format!("ns{n}");
        namespaces.insert(
            ns.clone(),
            NamespaceInfo {
                name: ns.clone(),
                labels: BTreeMap::from([("team".to_string(), format!("t{}", n % 5))]),
            },
        );
        for p in 0..per_ns {
            let i = n * per_ns + p;
            if i >= pods {
                break;
            }
            infos.push((
                PodInfo {
                    namespace: ns.clone(),
                    name: format!("p{p}"),
                    uid: String::new(),
                    node: Some("n".into()),
                    host_network: false,
                    labels: BTreeMap::from([("app".to_string(), format!("a{}", p % 5))]),
                    annotations: BTreeMap::new(),
                    completed: false,
                    ports: Vec::new(),
                },
                PodAddresses {
                    subnet: "s".into(),
                    ips: vec![
                        format!("10.{}.{}.{}/8", i / 65536, (i / 256) % 256, i % 256)
                            .parse()
                            .unwrap_or_else(|_| "10.0.0.1/8".parse().expect("literal")),
                    ],
                    mac: Mac([0x0a, 0, 0, 0, 0, 1]),
                    gateways: vec![],
                },
            ));
        }
    }
    let pols: Vec<NetworkPolicy> = (0..policies)
        .filter_map(|k| {
            let ns = format!("ns{}", k % nss);
            serde_json::from_value(json!({
                "metadata": {"namespace": ns, "name": format!("pol{k}")},
                "spec": {"podSelector": {"matchLabels": {"app": format!("a{}", k % 5)}},
                         "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": format!("a{}", (k + 1) % 5)}}},
                                               {"namespaceSelector": {"matchLabels": {"team": format!("t{}", k % 5)}}}],
                                      "ports": [{"port": 80}, {"protocol": "UDP", "port": 53}]}],
                         "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}]}}))
            .ok()
        })
        .collect();
    let t0 = Instant::now();
    let t = translate(&PolicyInput {
        cluster_id: "perf",
        policies: pols.iter().collect(),
        namespaces: &namespaces,
        pods: infos.iter().map(|(p, a)| (p, a)).collect(),
        node_cidrs: vec!["100.64.0.0/16".parse().expect("literal")],
        platform_groups: Vec::new(),
    });
    let translate_ms = t0.elapsed().as_secs_f64() * 1e3;
    Rows {
        pods,
        policies,
        port_groups: t.nb.port_groups.len(),
        address_sets: t.nb.address_sets.len(),
        acls: t.nb.port_groups.values().map(|g| g.acls.len()).sum(),
        set_entries: t.nb.address_sets.values().map(|s| s.addresses.len()).sum(),
        translate_ms,
    }
}

fn row_growth() -> Vec<Rows> {
    let mut out = Vec::new();
    for (pods, policies) in [
        (100, 20),
        (1_000, 20),
        (10_000, 20),
        (1_000, 100),
        (1_000, 1_000),
        (10_000, 1_000),
        (10_000, 5_000),
    ] {
        out.push(synthetic(pods, policies));
    }
    out
}

const SUBNET: &str = "10.88.0.0/16";

fn pod_obj(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"namespace": ns, "name": name, "labels": {"name": name}},
           "spec": {"containers": [{"name": "c", "image": "agnhost",
                                    "ports": [{"name": "http", "containerPort": 80}]}]}})
}

/// Probes `from` → `target` back to back until `want` (reachable or not) is seen; the
/// start of that probe, since `t0`.
fn until_verdict(netns: &str, target: &str, want: bool, t0: Instant) -> Result<f64> {
    let bound = Duration::from_secs(20);
    loop {
        let start = t0.elapsed().as_secs_f64();
        let got = matches!(
            probe(netns, target, false, Duration::from_millis(50))?,
            ProbeOutcome::Reachable(_)
        );
        if got == want {
            return Ok(start);
        }
        if t0.elapsed() > bound {
            bail!("{target} from {netns}: no {want} verdict after {bound:?}");
        }
    }
}

fn enforce(cfg: &Config, lab_dir: &Path, report: &mut Report) -> Result<()> {
    let zovn = sibling("zovn")?;
    let prefix = format!("npb{:x}", std::process::id() % 0xfff);
    let mut lc = LabConfig::new(lab_dir, &prefix);
    lc.nodes = 2;
    eprintln!("netpol: lab up ({} pods)", cfg.pods);
    let mut lab = Lab::up(lc).context("lab up")?;
    lab.keep_running();
    lab.start_apiserver(&zovn).context("object store")?;
    lab.start_agents(
        &sibling("zstack-ovnkube-node")?,
        Some(&sibling("zstack-ovn-cni")?),
    )
    .context("agents")?;
    let mut api = ApiClient::connect(lab_dir)?;
    let mut objs = vec![
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
        "metadata": {"name": "perf"}, "spec": {"cidr": SUBNET, "default": true}}),
    ];
    let nss = cfg.pods.div_ceil(10);
    for n in 0..nss {
        let ns = format!("p{n}");
        objs.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        for p in 0..10.min(cfg.pods - n * 10) {
            objs.push(pod_obj(&ns, &format!("pod{p}")));
        }
    }
    api.apply(objs)?;
    let (ip, netns) = wait_ready(&mut api, cfg.pods)?;
    let keys: Vec<String> = ip.keys().cloned().collect();
    eprintln!(
        "netpol: {} pods ready; {} policies",
        keys.len(),
        cfg.policies
    );
    for i in 0..cfg.policies {
        // target and client on different pods (and often different nodes)
        let target = &keys[(i * 7) % keys.len()];
        let client = &keys[(i * 7 + 3) % keys.len()];
        let (tns, tname) = target.split_once('/').context("key")?;
        let (cns, cname) = client.split_once('/').context("key")?;
        let addr = format!("{}:80", ip[target]);
        until_verdict(&netns[client], &addr, true, Instant::now())?;
        let name = format!("isolate-{i}");
        let deny = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"namespace": tns, "name": name},
            "spec": {"podSelector": {"matchLabels": {"name": tname}}, "policyTypes": ["Ingress"]}});
        let t0 = Instant::now();
        api.apply(vec![deny])?;
        report
            .deny
            .push(until_verdict(&netns[client], &addr, false, t0)?);
        let allow = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"namespace": tns, "name": name},
            "spec": {"podSelector": {"matchLabels": {"name": tname}}, "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cns}},
                                            "podSelector": {"matchLabels": {"name": cname}}}]}]}});
        let t0 = Instant::now();
        api.apply(vec![allow])?;
        report
            .allow
            .push(until_verdict(&netns[client], &addr, true, t0)?);
        eprintln!(
            "netpol: policy {i}: deny {:.0} ms, allow {:.0} ms",
            report.deny[i] * 1e3,
            report.allow[i] * 1e3
        );
    }
    Ok(())
}

type Addrs = BTreeMap<String, String>;

fn wait_ready(api: &mut ApiClient, n: usize) -> Result<(Addrs, Addrs)> {
    let t0 = Instant::now();
    loop {
        let items = api.get(ResourceKind::Pod)?;
        let mut ip = BTreeMap::new();
        let mut netns = BTreeMap::new();
        for p in &items {
            let key = api::pod_json::key(p);
            let ready = api::pod_json::is_ready(p);
            if let (true, Some(i), Some(ns)) =
                (ready, api::pod_json::pod_ip(p), api::pod_json::lab_netns(p))
            {
                ip.insert(key.clone(), i.to_string());
                netns.insert(key, ns.to_string());
            }
        }
        if ip.len() >= n {
            return Ok((ip, netns));
        }
        if t0.elapsed() > Duration::from_secs(300) {
            bail!("only {} of {n} pods ready after 300 s", ip.len());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A binary next to this one (`target/<profile>/`).
fn sibling(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let p = exe.with_file_name(name);
    if !p.is_file() {
        bail!(
            "{} is missing: cargo build --release --workspace --bins",
            p.display()
        );
    }
    Ok(p)
}
