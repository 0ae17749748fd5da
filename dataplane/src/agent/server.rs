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

/// The socket file [`bind`] made, removed at shutdown only while it is still that file: a
/// force-deleted agent pod may still be shutting down when its replacement has bound the
/// same path (and `bind` replaced the file), and must not remove the replacement's socket.
pub struct BoundSocket {
    path: std::path::PathBuf,
    id: Option<(u64, u64)>,
}

impl BoundSocket {
    /// Remembers the file now at `path` (its device and inode).
    pub fn of(path: &Path) -> BoundSocket {
        BoundSocket {
            path: path.to_path_buf(),
            id: identity(path),
        }
    }

    /// Removes the file if it is still the one remembered; true when it did.
    pub fn remove_if_ours(&self) -> bool {
        self.id.is_some()
            && identity(&self.path) == self.id
            && std::fs::remove_file(&self.path).is_ok()
    }
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_socket_replaced_by_another_agent_is_left_in_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cni.sock");
        let _first = bind(&path).expect("bind");
        let first = BoundSocket::of(&path);
        // the replacement binds the same path while the first still runs
        let _second = bind(&path).expect("bind again");
        let second = BoundSocket::of(&path);
        assert!(
            !first.remove_if_ours(),
            "the first removed its successor's socket"
        );
        assert!(path.exists());
        assert!(second.remove_if_ours());
        assert!(!path.exists());
        // nothing there: nothing to remove
        assert!(!second.remove_if_ours());
    }
}
