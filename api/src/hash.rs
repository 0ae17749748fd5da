//! The one stable hash of the project: FNV-1a, 64 bits.
//!
//! Stable across builds, Rust versions and platforms (unlike `DefaultHasher`), so it may
//! name persistent objects: vhost-user socket directories, OVS port names, OVN port groups,
//! address sets and template variables, lab network namespaces. Never change it: every
//! name derived from it would silently change with it (`tests/golden.rs` pins them).

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a 64 of `data`.
pub fn fnv1a64(data: &[u8]) -> u64 {
    data.iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// FNV-1a 64 of `parts` joined by a NUL byte, so `("ab", "c")` and `("a", "bc")` differ.
pub fn fnv1a64_parts(parts: &[&str]) -> u64 {
    fnv1a64(parts.join("\0").as_bytes())
}

/// [`fnv1a64`] as 16 lower-case hex digits.
pub fn hex(data: &[u8]) -> String {
    format!("{:016x}", fnv1a64(data))
}

/// [`fnv1a64_parts`] as 16 lower-case hex digits.
pub fn hex_parts(parts: &[&str]) -> String {
    format!("{:016x}", fnv1a64_parts(parts))
}
