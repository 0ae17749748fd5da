//! # endpoints — the HTTP endpoints of the daemons
//!
//! A tiny HTTP/1.1 server (one request per connection, `Connection: close`) shared by the
//! controller and the node agent:
//!
//! | path | answer |
//! |---|---|
//! | `GET /metrics` | 200, the text of the [`Endpoints`]' render callback (Prometheus/OpenMetrics) |
//! | `GET /healthz` | 200 `ok` while the process runs |
//! | `GET /readyz` | 200 or 503 with a one-line reason from the readiness callback |
//! | anything else | 404 (405 for another method on a known path) |
//!
//! [`render_registry`] gives a `prometheus-client` registry's text for the render callback.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The text exposition of `registry` (OpenMetrics); empty if encoding fails.
pub fn render_registry(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
        out.clear();
    }
    out
}

/// Renders the metrics text on each scrape.
pub type Render = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;

/// Tells whether the daemon is ready and why (one line).
pub type Ready = Arc<dyn Fn() -> Readiness + Send + Sync>;

/// The answer of `/readyz`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    pub ready: bool,
    /// One line, e.g. "leader: synced" or "not ready: NB not connected".
    pub reason: String,
}

impl Readiness {
    pub fn ready(reason: impl Into<String>) -> Self {
        Readiness {
            ready: true,
            reason: reason.into(),
        }
    }

    pub fn not_ready(reason: impl Into<String>) -> Self {
        Readiness {
            ready: false,
            reason: reason.into(),
        }
    }
}

/// What the server answers with.
#[derive(Clone)]
pub struct Endpoints {
    render: Render,
    ready: Ready,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Endpoints")
    }
}

/// The content type of `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Endpoints {
    /// `render` answers `/metrics`, `ready` answers `/readyz`.
    pub fn new(render: Render, ready: Ready) -> Self {
        Endpoints { render, ready }
    }

    /// The status line, content type and body for a request head.
    async fn answer(&self, head: &str) -> (&'static str, &'static str, String) {
        let mut words = head.split_whitespace();
        let method = words.next().unwrap_or("");
        let path = words.next().unwrap_or("");
        let path = path.split('?').next().unwrap_or("");
        if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
            return ("404 Not Found", "text/plain", "not found\n".to_string());
        }
        if method != "GET" {
            return (
                "405 Method Not Allowed",
                "text/plain",
                "method not allowed\n".to_string(),
            );
        }
        match path {
            "/metrics" => ("200 OK", METRICS_CONTENT_TYPE, (self.render)().await),
            "/healthz" => ("200 OK", "text/plain", "ok\n".to_string()),
            _ => {
                let r = (self.ready)();
                let status = if r.ready {
                    "200 OK"
                } else {
                    "503 Service Unavailable"
                };
                (status, "text/plain", format!("{}\n", r.reason.trim_end()))
            }
        }
    }
}

/// A listen address that is not `IP:PORT` ([`parse_listen_addr`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not IP:PORT (e.g. 10.0.0.5:10665 or [fd00::5]:10665)")]
pub struct BadListenAddr(pub String);

/// Parses a listen address: `IP:PORT`, `[IPv6]:PORT`, or `IPv6:PORT` without brackets
/// (what `--metrics-addr=$(HOST_IP):PORT` gives in a pod spec on an IPv6 node: the last
/// `:` starts the port).
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, BadListenAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let bad = || BadListenAddr(s.to_string());
    let (ip, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let ip: std::net::IpAddr = ip.parse().map_err(|_| bad())?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    Ok(SocketAddr::new(ip, port))
}

/// Binds `addr` and returns the listener and its actual address (for port 0). A specific
/// address is bound with `IP_FREEBIND`: a node's address may be between interfaces when
/// the daemon starts (the uplink keeper moves the NIC's address onto br-phy), and the
/// socket serves it once it is back.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    if !addr.ip().is_unspecified() {
        let freebind = match addr {
            SocketAddr::V4(_) => sock.set_freebind_v4(true),
            SocketAddr::V6(_) => sock.set_freebind_v6(true),
        };
        if let Err(e) = freebind {
            tracing::debug!(error = %e, "endpoints: IP_FREEBIND refused; binding without it");
        }
    }
    sock.bind(&addr.into())?;
    sock.listen(128)?;
    sock.set_nonblocking(true)?;
    let l = TcpListener::from_std(sock.into())?;
    let a = l.local_addr()?;
    Ok((l, a))
}

/// Serves the endpoints on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, endpoints: Endpoints) {
    loop {
        let conn = match listener.accept().await {
            Ok((c, _)) => c,
            Err(e) => {
                tracing::warn!(error = %e, "endpoints: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move { handle(conn, &endpoints).await });
    }
}

/// Reads one request head (5 s, 16 KiB at most) and answers it.
async fn handle(mut conn: TcpStream, endpoints: &Endpoints) {
    let mut buf = Vec::with_capacity(1024);
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16384 {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    if read.is_err() {
        return;
    }
    let head = String::from_utf8_lossy(&buf);
    let (status, ctype, body) = endpoints.answer(&head).await;
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(resp.as_bytes()).await;
    let _ = conn.shutdown().await;
}

#[cfg(test)]
mod tests;
