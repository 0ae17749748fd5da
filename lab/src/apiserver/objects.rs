//! The objects the lab's store accepts — `Namespace` (v1), `Subnet`
//! (`network.zstack.io/v1`) and `Pod` (v1) — checked and normalised the same way by the
//! CLI (before anything is sent) and by the store (before anything is applied).

use control::crd::Subnet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::protocol::{ObjectRef, ResourceKind};

/// `apiVersion` of Namespaces and Pods.
pub const CORE_V1: &str = "v1";
/// `apiVersion` of Subnets.
pub const SUBNET_V1: &str = "network.zstack.io/v1";
pub use crate::object_names::{DEFAULT_NAMESPACE, NameError, check_label, check_subdomain};

/// One accepted object.
#[derive(Debug, Clone, PartialEq)]
pub enum LabObject {
    Namespace(Box<Namespace>),
    Subnet(Box<Subnet>),
    Pod(Box<Pod>),
    Service(Box<Service>),
    NetworkPolicy(Box<k8s_openapi::api::networking::v1::NetworkPolicy>),
    NetworkAttachmentDefinition(Box<crate::multus::NetworkAttachmentDefinition>),
}

/// Why an object is not of a kind the lab accepts ([`kind_of`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    /// `found`: what it is instead (`a list`, `a string`, ...).
    #[error("expected an object with apiVersion and kind, found {found}")]
    NotAnObject { found: &'static str },
    #[error("the object has no `kind`")]
    NoKind,
    #[error(
        "kind EndpointSlice is not accepted: the lab produces EndpointSlices from Services \
         and Pods itself"
    )]
    EndpointSlice,
    /// `api`: the object's `apiVersion` (empty when none).
    #[error(
        "kind {kind}{} is not supported: the lab accepts Namespace (v1), Subnet \
         ({SUBNET_V1}), Pod (v1), Service (v1), NetworkPolicy, NetworkAttachmentDefinition \
         ({}) and VirtualMachineInstance ({})",
        if api.is_empty() { String::new() } else { format!(" ({api})") },
        crate::multus::NAD_V1,
        crate::kubevirt::KUBEVIRT_V1
    )]
    Unsupported { kind: String, api: String },
    /// `api`: the object's `apiVersion` (empty when none).
    #[error(
        "kind {kind} needs apiVersion {want}, not {}",
        if api.is_empty() { "none" } else { api.as_str() }
    )]
    ApiVersion {
        kind: String,
        want: &'static str,
        api: String,
    },
}

/// Why an object is refused (by the CLI before sending, by the store before applying).
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error(transparent)]
    Kind(#[from] KindError),
    /// Not a valid object of its kind (a field of the wrong type).
    #[error(transparent)]
    Decode(#[from] serde_json::Error),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(
        "kind Node is not accepted: the lab registers one Node per lab node itself (`zovn lab \
         delete` takes one away, as `kubectl delete node`)"
    )]
    Node,
    #[error("kind EndpointSlice is not accepted")]
    EndpointSlice,
    #[error("Pod {name}: no spec")]
    PodWithoutSpec { name: String },
    #[error(transparent)]
    Service(#[from] super::services::ServiceError),
    #[error(transparent)]
    NetworkPolicy(#[from] super::netpol::NetpolError),
    #[error(transparent)]
    Nad(#[from] crate::multus::NadError),
    #[error(transparent)]
    Vmi(#[from] crate::kubevirt::VmiError),
}

/// Which supported kind a JSON/YAML object is, from its `apiVersion` and `kind`.
pub fn kind_of(value: &Value) -> Result<ResourceKind, KindError> {
    let Some(obj) = value.as_object() else {
        return Err(KindError::NotAnObject {
            found: type_name(value),
        });
    };
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let api = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let (k, want) = match kind {
        "" => return Err(KindError::NoKind),
        "Namespace" => (ResourceKind::Namespace, CORE_V1),
        "Subnet" => (ResourceKind::Subnet, SUBNET_V1),
        "Pod" => (ResourceKind::Pod, CORE_V1),
        "Service" => (ResourceKind::Service, CORE_V1),
        "NetworkPolicy" => (ResourceKind::NetworkPolicy, super::netpol::NETWORKING_V1),
        "NetworkAttachmentDefinition" => (
            ResourceKind::NetworkAttachmentDefinition,
            crate::multus::NAD_V1,
        ),
        "EndpointSlice" => return Err(KindError::EndpointSlice),
        // deletable (`zovn lab delete`, as `kubectl delete node`), never applied
        "Node" => (ResourceKind::Node, CORE_V1),
        other => {
            return Err(KindError::Unsupported {
                kind: other.to_string(),
                api: api.to_string(),
            });
        }
    };
    if api != want {
        return Err(KindError::ApiVersion {
            kind: kind.to_string(),
            want,
            api: api.to_string(),
        });
    }
    Ok(k)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

impl LabObject {
    /// Decodes, normalises and checks an object given as JSON.
    pub fn from_value(value: Value) -> Result<LabObject, ObjectError> {
        if crate::kubevirt::is_vmi(&value) {
            return LabObject::Pod(Box::new(crate::kubevirt::launcher_pod(&value)?)).normalized();
        }
        let kind = kind_of(&value)?;
        let typed = match kind {
            ResourceKind::Namespace => LabObject::Namespace(Box::new(decode(value)?)),
            ResourceKind::Subnet => LabObject::Subnet(Box::new(decode(value)?)),
            ResourceKind::Pod => LabObject::Pod(Box::new(decode(value)?)),
            ResourceKind::Service => LabObject::Service(Box::new(decode(value)?)),
            ResourceKind::NetworkPolicy => LabObject::NetworkPolicy(Box::new(decode(value)?)),
            ResourceKind::NetworkAttachmentDefinition => {
                LabObject::NetworkAttachmentDefinition(Box::new(decode(value)?))
            }
            ResourceKind::Node => return Err(ObjectError::Node),
            ResourceKind::EndpointSlice => return Err(ObjectError::EndpointSlice),
        };
        typed.normalized()
    }

    /// Clears what users may not set (status; the namespace of cluster-scoped objects),
    /// defaults a Pod's namespace, and checks names.
    pub fn normalized(self) -> Result<LabObject, ObjectError> {
        match self {
            LabObject::Namespace(mut ns) => {
                ns.status = None;
                ns.metadata.namespace = None;
                let name = ns.metadata.name.as_deref().unwrap_or("");
                check_label("Namespace", name)?;
                Ok(LabObject::Namespace(ns))
            }
            LabObject::Subnet(mut sn) => {
                sn.status = None;
                sn.metadata.namespace = None;
                let name = sn.metadata.name.as_deref().unwrap_or("");
                check_subdomain("Subnet", name)?;
                Ok(LabObject::Subnet(sn))
            }
            LabObject::Pod(mut pod) => {
                pod.status = None;
                let ns = pod
                    .metadata
                    .namespace
                    .get_or_insert_with(|| DEFAULT_NAMESPACE.to_string());
                check_label("Pod namespace", ns)?;
                let name = pod.metadata.name.as_deref().unwrap_or("");
                check_subdomain("Pod", name)?;
                if pod.spec.is_none() {
                    return Err(ObjectError::PodWithoutSpec {
                        name: name.to_string(),
                    });
                }
                Ok(LabObject::Pod(pod))
            }
            LabObject::Service(svc) => Ok(LabObject::Service(super::services::normalized(svc)?)),
            LabObject::NetworkPolicy(p) => {
                Ok(LabObject::NetworkPolicy(super::netpol::normalized(p)?))
            }
            LabObject::NetworkAttachmentDefinition(n) => Ok(
                LabObject::NetworkAttachmentDefinition(crate::multus::normalized(n)?),
            ),
        }
    }

    /// The object's Kubernetes JSON.
    pub fn to_value(&self) -> Value {
        let r = match self {
            LabObject::Namespace(o) => serde_json::to_value(o),
            LabObject::Subnet(o) => serde_json::to_value(o),
            LabObject::Pod(o) => serde_json::to_value(o),
            LabObject::Service(o) => serde_json::to_value(o),
            LabObject::NetworkPolicy(o) => serde_json::to_value(o),
            LabObject::NetworkAttachmentDefinition(o) => serde_json::to_value(o),
        };
        // k8s-openapi and kube types always serialise (string keys, finite numbers)
        r.unwrap_or(Value::Null)
    }

    /// Kind, namespace and name.
    pub fn object_ref(&self) -> ObjectRef {
        match self {
            LabObject::Namespace(o) => ObjectRef {
                kind: ResourceKind::Namespace,
                namespace: None,
                name: o.metadata.name.clone().unwrap_or_default(),
            },
            LabObject::Subnet(o) => ObjectRef {
                kind: ResourceKind::Subnet,
                namespace: None,
                name: o.metadata.name.clone().unwrap_or_default(),
            },
            LabObject::Pod(o) => ObjectRef {
                kind: ResourceKind::Pod,
                namespace: Some(
                    o.metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
                ),
                name: o.metadata.name.clone().unwrap_or_default(),
            },
            LabObject::NetworkPolicy(o) => super::netpol::object_ref(o),
            LabObject::NetworkAttachmentDefinition(o) => nad_ref(o),
            LabObject::Service(o) => ObjectRef {
                kind: ResourceKind::Service,
                namespace: Some(
                    o.metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
                ),
                name: o.metadata.name.clone().unwrap_or_default(),
            },
        }
    }
}

/// `network-attachment-definition/<ns>/<name>`.
fn nad_ref(n: &crate::multus::NetworkAttachmentDefinition) -> ObjectRef {
    ObjectRef {
        kind: ResourceKind::NetworkAttachmentDefinition,
        namespace: Some(
            n.metadata
                .namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
        ),
        name: n.metadata.name.clone().unwrap_or_default(),
    }
}

fn decode<T: DeserializeOwned>(value: Value) -> Result<T, serde_json::Error> {
    serde_json::from_value(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_and_api_versions() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod"});
        assert_eq!(kind_of(&pod), Ok(ResourceKind::Pod));
        let sn = json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet"});
        assert_eq!(kind_of(&sn), Ok(ResourceKind::Subnet));
        let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
        let e = kind_of(&dep).expect_err("Deployment").to_string();
        assert_eq!(
            e,
            "kind Deployment (apps/v1) is not supported: the lab accepts Namespace (v1), \
             Subnet (network.zstack.io/v1), Pod (v1), Service (v1), NetworkPolicy, \
             NetworkAttachmentDefinition (k8s.cni.cncf.io/v1) and VirtualMachineInstance \
             (kubevirt.io/v1)"
        );
        let e = kind_of(&json!({"kind": "Deployment"})).expect_err("no api");
        assert!(
            e.to_string()
                .starts_with("kind Deployment is not supported: ")
        );
        let bad = json!({"apiVersion": "v2", "kind": "Pod"});
        assert_eq!(
            kind_of(&bad).expect_err("v2").to_string(),
            "kind Pod needs apiVersion v1, not v2"
        );
        assert_eq!(
            kind_of(&json!({"kind": "Pod"}))
                .expect_err("none")
                .to_string(),
            "kind Pod needs apiVersion v1, not none"
        );
        assert_eq!(
            kind_of(&json!([1])).expect_err("list").to_string(),
            "expected an object with apiVersion and kind, found a list"
        );
        assert_eq!(
            kind_of(&json!({"apiVersion": "v1"})),
            Err(KindError::NoKind)
        );
    }

    #[test]
    fn pod_defaults_namespace_and_drops_status() {
        let v = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]},
            "status": {"phase": "Running"}});
        let o = LabObject::from_value(v).expect("pod");
        let LabObject::Pod(p) = &o else {
            panic!("not a pod")
        };
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        assert!(p.status.is_none());
        assert_eq!(o.object_ref().to_string(), "pod/default/web");
        let back = o.to_value();
        assert_eq!(
            back["spec"]["containers"][0]["ports"][0]["containerPort"],
            80
        );
    }

    #[test]
    fn names_are_checked() {
        let v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "Web_1"},
            "spec": {"containers": []}});
        let e = LabObject::from_value(v).expect_err("bad name").to_string();
        assert_eq!(
            e,
            "Pod name \"Web_1\" is not a DNS-1123 subdomain (lowercase letters, digits, '-' \
             and '.', up to 253 chars)"
        );
        let v = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {}});
        assert_eq!(
            LabObject::from_value(v).expect_err("no name").to_string(),
            "Namespace: metadata.name is missing"
        );
        let v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}});
        assert_eq!(
            LabObject::from_value(v).expect_err("no spec").to_string(),
            "Pod web: no spec"
        );
        let v = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}});
        assert!(matches!(LabObject::from_value(v), Err(ObjectError::Node)));
        assert!(check_subdomain("Pod", "a.b-c").is_ok());
        assert!(check_label("Namespace", "a.b").is_err());
        let v = json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
            "metadata": {"name": "blue", "namespace": "x"}, "spec": {"cidr": 7}});
        assert!(LabObject::from_value(v).is_err(), "cidr must be a string");
    }
}
