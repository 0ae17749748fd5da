//! `zovn lab up`.

use std::path::PathBuf;

use anyhow::Context;
use lab::{Dpdk, Encap, Lab, LabConfig};

use crate::args::{EncapArg, UpArgs};

pub fn run(a: UpArgs) -> anyhow::Result<()> {
    let dir = absolute(a.dir.dir)?;
    let cfg = LabConfig {
        dir: dir.clone(),
        prefix: a.prefix,
        nodes: a.nodes,
        raft: a.raft,
        dpdk: Dpdk::from(a.dpdk),
        encap: match a.encap {
            EncapArg::Geneve => Encap::Geneve,
            EncapArg::Vxlan => Encap::Vxlan,
        },
    };
    println!("lab up in {}", dir.display());
    let mut lab = Lab::up_with_progress(cfg, |s| {
        println!(
            "[{:6.2}s] {} ({} ms)",
            s.since_start.as_secs_f64(),
            s.what,
            s.took.as_millis()
        );
    })
    .with_context(|| format!("bringing the lab up in {}", dir.display()))?;
    lab.keep_running();
    println!("NB: {}", lab.nb_remote());
    println!("SB: {}", lab.sb_remote());
    for n in lab.nodes() {
        println!(
            "node{}: netns {} chassis {} encap-ip {} db {}",
            n.index, n.netns, n.system_id, n.encap_ip, n.db_remote
        );
    }
    println!(
        "total {:.2}s — `zovn lab down --dir {}` to remove",
        lab.timings().total.as_secs_f64(),
        dir.display()
    );
    Ok(())
}

fn absolute(p: PathBuf) -> anyhow::Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p);
    }
    Ok(std::env::current_dir()
        .context("current directory")?
        .join(p))
}
