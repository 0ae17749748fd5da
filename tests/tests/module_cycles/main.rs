//! No import cycle between the file-modules of a workspace crate.
//!
//! For every crate checked here, the graph of its file-modules (see [`graph`]) must have
//! no strongly connected component of more than one file. A failure lists the files of
//! each cycle and one closed path through them, each edge with the line that makes it.
//! `report_all_crates` prints what every workspace member has (`--nocapture`; with
//! `MODULE_CYCLES_EDGES=1`, every edge inside each cycle) and fails if any has a cycle,
//! so a crate added to the workspace is checked too.

mod graph;

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn cycles_of(krate: &str) -> Vec<graph::Cycle> {
    let dir = workspace().join(krate);
    assert!(
        dir.join("src").is_dir(),
        "{}: no src/ (is {krate} still a workspace crate?)",
        dir.display()
    );
    match graph::crate_cycles(&dir) {
        Ok(cycles) => cycles,
        Err(e) => panic!("{krate}: {e}"),
    }
}

fn assert_acyclic(krate: &str) {
    let cycles = cycles_of(krate);
    let text: Vec<String> = cycles.iter().map(ToString::to_string).collect();
    assert!(
        cycles.is_empty(),
        "{krate}: {} import cycle(s) between file-modules\n{}",
        cycles.len(),
        text.join("\n")
    );
}

macro_rules! acyclic {
    ($($name:ident => $krate:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                assert_acyclic($krate);
            }
        )*
    };
}

acyclic! {
    lab_has_no_import_cycle => "lab",
    dataplane_has_no_import_cycle => "dataplane",
    ovsdb_has_no_import_cycle => "ovsdb",
    vhost_has_no_import_cycle => "vhost",
    perf_has_no_import_cycle => "perf",
    tests_has_no_import_cycle => "tests",
    api_has_no_import_cycle => "api",
    control_has_no_import_cycle => "control",
    cni_has_no_import_cycle => "cni",
    diag_has_no_import_cycle => "diag",
    zovn_has_no_import_cycle => "zovn",
}

/// Prints the cycles of every workspace crate (the members listed in the workspace's
/// Cargo.toml that have a `src/`) and fails if any has one.
#[test]
fn report_all_crates() {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("workspace Cargo.toml: {e}"));
    let members: Vec<String> = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .map(|l| {
            l.split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    assert!(
        members.iter().any(|m| m == "lab"),
        "members not found: {members:?}"
    );
    let mut with_cycles = Vec::new();
    for krate in members {
        if !workspace().join(&krate).join("src").is_dir() {
            continue;
        }
        let cycles = cycles_of(&krate);
        println!("{krate}: {} import cycle(s)", cycles.len());
        if !cycles.is_empty() {
            with_cycles.push(krate.clone());
        }
        for c in cycles {
            println!("{c}");
            if std::env::var_os("MODULE_CYCLES_EDGES").is_some() {
                println!("  every edge inside:");
                for (from, to, site) in &c.edges {
                    println!(
                        "    {} -> {}   (line {}: {})",
                        from.display(),
                        to.display(),
                        site.line,
                        site.text
                    );
                }
            }
        }
    }
    assert!(
        with_cycles.is_empty(),
        "workspace crates with import cycles (details above, run with --nocapture): {with_cycles:?}"
    );
}

mod checker {
    //! The checker itself can fail: a synthetic crate with a known cycle is reported,
    //! and the hierarchy (a parent composing its children) is not a cycle.
    use super::graph;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    fn files_of(cycles: &[graph::Cycle]) -> Vec<Vec<String>> {
        cycles
            .iter()
            .map(|c| c.files.iter().map(|f| f.display().to_string()).collect())
            .collect()
    }

    #[test]
    fn a_cycle_through_super_and_crate_paths_is_reported() {
        let dir = tree(&[
            ("src/lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
            ("src/a/mod.rs", "pub mod x;\npub mod y;\n"),
            // x -> y (sibling by super), y -> c (crate path in code), c -> x (use)
            ("src/a/x.rs", "use super::y::Y;\npub struct X(Y);\n"),
            (
                "src/a/y.rs",
                "pub struct Y;\npub fn f() { crate::c::g(); }\n",
            ),
            (
                "src/c.rs",
                "use crate::a::x::X;\npub fn g() {}\npub fn h(_: X) {}\n",
            ),
            ("src/b.rs", "use crate::a::x::X;\npub fn b(_: X) {}\n"),
        ]);
        let cycles = graph::crate_cycles(dir.path()).unwrap();
        assert_eq!(
            files_of(&cycles),
            vec![vec!["src/a/x.rs", "src/a/y.rs", "src/c.rs"]]
        );
        let text = cycles[0].to_string();
        assert_eq!(cycles[0].path.len(), 3, "{text}");
        assert!(text.contains("crate::c::g"), "{text}");
    }

    #[test]
    fn child_to_parent_and_macro_paths_count() {
        let dir = tree(&[
            ("src/lib.rs", "pub mod p;\n"),
            // the parent re-exports its child (hierarchy) and calls the sibling in a macro
            (
                "src/p/mod.rs",
                "pub mod k;\npub mod s;\npub use k::K;\npub fn f() { println!(\"{}\", s::v()); }\n",
            ),
            ("src/p/k.rs", "pub struct K;\n"),
            // s -> parent p (child -> parent counts); p -> s (parent -> own child: hierarchy)
            ("src/p/s.rs", "pub fn v() -> u8 { let _ = super::f; 1 }\n"),
        ]);
        // p -> s is hierarchy, s -> p counts: no cycle yet
        assert!(graph::crate_cycles(dir.path()).unwrap().is_empty());
        // k -> s and s -> k: a cycle between siblings, one edge through a macro
        std::fs::write(
            dir.path().join("src/p/k.rs"),
            "pub struct K;\npub fn k() { assert!(super::s::v() > 0); }\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("src/p/s.rs"),
            "use crate::p::k;\npub fn v() -> u8 { let _ = k::K; 1 }\n",
        )
        .unwrap();
        let cycles = graph::crate_cycles(dir.path()).unwrap();
        assert_eq!(files_of(&cycles), vec![vec!["src/p/k.rs", "src/p/s.rs"]]);
    }

    #[test]
    fn a_unit_test_module_closes_no_cycle_but_code_does() {
        let dir = tree(&[
            ("src/lib.rs", "pub mod a;\npub mod b;\n"),
            (
                "src/a.rs",
                "pub struct A;\n#[cfg(test)]\nmod tests { use crate::b::B; }\n",
            ),
            ("src/b.rs", "use crate::a::A;\npub struct B(pub A);\n"),
        ]);
        assert!(graph::crate_cycles(dir.path()).unwrap().is_empty());
        // the same import outside the test module is a cycle
        std::fs::write(
            dir.path().join("src/a.rs"),
            "pub struct A;\n#[cfg(not(test))]\nmod m { use crate::b::B; }\n",
        )
        .unwrap();
        let cycles = graph::crate_cycles(dir.path()).unwrap();
        assert_eq!(files_of(&cycles), vec![vec!["src/a.rs", "src/b.rs"]]);
    }

    #[test]
    fn a_layered_crate_passes() {
        let dir = tree(&[
            (
                "src/lib.rs",
                "pub mod low;\npub mod mid;\npub mod top;\npub use top::T;\n",
            ),
            (
                "src/low.rs",
                "pub struct L;\n#[cfg(test)]\nmod tests { use super::L; }\n",
            ),
            ("src/mid.rs", "use crate::low::L;\npub struct M(pub L);\n"),
            (
                "src/top.rs",
                "use crate::{low, mid::M};\npub struct T(pub M, pub low::L);\n",
            ),
            (
                "src/bin/tool/main.rs",
                "mod cmd;\nfn main() { cmd::run() }\n",
            ),
            ("src/bin/tool/cmd.rs", "pub fn run() { let _ = lib::T; }\n"),
        ]);
        assert!(graph::crate_cycles(dir.path()).unwrap().is_empty());
        assert_eq!(graph::crate_roots(dir.path()).len(), 2);
        let g = graph::build(dir.path(), &dir.path().join("src/lib.rs")).unwrap();
        // top -> low, top -> mid, mid -> low; lib.rs -> top is hierarchy
        assert_eq!(g.edges.len(), 3, "{:?}", g.edges);
    }
}

/// The lab's pod runtime (`lab/src/pods/`) reads the object store only through
/// `pods::PodSource`: no file of it imports the store, the Multus or KubeVirt emulation
/// built on it, or the lab orchestration (`lab.rs`) that uses it.
#[test]
fn lab_pod_runtime_imports_nothing_above_it() {
    let dir = workspace().join("lab");
    let g = graph::build(&dir, &dir.join("src/lib.rs")).unwrap_or_else(|e| panic!("lab: {e}"));
    let above = |p: &Path| {
        p.starts_with("src/apiserver")
            || ["src/multus.rs", "src/kubevirt.rs", "src/lab.rs"]
                .iter()
                .any(|f| p == Path::new(f))
    };
    let bad: Vec<String> = g
        .edges
        .iter()
        .filter(|((a, b), _)| g.files[*a].starts_with("src/pods") && above(&g.files[*b]))
        .map(|((a, b), site)| {
            format!(
                "{} -> {} ({}:{}: {})",
                g.files[*a].display(),
                g.files[*b].display(),
                g.files[*a].display(),
                site.line,
                site.text
            )
        })
        .collect();
    assert!(
        g.files.iter().any(|f| f.starts_with("src/pods")),
        "no src/pods in lab"
    );
    assert!(
        bad.is_empty(),
        "the pod runtime imports above it:\n{}",
        bad.join("\n")
    );
}
