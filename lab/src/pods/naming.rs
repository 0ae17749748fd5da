//! Names the pod runtime derives from a pod: its network namespace and its container id.

use crate::names::IFNAMSIZ_MAX;

/// FNV-1a, 64 bits: the project's one stable hash ([`api::hash`]).
pub use api::hash::fnv1a64;

/// The network namespace of pod `key` (`namespace/name`): `<prefix>p-<hash>`, the hash
/// taking what IFNAMSIZ leaves (at most 8 hex digits; 5 with the longest prefix).
pub fn pod_netns(prefix: &str, key: &str) -> String {
    let room = IFNAMSIZ_MAX.saturating_sub(prefix.len() + 2).clamp(1, 8);
    let hash = format!("{:016x}", fnv1a64(key.as_bytes()));
    format!("{prefix}p-{}", &hash[..room])
}

/// A 64-hex-digit container id, stable for a pod uid (as a runtime's sandbox id is for
/// the lifetime of the sandbox).
pub fn container_id(uid: &str) -> String {
    (0u8..4)
        .map(|salt| {
            let mut data = uid.as_bytes().to_vec();
            data.push(salt);
            format!("{:016x}", fnv1a64(&data))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netns_names_fit_and_differ() {
        for prefix in ["z", "zovn", "abcdefgh"] {
            let a = pod_netns(prefix, "demo/web");
            let b = pod_netns(prefix, "demo/db");
            assert!(a.len() <= IFNAMSIZ_MAX, "{a}");
            assert!(a.starts_with(&format!("{prefix}p-")), "{a}");
            assert_ne!(a, b);
            assert_eq!(a, pod_netns(prefix, "demo/web"), "stable");
        }
        assert_eq!(pod_netns("abcdefgh", "demo/web").len(), 15);
        assert_eq!(pod_netns("zovn", "demo/web").len(), 14);
        // pinned: computed before the hash moved to the api crate
        assert_eq!(pod_netns("zovn", "demo/web"), "zovnp-d314c8cc");
        assert_eq!(pod_netns("abcdefgh", "demo/web"), "abcdefghp-d314c");
    }

    #[test]
    fn container_ids_are_64_hex_and_stable() {
        let a = container_id("0b6c5a4e-1111-2222-3333-444455556666");
        assert_eq!(a.len(), 64);
        assert_eq!(
            a,
            "6c3f6e215b3cb9d76c3f6d215b3cb8246c3f70215b3cbd3d6c3f6f215b3cbb8a"
        );
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(a, container_id("0b6c5a4e-1111-2222-3333-444455556666"));
        assert_ne!(a, container_id("another-uid"));
    }
}
