//! The workspace crate graph is layered (issue #14): the node agent's crates reach the
//! controller only through the contract crate `api`, never by linking `control`, and
//! nothing below imports anything above.
//!
//! ```text
//!   perf, tests
//!      lab
//!   control   dataplane
//!   api  ovsdb  endpoints  cni  vhost      (cni, vhost -> api, hostio only)
//!   hostio                                 (host I/O primitives -> nothing)
//! ```
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
    ];
    const TOP: &[&str] = &[
        "api",
        "hostio",
        "ovsdb",
        "endpoints",
        "cni",
        "vhost",
        "control",
        "dataplane",
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
        ("lab", LAB),
        ("perf", TOP),
        ("tests", TOP),
    ])
}

/// Workspace crate → the workspace crates it depends on directly (self-edges dropped).
type Graph = BTreeMap<String, BTreeSet<String>>;

fn workspace_graph() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let out = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--manifest-path",
        ])
        .arg(manifest)
        .output()
        .unwrap_or_else(|e| panic!("running {cargo} metadata: {e}"));
    assert!(
        out.status.success(),
        "{cargo} metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
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
                "workspace crate {krate} has no layer: add it to allowed() in tests/tests/layering.rs"
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
