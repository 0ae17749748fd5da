//! The client: a cheap, cloneable handle to a background task that owns the connection.
//!
//! The task connects to the configured remotes in turn (exponential backoff with jitter
//! after each failed round), checks the `_Server` database so that with `leader_only` it
//! stays on the Raft leader, answers the server's echo requests, probes an idle
//! connection, re-issues monitors after a reconnection (`monitor_cond_since` with the last
//! transaction id, so only missed changes are replayed), and fails every request in flight
//! when the connection drops with [`Error::ConnectionLost`] — requests are never resent
//! automatically, since a transaction may have committed.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout};

use crate::codec::{DEFAULT_MAX_MESSAGE_SIZE, Decoder};
use crate::error::{Error, Result};
use crate::monitor::{
    DbShape, MonitorMethod, MonitorRequest, monitor_params, parse_updates1, parse_updates2,
};
use crate::ops::{OpResult, Operation, parse_results};
use crate::replica::{Replica, ReplicaData, ReplicaShared};
use crate::rpc::{Message, method, request, response_id};
use crate::server::ServerDbs;
use crate::transport::{self, Remote, Stream, TlsConfig};

/// Connection settings. [`ClientConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Servers to try in turn (all members of a Raft cluster).
    pub remotes: Vec<Remote>,
    /// Required for `ssl:` remotes.
    pub tls: Option<TlsConfig>,
    /// Only stay connected to the leader of a clustered database (default true).
    pub leader_only: bool,
    /// First delay after a failed round over all remotes (default 100 ms).
    pub backoff_initial: Duration,
    /// Largest delay between rounds (default 2 s).
    pub backoff_max: Duration,
    /// Time allowed to open a connection and check the server (default 10 s).
    pub connect_timeout: Duration,
    /// Bound on every request, including the wait for a connection (default 30 s).
    pub request_timeout: Duration,
    /// Send an echo after this much silence; drop the connection after twice it
    /// (default 5 s; `None` disables).
    pub inactivity_probe: Option<Duration>,
    /// Largest message accepted from the server (default 256 MiB).
    pub max_message_size: usize,
}

impl ClientConfig {
    pub fn new(remotes: Vec<Remote>) -> Self {
        ClientConfig {
            remotes,
            tls: None,
            leader_only: true,
            backoff_initial: Duration::from_millis(100),
            // a server back after a restart (OVN central's pod re-created) is found within
            // 2 s; a connection attempt every 2 s during a long outage costs nothing
            backoff_max: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            inactivity_probe: Some(Duration::from_secs(5)),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        }
    }

    /// Parses remotes in OVS syntax, e.g. `tcp:10.0.0.1:6641,tcp:10.0.0.2:6641`.
    pub fn parse(remotes: &str) -> Result<Self> {
        Ok(Self::new(Remote::parse_list(remotes)?))
    }

    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }
    pub fn with_leader_only(mut self, leader_only: bool) -> Self {
        self.leader_only = leader_only;
        self
    }
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff_initial = initial;
        self.backoff_max = max.max(initial);
        self
    }
    pub fn with_connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }
    pub fn with_request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }
    pub fn with_inactivity_probe(mut self, probe: Option<Duration>) -> Self {
        self.inactivity_probe = probe;
        self
    }
    pub fn with_max_message_size(mut self, max: usize) -> Self {
        self.max_message_size = max;
        self
    }
}

/// The connection state, as observed by [`Client::status`].
#[derive(Debug, Clone, Default)]
pub struct Status {
    pub connected: bool,
    /// The remote currently (or last) connected.
    pub remote: Option<Remote>,
    /// Number of connections established so far.
    pub connections: u64,
    /// Why the last attempt or connection failed.
    pub last_error: Option<String>,
}

enum Command {
    Request {
        method: String,
        params: Json,
        reply: oneshot::Sender<Result<Json>>,
    },
    Monitor {
        id: String,
        db: String,
        requests: Vec<MonitorRequest>,
        shape: DbShape,
        reply: oneshot::Sender<Result<Arc<ReplicaShared>>>,
    },
    Cancel {
        id: String,
    },
}

struct Inner {
    cmd: mpsc::UnboundedSender<Command>,
    status: watch::Receiver<Status>,
    closed: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
    request_timeout: Duration,
    next_monitor: AtomicU64,
}

/// A handle to an OVSDB connection. Cheap to clone; the connection closes when the last
/// handle (and the last [`Replica`]) is dropped, or on [`Client::close`].
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("status", &*self.inner.status.borrow())
            .finish()
    }
}

impl Client {
    /// Starts the connection task and waits (up to the request timeout) for the first
    /// usable connection.
    pub async fn connect(config: ClientConfig) -> Result<Client> {
        if config.remotes.is_empty() {
            return Err(Error::Config("no remotes".into()));
        }
        if config.tls.is_none()
            && let Some(r) = config
                .remotes
                .iter()
                .find(|r| matches!(r, Remote::Ssl { .. }))
        {
            return Err(Error::Config(format!(
                "remote {r} needs a TLS configuration"
            )));
        }
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (status_tx, status_rx) = watch::channel(Status::default());
        let (closed_tx, closed_rx) = watch::channel(false);
        let request_timeout = config.request_timeout;
        let task = Task {
            cfg: Arc::new(config),
            cmd_rx,
            closed: closed_rx,
            status: status_tx,
            monitors: BTreeMap::new(),
            next_remote: 0,
        };
        let handle = tokio::spawn(task.run());
        let client = Client {
            inner: Arc::new(Inner {
                cmd: cmd_tx,
                status: status_rx.clone(),
                closed: closed_tx,
                task: Mutex::new(Some(handle)),
                request_timeout,
                next_monitor: AtomicU64::new(1),
            }),
        };
        let mut rx = status_rx;
        let up = timeout(request_timeout, rx.wait_for(|s| s.connected))
            .await
            .map(|r| r.is_ok());
        match up {
            Ok(true) => Ok(client),
            Ok(false) => Err(Error::Closed),
            Err(_) => {
                let last = rx.borrow().last_error.clone();
                client.close().await;
                Err(match last {
                    Some(e) => Error::Disconnected(e),
                    None => Error::Timeout(request_timeout),
                })
            }
        }
    }

    /// The current connection state.
    pub fn status(&self) -> Status {
        self.inner.status.borrow().clone()
    }

    /// Waits until a connection is up, at most `t`.
    pub async fn wait_connected(&self, t: Duration) -> Result<()> {
        let mut rx = self.inner.status.clone();
        match timeout(t, rx.wait_for(|s| s.connected)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(Error::Closed),
            Err(_) => Err(Error::Timeout(t)),
        }
    }

    /// Sends any request and returns its `result`. Waits for a connection if there is
    /// none; the whole call is bounded by the request timeout. On [`Error::Timeout`] or
    /// [`Error::ConnectionLost`] the request may or may not have been executed.
    pub async fn request(&self, method: &str, params: Json) -> Result<Json> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .cmd
            .send(Command::Request {
                method: method.to_string(),
                params,
                reply: tx,
            })
            .map_err(|_| Error::Closed)?;
        let t = self.inner.request_timeout;
        match timeout(t, rx).await {
            Err(_) => Err(Error::Timeout(t)),
            Ok(Err(_)) => Err(Error::Closed),
            Ok(Ok(r)) => r,
        }
    }

    /// Runs a transaction. A failed operation is reported as [`Error::Transaction`].
    pub async fn transact(&self, db: &str, ops: Vec<Operation>) -> Result<Vec<OpResult>> {
        let mut params = Vec::with_capacity(ops.len() + 1);
        params.push(json!(db));
        params.extend(ops.iter().map(Operation::to_json));
        let result = self.request(method::TRANSACT, Json::Array(params)).await?;
        parse_results(&ops, &result)
    }

    /// Round-trips an `echo`.
    pub async fn echo(&self) -> Result<()> {
        let r = self.request(method::ECHO, json!(["ping"])).await?;
        if r == json!(["ping"]) {
            Ok(())
        } else {
            Err(Error::protocol(format!("echo answered {r}")))
        }
    }

    /// The databases the server holds.
    pub async fn list_dbs(&self) -> Result<Vec<String>> {
        let r = self.request(method::LIST_DBS, json!([])).await?;
        serde_json::from_value(r).map_err(|e| Error::protocol(format!("list_dbs: {e}")))
    }

    /// A database's schema as JSON.
    pub async fn get_schema(&self, db: &str) -> Result<Json> {
        self.request(method::GET_SCHEMA, json!([db])).await
    }

    /// Starts monitoring and returns the replica once its initial contents are in.
    /// The monitor survives reconnections; it is cancelled when the last replica clone is
    /// dropped.
    pub async fn monitor(&self, db: &str, requests: Vec<MonitorRequest>) -> Result<Replica> {
        let schema = self.get_schema(db).await?;
        let shape = DbShape::from_schema(&schema)?;
        let id = format!(
            "m{}",
            self.inner.next_monitor.fetch_add(1, Ordering::Relaxed)
        );
        let (tx, rx) = oneshot::channel();
        self.inner
            .cmd
            .send(Command::Monitor {
                id: id.clone(),
                db: db.to_string(),
                requests,
                shape,
                reply: tx,
            })
            .map_err(|_| Error::Closed)?;
        let handle = MonitorHandle {
            client: self.clone(),
            id,
        };
        let t = self.inner.request_timeout;
        let shared = match timeout(t, rx).await {
            Err(_) => return Err(Error::Timeout(t)),
            Ok(Err(_)) => return Err(Error::Closed),
            Ok(Ok(r)) => r?,
        };
        Ok(Replica {
            shared,
            _handle: Arc::new(handle),
        })
    }

    /// Closes the connection and stops the background task. Pending requests fail with
    /// [`Error::Closed`].
    pub async fn close(&self) {
        let _ = self.inner.closed.send(true);
        let handle = self
            .inner
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = handle
            && let Err(e) = h.await
        {
            tracing::warn!("ovsdb client task ended abnormally: {e}");
        }
    }
}

/// Keeps the connection alive for a replica and cancels its monitor on drop.
struct MonitorHandle {
    client: Client,
    id: String,
}

impl Drop for MonitorHandle {
    fn drop(&mut self) {
        let _ = self.client.inner.cmd.send(Command::Cancel {
            id: std::mem::take(&mut self.id),
        });
    }
}

fn jittered(d: Duration) -> Duration {
    use rand::Rng;
    let f: f64 = rand::rng().random_range(0.5..=1.0);
    d.mul_f64(f)
}

async fn wait_closed(rx: &mut watch::Receiver<bool>) {
    // An error means every Client handle is gone: closed as well.
    let _ = rx.wait_for(|c| *c).await;
}

enum Pending {
    User {
        method: String,
        reply: oneshot::Sender<Result<Json>>,
    },
    Monitor {
        id: String,
        method: MonitorMethod,
    },
    Ignore,
}

struct MonitorEntry {
    db: String,
    requests: Vec<MonitorRequest>,
    replica: Arc<ReplicaShared>,
    method: MonitorMethod,
    last_txn_id: Option<String>,
    first_reply: Option<oneshot::Sender<Result<Arc<ReplicaShared>>>>,
}

/// One live connection.
struct Conn {
    remote: Remote,
    stream: Box<dyn Stream>,
    decoder: Decoder,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    server: ServerDbs,
    write_timeout: Duration,
}

impl Conn {
    async fn send(&mut self, j: &Json) -> Result<()> {
        let bytes = serde_json::to_vec(j).map_err(|e| Error::protocol(e.to_string()))?;
        let w = async {
            self.stream.write_all(&bytes).await?;
            self.stream.flush().await
        };
        match timeout(self.write_timeout, w).await {
            Err(_) => Err(Error::Timeout(self.write_timeout)),
            Ok(r) => Ok(r?),
        }
    }

    async fn send_request(&mut self, method: &str, params: Json, p: Pending) -> Result<()> {
        self.next_id += 1;
        let id = self.next_id;
        self.pending.insert(id, p);
        self.send(&request(id, method, params)).await
    }

    async fn answer(&mut self, id: Json, method: &str, params: Json) -> Result<()> {
        let reply = if method == method::ECHO {
            Message::Response {
                id,
                result: Ok(params),
            }
        } else {
            Message::Response {
                id,
                result: Err(json!("unknown method")),
            }
        };
        self.send(&reply.to_json()).await
    }

    /// Reads until one message arrives (used only while setting the connection up).
    async fn recv(&mut self, buf: &mut [u8]) -> Result<Json> {
        loop {
            if let Some(j) = self.decoder.decode()? {
                return Ok(j);
            }
            let n = self.stream.read(buf).await?;
            if n == 0 {
                return Err(Error::Disconnected("connection closed by server".into()));
            }
            self.decoder.push(&buf[..n]);
        }
    }
}

enum Exit {
    Closed,
    Lost,
}

struct Task {
    cfg: Arc<ClientConfig>,
    cmd_rx: mpsc::UnboundedReceiver<Command>,
    closed: watch::Receiver<bool>,
    status: watch::Sender<Status>,
    monitors: BTreeMap<String, MonitorEntry>,
    next_remote: usize,
}

impl Task {
    async fn run(mut self) {
        let mut backoff = self.cfg.backoff_initial;
        loop {
            let Some(conn) = self.establish(&mut backoff).await else {
                break;
            };
            backoff = self.cfg.backoff_initial;
            match self.serve(conn).await {
                Exit::Closed => break,
                Exit::Lost => continue,
            }
        }
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.cmd_rx.close();
        while let Ok(cmd) = self.cmd_rx.try_recv() {
            match cmd {
                Command::Request { reply, .. } => {
                    let _ = reply.send(Err(Error::Closed));
                }
                Command::Monitor { reply, .. } => {
                    let _ = reply.send(Err(Error::Closed));
                }
                Command::Cancel { .. } => {}
            }
        }
        for (_, m) in std::mem::take(&mut self.monitors) {
            m.replica.set_synced(false);
            if let Some(r) = m.first_reply {
                let _ = r.send(Err(Error::Closed));
            }
        }
        self.status.send_modify(|s| s.connected = false);
        tracing::debug!("ovsdb client stopped");
    }

    /// Connects to the next usable remote; `None` when the client is closed.
    async fn establish(&mut self, backoff: &mut Duration) -> Option<Conn> {
        let mut closed = self.closed.clone();
        loop {
            let n = self.cfg.remotes.len();
            for _ in 0..n {
                let remote = self.cfg.remotes[self.next_remote % n].clone();
                self.next_remote = self.next_remote.wrapping_add(1);
                let attempt = timeout(self.cfg.connect_timeout, open(&self.cfg, remote.clone()));
                let result = tokio::select! {
                    _ = wait_closed(&mut closed) => return None,
                    r = attempt => r.unwrap_or(Err(Error::Timeout(self.cfg.connect_timeout))),
                };
                match result {
                    Ok(conn) => {
                        tracing::info!(%remote, "connected to ovsdb-server");
                        return Some(conn);
                    }
                    Err(e) => {
                        tracing::debug!(%remote, "cannot use remote: {e}");
                        self.status
                            .send_modify(|s| s.last_error = Some(format!("{remote}: {e}")));
                    }
                }
            }
            let d = jittered(*backoff);
            *backoff = backoff.saturating_mul(2).min(self.cfg.backoff_max);
            tracing::debug!(delay = ?d, "no usable remote; backing off");
            tokio::select! {
                _ = wait_closed(&mut closed) => return None,
                _ = tokio::time::sleep(d) => {}
            }
        }
    }

    async fn serve(&mut self, mut conn: Conn) -> Exit {
        self.status.send_modify(|s| {
            s.connected = true;
            s.remote = Some(conn.remote.clone());
            s.connections += 1;
        });
        if let Err(e) = self.resume_monitors(&mut conn).await {
            return self.lost(conn, e);
        }
        let mut closed = self.closed.clone();
        let probe = self.cfg.inactivity_probe;
        let mut probe_at = probe.and_then(|p| Instant::now().checked_add(p));
        let mut probe_sent = false;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                _ = wait_closed(&mut closed) => {
                    self.fail_pending(&mut conn, |_| Error::Closed);
                    return Exit::Closed;
                }
                r = conn.stream.read(&mut buf) => {
                    let n = match r {
                        Ok(0) => {
                            let e = Error::Disconnected("connection closed by server".into());
                            return self.lost(conn, e);
                        }
                        Ok(n) => n,
                        Err(e) => return self.lost(conn, e.into()),
                    };
                    probe_at = probe.and_then(|p| Instant::now().checked_add(p));
                    probe_sent = false;
                    conn.decoder.push(&buf[..n]);
                    loop {
                        let msg = match conn.decoder.decode() {
                            Ok(Some(m)) => m,
                            Ok(None) => break,
                            Err(e) => return self.lost(conn, e),
                        };
                        if let Err(e) = self.handle(&mut conn, msg).await {
                            return self.lost(conn, e);
                        }
                    }
                }
                cmd = self.cmd_rx.recv() => {
                    let Some(cmd) = cmd else {
                        return Exit::Closed;
                    };
                    if let Err(e) = self.dispatch(&mut conn, cmd).await {
                        return self.lost(conn, e);
                    }
                }
                _ = sleep_until(probe_at.unwrap_or(far)), if probe_at.is_some() => {
                    if probe_sent {
                        let e = Error::Disconnected("inactivity probe: no answer".into());
                        return self.lost(conn, e);
                    }
                    probe_sent = true;
                    probe_at = probe.and_then(|p| Instant::now().checked_add(p));
                    if let Err(e) = conn.send_request(method::ECHO, json!([]), Pending::Ignore).await {
                        return self.lost(conn, e);
                    }
                }
            }
        }
    }

    fn fail_pending(&mut self, conn: &mut Conn, err: impl Fn(&str) -> Error) {
        for (_, p) in conn.pending.drain() {
            if let Pending::User { method, reply } = p {
                let _ = reply.send(Err(err(&method)));
            }
        }
        for m in self.monitors.values() {
            m.replica.set_synced(false);
        }
    }

    fn lost(&mut self, mut conn: Conn, why: Error) -> Exit {
        let reason = why.to_string();
        tracing::warn!(remote = %conn.remote, "ovsdb connection lost: {reason}");
        self.fail_pending(&mut conn, |m| Error::ConnectionLost {
            method: m.to_string(),
            reason: reason.clone(),
        });
        self.status.send_modify(|s| {
            s.connected = false;
            s.last_error = Some(format!("{}: {reason}", conn.remote));
        });
        Exit::Lost
    }

    async fn resume_monitors(&mut self, conn: &mut Conn) -> Result<()> {
        // Drop monitors whose caller gave up before they were ever established.
        let gone: Vec<String> = self
            .monitors
            .iter()
            .filter(|(_, m)| m.first_reply.as_ref().is_some_and(|r| r.is_closed()))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.monitors.remove(&id);
        }
        let ids: Vec<String> = self.monitors.keys().cloned().collect();
        for id in ids {
            self.send_monitor(conn, &id).await?;
        }
        Ok(())
    }

    async fn send_monitor(&mut self, conn: &mut Conn, id: &str) -> Result<()> {
        let Some(m) = self.monitors.get(id) else {
            return Ok(());
        };
        let params = monitor_params(m.method, &m.db, id, &m.requests, m.last_txn_id.as_deref());
        let p = Pending::Monitor {
            id: id.to_string(),
            method: m.method,
        };
        conn.send_request(m.method.name(), params, p).await
    }

    async fn dispatch(&mut self, conn: &mut Conn, cmd: Command) -> Result<()> {
        match cmd {
            Command::Request {
                method,
                params,
                reply,
            } => {
                if reply.is_closed() {
                    return Ok(());
                }
                conn.send_request(&method.clone(), params, Pending::User { method, reply })
                    .await
            }
            Command::Monitor {
                id,
                db,
                requests,
                shape,
                reply,
            } => {
                let data = ReplicaData::new(&shape, &requests);
                self.monitors.insert(
                    id.clone(),
                    MonitorEntry {
                        replica: Arc::new(ReplicaShared::new(&db, data)),
                        db,
                        requests,
                        method: MonitorMethod::CondSince,
                        last_txn_id: None,
                        first_reply: Some(reply),
                    },
                );
                self.send_monitor(conn, &id).await
            }
            Command::Cancel { id } => {
                if self.monitors.remove(&id).is_some() {
                    conn.send_request(method::MONITOR_CANCEL, json!([id]), Pending::Ignore)
                        .await?;
                }
                Ok(())
            }
        }
    }

    async fn handle(&mut self, conn: &mut Conn, msg: Json) -> Result<()> {
        match Message::from_json(msg)? {
            Message::Request { id, method, params } => {
                if method != method::ECHO {
                    tracing::debug!(%method, "unexpected request from server");
                }
                conn.answer(id, &method, params).await
            }
            Message::Notification { method, params } => match method.as_str() {
                method::UPDATE | method::UPDATE2 | method::UPDATE3 => {
                    self.on_update(conn, &method, params)
                }
                other => {
                    tracing::debug!(method = other, "ignoring notification");
                    Ok(())
                }
            },
            Message::Response { id, result } => {
                let Some(p) = response_id(&id).and_then(|id| conn.pending.remove(&id)) else {
                    tracing::debug!(%id, "response to an unknown request");
                    return Ok(());
                };
                match p {
                    Pending::User { method, reply } => {
                        let _ = reply.send(result.map_err(|error| Error::Rpc { method, error }));
                        Ok(())
                    }
                    Pending::Monitor { id, method } => {
                        self.on_monitor_reply(conn, &id, method, result).await
                    }
                    Pending::Ignore => Ok(()),
                }
            }
        }
    }

    fn on_update(&mut self, conn: &mut Conn, method: &str, params: Json) -> Result<()> {
        let Json::Array(mut p) = params else {
            return Err(Error::protocol(format!("{method} params are not an array")));
        };
        let (id, txn, updates) = match (method, p.len()) {
            (method::UPDATE3, 3) => {
                let u = p.pop();
                let t = p.pop();
                (p.pop(), t, u)
            }
            (method::UPDATE | method::UPDATE2, 2) => {
                let u = p.pop();
                (p.pop(), None, u)
            }
            _ => return Err(Error::protocol(format!("{method} has malformed params"))),
        };
        let updates = updates.unwrap_or(Json::Null);
        let id = match id {
            Some(Json::String(s)) => s,
            other => return Err(Error::protocol(format!("{method} monitor id {other:?}"))),
        };
        if id == crate::server::MONITOR_ID {
            conn.server.apply(parse_updates2(&updates)?);
            return conn.server.check(self.cfg.leader_only, &conn.remote);
        }
        let Some(m) = self.monitors.get_mut(&id) else {
            tracing::debug!(%id, "update for an unknown monitor");
            return Ok(());
        };
        let parsed = if method == method::UPDATE {
            parse_updates1(&updates)
        } else {
            parse_updates2(&updates)
        };
        match parsed {
            Ok(u) => {
                m.replica.apply(u, false);
                if let Some(Json::String(t)) = txn {
                    m.last_txn_id = Some(t);
                }
                Ok(())
            }
            Err(e) => {
                // The replica can no longer be trusted: resync from scratch.
                m.last_txn_id = None;
                Err(e)
            }
        }
    }

    async fn on_monitor_reply(
        &mut self,
        conn: &mut Conn,
        id: &str,
        used: MonitorMethod,
        result: std::result::Result<Json, Json>,
    ) -> Result<()> {
        let Some(m) = self.monitors.get_mut(id) else {
            return Ok(());
        };
        let result = match result {
            Ok(r) => r,
            Err(error) => {
                let err = Error::Rpc {
                    method: used.name().into(),
                    error,
                };
                if err.is_unknown_method()
                    && let Some(next) = used.fallback()
                {
                    tracing::info!(from = used.name(), to = next.name(), "monitor fallback");
                    m.method = next;
                    return self.send_monitor(conn, id).await;
                }
                tracing::warn!(%id, db = %m.db, "monitor failed: {err}");
                if let Some(r) = m.first_reply.take() {
                    let _ = r.send(Err(err));
                    self.monitors.remove(id);
                }
                return Ok(());
            }
        };
        let applied = match used {
            MonitorMethod::CondSince => match result {
                Json::Array(a) if a.len() == 3 => {
                    let found = a[0].as_bool().unwrap_or(false);
                    parse_updates2(&a[2]).map(|u| {
                        tracing::debug!(%id, found, "monitor_cond_since established");
                        m.replica.count_sync(found);
                        m.replica.apply(u, !found);
                        m.last_txn_id = a[1].as_str().map(str::to_string);
                    })
                }
                _ => Err(Error::protocol(
                    "monitor_cond_since reply is not [found, id, updates]",
                )),
            },
            MonitorMethod::Cond => parse_updates2(&result).map(|u| {
                m.replica.count_sync(false);
                m.replica.apply(u, true)
            }),
            MonitorMethod::Plain => parse_updates1(&result).map(|u| {
                m.replica.count_sync(false);
                m.replica.apply(u, true)
            }),
        };
        if let Err(e) = applied {
            m.last_txn_id = None;
            return Err(e);
        }
        m.replica.set_synced(true);
        if let Some(r) = m.first_reply.take() {
            let _ = r.send(Ok(m.replica.clone()));
        }
        Ok(())
    }
}

/// Opens a connection and checks, through `_Server`, that the server is usable.
async fn open(cfg: &ClientConfig, remote: Remote) -> Result<Conn> {
    let stream = transport::connect(&remote, cfg.tls.as_ref()).await?;
    let mut conn = Conn {
        remote,
        stream,
        decoder: Decoder::new(cfg.max_message_size),
        next_id: 0,
        pending: HashMap::new(),
        server: ServerDbs::default(),
        write_timeout: cfg.request_timeout,
    };
    conn.next_id += 1;
    let id = conn.next_id;
    conn.send(&request(
        id,
        method::MONITOR_COND,
        crate::server::monitor_params(),
    ))
    .await?;
    let mut buf = vec![0u8; 16 * 1024];
    let result = loop {
        match Message::from_json(conn.recv(&mut buf).await?)? {
            Message::Request { id, method, params } => conn.answer(id, &method, params).await?,
            Message::Response { id: rid, result } if response_id(&rid) == Some(id) => {
                break result;
            }
            other => tracing::debug!(?other, "ignored while connecting"),
        }
    };
    match result {
        Ok(updates) => {
            conn.server.apply(parse_updates2(&updates)?);
            conn.server.check(cfg.leader_only, &conn.remote)?;
        }
        Err(error) => {
            // Servers older than OVS 2.9 have no _Server database: nothing to check.
            tracing::debug!(remote = %conn.remote, %error, "no _Server database");
        }
    }
    Ok(conn)
}
