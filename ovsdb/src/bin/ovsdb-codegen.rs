//! Regenerates the typed-row modules (`ovsdb/src/{nb,sb,vswitch}.rs`) from the schema
//! copies in `ovsdb/schemas/`.
//!
//! `ovsdb-codegen [--from-system]`: with `--from-system`, first refresh the schema copies
//! from the installed OVN/OVS packages (`/usr/share/ovn`, `/usr/share/openvswitch`).

use std::path::Path;
use std::process::ExitCode;

use ovsdb::codegen::{MODULES, generate};
use ovsdb::schema::Schema;

const SYSTEM: &[(&str, &str)] = &[
    ("ovn-nb.ovsschema", "/usr/share/ovn/ovn-nb.ovsschema"),
    ("ovn-sb.ovsschema", "/usr/share/ovn/ovn-sb.ovsschema"),
    (
        "vswitch.ovsschema",
        "/usr/share/openvswitch/vswitch.ovsschema",
    ),
];

fn run(from_system: bool) -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if from_system {
        for (file, installed) in SYSTEM {
            std::fs::copy(installed, root.join("schemas").join(file))
                .map_err(|e| format!("copy {installed}: {e}"))?;
        }
    }
    for (module, file, title) in MODULES {
        let path = root.join("schemas").join(file);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let schema = Schema::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let code = generate(&schema, &format!("Typed rows of the `{title}` database."));
        let out = root.join("src").join(format!("{module}.rs"));
        std::fs::write(&out, code).map_err(|e| format!("{}: {e}", out.display()))?;
        println!("wrote {} ({} tables)", out.display(), schema.tables.len());
    }
    Ok(())
}

const USAGE: &str = "usage: ovsdb-codegen [--from-system]\n  regenerates ovsdb/src/{nb,sb,vswitch}.rs from ovsdb/schemas/; --from-system first\n  copies the installed OVN/OVS schemas there";

fn main() -> ExitCode {
    let mut from_system = false;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--from-system" => from_system = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("ovsdb-codegen: unknown argument {other}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    match run(from_system) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ovsdb-codegen: {e}");
            ExitCode::FAILURE
        }
    }
}
