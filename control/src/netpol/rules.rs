//! One policy → its port group, rule ACLs and the address sets of its peers.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use ovsdb::nb::{AddressSet, PortGroup};

use super::ip_block;
use super::selector::{self, NAMESPACE_NAME_LABEL};
use super::{
    Claims, DesiredPortGroup, Direction, Family, KIND_PEER, KIND_POLICY, PRIORITY_ALLOW,
    PRIORITY_NODE_ALLOW, PolicyInput, Problem, acl, address_set_name, node_sources,
    port_group_name,
};
use crate::model::PodInfo;
use crate::names::owned;

/// A pod with what rules need: labels, namespace, port, addresses.
struct Pod<'a> {
    info: &'a PodInfo,
    ips: Vec<IpAddr>,
}

/// Shared state of one translation: the pods, namespace labels, and the address sets
/// made so far (by peer key).
pub(super) struct Ctx<'a> {
    cluster_id: &'a str,
    pods: Vec<Pod<'a>>,
    ns_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// Namespace → indexes into `pods`.
    by_ns: BTreeMap<String, Vec<usize>>,
    families: BTreeSet<Family>,
    node_cidrs: Vec<IpNet>,
    /// Peer key → addresses of its pods.
    peers: BTreeMap<String, BTreeSet<IpAddr>>,
    /// Address set names given to peer keys (a collision refuses the later peer).
    peer_names: Claims,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(input: &PolicyInput<'a>, families: BTreeSet<Family>) -> Self {
        let pods: Vec<Pod<'a>> = input
            .pods
            .iter()
            .map(|(info, addrs)| Pod {
                info,
                ips: addrs.ips.iter().map(|n| n.addr()).collect(),
            })
            .collect();
        let mut ns_labels: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for name in pods
            .iter()
            .map(|p| p.info.namespace.clone())
            .chain(input.namespaces.keys().cloned())
        {
            let mut labels = input
                .namespaces
                .get(&name)
                .map(|n| n.labels.clone())
                .unwrap_or_default();
            labels.insert(NAMESPACE_NAME_LABEL.into(), name.clone());
            ns_labels.insert(name, labels);
        }
        let mut by_ns: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, p) in pods.iter().enumerate() {
            by_ns.entry(p.info.namespace.clone()).or_default().push(i);
        }
        Ctx {
            by_ns,
            cluster_id: input.cluster_id,
            pods,
            ns_labels,
            families,
            node_cidrs: input.node_cidrs.clone(),
            peers: BTreeMap::new(),
            peer_names: Claims::default(),
        }
    }

    /// The address sets: one per peer key and family.
    pub(super) fn into_address_sets(self) -> BTreeMap<String, AddressSet> {
        let mut out = BTreeMap::new();
        for (key, ips) in self.peers {
            for f in &self.families {
                let name = address_set_name(self.cluster_id, &key, *f);
                let addresses = ips
                    .iter()
                    .filter(|ip| Family::of(ip) == *f)
                    .map(ToString::to_string)
                    .collect();
                out.insert(
                    name.clone(),
                    AddressSet {
                        name,
                        addresses,
                        external_ids: owned(self.cluster_id, KIND_PEER, &key),
                        ..Default::default()
                    },
                );
            }
        }
        out
    }

    /// Pods of namespace `ns` selected by `sel`.
    fn select<'s>(
        &'s self,
        ns_sel: Option<&LabelSelector>,
        ns: &str,
        pod_sel: &LabelSelector,
    ) -> Result<Vec<&'s Pod<'a>>, selector::BadSelector> {
        // the namespaces first (few), then only their pods
        let namespaces: Vec<&str> = match ns_sel {
            None => vec![ns],
            Some(s) => {
                let mut v = Vec::new();
                for (name, labels) in &self.ns_labels {
                    if selector::matches(s, labels)? {
                        v.push(name.as_str());
                    }
                }
                v
            }
        };
        let mut out = Vec::new();
        for n in namespaces {
            for i in self.by_ns.get(n).into_iter().flatten() {
                let p = &self.pods[*i];
                if selector::matches(pod_sel, &p.info.labels)? {
                    out.push(p);
                }
            }
        }
        Ok(out)
    }

    /// `(ip4.src == $set_v4 || ip6.src == $set_v6)` for the pods of a peer.
    fn peer_set_term(
        &mut self,
        key: String,
        ips: Option<BTreeSet<IpAddr>>,
        dir: Direction,
    ) -> String {
        let terms: Vec<String> = self
            .families
            .iter()
            .map(|f| {
                format!(
                    "{}.{} == ${}",
                    f.field(),
                    dir.peer_field(),
                    address_set_name(self.cluster_id, &key, *f)
                )
            })
            .collect();
        if let Some(ips) = ips {
            self.peers.insert(key, ips);
        }
        or(terms)
    }
}

/// A rule: its peers (`from`/`to`) and ports.
type Rule = (
    Option<Vec<NetworkPolicyPeer>>,
    Option<Vec<NetworkPolicyPort>>,
);

/// A translated policy.
pub(super) struct Policy {
    pub group: DesiredPortGroup,
    pub directions: Vec<Direction>,
}

/// Translates one policy; `None` when it has no name.
pub(super) fn policy<'a>(
    ctx: &mut Ctx<'a>,
    p: &NetworkPolicy,
    problems: &mut Vec<Problem>,
) -> Option<Policy> {
    let ns = p
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = p.metadata.name.clone()?;
    let key = format!("{ns}/{name}");
    let spec = p.spec.clone().unwrap_or_default();
    let mut problem = |m: String| {
        problems.push(Problem {
            policy: key.clone(),
            message: m,
        })
    };
    let pod_sel = spec.pod_selector.clone().unwrap_or_default();
    let selected: Vec<(String, Vec<IpAddr>, &'a PodInfo)> = match ctx.select(None, &ns, &pod_sel) {
        Ok(pods) => pods
            .iter()
            .map(|p| (p.info.lsp_name(), p.ips.clone(), p.info))
            .collect(),
        Err(e) => {
            problem(format!("podSelector: {e}; the policy selects no pod"));
            Vec::new()
        }
    };
    let ingress_rules = spec.ingress.clone().unwrap_or_default();
    let egress_rules = spec.egress.clone().unwrap_or_default();
    let directions: Vec<Direction> = match &spec.policy_types {
        Some(types) if !types.is_empty() => {
            let mut d = Vec::new();
            for t in types {
                match t.as_str() {
                    "Ingress" => d.push(Direction::Ingress),
                    "Egress" => d.push(Direction::Egress),
                    other => problem(format!("policyTypes: unknown type {other:?} ignored")),
                }
            }
            d
        }
        // the API default: Ingress, plus Egress when there are egress rules
        _ => {
            let mut d = vec![Direction::Ingress];
            if !egress_rules.is_empty() {
                d.push(Direction::Egress);
            }
            d
        }
    };
    let pg = port_group_name(ctx.cluster_id, &key);
    let mut acls = BTreeMap::new();
    if let Some(src) = node_sources(&ctx.node_cidrs) {
        acls.insert(
            "node".to_string(),
            acl(
                ctx.cluster_id,
                &key,
                "node",
                Direction::Ingress,
                PRIORITY_NODE_ALLOW,
                format!("outport == @{pg} && ({src})"),
                "allow-related",
                &format!("{ns}_{name}_node"),
            ),
        );
    }
    for dir in &directions {
        let rules: Vec<Rule> = match dir {
            Direction::Ingress => ingress_rules
                .iter()
                .map(|r| (r.from.clone(), r.ports.clone()))
                .collect(),
            Direction::Egress => egress_rules
                .iter()
                .map(|r| (r.to.clone(), r.ports.clone()))
                .collect(),
        };
        for (i, (peers, ports)) in rules.iter().enumerate() {
            let what = format!("{}[{i}]", dir.word());
            let peer = peers_term(ctx, &ns, *dir, peers.as_deref(), &what, &mut problem);
            let port = ports_term(ctx, *dir, &selected, ports.as_deref(), &what, &mut problem);
            let (Some(peer), Some(port)) = (peer, port) else {
                continue; // the rule allows nothing
            };
            let terms: Vec<String> = [format!("{} == @{pg}", dir.port_field()), "ip".into()]
                .into_iter()
                .chain(
                    [peer, port]
                        .into_iter()
                        .filter(|t| !t.is_empty())
                        .map(|t| format!("({t})")),
                )
                .collect();
            acls.insert(
                what.clone(),
                acl(
                    ctx.cluster_id,
                    &key,
                    &what,
                    *dir,
                    PRIORITY_ALLOW,
                    terms.join(" && "),
                    "allow-related",
                    &format!("{ns}_{name}_{}{i}", &dir.word()[..2]),
                ),
            );
        }
    }
    Some(Policy {
        group: DesiredPortGroup {
            row: PortGroup {
                name: pg,
                external_ids: owned(ctx.cluster_id, KIND_POLICY, &key),
                ..Default::default()
            },
            ports: selected.into_iter().map(|(lsp, _, _)| lsp).collect(),
            acls,
        },
        directions,
    })
}

fn or(terms: Vec<String>) -> String {
    terms.join(" || ")
}

/// The peers of a rule as a match term: `Some("")` for "every peer", `None` for none.
fn peers_term(
    ctx: &mut Ctx<'_>,
    ns: &str,
    dir: Direction,
    peers: Option<&[NetworkPolicyPeer]>,
    what: &str,
    problem: &mut impl FnMut(String),
) -> Option<String> {
    let Some(peers) = peers.filter(|p| !p.is_empty()) else {
        return Some(String::new());
    };
    let mut terms = Vec::new();
    for (j, peer) in peers.iter().enumerate() {
        let at = format!(
            "{what}.{}[{j}]",
            if dir == Direction::Ingress {
                "from"
            } else {
                "to"
            }
        );
        if let Some(block) = &peer.ip_block {
            if peer.pod_selector.is_some() || peer.namespace_selector.is_some() {
                problem(format!(
                    "{at}: ipBlock cannot be combined with selectors; peer ignored"
                ));
                continue;
            }
            match ip_block::term(block, dir) {
                Ok((t, warnings)) => {
                    for w in warnings {
                        problem(format!("{at}: {w}"));
                    }
                    match t {
                        Some(t) => terms.push(t),
                        None => problem(format!(
                            "{at}: ipBlock.except covers the whole cidr; the peer matches nothing"
                        )),
                    }
                }
                Err(e) => problem(format!("{at}: {e}; the peer matches nothing")),
            }
            continue;
        }
        let pod_sel = peer.pod_selector.clone().unwrap_or_default();
        let key = match &peer.namespace_selector {
            None if peer.pod_selector.is_none() => {
                problem(format!("{at}: empty peer ignored"));
                continue;
            }
            None => format!("ns={ns} pods={}", selector::canonical(&pod_sel)),
            Some(ns_sel) => format!(
                "namespaces={} pods={}",
                selector::canonical(ns_sel),
                selector::canonical(&pod_sel)
            ),
        };
        // the v6 name is the same hash as the v4 one: one claim covers both
        let set_name = address_set_name(ctx.cluster_id, &key, Family::V4);
        if let Err(super::NameTaken { holder }) = ctx.peer_names.claim(&set_name, &key) {
            problem(format!(
                "{at}: its OVN address set name {set_name} is already peer {holder:?}'s \
                 (a hash collision); the peer matches nothing"
            ));
            continue;
        }
        if ctx.peers.contains_key(&key) {
            // the same peer in another rule or policy: one address set, computed once
            terms.push(ctx.peer_set_term(key, None, dir));
            continue;
        }
        match ctx.select(peer.namespace_selector.as_ref(), ns, &pod_sel) {
            Ok(pods) => {
                let ips: BTreeSet<IpAddr> =
                    pods.iter().flat_map(|p| p.ips.iter().copied()).collect();
                terms.push(ctx.peer_set_term(key, Some(ips), dir));
            }
            Err(e) => problem(format!("{at}: {e}; the peer matches nothing")),
        }
    }
    if terms.is_empty() {
        None
    } else {
        Some(or(terms))
    }
}

/// The ports of a rule as a match term: `Some("")` for every port, `None` for none.
fn ports_term(
    ctx: &Ctx<'_>,
    dir: Direction,
    selected: &[(String, Vec<IpAddr>, &PodInfo)],
    ports: Option<&[NetworkPolicyPort]>,
    what: &str,
    problem: &mut impl FnMut(String),
) -> Option<String> {
    let Some(ports) = ports.filter(|p| !p.is_empty()) else {
        return Some(String::new());
    };
    let mut terms = Vec::new();
    for (j, p) in ports.iter().enumerate() {
        let at = format!("{what}.ports[{j}]");
        let proto_k8s = p.protocol.clone().unwrap_or_else(|| "TCP".into());
        let proto = match proto_k8s.as_str() {
            "TCP" => "tcp",
            "UDP" => "udp",
            "SCTP" => "sctp",
            other => {
                problem(format!(
                    "{at}: unknown protocol {other:?}; the entry matches nothing"
                ));
                continue;
            }
        };
        match &p.port {
            None => terms.push(proto.to_string()),
            Some(IntOrString::Int(n)) => {
                let Some(port) = u16::try_from(*n).ok().filter(|n| *n > 0) else {
                    problem(format!(
                        "{at}: port {n} is out of range; the entry matches nothing"
                    ));
                    continue;
                };
                match p.end_port {
                    None => terms.push(format!("{proto}.dst == {port}")),
                    Some(end) if end >= i32::from(port) && end <= 65535 => {
                        terms.push(format!("{proto}.dst >= {port} && {proto}.dst <= {end}"))
                    }
                    Some(end) => problem(format!(
                        "{at}: endPort {end} is below port {port} or out of range; the entry \
                         matches nothing"
                    )),
                }
            }
            Some(IntOrString::String(name)) => {
                if p.end_port.is_some() {
                    problem(format!(
                        "{at}: endPort cannot be used with the named port {name:?}; the entry \
                         matches nothing"
                    ));
                    continue;
                }
                // a named port resolves on the destination pod: the selected pods for
                // ingress, any pod for egress
                let candidates: Vec<(&PodInfo, &[IpAddr])> = match dir {
                    Direction::Ingress => selected
                        .iter()
                        .map(|(_, ips, info)| (*info, ips.as_slice()))
                        .collect(),
                    Direction::Egress => ctx
                        .pods
                        .iter()
                        .map(|p| (p.info, p.ips.as_slice()))
                        .collect(),
                };
                let mut by_number: BTreeMap<u16, BTreeSet<IpAddr>> = BTreeMap::new();
                for (info, ips) in candidates {
                    for cp in &info.ports {
                        if cp.name.as_deref() == Some(name.as_str()) && cp.protocol == proto_k8s {
                            by_number
                                .entry(cp.port)
                                .or_default()
                                .extend(ips.iter().copied());
                        }
                    }
                }
                if by_number.is_empty() {
                    problem(format!(
                        "{at}: named port {name:?} ({proto_k8s}) matches no container port of \
                         the destination pods; the entry matches nothing for now"
                    ));
                    continue;
                }
                for (port, ips) in by_number {
                    let mut fams: BTreeMap<Family, Vec<String>> = BTreeMap::new();
                    for ip in ips {
                        fams.entry(Family::of(&ip))
                            .or_default()
                            .push(ip.to_string());
                    }
                    let dst: Vec<String> = fams
                        .into_iter()
                        .map(|(f, ips)| format!("{}.dst == {{{}}}", f.field(), ips.join(", ")))
                        .collect();
                    terms.push(format!("{proto}.dst == {port} && ({})", or(dst)));
                }
            }
        }
    }
    if terms.is_empty() {
        None
    } else {
        Some(
            terms
                .into_iter()
                .map(|t| format!("({t})"))
                .collect::<Vec<_>>()
                .join(" || "),
        )
    }
}
