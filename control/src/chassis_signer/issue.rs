//! The chassis CA: parses a node's certificate request and issues its OVN client
//! certificate (CN = the chassis, client authentication only, never a CA).

use std::path::Path;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, DnValue, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use super::Refusal;

/// The chassis CA's material could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("chassis CA key: {0}")]
    Key(String),
    #[error("chassis CA certificate: {0}")]
    Cert(String),
    #[error("issuing the certificate: {0}")]
    Sign(String),
}

/// A parsed certificate request: the chassis it names and its public key.
#[derive(Debug)]
pub struct ParsedRequest {
    pub chassis: String,
    csr: CertificateSigningRequestParams,
}

/// The CA whose certificates OVN's Southbound trusts for ovn-controller.
pub struct ChassisCa {
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for ChassisCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChassisCa { .. }")
    }
}

fn read(path: &Path) -> Result<String, CaError> {
    std::fs::read_to_string(path).map_err(|source| CaError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Why a certificate request is not acceptable (inside [`Refusal::BadRequest`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    #[error("the request is not PEM text")]
    NotText,
    #[error("cannot parse the request: {0}")]
    Unparsable(rcgen::Error),
    #[error("the subject must hold only a CN, it has {0:?}")]
    NotOnlyCn(DnType),
    #[error("unsupported CN encoding {0:?}")]
    CnEncoding(DnValue),
    #[error("the subject holds more than one CN")]
    SeveralCn,
    #[error("the subject has no CN (the chassis name)")]
    NoCn,
    #[error("CN {0:?} is not a node name")]
    NotANodeName(String),
    #[error("subject alternative names are not granted")]
    AltNames,
    #[error("a CA certificate is not granted")]
    Ca,
    #[error("only client authentication is granted")]
    NotClientOnly,
}

/// The one value of `CN` in `dn`, when `dn` holds nothing else.
fn only_common_name(dn: &DistinguishedName) -> Result<String, BadRequest> {
    let mut cn = None;
    for (ty, value) in dn.iter() {
        if *ty != DnType::CommonName {
            return Err(BadRequest::NotOnlyCn(ty.clone()));
        }
        let v = match value {
            DnValue::Utf8String(s) => s.clone(),
            DnValue::PrintableString(s) => s.as_str().to_string(),
            other => return Err(BadRequest::CnEncoding(other.clone())),
        };
        if cn.replace(v).is_some() {
            return Err(BadRequest::SeveralCn);
        }
    }
    cn.ok_or(BadRequest::NoCn)
}

/// Parses a PEM request and checks it asks for a CN and nothing more: no alternative
/// names, no CA, no key or extended usages beyond a client's.
pub fn parse_request(pem: &[u8]) -> Result<ParsedRequest, Refusal> {
    let text = std::str::from_utf8(pem).map_err(|_| BadRequest::NotText)?;
    let csr = CertificateSigningRequestParams::from_pem(text).map_err(BadRequest::Unparsable)?;
    let chassis = only_common_name(&csr.params.distinguished_name)?;
    if chassis.is_empty() || chassis.len() > 253 {
        return Err(BadRequest::NotANodeName(chassis).into());
    }
    if !csr.params.subject_alt_names.is_empty() {
        return Err(BadRequest::AltNames.into());
    }
    if !matches!(csr.params.is_ca, IsCa::NoCa | IsCa::ExplicitNoCa) {
        return Err(BadRequest::Ca.into());
    }
    let eku_ok = csr
        .params
        .extended_key_usages
        .iter()
        .all(|u| *u == ExtendedKeyUsagePurpose::ClientAuth);
    if !eku_ok {
        return Err(BadRequest::NotClientOnly.into());
    }
    Ok(ParsedRequest { chassis, csr })
}

impl ChassisCa {
    /// From PEM: the CA certificate and its private key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, CaError> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| {
            CaError::Key(format!(
                "{e} (a PKCS#8 key is needed, `BEGIN PRIVATE KEY`: Ed25519, ECDSA P-256/P-384 or RSA; convert a PKCS#1 `BEGIN RSA PRIVATE KEY` with `openssl pkcs8 -topk8 -nocrypt`)"
            ))
        })?;
        let issuer =
            Issuer::from_ca_cert_pem(cert_pem, key).map_err(|e| CaError::Cert(e.to_string()))?;
        Ok(ChassisCa { issuer })
    }

    /// From PEM files.
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, CaError> {
        Self::from_pem(&read(cert)?, &read(key)?)
    }

    /// Issues the client certificate of `req` valid for `validity`, as PEM. The subject,
    /// usages and lifetime are the CA's, whatever the request asked.
    pub fn sign(&self, req: &ParsedRequest, validity: Duration) -> Result<String, CaError> {
        let cert = client_params(&req.chassis, validity)
            .signed_by(&req.csr.public_key, &self.issuer)
            .map_err(|e| CaError::Sign(e.to_string()))?;
        Ok(cert.pem())
    }

    /// A certificate and key (PEM) of `chassis` made here, for the controller's own use:
    /// it removes a deleted node's chassis rows as that chassis, the only identity OVN's
    /// Southbound RBAC lets delete them.
    pub fn mint(&self, chassis: &str, validity: Duration) -> Result<(String, String), CaError> {
        let key = KeyPair::generate().map_err(|e| CaError::Key(e.to_string()))?;
        let cert = client_params(chassis, validity)
            .signed_by(&key, &self.issuer)
            .map_err(|e| CaError::Sign(e.to_string()))?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// What every chassis certificate says: `CN=<chassis>`, client authentication, not a CA,
/// valid from 5 minutes ago (clocks differ) for `validity`.
fn client_params(chassis: &str, validity: Duration) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, chassis);
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.use_authority_key_identifier_extension = true;
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::minutes(5);
    p.not_after = now + validity;
    p
}

/// A new self-signed CA (tests, and the lab's own PKI): certificate and key as PEM.
pub fn new_ca(common_name: &str) -> Result<(String, String), CaError> {
    let key = KeyPair::generate().map_err(|e| CaError::Key(e.to_string()))?;
    let mut p = CertificateParams::default();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, common_name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = p
        .self_signed(&key)
        .map_err(|e| CaError::Sign(e.to_string()))?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::SanType;

    fn request(dn: &[(DnType, &str)], sans: Vec<SanType>, ca: bool) -> String {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name = DistinguishedName::new();
        for (t, v) in dn {
            p.distinguished_name.push(t.clone(), *v);
        }
        p.subject_alt_names = sans;
        if ca {
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        }
        p.serialize_request(&key).unwrap().pem().unwrap()
    }

    #[test]
    fn a_plain_request_is_issued_as_a_client_certificate_of_its_chassis() {
        let (cert, key) = new_ca("test chassis CA").unwrap();
        let ca = ChassisCa::from_pem(&cert, &key).unwrap();
        let req =
            parse_request(request(&[(DnType::CommonName, "node1")], vec![], false).as_bytes())
                .unwrap();
        assert_eq!(req.chassis, "node1");
        let pem = ca.sign(&req, Duration::from_secs(3600)).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        let issued = pem.parse_x509().unwrap();
        let cn: Vec<_> = issued
            .subject()
            .iter_common_name()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(cn, ["node1"]);
        assert_eq!(issued.subject().iter().count(), 1);
        assert!(!issued.is_ca());
        let eku = issued.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        let v = issued.validity();
        let life = v.not_after.to_datetime() - v.not_before.to_datetime();
        assert!(life >= time::Duration::minutes(64) && life <= time::Duration::minutes(66));
        // signed by the CA
        let (_, ca_pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
        let ca_x509 = ca_pem.parse_x509().unwrap();
        issued.verify_signature(Some(ca_x509.public_key())).unwrap();
    }

    #[test]
    fn anything_beyond_a_cn_is_refused_by_name() {
        let err = |pem: String| parse_request(pem.as_bytes()).unwrap_err().to_string();
        let dns = SanType::DnsName("zs-nbdb".try_into().unwrap());
        assert!(
            err(request(&[(DnType::CommonName, "node1")], vec![dns], false))
                .contains("alternative names")
        );
        assert!(err(request(&[(DnType::CommonName, "node1")], vec![], true)).contains("CA"));
        assert!(
            err(request(
                &[
                    (DnType::CommonName, "node1"),
                    (DnType::OrganizationName, "x")
                ],
                vec![],
                false
            ))
            .contains("only a CN")
        );
        assert!(err(request(&[], vec![], false)).contains("no CN"));
        assert!(err("not a request".into()).contains("cannot parse"));
    }
}
