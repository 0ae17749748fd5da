//! What the agent reads about pods, its Node, the Subnets and the Services: [`PodInfo`] and
//! the [`PodSource`] trait both sources implement.

use std::collections::BTreeMap;
use std::time::Duration;

use super::error::SourceError;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use ipnet::IpNet;

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

    /// The CIDRs (dual-stack Subnets give two) of every Subnet the join network routes to:
    /// all but those on a platform's switch, which the host reaches on-link through its
    /// port there ([`crate::host::platform_mgmt`]).
    fn subnet_cidrs(&self) -> BoxFuture<'_, Result<Vec<IpNet>, SourceError>>;

    /// The CIDRs of the Subnets whose egress this node masquerades
    /// ([`api::subnet::SubnetSpec::masquerades_egress`]). The default has none.
    fn nat_outgoing_cidrs(&self) -> BoxFuture<'_, Result<Vec<IpNet>, SourceError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Every Service (for the host's Service NAT, [`crate::host::nat`]). The default has
    /// none (a source that cannot list Services gets no host rules).
    fn services(&self) -> BoxFuture<'_, Result<Vec<api::services::ServiceInfo>, SourceError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Every Service's endpoints with their node (EndpointSlices, or core v1 Endpoints on
    /// servers without discovery.k8s.io/v1), for the host's `externalTrafficPolicy: Local`
    /// rules ([`crate::host::nat`]). The default has none.
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

    /// Every Node's chassis and a sample of `per_node` running pods per node, for the
    /// pinger ([`crate::pinger::targets`]). The default has none (the pinger then probes
    /// the tunnel endpoints, named by their chassis).
    fn peer_view(
        &self,
        per_node: usize,
    ) -> BoxFuture<'_, Result<crate::pinger::targets::PeerView, SourceError>> {
        let _ = per_node;
        Box::pin(async { Ok(Default::default()) })
    }

    /// Merges `annotations` into the Node's annotations.
    fn annotate_node<'a>(
        &'a self,
        node: &'a str,
        annotations: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<(), SourceError>>;

    /// Records an event about a Node or a Pod (see [`crate::agent::report`]).
    fn event<'a>(
        &'a self,
        ev: &'a crate::agent::report::AgentEvent,
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
