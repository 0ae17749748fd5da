//! Where the agent reads pods, its Node and the Subnets: the lab's object store
//! (`lab:SOCKET`, JSON lines) or a Kubernetes API (`kube`), read through reflector stores
//! (this node's pods, its Node, the Subnets, the Services, the EndpointSlices) kept by one
//! watch each, so an ADD or a periodic pass reads memory, not the API server.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use api::lab_store::{Request, ResourceKind, Response};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// The parts of a pod the agent uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub node_name: Option<String>,
    pub annotations: BTreeMap<String, String>,
}

impl PodInfo {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// A non-empty annotation.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

pub use crate::source_error::SourceError;

/// Read access to pods, nodes and Subnets.
pub trait PodSource: Send + Sync {
    /// The pod, or `None` when it does not exist.
    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, SourceError>>;

    /// The node's annotations, or `None` when the Node does not exist.
    fn node_annotations<'a>(
        &'a self,
        node: &'a str,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, SourceError>>;

    /// Every Subnet's CIDRs (dual-stack Subnets give two).
    fn subnet_cidrs(&self) -> BoxFuture<'_, Result<Vec<IpNet>, SourceError>>;

    /// The CIDRs of the Subnets whose egress this node masquerades
    /// ([`api::subnet::SubnetSpec::masquerades_egress`]). The default has none.
    fn nat_outgoing_cidrs(&self) -> BoxFuture<'_, Result<Vec<IpNet>, SourceError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Every Service (for the host's Service NAT, [`crate::host_nat`]). The default has
    /// none (a source that cannot list Services gets no host rules).
    fn services(&self) -> BoxFuture<'_, Result<Vec<api::services::ServiceInfo>, SourceError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Every Service's endpoints with their node (EndpointSlices, or core v1 Endpoints on
    /// servers without discovery.k8s.io/v1), for the host's `externalTrafficPolicy: Local`
    /// rules ([`crate::host_nat`]). The default has none.
    fn endpoint_slices(
        &self,
    ) -> BoxFuture<'_, Result<Vec<api::services::EndpointSliceInfo>, SourceError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Yields whenever a Service or its endpoints were added, changed or deleted (and
    /// once when a watch (re)starts), so the host's Service NAT follows at once; `None`:
    /// this source cannot watch, and the agent re-reads the Services on its refresh.
    fn service_changes(&self) -> Option<BoxStream<'static, ()>> {
        None
    }

    /// Merges `annotations` into the Node's annotations.
    fn annotate_node<'a>(
        &'a self,
        node: &'a str,
        annotations: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<(), SourceError>>;

    /// Records an event about a Node or a Pod (see [`crate::report`]).
    fn event<'a>(
        &'a self,
        ev: &'a crate::report::AgentEvent,
    ) -> BoxFuture<'a, Result<(), SourceError>>;

    /// Waits (at most `timeout`) until `ready` holds for the pod; returns the last pod seen
    /// (`None`: never seen) and whether `ready` held. The default polls [`PodSource::pod`]
    /// with a short backoff (5 ms doubling to 20 ms): the controller usually annotates a
    /// pod within tens of milliseconds, and a long pause would add up to one whole pause
    /// to every ADD that asks a moment too early (the lab source shares one list request
    /// among concurrent waiters, so short pauses stay cheap).
    fn wait_pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        timeout: Duration,
        ready: &'a (dyn Fn(&PodInfo) -> bool + Send + Sync),
    ) -> BoxFuture<'a, Result<(Option<PodInfo>, bool), SourceError>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let mut last = None;
            let mut pause = Duration::from_millis(5);
            loop {
                match self.pod(namespace, name).await {
                    Ok(Some(p)) => {
                        if ready(&p) {
                            return Ok((Some(p), true));
                        }
                        last = Some(p);
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "pod lookup failed; retrying"),
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Ok((last, false));
                }
                tokio::time::sleep((deadline - now).min(pause)).await;
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        })
    }
}

/// Parses `--pods`: `lab:SOCKET` or `kube` (whose stores hold the pods and the Node of
/// `node`).
pub async fn from_spec(
    spec: &str,
    kubeconfig: Option<PathBuf>,
    node: &str,
) -> Result<Box<dyn PodSource>, SourceError> {
    if let Some(sock) = spec.strip_prefix("lab:") {
        if sock.is_empty() {
            return Err(SourceError::Spec(spec.into()));
        }
        return Ok(Box::new(LabSource::new(sock)));
    }
    if spec == "kube" {
        return Ok(Box::new(KubeSource::new(kubeconfig, node).await?));
    }
    Err(SourceError::Spec(spec.into()))
}

fn str_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// A pod from its Kubernetes JSON.
pub fn pod_from_json(v: &Value) -> PodInfo {
    let md = &v["metadata"];
    PodInfo {
        namespace: md["namespace"].as_str().unwrap_or("default").to_string(),
        name: md["name"].as_str().unwrap_or_default().to_string(),
        node_name: v["spec"]["nodeName"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        annotations: str_map(&md["annotations"]),
    }
}

/// The CIDRs of a Subnet's `spec.cidr` (`a` or `a,b`); unparsable parts are skipped.
pub fn parse_cidrs(cidr: &str) -> Vec<IpNet> {
    cidr.split(',')
        .filter_map(|c| c.trim().parse::<IpNet>().ok().map(|n| n.trunc()))
        .collect()
}

/// The lab's object store (`<lab>/run/lab-api.sock`): one connection per request.
#[derive(Debug, Clone)]
pub struct LabSource {
    socket: PathBuf,
    /// The last Pod list and when its fetch started: concurrent lookups share one fetch.
    #[allow(clippy::type_complexity)]
    pods: Arc<tokio::sync::Mutex<Option<(tokio::time::Instant, Arc<Vec<Value>>)>>>,
}

impl LabSource {
    pub fn new(socket: impl Into<PathBuf>) -> LabSource {
        LabSource {
            socket: socket.into(),
            pods: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }

    /// Every Pod, from a fetch that started after this call did (so never staler than a
    /// fetch of our own), shared by the concurrent callers: N ADDs waiting for their
    /// annotation cost one list request per round, not N.
    async fn all_pods(&self) -> Result<Arc<Vec<Value>>, SourceError> {
        let asked = tokio::time::Instant::now();
        let mut last = self.pods.lock().await;
        if let Some((started, v)) = &*last
            && *started >= asked
        {
            return Ok(v.clone());
        }
        let started = tokio::time::Instant::now();
        let v = Arc::new(self.get(ResourceKind::Pod).await?);
        *last = Some((started, v.clone()));
        Ok(v)
    }

    fn err(&self, detail: impl Into<String>) -> SourceError {
        SourceError::Lab {
            socket: self.socket.display().to_string(),
            detail: detail.into(),
        }
    }

    /// One request line → its answer line, bounded by 10 s; an `error` answer is an error.
    pub async fn call(&self, req: &Request) -> Result<Response, SourceError> {
        let line =
            serde_json::to_string(req).map_err(|e| self.err(format!("encode the request: {e}")))?;
        let what = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|v| v["op"].as_str().map(str::to_string))
            .unwrap_or_else(|| "request".into());
        let fut = async {
            let mut s = UnixStream::connect(&self.socket)
                .await
                .map_err(|e| self.err(format!("connect: {e}")))?;
            s.write_all(format!("{line}\n").as_bytes())
                .await
                .map_err(|e| self.err(format!("send: {e}")))?;
            let mut r = BufReader::new(s);
            let mut answer = String::new();
            let n = r
                .read_line(&mut answer)
                .await
                .map_err(|e| self.err(format!("read: {e}")))?;
            if n == 0 {
                return Err(self.err("closed the connection without an answer"));
            }
            match serde_json::from_str::<Response>(&answer) {
                Ok(Response::Error { message }) => Err(self.err(format!("{what}: {message}"))),
                Ok(r) => Ok(r),
                Err(e) => Err(self.err(format!("unreadable answer: {e}"))),
            }
        };
        tokio::time::timeout(Duration::from_secs(10), fut)
            .await
            .map_err(|_| self.err(format!("{what}: no answer within 10 s")))?
    }

    /// Every object of `kind`.
    pub async fn get(&self, kind: ResourceKind) -> Result<Vec<Value>, SourceError> {
        match self.call(&Request::Get { kind }).await? {
            Response::Objects { items } => Ok(items),
            other => Err(self.err(format!("unexpected answer to get {kind:?}: {other:?}"))),
        }
    }
}

impl PodSource for LabSource {
    fn annotate_node<'a>(
        &'a self,
        node: &'a str,
        annotations: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(async move {
            self.call(&Request::AnnotateNode {
                name: node.to_string(),
                annotations: annotations.clone(),
            })
            .await
            .map(|_| ())
        })
    }

    fn event<'a>(
        &'a self,
        ev: &'a crate::report::AgentEvent,
    ) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(async move {
            self.call(&Request::Event {
                event: ev.to_kube_json(),
            })
            .await
            .map(|_| ())
        })
    }

    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, SourceError>> {
        Box::pin(async move {
            Ok(self
                .all_pods()
                .await?
                .iter()
                .map(pod_from_json)
                .find(|p| p.namespace == namespace && p.name == name))
        })
    }

    fn node_annotations<'a>(
        &'a self,
        node: &'a str,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, SourceError>> {
        Box::pin(async move {
            Ok(self
                .get(ResourceKind::Node)
                .await?
                .iter()
                .find(|n| n["metadata"]["name"].as_str() == Some(node))
                .map(|n| str_map(&n["metadata"]["annotations"])))
        })
    }

    fn services(&self) -> BoxFuture<'_, Result<Vec<api::services::ServiceInfo>, SourceError>> {
        Box::pin(async move {
            let mut out = Vec::new();
            for v in self.get(ResourceKind::Service).await? {
                match serde_json::from_value::<k8s_openapi::api::core::v1::Service>(v) {
                    Ok(svc) => out.push(api::services::convert::service_info(&svc)),
                    Err(e) => tracing::warn!(error = %e, "unreadable Service from the lab store"),
                }
            }
            Ok(out)
        })
    }

    fn endpoint_slices(
        &self,
    ) -> BoxFuture<'_, Result<Vec<api::services::EndpointSliceInfo>, SourceError>> {
        Box::pin(async move {
            let mut out = Vec::new();
            for v in self.get(ResourceKind::EndpointSlice).await? {
                match serde_json::from_value::<EndpointSlice>(v) {
                    Ok(s) => out.extend(api::services::convert::slice_info(&s)),
                    Err(e) => {
                        tracing::warn!(error = %e, "unreadable EndpointSlice from the lab store")
                    }
                }
            }
            Ok(out)
        })
    }

    fn subnet_cidrs(&self) -> BoxFuture<'_, Result<Vec<IpNet>, SourceError>> {
        Box::pin(async move {
            Ok(self
                .get(ResourceKind::Subnet)
                .await?
                .iter()
                .flat_map(|s| parse_cidrs(s["spec"]["cidr"].as_str().unwrap_or_default()))
                .collect())
        })
    }

    fn nat_outgoing_cidrs(&self) -> BoxFuture<'_, Result<Vec<IpNet>, SourceError>> {
        Box::pin(async move {
            Ok(self
                .get(ResourceKind::Subnet)
                .await?
                .iter()
                .filter_map(|s| {
                    serde_json::from_value::<api::subnet::SubnetSpec>(s["spec"].clone()).ok()
                })
                .filter(api::subnet::SubnetSpec::masquerades_egress)
                .flat_map(|s| parse_cidrs(&s.cidr))
                .collect())
        })
    }
}

/// How long a read waits for a store's first list before it fails.
pub const STORE_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A reflector store, the version its watch task bumps after every change it applied
/// (an `Apply`, a `Delete`, a (re)list's end), and what it holds (for errors).
struct Reflected<K: kube::Resource + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    changed: tokio::sync::watch::Receiver<u64>,
    what: &'static str,
}

impl<K> Reflected<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    /// Starts the watch (kube-runtime's backoff after errors, which are logged) that keeps
    /// the store; the task ends with its [`Watches`] guard.
    fn start(
        api: kube::Api<K>,
        config: watcher::Config,
        what: &'static str,
        tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    ) -> Reflected<K> {
        let (store, writer) = reflector::store();
        let (tx, changed) = tokio::sync::watch::channel(0u64);
        let stream = reflector::reflector(writer, watcher::watcher(api, config)).default_backoff();
        tasks.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(
                        watcher::Event::Apply(_)
                        | watcher::Event::Delete(_)
                        | watcher::Event::InitDone,
                    ) => tx.send_modify(|v| *v = v.wrapping_add(1)),
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                    Err(e) => tracing::warn!(what, error = %e, "watch: retrying with backoff"),
                }
            }
        }));
        Reflected {
            store,
            changed,
            what,
        }
    }

    /// The store once its first list is in (at most [`STORE_READY_TIMEOUT`]).
    async fn ready(&self) -> Result<&Store<K>, SourceError> {
        match tokio::time::timeout(STORE_READY_TIMEOUT, self.store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(&self.store),
            Ok(Err(e)) => Err(SourceError::Kube(format!("{}: {e}", self.what))),
            Err(_) => Err(SourceError::Kube(format!(
                "{}: not listed within {STORE_READY_TIMEOUT:?}",
                self.what
            ))),
        }
    }
}

/// Where a [`KubeSource`] reads endpoints: discovery.k8s.io/v1 EndpointSlices where the
/// server has them, core v1 Endpoints otherwise (Kubernetes before 1.21), as the
/// controller does (`control::source::services`).
enum EndpointStore {
    Slices(Reflected<EndpointSlice>),
    Core(Reflected<Endpoints>),
}

impl EndpointStore {
    /// Starts the watch of the kind the server serves.
    async fn start(client: &kube::Client, tasks: &mut Vec<tokio::task::JoinHandle<()>>) -> Self {
        let gvk = kube::api::GroupVersionKind::gvk("discovery.k8s.io", "v1", "EndpointSlice");
        let all = watch_config();
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok(_) => EndpointStore::Slices(Reflected::start(
                kube::Api::all(client.clone()),
                all,
                "EndpointSlices",
                tasks,
            )),
            Err(e) => {
                tracing::info!(error = %e, "discovery.k8s.io/v1 EndpointSlice not served; using core v1 Endpoints");
                EndpointStore::Core(Reflected::start(
                    kube::Api::all(client.clone()),
                    all,
                    "Endpoints",
                    tasks,
                ))
            }
        }
    }

    fn changed(&self) -> tokio::sync::watch::Receiver<u64> {
        match self {
            EndpointStore::Slices(r) => r.changed.clone(),
            EndpointStore::Core(r) => r.changed.clone(),
        }
    }

    async fn slices(&self) -> Result<Vec<api::services::EndpointSliceInfo>, SourceError> {
        use api::services::convert::{endpoints_info, slice_info};
        Ok(match self {
            EndpointStore::Slices(r) => r
                .ready()
                .await?
                .state()
                .iter()
                .filter_map(|s| slice_info(s))
                .collect(),
            EndpointStore::Core(r) => r
                .ready()
                .await?
                .state()
                .iter()
                .flat_map(|e| endpoints_info(e))
                .collect(),
        })
    }
}

/// A stream that yields once at once, then after every bump of `rx`.
/// Every watch of the agent: ended by the server within
/// [`api::api_timeouts::WATCH_TIMEOUT_SECS`], so a connection that died silently is noticed.
pub(crate) fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(api::api_timeouts::WATCH_TIMEOUT_SECS)
}

/// The agent's Kubernetes client: a request on a connection that died silently fails
/// within [`api::api_timeouts::API_READ_TIMEOUT`] and is retried on a new one.
pub(crate) fn client_with_timeouts(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.read_timeout = Some(api::api_timeouts::API_READ_TIMEOUT);
    config.reset_reader_on_write = true;
    kube::Client::try_from(config)
}

fn bumps(mut rx: tokio::sync::watch::Receiver<u64>) -> BoxStream<'static, ()> {
    rx.mark_changed();
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
    .boxed()
}

/// Aborts the watch tasks when the last [`KubeSource`] clone goes.
struct Watches(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Watches {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// The agent's Kubernetes client, from `kubeconfig` or the in-cluster / default
/// configuration.
pub async fn kube_client(kubeconfig: Option<PathBuf>) -> Result<kube::Client, SourceError> {
    let e = |e: &dyn std::fmt::Display| SourceError::Kube(e.to_string());
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(&path)
                .map_err(|x| SourceError::Kube(format!("{}: {x}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|x| e(&x))?
        }
        None => kube::Config::infer().await.map_err(|x| e(&x))?,
    };
    client_with_timeouts(config).map_err(|x| e(&x))
}

/// A Kubernetes API server (kube-rs): reads from reflector stores, writes (the Node's
/// annotations, events) through the API.
#[derive(Clone)]
pub struct KubeSource {
    client: kube::Client,
    node: String,
    pods: Arc<Reflected<Pod>>,
    nodes: Arc<Reflected<Node>>,
    subnets: Arc<Reflected<api::subnet::Subnet>>,
    services: Arc<Reflected<Service>>,
    endpoints: Arc<EndpointStore>,
    events: crate::report::KubeEvents,
    _watches: Arc<Watches>,
}

impl KubeSource {
    /// From `kubeconfig`, or the in-cluster / default configuration; starts the watches of
    /// `node`'s pods (field selector `spec.nodeName`), the Node itself (`metadata.name`),
    /// every Subnet, every Service and every EndpointSlice (or core Endpoints).
    pub async fn new(kubeconfig: Option<PathBuf>, node: &str) -> Result<KubeSource, SourceError> {
        let client = kube_client(kubeconfig).await?;
        let mut tasks = Vec::new();
        let by_node = watch_config().fields(&format!("spec.nodeName={node}"));
        let by_name = watch_config().fields(&format!("metadata.name={node}"));
        let pods = Reflected::start(kube::Api::all(client.clone()), by_node, "pods", &mut tasks);
        let nodes = Reflected::start(kube::Api::all(client.clone()), by_name, "node", &mut tasks);
        let all = watch_config;
        let subnets =
            Reflected::start(kube::Api::all(client.clone()), all(), "Subnets", &mut tasks);
        let services = Reflected::start(
            kube::Api::all(client.clone()),
            all(),
            "Services",
            &mut tasks,
        );
        let endpoints = EndpointStore::start(&client, &mut tasks).await;
        Ok(KubeSource {
            events: crate::report::KubeEvents::new(client.clone()),
            client,
            node: node.to_string(),
            pods: Arc::new(pods),
            nodes: Arc::new(nodes),
            subnets: Arc::new(subnets),
            services: Arc::new(services),
            endpoints: Arc::new(endpoints),
            _watches: Arc::new(Watches(tasks)),
        })
    }

    fn pod_info(p: &Pod) -> PodInfo {
        PodInfo {
            namespace: p.metadata.namespace.clone().unwrap_or_default(),
            name: p.metadata.name.clone().unwrap_or_default(),
            node_name: p.spec.as_ref().and_then(|s| s.node_name.clone()),
            annotations: p.metadata.annotations.clone().unwrap_or_default(),
        }
    }

    /// The pod from this node's store.
    fn stored_pod(&self, namespace: &str, name: &str) -> Option<PodInfo> {
        let key = ObjectRef::<Pod>::new(name).within(namespace);
        self.pods.store.get(&key).map(|p| Self::pod_info(&p))
    }

    /// The pod from the API (a pod the store does not hold: of another node, or not yet
    /// seen).
    async fn get_pod(&self, namespace: &str, name: &str) -> Result<Option<PodInfo>, SourceError> {
        let api: kube::Api<Pod> = kube::Api::namespaced(self.client.clone(), namespace);
        let p = api
            .get_opt(name)
            .await
            .map_err(|e| SourceError::Kube(format!("get pod {namespace}/{name}: {e}")))?;
        Ok(p.as_ref().map(Self::pod_info))
    }
}

impl PodSource for KubeSource {
    fn annotate_node<'a>(
        &'a self,
        node: &'a str,
        annotations: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(crate::report::kube_annotate_node(
            &self.client,
            node,
            annotations,
        ))
    }

    fn event<'a>(
        &'a self,
        ev: &'a crate::report::AgentEvent,
    ) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(self.events.publish(ev))
    }

    /// From this node's store; a pod it does not hold is asked of the API.
    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, SourceError>> {
        Box::pin(async move {
            self.pods.ready().await?;
            match self.stored_pod(namespace, name) {
                Some(p) => Ok(Some(p)),
                None => self.get_pod(namespace, name).await,
            }
        })
    }

    fn node_annotations<'a>(
        &'a self,
        node: &'a str,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, SourceError>> {
        Box::pin(async move {
            if node != self.node {
                let api: kube::Api<Node> = kube::Api::all(self.client.clone());
                let n = api
                    .get_opt(node)
                    .await
                    .map_err(|e| SourceError::Kube(format!("get node {node}: {e}")))?;
                return Ok(n.map(|n| n.metadata.annotations.unwrap_or_default()));
            }
            let store = self.nodes.ready().await?;
            Ok(store
                .get(&ObjectRef::new(node))
                .map(|n| n.metadata.annotations.clone().unwrap_or_default()))
        })
    }

    fn subnet_cidrs(&self) -> BoxFuture<'_, Result<Vec<IpNet>, SourceError>> {
        Box::pin(async move {
            let store = self.subnets.ready().await?;
            Ok(store
                .state()
                .iter()
                .flat_map(|s| parse_cidrs(&s.spec.cidr))
                .collect())
        })
    }

    fn nat_outgoing_cidrs(&self) -> BoxFuture<'_, Result<Vec<IpNet>, SourceError>> {
        Box::pin(async move {
            let store = self.subnets.ready().await?;
            Ok(store
                .state()
                .iter()
                .filter(|s| s.spec.masquerades_egress())
                .flat_map(|s| parse_cidrs(&s.spec.cidr))
                .collect())
        })
    }

    fn services(&self) -> BoxFuture<'_, Result<Vec<api::services::ServiceInfo>, SourceError>> {
        Box::pin(async move {
            let store = self.services.ready().await?;
            Ok(store
                .state()
                .iter()
                .map(|s| api::services::convert::service_info(s))
                .collect())
        })
    }

    fn endpoint_slices(
        &self,
    ) -> BoxFuture<'_, Result<Vec<api::services::EndpointSliceInfo>, SourceError>> {
        Box::pin(self.endpoints.slices())
    }

    /// Yields once at once, then after every change the Service store or the endpoint
    /// store applied.
    fn service_changes(&self) -> Option<BoxStream<'static, ()>> {
        Some(
            futures::stream::select(
                bumps(self.services.changed.clone()),
                bumps(self.endpoints.changed()),
            )
            .boxed(),
        )
    }

    /// Waits on this node's pod store, woken by its updates; at the deadline, a pod the
    /// store never held is asked of the API once (so a pod of another node or none at all
    /// is told apart from one not annotated in time).
    fn wait_pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        timeout: Duration,
        ready: &'a (dyn Fn(&PodInfo) -> bool + Send + Sync),
    ) -> BoxFuture<'a, Result<(Option<PodInfo>, bool), SourceError>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let mut changed = self.pods.changed.clone();
            let mut last = None;
            let listed = tokio::time::timeout_at(deadline, self.pods.store.wait_until_ready());
            if matches!(listed.await, Ok(Ok(()))) {
                loop {
                    changed.borrow_and_update();
                    if let Some(p) = self.stored_pod(namespace, name) {
                        if ready(&p) {
                            return Ok((Some(p), true));
                        }
                        last = Some(p);
                    }
                    match tokio::time::timeout_at(deadline, changed.changed()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => {
                            return Err(SourceError::Kube("the pod watch ended".into()));
                        }
                        Err(_) => break,
                    }
                }
            }
            if last.is_some() {
                return Ok((last, false));
            }
            match self.get_pod(namespace, name).await? {
                Some(p) => {
                    let ok = ready(&p);
                    Ok((Some(p), ok))
                }
                None => Ok((None, false)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_and_pods_from_json() {
        assert_eq!(
            parse_cidrs("10.16.0.5/16, fd00:10:16::/64,bad"),
            vec![
                "10.16.0.0/16".parse::<IpNet>().unwrap(),
                "fd00:10:16::/64".parse::<IpNet>().unwrap()
            ]
        );
        let p = pod_from_json(&serde_json::json!({
            "metadata": {"namespace": "demo", "name": "web",
                         "annotations": {"a": "1", "b": 2}},
            "spec": {"nodeName": "n1"}
        }));
        assert_eq!(p.key(), "demo/web");
        assert_eq!(p.node_name.as_deref(), Some("n1"));
        assert_eq!(p.annotations.len(), 1);
        assert_eq!(p.annotation("a"), Some("1"));
    }
}
