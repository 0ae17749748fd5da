//! Kubernetes as a [`PodSource`]: reflector stores (this node's pods, its Node, the
//! Subnets, the Services, the EndpointSlices) kept by one watch each, so an ADD or a
//! periodic pass reads memory, not the API server.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::error::SourceError;
use super::lab::parse_cidrs;
use super::view::{PodInfo, PodSource};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;

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
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(api::api_timeouts::WATCH_TIMEOUT_SECS)
}

/// The agent's Kubernetes client: a request on a connection that died silently fails
/// within [`api::api_timeouts::API_READ_TIMEOUT`] and is retried on a new one.
pub fn client_with_timeouts(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
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
    events: crate::agent::report::KubeEvents,
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
            events: crate::agent::report::KubeEvents::new(client.clone()),
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
        Box::pin(crate::agent::report::kube_annotate_node(
            &self.client,
            node,
            annotations,
        ))
    }

    fn event<'a>(
        &'a self,
        ev: &'a crate::agent::report::AgentEvent,
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

    /// One list of the Nodes and one page (500) of the running pods: bounded whatever
    /// the cluster's size (a node whose pods are not on that page gets no pod probes).
    fn peer_view(
        &self,
        per_node: usize,
    ) -> BoxFuture<'_, Result<crate::pinger::targets::PeerView, SourceError>> {
        Box::pin(async move {
            let e = |what: &str, x: kube::Error| SourceError::Kube(format!("list {what}: {x}"));
            let nodes = kube::Api::<Node>::all(self.client.clone())
                .list_metadata(&kube::api::ListParams::default())
                .await
                .map_err(|x| e("nodes", x))?;
            let pods = kube::Api::<Pod>::all(self.client.clone())
                .list(
                    &kube::api::ListParams::default()
                        .fields("status.phase=Running")
                        .limit(500),
                )
                .await
                .map_err(|x| e("pods", x))?;
            let nodes: Vec<serde_json::Value> = nodes
                .items
                .iter()
                .filter_map(|n| serde_json::to_value(n).ok())
                .collect();
            let pods: Vec<serde_json::Value> = pods
                .items
                .iter()
                .filter_map(|p| serde_json::to_value(p).ok())
                .collect();
            Ok(crate::pinger::targets::PeerView {
                chassis_of: crate::pinger::targets::chassis_of(nodes.iter()),
                pods: crate::pinger::targets::sample_pods(pods.iter(), per_node),
            })
        })
    }

    fn subnet_cidrs(&self) -> BoxFuture<'_, Result<Vec<IpNet>, SourceError>> {
        Box::pin(async move {
            let store = self.subnets.ready().await?;
            Ok(store
                .state()
                .iter()
                .filter(|s| !s.spec.on_platform_switch())
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
