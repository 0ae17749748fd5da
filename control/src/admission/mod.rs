//! The controller's validating admission webhook: what RBAC cannot say.
//!
//! RBAC gives every node agent the same service account, so "patch nodes" would let one
//! node's agent rewrite every Node; and any user who may create pods could write the
//! controller's allocation record or join a VM's address lease. The webhook (registered
//! by the chart's ValidatingWebhookConfiguration, served by every controller replica, the
//! standby included) refuses, each with a message naming the rule:
//!
//! | object | who | refused unless |
//! |---|---|---|
//! | Node (update) | the node agent's service account | the agent's pod-bound token names an agent pod on *that* Node ([`crate::agent_identity`]) and only [`node::AGENT_NODE_ANNOTATIONS`] change |
//! | Pod (create, update) | anyone but the controller | [`pod::CONTROLLER_POD_ANNOTATIONS`] unchanged |
//! | Pod (create, update) | anyone but KubeVirt | `kubevirt.io/domain` unchanged (KubeVirt: only on the pod its VMI of that name controls) |
//!
//! | module | holds |
//! |---|---|
//! | [`node`] | what an agent may change on its own Node (pure) |
//! | [`pod`] | the pod annotations only the controller or KubeVirt write (pure) |
//! | [`serve`] | the HTTPS server and the decision for one AdmissionReview (a refusal: [`Denial`]) |

pub mod node;
pub mod pod;
pub mod serve;

pub use pod::PodPolicy;
pub use serve::{AdmissionConfig, AdmissionError, Denial, PATH, Webhook, bind, decide};
