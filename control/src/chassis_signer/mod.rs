//! The chassis certificate signer: approves and signs the node agents' requests for an OVN
//! client certificate whose CN is their chassis, and nobody else's.
//!
//! A request ([`api::chassis_cert`]) is granted only when
//! 1. it was made with the node agent's service account, through a pod-bound token (the
//!    API server records the pod's name and UID in the request: a token copied out of a
//!    secret carries neither),
//! 2. that pod still exists with that UID, runs as the agent's service account and is
//!    scheduled on the Node whose name the certificate's CN gives, and
//! 3. the certificate request asks for a CN and nothing else (no alternative names, no CA).
//!
//! Anything else is denied with a condition that names the reason (`kubectl get csr`). A
//! request an administrator approved by hand is signed after check 3 alone: approval is
//! theirs to give (`approve` on `signers/network.zstack.io/ovn-chassis`).
//!
//! | module | holds |
//! |---|---|
//! | [`issue`] | the chassis CA, parsing a request, issuing a client certificate |
//! | [`run`] | the watch on CertificateSigningRequests: approve or deny, then sign |

//!
//! Who asked, from which pod on which node: [`crate::agent_identity`], shared with the
//! admission webhook.

pub mod issue;
pub mod run;

pub use crate::agent_identity::AgentAccount;
pub use issue::{CaError, ChassisCa};
pub use run::{SignerConfig, run};

/// Why a request is denied; the text becomes the Denied condition's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Identity(#[from] crate::agent_identity::Refusal),
    #[error("the certificate request is not acceptable: {0}")]
    BadRequest(#[from] issue::BadRequest),
}
