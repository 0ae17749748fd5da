//! `internalTrafficPolicy: Local` on OVN 23.03 template load balancers.
//!
//! Our Subnet switches span every node, so a plain load balancer cannot tell which node a
//! client is on. A template load balancer can: its VIPs and backends are template
//! variables (`^name`) that ovn-controller expands with the values of the
//! `Chassis_Template_Var` row of its own chassis. So the client's chassis — where the
//! logical switch DNATs, on the sending side — picks its own node's endpoints.
//!
//! - One `Load_Balancer` per Service, protocol and address family with cluster IPs of that
//!   family, named `Service_<ns>/<name>_<PROTO>_local4|6`, `options:template=true`,
//!   `options:address-family=ipv4|ipv6`, `options:reject=true`, in the same group as the
//!   other Service rows. Its vips are `^<ip var>:<port>` → `^<backends var>` (OVN 23.03
//!   parses an IPv6 VIP of a template only as a variable, so both families use one).
//! - One `Chassis_Template_Var` row per node's chassis (the node annotation
//!   [`crate::chassis::CHASSIS_ID`], else the node name), marked as ours
//!   (`zstack.io/kind=service-template-vars`), whose `variables` give, for every such
//!   Service, the cluster IP and the endpoints on that node (ready, else serving +
//!   terminating, as everywhere). A node without local endpoints gets an empty backend
//!   list: its clients' connections are dropped, as Kubernetes specifies for
//!   `internalTrafficPolicy: Local`. A Service without any endpoint stays on the regular
//!   row, whose empty VIP rejects (as Kubernetes does for a Service without endpoints).
//! - Variable names are derived from a stable hash of `<ns>/<name>` (names must be OVN
//!   identifiers): `zsvc_<hash>_ip4`, `zsvc_<hash>_tcp80_4`...
//!
//! Only cluster IPs follow the internal policy: externalIPs, LoadBalancer ingress IPs and
//! node ports are external traffic and stay on the regular row (`externalTrafficPolicy`).
//! `sessionAffinity: ClientIP` is not applied to the template rows: OVN 23.03's northd
//! builds the affinity flows of a template VIP as if it were IPv6 (`ip6 && xxreg1 ==
//! ^var`, even with `address-family=ipv4`) and uses the backends variable as one address
//! (`ip6.dst == ^backends`), so they never match or do not parse. The Service gets a
//! Warning event instead ([`ServiceInfo::limitations`]); `services_nb` checks that northd
//! still does this.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ovsdb::nb::LoadBalancer;

use super::{KIND_SERVICE, join};
use crate::model::NodeInfo;
use crate::names;
use crate::services::select::backends;
use crate::services::{EndpointSliceInfo, Proto, ServiceInfo};
use crate::translate::ClusterConfig;

/// `external_ids` kind of our `Chassis_Template_Var` rows.
pub use api::external_ids::kind::SERVICE_TEMPLATE_VARS as KIND_TEMPLATE_VARS;

/// The OVN chassis name of a node: its [`crate::chassis::CHASSIS_ID`] annotation, else
/// the node name.
pub fn chassis_of(node: &NodeInfo) -> String {
    node.annotations
        .get(crate::chassis::CHASSIS_ID)
        .filter(|c| !c.is_empty())
        .cloned()
        .unwrap_or_else(|| node.name.clone())
}

fn fam(v4: bool) -> char {
    if v4 { '4' } else { '6' }
}

/// The variable holding a Service's cluster IP of one family (a persistent name:
/// [`api::names::service_ip_var`]).
pub use api::names::service_ip_var as ip_var;

/// The variable holding a Service port's node-local backends of one family
/// ([`api::names::service_backends_var`]).
pub use api::names::service_backends_var as backends_var;

/// Whether `svc` is served node-locally on its cluster IPs: it asks for it and has at
/// least one endpoint somewhere. A Service without any endpoint keeps its cluster IPs on
/// the regular row, which rejects (Kubernetes rejects when a Service has no endpoint at
/// all, and drops only when endpoints exist but none on the client's node).
pub fn applies(svc: &ServiceInfo, slices: &[&EndpointSliceInfo]) -> bool {
    svc.balanced()
        && svc.internal_local
        && svc.ports.iter().any(|p| {
            cluster_ips(svc)
                .iter()
                .any(|ip| !backends(p, slices, ip.is_ipv4(), None).is_empty())
        })
}

/// The first cluster IP of each family (Kubernetes gives at most one per family).
fn cluster_ips(svc: &ServiceInfo) -> Vec<IpAddr> {
    let mut seen = BTreeSet::new();
    svc.cluster_ips
        .iter()
        .filter(|ip| seen.insert(ip.is_ipv4()))
        .copied()
        .collect()
}

/// The template rows of `svc` (empty unless [`applies`]).
pub fn template_rows(
    cfg: &ClusterConfig,
    svc: &ServiceInfo,
    slices: &[&EndpointSliceInfo],
) -> Vec<LoadBalancer> {
    if !applies(svc, slices) {
        return Vec::new();
    }
    let key = svc.key();
    let protos: BTreeSet<Proto> = svc.ports.iter().map(|p| p.protocol).collect();
    let mut out = Vec::new();
    for proto in protos {
        for ip in cluster_ips(svc) {
            let v4 = ip.is_ipv4();
            let vips: BTreeMap<String, String> = svc
                .ports
                .iter()
                .filter(|p| p.protocol == proto)
                .map(|p| {
                    (
                        format!("^{}:{}", ip_var(&key, v4), p.port),
                        format!("^{}", backends_var(&key, proto, p.port, v4)),
                    )
                })
                .collect();
            let options = BTreeMap::from([
                ("template".to_string(), "true".to_string()),
                (
                    "address-family".to_string(),
                    if v4 { "ipv4" } else { "ipv6" }.to_string(),
                ),
                ("reject".to_string(), "true".to_string()),
            ]);
            out.push(LoadBalancer {
                name: format!("{}_local{}", names::service_lb(&key, proto.k8s()), fam(v4)),
                protocol: Some(proto.ovn().to_string()),
                vips,
                options,
                external_ids: names::owned(&cfg.cluster_id, KIND_SERVICE, &key),
                ..Default::default()
            });
        }
    }
    out
}

/// Adds `svc`'s variables to `vars` (chassis → name → value), one entry per node.
pub fn add_variables(
    svc: &ServiceInfo,
    slices: &[&EndpointSliceInfo],
    nodes: &[&NodeInfo],
    vars: &mut BTreeMap<String, BTreeMap<String, String>>,
) {
    if !applies(svc, slices) {
        return;
    }
    let key = svc.key();
    for node in nodes {
        let chassis = vars.entry(chassis_of(node)).or_default();
        for ip in cluster_ips(svc) {
            let v4 = ip.is_ipv4();
            chassis.insert(ip_var(&key, v4), ip.to_string());
            for port in &svc.ports {
                let b = backends(port, slices, v4, Some(node.name.as_str()));
                chassis.insert(backends_var(&key, port.protocol, port.port, v4), join(&b));
            }
        }
    }
}
