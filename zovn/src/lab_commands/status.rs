//! `zovn lab status`.

use anyhow::Context;
use lab::Lab;

use super::args::DirArgs;

pub fn run(a: DirArgs) -> anyhow::Result<()> {
    let lab = Lab::open(&a.dir).with_context(|| format!("no lab at {}", a.dir.display()))?;
    let s = lab.status();
    println!(
        "lab {} (prefix {}{}){}",
        s.dir.display(),
        s.prefix,
        match lab.config().mode {
            lab::ControllerMode::Standalone => "",
            lab::ControllerMode::External => ", controller in external mode",
        },
        if s.complete { "" } else { " [incomplete]" }
    );
    println!("NB: {}", s.nb_remote);
    println!("SB: {}", s.sb_remote);
    println!("daemons:");
    for d in &s.daemons {
        println!(
            "  {:<24} pid {:<8} {:<6} {}",
            d.name,
            d.pid,
            if d.alive { "alive" } else { "DEAD" },
            d.program
        );
    }
    match &s.chassis {
        Ok(c) => println!("chassis ({}): {}", c.len(), c.join(", ")),
        Err(e) => println!("chassis: unavailable ({e})"),
    }
    let ns: Vec<String> = s
        .netns
        .iter()
        .map(|(n, ok)| {
            if *ok {
                n.clone()
            } else {
                format!("{n} (missing)")
            }
        })
        .collect();
    println!("netns: {}", ns.join(", "));
    match &s.external {
        Some(ext) => println!("external: {}", lab::external::describe(ext)),
        None => println!("external: none"),
    }
    let t = &s.timings;
    let nodes: Vec<String> = t
        .nodes
        .iter()
        .map(|d| format!("{}ms", d.as_millis()))
        .collect();
    println!(
        "start-up: central {}ms, external {}ms, nodes [{}], chassis wait {}ms, total {}ms",
        t.central.as_millis(),
        t.external.unwrap_or_default().as_millis(),
        nodes.join(", "),
        t.chassis.as_millis(),
        t.total.as_millis()
    );
    Ok(())
}
