//! Manifest files → objects: YAML (multi-document, `---`) or JSON, a file or every
//! `*.yaml`/`*.yml`/`*.json` of a directory (sorted by name, not recursive).
//!
//! Every document of every file is decoded and checked before anything is sent, and any
//! problem fails the whole apply: nothing is applied. Errors name the file and line
//! (`examples/lab/20-pods.yaml:14:7: ...`), and for unsupported kinds, the kind.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use control::crd::Subnet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::objects::{LabObject, ObjectError, kind_of};
use super::protocol::ResourceKind;

/// An object and where it came from (`file:line`).
#[derive(Debug, Clone, PartialEq)]
pub struct SourcedObject {
    pub object: LabObject,
    pub source: String,
}

/// The manifest files `paths` name: files as given, directories expanded to their
/// `*.yaml`, `*.yml` and `*.json` files in name order.
pub fn manifest_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).with_context(|| format!("manifest {}", p.display()))?;
        if !meta.is_dir() {
            out.push(p.clone());
            continue;
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(p)
            .with_context(|| format!("read directory {}", p.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.is_file() && is_manifest(f))
            .collect();
        if files.is_empty() {
            bail!("no *.yaml, *.yml or *.json files in {}", p.display());
        }
        files.sort();
        out.extend(files);
    }
    Ok(out)
}

fn is_manifest(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// Reads and checks every object of `paths` (see the module docs). The error lists every
/// problem found.
pub fn read_manifests(paths: &[PathBuf]) -> anyhow::Result<Vec<SourcedObject>> {
    let files = manifest_files(paths)?;
    let mut objects = Vec::new();
    let mut problems = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).with_context(|| format!("read {}", f.display()))?;
        let json = f.extension().is_some_and(|e| e == "json");
        match parse_manifest(&f.display().to_string(), &text, json) {
            Ok(v) => objects.extend(v),
            Err(e) => problems.extend(e),
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} problem(s) in the manifests, nothing applied:\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    Ok(objects)
}

/// Parses one file's text (`file` names it in messages).
pub fn parse_manifest(
    file: &str,
    text: &str,
    json: bool,
) -> Result<Vec<SourcedObject>, Vec<String>> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    if json {
        match serde_json::from_str::<Value>(text) {
            Ok(v) => from_value_tree(file, 1, v, &mut out, &mut problems),
            Err(e) => problems.push(format!(
                "{file}:{}:{}: {}",
                e.line(),
                e.column(),
                strip_at(&e.to_string())
            )),
        }
    } else {
        for (first_line, doc) in yaml_documents(text) {
            parse_yaml_doc(file, first_line, &doc, &mut out, &mut problems);
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Splits YAML text at `---` (and `...`) lines; returns each non-empty document with the
/// 0-based index of its first line.
pub fn yaml_documents(text: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut cur = String::new();
    for (i, line) in text.lines().enumerate() {
        let sep = line == "---"
            || line.starts_with("--- ")
            || line.starts_with("---\t")
            || line.trim_end() == "...";
        if sep {
            docs.push((start, std::mem::take(&mut cur)));
            start = i + 1;
        } else {
            cur.push_str(line);
            cur.push('\n');
        }
    }
    docs.push((start, cur));
    docs.into_iter()
        .filter(|(_, d)| {
            d.lines().any(|l| {
                let t = l.trim();
                !t.is_empty() && !t.starts_with('#')
            })
        })
        .collect()
}

fn parse_yaml_doc(
    file: &str,
    first_line: usize,
    doc: &str,
    out: &mut Vec<SourcedObject>,
    problems: &mut Vec<String>,
) {
    let at = |e: &serde_norway::Error| match e.location() {
        Some(l) => format!("{file}:{}:{}", first_line + l.line(), l.column()),
        None => format!("{file}:{}", first_line + 1),
    };
    let value: Value = match serde_norway::from_str(doc) {
        Ok(v) => v,
        Err(e) => {
            problems.push(format!("{}: {}", at(&e), strip_at(&e.to_string())));
            return;
        }
    };
    if is_list(&value) {
        from_value_tree(file, first_line + 1, value, out, problems);
        return;
    }
    if crate::kubevirt::is_vmi(&value) {
        // not stored: the store gets the virt-launcher pod KubeVirt would create
        match crate::kubevirt::launcher_pod(&value) {
            Ok(pod) => push_checked(
                file,
                first_line + 1,
                LabObject::Pod(Box::new(pod)),
                out,
                problems,
            ),
            Err(e) => problems.push(format!("{file}:{}: {e}", first_line + 1)),
        }
        return;
    }
    let kind = match kind_of(&value) {
        Ok(k) => k,
        Err(e) => {
            problems.push(format!("{file}:{}: {e}", first_line + 1));
            return;
        }
    };
    // decode from the text (not the value) so type errors carry a line
    let typed = match kind {
        ResourceKind::Namespace => {
            yaml_typed::<Namespace>(doc).map(|o| LabObject::Namespace(Box::new(o)))
        }
        ResourceKind::Subnet => yaml_typed::<Subnet>(doc).map(|o| LabObject::Subnet(Box::new(o))),
        ResourceKind::Pod => yaml_typed::<Pod>(doc).map(|o| LabObject::Pod(Box::new(o))),
        ResourceKind::Service => yaml_typed::<k8s_openapi::api::core::v1::Service>(doc)
            .map(|o| LabObject::Service(Box::new(o))),
        ResourceKind::NetworkPolicy => {
            yaml_typed::<k8s_openapi::api::networking::v1::NetworkPolicy>(doc)
                .map(|o| LabObject::NetworkPolicy(Box::new(o)))
        }
        ResourceKind::NetworkAttachmentDefinition => {
            yaml_typed::<crate::multus::NetworkAttachmentDefinition>(doc)
                .map(|o| LabObject::NetworkAttachmentDefinition(Box::new(o)))
        }
        ResourceKind::Node => {
            problems.push(format!("{file}:{}: {}", first_line + 1, ObjectError::Node));
            return;
        }
        ResourceKind::EndpointSlice => {
            // kind_of refuses EndpointSlices; kept total for the compiler
            problems.push(format!(
                "{file}:{}: {}",
                first_line + 1,
                ObjectError::EndpointSlice
            ));
            return;
        }
    };
    match typed.map_err(|e| format!("{}: {}", at(&e), strip_at(&e.to_string()))) {
        Ok(o) => push_checked(file, first_line + 1, o, out, problems),
        Err(e) => problems.push(e),
    }
}

fn yaml_typed<T: DeserializeOwned>(doc: &str) -> Result<T, serde_norway::Error> {
    serde_norway::from_str(doc)
}

fn is_list(v: &Value) -> bool {
    v.is_array() || v.get("kind").and_then(Value::as_str) == Some("List")
}

/// A `kind: List` whose `items` is not a list, at `file:line`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: kind List without an items list")]
pub struct ListWithoutItems {
    pub file: String,
    pub line: usize,
}

/// The objects of a decoded value (one object, a `kind: List` with `items`, or a JSON
/// array), each with where it stands: `FILE:LINE`, plus ` (item N)` when there are several.
pub(super) fn list_items(
    file: &str,
    line: usize,
    value: Value,
) -> Result<Vec<(String, Value)>, ListWithoutItems> {
    let items = match value {
        Value::Array(items) => items,
        Value::Object(mut m) if m.get("kind").and_then(Value::as_str) == Some("List") => {
            match m.remove("items") {
                Some(Value::Array(items)) => items,
                _ => {
                    return Err(ListWithoutItems {
                        file: file.to_string(),
                        line,
                    });
                }
            }
        }
        other => vec![other],
    };
    let many = items.len() > 1;
    Ok(items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let at = if many {
                format!("{file}:{line} (item {})", i + 1)
            } else {
                format!("{file}:{line}")
            };
            (at, item)
        })
        .collect())
}

/// A decoded value: one object, a `kind: List` with `items`, or a JSON array.
fn from_value_tree(
    file: &str,
    line: usize,
    value: Value,
    out: &mut Vec<SourcedObject>,
    problems: &mut Vec<String>,
) {
    let items = match list_items(file, line, value) {
        Ok(items) => items,
        Err(e) => return problems.push(e.to_string()),
    };
    for (at, item) in items {
        match LabObject::from_value(item) {
            Ok(o) => out.push(SourcedObject {
                object: o,
                source: at,
            }),
            Err(e) => problems.push(format!("{at}: {e}")),
        }
    }
}

fn push_checked(
    file: &str,
    line: usize,
    o: LabObject,
    out: &mut Vec<SourcedObject>,
    problems: &mut Vec<String>,
) {
    match o.normalized() {
        Ok(o) => out.push(SourcedObject {
            object: o,
            source: format!("{file}:{line}"),
        }),
        Err(e) => problems.push(format!("{file}:{line}: {e}")),
    }
}

/// Drops the " at line L column C" serde adds (we print our own file:line:column).
pub(crate) fn strip_at(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PODS: &str = "\
# two pods
apiVersion: v1
kind: Pod
metadata:
  name: a
spec:
  containers: [{name: c}]
---
apiVersion: v1
kind: Pod
metadata:
  name: b
  namespace: blue
spec:
  nodeName: node2
  containers: [{name: c, ports: [{containerPort: 53, protocol: UDP}]}]
---
# only a comment
";

    #[test]
    fn multi_document_yaml() {
        let objs = parse_manifest("p.yaml", PODS, false).expect("parse");
        let refs: Vec<String> = objs
            .iter()
            .map(|o| o.object.object_ref().to_string())
            .collect();
        assert_eq!(refs, vec!["pod/default/a", "pod/blue/b"]);
        assert_eq!(objs[1].source, "p.yaml:9");
    }

    #[test]
    fn syntax_error_names_file_and_line() {
        let text = PODS.replace("  name: b\n", "  name: [b\n");
        let errs = parse_manifest("p.yaml", &text, false).expect_err("bad yaml");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("p.yaml:1"), "{errs:?}");
        let line: usize = errs[0]
            .split(':')
            .nth(1)
            .and_then(|l| l.parse().ok())
            .expect("line");
        assert!((12..=14).contains(&line), "{errs:?}");
    }

    #[test]
    fn type_error_has_the_line_of_the_field() {
        let text = PODS.replace("containerPort: 53", "containerPort: fiftythree");
        let errs = parse_manifest("p.yaml", &text, false).expect_err("bad type");
        assert!(errs[0].starts_with("p.yaml:16:"), "{errs:?}");
    }

    #[test]
    fn unsupported_kind_is_named() {
        let text =
            format!("{PODS}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d}}\n");
        let errs = parse_manifest("x.yaml", &text, false).expect_err("deployment");
        assert!(
            errs[0].contains("x.yaml:") && errs[0].contains("Deployment"),
            "{errs:?}"
        );
    }

    #[test]
    fn json_object_list_and_errors() {
        let one = r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"demo"}}"#;
        assert_eq!(parse_manifest("n.json", one, true).expect("one").len(), 1);
        let list = format!(r#"{{"apiVersion":"v1","kind":"List","items":[{one},{one}]}}"#);
        assert_eq!(
            parse_manifest("n.json", &list, true).expect("list").len(),
            2
        );
        let errs = parse_manifest("n.json", "{\n  \"kind\": }", true).expect_err("bad json");
        assert!(errs[0].starts_with("n.json:2:"), "{errs:?}");
    }

    #[test]
    fn documents_and_lines() {
        let docs = yaml_documents("a: 1\n---\n\n# c\n---\nb: 2\n...\n");
        assert_eq!(
            docs,
            vec![(0, "a: 1\n".to_string()), (5, "b: 2\n".to_string())]
        );
    }
}
