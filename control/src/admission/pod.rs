//! Which pod annotations only the controller, or only KubeVirt, may write.
//!
//! - The controller's allocation record ([`CONTROLLER_POD_ANNOTATIONS`]): the node agent
//!   configures a pod from it and the IPAM rebuild cross-checks it, so a user who writes
//!   it (on create or update) is refused; only the controller's service account may.
//! - `kubevirt.io/domain` makes a pod share the named VM's address lease: only KubeVirt's
//!   virt-controller (the configured accounts) may set it, and only on a pod a
//!   VirtualMachineInstance of that name controls (its `ownerReferences`).

use api::keys::{
    IPAM_ERROR, KUBEVIRT_DOMAIN, NETWORK_ERRORS, NETWORK_SUBNETS, POD_NETWORKS, POD_SUBNET,
};
use serde_json::Value;

/// The pod annotations the controller writes and nobody else may.
pub const CONTROLLER_POD_ANNOTATIONS: [&str; 5] = [
    POD_NETWORKS,
    POD_SUBNET,
    IPAM_ERROR,
    NETWORK_SUBNETS,
    NETWORK_ERRORS,
];

/// Who may write what on pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPolicy {
    /// The controller's user name (`system:serviceaccount:<ns>:<name>`).
    pub controller: String,
    /// The user names that may create VM pods (KubeVirt's virt-controller).
    pub vm_pod_creators: Vec<String>,
}

/// A pod write refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodRefusal {
    #[error(
        "annotation {key} is the network controller's allocation record: only {controller} may write it (remove it from the pod)"
    )]
    ControllerAnnotation { key: String, controller: String },
    #[error(
        "annotation {KUBEVIRT_DOMAIN}={vm} gives the pod VM {vm}'s addresses: only KubeVirt ({creators}) may set it, and {user} is not KubeVirt"
    )]
    NotKubeVirt {
        vm: String,
        creators: String,
        user: String,
    },
    #[error(
        "annotation {KUBEVIRT_DOMAIN}={vm} is allowed only on a pod controlled by VirtualMachineInstance {vm} (ownerReferences)"
    )]
    NotTheVmsPod { vm: String },
}

fn annotation<'a>(pod: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    pod?.get("metadata")?
        .get("annotations")?
        .get(key)
        .filter(|v| !v.is_null())
}

fn controlled_by_vmi(pod: &Value, vm: &str) -> bool {
    let refs = pod
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array);
    refs.into_iter().flatten().any(|r| {
        r.get("kind").and_then(Value::as_str) == Some("VirtualMachineInstance")
            && r.get("apiVersion")
                .and_then(Value::as_str)
                .is_some_and(|v| v.starts_with("kubevirt.io/"))
            && r.get("name").and_then(Value::as_str) == Some(vm)
            && r.get("controller").and_then(Value::as_bool) == Some(true)
    })
}

/// Decides a pod create (`old` is `None`) or update by `user`.
pub fn pod_write(
    policy: &PodPolicy,
    user: &str,
    old: Option<&Value>,
    new: &Value,
) -> Result<(), PodRefusal> {
    if user != policy.controller {
        for key in CONTROLLER_POD_ANNOTATIONS {
            if annotation(old, key) != annotation(Some(new), key) {
                return Err(PodRefusal::ControllerAnnotation {
                    key: key.to_string(),
                    controller: policy.controller.clone(),
                });
            }
        }
    }
    let domain = annotation(Some(new), KUBEVIRT_DOMAIN);
    if let Some(d) = domain.filter(|d| annotation(old, KUBEVIRT_DOMAIN) != Some(*d)) {
        let vm = d.as_str().unwrap_or_default().to_string();
        if !policy.vm_pod_creators.iter().any(|c| c == user) {
            return Err(PodRefusal::NotKubeVirt {
                vm,
                creators: if policy.vm_pod_creators.is_empty() {
                    "nobody is configured".into()
                } else {
                    policy.vm_pod_creators.join(", ")
                },
                user: user.to_string(),
            });
        }
        if !controlled_by_vmi(new, &vm) {
            return Err(PodRefusal::NotTheVmsPod { vm });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CTL: &str = "system:serviceaccount:kube-system:zs-controller";
    const VIRT: &str = "system:serviceaccount:kubevirt:kubevirt-controller";

    fn policy() -> PodPolicy {
        PodPolicy {
            controller: CTL.into(),
            vm_pod_creators: vec![VIRT.into()],
        }
    }

    fn pod(annotations: Value, owners: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "t", "annotations": annotations,
            "ownerReferences": owners}, "spec": {}})
    }

    #[test]
    fn only_the_controller_writes_its_allocation_record() {
        let p = policy();
        let plain = pod(json!({"app": "x"}), json!([]));
        let forged = pod(json!({POD_NETWORKS: "{}"}), json!([]));
        // a user: no create with it, no change, no removal
        for (old, new) in [
            (None, &forged),
            (Some(&plain), &forged),
            (Some(&forged), &plain),
        ] {
            let e = pod_write(&p, "alice", old, new).unwrap_err();
            assert!(
                e.to_string().contains(POD_NETWORKS) && e.to_string().contains(CTL),
                "{e}"
            );
        }
        for key in [POD_SUBNET, IPAM_ERROR, NETWORK_SUBNETS, NETWORK_ERRORS] {
            let e = pod_write(
                &p,
                "alice",
                Some(&plain),
                &pod(json!({key: "x"}), json!([])),
            );
            assert!(
                matches!(e, Err(PodRefusal::ControllerAnnotation { .. })),
                "{key}"
            );
        }
        // the controller may; a user may change anything else of a pod carrying it
        assert_eq!(pod_write(&p, CTL, Some(&plain), &forged), Ok(()));
        let relabelled = pod(json!({POD_NETWORKS: "{}", "app": "y"}), json!([]));
        assert_eq!(pod_write(&p, "alice", Some(&forged), &relabelled), Ok(()));
        assert_eq!(pod_write(&p, "alice", None, &plain), Ok(()));
    }

    #[test]
    fn only_kubevirt_puts_a_vms_domain_on_that_vms_pod() {
        let p = policy();
        let owner = json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "name": "vm1", "uid": "u", "controller": true}]);
        let launcher = pod(json!({KUBEVIRT_DOMAIN: "vm1"}), owner.clone());
        assert_eq!(pod_write(&p, VIRT, None, &launcher), Ok(()));
        // a tenant copying the launcher, owner reference included
        let e = pod_write(&p, "alice", None, &launcher).unwrap_err();
        assert!(
            e.to_string().contains("vm1") && e.to_string().contains(VIRT),
            "{e}"
        );
        // adding it to an existing pod
        let plain = pod(json!({}), owner.clone());
        assert!(matches!(
            pod_write(&p, "alice", Some(&plain), &launcher),
            Err(PodRefusal::NotKubeVirt { .. })
        ));
        // KubeVirt itself, but for another VM's pod
        let other = pod(json!({KUBEVIRT_DOMAIN: "vm2"}), owner);
        assert_eq!(
            pod_write(&p, VIRT, None, &other),
            Err(PodRefusal::NotTheVmsPod { vm: "vm2".into() })
        );
        // an unchanged domain on a later update (e.g. a label) is not re-judged
        let mut relabelled = launcher.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        assert_eq!(pod_write(&p, "alice", Some(&launcher), &relabelled), Ok(()));
        // nobody configured: refused with that said
        let none = PodPolicy {
            vm_pod_creators: vec![],
            ..p
        };
        let e = pod_write(&none, VIRT, None, &launcher).unwrap_err();
        assert!(e.to_string().contains("nobody is configured"), "{e}");
    }
}
