//! Checks of the repository itself: docs, crate layering, the chart rendered and its scripts, the small tools.
//!
//! One test binary for these files (each a module, its tests named `<file>::<test>`):
//! linking one binary instead of one per file is most of an edit-test cycle. Heavy tests
//! still take [`tests::heavy_lock`], so they run one at a time as before.

mod docs;
mod helm_chart;
mod helm_legacy_values;
mod helm_scripts;
mod layering;
mod tool_cli;
