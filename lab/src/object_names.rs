//! Name rules every kind the lab accepts shares: the default namespace and the DNS-1123
//! name checks, refusing with a [`NameError`]. A leaf: the kinds' modules
//! ([`crate::apiserver`]'s objects, services and network policies, [`crate::multus`],
//! [`crate::kubevirt`]) use it, it uses none of them.

/// The namespace of an object that names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A name the DNS-1123 rules refuse; `what` says whose name it is (`Pod`, `Service
/// namespace`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{what}: metadata.name is missing")]
    Missing { what: String },
    #[error(
        "{what} name {name:?} is not a DNS-1123 label (1-63 chars [a-z0-9-], starting and \
         ending with a letter or digit)"
    )]
    NotLabel { what: String, name: String },
    #[error(
        "{what} name {name:?} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and \
         '.', up to 253 chars)"
    )]
    NotSubdomain { what: String, name: String },
}

fn is_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// A DNS-1123 label: 1-63 chars `[a-z0-9-]`, starting and ending alphanumeric.
pub fn check_label(what: &str, name: &str) -> Result<(), NameError> {
    if is_label(name) {
        Ok(())
    } else if name.is_empty() {
        Err(NameError::Missing {
            what: what.to_string(),
        })
    } else {
        Err(NameError::NotLabel {
            what: what.to_string(),
            name: name.to_string(),
        })
    }
}

/// A DNS-1123 subdomain: 1-253 chars, dot-separated labels.
pub fn check_subdomain(what: &str, name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Missing {
            what: what.to_string(),
        });
    }
    if name.len() <= 253 && name.split('.').all(is_label) {
        Ok(())
    } else {
        Err(NameError::NotSubdomain {
            what: what.to_string(),
            name: name.to_string(),
        })
    }
}
