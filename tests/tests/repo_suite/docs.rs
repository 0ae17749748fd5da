//! The documentation stays true to the repository: README.md fits on a screen (at most 250
//! lines), every relative link in README.md and docs/**/*.md points to an existing file
//! (and, with `#anchor`, to a heading of it), every workspace crate is in the README's
//! crate table, every annotation key the Rust sources name is on
//! docs/reference/annotations.md, and every flag and subcommand the binaries' `--help`
//! shows is on docs/reference/flags.md (the binaries must be built: `cargo build
//! --workspace --bins`, as `make test` does). No root, no daemons.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// The part of a markdown page under the heading `title` (any level), up to the next
/// `##` or `###` heading.
fn section<'a>(page: &'a str, title: &str) -> &'a str {
    let start = page
        .lines()
        .scan(0, |at, line| {
            let here = *at;
            *at += line.len() + 1;
            Some((here, line))
        })
        .find(|(_, line)| line.starts_with('#') && line.trim_start_matches('#').trim() == title)
        .map(|(at, _)| at)
        .unwrap_or_else(|| panic!("docs/reference/flags.md has no heading {title:?}"));
    let body = &page[start..];
    let first_line = body.find('\n').map_or(body.len(), |n| n + 1);
    let end = body[first_line..]
        .find("\n## ")
        .into_iter()
        .chain(body[first_line..].find("\n### "))
        .min()
        .map_or(body.len(), |n| first_line + n);
    &body[..end]
}

/// `--long` flags named in a `--help` text.
fn long_flags(help: &str) -> BTreeSet<String> {
    help.split(|c: char| c.is_whitespace() || matches!(c, '[' | ']' | ',' | '(' | ')' | '`'))
        .filter_map(|w| {
            let name = w.strip_prefix("--")?;
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty()).then(|| format!("--{name}"))
        })
        .collect()
}

/// Subcommands listed under `Commands:` in a `--help` text (`help` excluded).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

fn help_of(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("run {} {args:?} --help: {e}", bin.display()));
    assert!(
        out.status.success(),
        "{} {args:?} --help failed",
        bin.display()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_flag_and_subcommand_of_the_binaries_is_in_flags_md() {
    let page = read(&repo_root().join("docs/reference/flags.md"));
    // (section title, binary, subcommand path)
    let mut wanted: Vec<(String, PathBuf, Vec<String>)> = Vec::new();
    for bin in [
        "zstack-ovnkube-controller",
        "zstack-ovn-dbexporter",
        "zstack-ovnkube-node",
    ] {
        wanted.push((bin.into(), tests::workspace_bin(bin), Vec::new()));
    }
    wanted.push((
        "zstack-ovnkube-node debug capture".into(),
        tests::workspace_bin("zstack-ovnkube-node"),
        vec!["debug".into(), "capture".into()],
    ));
    let zovn = tests::workspace_bin("zovn");
    for sub in subcommands(&help_of(&zovn, &["lab"])) {
        wanted.push((
            format!("zovn lab {sub}"),
            zovn.clone(),
            vec!["lab".into(), sub],
        ));
    }
    for sub in subcommands(&help_of(&zovn, &["cluster"])) {
        wanted.push((
            format!("zovn cluster {sub}"),
            zovn.clone(),
            vec!["cluster".into(), sub],
        ));
    }
    let perf = tests::workspace_bin("zovn-perf");
    for sub in subcommands(&help_of(&perf, &[])) {
        wanted.push((format!("zovn-perf {sub}"), perf.clone(), vec![sub]));
    }
    assert!(wanted.len() > 10, "subcommands found: {}", wanted.len());
    let mut missing = Vec::new();
    for (title, bin, args) in &wanted {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let text = section(&page, title);
        for flag in long_flags(&help_of(bin, &args)) {
            if flag != "--help" && flag != "--version" && !text.contains(&flag) {
                missing.push(format!("{title}: {flag}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "flags the binaries have but docs/reference/flags.md does not show (regenerate the \
         section from `<binary> [subcommand] --help`):\n{}",
        missing.join("\n")
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
    let page = "# t\n## a\nx --one\n### a b\n--two\n## c\n--three\n";
    assert_eq!(section(page, "a"), "## a\nx --one");
    assert_eq!(section(page, "a b"), "### a b\n--two");
    assert_eq!(section(page, "c"), "## c\n--three\n");
    assert_eq!(
        long_flags("  --dir <DIR>  x [env: X] (`--datapath dpdk`), --nb-ca")
            .into_iter()
            .collect::<Vec<_>>(),
        ["--datapath", "--dir", "--nb-ca"]
    );
    assert_eq!(
        subcommands("Usage\n\nCommands:\n  up    Start\n        more\n  help  x\n\nOptions:\n  -h"),
        ["up"]
    );
    let prose = prose_lines("a `[x](nope)` b\n```\n[y](nope)\n```\n[z](yes)");
    let targets: Vec<_> = prose.iter().flat_map(|(_, l)| link_targets(l)).collect();
    assert_eq!(targets, ["yes"]);
}
