//! Manifest files → object references, for `zovn lab delete -f`: as kubectl does, an
//! object is deleted by kind, namespace and name, so a manifest that names a Pod without
//! its spec (or a Service without ports, a NAD without a config) is enough. Every kind the
//! lab accepts works; a VirtualMachineInstance names the virt-launcher Pod it became.
//!
//! Documents, lists and file:line messages as in [`super::files`]; any problem fails the
//! whole delete before anything is sent.

use std::path::PathBuf;

use anyhow::{Context, bail};
use serde_json::Value;

use super::files::{list_items, manifest_files, strip_at, yaml_documents};
use super::objects::{ObjectError, kind_of};
use super::protocol::{ObjectRef, ResourceKind};
use crate::kubevirt::VmiError;
use crate::object_names::{DEFAULT_NAMESPACE, NameError};

/// A reference and where it came from (`file:line`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcedRef {
    pub object: ObjectRef,
    pub source: String,
}

/// The objects the manifests in `paths` name, in file order. The error lists every
/// problem found.
pub fn read_refs(paths: &[PathBuf]) -> anyhow::Result<Vec<SourcedRef>> {
    let mut refs = Vec::new();
    let mut problems = Vec::new();
    for f in &manifest_files(paths)? {
        let text = std::fs::read_to_string(f).with_context(|| format!("read {}", f.display()))?;
        let json = f.extension().is_some_and(|e| e == "json");
        match parse_refs(&f.display().to_string(), &text, json) {
            Ok(r) => refs.extend(r),
            Err(e) => problems.extend(e),
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} problem(s) in the manifests, nothing deleted:\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    Ok(refs)
}

/// The references of one file's text (`file` names it in messages).
pub fn parse_refs(file: &str, text: &str, json: bool) -> Result<Vec<SourcedRef>, Vec<String>> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    if json {
        match serde_json::from_str::<Value>(text) {
            Ok(v) => push_tree(file, 1, v, &mut out, &mut problems),
            Err(e) => problems.push(format!(
                "{file}:{}:{}: {}",
                e.line(),
                e.column(),
                strip_at(&e.to_string())
            )),
        }
    } else {
        for (first_line, doc) in yaml_documents(text) {
            match serde_norway::from_str::<Value>(&doc) {
                Ok(v) => push_tree(file, first_line + 1, v, &mut out, &mut problems),
                Err(e) => {
                    let at = match e.location() {
                        Some(l) => format!("{file}:{}:{}", first_line + l.line(), l.column()),
                        None => format!("{file}:{}", first_line + 1),
                    };
                    problems.push(format!("{at}: {}", strip_at(&e.to_string())));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// One object, a `kind: List` with `items`, or a JSON array.
fn push_tree(
    file: &str,
    line: usize,
    value: Value,
    out: &mut Vec<SourcedRef>,
    problems: &mut Vec<String>,
) {
    let items = match list_items(file, line, value) {
        Ok(items) => items,
        Err(e) => return problems.push(e.to_string()),
    };
    for (at, item) in items {
        match ref_of(&item) {
            Ok(object) => out.push(SourcedRef { object, source: at }),
            Err(e) => problems.push(format!("{at}: {e}")),
        }
    }
}

/// Kind, namespace (defaulted for namespaced kinds) and name of a manifest object; only
/// `apiVersion`, `kind` and `metadata` are read.
pub fn ref_of(value: &Value) -> Result<ObjectRef, ObjectError> {
    let meta = value.get("metadata");
    let text = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str);
    let name = text("name").unwrap_or("");
    let namespace = text("namespace").unwrap_or(DEFAULT_NAMESPACE).to_string();
    if crate::kubevirt::is_vmi(value) {
        let api = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if api != crate::kubevirt::KUBEVIRT_V1 {
            return Err(VmiError::ApiVersion(api.to_string()).into());
        }
        if name.is_empty() {
            return Err(NameError::Missing {
                what: "VirtualMachineInstance".into(),
            }
            .into());
        }
        return Ok(ObjectRef {
            kind: ResourceKind::Pod,
            name: crate::kubevirt::launcher_name(&namespace, name),
            namespace: Some(namespace),
        });
    }
    let kind = kind_of(value)?;
    if name.is_empty() {
        return Err(NameError::Missing {
            what: format!("{kind:?}"),
        }
        .into());
    }
    let namespaced = match kind {
        ResourceKind::Namespace | ResourceKind::Subnet | ResourceKind::Node => false,
        ResourceKind::Pod
        | ResourceKind::Service
        | ResourceKind::EndpointSlice
        | ResourceKind::NetworkPolicy
        | ResourceKind::NetworkAttachmentDefinition => true,
    };
    Ok(ObjectRef {
        kind,
        namespace: namespaced.then_some(namespace),
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(text: &str) -> Vec<String> {
        parse_refs("m.yaml", text, false)
            .unwrap()
            .into_iter()
            .map(|r| r.object.to_string())
            .collect()
    }

    #[test]
    fn every_kind_by_name_without_its_spec() {
        let text = "\
apiVersion: v1
kind: Pod
metadata: {name: p01}
---
apiVersion: v1
kind: Pod
metadata: {name: p02, namespace: demo}
---
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: network.zstack.io/v1
kind: Subnet
metadata: {name: blue}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny}
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: vhost-net, namespace: vms}
---
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: vm1}
";
        assert_eq!(
            refs(text),
            vec![
                "pod/default/p01".to_string(),
                "pod/demo/p02".into(),
                "namespace/demo".into(),
                "subnet/blue".into(),
                "service/demo/web".into(),
                "networkpolicy/default/deny".into(),
                "network-attachment-definition/vms/vhost-net".into(),
                format!(
                    "pod/default/{}",
                    crate::kubevirt::launcher_name("default", "vm1")
                ),
            ]
        );
    }

    #[test]
    fn lists_and_problems() {
        let list = r#"{"kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}}]}"#;
        let r = parse_refs("l.json", list, true).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].source, "l.json:1 (item 2)");
        let bad = "apiVersion: v1\nkind: Pod\nmetadata: {}\n---\nkind: Gadget\napiVersion: x/v1\n";
        let e = parse_refs("b.yaml", bad, false).unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e[0].starts_with("b.yaml:1: Pod: metadata.name is missing"),
            "{e:?}"
        );
        assert!(e[1].starts_with("b.yaml:5: kind Gadget"), "{e:?}");
    }
}
