//! Writes the Subnet CRD YAML to stdout, or to the path given as the first argument:
//!
//! ```sh
//! cargo run -p control --bin crdgen -- deploy/helm/zstack-ovn/crds/subnet.yaml
//! ```

use std::process::ExitCode;

const USAGE: &str =
    "usage: crdgen [PATH]\n  writes the Subnet CRD YAML to PATH, or to stdout without one";

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if let Some(bad) = args.iter().find(|a| a.to_string_lossy().starts_with('-')) {
        eprintln!("crdgen: unknown option {}\n{USAGE}", bad.to_string_lossy());
        return ExitCode::from(2);
    }
    if args.len() > 1 {
        eprintln!("crdgen: one PATH at most\n{USAGE}");
        return ExitCode::from(2);
    }
    let yaml = match control::crd::crd_yaml() {
        Ok(yaml) => yaml,
        Err(e) => {
            eprintln!("crdgen: cannot serialise the Subnet CRD: {e}");
            return ExitCode::FAILURE;
        }
    };
    match args.into_iter().next() {
        None => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Some(path) => match std::fs::write(&path, yaml) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("crdgen: cannot write {}: {e}", path.to_string_lossy());
                ExitCode::FAILURE
            }
        },
    }
}
