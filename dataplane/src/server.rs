//! The CNI server: the unix socket the `zstack-ovn-cni` shim talks to
//! ([`cni::protocol`]: one request, one response per connection).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cni::error::code;
use cni::{CniError, Response};
use tokio::net::{UnixListener, UnixStream};

use crate::agent::Agent;

/// Binds `path` (parent created, a stale socket file removed, mode 0600).
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Accepts connections forever, one task per request.
pub async fn serve(listener: UnixListener, agent: Arc<Agent>) {
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                let agent = agent.clone();
                tokio::spawn(async move { one(conn, agent).await });
            }
            Err(e) => {
                tracing::warn!(error = %e, "CNI socket accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn one(mut conn: UnixStream, agent: Arc<Agent>) {
    let req = match tokio::time::timeout(
        Duration::from_secs(10),
        cni::protocol::read_request(&mut conn),
    )
    .await
    {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "unreadable CNI request");
            let resp = Response::Error(CniError::new(
                code::DECODE_FAILURE,
                format!("node agent: unreadable request: {e}"),
            ));
            let _ = cni::protocol::write_response(&mut conn, &resp).await;
            return;
        }
        Err(_) => {
            tracing::warn!("CNI request not received within 10 s");
            return;
        }
    };
    let resp = agent.handle(req).await;
    if let Err(e) = cni::protocol::write_response(&mut conn, &resp).await {
        tracing::warn!(error = %e, "CNI answer not delivered");
    }
}
