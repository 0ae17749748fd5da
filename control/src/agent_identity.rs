//! Which node a node agent's request comes from, as the API server authenticated it: the
//! chassis signer ([`crate::chassis_signer`]) and the admission webhook
//! ([`crate::admission`]) grant an agent only what concerns its own node.
//!
//! The proof is the agent's **pod-bound** service-account token: the API server records
//! the pod's name and UID in the request's user info (a token copied out of a Secret
//! carries neither), and the pod, looked up now, must still be that pod, run as the
//! agent's service account and be scheduled on the node in question. [`requester`] and
//! [`pod_on_node`] are the pure decisions; [`pod_facts`] reads the pod.

use std::collections::BTreeMap;

use api::chassis_cert::{POD_NAME_EXTRA, POD_UID_EXTRA};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

/// Why a request is not the agent of the node it concerns; the text is what the requester
/// reads (a Denied condition, an admission refusal).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("requested by {user:?}, not by the node agent's service account {expected}")]
    NotTheAgent { user: String, expected: String },
    #[error(
        "the requester's token is not bound to a pod (no {POD_NAME_EXTRA}/{POD_UID_EXTRA} in the request): the node agent must use its pod-bound service-account token"
    )]
    NoPodBinding,
    #[error("pod {namespace}/{name} named by the requester's token no longer exists")]
    PodGone { namespace: String, name: String },
    #[error("pod {namespace}/{name} has UID {found}, the requester's token was bound to {token}")]
    PodReplaced {
        namespace: String,
        name: String,
        found: String,
        token: String,
    },
    #[error(
        "pod {namespace}/{name} runs as service account {found:?}, not the node agent's {expected}"
    )]
    NotAnAgentPod {
        namespace: String,
        name: String,
        found: String,
        expected: String,
    },
    #[error("pod {namespace}/{name} is not scheduled on a node")]
    Unscheduled { namespace: String, name: String },
    #[error(
        "the request concerns node {requested:?}, but the requesting agent pod {namespace}/{name} runs on node {node:?}"
    )]
    OtherNode {
        requested: String,
        namespace: String,
        name: String,
        node: String,
    },
}

/// The node agent's service account, the only requester granted without an administrator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentAccount {
    pub namespace: String,
    pub name: String,
}

impl AgentAccount {
    /// `system:serviceaccount:<namespace>:<name>`, as the API server names the requester.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

/// The pod a requester's token is bound to, as the request records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// What the signer needs to know of that pod, as the API server has it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub uid: String,
    pub service_account: String,
    pub node: Option<String>,
}

fn one<'a>(extra: &'a BTreeMap<String, Vec<String>>, key: &str) -> Option<&'a str> {
    match extra.get(key).map(Vec::as_slice) {
        Some([v]) if !v.is_empty() => Some(v.as_str()),
        _ => None,
    }
}

/// Step 1: the requester must be the agent's service account with a pod-bound token; gives
/// the pod to look up.
pub fn requester(
    username: Option<&str>,
    extra: &BTreeMap<String, Vec<String>>,
    agent: &AgentAccount,
) -> Result<BoundPod, Refusal> {
    let expected = agent.username();
    let user = username.unwrap_or_default();
    if user != expected {
        return Err(Refusal::NotTheAgent {
            user: user.to_string(),
            expected,
        });
    }
    match (one(extra, POD_NAME_EXTRA), one(extra, POD_UID_EXTRA)) {
        (Some(name), Some(uid)) => Ok(BoundPod {
            namespace: agent.namespace.clone(),
            name: name.to_string(),
            uid: uid.to_string(),
        }),
        _ => Err(Refusal::NoPodBinding),
    }
}

/// Step 2: the pod exists as the token knew it, is an agent pod, and runs on `node`.
pub fn pod_on_node(
    bound: &BoundPod,
    pod: Option<&PodFacts>,
    agent: &AgentAccount,
    node: &str,
) -> Result<(), Refusal> {
    let (namespace, name) = (bound.namespace.clone(), bound.name.clone());
    let Some(pod) = pod else {
        return Err(Refusal::PodGone { namespace, name });
    };
    if pod.uid != bound.uid {
        return Err(Refusal::PodReplaced {
            namespace,
            name,
            found: pod.uid.clone(),
            token: bound.uid.clone(),
        });
    }
    if pod.service_account != agent.name {
        return Err(Refusal::NotAnAgentPod {
            namespace,
            name,
            found: pod.service_account.clone(),
            expected: agent.name.clone(),
        });
    }
    match &pod.node {
        None => Err(Refusal::Unscheduled { namespace, name }),
        Some(on) if on != node => Err(Refusal::OtherNode {
            requested: node.to_string(),
            namespace,
            name,
            node: on.clone(),
        }),
        Some(_) => Ok(()),
    }
}

/// The bound pod as the API server has it now (`None`: it is gone).
pub async fn pod_facts(kube: &Client, bound: &BoundPod) -> Result<Option<PodFacts>, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), &bound.namespace);
    Ok(pods.get_opt(&bound.name).await?.map(|p| PodFacts {
        uid: p.metadata.uid.unwrap_or_default(),
        service_account: p
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        node: p.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent() -> AgentAccount {
        AgentAccount {
            namespace: "kube-system".into(),
            name: "zs-node".into(),
        }
    }

    fn extra(name: &str, uid: &str) -> BTreeMap<String, Vec<String>> {
        BTreeMap::from([
            (POD_NAME_EXTRA.to_string(), vec![name.to_string()]),
            (POD_UID_EXTRA.to_string(), vec![uid.to_string()]),
        ])
    }

    fn facts(uid: &str, sa: &str, node: Option<&str>) -> PodFacts {
        PodFacts {
            uid: uid.into(),
            service_account: sa.into(),
            node: node.map(str::to_string),
        }
    }

    #[test]
    fn only_the_agent_account_with_a_pod_bound_token_is_considered() {
        let user = "system:serviceaccount:kube-system:zs-node";
        let bound = requester(Some(user), &extra("zs-node-abcde", "u1"), &agent()).unwrap();
        assert_eq!(bound.name, "zs-node-abcde");
        assert_eq!(bound.namespace, "kube-system");
        // a tenant's service account, a user, nobody
        for u in [
            Some("system:serviceaccount:tenant-a:zs-node"),
            Some("alice"),
            None,
        ] {
            let e = requester(u, &extra("p", "u"), &agent()).unwrap_err();
            assert!(matches!(e, Refusal::NotTheAgent { .. }), "{e}");
            assert!(e.to_string().contains(user), "{e}");
        }
        // a legacy secret token: no pod binding
        assert_eq!(
            requester(Some(user), &BTreeMap::new(), &agent()),
            Err(Refusal::NoPodBinding)
        );
        let mut two = extra("a", "u");
        two.insert(POD_NAME_EXTRA.into(), vec!["a".into(), "b".into()]);
        assert_eq!(
            requester(Some(user), &two, &agent()),
            Err(Refusal::NoPodBinding)
        );
    }

    #[test]
    fn the_pod_must_be_the_same_agent_pod_on_the_named_node() {
        let bound = BoundPod {
            namespace: "kube-system".into(),
            name: "zs-node-abcde".into(),
            uid: "u1".into(),
        };
        let a = agent();
        let ok = facts("u1", "zs-node", Some("node1"));
        assert_eq!(pod_on_node(&bound, Some(&ok), &a, "node1"), Ok(()));
        let other = pod_on_node(&bound, Some(&ok), &a, "node2").unwrap_err();
        assert!(
            other.to_string().contains("\"node2\"") && other.to_string().contains("\"node1\""),
            "{other}"
        );
        assert!(matches!(
            pod_on_node(&bound, None, &a, "node1"),
            Err(Refusal::PodGone { .. })
        ));
        assert!(matches!(
            pod_on_node(
                &bound,
                Some(&facts("u2", "zs-node", Some("node1"))),
                &a,
                "node1"
            ),
            Err(Refusal::PodReplaced { .. })
        ));
        assert!(matches!(
            pod_on_node(
                &bound,
                Some(&facts("u1", "default", Some("node1"))),
                &a,
                "node1"
            ),
            Err(Refusal::NotAnAgentPod { .. })
        ));
        assert!(matches!(
            pod_on_node(&bound, Some(&facts("u1", "zs-node", None)), &a, "node1"),
            Err(Refusal::Unscheduled { .. })
        ));
    }
}
