//! [`NodeCtx`]: what every pod attachment ([`crate::attach`]) works with — the node's OVS
//! (through [`NodeOvs`]), the host plumbing ([`Plumbing`]), the pod source, the sandbox
//! and vhost-user records, the metrics, the datapath decision and the per-sandbox locks —
//! and the rules they share: one lock per sandbox, and one way to wait for the
//! controller's annotation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cni::CniError;
use cni::error::code;

use crate::agent::metrics::Metrics;
use crate::agent::report::{AgentEvent, EventType, Subject};
use crate::attach::plumbing::Plumbing;
use crate::attach::state::StateStore;
use crate::attach::vhost_state::VhostPorts;
use crate::datapath::DatapathManager;
use crate::ovs::NodeOvs;
use crate::source::{PodInfo, PodSource};

/// The node's shared context (see the module doc).
pub struct NodeCtx {
    node_name: String,
    mtu: u32,
    ovs: Arc<dyn NodeOvs>,
    plumbing: Arc<dyn Plumbing>,
    pods: Arc<dyn PodSource>,
    state: StateStore,
    vhost: VhostPorts,
    metrics: Arc<Metrics>,
    datapath: DatapathManager,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    promotions: crate::attach::promote_queue::Promotions,
    afxdp_claims: crate::attach::afxdp_budget::Claims,
}

/// The parts of a [`NodeCtx`].
pub struct NodeParts {
    pub node_name: String,
    /// Default pod MTU (a config's `mtu` and the datapath decision win).
    pub mtu: u32,
    pub ovs: Arc<dyn NodeOvs>,
    pub plumbing: Arc<dyn Plumbing>,
    pub pods: Arc<dyn PodSource>,
    pub state: StateStore,
    pub vhost: VhostPorts,
    pub metrics: Arc<Metrics>,
    pub datapath: DatapathManager,
}

impl NodeCtx {
    pub fn new(p: NodeParts) -> NodeCtx {
        NodeCtx {
            node_name: p.node_name,
            mtu: p.mtu,
            ovs: p.ovs,
            plumbing: p.plumbing,
            pods: p.pods,
            state: p.state,
            vhost: p.vhost,
            metrics: p.metrics,
            datapath: p.datapath,
            locks: Mutex::new(HashMap::new()),
            promotions: Default::default(),
            afxdp_claims: Default::default(),
        }
    }

    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    pub fn ovs(&self) -> &dyn NodeOvs {
        self.ovs.as_ref()
    }

    pub fn plumbing(&self) -> &dyn Plumbing {
        self.plumbing.as_ref()
    }

    pub fn pods(&self) -> &dyn PodSource {
        self.pods.as_ref()
    }

    /// The veth sandboxes' records.
    pub fn state(&self) -> &StateStore {
        &self.state
    }

    /// The vhost-user interfaces' records.
    pub fn vhost(&self) -> &VhostPorts {
        &self.vhost
    }

    /// Fast-start ports waiting for AF_XDP, and the ADDs in flight (see
    /// [`crate::attach::promote_queue`]).
    pub fn promotions(&self) -> &crate::attach::promote_queue::Promotions {
        &self.promotions
    }

    /// The AF_XDP port claims of ADDs in flight (see [`crate::attach::afxdp_budget`]).
    pub fn afxdp_claims(&self) -> &crate::attach::afxdp_budget::Claims {
        &self.afxdp_claims
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn datapath(&self) -> &DatapathManager {
        &self.datapath
    }

    /// The lock every request and reconcile of `container_id`'s sandbox holds while it
    /// changes that sandbox's ports and records.
    pub fn sandbox_lock(&self, container_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, l| Arc::strong_count(l) > 1);
        m.entry(container_id.to_string()).or_default().clone()
    }

    /// Waits (at most `budget`) for the controller's answer on pod `ns/name` (`ready`),
    /// then checks the pod is scheduled here. `what` completes "timed out … waiting for
    /// the controller to …" (a CNI error 50 with it on timeout).
    pub async fn wait_for_pod(
        &self,
        ns: &str,
        name: &str,
        budget: Duration,
        ready: &(dyn Fn(&PodInfo) -> bool + Send + Sync),
        what: &str,
    ) -> Result<PodInfo, CniError> {
        let key = format!("{ns}/{name}");
        let (pod, done) = self
            .pods
            .wait_pod(ns, name, budget, ready)
            .await
            .map_err(|e| CniError::new(code::TRY_AGAIN_LATER, format!("pod {key}: {e}")))?;
        let pod = match (pod, done) {
            (Some(p), true) => p,
            (seen, _) => {
                return Err(CniError::new(
                    code::ANNOTATION_TIMEOUT,
                    format!(
                        "timed out after {:.1} s waiting for the controller to {what}{}",
                        budget.as_secs_f64(),
                        if seen.is_none() {
                            " (the pod does not exist)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        };
        self.on_this_node(&pod)?;
        Ok(pod)
    }

    /// A pod scheduled on another node is refused.
    pub fn on_this_node(&self, pod: &PodInfo) -> Result<(), CniError> {
        match &pod.node_name {
            Some(n) if *n != self.node_name => Err(CniError::new(
                code::AGENT_REFUSED,
                format!(
                    "pod {} is scheduled on node {n}, not on this node ({})",
                    pod.key(),
                    self.node_name
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Records an event (best effort: a failure is logged at debug level).
    pub async fn event(&self, subject: Subject, t: EventType, reason: &str, message: String) {
        let ev = AgentEvent {
            subject,
            event_type: t,
            reason: reason.into(),
            message,
            node: self.node_name.clone(),
        };
        if let Err(e) = self.pods.event(&ev).await {
            tracing::debug!(error = %e, reason, "event not recorded");
        }
    }

    /// An event on a pod.
    pub async fn pod_event(
        &self,
        ns: &str,
        name: &str,
        t: EventType,
        reason: &str,
        message: String,
    ) {
        let subject = Subject::Pod {
            namespace: ns.into(),
            name: name.into(),
        };
        self.event(subject, t, reason, message).await;
    }

    /// An event on this node.
    pub async fn node_event(&self, t: EventType, reason: &str, message: String) {
        self.event(Subject::Node(self.node_name.clone()), t, reason, message)
            .await;
    }
}
