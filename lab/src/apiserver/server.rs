//! The object-store daemon (`zovn lab serve`): one process holding the lab's
//! [`LabStore`], the real [`Controller`] reading it (NB from the lab manifest, default
//! [`ClusterConfig`] with the lab's default Subnet from its cluster CIDR and the lab's
//! controller and gateway modes), and the unix socket serving [`protocol`](super::protocol) requests.
//!
//! Start-up: own session and umask 077, pidfile, NB connection and replica, `store.json`
//! loaded (if any), one Node per lab node registered, `mark_synced`, controller task,
//! pod runtime task ([`PodRuntime`]), socket (mode 0600). `get` of pods adds what the
//! runtime knows (status: phase, podIP, Ready; netns and datapath annotations).
//! SIGTERM/SIGINT: save, remove socket and pidfile, exit 0. If the
//! controller stops (NB gone), the daemon exits non-zero.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Gateway as lab_gateway;
use anyhow::{Context, bail};
use control::controller::Controller;
use control::reconcile::Reconciler;
use control::source::memory::MemoryStore;
use control::translate::{ClusterConfig, DefaultSubnet, GatewayMode, Mode};
use ovsdb::{Client, ClientConfig, Replica};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::signal::unix::{SignalKind, signal};

use super::objects::LabObject;
use super::persist::{self, Persister};
use super::progress::pending;
use super::protocol::{Request, ResourceKind, Response};
use super::store::{LabNode, LabStore};
use super::writer::PersistingWriter;
use crate::config::ControllerMode;
use crate::lab::Lab;
use crate::pods::PodRuntime;
use crate::state::Layout;

/// How often `wait` looks again.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// Runs the daemon for the lab in `dir` until SIGTERM/SIGINT (blocking).
pub fn serve(dir: &Path, pidfile: &Path) -> anyhow::Result<()> {
    // own session: no terminal, no signals meant for the shell that started `zovn lab up`
    // (fails only if already a session/group leader, which is fine)
    let _ = nix::unistd::setsid();
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let layout = Layout::new(dir);
    layout.create_api_dirs()?;
    std::fs::write(pidfile, format!("{}\n", std::process::id()))
        .with_context(|| format!("write pidfile {}", pidfile.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("start the async runtime")?;
    let r = rt.block_on(run(&layout));
    let _ = std::fs::remove_file(layout.api_socket());
    let _ = std::fs::remove_file(pidfile);
    if let Err(e) = &r {
        tracing::error!(error = %format!("{e:#}"), "object store stopped");
    }
    r
}

struct Ctx {
    events: super::writer::EventLog,
    store: Arc<LabStore>,
    runtime: Arc<PodRuntime>,
    persister: Arc<Persister>,
    nb: Replica,
    owner: String,
}

async fn run(layout: &Layout) -> anyhow::Result<()> {
    let lab = Lab::open(&layout.dir)
        .with_context(|| format!("read the lab in {}", layout.dir.display()))?;
    let nb_remote = lab.nb_remote();
    if nb_remote.is_empty() {
        bail!("the lab in {} has no central", layout.dir.display());
    }
    let nodes: Vec<LabNode> = lab
        .nodes()
        .iter()
        .map(|n| {
            Ok(LabNode {
                name: n.system_id.clone(),
                index: n.index,
                address: n
                    .encap_ip
                    .parse()
                    .with_context(|| format!("node{} encap ip {:?}", n.index, n.encap_ip))?,
            })
        })
        .collect::<anyhow::Result<_>>()?;

    // the default Subnet from the lab's cluster CIDR (`zovn lab up --cluster-cidr`)
    let cluster_cidr = &lab.config().cluster_cidr;
    let cfg = ClusterConfig {
        default_subnet: (!cluster_cidr.is_empty()).then(|| DefaultSubnet {
            name: DefaultSubnet::NAME.to_string(),
            cidrs: cluster_cidr.clone(),
        }),
        // dual-stack management ports: pods' IPv6 egress (the nodes have IPv6 underlay
        // addresses and routes to the external network's)
        join_v6: control::translate::JoinV6::new(ipnet::IpNet::V6(ipnet::Ipv6Net::new_assert(
            std::net::Ipv6Addr::new(0xfd98, 0, 0, 0, 0, 0, 0, 0),
            64,
        ))),
        mode: match lab.config().mode {
            ControllerMode::Standalone => Mode::Standalone,
            ControllerMode::External => Mode::External,
        },
        gateway: match lab.config().gateway {
            lab_gateway::Local => GatewayMode::Local,
            lab_gateway::Shared => GatewayMode::Shared,
            lab_gateway::Off => GatewayMode::Off,
        },
        external_ips: api::services::ExternalIpPolicy::new(lab.config().external_ip_cidrs.clone()),
        platform_security_groups: lab.config().platform_security_groups,
        ..ClusterConfig::default()
    };
    let nb = ClientConfig::parse(&nb_remote).with_context(|| format!("NB remote {nb_remote}"))?;
    let client = Client::connect(nb)
        .await
        .with_context(|| format!("connect to the NB {nb_remote}"))?;
    let rec = Reconciler::start(client, &cfg.cluster_id)
        .await
        .context("start the NB replica")?;
    let replica = rec.replica().clone();

    let (mem, rx) = MemoryStore::new();
    let store = Arc::new(LabStore::new(mem.clone(), nodes));
    let store_file = layout.store_file();
    let saved = persist::load(&store_file)?;
    let restored = saved.is_some();
    store.restore(saved.unwrap_or_default());
    mem.mark_synced();
    let persister = Arc::new(Persister::new(store_file, store.clone()));
    persister.save_now()?;
    tokio::spawn(persister.clone().run());

    let events: super::writer::EventLog = Default::default();
    let writer = PersistingWriter::new(mem, persister.clone(), events.clone());
    let mut controller = tokio::spawn(Controller::new(cfg.clone(), rec, writer).run(rx));

    // the pod runtime: pods become netns wired by the node's CNI plugin
    let zovn = std::env::current_exe().context("the zovn binary (for pod responders)")?;
    let runtime = PodRuntime::new(lab.dir(), lab.names().prefix(), lab.nodes(), zovn)
        .with_context(|| format!("read {}", layout.pods_file().display()))?;
    let runtime_task = tokio::spawn(runtime.clone().run(store.clone()));
    let slices_task = tokio::spawn(produce_endpoint_slices(store.clone(), runtime.clone()));

    let sock = layout.api_socket();
    let listener = bind(&sock)?;
    let ctx = Arc::new(Ctx {
        events,
        store: store.clone(),
        runtime,
        persister: persister.clone(),
        nb: replica,
        owner: cfg.cluster_id.clone(),
    });
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    tracing::info!(
        socket = %sock.display(),
        nb = %nb_remote,
        nodes = ?store.nodes().iter().map(|n| &n.name).collect::<Vec<_>>(),
        restored,
        "lab object store serving"
    );
    let result = loop {
        tokio::select! {
            conn = listener.accept() => match conn {
                Ok((stream, _)) => {
                    tokio::spawn(serve_conn(stream, ctx.clone()));
                }
                Err(e) => tracing::warn!(error = %e, "accept failed"),
            },
            _ = term.recv() => break Ok(()),
            _ = int.recv() => break Ok(()),
            r = &mut controller => break match r {
                Ok(Ok(())) => Err(anyhow::anyhow!("the controller stopped")),
                Ok(Err(e)) => Err(anyhow::Error::new(e).context("the controller stopped")),
                Err(e) => Err(anyhow::Error::new(e).context("the controller task failed")),
            },
        }
    };
    controller.abort();
    // pods stay as they are: a restarted daemon adopts them, `down` removes them
    runtime_task.abort();
    slices_task.abort();
    persister.save_now()?;
    tracing::info!("lab object store stopped");
    result
}

/// The EndpointSlice producer ([`super::endpoints`]): recomputes the slices every
/// [`SLICE_PERIOD`] from the stored Services and Pods, the controller's addresses and the
/// runtime's readiness (which change without an apply); unchanged slices emit nothing.
async fn produce_endpoint_slices(store: Arc<LabStore>, runtime: Arc<PodRuntime>) {
    let mut tick = tokio::time::interval(SLICE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        store.sync_endpoint_slices(&|key: &str| runtime.record(key).is_some_and(|r| r.ready));
    }
}

/// How often the EndpointSlice producer looks again.
const SLICE_PERIOD: Duration = Duration::from_millis(100);

/// Binds the socket (mode 0600); a stale socket file is replaced, a live one is an error.
fn bind(sock: &Path) -> anyhow::Result<UnixListener> {
    if sock.exists() {
        if std::os::unix::net::UnixStream::connect(sock).is_ok() {
            bail!("another object store is serving {}", sock.display());
        }
        std::fs::remove_file(sock).with_context(|| format!("remove stale {}", sock.display()))?;
    }
    let l = UnixListener::bind(sock).with_context(|| format!("listen on {}", sock.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", sock.display()))?;
    Ok(l)
}

async fn serve_conn(stream: UnixStream, ctx: Arc<Ctx>) {
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    loop {
        let line = match lines.next_line().await {
            Ok(Some(l)) => l,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(error = %e, "client read failed");
                return;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let resp = match serde_json::from_str::<Request>(&line) {
            Ok(req) => handle(req, &ctx).await,
            Err(e) => Response::Error {
                message: format!("bad request: {e}"),
            },
        };
        let mut out = serde_json::to_string(&resp).unwrap_or_else(|e| {
            format!(r#"{{"result":"error","message":"cannot encode the answer: {e}"}}"#)
        });
        out.push('\n');
        if w.write_all(out.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn handle(req: Request, ctx: &Ctx) -> Response {
    match req {
        Request::Ping => Response::Pong {
            pid: std::process::id(),
            nodes: ctx.store.nodes().iter().map(|n| n.name.clone()).collect(),
        },
        Request::Apply { objects } => {
            let mut decoded = Vec::with_capacity(objects.len());
            let mut problems = Vec::new();
            for (i, v) in objects.into_iter().enumerate() {
                match LabObject::from_value(v) {
                    Ok(o) => decoded.push(o),
                    Err(e) => problems.push(format!("object {}: {e}", i + 1)),
                }
            }
            if !problems.is_empty() {
                return Response::Error {
                    message: format!("nothing applied: {}", problems.join("; ")),
                };
            }
            match ctx.store.apply(decoded) {
                Ok(changes) => {
                    save(ctx);
                    Response::Applied { changes }
                }
                Err(e) => Response::Error {
                    message: format!("nothing applied: {e}"),
                },
            }
        }
        Request::Delete { objects } => {
            let changes = ctx.store.delete(&objects);
            save(ctx);
            Response::Deleted { changes }
        }
        Request::Get { kind } => {
            let mut items = ctx.store.get(kind);
            if kind == ResourceKind::Pod {
                for p in &mut items {
                    ctx.runtime.decorate(p);
                }
            }
            Response::Objects { items }
        }
        Request::AnnotateNode { name, annotations } => {
            if !ctx.store.nodes().iter().any(|n| n.name == name) {
                return Response::Error {
                    message: format!("node {name:?} is not a lab node"),
                };
            }
            use control::source::Writer;
            match ctx.store.memory().annotate_node(&name, &annotations).await {
                Ok(()) => {
                    save(ctx);
                    Response::Applied {
                        changes: vec![super::protocol::Change {
                            object: format!("node/{name}"),
                            action: super::protocol::Action::Configured,
                        }],
                    }
                }
                Err(e) => Response::Error {
                    message: e.to_string(),
                },
            }
        }
        Request::Event { event } => {
            if event["reason"].as_str().is_none()
                || event["involvedObject"]["name"].as_str().is_none()
            {
                return Response::Error {
                    message: "an event needs reason and involvedObject.name".into(),
                };
            }
            let mut ev = ctx.events.lock().unwrap_or_else(|e| e.into_inner());
            ev.push_back(event);
            while ev.len() > super::protocol::MAX_EVENTS {
                ev.pop_front();
            }
            Response::Applied { changes: vec![] }
        }
        Request::Events => Response::Objects {
            items: ctx
                .events
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned()
                .collect(),
        },
        Request::Wait { timeout_ms } => {
            let t0 = Instant::now();
            let timeout = Duration::from_millis(timeout_ms);
            let resp = loop {
                let p = pending(&ctx.store, Some(&ctx.nb), &ctx.owner);
                if p.is_empty() || t0.elapsed() >= timeout {
                    break Response::Waited {
                        done: p.is_empty(),
                        pending: p,
                    };
                }
                tokio::time::sleep(WAIT_POLL).await;
            };
            save(ctx);
            resp
        }
    }
}

fn save(ctx: &Ctx) {
    if let Err(e) = ctx.persister.save_now() {
        tracing::warn!(error = %format!("{e:#}"), "saving the store failed");
    }
}
