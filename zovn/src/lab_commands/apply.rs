//! `zovn lab apply -f FILE|DIR`.

use std::time::Duration;

use anyhow::Context;
use lab::apiserver::{ApiClient, read_manifests};

use super::args::{ApplyArgs, FilesArgs};

pub fn run(a: ApplyArgs) -> anyhow::Result<()> {
    let dir = super::up::absolute(a.dir.dir)?;
    // every file is read and checked before the store is even contacted
    let objects = read_manifests(&a.files.files)?;
    let mut client = ApiClient::connect(&dir)?;
    let n = objects.len();
    let changes = client
        .apply(objects.iter().map(|o| o.object.to_value()).collect())
        .with_context(|| format!("applying {n} object(s) to the lab in {}", dir.display()))?;
    for c in &changes {
        println!("{} {}", c.object, c.action);
    }
    wait_if_asked(&mut client, &a.files)
}

/// `--wait`: until the controller has caught up; fails listing what is still pending.
pub fn wait_if_asked(client: &mut ApiClient, f: &FilesArgs) -> anyhow::Result<()> {
    if !f.wait {
        return Ok(());
    }
    let pending = client.wait(Duration::from_secs(f.timeout))?;
    if pending.is_empty() {
        println!("settled: the controller has caught up");
        return Ok(());
    }
    anyhow::bail!(
        "not settled after {}s:\n  {}",
        f.timeout,
        pending.join("\n  ")
    )
}
