//! Remotes in OVS syntax (`unix:PATH`, `tcp:HOST:PORT`, `ssl:HOST:PORT`, comma-separated
//! lists for Raft clusters) and connecting to them, with TLS through tokio-rustls.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, pki_types};

use crate::error::{Error, Result};

/// One server address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    Unix(PathBuf),
    Tcp { host: String, port: u16 },
    Ssl { host: String, port: u16 },
}

impl Remote {
    /// Parses a comma-separated list of remotes (a Raft cluster's members).
    pub fn parse_list(s: &str) -> Result<Vec<Remote>> {
        let list = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<_>>>()?;
        if list.is_empty() {
            return Err(Error::BadRemote(s.to_string()));
        }
        Ok(list)
    }
}

fn host_port(s: &str, whole: &str) -> Result<(String, u16)> {
    let bad = || Error::BadRemote(whole.to_string());
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:").ok_or_else(bad)?;
        (h, p)
    } else {
        s.rsplit_once(':').ok_or_else(bad)?
    };
    if host.is_empty() || host.contains(':') && !s.starts_with('[') {
        return Err(bad());
    }
    let port = port.parse().map_err(|_| bad())?;
    Ok((host.to_string(), port))
}

impl FromStr for Remote {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(Error::BadRemote(s.to_string()));
            }
            Ok(Remote::Unix(PathBuf::from(p)))
        } else if let Some(hp) = s.strip_prefix("tcp:") {
            let (host, port) = host_port(hp, s)?;
            Ok(Remote::Tcp { host, port })
        } else if let Some(hp) = s.strip_prefix("ssl:") {
            let (host, port) = host_port(hp, s)?;
            Ok(Remote::Ssl { host, port })
        } else {
            Err(Error::BadRemote(s.to_string()))
        }
    }
}

impl fmt::Display for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hp = |f: &mut fmt::Formatter<'_>, proto, host: &str, port| {
            if host.contains(':') {
                write!(f, "{proto}:[{host}]:{port}")
            } else {
                write!(f, "{proto}:{host}:{port}")
            }
        };
        match self {
            Remote::Unix(p) => write!(f, "unix:{}", p.display()),
            Remote::Tcp { host, port } => hp(f, "tcp", host, port),
            Remote::Ssl { host, port } => hp(f, "ssl", host, port),
        }
    }
}

/// TLS material for `ssl:` remotes, as PEM: the CA that signed the server's certificate and
/// optionally the client's certificate chain and private key (OVN usually requires them).
#[derive(Clone)]
pub struct TlsConfig {
    connector: TlsConnector,
    /// The name the server's certificate must hold, when not the remote's host (OVN
    /// central dialled by ClusterIP, its certificate naming the service).
    server_name: Option<pki_types::ServerName<'static>>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsConfig { .. }")
    }
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::Tls(format!("cannot read {}: {e}", path.display())))
}

impl TlsConfig {
    /// Loads PEM files (as given to `ovn-nbctl -C CA -c CERT -p KEY`).
    pub fn from_files(ca_cert: &Path, client: Option<(&Path, &Path)>) -> Result<Self> {
        let ca = read(ca_cert)?;
        let client = match client {
            Some((c, k)) => Some((read(c)?, read(k)?)),
            None => None,
        };
        Self::from_pem(&ca, client.as_ref().map(|(c, k)| (&c[..], &k[..])))
    }

    /// Builds the TLS configuration from PEM bytes.
    pub fn from_pem(ca_cert: &[u8], client: Option<(&[u8], &[u8])>) -> Result<Self> {
        let tls = |e: &dyn fmt::Display| Error::Tls(e.to_string());
        let mut roots = rustls::RootCertStore::empty();
        let mut n = 0;
        for c in CertificateDer::pem_slice_iter(ca_cert) {
            roots.add(c.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
            n += 1;
        }
        if n == 0 {
            return Err(Error::Tls("no CA certificate found in PEM".into()));
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_root_certificates(roots);
        let config = match client {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| tls(&e))?;
                if chain.is_empty() {
                    return Err(Error::Tls("no client certificate found in PEM".into()));
                }
                let key = match PrivateKeyDer::from_pem_slice(key) {
                    Ok(k) => k,
                    Err(pem::Error::NoItemsFound) => {
                        return Err(Error::Tls("no private key found in PEM".into()));
                    }
                    Err(e) => return Err(tls(&e)),
                };
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| tls(&e))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(TlsConfig {
            connector: TlsConnector::from(Arc::new(config)),
            server_name: None,
        })
    }

    /// Verifies the server's certificate against `name` (a DNS name or an IP address)
    /// instead of the host of the remote dialled.
    pub fn with_server_name(mut self, name: &str) -> Result<Self> {
        let n = pki_types::ServerName::try_from(name.to_string())
            .map_err(|e| Error::Tls(format!("bad server name {name:?}: {e}")))?;
        self.server_name = Some(n);
        Ok(self)
    }
}

/// A connected byte stream.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// Opens a connection to `remote`.
pub async fn connect(remote: &Remote, tls: Option<&TlsConfig>) -> Result<Box<dyn Stream>> {
    match remote {
        Remote::Unix(p) => Ok(Box::new(UnixStream::connect(p).await?)),
        Remote::Tcp { host, port } => {
            let s = TcpStream::connect((host.as_str(), *port)).await?;
            s.set_nodelay(true)?;
            Ok(Box::new(s))
        }
        Remote::Ssl { host, port } => {
            let tls = tls.ok_or_else(|| {
                Error::Config(format!("remote {remote} needs a TLS configuration"))
            })?;
            let name = match &tls.server_name {
                Some(n) => n.clone(),
                None => pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| Error::Tls(format!("bad server name {host:?}: {e}")))?,
            };
            let s = TcpStream::connect((host.as_str(), *port)).await?;
            s.set_nodelay(true)?;
            let s = tls
                .connector
                .connect(name, s)
                .await
                .map_err(|e| Error::Tls(format!("handshake with {remote}: {e}")))?;
            Ok(Box::new(s))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and a client certificate with its key, as PEM.
    fn pems() -> (String, String, String) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().expect("key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("ca");
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec!["client".to_string()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("client");
        (ca_cert.pem(), cert.pem(), key.serialize_pem())
    }

    #[test]
    fn pem_material_is_read_and_its_absence_named() {
        let (ca, cert, key) = pems();
        assert!(TlsConfig::from_pem(ca.as_bytes(), None).is_ok());
        assert!(
            TlsConfig::from_pem(ca.as_bytes(), Some((cert.as_bytes(), key.as_bytes()))).is_ok()
        );
        // the CA bundle may hold text around its certificates (as openssl writes it)
        let noisy = format!("subject=CN = test\n{ca}\n");
        assert!(TlsConfig::from_pem(noisy.as_bytes(), None).is_ok());
        let err = |r: Result<TlsConfig>| r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(TlsConfig::from_pem(b"", None)).contains("no CA certificate"));
        assert!(
            err(TlsConfig::from_pem(
                ca.as_bytes(),
                Some((b"", key.as_bytes()))
            ))
            .contains("no client certificate")
        );
        // a certificate where the key should be: no key in it
        assert!(
            err(TlsConfig::from_pem(
                ca.as_bytes(),
                Some((cert.as_bytes(), cert.as_bytes()))
            ))
            .contains("no private key")
        );
    }

    #[test]
    fn parse_remotes() {
        let l =
            Remote::parse_list("tcp:10.0.0.1:6641, ssl:[::1]:6643,unix:/run/ovn/nb.sock").unwrap();
        assert_eq!(
            l,
            vec![
                Remote::Tcp {
                    host: "10.0.0.1".into(),
                    port: 6641
                },
                Remote::Ssl {
                    host: "::1".into(),
                    port: 6643
                },
                Remote::Unix("/run/ovn/nb.sock".into()),
            ]
        );
        assert_eq!(l[1].to_string(), "ssl:[::1]:6643");
        assert_eq!(l[0].to_string(), "tcp:10.0.0.1:6641");
        for bad in [
            "",
            "tcp:1.2.3.4",
            "tcp::6641",
            "foo:bar",
            "tcp:::1:6641",
            "ssl:[::1]6641",
            "unix:",
            "tcp:h:99999",
        ] {
            assert!(Remote::parse_list(bad).is_err(), "{bad}");
        }
    }
}
