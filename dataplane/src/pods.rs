//! Where the agent reads pods, its Node and the Subnets: the lab's object store
//! (`lab:SOCKET`, JSON lines) or a Kubernetes API (`kube`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use ipnet::IpNet;
use serde_json::{Value, json};
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

/// Errors of a pod source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("lab object store {socket}: {detail}")]
    Lab { socket: String, detail: String },
    #[error("Kubernetes API: {0}")]
    Kube(String),
    #[error("invalid pod source {0:?}: expected lab:SOCKET or kube")]
    Spec(String),
}

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

    /// Every Service (for the host's Service NAT, [`crate::host_nat`]). The default has
    /// none (a source that cannot list Services gets no host rules).
    fn services(&self) -> BoxFuture<'_, Result<Vec<api::services::ServiceInfo>, SourceError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Yields whenever a Service was added, changed or deleted (and once when a watch
    /// (re)starts), so the host's Service NAT follows at once; `None`: this source cannot
    /// watch, and the agent re-reads the Services on its refresh.
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

/// Parses `--pods`: `lab:SOCKET` or `kube`.
pub async fn from_spec(
    spec: &str,
    kubeconfig: Option<PathBuf>,
) -> Result<Box<dyn PodSource>, SourceError> {
    if let Some(sock) = spec.strip_prefix("lab:") {
        if sock.is_empty() {
            return Err(SourceError::Spec(spec.into()));
        }
        return Ok(Box::new(LabSource::new(sock)));
    }
    if spec == "kube" {
        return Ok(Box::new(KubeSource::new(kubeconfig).await?));
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
        let v = Arc::new(self.get("Pod").await?);
        *last = Some((started, v.clone()));
        Ok(v)
    }

    fn err(&self, detail: impl Into<String>) -> SourceError {
        SourceError::Lab {
            socket: self.socket.display().to_string(),
            detail: detail.into(),
        }
    }

    /// One request line → its answer line, bounded by 10 s.
    pub async fn call(&self, req: Value) -> Result<Value, SourceError> {
        let what = req["op"].as_str().unwrap_or("request").to_string();
        let fut = async {
            let mut s = UnixStream::connect(&self.socket)
                .await
                .map_err(|e| self.err(format!("connect: {e}")))?;
            let mut line = req.to_string();
            line.push('\n');
            s.write_all(line.as_bytes())
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
            let v: Value = serde_json::from_str(&answer)
                .map_err(|e| self.err(format!("unreadable answer: {e}")))?;
            if v["result"].as_str() == Some("error") {
                return Err(self.err(format!(
                    "{what}: {}",
                    v["message"].as_str().unwrap_or("error")
                )));
            }
            Ok(v)
        };
        tokio::time::timeout(Duration::from_secs(10), fut)
            .await
            .map_err(|_| self.err(format!("{what}: no answer within 10 s")))?
    }

    /// Every object of `kind` (`Pod`, `Node`, `Subnet`).
    pub async fn get(&self, kind: &str) -> Result<Vec<Value>, SourceError> {
        let v = self.call(json!({"op": "get", "kind": kind})).await?;
        match v["result"].as_str() {
            Some("objects") => Ok(v["items"].as_array().cloned().unwrap_or_default()),
            _ => Err(self.err(format!("unexpected answer to get {kind}: {v}"))),
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
            self.call(json!({"op": "annotatenode", "name": node, "annotations": annotations}))
                .await
                .map(|_| ())
        })
    }

    fn event<'a>(
        &'a self,
        ev: &'a crate::report::AgentEvent,
    ) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(async move {
            self.call(json!({"op": "event", "event": ev.to_kube_json()}))
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
                .get("Node")
                .await?
                .iter()
                .find(|n| n["metadata"]["name"].as_str() == Some(node))
                .map(|n| str_map(&n["metadata"]["annotations"])))
        })
    }

    fn services(&self) -> BoxFuture<'_, Result<Vec<api::services::ServiceInfo>, SourceError>> {
        Box::pin(async move {
            let mut out = Vec::new();
            for v in self.get("Service").await? {
                match serde_json::from_value::<k8s_openapi::api::core::v1::Service>(v) {
                    Ok(svc) => out.push(api::services::convert::service_info(&svc)),
                    Err(e) => tracing::warn!(error = %e, "unreadable Service from the lab store"),
                }
            }
            Ok(out)
        })
    }

    fn subnet_cidrs(&self) -> BoxFuture<'_, Result<Vec<IpNet>, SourceError>> {
        Box::pin(async move {
            Ok(self
                .get("Subnet")
                .await?
                .iter()
                .flat_map(|s| parse_cidrs(s["spec"]["cidr"].as_str().unwrap_or_default()))
                .collect())
        })
    }
}

/// A Kubernetes API server (kube-rs).
#[derive(Clone)]
pub struct KubeSource {
    client: kube::Client,
}

impl KubeSource {
    /// From `kubeconfig`, or the in-cluster / default configuration.
    pub async fn new(kubeconfig: Option<PathBuf>) -> Result<KubeSource, SourceError> {
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
        let client = kube::Client::try_from(config).map_err(|x| e(&x))?;
        Ok(KubeSource { client })
    }

    fn pod_info(p: &k8s_openapi::api::core::v1::Pod) -> PodInfo {
        PodInfo {
            namespace: p.metadata.namespace.clone().unwrap_or_default(),
            name: p.metadata.name.clone().unwrap_or_default(),
            node_name: p.spec.as_ref().and_then(|s| s.node_name.clone()),
            annotations: p.metadata.annotations.clone().unwrap_or_default(),
        }
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
        Box::pin(crate::report::kube_event(&self.client, ev))
    }

    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, SourceError>> {
        Box::pin(async move {
            let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
                kube::Api::namespaced(self.client.clone(), namespace);
            let p = api
                .get_opt(name)
                .await
                .map_err(|e| SourceError::Kube(format!("get pod {namespace}/{name}: {e}")))?;
            Ok(p.as_ref().map(Self::pod_info))
        })
    }

    fn node_annotations<'a>(
        &'a self,
        node: &'a str,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, SourceError>> {
        Box::pin(async move {
            let api: kube::Api<k8s_openapi::api::core::v1::Node> =
                kube::Api::all(self.client.clone());
            let n = api
                .get_opt(node)
                .await
                .map_err(|e| SourceError::Kube(format!("get node {node}: {e}")))?;
            Ok(n.map(|n| n.metadata.annotations.unwrap_or_default()))
        })
    }

    fn subnet_cidrs(&self) -> BoxFuture<'_, Result<Vec<IpNet>, SourceError>> {
        Box::pin(async move {
            let api: kube::Api<api::subnet::Subnet> = kube::Api::all(self.client.clone());
            let list = api
                .list(&Default::default())
                .await
                .map_err(|e| SourceError::Kube(format!("list Subnets: {e}")))?;
            Ok(list
                .items
                .iter()
                .flat_map(|s| parse_cidrs(&s.spec.cidr))
                .collect())
        })
    }

    fn services(&self) -> BoxFuture<'_, Result<Vec<api::services::ServiceInfo>, SourceError>> {
        Box::pin(async move {
            let api: kube::Api<k8s_openapi::api::core::v1::Service> =
                kube::Api::all(self.client.clone());
            let list = api
                .list(&Default::default())
                .await
                .map_err(|e| SourceError::Kube(format!("list Services: {e}")))?;
            Ok(list
                .items
                .iter()
                .map(api::services::convert::service_info)
                .collect())
        })
    }

    /// A watch of every Service (with kube-runtime's backoff after errors, which are
    /// logged).
    fn service_changes(&self) -> Option<BoxStream<'static, ()>> {
        use kube::runtime::WatchStreamExt;
        use kube::runtime::watcher::{self, Event};
        let api: kube::Api<k8s_openapi::api::core::v1::Service> =
            kube::Api::all(self.client.clone());
        let stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .filter_map(|ev| async move {
                match ev {
                    Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) => Some(()),
                    Ok(Event::Init | Event::InitApply(_)) => None,
                    Err(e) => {
                        tracing::warn!(error = %e, "Service watch: retrying with backoff");
                        None
                    }
                }
            });
        Some(stream.boxed())
    }

    /// Watches the one pod (`await_condition`), bounded by `timeout`.
    fn wait_pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        timeout: Duration,
        ready: &'a (dyn Fn(&PodInfo) -> bool + Send + Sync),
    ) -> BoxFuture<'a, Result<(Option<PodInfo>, bool), SourceError>> {
        Box::pin(async move {
            let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
                kube::Api::namespaced(self.client.clone(), namespace);
            let cond = move |p: Option<&k8s_openapi::api::core::v1::Pod>| {
                p.is_some_and(|p| ready(&Self::pod_info(p)))
            };
            let waited = tokio::time::timeout(
                timeout,
                kube::runtime::wait::await_condition(api, name, cond),
            )
            .await;
            match waited {
                Ok(Ok(Some(p))) => {
                    let info = Self::pod_info(&p);
                    let ok = ready(&info);
                    Ok((Some(info), ok))
                }
                Ok(Ok(None)) => Ok((None, false)),
                Ok(Err(e)) => Err(SourceError::Kube(format!(
                    "watch pod {namespace}/{name}: {e}"
                ))),
                Err(_) => Ok((self.pod(namespace, name).await.ok().flatten(), false)),
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
        let p = pod_from_json(&json!({
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
