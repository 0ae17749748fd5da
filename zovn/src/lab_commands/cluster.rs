//! `zovn cluster up|status|down`.

use std::path::PathBuf;

use anyhow::Context;
use lab::kubecluster::{ClusterConfig, KubeCluster};

use super::args::{ClusterDirArgs, ClusterDownArgs, ClusterUpArgs};

/// The archives `make images` and `make test-images` write, when they exist.
fn default_images() -> Vec<PathBuf> {
    let dir = PathBuf::from("target/images");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.ends_with(".oci.tar"))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

pub fn up(a: ClusterUpArgs) -> anyhow::Result<()> {
    let dir = std::path::absolute(&a.dir.dir).context("cluster dir")?;
    let mut cfg = ClusterConfig::new(dir);
    cfg.nodes = a.nodes;
    cfg.prefix = a.prefix;
    cfg.hugepages_2m = a.hugepages_2m;
    cfg.single_nic = a.single_nic;
    cfg.images = if a.images.is_empty() {
        default_images()
    } else {
        a.images
    };
    for i in &cfg.images {
        eprintln!("image archive: {}", i.display());
    }
    let c = KubeCluster::up_with_progress(cfg, |s| {
        eprintln!(
            "[{:>6.1}s] {} ({:.1}s)",
            s.since_start.as_secs_f64(),
            s.what,
            s.took.as_secs_f64()
        );
    })?;
    println!(
        "cluster up: {} nodes, API server {}",
        c.nodes(),
        c.api_server()
    );
    println!("export KUBECONFIG={}", c.kubeconfig().display());
    println!("nodes are NotReady until a CNI plugin runs: helm install (docs/cluster.md)");
    Ok(())
}

pub fn status(a: ClusterDirArgs) -> anyhow::Result<()> {
    let c = KubeCluster::open(&a.dir)?;
    let s = c.status();
    println!(
        "cluster {}{}",
        s.dir.display(),
        if s.complete { "" } else { " [incomplete]" }
    );
    println!("API server: {}", s.api_server);
    println!("KUBECONFIG={}", s.kubeconfig.display());
    println!("daemons:");
    for (name, pid, alive) in &s.daemons {
        println!(
            "  {name:<32} pid {pid:<8} {}",
            if *alive { "alive" } else { "DEAD" }
        );
    }
    match &s.nodes {
        Ok(n) => print!("{n}"),
        Err(e) => println!("nodes: unavailable ({e})"),
    }
    Ok(())
}

pub fn down(a: ClusterDownArgs) -> anyhow::Result<()> {
    let c = KubeCluster::open(&a.dir.dir)?;
    if a.keep_files {
        c.down_keep_files()?;
    } else {
        c.down()?;
    }
    println!("cluster down");
    Ok(())
}
