//! The node's own OVN client certificate (CN = its chassis), for ovn-controller's TLS
//! connection to the Southbound database.
//!
//! The key is made here and never leaves the node (`chassis.key`, mode 0600). The agent
//! asks for a certificate with a Kubernetes CertificateSigningRequest
//! ([`api::chassis_cert`]), which the controller's signer grants only to the agent pod
//! running on this node; the issued certificate is written beside the key
//! (`chassis.crt`), where the node's ovn-controller reads both. A certificate is renewed,
//! with the same key, once two thirds of its life are gone: ovn-controller picks the new
//! file up without a restart, and never sees a key that does not match.

use std::path::{Path, PathBuf};
use std::time::Duration;

use api::chassis_cert::{CHASSIS_LABEL, SIGNER_NAME, request_name};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, PostParams};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
use serde_json::json;

/// File names in the certificate directory.
pub const KEY_FILE: &str = "chassis.key";
pub const CERT_FILE: &str = "chassis.crt";

/// Why the node has no current certificate.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the chassis key {path} is unusable ({why}): remove it and the certificate to start over"
    )]
    Key { path: String, why: String },
    #[error("building the certificate request: {0}")]
    Request(String),
    #[error("the Kubernetes API refused the request {name}: {source}")]
    Kube { name: String, source: kube::Error },
    #[error("certificate request {name} was denied: {reason}")]
    Denied { name: String, reason: String },
    #[error(
        "no certificate issued for request {name} within {secs} s (is the controller running with its chassis CA?)"
    )]
    NotIssued { name: String, secs: u64 },
}

/// Where the certificate lives and for which chassis.
#[derive(Debug, Clone)]
pub struct CertOptions {
    pub dir: PathBuf,
    pub chassis: String,
    /// How long to wait for the signer before giving up this attempt.
    pub wait: Duration,
    /// The chassis CA's certificate: a certificate on disk it did not sign (the CAs made
    /// again, a reinstall) is asked for anew.
    pub issuer: Option<PathBuf>,
}

/// What [`ensure`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertState {
    /// The certificate on disk is for this chassis and has more than a third of its life.
    Current { not_after: time::OffsetDateTime },
    /// A new certificate was issued and written.
    Issued {
        not_after: time::OffsetDateTime,
        request: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CertError + '_ {
    move |source| CertError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `data` to `path` atomically with `mode`, durable once written (a key lost to
/// a crash would cost a new request).
fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<(), CertError> {
    hostio::write_atomic(path, data, mode, hostio::Durability::FileAndDir).map_err(io(path))
}

/// The CN and validity of the PEM certificate `pem`.
pub fn read_cert(pem: &str) -> Option<(String, time::OffsetDateTime, time::OffsetDateTime)> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = pem.parse_x509().ok()?;
    let cn = cert
        .subject()
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let v = cert.validity();
    Some((cn, v.not_before.to_datetime(), v.not_after.to_datetime()))
}

/// Whether `pem` is a certificate of `chassis` with more than a third of its life left at
/// `now`; its end when so.
pub fn still_current(
    pem: &str,
    chassis: &str,
    now: time::OffsetDateTime,
) -> Option<time::OffsetDateTime> {
    let (cn, from, until) = read_cert(pem)?;
    let renew_at = from + (until - from) * 2 / 3;
    (cn == chassis && now < renew_at).then_some(until)
}

/// Whether the PEM certificate `pem` is signed by the PEM CA certificate `ca`.
pub fn signed_by(pem: &str, ca: &[u8]) -> bool {
    let parse = |b: &[u8]| {
        x509_parser::pem::parse_x509_pem(b)
            .ok()
            .map(|(_, p)| p.contents)
    };
    let (Some(cert), Some(ca)) = (parse(pem.as_bytes()), parse(ca)) else {
        return false;
    };
    use x509_parser::prelude::FromDer;
    let (Ok((_, cert)), Ok((_, ca))) = (
        x509_parser::certificate::X509Certificate::from_der(&cert),
        x509_parser::certificate::X509Certificate::from_der(&ca),
    ) else {
        return false;
    };
    cert.verify_signature(Some(ca.public_key())).is_ok()
}

/// The node's key: read, or made (0600) when there is none. A new key voids the old
/// certificate, which is removed first.
fn key(dir: &Path) -> Result<KeyPair, CertError> {
    let path = dir.join(KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(pem) => KeyPair::from_pem(&pem).map_err(|e| CertError::Key {
            path: path.display().to_string(),
            why: e.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let cert = dir.join(CERT_FILE);
            match std::fs::remove_file(&cert) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&cert)(e)),
            }
            let k = KeyPair::generate().map_err(|e| CertError::Request(e.to_string()))?;
            write_atomic(&path, k.serialize_pem().as_bytes(), 0o600)?;
            Ok(k)
        }
        Err(e) => Err(io(&path)(e)),
    }
}

/// A PEM request for `CN=<chassis>`, and the key's id (for the request's name).
pub fn certificate_request(key: &KeyPair, chassis: &str) -> Result<(String, String), CertError> {
    let mut p = CertificateParams::default();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, chassis);
    let pem = p
        .serialize_request(key)
        .and_then(|r| r.pem())
        .map_err(|e| CertError::Request(e.to_string()))?;
    let id = api::hash::hex(key.public_key_raw());
    Ok((pem, id))
}

/// Makes sure `opts.dir` holds a current certificate for `opts.chassis`: asks for one
/// (and waits for it) when there is none, it names another chassis, or it is due for
/// renewal.
pub async fn ensure(kube: &kube::Client, opts: &CertOptions) -> Result<CertState, CertError> {
    std::fs::create_dir_all(&opts.dir).map_err(io(&opts.dir))?;
    let key = key(&opts.dir)?;
    let cert_path = opts.dir.join(CERT_FILE);
    let issuer = match &opts.issuer {
        Some(p) => Some(std::fs::read(p).map_err(io(p))?),
        None => None,
    };
    if let Ok(pem) = std::fs::read_to_string(&cert_path)
        && let Some(not_after) = still_current(&pem, &opts.chassis, time::OffsetDateTime::now_utc())
        && issuer.as_deref().is_none_or(|ca| signed_by(&pem, ca))
    {
        return Ok(CertState::Current { not_after });
    }
    let (request, id) = certificate_request(&key, &opts.chassis)?;
    let name = request_name(&opts.chassis, &id);
    let api: Api<CertificateSigningRequest> = Api::all(kube.clone());
    let kerr = |source| CertError::Kube {
        name: name.clone(),
        source,
    };
    // a renewal with the same key asks under the same name: the old, issued request goes
    let existing = api.get_opt(&name).await.map_err(kerr)?;
    if let Some(old) = existing
        && let Some(pem) = issued(&old)
        && (still_current(&pem, &opts.chassis, time::OffsetDateTime::now_utc()).is_none()
            || issuer.as_deref().is_some_and(|ca| !signed_by(&pem, ca)))
    {
        api.delete(&name, &Default::default()).await.map_err(kerr)?;
        wait_gone(&api, &name, opts.wait).await.map_err(kerr)?;
    }
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {CHASSIS_LABEL: label_value(&opts.chassis)}},
        "spec": {
            "request": ByteString(request.into_bytes()),
            "signerName": SIGNER_NAME,
            "usages": ["digital signature", "key encipherment", "client auth"],
        }
    }))
    .map_err(|e| CertError::Request(e.to_string()))?;
    match api.create(&PostParams::default(), &csr).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(kerr(e)),
    }
    let deadline = tokio::time::Instant::now() + opts.wait;
    loop {
        let now = api.get_opt(&name).await.map_err(kerr)?;
        if let Some(c) = &now {
            if let Some(reason) = refused(c) {
                return Err(CertError::Denied { name, reason });
            }
            if let Some(pem) = issued(c)
                && let Some(not_after) =
                    still_current(&pem, &opts.chassis, time::OffsetDateTime::now_utc())
            {
                write_atomic(&cert_path, pem.as_bytes(), 0o644)?;
                return Ok(CertState::Issued {
                    not_after,
                    request: name,
                });
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CertError::NotIssued {
                name,
                secs: opts.wait.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A label value of at most 63 characters.
fn label_value(s: &str) -> String {
    s.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(['-', '.', '_'])
        .to_string()
}

fn issued(c: &CertificateSigningRequest) -> Option<String> {
    let cert = c.status.as_ref()?.certificate.as_ref()?;
    String::from_utf8(cert.0.clone())
        .ok()
        .filter(|s| !s.is_empty())
}

/// The message of a Denied or Failed condition.
fn refused(c: &CertificateSigningRequest) -> Option<String> {
    let conds = c.status.as_ref()?.conditions.as_ref()?;
    conds
        .iter()
        .find(|x| (x.type_ == "Denied" || x.type_ == "Failed") && x.status == "True")
        .map(|x| {
            format!(
                "{}: {}",
                x.reason.clone().unwrap_or_else(|| x.type_.clone()),
                x.message.clone().unwrap_or_default()
            )
        })
}

async fn wait_gone(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    wait: Duration,
) -> Result<(), kube::Error> {
    let deadline = tokio::time::Instant::now() + wait;
    while api.get_opt(name).await?.is_some() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// File name of OVN central's CA beside the chassis certificate.
pub const CA_FILE: &str = "ovn-ca.crt";

/// Copies OVN central's CA (the chart's ConfigMap, mounted in the agent) beside the
/// chassis certificate, where ovn-controller can read it; only when it differs.
fn copy_ca(source: &Path, dir: &Path) -> Result<PathBuf, CertError> {
    let ca = std::fs::read(source).map_err(io(source))?;
    let dest = dir.join(CA_FILE);
    if std::fs::read(&dest).ok().as_deref() != Some(&ca[..]) {
        write_atomic(&dest, &ca, 0o644)?;
    }
    Ok(dest)
}

/// Keeps the certificate current for the life of the agent, at start (retrying every
/// 10 s until it has one) and then every hour, and points ovn-controller at it through
/// the OVS `SSL` row with `ca` (OVN central's CA) copied beside it.
pub async fn keep_current(
    kube: kube::Client,
    opts: CertOptions,
    ovs: crate::ovs::Ovs,
    ca: PathBuf,
) {
    loop {
        let next = match ensure(&kube, &opts).await {
            Ok(state) => {
                if let CertState::Issued { not_after, request } = &state {
                    tracing::info!(chassis = %opts.chassis, %request, not_after = %not_after, dir = %opts.dir.display(), "chassis certificate issued");
                }
                match point_ovn_controller(&opts.dir, &ca, &ovs).await {
                    Ok(()) => Duration::from_secs(3600),
                    Err(e) => {
                        tracing::warn!(error = %e, "ovn-controller not pointed at the chassis certificate; retrying in 10 s");
                        Duration::from_secs(10)
                    }
                }
            }
            Err(e) => {
                tracing::warn!(chassis = %opts.chassis, error = %e, "no current chassis certificate: ovn-controller cannot reach the Southbound; retrying in 10 s");
                Duration::from_secs(10)
            }
        };
        tokio::time::sleep(next).await;
    }
}

async fn point_ovn_controller(
    dir: &Path,
    ca: &Path,
    ovs: &crate::ovs::Ovs,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let ca_cert = copy_ca(ca, dir)?;
    ovs.set_ovn_ssl(&crate::ovs::ssl::SslFiles {
        private_key: dir.join(KEY_FILE),
        certificate: dir.join(CERT_FILE),
        ca_cert,
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::DnValue;
    use std::os::unix::fs::PermissionsExt;

    fn cert(cn: &str, from: time::OffsetDateTime, until: time::OffsetDateTime) -> String {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.not_before = from;
        p.not_after = until;
        p.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn a_certificate_is_current_for_its_chassis_until_two_thirds_of_its_life() {
        let t0 = time::OffsetDateTime::now_utc()
            .replace_nanosecond(0)
            .unwrap();
        let day = time::Duration::days(1);
        let pem = cert("node1", t0, t0 + day * 30);
        assert_eq!(still_current(&pem, "node1", t0 + day), Some(t0 + day * 30));
        assert_eq!(
            still_current(&pem, "node1", t0 + day * 19),
            Some(t0 + day * 30)
        );
        assert_eq!(still_current(&pem, "node1", t0 + day * 21), None);
        assert_eq!(still_current(&pem, "node2", t0 + day), None);
        assert_eq!(still_current("garbage", "node1", t0), None);
    }

    #[test]
    fn a_certificate_is_checked_against_its_issuer() {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        assert!(signed_by(&leaf.pem(), ca_cert.pem().as_bytes()));
        let now = time::OffsetDateTime::now_utc();
        let other = cert("x", now, now + time::Duration::days(1));
        assert!(!signed_by(&leaf.pem(), other.as_bytes()));
        assert!(!signed_by("junk", ca_cert.pem().as_bytes()));
    }

    #[test]
    fn the_request_names_the_chassis_and_a_new_key_a_new_name() {
        let dir = tempfile::tempdir().unwrap();
        let k1 = key(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // read back, not regenerated
        let again = key(dir.path()).unwrap();
        assert_eq!(k1.public_key_raw(), again.public_key_raw());
        let (pem, id1) = certificate_request(&k1, "node1").unwrap();
        assert!(pem.contains("CERTIFICATE REQUEST"));
        let parsed = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
        assert!(matches!(
            parsed.params.distinguished_name.get(&DnType::CommonName),
            Some(DnValue::Utf8String(s)) if s == "node1"
        ));
        // a lost key: the stale certificate goes with it, a new key gets a new name
        std::fs::write(dir.path().join(CERT_FILE), "old").unwrap();
        std::fs::remove_file(dir.path().join(KEY_FILE)).unwrap();
        let k2 = key(dir.path()).unwrap();
        assert!(!dir.path().join(CERT_FILE).exists());
        let (_, id2) = certificate_request(&k2, "node1").unwrap();
        assert_ne!(id1, id2);
        // a damaged key is named, not replaced
        std::fs::write(dir.path().join(KEY_FILE), "junk").unwrap();
        assert!(matches!(key(dir.path()), Err(CertError::Key { .. })));
    }
}
