//! `zovn lab up`: the lab, then its object store. On a lab that is already running but
//! whose object store died, only the store is started again (it reloads its objects).

use std::path::{Path, PathBuf};

use anyhow::Context;
use lab::{Dpdk, Encap, Lab, LabConfig};

use crate::args::{EncapArg, UpArgs};

pub fn run(a: UpArgs) -> anyhow::Result<()> {
    let dir = absolute(a.dir.dir)?;
    let exe = std::env::current_exe().context("the zovn binary")?;
    if restart_apiserver(&dir, &exe)? {
        return Ok(());
    }
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
    // on failure `lab` is dropped without keep_running: everything is torn down
    let api = lab
        .start_apiserver(&exe)
        .with_context(|| format!("starting the object store of the lab in {}", dir.display()))?;
    lab.keep_running();
    println!("NB: {}", lab.nb_remote());
    println!("SB: {}", lab.sb_remote());
    for n in lab.nodes() {
        println!(
            "node{}: netns {} chassis {} encap-ip {} db {}",
            n.index, n.netns, n.system_id, n.encap_ip, n.db_remote
        );
    }
    print_apiserver(&dir, api.pid);
    println!(
        "total {:.2}s — `zovn lab down --dir {}` to remove",
        lab.timings().total.as_secs_f64(),
        dir.display()
    );
    Ok(())
}

/// If a lab is running in `dir` without a live object store, starts the store and returns
/// true.
fn restart_apiserver(dir: &Path, exe: &Path) -> anyhow::Result<bool> {
    if !dir.join("lab.json").exists() {
        return Ok(false);
    }
    let mut lab =
        Lab::open(dir).with_context(|| format!("reading the lab at {}", dir.display()))?;
    if !lab.manifest().is_running() || lab.manifest().apiserver_alive() {
        // stale state (cleaned by `up`) or a complete running lab (refused by `up`)
        return Ok(false);
    }
    let api = lab.start_apiserver(exe).with_context(|| {
        format!(
            "restarting the object store of the lab in {}",
            dir.display()
        )
    })?;
    println!(
        "the lab in {} is already running; its object store was not: started it again",
        dir.display()
    );
    print_apiserver(dir, api.pid);
    Ok(true)
}

fn print_apiserver(dir: &Path, pid: i32) {
    let layout = lab::state::Layout::new(dir);
    println!(
        "object store: pid {pid}, socket {}, log {} — `zovn lab apply -f examples/lab/`",
        layout.api_socket().display(),
        layout.api_log().display()
    );
}

pub fn absolute(p: PathBuf) -> anyhow::Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p);
    }
    Ok(std::env::current_dir()
        .context("current directory")?
        .join(p))
}
