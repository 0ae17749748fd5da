//! `zovn lab get pods|subnets|namespaces|nodes [-o table|json|yaml]`.

use anyhow::Context;
use lab::apiserver::table::{render, rows};
use lab::apiserver::{ApiClient, ResourceKind};
use serde_json::json;

use super::args::{GetArgs, GetKind, OutputArg};

pub fn run(a: GetArgs) -> anyhow::Result<()> {
    let dir = super::up::absolute(a.dir.dir)?;
    if matches!(a.kind, GetKind::Events) {
        return events(&dir, a.output);
    }
    let kind = match a.kind {
        GetKind::Events => unreachable!("handled above"),
        GetKind::Pods => ResourceKind::Pod,
        GetKind::Subnets => ResourceKind::Subnet,
        GetKind::Namespaces => ResourceKind::Namespace,
        GetKind::Nodes => ResourceKind::Node,
        GetKind::Services => ResourceKind::Service,
        GetKind::NetworkPolicies => ResourceKind::NetworkPolicy,
        GetKind::NetworkAttachmentDefinitions => ResourceKind::NetworkAttachmentDefinition,
        GetKind::EndpointSlices => ResourceKind::EndpointSlice,
    };
    let items = ApiClient::connect(&dir)?
        .get(kind)
        .with_context(|| format!("listing {kind:?}s in the lab in {}", dir.display()))?;
    print_items(a.output, &items, |items| rows(kind, items))
}

/// `zovn lab get events`: TYPE, REASON, OBJECT, MESSAGE (oldest first).
fn events(dir: &std::path::Path, output: OutputArg) -> anyhow::Result<()> {
    let items = ApiClient::connect(dir)?
        .events()
        .with_context(|| format!("listing events in the lab in {}", dir.display()))?;
    print_items(output, &items, |items| {
        let rows = items
            .iter()
            .map(|e| {
                let o = &e["involvedObject"];
                let object = match o["namespace"].as_str() {
                    Some(ns) => format!(
                        "{}/{ns}/{}",
                        o["kind"].as_str().unwrap_or("?").to_lowercase(),
                        o["name"].as_str().unwrap_or("?")
                    ),
                    None => format!(
                        "{}/{}",
                        o["kind"].as_str().unwrap_or("?").to_lowercase(),
                        o["name"].as_str().unwrap_or("?")
                    ),
                };
                [
                    e["lastTimestamp"].as_str().unwrap_or("-"),
                    e["type"].as_str().unwrap_or("-"),
                    e["reason"].as_str().unwrap_or("-"),
                    &object,
                    e["message"].as_str().unwrap_or("-"),
                ]
                .map(str::to_string)
                .to_vec()
            })
            .collect();
        (
            vec!["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
            rows,
        )
    })
}

fn print_items(
    output: OutputArg,
    items: &[serde_json::Value],
    table: impl FnOnce(&[serde_json::Value]) -> (Vec<&'static str>, Vec<Vec<String>>),
) -> anyhow::Result<()> {
    match output {
        OutputArg::Table => {
            let (header, rows) = table(items);
            print!("{}", render(&header, &rows));
        }
        OutputArg::Json => {
            let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
        OutputArg::Yaml => {
            let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
            print!("{}", serde_norway::to_string(&list)?);
        }
    }
    Ok(())
}
