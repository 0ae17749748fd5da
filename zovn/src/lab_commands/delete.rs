//! `zovn lab delete -f FILE|DIR`: deletes by kind, namespace and name, as kubectl does (a
//! manifest need not hold the objects' specs).

use anyhow::Context;
use lab::apiserver::{ApiClient, read_refs};

use super::args::DeleteArgs;

pub fn run(a: DeleteArgs) -> anyhow::Result<()> {
    let dir = super::up::absolute(a.dir.dir)?;
    let objects = read_refs(&a.files.files)?;
    let mut client = ApiClient::connect(&dir)?;
    // pods before the Subnets and Namespaces they use, as kubectl does in reverse order
    let refs = objects.iter().rev().map(|o| o.object.clone()).collect();
    let changes = client
        .delete(refs)
        .with_context(|| format!("deleting from the lab in {}", dir.display()))?;
    for c in &changes {
        println!("{} {}", c.object, c.action);
    }
    super::apply::wait_if_asked(&mut client, &a.files)
}
