//! Step `external-mode` of `cluster_e2e` (issue 32), after `uninstall`: the chart's
//! external profile on real kubelets, beside a platform OVN run outside the cluster.
//!
//! The platform is a [`lab::Central`] (NB, SB, northd: what the lab's external mode plays
//! the platform with) on the host, its NB and SB also listening on plain TCP at the host's
//! management address (`172.30.0.1`, where the nodes reach the API server), owned by the
//! step and stopped at its end whatever happens. The test writes the platform's rows with
//! `ovn-nbctl`, as the platform would (`tests::platform`): a router `platform-lr`, a switch
//! `platform-ls` whose router port declares 10.99.0.0/24, a VM's port on it (10.99.0.5) and
//! a Load_Balancer_Group of the platform's on the switch. Then:
//!
//! - `helm install` of this tree's chart with `ovn.mode=external`, the platform's TCP
//!   remotes, a cluster id of its own and no default Subnet: every release pod Ready (one
//!   controller, an agent and an OVS pod per node), both nodes Ready;
//! - a Subnet with `externalLogicalSwitch: platform-ls` for namespace `e2e` Active, and a
//!   Deployment of web pods (one per node) with an `httpGet` readiness probe on the web
//!   port: Ready, so kubelet on each node reached its pod on the platform switch (through
//!   the node's management port there, `mgmt.<node>_<subnet>`, an OVS internal port `zpm…`
//!   that the node's route to the Subnet goes through); the pods' addresses are in the
//!   Subnet's CIDR and their ports (and the nodes' management ports) are on `platform-ls`
//!   in the platform's NB;
//! - a NodePort Service over them: its ClusterIP and node1's address at its nodePort
//!   answer HTTP from a pod on each node, node1's NodePort from node2's host and the
//!   ClusterIP from node1's host (through the nodes' ports on the platform switch);
//! - cleanup: the namespace and the Subnet deleted (the platform switch's ports are the
//!   platform's again), `helm uninstall` (nothing of ours left on either node; its
//!   pre-delete hook stopped the controller and removed every row of ours from the
//!   platform's NB, docs/install.md, "Uninstalling"): every NB row (`NB_Global` aside:
//!   northd's and the chassis' counters) is exactly as the platform left it, `_version` aside, so
//!   the platform switch's `ports` and `load_balancer_group` hold only the platform's rows,
//!   and no row names the cluster id.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use api::subnet::{Subnet, SubnetPhase};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use kube::Api;
use kube::api::DeleteParams;
use lab::central::{Central, CentralConfig};
use lab::kubecluster::{host_mgmt_ip, node_mgmt_ip};
use serde_json::{Value, json};
use tests::e2e::objects::{create, ip_of, name, node_is_ready, node_of, web_deployment};
use tests::e2e::wait_until;

use super::{E2e, NS, SYS, delete_test_namespace, helm_uninstall, leftovers, pods_ready, reach};

/// The release of this step, and its pods: one controller, an agent and an OVS pod on
/// each node.
const RELEASE: &str = "zx";
const INSTANCE: &str = "app.kubernetes.io/instance=zx";
const RELEASE_PODS: usize = 5;
/// The cluster id of the release (`ovn.clusterId`): what marks its rows in the platform's NB.
const CLUSTER_ID: &str = "e2e-external";
/// The platform's rows.
const PLATFORM_LR: &str = "platform-lr";
const PLATFORM_LS: &str = "platform-ls";
const PLATFORM_CIDR: &str = "10.99.0.0/24";
const PLATFORM_PREFIX: &str = "10.99.0.";
const PLATFORM_GW: &str = "10.99.0.1/24";
const PLATFORM_VM: (&str, &str, &str) = ("vm-1", "fa:16:3e:99:00:05", "10.99.0.5");
const PLATFORM_LBG: &str = "platform-lbg";
/// Our Subnet on the platform's switch.
const SUBNET: &str = "platform";

/// Every row of the NB but `NB_Global`'s, `_version` dropped, by "TABLE UUID".
type Rows = BTreeMap<String, Value>;

/// `ovsdb-client transact` of `ops` on the NB at `remote`: the reply.
fn transact(remote: &str, ops: Value) -> Result<Value> {
    let out = Command::new("ovsdb-client")
        .args(["--timeout=30", "transact", remote, &ops.to_string()])
        .output()
        .context("run ovsdb-client")?;
    if !out.status.success() {
        bail!(
            "ovsdb-client transact: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("ovsdb-client reply")
}

/// Every row of every NB table but `NB_Global` (northd and the chassis count there).
fn nb_rows(remote: &str) -> Result<Rows> {
    let out = Command::new("ovsdb-client")
        .args(["--timeout=30", "get-schema", remote, "OVN_Northbound"])
        .output()
        .context("run ovsdb-client get-schema")?;
    if !out.status.success() {
        bail!(
            "ovsdb-client get-schema: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let schema: Value = serde_json::from_slice(&out.stdout).context("the NB schema")?;
    let tables: Vec<String> = schema["tables"]
        .as_object()
        .context("the schema's tables")?
        .keys()
        .filter(|t| *t != "NB_Global")
        .cloned()
        .collect();
    let mut ops = vec![json!("OVN_Northbound")];
    ops.extend(
        tables
            .iter()
            .map(|t| json!({"op": "select", "table": t, "where": []})),
    );
    let reply = transact(remote, Value::Array(ops))?;
    let mut rows = Rows::new();
    for (t, r) in tables.iter().zip(reply.as_array().context("reply")?) {
        for row in r["rows"].as_array().context("rows")? {
            let mut row = row.clone();
            let uuid = row["_uuid"][1].as_str().context("_uuid")?.to_string();
            if let Some(o) = row.as_object_mut() {
                o.remove("_version");
            }
            rows.insert(format!("{t} {uuid}"), row);
        }
    }
    Ok(rows)
}

/// The rows of `after` not in `before` or changed since, and the rows of `before` gone:
/// one line each, named by the row's `name` where it has one.
fn diff(before: &Rows, after: &Rows) -> Vec<String> {
    let label = |k: &str, r: &Value| match r["name"].as_str() {
        Some(n) => format!("{k} ({n})"),
        None => k.to_string(),
    };
    let mut d = Vec::new();
    for (k, r) in after {
        match before.get(k) {
            None => d.push(format!("new {}", label(k, r))),
            Some(b) if b != r => d.push(format!("changed {}", label(k, r))),
            Some(_) => {}
        }
    }
    for (k, r) in before {
        if !after.contains_key(k) {
            d.push(format!("gone {}", label(k, r)));
        }
    }
    d
}

/// The names of the ports on the platform's switch.
fn switch_ports(nb: &str) -> Result<BTreeSet<String>> {
    let out = lab::ctl::nbctl(nb, &["lsp-list", PLATFORM_LS])?;
    // `<uuid> (<name>)`
    Ok(out
        .lines()
        .filter_map(|l| l.split_once(" (").map(|(_, n)| n.trim_end_matches(')')))
        .map(str::to_string)
        .collect())
}

/// The platform's rows, as the platform would write them (nothing of ours on them).
fn build_platform(nb: &str) -> Result<()> {
    tests::platform::try_routed_switch(
        nb,
        PLATFORM_LS,
        PLATFORM_LR,
        "0a:99:00:00:00:01",
        PLATFORM_GW,
    )?;
    let (vm, mac, ip) = PLATFORM_VM;
    tests::platform::try_vm_port(nb, PLATFORM_LS, vm, mac, ip)?;
    lab::ctl::nbctl(
        nb,
        &[
            "--id=@g",
            "create",
            "Load_Balancer_Group",
            &format!("name={PLATFORM_LBG}"),
            "--",
            "add",
            "Logical_Switch",
            PLATFORM_LS,
            "load_balancer_group",
            "@g",
        ],
    )?;
    Ok(())
}

/// The install's values: external mode on the platform's remotes, no default Subnet.
fn values(nb: &str, sb: &str, api_server: &str) -> String {
    format!(
        "ovn:\n  mode: external\n  nbdbAddress: \"{nb}\"\n  sbdbAddress: \"{sb}\"\n  \
         clusterId: {CLUSTER_ID}\n\
         network:\n  clusterCIDR: \"\"\n\
         controller:\n  replicas: 1\n\
         node:\n  datapathConfig: {{pmdMaxSleep: 50}}\n\
         kubernetes:\n  apiServer: {api_server}\n\
         tunnel:\n  interface: {}\n",
        lab::kubecluster::config::DATA_IFACE
    )
}

pub async fn external_mode(e: &E2e) -> Result<()> {
    let c = e.cluster();
    let t = Instant::now();
    // the platform: owned by this step, stopped when `platform` drops (on failure too)
    let platform = Central::start(CentralConfig {
        dir: c.dir().join("platform-ovn"),
        raft: false,
        northd: true,
        tcp: false,
    })
    .context("the platform's OVN central")?;
    let (nb_tcp, sb_tcp) = platform
        .listen_tcp_on(&host_mgmt_ip())
        .context("the platform's NB/SB on the host's management address")?;
    let nb = platform.nb_remote();
    build_platform(&nb).context("the platform's rows")?;
    println!(
        "  platform OVN (NB {nb_tcp}, SB {sb_tcp}, northd) with {PLATFORM_LR}, {PLATFORM_LS} \
         ({PLATFORM_CIDR}), VM port {}, group {PLATFORM_LBG}: {:.1} s",
        PLATFORM_VM.0,
        t.elapsed().as_secs_f64()
    );
    let r = on_platform(e, &platform, &nb_tcp, &sb_tcp).await;
    if r.is_err() {
        // leave the cluster without the release for the steps after this one
        let _ = delete_test_namespace(e, Duration::from_secs(60)).await;
        let _ = helm_uninstall(e, RELEASE).await;
    }
    platform.stop().context("stop the platform's OVN central")?;
    r
}

/// Everything but the platform's start and stop.
async fn on_platform(e: &E2e, platform: &Central, nb_tcp: &str, sb_tcp: &str) -> Result<()> {
    let c = e.cluster();
    let nb = &platform.nb_remote();
    let before = nb_rows(nb)?;
    let platform_ports = switch_ports(nb)?;

    // the release
    let values_file = c.dir().join("e2e-external-values.yaml");
    std::fs::write(&values_file, values(nb_tcp, sb_tcp, &c.api_server()))?;
    let t = Instant::now();
    super::helm_install(e, RELEASE, &tests::helm::chart_dir(), &values_file)?;
    pods_ready(e, SYS, INSTANCE, RELEASE_PODS, Duration::from_secs(300)).await?;
    let nodes: Api<Node> = Api::all(e.client.clone());
    wait_until("both nodes Ready", Duration::from_secs(120), || async {
        for i in 1..=2 {
            if !node_is_ready(&nodes.get(&c.node_name(i)).await?) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await?;
    let chassis = lab::ctl::sbctl(
        &platform.sb_remote(),
        &["--bare", "--columns=name", "list", "Chassis"],
    )?;
    println!(
        "  helm install (ovn.mode=external) → {RELEASE_PODS} release pods and both nodes \
         Ready in {:.1} s; the platform's SB chassis: {}",
        t.elapsed().as_secs_f64(),
        chassis.split_whitespace().collect::<Vec<_>>().join(" ")
    );

    // the Subnet on the platform's switch, and its namespace
    let t = Instant::now();
    let nss: Api<Namespace> = Api::all(e.client.clone());
    create(
        &nss,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await?;
    let subnets: Api<Subnet> = Api::all(e.client.clone());
    create(
        &subnets,
        json!({
            "apiVersion": "network.zstack.io/v1", "kind": "Subnet",
            "metadata": {"name": SUBNET},
            "spec": {"cidr": PLATFORM_CIDR, "externalLogicalSwitch": PLATFORM_LS,
                     "namespaces": [NS]}
        }),
    )
    .await?;
    wait_until(
        &format!("Subnet {SUBNET} Active"),
        Duration::from_secs(60),
        || async {
            let s = subnets.get(SUBNET).await?;
            match s.status {
                Some(st) if st.phase == SubnetPhase::Active => Ok(Some(())),
                Some(st) if st.phase == SubnetPhase::Failed => {
                    bail!("Subnet {SUBNET} Failed: {}", st.reason)
                }
                _ => Ok(None),
            }
        },
    )
    .await?;
    let subnet_secs = t.elapsed().as_secs_f64();

    // web pods with kubelet's HTTP readiness probe on the web port
    let t = Instant::now();
    let mut dep = web_deployment(NS, "web", 2);
    dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = json!({
        "httpGet": {"path": "/", "port": 8080},
        "periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3
    });
    let deps: Api<Deployment> = Api::namespaced(e.client.clone(), NS);
    create(&deps, dep).await?;
    let pods = pods_ready(e, NS, "app=web", 2, Duration::from_secs(180)).await?;
    let ready_secs = t.elapsed().as_secs_f64();
    let on: BTreeSet<String> = pods.iter().map(node_of).collect();
    if on.len() != 2 {
        bail!("the web pods are on {on:?}, not on both nodes");
    }
    let ports = switch_ports(nb)?;
    let mut probe_lags = Vec::new();
    for p in &pods {
        let ip = ip_of(p);
        let subnet = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(api::keys::POD_SUBNET).cloned())
            .unwrap_or_default();
        if !ip.starts_with(PLATFORM_PREFIX) || subnet != SUBNET {
            bail!(
                "pod {} has {ip:?} from Subnet {subnet:?}, not an address of {PLATFORM_CIDR} \
                 from {SUBNET}",
                name(p)
            );
        }
        if ip == PLATFORM_VM.2 {
            bail!("pod {} got the platform VM's address {ip}", name(p));
        }
        let node = node_of(p);
        for lsp in [format!("{NS}_{}", name(p)), format!("mgmt.{node}_{SUBNET}")] {
            if !ports.contains(&lsp) {
                bail!("{lsp} is not on {PLATFORM_LS} in the platform's NB: {ports:?}");
            }
        }
        // kubelet's probe leaves the node's host netns through the management port on the
        // platform switch
        let i: usize = node
            .trim_start_matches("node")
            .parse()
            .context("node index")?;
        let route = c.node_exec(i, &["ip", "-4", "route", "get", &ip])?;
        let dev = route
            .split_whitespace()
            .skip_while(|w| *w != "dev")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        if !dev.starts_with("zpm") {
            bail!(
                "{node}'s route to pod {} ({ip}) is not through a zpm port: {route}",
                name(p)
            );
        }
        probe_lags.push(format!(
            "{}@{node} {ip} via {dev}: Ready {:.0} s after its container started",
            name(p),
            ready_after_start(p).unwrap_or(f64::NAN)
        ));
    }
    println!(
        "  Subnet {SUBNET} (externalLogicalSwitch {PLATFORM_LS}) Active in {subnet_secs:.1} s; \
         2 web pods with an httpGet readiness probe Ready in {ready_secs:.1} s: {}",
        probe_lags.join("; ")
    );
    let ours: Vec<&String> = ports.difference(&platform_ports).collect();
    println!("  on {PLATFORM_LS} beside the platform's ports: {ours:?}");

    // a Service over them
    service(e, &pods).await?;

    // cleanup: workloads, Subnet, release
    let t = Instant::now();
    delete_test_namespace(e, Duration::from_secs(120)).await?;
    subnets.delete(SUBNET, &DeleteParams::default()).await?;
    wait_until(
        &format!("{PLATFORM_LS} holding only the platform's ports"),
        Duration::from_secs(60),
        || async {
            let now = switch_ports(nb)?;
            if now == platform_ports {
                Ok(Some(()))
            } else {
                bail!("{PLATFORM_LS} ports: {now:?}")
            }
        },
    )
    .await?;
    let workloads_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    helm_uninstall(e, RELEASE).await?;
    wait_until(
        "nothing of ours left on node1 and node2",
        Duration::from_secs(60),
        || async {
            let left: Vec<String> = (1..=2)
                .flat_map(|i| {
                    leftovers(c, i, false)
                        .into_iter()
                        .map(move |l| format!("node{i}: {l}"))
                })
                .collect();
            if left.is_empty() {
                Ok(Some(()))
            } else {
                bail!("{}", left.join("; "))
            }
        },
    )
    .await?;
    let uninstall_secs = t.elapsed().as_secs_f64();
    // the chart's pre-delete hook stopped the controller and cleaned the platform's NB
    // (docs/install.md, "Uninstalling"): every NB row as the platform left it
    let after = nb_rows(nb)?;
    let left = diff(&before, &after);
    if !left.is_empty() {
        bail!(
            "after helm uninstall the platform's NB is not as it was (the hook's NB step \
             did not clean it): {left:?}"
        );
    }
    println!(
        "  namespace and Subnet deleted → {PLATFORM_LS} holds the platform's ports only in \
         {workloads_secs:.1} s; helm uninstall (its hook cleaned the NB) → nothing of ours \
         on either node in {uninstall_secs:.1} s"
    );
    let dump = serde_json::to_string(&after)?;
    if dump.contains(CLUSTER_ID) {
        bail!("a row naming cluster id {CLUSTER_ID} is still in the platform's NB");
    }
    println!(
        "  after helm uninstall: every NB row as the platform left it ({} rows), \
         {PLATFORM_LS}'s ports {platform_ports:?} and load_balancer_group [{PLATFORM_LBG}] \
         only",
        after.len()
    );
    Ok(())
}

/// Seconds from the pod's container start to its Ready condition (kubelet's first
/// successful probe), from the pod's status (1 s resolution).
fn ready_after_start(p: &Pod) -> Option<f64> {
    let st = p.status.as_ref()?;
    let started = st
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .running
        .as_ref()?
        .started_at
        .as_ref()?
        .0
        .as_millisecond();
    let ready = st
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()?
        .0
        .as_millisecond();
    Some((ready - started) as f64 / 1000.0)
}

/// A NodePort Service over the web pods: its ClusterIP from a pod on each node.
async fn service(e: &E2e, pods: &[Pod]) -> Result<()> {
    let svcs: Api<Service> = Api::namespaced(e.client.clone(), NS);
    let svc = create(
        &svcs,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"type": "NodePort", "selector": {"app": "web"},
                     "ports": [{"port": 80, "targetPort": 8080}]}
        }),
    )
    .await?;
    let spec = svc.spec.context("the Service has no spec")?;
    let vip = spec.cluster_ip.context("the Service has no ClusterIP")?;
    let node_port = spec
        .ports
        .as_ref()
        .and_then(|p| p.first())
        .and_then(|p| p.node_port)
        .context("the Service has no nodePort")?;
    let eps: Api<Endpoints> = Api::namespaced(e.client.clone(), NS);
    wait_until(
        "Endpoints web with the 2 web pods",
        Duration::from_secs(60),
        || async {
            let n: usize = eps
                .get_opt("web")
                .await?
                .and_then(|ep| ep.subsets)
                .unwrap_or_default()
                .iter()
                .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
                .sum();
            Ok((n == 2).then_some(()))
        },
    )
    .await?;
    let names: BTreeSet<String> = pods.iter().map(name).collect();
    for from in pods {
        let (body, secs) = reach(e, &name(from), &format!("http://{vip}/")).await?;
        if !names.contains(&body) {
            bail!(
                "ClusterIP {vip} answered {body:?} to {}, not a web pod's name",
                name(from)
            );
        }
        println!(
            "  ClusterIP {vip}:80 from {} ({}, on {PLATFORM_LS}): answered by {body} after \
             {secs:.2} s",
            name(from),
            node_of(from)
        );
    }
    // a node's address at the nodePort, from a pod on each node: the platform switch's
    // load balancers (our group on it) serve it
    let url = format!("http://{}:{node_port}/", node_mgmt_ip(1));
    for from in pods {
        let (body, secs) = reach(e, &name(from), &url).await?;
        if !names.contains(&body) {
            bail!(
                "{url} answered {body:?} to {}, not a web pod's name",
                name(from)
            );
        }
        println!(
            "  NodePort {url} (node1's address) from {} ({}): answered by {body} after \
             {secs:.2} s",
            name(from),
            node_of(from)
        );
    }
    // the node hosts themselves: node2's host at node1's NodePort (DNATed to the ClusterIP
    // by node1's host NAT, routed through node1's port on the platform switch), and
    // node1's host at the ClusterIP (through its own port there)
    let c = e.guard.cluster.as_ref().context("no cluster")?;
    for (i, host, port) in [
        (2, node_mgmt_ip(1).to_string(), node_port.to_string()),
        (1, vip.clone(), "80".to_string()),
    ] {
        // bash's /dev/tcp: no HTTP client needed on the node
        let script = format!(
            "exec 3<>/dev/tcp/{host}/{port} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && timeout 3 cat <&3"
        );
        let t = Instant::now();
        let body = wait_until(
            &format!("node{i}'s host fetching http://{host}:{port}/"),
            Duration::from_secs(30),
            || async {
                let out = c.node_exec(i, &["timeout", "4", "bash", "-c", &script])?;
                Ok(out
                    .split("\r\n\r\n")
                    .nth(1)
                    .map(|b| b.trim().to_string())
                    .filter(|b| names.contains(b)))
            },
        )
        .await?;
        println!(
            "  http://{host}:{port}/ from node{i}'s host: answered by {body} after {:.2} s",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
