//! `zovn upgrade-ovs` on a cluster (`diag::ovs_upgrade`).

use std::time::Duration;

use diag::ovs_upgrade::{Options, Outcome, PodOutcome};

use crate::args::UpgradeOvsArgs;
use crate::target::cluster_only;

fn images(m: &std::collections::BTreeMap<String, (String, String)>) -> String {
    m.iter()
        .map(|(c, (old, new))| format!("{c} {old} -> {new}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn print(o: &PodOutcome) {
    let who = format!("{}/{} on {}", o.namespace, o.pod, o.node);
    match &o.outcome {
        Outcome::Current => println!("{who}: current"),
        Outcome::Upgraded { images: m, secs } => {
            println!("{who}: upgraded in place in {secs:.1} s ({})", images(m))
        }
        Outcome::WouldUpgrade { images: m } => {
            println!("{who}: would be upgraded in place ({})", images(m))
        }
        Outcome::NeedsRecreate { differs } => println!(
            "{who}: its template differs in more than images ({}): delete the pod to apply it \
             (kubectl delete pod -n {} {})",
            differs.join(", "),
            o.namespace,
            o.pod
        ),
    }
}

pub fn run(a: UpgradeOvsArgs) -> anyhow::Result<()> {
    let k = cluster_only(&a.target, "upgrade-ovs");
    let opts = Options {
        node: a.node.clone(),
        dry_run: a.dry_run,
        timeout: Duration::from_secs(a.timeout),
    };
    let done = diag::ovs_upgrade::upgrade(&k, &opts, print)
        .map_err(|e| anyhow::anyhow!("upgrade-ovs: {e}"))?;
    if let Some(n) = &a.node
        && done.is_empty()
    {
        anyhow::bail!("upgrade-ovs: no OVS pod of the release on node {n}");
    }
    if done
        .iter()
        .any(|o| matches!(o.outcome, Outcome::NeedsRecreate { .. }))
    {
        std::process::exit(1);
    }
    Ok(())
}
