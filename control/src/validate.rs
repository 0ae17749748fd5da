//! Subnet validation: in progress.
