//! `zovn`: the lab / perf / diagnose CLI.
fn main() {}
