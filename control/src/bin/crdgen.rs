//! Writes the Subnet CRD YAML to stdout, or to the path given as the first argument:
//!
//! ```sh
//! cargo run -p control --bin crdgen -- deploy/crds/subnet.yaml
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let yaml = match control::crd::crd_yaml() {
        Ok(yaml) => yaml,
        Err(e) => {
            eprintln!("crdgen: cannot serialise the Subnet CRD: {e}");
            return ExitCode::FAILURE;
        }
    };
    match std::env::args_os().nth(1) {
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
