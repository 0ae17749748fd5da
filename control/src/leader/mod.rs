//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several controller
//! replicas exactly one writes the NB and allocates addresses.
//!
//! The protocol is client-go's: a candidate reads the Lease; it writes itself as holder
//! when the Lease is absent, released (empty holder), already its own, or expired, and
//! a holder renews every retry period. Every write carries the `resourceVersion` read, so of
//! two candidates racing for one version the apiserver accepts one and answers the other
//! 409. Expiry is judged by the local time at which the observed record last changed
//! ([`decide`]), never by comparing remote timestamps with our clock. A holder that cannot
//! renew within the renew deadline has lost: [`Elector::hold`] returns and the caller stops
//! all work at once. [`Elector::release`] clears the holder on a graceful stop.

pub mod decide;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;

pub use decide::{Decision, Observed, Record, decide};

/// Where and how to elect.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// Our identity (the pod name in a cluster).
    pub identity: String,
    /// How long a holder's lease lasts after its last renewal (as observed by others).
    pub lease_duration: Duration,
    /// A holder that could not renew for this long stops.
    pub renew_deadline: Duration,
    /// Time between attempts (acquire and renew).
    pub retry_period: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("Lease {0}: {1}")]
    Kube(String, #[source] kube::Error),
    #[error(
        "leader election timings: need lease duration > renew deadline > retry period > 0 \
         (got {0:?}, {1:?}, {2:?})"
    )]
    Timings(Duration, Duration, Duration),
}

/// One attempt's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the Lease (acquired or renewed).
    Leading,
    /// Someone else holds it.
    Standby { holder: String },
    /// Another candidate wrote first (409): try again later.
    Lost,
}

/// Why [`Elector::hold`] returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// Another identity holds the Lease now.
    Taken { holder: String },
    /// No successful renewal within the renew deadline.
    RenewDeadline { last_error: Option<String> },
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LostReason::Taken { holder } => write!(f, "the Lease is held by {holder}"),
            LostReason::RenewDeadline { last_error: None } => {
                f.write_str("could not renew the Lease within the renew deadline")
            }
            LostReason::RenewDeadline {
                last_error: Some(e),
            } => write!(
                f,
                "could not renew the Lease within the renew deadline (last error: {e})"
            ),
        }
    }
}

/// A candidate for one Lease.
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
    observed: Option<Observed>,
    /// The holder last reported by the standby log line.
    last_standby_holder: Option<String>,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector").field("cfg", &self.cfg).finish()
    }
}

fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.clone().unwrap_or_default();
    Record {
        holder: spec.holder_identity,
        renew_time: spec.renew_time.map(|t| t.0.to_string()),
        lease_duration: spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs),
        transitions: spec.lease_transitions.unwrap_or(0),
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

impl Elector {
    pub fn new(client: kube::Client, cfg: LeaseConfig) -> Result<Self, LeaseError> {
        let zero = Duration::ZERO;
        if !(cfg.lease_duration > cfg.renew_deadline
            && cfg.renew_deadline > cfg.retry_period
            && cfg.retry_period > zero)
        {
            return Err(LeaseError::Timings(
                cfg.lease_duration,
                cfg.renew_deadline,
                cfg.retry_period,
            ));
        }
        Ok(Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: None,
            last_standby_holder: None,
        })
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    fn err(&self, e: kube::Error) -> LeaseError {
        LeaseError::Kube(format!("{}/{}", self.cfg.namespace, self.cfg.name), e)
    }

    /// Our spec: holder us, renewed now.
    fn spec(&self, acquire_time: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.cfg.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquire_time.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// One acquire-or-renew attempt.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, LeaseError> {
        let current = match self.api.get(&self.cfg.name).await {
            Ok(l) => Some(l),
            Err(e) if is_not_found(&e) => None,
            Err(e) => return Err(self.err(e)),
        };
        let now = Instant::now();
        let Some(current) = current else {
            self.observed = None;
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(l) => {
                    self.observed = Some(Observed::update(None, record_of(&l), now));
                    Ok(Attempt::Leading)
                }
                Err(e) if is_conflict(&e) => Ok(Attempt::Lost),
                Err(e) => Err(self.err(e)),
            };
        };
        self.observed = Some(Observed::update(
            self.observed.take(),
            record_of(&current),
            now,
        ));
        let decision = decide(
            self.observed.as_ref(),
            &self.cfg.identity,
            now,
            self.cfg.lease_duration,
        );
        let (renew, transitions) = match decision {
            Decision::Standby { holder } => return Ok(Attempt::Standby { holder }),
            Decision::Acquire { renew, transitions } => (renew, transitions),
        };
        let acquire_time = if renew {
            current.spec.as_ref().and_then(|s| s.acquire_time.clone())
        } else {
            None
        };
        let mut next = current.clone();
        // `metadata.resourceVersion` stays as read: a concurrent writer makes this a 409
        next.spec = Some(self.spec(acquire_time, transitions));
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &next)
            .await
        {
            Ok(l) => {
                self.observed = Some(Observed::update(None, record_of(&l), now));
                Ok(Attempt::Leading)
            }
            Err(e) if is_conflict(&e) => Ok(Attempt::Lost),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Tries every retry period until we hold the Lease. Logs "standby: leader is X" when
    /// the holder changes; `on_standby` is told the holder after each standby attempt.
    pub async fn acquire(&mut self, mut on_standby: impl FnMut(&str)) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Leading) => {
                    self.last_standby_holder = None;
                    return;
                }
                Ok(Attempt::Standby { holder }) => {
                    if self.last_standby_holder.as_deref() != Some(holder.as_str()) {
                        tracing::info!(leader = %holder, identity = %self.cfg.identity, "standby: leader is {holder}");
                        self.last_standby_holder = Some(holder.clone());
                    }
                    on_standby(&holder);
                }
                Ok(Attempt::Lost) => {
                    tracing::debug!("another candidate wrote the Lease first");
                }
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
            }
            tokio::time::sleep(self.cfg.retry_period).await;
        }
    }

    /// Renews every retry period while we lead; returns when leadership is lost (another
    /// holder, or no successful renewal within the renew deadline). The caller must stop
    /// all work at once.
    pub async fn hold(&mut self) -> LostReason {
        // a renewal counts from the moment its request left: conservative
        let mut last_ok = Instant::now();
        loop {
            tokio::time::sleep(self.cfg.retry_period).await;
            let started = Instant::now();
            let left = (last_ok + self.cfg.renew_deadline).saturating_duration_since(started);
            let last_error = match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(Attempt::Leading)) => {
                    last_ok = started;
                    None
                }
                Ok(Ok(Attempt::Standby { holder })) => return LostReason::Taken { holder },
                Ok(Ok(Attempt::Lost)) => Some("conflict (409)".to_string()),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "Lease renewal failed");
                    Some(e.to_string())
                }
                Err(_) => Some("renewal timed out".to_string()),
            };
            if Instant::now() >= last_ok + self.cfg.renew_deadline {
                return LostReason::RenewDeadline { last_error };
            }
        }
    }

    /// Clears the holder if the Lease is still ours, so a successor need not wait for expiry
    /// (client-go's ReleaseOnCancel).
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        let mut current = match self.api.get(&self.cfg.name).await {
            Ok(l) => l,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(self.err(e)),
        };
        let ours = current
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.cfg.identity.as_str());
        if !ours {
            return Ok(());
        }
        if let Some(spec) = current.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        self.api
            .replace(&self.cfg.name, &PostParams::default(), &current)
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}
