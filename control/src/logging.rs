//! The control plane binaries' logging: `tracing` to stdout, filtered by `RUST_LOG`
//! (default `info`), JSON lines with `--log-json`, colours only on a terminal.

/// Installs the global subscriber (call once, first thing in `main`).
pub fn init(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            // colours only on a terminal: a log file or collector gets plain text
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init();
    }
}
