//! Step `diagnose` of `cluster_e2e` (issue 19): the diagnostics on the real cluster, the
//! way an operator runs them: `zovn` installed as `kubectl-zovn` on PATH, called as
//! `kubectl zovn ...` with only `$KUBECONFIG` (kubectl's plugin mechanism), and once
//! directly with `--kubeconfig`.
//!
//! - `status`: OVN central's rows (NB, SB, northd running), both nodes with their agents
//!   up and node1's `dpdk` datapath, JSON and 80 columns;
//! - `trace` across nodes (a web pod on node1 to one on node2) with a NetworkPolicy
//!   isolating the target: dropped, the policy named, node1's OpenFlow trace sending it
//!   through the tunnel and node2's dropping it; the policy admitting the client on 8080:
//!   delivered, the rule named, another port still dropped;
//! - a Service (`svc/e2e/web`): delivered, the backend the load balancer chose named, and
//!   it is one of the web pods;
//! - `capture` of a pod on node1 (the DPDK node: its port is polled by the PMD, no
//!   kernel device carries its packets; a pod of its own, which the pinger does not
//!   probe) while another pod pings it: `--count 8 -w FILE`
//!   gives a pcap holding the echo requests and replies; then a capture without a count
//!   stopped by SIGINT to the plugin (it closes `kubectl exec -i`'s input: the capture in
//!   the agent's container stops itself): exit 0; after both, no Mirror or capture port
//!   on node1's OVS;
//! - `status` naming a pod with a problem: a Subnet with room for one pod, two pods in its
//!   namespace: the one without an address is listed with the controller's IPAM error;
//! - bad input (an unknown pod): exit 2, one line.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use tests::e2e::objects::{create, ip_of, name, sleeper};
use tests::e2e::{kubectl, wait_until};

use super::{E2e, NS, web_pods};

/// A directory holding `kubectl-zovn`, a link to the operator's `zovn` as shipped
/// (`make install-cli`: built without the lab), in the cluster's state directory (it goes
/// with the cluster).
pub(crate) fn plugin_dir(e: &E2e) -> Result<PathBuf> {
    let dir = e.cluster().dir().join("e2e-plugins");
    std::fs::create_dir_all(&dir)?;
    let link = dir.join("kubectl-zovn");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(tests::operator_cli(), &link).context("link kubectl-zovn")?;
    Ok(dir)
}

/// `kubectl zovn ARGS` with `$KUBECONFIG` and the plugin on PATH: (exit code, stdout,
/// stderr).
pub(crate) fn kubectl_zovn(kc: &Path, plugins: &Path, args: &[&str]) -> (i32, String, String) {
    let path = format!(
        "{}:{}",
        plugins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    match Command::new("kubectl")
        .arg("zovn")
        .args(args)
        .env("KUBECONFIG", kc)
        .env("PATH", path)
        .env("RUST_BACKTRACE", "0")
        .output()
    {
        Ok(o) => (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ),
        Err(e) => (-1, String::new(), format!("run kubectl zovn: {e}")),
    }
}

fn indented(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn within_80(text: &str) -> Result<()> {
    if let Some(l) = text.lines().find(|l| l.chars().count() > 80) {
        bail!("a line wider than 80 columns: {l:?}");
    }
    Ok(())
}

fn status(e: &E2e, plugins: &Path) -> Result<()> {
    let t = Instant::now();
    let (code, text, err) = kubectl_zovn(&e.kc, plugins, &["status"]);
    if code != 0 {
        bail!("kubectl zovn status: exit {code}: {err}");
    }
    println!(
        "  kubectl zovn status ({:.1} s):\n{}",
        t.elapsed().as_secs_f64(),
        indented(&text)
    );
    within_80(&text)?;
    // the flag instead of the environment, JSON
    let out = Command::new(tests::workspace_bin("zovn"))
        .args(["status", "-o", "json", "--kubeconfig"])
        .arg(&e.kc)
        .output()?;
    if !out.status.success() {
        bail!(
            "zovn status --kubeconfig: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let j: Value = serde_json::from_slice(&out.stdout)?;
    for what in ["NB", "SB", "northd"] {
        let row = j["central"]
            .as_array()
            .and_then(|c| c.iter().find(|r| r["what"] == what))
            .with_context(|| format!("no central row {what}: {j:#}"))?;
        if row["alive"] != true {
            bail!("central {what} not running: {j:#}");
        }
    }
    let node = |n: &str| {
        j["nodes"]
            .as_array()
            .and_then(|a| a.iter().find(|r| r["node"] == n))
            .cloned()
            .with_context(|| format!("no row for {n}: {j:#}"))
    };
    let (n1, n2) = (node("node1")?, node("node2")?);
    if n1["datapath"] != "dpdk" || n1["agent_alive"] != true || n2["agent_alive"] != true {
        bail!("node rows: {n1} / {n2}");
    }
    if n1["pmd_busy_percent"].as_f64().is_none() {
        bail!("node1 (dpdk) has no PMD busy figure: {n1}");
    }
    if n1["stale_flow_purges"].as_u64().is_none() {
        bail!("node1's agent metrics were not read: {n1}");
    }
    pinger_matrix(e)
}

/// The chart's pinger (every 5 s): each agent measured the other node's tunnel endpoint
/// and a pod there, as `zovn status` reads from its metrics (the pod sample may take one
/// refresh, 15 s, after the pods started).
fn pinger_matrix(e: &E2e) -> Result<()> {
    let t = Instant::now();
    let mut last = Value::Null;
    while t.elapsed() < Duration::from_secs(60) {
        let out = Command::new(tests::workspace_bin("zovn"))
            .args(["status", "-o", "json", "--kubeconfig"])
            .arg(&e.kc)
            .output()?;
        last = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let probe = |from: &str, to: &str| tests::node_status::pinger_probe(&last, from, to);
        let (a, b) = (probe("node1", "node2"), probe("node2", "node1"));
        let measured = |p: &Value| {
            p["node_reachable"] == true
                && p["pod_reachable"] == true
                && p["node_rtt_ms"].is_number()
                && p["pod_rtt_ms"].is_number()
        };
        if measured(&a) && measured(&b) {
            println!(
                "  pinger after {:.1} s: node1→node2 {a}; node2→node1 {b}",
                t.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    bail!("the agents' pinger did not measure each other's endpoint and pods: {last:#}")
}

/// Polls `kubectl zovn trace ARGS` until `ok` holds (30 s); the last (code, stdout).
async fn trace_until(
    e: &E2e,
    plugins: &Path,
    what: &str,
    args: &[&str],
    ok: impl Fn(i32, &str) -> bool,
) -> Result<(i32, String)> {
    wait_until(what, Duration::from_secs(30), || async {
        let (code, out, err) = kubectl_zovn(&e.kc, plugins, args);
        if code == 2 || (code == 1 && out.is_empty()) {
            bail!("kubectl zovn trace {}: exit {code}: {err}", args.join(" "));
        }
        Ok(ok(code, &out).then_some((code, out)))
    })
    .await
}

fn json_trace(e: &E2e, plugins: &Path, args: &[&str]) -> Result<Value> {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    let (_, out, err) = kubectl_zovn(&e.kc, plugins, &a);
    serde_json::from_str(&out).with_context(|| format!("trace JSON: {out}{err}"))
}

/// The capture rows (Mirrors, Ports) marked on node `i`'s OVS.
fn capture_rows(e: &E2e, i: usize) -> Result<String> {
    let mut rows = String::new();
    for table in ["Mirror", "Port"] {
        rows += &tests::e2e::ovs_vsctl(
            e.cluster(),
            i,
            &[
                "--bare",
                "--columns=name",
                "find",
                table,
                "external_ids:zstack.io/owner=zovn-capture",
            ],
        )?;
    }
    Ok(rows.trim().to_string())
}

/// `kubectl zovn capture ARGS` started in the background: the child.
fn start_capture(e: &E2e, plugins: &Path, args: &[&str]) -> Result<std::process::Child> {
    let path = format!(
        "{}:{}",
        plugins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Ok(Command::new("kubectl")
        .args(["zovn", "capture"])
        .args(args)
        .env("KUBECONFIG", &e.kc)
        .env("PATH", path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?)
}

/// Waits (bounded) for the capture child: (code, stderr).
async fn finish_capture(mut c: std::process::Child, bound: Duration) -> Result<(i32, String)> {
    let t = Instant::now();
    while c.try_wait()?.is_none() {
        if t.elapsed() > bound {
            let _ = c.kill();
            let out = c.wait_with_output()?;
            bail!(
                "kubectl zovn capture still running after {bound:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = c.wait_with_output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

async fn capture(e: &E2e, plugins: &Path) -> Result<()> {
    let (_, n2) = web_pods(e).await?;
    // a pod of its own on the DPDK node, named after the web pods there: node2's pinger
    // probes the first 2 pods of node1 by name (the web pods), whose probes would count
    // towards --count
    create(
        &e.pods(NS),
        sleeper(
            NS,
            "zz-capture",
            Some("node1"),
            json!({"e2e-capture": "yes"}),
        ),
    )
    .await?;
    let captured = super::pods_ready(e, NS, "e2e-capture=yes", 1, Duration::from_secs(120)).await?;
    let (target, from) = (&captured[0], name(&n2[0]));
    let ip = ip_of(target);
    let file = std::env::temp_dir().join(format!("zovn-e2e-{}.pcap", std::process::id()));
    let t = Instant::now();
    let cap = start_capture(
        e,
        plugins,
        &[
            "-n",
            NS,
            &name(target),
            "--count",
            "8",
            "-w",
            &file.to_string_lossy(),
        ],
    )?;
    wait_until(
        "the capture's Mirror on node1",
        Duration::from_secs(30),
        || async { Ok((!capture_rows(e, 1)?.is_empty()).then_some(())) },
    )
    .await?;
    let mirror_secs = t.elapsed().as_secs_f64();
    // 12 packets of ours: a new pod's own IPv6 router solicitations and listener reports
    // (its first seconds) may take a few of the 8
    tests::e2e::exec(&e.kc, NS, &from, &["ping", "-c", "6", &ip])?;
    let (code, err) = finish_capture(cap, Duration::from_secs(30)).await?;
    if code != 0 || !err.contains("8 packets captured") {
        bail!("kubectl zovn capture --count 8: exit {code}: {err}");
    }
    let pkts = api::pcap::read_all(&std::fs::read(&file)?)?;
    let lines: Vec<String> = pkts
        .iter()
        .map(|p| diag::capture::summary::summarize(&p.data))
        .collect();
    let _ = std::fs::remove_file(&file);
    let from_ip = ip_of(&n2[0]);
    if !lines
        .iter()
        .any(|l| l.contains(&format!("{from_ip} > {ip}: ICMP echo request")))
        || !lines
            .iter()
            .any(|l| l.contains(&format!("{ip} > {from_ip}: ICMP echo reply")))
    {
        bail!("the pcap lacks the echo requests or replies: {lines:#?}");
    }
    let left = capture_rows(e, 1)?;
    if !left.is_empty() {
        bail!("capture rows left after --count: {left}");
    }
    println!(
        "  kubectl zovn capture (DPDK node1, mirror after {mirror_secs:.1} s): {} packets, {lines:?}",
        pkts.len()
    );

    // Ctrl-C: SIGINT to the plugin (kubectl exec(2)s it: the child is the plugin)
    let cap = start_capture(e, plugins, &["-n", NS, &name(target)])?;
    wait_until(
        "the second capture's Mirror",
        Duration::from_secs(30),
        || async { Ok((!capture_rows(e, 1)?.is_empty()).then_some(())) },
    )
    .await?;
    let pid = nix::unistd::Pid::from_raw(cap.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT)?;
    let (code, err) = finish_capture(cap, Duration::from_secs(30)).await?;
    if code != 0 || !err.contains("packets captured") {
        bail!("kubectl zovn capture after SIGINT: exit {code}: {err}");
    }
    wait_until(
        "no capture rows after SIGINT",
        Duration::from_secs(15),
        || async { Ok(capture_rows(e, 1)?.is_empty().then_some(())) },
    )
    .await?;
    e.pods(NS)
        .delete("zz-capture", &DeleteParams::default())
        .await?;
    Ok(())
}

/// A full Subnet: `kubectl zovn status` lists the pod left without an address, and why.
async fn pod_problems(e: &E2e, plugins: &Path) -> Result<()> {
    const TINY: &str = "e2e-tiny";
    let file = std::env::temp_dir().join(format!("zovn-e2e-tiny-{}.yaml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {TINY}}}\n---\n\
             apiVersion: network.zstack.io/v1\nkind: Subnet\nmetadata: {{name: {TINY}}}\n\
             spec: {{cidr: 10.99.0.0/30, namespaces: [{TINY}]}}\n"
        ),
    )?;
    kubectl(&e.kc, &["apply", "-f", &file.to_string_lossy()])?;
    // a new namespace's pods are refused until the token controller gave its default
    // ServiceAccount a token (kube-controller-manager, asynchronous)
    wait_until(
        &format!("the default ServiceAccount of {TINY} with its token"),
        Duration::from_secs(30),
        || async {
            let sa = kubectl(
                &e.kc,
                &[
                    "get",
                    "sa",
                    "default",
                    "-n",
                    TINY,
                    "-o",
                    "jsonpath={.secrets}",
                ],
            )?;
            Ok((!sa.trim().is_empty()).then_some(()))
        },
    )
    .await?;
    let pods = e.pods(TINY);
    for n in ["first", "second"] {
        create(
            &pods,
            tests::e2e::objects::sleeper(TINY, n, None, json!({})),
        )
        .await?;
    }
    let t = Instant::now();
    let (problem, text) = wait_until(
        "kubectl zovn status listing the pod the full Subnet left without an address",
        Duration::from_secs(60),
        || async {
            let (code, out, err) = kubectl_zovn(&e.kc, plugins, &["status", "-o", "json"]);
            if code != 0 {
                bail!("kubectl zovn status: exit {code}: {err}");
            }
            let j: Value = serde_json::from_str(&out)?;
            let found = j["pods"].as_array().and_then(|ps| {
                ps.iter()
                    .find(|p| {
                        p["pod"].as_str().is_some_and(|k| k.starts_with(TINY))
                            && p["problem"]
                                .as_str()
                                .is_some_and(|m| m.starts_with("no address"))
                    })
                    .cloned()
            });
            Ok(found.map(|f| (f, kubectl_zovn(&e.kc, plugins, &["status"]).1)))
        },
    )
    .await?;
    within_80(&text)?;
    if !text.contains("PODS WITH PROBLEMS") {
        bail!("status text without the pod:\n{text}");
    }
    println!(
        "  kubectl zovn status after {:.1} s: {} {}",
        t.elapsed().as_secs_f64(),
        problem["pod"],
        problem["problem"]
    );
    kubectl(&e.kc, &["delete", "namespace", TINY, "--wait=true"])?;
    kubectl(&e.kc, &["delete", "subnet", TINY])?;
    let _ = std::fs::remove_file(&file);
    Ok(())
}

pub(crate) async fn diagnose(e: &E2e) -> Result<()> {
    let plugins = plugin_dir(e)?;
    status(e, &plugins)?;
    capture(e, &plugins).await?;
    pod_problems(e, &plugins).await?;

    let (n1, n2) = web_pods(e).await?;
    let (client, target) = (name(&n1[0]), name(&n2[0]));
    let dst = format!("{target}:8080");
    kubectl(&e.kc, &["label", "pod", "-n", NS, &target, "e2e-diag=yes"])?;
    let pols: Api<NetworkPolicy> = Api::namespaced(e.client.clone(), NS);
    create(
        &pols,
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "diag-isolate", "namespace": NS},
            "spec": {"podSelector": {"matchLabels": {"e2e-diag": "yes"}},
                     "policyTypes": ["Ingress"]}
        }),
    )
    .await?;
    let t = Instant::now();
    let (_, text) = trace_until(
        e,
        &plugins,
        "the trace naming NetworkPolicy diag-isolate",
        &["trace", "-n", NS, &client, &dst],
        |code, out| code == 1 && out.contains("e2e/diag-isolate"),
    )
    .await?;
    println!(
        "  kubectl zovn trace -n {NS} {client} {dst} (isolated, {:.1} s):\n{}",
        t.elapsed().as_secs_f64(),
        indented(&text)
    );
    within_80(&text)?;
    if !text.contains("tunnel to node node2") {
        bail!("the cross-node trace does not name the tunnel to node2:\n{text}");
    }
    let j = json_trace(e, &plugins, &["trace", "-n", NS, &client, &dst])?;
    if j["physical"][0]["node"] != "node1"
        || j["physical"][0]["datapath_actions"] == "drop"
        || j["physical"][1]["node"] != "node2"
        || j["physical"][1]["datapath_actions"] != "drop"
    {
        bail!("both nodes' OpenFlow traces expected (node1 forwards, node2 drops): {j:#}");
    }

    // admit the web pods on 8080: delivered, the rule named; another port stays dropped
    pols.patch(
        "diag-isolate",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"ingress": [{
            "from": [{"podSelector": {"matchLabels": {"app": "web"}}}],
            "ports": [{"port": 8080, "protocol": "TCP"}]
        }]}})),
    )
    .await?;
    let (_, text) = trace_until(
        e,
        &plugins,
        "the trace delivering through the admitting rule",
        &["trace", "-n", NS, &client, &dst],
        |code, _| code == 0,
    )
    .await?;
    if !text.contains(&format!("delivered to pod {NS}/{target}"))
        || !text.contains("NetworkPolicy e2e/diag-isolate (rule ingress[0])")
    {
        bail!("delivered without the pod or the rule named:\n{text}");
    }
    let (code, _, err) = kubectl_zovn(
        &e.kc,
        &plugins,
        &["trace", "-n", NS, &client, &format!("{target}:9090")],
    );
    if code != 1 {
        bail!("port 9090 is not admitted, the trace says exit {code}: {err}");
    }
    pols.delete("diag-isolate", &DeleteParams::default())
        .await?;
    kubectl(&e.kc, &["label", "pod", "-n", NS, &target, "e2e-diag-"])?;

    // a Service: the backend the load balancer chose
    let j = json_trace(e, &plugins, &["trace", "-n", NS, &client, "svc/e2e/web"])?;
    let chosen = j["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["kind"] == "load-balanced"))
        .with_context(|| format!("no load-balanced finding: {j:#}"))?;
    let web_ips: Vec<String> = n1.iter().chain(&n2).map(ip_of).collect();
    let backend = chosen["backend"].as_str().unwrap_or("");
    if j["verdict"] != "delivered" || !web_ips.iter().any(|ip| backend.starts_with(ip.as_str())) {
        bail!("Service web: not delivered to a web pod ({web_ips:?}): {j:#}");
    }
    println!("  kubectl zovn trace {client} svc/e2e/web: delivered, backend {backend}");

    // bad input
    let (code, out, err) = kubectl_zovn(&e.kc, &plugins, &["trace", "-n", NS, "nosuch", &dst]);
    if code != 2 || !out.is_empty() || err.lines().count() != 1 || !err.contains("not found") {
        bail!("an unknown pod: exit {code}, stdout {out:?}, stderr {err:?}");
    }
    let _ = std::fs::remove_dir_all(&plugins);
    Ok(())
}
