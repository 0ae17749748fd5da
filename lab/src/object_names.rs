//! Name rules every kind the lab accepts shares: the default namespace and the DNS-1123
//! name checks. A leaf: the kinds' modules ([`crate::apiserver`]'s objects, services and
//! network policies, [`crate::multus`], [`crate::kubevirt`]) use it, it uses none of them.

/// The namespace of an object that names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A DNS-1123 label: 1-63 chars `[a-z0-9-]`, starting and ending alphanumeric.
pub fn check_label(what: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else if name.is_empty() {
        Err(format!("{what}: metadata.name is missing"))
    } else {
        Err(format!(
            "{what} name {name:?} is not a DNS-1123 label (1-63 chars [a-z0-9-], \
             starting and ending with a letter or digit)"
        ))
    }
}

/// A DNS-1123 subdomain: 1-253 chars, dot-separated labels.
pub fn check_subdomain(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{what}: metadata.name is missing"));
    }
    let ok = name.len() <= 253 && name.split('.').all(|l| check_label(what, l).is_ok());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} name {name:?} is not a DNS-1123 subdomain (lowercase letters, digits, \
             '-' and '.', up to 253 chars)"
        ))
    }
}
