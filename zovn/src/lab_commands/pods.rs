//! `zovn lab exec` (in a pod, or `--external` in the external host), `zovn lab probe`
//! and the hidden `zovn lab responder`.

use anyhow::Context;
use lab::pods::probe::{self, ProbeOutcome, find_pod};

use super::args::{ExecArgs, ProbeArgs, ResponderArgs};

/// Runs the command in the pod netns (or the external host's) and exits with its code.
pub fn exec(a: ExecArgs) -> anyhow::Result<()> {
    let dir = super::up::absolute(a.dir.dir)?;
    let netns = match (&a.pod, a.external) {
        (_, true) => external_netns(&dir)?,
        (Some(pod), false) => find_pod(&dir, pod)?.netns,
        (None, false) => anyhow::bail!("name a pod (NAMESPACE/NAME) or --external"),
    };
    let code = probe::exec(&netns, &a.command)?;
    probe::flush();
    std::process::exit(code);
}

/// Exit 0 and print the reply when reachable; exit 1 with the reason when not.
pub fn probe(a: ProbeArgs) -> anyhow::Result<()> {
    let dir = super::up::absolute(a.dir.dir)?;
    let pod = find_pod(&dir, &a.pod)?;
    match probe::probe(&pod.netns, &a.target, a.udp, a.timeout)? {
        ProbeOutcome::Reachable(reply) => {
            println!("{reply}");
            Ok(())
        }
        ProbeOutcome::Unreachable(why) => {
            eprintln!(
                "{} → {} ({}): unreachable: {why}",
                pod.key,
                a.target,
                if a.udp { "udp" } else { "tcp" }
            );
            probe::flush();
            std::process::exit(1);
        }
    }
}

/// The external host's netns of the lab in `dir`, once it exists.
fn external_netns(dir: &std::path::Path) -> anyhow::Result<String> {
    let lab = lab::Lab::open(dir)
        .with_context(|| format!("the lab is not up in {} (run `zovn lab up`)", dir.display()))?;
    let Some(ext) = lab.external() else {
        anyhow::bail!(
            "the lab in {} has no external network (brought up by an older zovn)",
            dir.display()
        );
    };
    if !lab::netns::exists(&ext.netns) {
        anyhow::bail!("the external netns {} does not exist", ext.netns);
    }
    Ok(ext.netns.clone())
}

pub fn responder(a: ResponderArgs) -> anyhow::Result<()> {
    let ports = lab::pods::record::parse_ports(&a.ports).map_err(anyhow::Error::msg)?;
    lab::pods::responder::serve(&ports, &a.name, a.echo_source, a.pidfile.as_deref())
}
