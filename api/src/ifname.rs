//! Network interface names: the one rule (the CNI specification's, which is Linux's) every
//! part checks a name against — the CNI plugin for `CNI_IFNAME`, the agent before it
//! names a veth or asks the kernel, the vhost-user layer before a socket path is made from
//! one, the lab for its own links.
//!
//! A name is 1 to [`MAX_LEN`] bytes (the kernel's `IFNAMSIZ` less its NUL), not `.` or
//! `..`, without `/`, `:` or whitespace.

/// The longest interface name, in bytes.
pub const MAX_LEN: usize = 15;

/// Why a name is not an interface name (the text says the rule).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "interface name {0:?} is invalid: it must be 1-15 bytes, not '.' or '..', without '/', ':' or whitespace"
)]
pub struct IfNameError(pub String);

/// Checks `name` against the rule.
pub fn check(name: &str) -> Result<(), IfNameError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_LEN
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace());
    if ok {
        Ok(())
    } else {
        Err(IfNameError(name.to_string()))
    }
}

/// Whether `name` is an interface name.
pub fn is_valid(name: &str) -> bool {
    check(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cni_rule() {
        for ok in ["eth0", "net1", "a", "zovn-0123456789", "br_int.100", "ü"] {
            assert!(is_valid(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "abcdefghijklmnop",
            "a/b",
            "a:b",
            "a b",
            "tab\t",
            "ünïcödé-lóng",
        ] {
            let e = check(bad).expect_err(bad);
            assert!(e.to_string().contains("1-15 bytes"), "{e}");
        }
    }
}
