//! The signer's loop: watches the chassis CertificateSigningRequests, approves or denies
//! each pending one, and signs the approved ones. Level-triggered: a request it failed to
//! handle is tried again a few seconds later, and every request is seen again at each
//! relist, so a restart or a lost leadership loses nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::mpsc;

use super::Refusal;
use super::issue::{self, ChassisCa};
use crate::agent_identity::{self as identity, AgentAccount};
use api::chassis_cert::SIGNER_NAME;

/// How the signer runs.
#[derive(Debug)]
pub struct SignerConfig {
    pub ca: std::sync::Arc<ChassisCa>,
    /// The node agent's service account (`namespace`/`name`).
    pub agent: AgentAccount,
    /// Lifetime of an issued certificate (agents renew at two thirds of it).
    pub validity: Duration,
}

/// Reason of the Approved condition the signer sets.
pub const APPROVED_REASON: &str = "ZovnChassisIdentityVerified";
/// Reason of the Denied condition the signer sets.
pub const DENIED_REASON: &str = "ZovnChassisIdentityRefused";

const RETRY: Duration = Duration::from_secs(5);

/// A request the signer could not handle this time (it is tried again).
#[derive(Debug, thiserror::Error)]
enum SignerError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Ca(#[from] super::issue::CaError),
    #[error("encoding the certificate: {0}")]
    Encode(#[from] serde_json::Error),
}

/// What became of one request.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Signed now (approved by us now, or by an administrator before).
    Signed {
        chassis: String,
    },
    Denied(String),
    /// Nothing to do: already issued, denied or failed.
    Done,
}

fn condition(csr: &CertificateSigningRequest, ty: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == ty && c.status == "True"))
}

/// The identity checks of a pending request: the chassis it may have, or why not.
async fn verify(
    kube: &Client,
    csr: &CertificateSigningRequest,
    agent: &AgentAccount,
) -> Result<Result<issue::ParsedRequest, Refusal>, kube::Error> {
    let empty = BTreeMap::new();
    let extra = csr.spec.extra.as_ref().unwrap_or(&empty);
    let bound = match identity::requester(csr.spec.username.as_deref(), extra, agent) {
        Ok(b) => b,
        Err(r) => return Ok(Err(r.into())),
    };
    let parsed = match issue::parse_request(&csr.spec.request.0) {
        Ok(p) => p,
        Err(r) => return Ok(Err(r)),
    };
    let facts = identity::pod_facts(kube, &bound).await?;
    Ok(
        identity::pod_on_node(&bound, facts.as_ref(), agent, &parsed.chassis)
            .map(|()| parsed)
            .map_err(Refusal::from),
    )
}

async fn handle(
    kube: &Client,
    cfg: &SignerConfig,
    csr: &CertificateSigningRequest,
) -> Result<Outcome, SignerError> {
    let api: Api<CertificateSigningRequest> = Api::all(kube.clone());
    let name = csr.metadata.name.clone().unwrap_or_default();
    let issued = csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty());
    if csr.spec.signer_name != SIGNER_NAME
        || issued
        || condition(csr, "Denied")
        || condition(csr, "Failed")
    {
        return Ok(Outcome::Done);
    }
    let parsed = if condition(csr, "Approved") {
        // approved by an administrator: the request itself must still be a chassis's
        match issue::parse_request(&csr.spec.request.0) {
            Ok(p) => p,
            Err(r) => {
                fail(&api, csr, &r.to_string()).await?;
                return Ok(Outcome::Denied(r.to_string()));
            }
        }
    } else {
        match verify(kube, csr, &cfg.agent).await? {
            Ok(p) => {
                let msg = format!(
                    "{} asked from its pod on node {}",
                    cfg.agent.username(),
                    p.chassis
                );
                set_condition(&api, csr, "Approved", APPROVED_REASON, &msg).await?;
                p
            }
            Err(r) => {
                set_condition(&api, csr, "Denied", DENIED_REASON, &r.to_string()).await?;
                return Ok(Outcome::Denied(r.to_string()));
            }
        }
    };
    let pem = cfg.ca.sign(&parsed, cfg.validity)?;
    let cert = serde_json::to_value(ByteString(pem.into_bytes()))?;
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"certificate": cert}})),
    )
    .await?;
    Ok(Outcome::Signed {
        chassis: parsed.chassis,
    })
}

/// Sets the only condition of a request without one (Approved or Denied), failing if the
/// request changed since it was read (another signer, an administrator).
async fn set_condition(
    api: &Api<CertificateSigningRequest>,
    csr: &CertificateSigningRequest,
    ty: &str,
    reason: &str,
    message: &str,
) -> Result<(), kube::Error> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let patch = json!({
        "metadata": {"resourceVersion": csr.metadata.resource_version},
        "status": {"conditions": [{
            "type": ty, "status": "True", "reason": reason, "message": message,
            "lastUpdateTime": now.to_string(),
        }]}
    });
    let name = csr.metadata.name.clone().unwrap_or_default();
    api.patch_approval(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
}

/// Marks an approved request the signer will not sign as Failed (a status condition).
async fn fail(
    api: &Api<CertificateSigningRequest>,
    csr: &CertificateSigningRequest,
    message: &str,
) -> Result<(), kube::Error> {
    let mut conditions = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut failed: k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition =
        serde_json::from_value(json!({"type": "Failed", "status": "True"}))
            .map_err(kube::Error::SerdeError)?;
    failed.reason = Some("ZovnChassisRequestInvalid".into());
    failed.message = Some(message.to_string());
    conditions.push(failed);
    let name = csr.metadata.name.clone().unwrap_or_default();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"resourceVersion": csr.metadata.resource_version},
            "status": {"conditions": conditions}
        })),
    )
    .await
    .map(|_| ())
}

/// Runs the signer until the process ends.
pub async fn run(kube: Client, cfg: SignerConfig) {
    let api: Api<CertificateSigningRequest> = Api::all(kube.clone());
    let wc = watcher::Config::default()
        .timeout(api::api_timeouts::WATCH_TIMEOUT_SECS)
        .fields(&format!("spec.signerName={SIGNER_NAME}"));
    let (retry_tx, mut retry_rx) = mpsc::unbounded_channel::<String>();
    let mut stream = watcher::watcher(api.clone(), wc).default_backoff().boxed();
    tracing::info!(signer = SIGNER_NAME, agent = %cfg.agent.username(), "chassis certificate signer started");
    loop {
        let csr = tokio::select! {
            item = stream.next() => match item {
                Some(Ok(Event::Apply(o) | Event::InitApply(o))) => o,
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "CertificateSigningRequest watch error; retrying");
                    continue;
                }
                None => return,
            },
            Some(name) = retry_rx.recv() => match api.get_opt(&name).await {
                Ok(Some(o)) => o,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(csr = %name, error = %e, "cannot read the request; retrying");
                    requeue(&retry_tx, name);
                    continue;
                }
            },
        };
        let name = csr.metadata.name.clone().unwrap_or_default();
        match handle(&kube, &cfg, &csr).await {
            Ok(Outcome::Signed { chassis }) => {
                tracing::info!(csr = %name, %chassis, "chassis certificate issued")
            }
            Ok(Outcome::Denied(why)) => {
                tracing::warn!(csr = %name, reason = %why, "chassis certificate refused")
            }
            Ok(Outcome::Done) => {}
            Err(e) => {
                tracing::warn!(csr = %name, error = %e, "chassis certificate request not handled; retrying in 5 s");
                requeue(&retry_tx, name);
            }
        }
    }
}

fn requeue(tx: &mpsc::UnboundedSender<String>, name: String) {
    let tx = tx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(RETRY).await;
        let _ = tx.send(name);
    });
}
