//! Run code inside a network namespace.
//!
//! `setns(2)` changes the namespace of the *calling thread* only, and a netlink socket is
//! bound to the namespace it was opened in. So each call here spawns a dedicated OS thread,
//! enters the namespace on it, builds a current-thread tokio runtime there and opens a
//! fresh rtnetlink connection after entering. The thread exits when the closure returns,
//! so no thread of the caller's pool is ever left in a foreign namespace.

use std::fs::File;
use std::future::Future;
use std::path::Path;

use nix::sched::{CloneFlags, setns};
use rtnetlink::Handle;

use super::{PlumbError, StepExt};

/// Runs `f` on a fresh OS thread that first entered the netns at `netns` (`None`: stay in
/// the calling thread's netns). Blocks until the closure returns.
///
/// The namespace file is opened on the calling thread, so a wrong path fails before any
/// thread is spawned.
pub fn run_blocking_in_netns<T, F>(netns: Option<&Path>, f: F) -> Result<T, PlumbError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, PlumbError> + Send + 'static,
{
    let ns = match netns {
        Some(p) => Some((
            File::open(p).step(|| format!("open netns {}", p.display()))?,
            p.display().to_string(),
        )),
        None => None,
    };
    let what = ns.as_ref().map_or_else(
        || "current netns".to_string(),
        |(_, p)| format!("netns {p}"),
    );
    let worker = std::thread::Builder::new()
        .name("zovn-netns".into())
        .spawn(move || {
            if let Some((file, path)) = &ns {
                setns(file, CloneFlags::CLONE_NEWNET).step(|| format!("enter netns {path}"))?;
                tracing::trace!(netns = %path, "entered netns on worker thread");
            }
            f()
        })
        .step(|| format!("spawn worker thread for {what}"))?;
    worker
        .join()
        .map_err(|_| PlumbError::ThreadPanicked { netns: what })?
}

/// Runs the async closure `f` inside the netns at `netns` (`None`: the calling thread's
/// netns) with an rtnetlink [`Handle`] whose socket was opened *inside* that namespace.
///
/// Blocking: call it from `tokio::task::spawn_blocking` when on an async runtime.
pub fn run_in_netns<T, F, Fut>(netns: Option<&Path>, f: F) -> Result<T, PlumbError>
where
    T: Send + 'static,
    F: FnOnce(Handle) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, PlumbError>>,
{
    run_blocking_in_netns(netns, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .step(|| "build tokio runtime in netns thread".to_string())?;
        rt.block_on(async move {
            let (conn, handle, _) =
                rtnetlink::new_connection().step(|| "open rtnetlink socket".to_string())?;
            let conn = tokio::spawn(conn);
            let out = f(handle).await;
            conn.abort();
            out
        })
    })
}
