//! `zstack-ovn-cni`: the CNI plugin binary. A thin shim: it forwards the invocation to
//! the zstack-ovn node agent's unix socket and prints the answer (see `cni::shim`).

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let outcome = cni::shim::run(
        |name| std::env::var(name).ok(),
        std::io::stdin().lock(),
        &mut std::io::stderr(),
    );
    if !outcome.stdout.is_empty() {
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{}", outcome.stdout)
            .and_then(|()| out.flush())
            .is_err()
        {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::from(outcome.exit_code)
}
