//! The documentation stays true to the repository: README.md fits on a screen (at most 250
//! lines), every relative link in README.md and docs/**/*.md points to an existing file
//! (and, with `#anchor`, to a heading of it), every workspace crate is in the README's
//! crate table, and every annotation key the Rust sources name is on
//! docs/reference/annotations.md. No root, no daemons: it reads files.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Longest README.md allowed: the front door, the rest lives under docs/.
const README_MAX_LINES: usize = 250;

/// Annotation/label key prefixes the product reads or writes.
const KEY_PREFIXES: &[&str] = &[
    "network.zstack.io",
    "k8s.ovn.org",
    "ovn.kubernetes.io",
    "kubevirt.io",
    "k8s.v1.cni.cncf.io",
    "v1.multus-cni.io",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// README.md and every *.md under docs/.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The text of a markdown file outside fenced code blocks and inline code spans, line by
/// line (1-based line numbers).
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut prose = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                prose.push(c);
            }
        }
        out.push((i + 1, prose));
    }
    out
}

/// Targets of inline links `[text](target)` in one line of prose.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                out.push(after[..end].trim().to_string());
                rest = &after[end + 1..];
            }
            None => break,
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, punctuation other than `-`
/// and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Anchors of every heading of a markdown file (headings inside code blocks excluded).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn readme_is_at_most_250_lines() {
    let readme = read(&repo_root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move detail into docs/"
    );
}

#[test]
fn every_relative_link_points_to_an_existing_file() {
    let root = repo_root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in doc_files(&root) {
        let text = read(&file);
        let dir = file.parent().expect("a file has a parent");
        for (n, line) in prose_lines(&text) {
            for target in link_targets(&line) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let dest = if path.is_empty() {
                    file.clone()
                } else {
                    dir.join(path)
                };
                let at = format!(
                    "{}:{n}",
                    file.strip_prefix(&root).unwrap_or(&file).display()
                );
                if !dest.exists() {
                    broken.push(format!("{at}: {target} (no such file)"));
                    continue;
                }
                if let Some(anchor) = anchor
                    && dest.extension().is_some_and(|x| x == "md")
                    && !anchors(&read(&dest)).contains(anchor)
                {
                    broken.push(format!("{at}: {target} (no such heading)"));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} relative links found: is the parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `members = [...]` of the workspace Cargo.toml.
fn workspace_members(root: &Path) -> Vec<String> {
    let toml = read(&root.join("Cargo.toml"));
    let start = toml.find("members").expect("Cargo.toml has members");
    let open = start + toml[start..].find('[').expect("members = [");
    let close = open + toml[open..].find(']').expect("members = [...]");
    toml[open + 1..close]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

#[test]
fn every_workspace_crate_is_in_the_readme_crate_table() {
    let root = repo_root();
    let readme = read(&root.join("README.md"));
    let members = workspace_members(&root);
    assert!(members.len() >= 5, "members parsed: {members:?}");
    let missing: Vec<_> = members
        .iter()
        .filter(|m| !readme.contains(&format!("| `{m}/` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "workspace crates without a row in README.md's crate table: {missing:?}"
    );
}

/// Every `.rs` file of the workspace's crates (not `target/`).
fn rust_sources(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = workspace_members(root)
        .iter()
        .map(|m| root.join(m))
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out
}

/// An API group version such as `v1` or `v1alpha3` (`kubevirt.io/v1`), not a key.
fn is_api_version(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('v') else {
        return false;
    };
    if !rest.starts_with(|c: char| c.is_ascii_digit()) {
        return false;
    }
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    let rest = rest
        .strip_prefix("alpha")
        .or_else(|| rest.strip_prefix("beta"))
        .unwrap_or(rest);
    rest.chars().all(|c| c.is_ascii_digit())
}

/// Keys `"<prefix>/<name>` that open a string literal in a source text.
fn annotation_keys(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for prefix in KEY_PREFIXES {
        let needle = format!("\"{prefix}/");
        let mut rest = text;
        while let Some(at) = rest.find(&needle) {
            let after = &rest[at + needle.len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                .collect();
            if !name.is_empty() && !is_api_version(&name) {
                out.insert(format!("{prefix}/{name}"));
            }
            rest = after;
        }
    }
    out
}

#[test]
fn every_annotation_key_in_the_sources_is_documented() {
    let root = repo_root();
    let page = read(&root.join("docs/reference/annotations.md"));
    let mut keys = BTreeSet::new();
    for file in rust_sources(&root) {
        keys.extend(annotation_keys(&read(&file)));
    }
    assert!(
        keys.contains("k8s.ovn.org/pod-networks"),
        "the source scan found no pod-networks key: {keys:?}"
    );
    let missing: Vec<_> = keys
        .iter()
        .filter(|k| !page.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "annotation keys in the sources but not in docs/reference/annotations.md: {missing:?}"
    );
}

#[test]
fn the_helpers_find_what_they_should() {
    assert_eq!(
        link_targets("see [a](x.md) and [b](../y.md#z)"),
        ["x.md", "../y.md#z"]
    );
    assert_eq!(slug(" crdgen, ovsdb-codegen"), "crdgen-ovsdb-codegen");
    assert_eq!(slug("zovn lab up"), "zovn-lab-up");
    assert!(is_api_version("v1") && is_api_version("v1alpha3") && is_api_version("v2beta1"));
    assert!(!is_api_version("vm") && !is_api_version("vhost-user") && !is_api_version("v"));
    let keys = annotation_keys(
        r#"x("kubevirt.io/domain"); y = "kubevirt.io/v1"; "k8s.ovn.org/pod-networks""#,
    );
    assert_eq!(
        keys.into_iter().collect::<Vec<_>>(),
        ["k8s.ovn.org/pod-networks", "kubevirt.io/domain"]
    );
    let prose = prose_lines("a `[x](nope)` b\n```\n[y](nope)\n```\n[z](yes)");
    let targets: Vec<_> = prose.iter().flat_map(|(_, l)| link_targets(l)).collect();
    assert_eq!(targets, ["yes"]);
}
