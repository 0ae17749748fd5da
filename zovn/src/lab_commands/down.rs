//! `zovn lab down`.

use std::time::Instant;

use anyhow::Context;
use lab::Lab;

use super::args::DownArgs;

pub fn run(a: DownArgs) -> anyhow::Result<()> {
    let dir = &a.dir.dir;
    if !dir.join("lab.json").exists() {
        println!("no lab at {}", dir.display());
        return Ok(());
    }
    let t = Instant::now();
    let lab = Lab::open(dir).with_context(|| format!("reading the lab at {}", dir.display()))?;
    let n = lab.daemons().len();
    if a.keep_files {
        lab.down_keep_files()
    } else {
        lab.down()
    }
    .with_context(|| format!("tearing down the lab at {}", dir.display()))?;
    println!(
        "[{:6.2}s] lab down: {n} daemons stopped, netns deleted{}",
        t.elapsed().as_secs_f64(),
        if a.keep_files {
            ", files kept"
        } else {
            ", state dir removed"
        }
    );
    Ok(())
}
