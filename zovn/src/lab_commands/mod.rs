//! `zovn lab ...` and `zovn cluster ...`: the local lab and the local Kubernetes cluster
//! (the `lab` crate), feature `lab` only. The operator's build has none of this.

pub mod apply;
pub mod args;
pub mod cluster;
pub mod delete;
pub mod down;
pub mod get;
pub mod pods;
pub mod serve;
pub mod stats;
pub mod status;
pub mod up;

use args::{ClusterCommand, LabCommand};

/// Runs a `zovn lab` command.
pub fn lab(command: LabCommand) -> anyhow::Result<()> {
    match command {
        LabCommand::Up(a) => up::run(a),
        LabCommand::Status(a) => status::run(a),
        LabCommand::Down(a) => down::run(a),
        LabCommand::Apply(a) => apply::run(a),
        LabCommand::Delete(a) => delete::run(a),
        LabCommand::Get(a) => get::run(a),
        LabCommand::Serve(a) => serve::run(a),
        LabCommand::Exec(a) => pods::exec(a),
        LabCommand::Probe(a) => pods::probe(a),
        LabCommand::Responder(a) => pods::responder(a),
        LabCommand::Stats(a) => stats::run(a),
        LabCommand::RestartVswitchd(a) => up::restart_vswitchd(a),
    }
}

/// Runs a `zovn cluster` command.
pub fn cluster(command: ClusterCommand) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Up(a) => cluster::up(a),
        ClusterCommand::Status(a) => cluster::status(a),
        ClusterCommand::Down(a) => cluster::down(a),
    }
}
