//! `zovn lab exec`, `zovn lab probe` and the hidden `zovn lab responder`.

use lab::pods::probe::{self, ProbeOutcome, find_pod};

use crate::args::{ExecArgs, ProbeArgs, ResponderArgs};

/// Runs the command in the pod netns and exits with its code.
pub fn exec(a: ExecArgs) -> anyhow::Result<()> {
    let dir = crate::up::absolute(a.dir.dir)?;
    let pod = find_pod(&dir, &a.pod)?;
    let code = probe::exec(&pod.netns, &a.command)?;
    probe::flush();
    std::process::exit(code);
}

/// Exit 0 and print the reply when reachable; exit 1 with the reason when not.
pub fn probe(a: ProbeArgs) -> anyhow::Result<()> {
    let dir = crate::up::absolute(a.dir.dir)?;
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

pub fn responder(a: ResponderArgs) -> anyhow::Result<()> {
    let ports = lab::pods::record::parse_ports(&a.ports).map_err(anyhow::Error::msg)?;
    lab::pods::responder::serve(&ports, &a.name, a.pidfile.as_deref())
}
