//! `zovn lab get pods|subnets|namespaces|nodes [-o table|json|yaml]`.

use anyhow::Context;
use lab::apiserver::table::{render, rows};
use lab::apiserver::{ApiClient, ResourceKind};
use serde_json::json;

use crate::args::{GetArgs, GetKind, OutputArg};

pub fn run(a: GetArgs) -> anyhow::Result<()> {
    let dir = crate::up::absolute(a.dir.dir)?;
    let kind = match a.kind {
        GetKind::Pods => ResourceKind::Pod,
        GetKind::Subnets => ResourceKind::Subnet,
        GetKind::Namespaces => ResourceKind::Namespace,
        GetKind::Nodes => ResourceKind::Node,
    };
    let items = ApiClient::connect(&dir)?
        .get(kind)
        .with_context(|| format!("listing {kind:?}s in the lab in {}", dir.display()))?;
    match a.output {
        OutputArg::Table => {
            let (header, rows) = rows(kind, &items);
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
