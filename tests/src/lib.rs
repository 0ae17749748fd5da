//! # tests — end-to-end tests on real components
//!
//! Shared helpers for the integration tests under `tests/tests/`: the real-component gate
//! (skip with a reason, or fail when `ZOVN_REQUIRE_REAL=1`), and a lock that serialises
//! heavy lab tests on this 2-core machine.
