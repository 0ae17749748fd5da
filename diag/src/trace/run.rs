//! One trace, whatever the backend: the source pod's logical port and addresses, the
//! destination (a pod, a Service's VIP with the backend the load balancer picks, an
//! address), `ovn-trace` from the pod's switch, the explanation, and `ofproto/trace` on
//! the source node and, through a Geneve or VXLAN tunnel, on the receiving node.

use std::net::IpAddr;

use serde_json::Value;

use super::backend::Backend;
use super::explain::{self, Finding};
use super::nb_view::NbView;
use super::target::{Dst, L4, TraceSpec};
use super::{Endpoint, TraceError, TraceReport, Verdict, ovn_trace, physical};

/// A pod as the trace needs it.
struct PodEnd {
    key: String,
    ips: Vec<IpAddr>,
    mac: String,
    node: Option<String>,
}

fn pod_end(pods: &[Value], key: &str) -> Result<PodEnd, TraceError> {
    let p = pods
        .iter()
        .find(|p| {
            format!(
                "{}/{}",
                p["metadata"]["namespace"].as_str().unwrap_or(""),
                p["metadata"]["name"].as_str().unwrap_or("")
            ) == key
        })
        .ok_or_else(|| TraceError::UnknownPod(key.into()))?;
    let net = p["metadata"]["annotations"][api::keys::POD_NETWORKS]
        .as_str()
        .and_then(|v| api::pod_networks::decode_pod_networks(v).ok())
        .ok_or_else(|| TraceError::NoAddress(key.into()))?;
    let ips: Vec<IpAddr> = net
        .ip_addresses
        .iter()
        .filter_map(|a| a.split('/').next()?.parse().ok())
        .collect();
    if ips.is_empty() {
        return Err(TraceError::NoAddress(key.into()));
    }
    Ok(PodEnd {
        key: key.into(),
        ips,
        mac: net.mac_address,
        node: p["spec"]["nodeName"].as_str().map(str::to_string),
    })
}

/// The Service's VIP (of `v4`'s family, at `port` when given), its first backend and
/// protocol.
fn service_vip(
    nb: &NbView,
    key: &str,
    v4: bool,
    port: Option<u16>,
) -> Result<(IpAddr, u16, String, String), TraceError> {
    let mut found = None;
    for lb in nb.load_balancers.iter().filter(|lb| {
        use api::external_ids::nb::{KIND, OBJECT};
        lb.external_ids.get(OBJECT).map(String::as_str) == Some(key)
            && lb.external_ids.get(KIND).map(String::as_str)
                == Some(api::external_ids::kind::SERVICE)
    }) {
        let proto = lb.protocol.clone().unwrap_or_else(|| "tcp".into());
        for (vip, backends) in &lb.vips {
            let Ok(sa) = vip.parse::<std::net::SocketAddr>() else {
                continue;
            };
            if sa.is_ipv4() != v4 || port.is_some_and(|p| p != sa.port()) {
                continue;
            }
            let backend = backends.split(',').next().unwrap_or("").to_string();
            found.get_or_insert((sa.ip(), sa.port(), backend, proto.clone()));
        }
    }
    found.ok_or_else(|| TraceError::UnknownService(key.into()))
}

fn match_l4(l4: L4, v4: bool) -> String {
    match l4 {
        L4::Tcp(p) => format!("tcp && tcp.dst == {p}"),
        L4::Udp(p) => format!("udp && udp.dst == {p}"),
        L4::Sctp(p) => format!("sctp && sctp.dst == {p}"),
        L4::Icmp if v4 => "icmp4 && icmp4.type == 8".into(),
        L4::Icmp => "icmp6 && icmp6.type == 128".into(),
    }
}

fn ofproto_l4(l4: L4, v4: bool) -> String {
    let fam = if v4 { "" } else { "6" };
    match l4 {
        // the protocol's own field names: ofproto/trace refuses `udp,tp_dst=`
        L4::Tcp(p) => format!("tcp{fam},tcp_dst={p}"),
        L4::Udp(p) => format!("udp{fam},udp_dst={p}"),
        L4::Sctp(p) => format!("sctp{fam},sctp_dst={p}"),
        L4::Icmp if v4 => "icmp,icmp_type=8".into(),
        L4::Icmp => "icmp6,icmp_type=128".into(),
    }
}

/// Runs the trace `spec` on the backend `b`.
pub fn trace(b: &mut dyn Backend, spec: &TraceSpec) -> Result<TraceReport, TraceError> {
    let pods = b.pods()?;
    let src = pod_end(&pods, &spec.src)?;
    let nb = b.nb()?;
    let src_lsp = api::names::pod_port(
        spec.src.split('/').next().unwrap_or(""),
        spec.src.split('/').nth(1).unwrap_or(""),
    );
    let port = nb
        .switch_port(&src_lsp)
        .ok_or_else(|| TraceError::NoAddress(spec.src.clone()))?;
    let sw = nb
        .switch_of(port.uuid)
        .ok_or_else(|| TraceError::NoAddress(spec.src.clone()))?;

    // the destination address, its name, and the load balancer's backend
    let (dst_ip, dst_name, dst_node, lb_dst, l4) = match &spec.dst {
        Dst::Pod { key } => {
            let d = pod_end(&pods, key)?;
            let ip = d
                .ips
                .iter()
                .find(|a| src.ips.iter().any(|s| s.is_ipv4() == a.is_ipv4()))
                .copied()
                .ok_or_else(|| TraceError::NoAddress(format!("{key} (of {}'s family)", src.key)))?;
            (ip, key.clone(), d.node, None, spec.l4.unwrap_or(L4::Icmp))
        }
        Dst::Address { ip } => (*ip, ip.to_string(), None, None, spec.l4.unwrap_or(L4::Icmp)),
        Dst::Service { key } => {
            let v4 = src.ips.iter().any(IpAddr::is_ipv4);
            let (vip, vport, backend, proto) =
                service_vip(&nb, key, v4, spec.l4.and_then(L4::port))?;
            let l4 = match proto.as_str() {
                "udp" => L4::Udp(vport),
                "sctp" => L4::Sctp(vport),
                _ => L4::Tcp(vport),
            };
            (vip, format!("svc/{key}"), None, Some(backend), l4)
        }
    };
    let v4 = dst_ip.is_ipv4();
    let src_ip = src
        .ips
        .iter()
        .find(|a| a.is_ipv4() == v4)
        .copied()
        .ok_or_else(|| {
            TraceError::BadInput(format!(
                "{} has no {} address to reach {dst_ip}",
                src.key,
                if v4 { "IPv4" } else { "IPv6" }
            ))
        })?;
    // a pod on the same switch is reached directly, anything else through the router
    let dst_mac = nb
        .switch_ports
        .iter()
        .filter(|p| sw.ports.contains(&p.uuid) && p.type_.is_empty())
        .find_map(|p| {
            p.addresses.iter().find_map(|a| {
                let mut w = a.split_whitespace();
                let mac = w.next()?;
                w.any(|ip| ip.parse::<IpAddr>().ok() == Some(dst_ip))
                    .then(|| mac.to_string())
            })
        })
        .filter(|_| lb_dst.is_none())
        .or_else(|| nb.router_mac_on(sw))
        .unwrap_or_else(|| "00:00:00:00:00:00".into());
    let ipf = if v4 { "ip4" } else { "ip6" };
    let flow = format!(
        "inport == \"{src_lsp}\" && eth.src == {} && eth.dst == {dst_mac} && {ipf}.src == {src_ip} && {ipf}.dst == {dst_ip} && ip.ttl == 64 && {}",
        src.mac,
        match_l4(l4, v4)
    );
    let text = ovn_trace::run(b, &sw.name, &flow, lb_dst.as_deref())?;
    let logical = ovn_trace::parse(&text);
    let findings = explain::explain(&nb, &logical, lb_dst.as_deref());

    // the source node's OpenFlow tables
    let mut phys = Vec::new();
    let nodes = b.nodes()?;
    if let Some(node) = nodes.iter().find(|n| Some(&n.name) == src.node.as_ref()) {
        let ofport = physical::ofport_of(b, &node.name, &src_lsp)?;
        let (ns, nd) = if v4 {
            ("nw_src", "nw_dst")
        } else {
            ("ipv6_src", "ipv6_dst")
        };
        let pflow = format!(
            "in_port={ofport},{},dl_src={},dl_dst={dst_mac},{ns}={src_ip},{nd}={dst_ip},nw_ttl=64",
            ofproto_l4(l4, v4),
            src.mac
        );
        let mut t = physical::run(b, &node.name, &pflow)?;
        // through a tunnel: the receiving node's tables, from its tunnel port
        let arriving = physical::tunnel_header(&t.datapath_actions)
            .zip(physical::packet_fields(&t.text, &t.datapath_actions));
        if let Some(to) = t.tunnel_to.clone()
            && let Some(n) = nodes.iter().find(|n| n.encap_ip == to)
        {
            t.tunnel_to = Some(format!("{} ({to})", n.name));
            phys.push(t);
            if let Some((g, fields)) = arriving {
                let port = physical::tunnel_ofport(b, &n.name, g.kind, &g.src)?;
                phys.push(physical::run(
                    b,
                    &n.name,
                    &physical::arriving_flow(port, &g, &fields),
                )?);
            }
        } else {
            phys.push(t);
        }
    }
    let verdict = match logical.end {
        ovn_trace::End::Output { .. } => Verdict::Delivered,
        ovn_trace::End::Dropped => Verdict::Dropped,
    };
    // the deciding finding first: the drop's reason, else where it went
    let mut decided: Vec<&Finding> = Vec::new();
    let key = |f: &&Finding| match (verdict, f) {
        (
            Verdict::Dropped,
            Finding::PolicyDenied { .. } | Finding::AclDropped { .. } | Finding::DroppedAt { .. },
        ) => 0,
        (Verdict::Delivered, Finding::Delivered { .. }) => 0,
        _ => 1,
    };
    decided.extend(findings.iter());
    decided.sort_by_key(key);
    Ok(TraceReport {
        source: Endpoint {
            name: src.key.clone(),
            ip: src_ip,
            node: src.node.clone(),
        },
        destination: Endpoint {
            name: dst_name,
            ip: dst_ip,
            node: dst_node,
        },
        packet: l4.describe(),
        verdict,
        decided_by: decided.iter().map(|f| f.sentence()).collect(),
        findings,
        logical,
        physical: phys,
    })
}
