//! `zovn capture NS/POD` (see `diag::capture`): the node agent's `debug capture` run on
//! the pod's node, its pcap consumed here. Exit 0 when the capture ended cleanly, 2 on bad input (a one-line
//! error), 1 on a system failure.

use std::time::Duration;

use diag::capture::{CaptureOptions, EXIT_INPUT, RunOptions, cluster_backend, run_capture};

use crate::args::CaptureArgs;
use crate::target::{Target, TargetArgs};

pub fn run(a: CaptureArgs) -> anyhow::Result<()> {
    let target = match a.target.choose() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("zovn capture: {e}");
            std::process::exit(EXIT_INPUT)
        }
    };
    let ns = TargetArgs::default_namespace(a.namespace.as_deref(), &target);
    let pod = if a.pod.contains('/') {
        a.pod.clone()
    } else {
        format!("{ns}/{}", a.pod)
    };
    let opts = CaptureOptions {
        count: a.count,
        duration: Duration::from_secs(a.duration),
    };
    let (cmd, close_stdin) = match &target {
        #[cfg(feature = "lab")]
        Target::Lab(dir) => (
            lab::diag_backends::capture::command(dir, &pod, &opts),
            false,
        ),
        Target::Cluster(k) => (cluster_backend::command(k, &pod, &opts), true),
    };
    let cmd = match cmd {
        Ok(c) => c,
        Err(e) if e.is_input() => {
            eprintln!("zovn capture: {e}");
            std::process::exit(EXIT_INPUT)
        }
        Err(e) => anyhow::bail!("capture failed: {e}"),
    };
    std::process::exit(run_capture(
        cmd,
        &RunOptions {
            write: a.write,
            close_stdin,
        },
    ))
}
