//! IPAM: in progress.
