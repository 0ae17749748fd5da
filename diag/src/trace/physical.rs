//! The physical side of a trace: `ofproto/trace` on a node's br-int (its ovs-vswitchd,
//! whatever the datapath: kernel, AF_XDP or DPDK ports all go through the same OpenFlow
//! tables), from the source pod's OpenFlow port, and what the datapath would do with the
//! packet: deliver it to a local port, send it through a tunnel to another node, drop it.

use serde::Serialize;

use super::TraceError;
use super::backend::Backend;

/// What one node's ovs-vswitchd would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeTrace {
    pub node: String,
    /// The `Datapath actions:` line.
    pub datapath_actions: String,
    /// The tunnel endpoint the packet is sent to, when it leaves through a tunnel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tunnel_to: Option<String>,
    /// The whole `ofproto/trace` output (`-v`).
    #[serde(skip)]
    pub text: String,
}

impl NodeTrace {
    pub fn dropped(&self) -> bool {
        self.datapath_actions == "drop"
    }
}

/// The first OpenFlow port of an Interface matching `conditions` in `node`'s database
/// (`ovs-vsctl find Interface`); `what` names it in the error.
fn find_ofport(
    b: &mut dyn Backend,
    node: &str,
    conditions: &[String],
    what: &str,
) -> Result<i64, TraceError> {
    let mut args: Vec<String> = ["--bare", "--columns=ofport", "find", "Interface"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(conditions.iter().cloned());
    b.ovs_vsctl(node, &args)?
        .split_whitespace()
        .find_map(|w| w.parse::<i64>().ok().filter(|p| *p > 0))
        .ok_or_else(|| TraceError::Tool {
            tool: "ovs-vsctl".into(),
            detail: format!("no OpenFlow port for {what} on node {node}"),
        })
}

/// The OpenFlow port on `node` of the pod whose logical port is `lsp`.
pub fn ofport_of(b: &mut dyn Backend, node: &str, lsp: &str) -> Result<i64, TraceError> {
    find_ofport(b, node, &[format!("external_ids:iface-id={lsp}")], lsp)
}

/// The tunnel destination in datapath actions (`tnl_push(...,dst=172.16.0.2,...)` or
/// `set(tunnel(...,dst=172.16.0.2,...))`).
pub fn tunnel_destination(actions: &str) -> Option<String> {
    // tnl_push's header has an eth(dst=...) before the IP header's dst
    let rest = match actions.find("tnl_push(") {
        Some(i) => {
            let r = &actions[i..];
            &r[r.find("ipv4(").or_else(|| r.find("ipv6("))?..]
        }
        None => &actions[actions.find("tunnel(")?..],
    };
    let j = rest.find("dst=")?;
    let v = &rest[j + 4..];
    let end = v.find([',', ')']).unwrap_or(v.len());
    Some(v[..end].to_string())
}

/// A tunnel encapsulation in datapath actions: Geneve (the VNI is the logical datapath,
/// OVN's option holds the ingress port key << 16 | egress port key) or VXLAN (the VNI
/// carries the datapath and the egress port), with the outer addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunnel {
    /// `geneve` or `vxlan`: the OVS Interface type.
    pub kind: &'static str,
    pub src: String,
    pub dst: String,
    pub vni: String,
    /// Geneve's OVN option (`tun_metadata0`).
    pub option: Option<String>,
}

/// The tunnel header of a `tnl_push` in `actions`.
pub fn tunnel_header(actions: &str) -> Option<Tunnel> {
    let push = &actions[actions.find("tnl_push(")?..];
    let ip = &push[push.find("ipv4(").or_else(|| push.find("ipv6("))?..];
    let field = |text: &str, key: &str| {
        let v = &text[text.find(key)? + key.len()..];
        Some(v[..v.find([',', ')']).unwrap_or(v.len())].to_string())
    };
    let (kind, header, option) = if let Some(i) = push.find("geneve(") {
        let g = &push[i..];
        let opts = &g[g.find("options(")?..];
        // options({class=0x102,type=0x80,len=4,0x20003})
        let value = opts
            .split([',', '}'])
            .find(|t| t.starts_with("0x") && !t.contains('='))?;
        ("geneve", g, Some(value.to_string()))
    } else {
        ("vxlan", &push[push.find("vxlan(")?..], None)
    };
    Some(Tunnel {
        kind,
        src: field(ip, "src=")?,
        dst: field(ip, "dst=")?,
        vni: field(header, "vni=")?,
        option,
    })
}

/// The packet as it leaves in a tunnel: the protocol and header fields of the last
/// `Final flow:` of a trace (the flow entering the last pass, without OVS's registers),
/// with the datapath actions' rewrites before the `tnl_push` applied (a router sets the
/// MACs and the TTL there).
pub fn packet_fields(text: &str, actions: &str) -> Option<String> {
    let flow = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("Final flow: "))?;
    const KEEP: &[&str] = &[
        "dl_src",
        "dl_dst",
        "nw_src",
        "nw_dst",
        "ipv6_src",
        "ipv6_dst",
        "nw_ttl",
        "tp_src",
        "tp_dst",
        "icmp_type",
        "icmp_code",
    ];
    const PROTOS: &[&str] = &[
        "tcp", "udp", "sctp", "icmp", "tcp6", "udp6", "sctp6", "icmp6",
    ];
    let mut proto = None;
    let mut fields: Vec<(String, String)> = Vec::new();
    for f in flow.split(',') {
        match f.split_once('=') {
            Some((k, v)) if KEEP.contains(&k) => fields.push((k.into(), v.into())),
            None if PROTOS.contains(&f) => proto = Some(f.to_string()),
            _ => {}
        }
    }
    // set(eth(src=..,dst=..)), set(ipv4(src=..,dst=..,ttl=..)), set(ipv6(...,hlimit=..)),
    // set(tcp(src=..,dst=..)) before the tunnel
    let before = &actions[..actions.find("tnl_push(").unwrap_or(actions.len())];
    for set in before.split("set(").skip(1) {
        let Some((header, rest)) = set.split_once('(') else {
            continue;
        };
        let body = &rest[..rest.find(')').unwrap_or(rest.len())];
        for kv in body.split(',') {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let v = v.split('/').next().unwrap_or(v);
            let field = match (header, k) {
                ("eth", "src") => "dl_src",
                ("eth", "dst") => "dl_dst",
                ("ipv4", "src") => "nw_src",
                ("ipv4", "dst") => "nw_dst",
                ("ipv4", "ttl") | ("ipv6", "hlimit") => "nw_ttl",
                ("ipv6", "src") => "ipv6_src",
                ("ipv6", "dst") => "ipv6_dst",
                ("tcp" | "udp" | "sctp", "src") => "tp_src",
                ("tcp" | "udp" | "sctp", "dst") => "tp_dst",
                _ => continue,
            };
            match fields.iter_mut().find(|(k, _)| k == field) {
                Some(e) => e.1 = v.to_string(),
                None => fields.push((field.into(), v.to_string())),
            }
        }
    }
    // the protocol's own port fields: ofproto/trace refuses `udp,tp_dst=`
    let l4 = proto
        .as_deref()
        .map(|p| p.trim_end_matches('6'))
        .filter(|p| matches!(*p, "tcp" | "udp" | "sctp"));
    let mut out: Vec<String> = proto.clone().into_iter().collect();
    out.extend(fields.into_iter().map(|(k, v)| match (l4, k.as_str()) {
        (Some(p), "tp_src") => format!("{p}_src={v}"),
        (Some(p), "tp_dst") => format!("{p}_dst={v}"),
        _ => format!("{k}={v}"),
    }));
    (out.len() > 1).then(|| out.join(","))
}

/// The OpenFlow port on `node` of its tunnel of type `kind` to `remote_ip`.
pub fn tunnel_ofport(
    b: &mut dyn Backend,
    node: &str,
    kind: &str,
    remote_ip: &str,
) -> Result<i64, TraceError> {
    find_ofport(
        b,
        node,
        &[
            format!("type={kind}"),
            format!("options:remote_ip={remote_ip}"),
        ],
        &format!("the {kind} tunnel to {remote_ip}"),
    )
}

/// The flow to trace on the receiving node: the packet as the tunnel brings it.
pub fn arriving_flow(ofport: i64, t: &Tunnel, fields: &str) -> String {
    let option = t
        .option
        .as_ref()
        .map(|o| format!("tun_metadata0={o},"))
        .unwrap_or_default();
    format!(
        "in_port={ofport},tun_id={},tun_src={},tun_dst={},{option}{fields}",
        t.vni, t.src, t.dst
    )
}

/// Runs `ofproto/trace br-int FLOW` on `node`'s ovs-vswitchd, every conntrack lookup
/// seeing a new connection.
pub fn run(b: &mut dyn Backend, node: &str, flow: &str) -> Result<NodeTrace, TraceError> {
    let mut args: Vec<String> = vec!["ofproto/trace".into(), "br-int".into(), flow.into()];
    for _ in 0..4 {
        args.push("--ct-next".into());
        args.push("trk,new".into());
    }
    let text = b.vswitchd_appctl(node, &args)?;
    let datapath_actions = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("Datapath actions: "))
        .unwrap_or("drop")
        .trim()
        .to_string();
    Ok(NodeTrace {
        node: node.to_string(),
        tunnel_to: tunnel_destination(&datapath_actions),
        datapath_actions,
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tunnel_destination_is_read_from_the_actions() {
        assert_eq!(
            tunnel_destination(
                "ct(zone=3),recirc(0x2),tnl_push(tnl_port(6081),header(size=58,type=5,eth(dst=aa:bb:cc:dd:ee:ff,src=0a:00:00:00:00:01,dl_type=0x0800),ipv4(src=172.16.0.1,dst=172.16.0.2,proto=17,tos=0,ttl=64,frag=0x4000)),out_port(2))"
            )
            .as_deref(),
            Some("172.16.0.2")
        );
        assert_eq!(
            tunnel_destination("set(tunnel(tun_id=0x1,dst=172.16.0.3,ttl=64,flags(df|key))),2")
                .as_deref(),
            Some("172.16.0.3")
        );
        assert_eq!(tunnel_destination("3"), None);
    }

    #[test]
    fn a_vxlan_header_is_read_without_an_option() {
        let a = "tnl_push(tnl_port(3),header(size=50,type=4,eth(dst=4e:98:c1:8e:96:dd,src=4e:a6:7d:2b:34:24,dl_type=0x0800),ipv4(src=172.16.0.1,dst=172.16.0.2,proto=17,tos=0,ttl=64,frag=0x4000),udp(src=0,dst=4789,csum=0x0),vxlan(flags=0x8000000,vni=0x3004)),out_port(2))";
        let t = tunnel_header(a).expect("vxlan");
        assert_eq!(t.kind, "vxlan");
        assert_eq!(t.vni, "0x3004");
        assert_eq!(t.option, None);
        assert_eq!(
            arriving_flow(5, &t, "icmp"),
            "in_port=5,tun_id=0x3004,tun_src=172.16.0.1,tun_dst=172.16.0.2,icmp"
        );
    }

    #[test]
    fn the_geneve_header_and_the_packet_leaving_are_read() {
        let a = "ct(commit,zone=11,mark=0/0x1),tnl_push(tnl_port(4),header(size=58,type=5,eth(dst=4e:98:c1:8e:96:dd,src=4e:a6:7d:2b:34:24,dl_type=0x0800),ipv4(src=172.16.0.1,dst=172.16.0.2,proto=17,tos=0,ttl=64,frag=0x4000),udp(src=0,dst=6081,csum=0xffff),geneve(crit,vni=0x4,options({class=0x102,type=0x80,len=4,0x20003}))),out_port(2)),1";
        let g = tunnel_header(a).expect("geneve");
        assert_eq!(
            g,
            Tunnel {
                kind: "geneve",
                src: "172.16.0.1".into(),
                dst: "172.16.0.2".into(),
                vni: "0x4".into(),
                option: Some("0x20003".into())
            }
        );
        let text = "Final flow: recirc_id=0x11,eth,tcp,reg0=0x286,reg15=0x3,tun_id=0x4,metadata=0x4,in_port=4,vlan_tci=0x0000,dl_src=0a:58:0a:14:00:02,dl_dst=0a:58:0a:14:00:05,nw_src=10.20.0.2,nw_dst=10.20.0.5,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=0,tp_dst=8080,tcp_flags=0\n";
        let f = packet_fields(text, a).expect("fields");
        assert_eq!(
            f,
            "tcp,dl_src=0a:58:0a:14:00:02,dl_dst=0a:58:0a:14:00:05,nw_src=10.20.0.2,nw_dst=10.20.0.5,nw_ttl=64,tcp_src=0,tcp_dst=8080"
        );
        // a router on the way: its rewrites before the tunnel count
        let routed = "set(eth(src=0a:0e:40:9b:99:57,dst=0a:58:0a:10:00:64)),set(ipv4(ttl=63)),tnl_push(tnl_port(4),header(size=58,type=5,eth(dst=7a:d2:e6:6d:3b:c9,src=82:5f:1e:0a:8b:0e,dl_type=0x0800),ipv4(src=172.16.0.1,dst=172.16.0.2,proto=17,tos=0,ttl=64,frag=0x4000),udp(src=0,dst=6081,csum=0xffff),geneve(crit,vni=0x4,options({class=0x102,type=0x80,len=4,0x10003}))),out_port(2)),1";
        assert_eq!(
            packet_fields(text, routed).expect("fields"),
            "tcp,dl_src=0a:0e:40:9b:99:57,dl_dst=0a:58:0a:10:00:64,nw_src=10.20.0.2,nw_dst=10.20.0.5,nw_ttl=63,tcp_src=0,tcp_dst=8080"
        );
        assert_eq!(
            arriving_flow(1, &g, &f),
            format!(
                "in_port=1,tun_id=0x4,tun_src=172.16.0.1,tun_dst=172.16.0.2,tun_metadata0=0x20003,{f}"
            )
        );
    }
}
