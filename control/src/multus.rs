//! Multus secondary networks: the selections and NAD types are the contract's
//! ([`api::multus`], re-exported here); the IPAM owner keys of secondary networks are the
//! controller's.

pub use api::multus::*;

/// The IPAM owner key of a pod's (or, with `vmi`, a VM's) secondary network `nad_key`.
pub fn owner_key(base: &str, nad_key: &str) -> String {
    format!("{base}@{nad_key}")
}

/// The part of an IPAM owner key before the secondary network suffix.
pub fn base_key(key: &str) -> &str {
    key.split_once('@').map_or(key, |(b, _)| b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_keys() {
        assert_eq!(owner_key("vm:ns/vm1", "ns/net"), "vm:ns/vm1@ns/net");
        assert_eq!(base_key(&owner_key("vm:ns/vm1", "ns/net")), "vm:ns/vm1");
        assert_eq!(base_key("pod:ns/p"), "pod:ns/p");
    }
}
