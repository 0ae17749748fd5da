//! `zovn lab delete -f FILE|DIR`.

use anyhow::Context;
use lab::apiserver::{ApiClient, read_manifests};

use crate::args::DeleteArgs;

pub fn run(a: DeleteArgs) -> anyhow::Result<()> {
    let dir = crate::up::absolute(a.dir.dir)?;
    let objects = read_manifests(&a.files.files)?;
    let mut client = ApiClient::connect(&dir)?;
    // pods before the Subnets and Namespaces they use, as kubectl does in reverse order
    let refs = objects
        .iter()
        .rev()
        .map(|o| o.object.object_ref())
        .collect();
    let changes = client
        .delete(refs)
        .with_context(|| format!("deleting from the lab in {}", dir.display()))?;
    for c in &changes {
        println!("{} {}", c.object, c.action);
    }
    crate::apply::wait_if_asked(&mut client, &a.files)
}
