//! The lab's KubeVirt: a `VirtualMachineInstance` (`kubevirt.io/v1`) is not stored, it
//! becomes the virt-launcher Pod KubeVirt would create ([`launcher_pod`]), named
//! `virt-launcher-<vmi>-<5 chars>` (the suffix derives from namespace and name, so applying
//! the VMI again finds the same pod and deleting the VMI deletes it).

use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::multus::DEFAULT_NETWORK_ANNOTATION;
use crate::object_names::{DEFAULT_NAMESPACE, NameError, check_subdomain};

/// `apiVersion` of VirtualMachineInstances.
pub const KUBEVIRT_V1: &str = "kubevirt.io/v1";
pub use crate::pods::vm_pod::{VM_BOOT_ANNOTATION, VmBoot};
/// KubeVirt: the VMI a virt-launcher pod runs.
pub use api::keys::KUBEVIRT_DOMAIN as DOMAIN_KEY;
/// The vhost-user request annotation.
pub use api::keys::VHOST_USER as VHOST_ANNOTATION;
/// KubeVirt's name generator alphabet (no vowels, no ambiguous digits).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Whether a decoded object is a VirtualMachineInstance.
pub fn is_vmi(v: &Value) -> bool {
    v.get("kind").and_then(Value::as_str) == Some("VirtualMachineInstance")
}

/// `virt-launcher-<vmi>-<5 chars>`, stable for a namespace and VMI name.
pub fn launcher_name(namespace: &str, vmi: &str) -> String {
    let h = api::hash::fnv1a64(format!("{namespace}/{vmi}").as_bytes());
    let n = SUFFIX_ALPHABET.len() as u64;
    let suffix: String = (0..5)
        .map(|i| {
            let idx = (h >> (i * 12)) % n;
            char::from(SUFFIX_ALPHABET[idx as usize])
        })
        .collect();
    format!("virt-launcher-{vmi}-{suffix}")
}

/// Why a VirtualMachineInstance cannot become its launcher pod.
#[derive(Debug, thiserror::Error)]
pub enum VmiError {
    /// The `apiVersion` given (empty when none).
    #[error("kind VirtualMachineInstance needs apiVersion {KUBEVIRT_V1}, not {0:?}")]
    ApiVersion(String),
    #[error("VirtualMachineInstance: metadata: {0}")]
    Metadata(serde_json::Error),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("VirtualMachineInstance {name}: no spec")]
    NoSpec { name: String },
    #[error(
        "VirtualMachineInstance {name}: spec.domain.memory.guest {value}: expected a size such as 256Mi or 1Gi"
    )]
    GuestMemory { name: String, value: String },
}

/// Guest memory when the VMI names none.
pub const DEFAULT_GUEST_MIB: u32 = 256;

/// `256Mi`, `1Gi`, `512M` → MiB (`None`: not a size this understands).
fn mebibytes(q: &str) -> Option<u32> {
    let q = q.trim();
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (n, unit) = q.split_at(split);
    let n: u64 = n.parse().ok()?;
    let mib = match unit {
        "Mi" => n,
        "Gi" => n * 1024,
        "M" => n * 1_000_000 / (1 << 20),
        "G" => n * 1_000_000_000 / (1 << 20),
        "" => n / (1 << 20),
        _ => return None,
    };
    u32::try_from(mib).ok().filter(|m| *m > 0)
}

/// What a VMI with a boot source asks of its QEMU: KubeVirt's
/// `spec.domain.firmware.kernelBoot` (a kernel and initrd from a container image, plus
/// `kernelArgs`), `spec.domain.cpu.cores` and `spec.domain.memory.guest`. `None`: the VMI
/// has no `kernelBoot`, nothing to boot (the lab's testpmd stands in for it). A guest
/// memory that is not a size is refused, naming it (`name`: the VMI's).
pub fn vm_boot(name: &str, spec: &Value) -> Result<Option<VmBoot>, VmiError> {
    let Some(kb) = spec.pointer("/domain/firmware/kernelBoot") else {
        return Ok(None);
    };
    let image = kb
        .pointer("/container/image")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let cpus = spec
        .pointer("/domain/cpu/cores")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(1)
        .max(1);
    let memory_mib = match spec.pointer("/domain/memory/guest") {
        None => DEFAULT_GUEST_MIB,
        Some(v) => v
            .as_str()
            .and_then(mebibytes)
            .ok_or_else(|| VmiError::GuestMemory {
                name: name.to_string(),
                value: v.to_string(),
            })?,
    };
    Ok(Some(VmBoot {
        image,
        kernel_args: kb
            .get("kernelArgs")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        cpus,
        memory_mib,
    }))
}

/// The virt-launcher Pod KubeVirt creates for a VMI: the VMI's labels and annotations
/// plus `kubevirt.io/domain`, its `kubernetes.io/hostname` node selector as `nodeName`,
/// its Multus default network as the Multus annotation, its other Multus networks as
/// `k8s.v1.cni.cncf.io/networks` (`[{"name", "namespace", "interface": "net<i>"}]`, as
/// KubeVirt names them), a `vhostuser` interface binding on the pod network as the
/// vhost-user request annotation (queues = vCPUs with `networkInterfaceMultiqueue`), the
/// interfaces' `ports` as the compute container's.
pub fn launcher_pod(vmi: &Value) -> Result<Pod, VmiError> {
    let api = vmi.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if api != KUBEVIRT_V1 {
        return Err(VmiError::ApiVersion(api.to_string()));
    }
    let meta: ObjectMeta = serde_json::from_value(vmi.get("metadata").cloned().unwrap_or_default())
        .map_err(VmiError::Metadata)?;
    let name = meta.name.clone().unwrap_or_default();
    check_subdomain("VirtualMachineInstance", &name)?;
    let ns = meta
        .namespace
        .clone()
        .unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    let spec = vmi
        .get("spec")
        .ok_or_else(|| VmiError::NoSpec { name: name.clone() })?;
    let str_at = |v: &Value, path: &[&str]| -> Option<String> {
        path.iter()
            .try_fold(v, |v, k| v.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let node = str_at(spec, &["nodeSelector", "kubernetes.io/hostname"]);
    let interfaces: Vec<Value> = spec
        .pointer("/domain/devices/interfaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let networks: Vec<Value> = spec
        .get("networks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut annotations = meta.annotations.clone().unwrap_or_default();
    annotations.insert(DOMAIN_KEY.into(), name.clone());
    if let Some(boot) = vm_boot(&name, spec)? {
        annotations.insert(VM_BOOT_ANNOTATION.into(), json!(boot).to_string());
    } else {
        annotations.remove(VM_BOOT_ANNOTATION);
    }
    let default_nad = networks.iter().find_map(|n| {
        let m = n.get("multus")?;
        (m.get("default").and_then(Value::as_bool) == Some(true))
            .then(|| m.get("networkName")?.as_str().map(str::to_string))?
    });
    // the network the pod's eth0 serves: `pod: {}`, or the Multus default
    let primary = networks
        .iter()
        .find(|n| {
            n.get("pod").is_some()
                || n.pointer("/multus/default").and_then(Value::as_bool) == Some(true)
        })
        .and_then(|n| n.get("name").and_then(Value::as_str));
    let vhost_iface = interfaces.iter().any(|i| {
        let vhost = i.pointer("/binding/name").and_then(Value::as_str) == Some("vhostuser")
            || i.get("vhostuser").is_some();
        vhost && (primary.is_none() || i.get("name").and_then(Value::as_str) == primary)
    });
    let secondary: Vec<Value> = networks
        .iter()
        .filter_map(|n| {
            let m = n.get("multus")?;
            if m.get("default").and_then(Value::as_bool) == Some(true) {
                return None;
            }
            let net = m.get("networkName")?.as_str()?;
            Some(match net.split_once('/') {
                Some((nns, name)) => (nns.to_string(), name.to_string()),
                None => (ns.clone(), net.to_string()),
            })
        })
        .enumerate()
        .map(|(i, (nns, name))| {
            json!({"name": name, "namespace": nns, "interface": format!("net{}", i + 1)})
        })
        .collect();
    if !secondary.is_empty() {
        annotations.insert(
            control::multus::NETWORKS_ANNOTATION.into(),
            Value::Array(secondary).to_string(),
        );
    }
    match &default_nad {
        Some(nad) => {
            let full = if nad.contains('/') {
                nad.clone()
            } else {
                format!("{ns}/{nad}")
            };
            annotations.insert(DEFAULT_NETWORK_ANNOTATION.into(), full);
        }
        None if vhost_iface => {
            let multiqueue = spec
                .pointer("/domain/devices/networkInterfaceMultiqueue")
                .and_then(Value::as_bool)
                == Some(true);
            let cores = spec
                .pointer("/domain/cpu/cores")
                .and_then(Value::as_u64)
                .unwrap_or(1);
            let queues = if multiqueue { cores.max(1) } else { 1 };
            annotations
                .entry(VHOST_ANNOTATION.into())
                .or_insert_with(|| json!({ "queues": queues }).to_string());
        }
        None => {}
    }
    let ports: Vec<ContainerPort> = interfaces
        .iter()
        .flat_map(|i| {
            i.get("ports")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|p| {
            Some(ContainerPort {
                container_port: i32::try_from(p.get("port")?.as_u64()?).ok()?,
                protocol: p
                    .get("protocol")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                name: p.get("name").and_then(Value::as_str).map(str::to_string),
                ..Default::default()
            })
        })
        .collect();
    let mut labels = meta.labels.clone().unwrap_or_default();
    labels.insert("kubevirt.io".into(), "virt-launcher".into());
    labels.insert("vm.kubevirt.io/name".into(), name.clone());
    labels.insert(DOMAIN_KEY.into(), name.clone());
    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(launcher_name(&ns, &name)),
            namespace: Some(ns),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node,
            containers: vec![Container {
                name: "compute".into(),
                image: Some("quay.io/kubevirt/virt-launcher".into()),
                ports: (!ports.is_empty()).then_some(ports),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multus::{NAD_V1, NetworkAttachmentDefinition, nad_info, secondary_networks};
    use std::collections::BTreeMap;

    const VMI: &str = r#"{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "namespace": "vms", "annotations": {"a": "b"}},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": "node1"},
          "domain": {"cpu": {"cores": 4}, "devices": {"networkInterfaceMultiqueue": true,
            "interfaces": [{"name": "default", "binding": {"name": "vhostuser"},
                            "ports": [{"name": "ssh", "port": 22}]}]}},
          "networks": [{"name": "default", "pod": {}}]}}"#;

    #[test]
    fn vmi_becomes_its_launcher_pod() {
        let v: Value = serde_json::from_str(VMI).unwrap();
        assert!(is_vmi(&v));
        let pod = launcher_pod(&v).unwrap();
        let name = pod.metadata.name.clone().unwrap();
        assert!(name.starts_with("virt-launcher-vm1-"), "{name}");
        assert_eq!(name.len(), "virt-launcher-vm1-".len() + 5);
        assert_eq!(name, launcher_name("vms", "vm1"), "stable");
        assert_ne!(name, launcher_name("default", "vm1"));
        let ann = pod.metadata.annotations.unwrap();
        assert_eq!(ann[DOMAIN_KEY], "vm1");
        assert_eq!(ann["a"], "b");
        assert_eq!(ann[VHOST_ANNOTATION], r#"{"queues":4}"#);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("node1"));
        let port = &spec.containers[0].ports.as_ref().unwrap()[0];
        assert_eq!(port.container_port, 22);
    }

    #[test]
    fn a_kernel_boot_vmi_carries_its_boot_request() {
        let mut v: Value = serde_json::from_str(VMI).unwrap();
        let ann = launcher_pod(&v).unwrap().metadata.annotations.unwrap();
        assert!(!ann.contains_key(VM_BOOT_ANNOTATION), "nothing to boot");
        v["spec"]["domain"]["firmware"] = json!({"kernelBoot": {"kernelArgs": "zovn.run=x",
            "container": {"image": "zovn/vm-guest", "kernelPath": "/vmlinux"}}});
        v["spec"]["domain"]["memory"] = json!({"guest": "1Gi"});
        let ann = launcher_pod(&v).unwrap().metadata.annotations.unwrap();
        let boot = VmBoot::of_annotations(&ann).unwrap();
        assert_eq!(
            boot,
            VmBoot {
                image: "zovn/vm-guest".into(),
                kernel_args: "zovn.run=x".into(),
                cpus: 4,
                memory_mib: 1024
            }
        );
        v["spec"]["domain"]["memory"] = json!({"guest": "lots"});
        assert_eq!(
            launcher_pod(&v).unwrap_err().to_string(),
            "VirtualMachineInstance vm1: spec.domain.memory.guest \"lots\": expected a size such as 256Mi or 1Gi"
        );
        assert_eq!(mebibytes("256Mi"), Some(256));
        assert_eq!(mebibytes("512M"), Some(488));
        assert_eq!(mebibytes("lots"), None);
        assert_eq!(mebibytes("0Mi"), None);
    }

    #[test]
    fn the_vm_example_boots_the_labs_guest() {
        let v: Value =
            serde_norway::from_str(include_str!("../../examples/vm/10-vmi-guest1.yaml")).unwrap();
        let pod = launcher_pod(&v).unwrap();
        let boot = VmBoot::of_annotations(&pod.metadata.annotations.unwrap()).unwrap();
        assert_eq!(boot.image, crate::pods::vm_pod::GUEST_IMAGE);
        assert_eq!(boot.kernel_args, "zovn.run=\"iperf3 -s -D\"");
        assert_eq!((boot.cpus, boot.memory_mib), (1, 256));
        assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("node1"));
    }

    #[test]
    fn vmi_on_a_default_nad_names_it() {
        let mut v: Value = serde_json::from_str(VMI).unwrap();
        v["spec"]["networks"] =
            json!([{"name": "default", "multus": {"networkName": "vhost-net", "default": true}}]);
        let ann = launcher_pod(&v).unwrap().metadata.annotations.unwrap();
        assert_eq!(ann[DEFAULT_NETWORK_ANNOTATION], "vms/vhost-net");
        assert!(!ann.contains_key(VHOST_ANNOTATION), "the NAD asks");
        v["apiVersion"] = json!("kubevirt.io/v1alpha3");
        assert_eq!(
            launcher_pod(&v).unwrap_err().to_string(),
            "kind VirtualMachineInstance needs apiVersion kubevirt.io/v1, not \"kubevirt.io/v1alpha3\""
        );
    }

    #[test]
    fn vmi_with_a_secondary_vhost_network() {
        let mut v: Value = serde_json::from_str(VMI).unwrap();
        v["spec"]["domain"]["devices"]["interfaces"] = json!([
            {"name": "default", "masquerade": {}},
            {"name": "dpdk", "binding": {"name": "vhostuser"}}]);
        v["spec"]["networks"] = json!([
            {"name": "default", "pod": {}},
            {"name": "dpdk", "multus": {"networkName": "vhost-sec"}}]);
        let ann = launcher_pod(&v).unwrap().metadata.annotations.unwrap();
        assert!(!ann.contains_key(VHOST_ANNOTATION), "eth0 stays a veth");
        assert!(!ann.contains_key(DEFAULT_NETWORK_ANNOTATION));
        let nets: Value = serde_json::from_str(&ann[control::multus::NETWORKS_ANNOTATION]).unwrap();
        assert_eq!(
            nets,
            json!([{"name": "vhost-sec", "namespace": "vms", "interface": "net1"}])
        );
        let info = control::model::PodInfo {
            namespace: "vms".into(),
            name: "p".into(),
            uid: "u".into(),
            node: None,
            host_network: false,
            labels: BTreeMap::new(),
            annotations: ann,
            completed: false,
            ports: vec![],
        };
        let missing = secondary_networks(&BTreeMap::new(), &info);
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].ifname, "net1");
        assert_eq!(
            missing[0].config.as_ref().unwrap_err().to_string(),
            "NetworkAttachmentDefinition vms/vhost-sec not found"
        );
        let nad: NetworkAttachmentDefinition = serde_json::from_value(json!({
            "apiVersion": NAD_V1, "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "vhost-sec", "namespace": "vms"},
            "spec": {"config": "{\"type\":\"zstack-ovn-cni\",\"subnet\":\"sec\"}"}}))
        .unwrap();
        assert_eq!(nad_info(&nad).subnet().unwrap(), "sec");
        let nads = BTreeMap::from([(nad.key(), nad)]);
        let found = secondary_networks(&nads, &info);
        assert!(found[0].config.as_ref().unwrap().contains("subnet"));
    }
}
