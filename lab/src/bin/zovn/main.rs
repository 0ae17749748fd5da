//! `zovn`: the lab / perf / diagnose CLI.
//!
//! ```text
//! zovn lab up [--nodes N] [--raft] [--dpdk] [--encap geneve|vxlan] [--prefix P] [--dir DIR]
//! zovn lab status [--dir DIR]
//! zovn lab down [--keep-files] [--dir DIR]
//! ```
//! The lab dir defaults to `$ZOVN_LAB_DIR` or `/tmp/zovn-lab`.

mod args;
mod down;
mod status;
mod up;

use clap::Parser;

use args::{Cli, Command, LabCommand};

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ZOVN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Lab { command } => match command {
            LabCommand::Up(a) => up::run(a),
            LabCommand::Status(a) => status::run(a),
            LabCommand::Down(a) => down::run(a),
        },
    }
}
