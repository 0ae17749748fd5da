//! `zovn capture NS/POD` (see `lab::capture`) and the hidden `zovn debug capture` it runs
//! on the pod's node. Exit 0 when the capture ended cleanly, 2 on bad input (a one-line
//! error), 1 on a system failure.

use std::os::fd::AsFd;
use std::time::Duration;

use lab::capture::node::{self, NodeCapture};
use lab::capture::{
    CaptureOptions, EXIT_INPUT, RunOptions, cluster_backend, lab_backend, run_capture,
};

use crate::args::{CaptureArgs, DebugCaptureArgs};
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
        Target::Lab(dir) => (lab_backend::command(dir, &pod, &opts), false),
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

pub fn debug(a: DebugCaptureArgs) -> anyhow::Result<()> {
    // unbuffered: one write per packet record
    let out = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let opts = NodeCapture {
        db: a.db,
        iface_id: a.iface_id,
        bridge: a.bridge,
        count: a.count,
        duration: Duration::from_secs(a.duration),
        until_stdin_closes: a.until_stdin_closes,
        vswitchd_ctl: a.vswitchd_ctl,
    };
    match node::run(&opts, out) {
        Ok(_) => Ok(()),
        Err(f) => {
            eprintln!("zovn debug capture: {}", f.message);
            std::process::exit(f.code)
        }
    }
}
