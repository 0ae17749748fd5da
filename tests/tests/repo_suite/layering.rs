//! The workspace crate graph is layered (issue #14): the node agent's crates reach the
//! controller only through the contract crate `api`, never by linking `control`, and
//! nothing below imports anything above.
//!
//! ```text
//!   perf, tests
//!      zovn                                (the CLI; feature `lab` adds the lab)
//!      lab
//!   control   dataplane   diag             (diag -> api, hostio, ovsdb only)
//!   api  ovsdb  endpoints  cni  vhost      (cni, vhost -> api, hostio only)
//!   hostio                                 (host I/O primitives -> nothing)
//! ```
//!
//! And the operator's CLI as shipped (`zovn` without its `lab` feature, installed as
//! `kubectl-zovn`) links only the diagnostics (`diag`) and what they stand on: no lab,
//! no controller, no node agent, no Kubernetes client library (`cargo tree`).
//!
//! The graph comes from `cargo metadata` (the `cargo` running the tests, `$CARGO`); every
//! kind of dependency counts (normal, build and dev), transitively. No root needed.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Which workspace crates each workspace crate may reach (directly or transitively).
/// A workspace member missing here fails the test: place it in a layer first.
fn allowed() -> BTreeMap<&'static str, &'static [&'static str]> {
    const BOTTOM: &[&str] = &[];
    const CONTRACT: &[&str] = &["api", "hostio"];
    const MIDDLE: &[&str] = &["api", "hostio", "ovsdb", "endpoints", "cni", "vhost"];
    const LAB: &[&str] = &[
        "api",
        "hostio",
        "ovsdb",
        "endpoints",
        "cni",
        "vhost",
        "control",
        "dataplane",
        "diag",
    ];
    const DIAG: &[&str] = &["api", "hostio", "ovsdb"];
    const TOP: &[&str] = &[
        "api",
        "hostio",
        "ovsdb",
        "endpoints",
        "cni",
        "vhost",
        "control",
        "dataplane",
        "diag",
        "lab",
    ];
    BTreeMap::from([
        ("api", BOTTOM),
        ("hostio", BOTTOM),
        ("ovsdb", BOTTOM),
        ("endpoints", BOTTOM),
        // a placeholder with no workspace dependency while it is a member
        ("bpf", BOTTOM),
        ("cni", CONTRACT),
        ("vhost", CONTRACT),
        ("control", MIDDLE),
        ("dataplane", MIDDLE),
        ("diag", DIAG),
        ("lab", LAB),
        ("zovn", TOP),
        ("perf", TOP),
        ("tests", TOP),
    ])
}

/// Workspace crate → the workspace crates it depends on directly (self-edges dropped).
type Graph = BTreeMap<String, BTreeSet<String>>;

/// `cargo ARGS --manifest-path <workspace>` (the `cargo` running the tests): its stdout.
fn cargo(args: &[&str]) -> Vec<u8> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let out = Command::new(&cargo)
        .args(args)
        .args(["--manifest-path", manifest])
        .output()
        .unwrap_or_else(|e| panic!("running {cargo} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{cargo} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn workspace_graph() -> Graph {
    let out = cargo(&["metadata", "--format-version", "1", "--no-deps"]);
    let meta: serde_json::Value = serde_json::from_slice(&out).expect("cargo metadata prints JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let members: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    packages
        .iter()
        .map(|p| {
            let name = p["name"].as_str().unwrap_or_default().to_string();
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["name"].as_str())
                .filter(|d| members.contains(*d) && *d != name)
                .map(str::to_string)
                .collect();
            (name, deps)
        })
        .collect()
}

/// Every violation, each naming the offending edge (and the path that reaches it).
fn violations(graph: &Graph, allowed: &BTreeMap<&str, &[&str]>) -> Vec<String> {
    let mut out = Vec::new();
    for (krate, _) in graph.iter() {
        let Some(ok) = allowed.get(krate.as_str()) else {
            out.push(format!(
                "workspace crate {krate} has no layer: add it to allowed() in tests/tests/repo_suite/layering.rs"
            ));
            continue;
        };
        // depth-first over the workspace graph, keeping the path for the message
        let mut stack: Vec<Vec<&str>> = vec![vec![krate.as_str()]];
        let mut seen = BTreeSet::new();
        while let Some(path) = stack.pop() {
            let last = *path.last().unwrap_or(&krate.as_str());
            for dep in graph.get(last).into_iter().flatten() {
                if !seen.insert(dep.as_str()) {
                    continue;
                }
                let mut next = path.clone();
                next.push(dep.as_str());
                if !ok.contains(&dep.as_str()) {
                    out.push(format!(
                        "{krate} must not depend on {dep}: edge {last} -> {dep} (path {})",
                        next.join(" -> ")
                    ));
                }
                stack.push(next);
            }
        }
    }
    out
}

#[test]
fn the_workspace_crate_graph_is_layered() {
    let graph = workspace_graph();
    for krate in ["api", "control", "dataplane", "cni", "vhost"] {
        assert!(
            graph.contains_key(krate),
            "{krate} is not a workspace member"
        );
    }
    let bad = violations(&graph, &allowed());
    assert!(bad.is_empty(), "crate layering broken:\n{}", bad.join("\n"));
    // the node agent's crates use the contract crate
    for krate in ["dataplane", "cni", "vhost", "control"] {
        assert!(graph[krate].contains("api"), "{krate} does not use api");
    }
}

#[test]
fn a_forbidden_edge_is_reported_with_its_path() {
    let g = |edges: &[(&str, &[&str])]| -> Graph {
        edges
            .iter()
            .map(|(k, ds)| (k.to_string(), ds.iter().map(|d| d.to_string()).collect()))
            .collect()
    };
    // vhost -> control would make dataplane link the controller through vhost
    let graph = g(&[
        ("api", &[]),
        ("control", &["api"]),
        ("vhost", &["api", "control"]),
        ("dataplane", &["api", "vhost"]),
    ]);
    let bad = violations(&graph, &allowed());
    assert!(
        bad.iter()
            .any(|m| m == "dataplane must not depend on control: edge vhost -> control (path dataplane -> vhost -> control)"),
        "{bad:#?}"
    );
    assert!(
        bad.iter()
            .any(|m| m.starts_with("vhost must not depend on control")),
        "{bad:#?}"
    );
    assert_eq!(bad.len(), 2, "{bad:#?}");
    let unknown = violations(&g(&[("newcrate", &[])]), &allowed());
    assert!(unknown[0].contains("newcrate has no layer"), "{unknown:?}");
}

/// The crates `cargo tree` lists for `zovn --no-default-features` (normal dependencies,
/// each once).
fn operator_cli_crates() -> BTreeSet<String> {
    let out = cargo(&[
        "tree",
        "--locked",
        "-p",
        "zovn",
        "--no-default-features",
        "-e",
        "normal",
        "--prefix",
        "none",
    ]);
    String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_operators_cli_links_neither_lab_nor_controller_nor_agent() {
    let crates = operator_cli_crates();
    assert!(
        crates.contains("zovn") && crates.contains("diag"),
        "cargo tree did not list the CLI: {crates:?}"
    );
    let forbidden = [
        "lab",
        "control",
        "dataplane",
        "cni",
        "vhost",
        "endpoints",
        "tests",
        "perf",
        // the API server fixtures and the Kubernetes client: the CLI speaks kubectl
        "kube",
        "kube-runtime",
        "k8s-openapi",
        "rcgen",
    ];
    let linked: Vec<&str> = forbidden
        .iter()
        .copied()
        .filter(|c| crates.contains(*c))
        .collect();
    assert!(
        linked.is_empty(),
        "kubectl-zovn (zovn --no-default-features) links {linked:?}"
    );
    eprintln!("kubectl-zovn links {} crates", crates.len());
}
