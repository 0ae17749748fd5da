//! The webhook's HTTPS server: one AdmissionReview per connection (HTTP/1.1,
//! `Connection: close`), answered from [`super::node`], [`super::pod`] and
//! [`crate::agent_identity`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

use super::node::agent_node_update;
use super::pod::{PodPolicy, pod_write};
use crate::agent_identity::{self as identity, AgentAccount};

/// The path the webhook configuration names.
pub const PATH: &str = "/validate";
/// Largest request body read (an object is at most ~1.5 MiB in etcd, twice in a review).
const MAX_BODY: usize = 4 << 20;
const MAX_HEAD: usize = 16 << 10;
/// A client that sends nothing for this long is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How the webhook runs.
#[derive(Debug, Clone)]
pub struct AdmissionConfig {
    pub addr: SocketAddr,
    /// PEM serving certificate (chain) and key.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The node agent's service account: its Node writes are checked.
    pub agent: AgentAccount,
    pub pods: PodPolicy,
}

/// Why a write is refused; the text is the AdmissionResponse's denial reason.
#[derive(Debug, thiserror::Error)]
pub enum Denial {
    #[error(transparent)]
    Pod(#[from] super::pod::PodRefusal),
    #[error(transparent)]
    NotTheAgent(#[from] identity::Refusal),
    #[error("cannot verify the node agent's pod {pod}: {source}")]
    CannotVerify { pod: String, source: kube::Error },
    #[error(transparent)]
    NodeFields(#[from] super::node::NotItsFields),
    #[error("cannot read node {node} as stored, to see what the node agent's write changes")]
    NodeUnreadable { node: String },
}

/// Why the webhook cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no usable {what}: {detail}")]
    Pem {
        path: PathBuf,
        what: &'static str,
        detail: String,
    },
    #[error("the serving certificate and key do not make a TLS server: {0}")]
    Tls(#[from] rustls::Error),
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

fn tls_config(cfg: &AdmissionConfig) -> Result<ServerConfig, AdmissionError> {
    let read = |p: &PathBuf| {
        std::fs::read(p).map_err(|source| AdmissionError::Read {
            path: p.clone(),
            source,
        })
    };
    let (cert, key) = (read(&cfg.cert)?, read(&cfg.key)?);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<_, _>>()
        .map_err(|e| AdmissionError::Pem {
            path: cfg.cert.clone(),
            what: "certificate",
            detail: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(AdmissionError::Pem {
            path: cfg.cert.clone(),
            what: "certificate",
            detail: "no CERTIFICATE block".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| AdmissionError::Pem {
        path: cfg.key.clone(),
        what: "private key",
        detail: e.to_string(),
    })?;
    let mut tls =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}

/// The webhook, bound and ready to serve.
pub struct Webhook {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    cfg: Arc<AdmissionConfig>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("addr", &self.cfg.addr)
            .finish()
    }
}

/// Reads the certificate and binds: every error a misconfiguration can cause surfaces here.
pub async fn bind(cfg: AdmissionConfig) -> Result<Webhook, AdmissionError> {
    let acceptor = TlsAcceptor::from(Arc::new(tls_config(&cfg)?));
    let listener = TcpListener::bind(cfg.addr)
        .await
        .map_err(|source| AdmissionError::Listen {
            addr: cfg.addr,
            source,
        })?;
    Ok(Webhook {
        listener,
        acceptor,
        cfg: Arc::new(cfg),
    })
}

impl Webhook {
    /// The bound address (port 0 resolved).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the process ends; a bad connection is logged and dropped.
    pub async fn run(self, kube: Client) {
        tracing::info!(addr = %self.cfg.addr, path = PATH, "admission webhook serving");
        loop {
            let (tcp, peer) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "admission webhook: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (acceptor, kube, cfg) = (self.acceptor.clone(), kube.clone(), self.cfg.clone());
            tokio::spawn(async move {
                let done = async {
                    let tls = acceptor.accept(tcp).await?;
                    one_request(tls, &kube, &cfg).await
                };
                if let Err(e) = done.await {
                    tracing::debug!(%peer, error = %e, "admission webhook: connection dropped");
                }
            });
        }
    }
}

/// Reads one HTTP request: (path, body).
async fn read_request<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<(String, Vec<u8>)> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let mut buf = Vec::with_capacity(4096);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(bad("request head too long"));
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(READ_TIMEOUT, s.read(&mut chunk))
            .await
            .map_err(|_| bad("timed out"))??;
        if n == 0 {
            return Err(bad("closed before the request head ended"));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| bad("head is not text"))?;
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .ok_or_else(|| bad("no request line"))?
        .to_string();
    let length = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .ok_or_else(|| bad("no Content-Length"))?;
    if length > MAX_BODY {
        return Err(bad("body too large"));
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; (length - body.len()).min(64 << 10)];
        let n = tokio::time::timeout(READ_TIMEOUT, s.read(&mut chunk))
            .await
            .map_err(|_| bad("timed out"))??;
        if n == 0 {
            return Err(bad("closed before the body ended"));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Ok((path, body))
}

async fn respond<S: AsyncWrite + Unpin>(
    s: &mut S,
    status: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    s.shutdown().await
}

async fn one_request<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    kube: &Client,
    cfg: &AdmissionConfig,
) -> std::io::Result<()> {
    let (path, body) = read_request(&mut s).await?;
    if path.split('?').next() != Some(PATH) {
        return respond(&mut s, "404 Not Found", b"{}").await;
    }
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            let msg = serde_json::json!({"error": format!("not an AdmissionReview: {e}")});
            return respond(&mut s, "400 Bad Request", msg.to_string().as_bytes()).await;
        }
    };
    let request: Result<AdmissionRequest<DynamicObject>, _> = review.try_into();
    let response = match request {
        Ok(req) => decide(kube, cfg, &req).await,
        Err(e) => AdmissionResponse::invalid(format!("not an admission request: {e}")),
    };
    let out = serde_json::to_vec(&response.into_review())?;
    respond(&mut s, "200 OK", &out).await
}

/// The answer to one request, with the refusal's reason in its message.
pub async fn decide(
    kube: &Client,
    cfg: &AdmissionConfig,
    req: &AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    let allowed = AdmissionResponse::from(req);
    let user = req.user_info.username.clone().unwrap_or_default();
    let to_value =
        |o: &Option<DynamicObject>| o.as_ref().and_then(|o| serde_json::to_value(o).ok());
    let new = to_value(&req.object);
    // what matters is what the write changes: compare with the stored object (below)
    let judged = matches!(req.operation, Operation::Update)
        && match req.kind.kind.as_str() {
            "Node" => user == cfg.agent.username(),
            "Pod" => user != cfg.pods.controller,
            _ => false,
        };
    let old = if judged {
        // an agent's Node write is never judged against the request's copy
        stored(kube, req).await.or_else(|| {
            (req.kind.kind != "Node")
                .then(|| to_value(&req.old_object))
                .flatten()
        })
    } else {
        to_value(&req.old_object)
    };
    let verdict: Result<(), Denial> = match (req.kind.kind.as_str(), &req.operation) {
        ("Node", Operation::Update) if user == cfg.agent.username() => {
            agent_writes_node(kube, cfg, req, old.as_ref(), new.as_ref()).await
        }
        ("Pod", Operation::Create | Operation::Update) => match &new {
            Some(new) => pod_write(&cfg.pods, &user, old.as_ref(), new).map_err(Denial::from),
            None => Ok(()),
        },
        _ => Ok(()),
    };
    match verdict {
        Ok(()) => allowed,
        Err(reason) => {
            tracing::info!(
                user, kind = %req.kind.kind, namespace = req.namespace.as_deref().unwrap_or(""),
                name = %req.name, %reason, "admission refused"
            );
            allowed.deny(reason)
        }
    }
}

/// The object as stored now: before the write is admitted, the old one.
///
/// Read instead of trusting the request's `oldObject`: the kube-apiserver 1.20.2 the lab
/// builds (from Debian's source) sends the object with the write already applied as
/// `oldObject` (seen on every PATCH of a Node: the new labels and annotations in both),
/// which makes every change look like none. `None` when it cannot be read (the caller
/// then falls back to `oldObject`).
async fn stored(kube: &Client, req: &AdmissionRequest<DynamicObject>) -> Option<serde_json::Value> {
    use k8s_openapi::api::core::v1::{Node, Pod};
    let got = match (req.kind.kind.as_str(), req.namespace.as_deref()) {
        ("Node", _) => kube::Api::<Node>::all(kube.clone())
            .get_opt(&req.name)
            .await
            .map(|o| o.and_then(|o| serde_json::to_value(o).ok())),
        ("Pod", Some(ns)) => kube::Api::<Pod>::namespaced(kube.clone(), ns)
            .get_opt(&req.name)
            .await
            .map(|o| o.and_then(|o| serde_json::to_value(o).ok())),
        _ => return None,
    };
    got.unwrap_or_else(|e| {
        tracing::warn!(kind = %req.kind.kind, name = %req.name, error = %e, "admission: cannot read the stored object");
        None
    })
}

async fn agent_writes_node(
    kube: &Client,
    cfg: &AdmissionConfig,
    req: &AdmissionRequest<DynamicObject>,
    old: Option<&serde_json::Value>,
    new: Option<&serde_json::Value>,
) -> Result<(), Denial> {
    let extra = req
        .user_info
        .extra
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let bound = identity::requester(req.user_info.username.as_deref(), &extra, &cfg.agent)?;
    let facts = identity::pod_facts(kube, &bound)
        .await
        .map_err(|source| Denial::CannotVerify {
            pod: bound.name.clone(),
            source,
        })?;
    identity::pod_on_node(&bound, facts.as_ref(), &cfg.agent, &req.name)?;
    match (old, new) {
        (Some(old), Some(new)) => Ok(agent_node_update(old, new)?),
        _ => Err(Denial::NodeUnreadable {
            node: req.name.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::PodPolicy;
    use crate::agent_identity::AgentAccount;

    fn cfg() -> AdmissionConfig {
        AdmissionConfig {
            addr: "127.0.0.1:0".parse().expect("addr"),
            cert: "/nonexistent/tls.crt".into(),
            key: "/nonexistent/tls.key".into(),
            agent: AgentAccount {
                namespace: "kube-system".into(),
                name: "zs-node".into(),
            },
            pods: PodPolicy {
                controller: "system:serviceaccount:kube-system:zs-controller".into(),
                vm_pod_creators: vec![],
            },
        }
    }

    /// A client that reaches no API server: none of these requests needs one.
    fn nowhere() -> Client {
        Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("uri"),
        ))
        .expect("client")
    }

    /// Sends `raw` as one connection's bytes; what the server answered (or its error).
    async fn exchange(raw: Vec<u8>) -> std::io::Result<String> {
        let (mut client, server) = tokio::io::duplex(MAX_BODY + MAX_HEAD + 1024);
        let (kube, cfg) = (nowhere(), cfg());
        let served = tokio::spawn(async move { one_request(server, &kube, &cfg).await });
        client.write_all(&raw).await?;
        client.shutdown().await?;
        let mut out = String::new();
        client.read_to_string(&mut out).await?;
        served.await.map_err(std::io::Error::other)??;
        Ok(out)
    }

    fn post(path: &str, body: &str) -> Vec<u8> {
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    #[tokio::test]
    async fn garbage_gets_a_clear_answer_or_a_closed_connection_never_a_panic() {
        let wrong = exchange(post("/mutate", "{}")).await.expect("answered");
        assert!(wrong.starts_with("HTTP/1.1 404"), "{wrong}");
        let junk = exchange(post(PATH, "{not json")).await.expect("answered");
        assert!(junk.starts_with("HTTP/1.1 400"), "{junk}");
        assert!(junk.contains("not an AdmissionReview"), "{junk}");
        // a review without its request: refused as invalid, in a review
        let empty = exchange(post(
            PATH,
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
        ))
        .await
        .expect("answered");
        assert!(empty.starts_with("HTTP/1.1 200"), "{empty}");
        assert!(
            empty.contains("\"allowed\":false") && empty.contains("not an admission request"),
            "{empty}"
        );
        // no length, a length past the bound, a head that never ends: dropped
        let no_len = b"POST /validate HTTP/1.1\r\nHost: x\r\n\r\n{}".to_vec();
        assert!(exchange(no_len).await.is_err());
        let huge = format!(
            "POST /validate HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert!(exchange(huge.into_bytes()).await.is_err());
        assert!(exchange(vec![b'a'; MAX_HEAD + 10]).await.is_err());
        // cut short: fewer bytes than the length says
        let short = b"POST /validate HTTP/1.1\r\nContent-Length: 100\r\n\r\n{}".to_vec();
        assert!(exchange(short).await.is_err());
    }

    #[tokio::test]
    async fn a_review_is_answered_with_its_uid_and_the_reason() {
        let review = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u7", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "name": "p", "namespace": "t", "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p",
                    "namespace": "t", "annotations": {api::keys::POD_SUBNET: "team-b"}}}}});
        let out = exchange(post(PATH, &review.to_string()))
            .await
            .expect("answered");
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        let body = out.split("\r\n\r\n").nth(1).expect("body");
        let v: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(v["response"]["uid"], "u7");
        assert_eq!(v["response"]["allowed"], false);
        let msg = v["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(msg.contains(api::keys::POD_SUBNET), "{msg}");
    }
}
