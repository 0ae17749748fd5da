//! Per-chassis OVN certificates: what a node agent asks for and what the controller's
//! signer grants, through the Kubernetes CertificateSigningRequest API.
//!
//! A node agent generates its key on the node (it never leaves it), and creates a
//! `certificates.k8s.io/v1` CertificateSigningRequest with [`SIGNER_NAME`] whose subject is
//! `CN=<chassis>` (the node's OVS `system-id`, which the chart sets to the Node name). The
//! request carries the requester's identity as the API server authenticated it: with a
//! pod-bound service-account token, the pod's name and UID ([`POD_NAME_EXTRA`],
//! [`POD_UID_EXTRA`]). The controller approves and signs only when that pod is the node
//! agent running on the Node the CN names; OVN's Southbound RBAC (`role=ovn-controller`)
//! then lets the certificate write its own `Chassis`/`Encap` rows and nobody else's.

/// `spec.signerName` of chassis certificate requests.
pub const SIGNER_NAME: &str = "network.zstack.io/ovn-chassis";

/// User extra the API server sets for a pod-bound service-account token: the pod's name.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";

/// User extra the API server sets for a pod-bound service-account token: the pod's UID.
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";

/// Label on a request naming the chassis it is for (the name may be truncated; the label is
/// for `kubectl get csr -l`, the signer checks the certificate request itself).
pub const CHASSIS_LABEL: &str = "network.zstack.io/chassis";

/// Name of the CertificateSigningRequest for `chassis` and a key whose public part hashes
/// to `key_id` (a new key, a new request; the same key asks under the same name):
/// `zovn-chassis-<chassis>-<key_id>`, the chassis part shortened to fit 253 characters.
pub fn request_name(chassis: &str, key_id: &str) -> String {
    let max_chassis = 253 - "zovn-chassis--".len() - key_id.len();
    let chassis: String = chassis.chars().take(max_chassis).collect();
    format!("zovn-chassis-{chassis}-{key_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_names_fit_and_differ_by_key() {
        assert_eq!(request_name("node1", "ab12"), "zovn-chassis-node1-ab12");
        assert_ne!(request_name("node1", "ab12"), request_name("node1", "cd34"));
        let long = "n".repeat(253);
        let name = request_name(&long, "0123456789abcdef");
        assert_eq!(name.len(), 253);
        assert!(name.ends_with("-0123456789abcdef"));
    }
}
