//! `zovn trace SRC DST[:PORT[/PROTO]]` (see `diag::trace`) and `zovn status` (see
//! `diag::overview`), on a lab or a cluster (`crate::target`). Trace: exit 0 delivered,
//! 1 dropped, 2 bad input (a one-line error), 1 with the error when the trace itself
//! failed.

use diag::trace::backend::Backend;
use diag::trace::cluster_backend::ClusterBackend;
use diag::trace::{self, TraceError, Verdict};

use crate::args::{StatusArgs, TraceArgs, TraceFormat};
use crate::target::{Target, TargetArgs};

/// `zovn status`.
pub fn status(a: StatusArgs) -> anyhow::Result<()> {
    let o = match a.target.choose()? {
        #[cfg(feature = "lab")]
        Target::Lab(dir) => lab::diag_backends::overview::gather(&dir)?,
        Target::Cluster(k) => diag::overview::cluster_source::gather(&k)?,
    };
    match a.output {
        TraceFormat::Text => print!("{}", diag::overview::text(&o)),
        TraceFormat::Json => println!("{}", serde_json::to_string_pretty(&o)?),
    }
    Ok(())
}

pub fn run(a: TraceArgs) -> anyhow::Result<()> {
    let target = match a.target.choose() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("zovn trace: {e}");
            std::process::exit(2)
        }
    };
    let ns = TargetArgs::default_namespace(a.namespace.as_deref(), &target);
    let spec = match trace::target::parse_in(&a.src, &a.dst, Some(&ns)) {
        Ok(s) => s,
        Err(e) => input_error(&e),
    };
    let backend: Result<Box<dyn Backend>, TraceError> = match target {
        #[cfg(feature = "lab")]
        Target::Lab(dir) => lab::diag_backends::trace::LabBackend::open(&dir)
            .map(|b| Box::new(b) as Box<dyn Backend>),
        Target::Cluster(k) => ClusterBackend::connect(k).map(|b| Box::new(b) as Box<dyn Backend>),
    };
    let report = match backend.and_then(|mut b| trace::run::trace(b.as_mut(), &spec)) {
        Ok(r) => r,
        Err(e) if e.is_input() => input_error(&e),
        Err(e) => anyhow::bail!("trace failed: {e}"),
    };
    match a.output {
        TraceFormat::Text => print!("{}", trace::render::text(&report, a.verbose)),
        TraceFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    std::process::exit(match report.verdict {
        Verdict::Delivered => 0,
        Verdict::Dropped => 1,
    })
}

fn input_error(e: &TraceError) -> ! {
    eprintln!("zovn trace: {e}");
    std::process::exit(2)
}
