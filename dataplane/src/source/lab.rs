//! The lab's object store as a [`PodSource`]: one JSON-lines request per call
//! ([`api::lab_store`]), the pod list shared by concurrent callers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::error::SourceError;
use super::view::{PodInfo, PodSource};
use api::lab_store::{Request, ResourceKind, Response};
use futures::future::BoxFuture;
use ipnet::IpNet;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

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
        ev: &'a crate::agent::report::AgentEvent,
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

    fn peer_view(
        &self,
        per_node: usize,
    ) -> BoxFuture<'_, Result<crate::pinger::targets::PeerView, SourceError>> {
        Box::pin(async move {
            let nodes = self.get(ResourceKind::Node).await?;
            let pods = self.all_pods().await?;
            Ok(crate::pinger::targets::PeerView {
                chassis_of: crate::pinger::targets::chassis_of(nodes.iter()),
                pods: crate::pinger::targets::sample_pods(pods.iter(), per_node),
            })
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
                .filter_map(|s| {
                    serde_json::from_value::<api::subnet::SubnetSpec>(s["spec"].clone()).ok()
                })
                .filter(|s| !s.on_platform_switch())
                .flat_map(|s| parse_cidrs(&s.cidr))
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
