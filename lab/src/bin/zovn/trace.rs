//! `zovn trace SRC DST[:PORT[/PROTO]]` (see `lab::trace`) and `zovn status`: exit 0 delivered, 1 dropped,
//! 2 bad input (a one-line error), 1 with the error when the trace itself failed.

use lab::trace::{self, TraceError, Verdict};

use crate::args::{StatusArgs, TraceArgs, TraceFormat};

/// `zovn status` (see `lab::overview`).
pub fn status(a: StatusArgs) -> anyhow::Result<()> {
    let o = lab::overview::gather(&a.dir.dir)?;
    match a.output {
        TraceFormat::Text => print!("{}", lab::overview::text(&o)),
        TraceFormat::Json => println!("{}", serde_json::to_string_pretty(&o)?),
    }
    Ok(())
}

pub fn run(a: TraceArgs) -> anyhow::Result<()> {
    let spec = match trace::target::parse(&a.src, &a.dst) {
        Ok(s) => s,
        Err(e) => input_error(&e),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = match rt.block_on(trace::lab_backend::trace(&a.dir.dir, &spec)) {
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
