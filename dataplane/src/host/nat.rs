//! Services reached from the node's own host: nf_tables rules in one table of ours,
//! `table inet zstack-ovn`.
//!
//! A process in the host netns reaches cluster IPs through the management port (the
//! Service CIDR is routed there and the join switch balances). Other frontends need help:
//!
//! - `<this node's address>:<nodePort>` is local delivery in the kernel and never enters
//!   OVN; another node's address at a nodePort arrives at that node from the underlay,
//!   also as local delivery there. Both are DNATed in `prerouting`/`output` (`fib daddr
//!   type local`, loopback excluded) to `<cluster IP>:<port>` of the node address's family.
//! - `externalIPs` and `status.loadBalancer` ingress IPs: the agent routes them (host
//!   prefixes, [`external_prefixes`]) through the management port like the Subnets, and
//!   DNATs them the same way, so external clients arriving at a node are served too.
//!
//! The DNATed packets are marked ([`MASQ_MARK`]) and masqueraded in `postrouting`: they
//! leave through the management port with its address, so replies come back through OVN.
//! Traffic DNATed so reaches every endpoint of the Service.
//!
//! `externalTrafficPolicy: Local` ([`LocalDnat`]): packets from outside the node
//! (`prerouting`: external clients, other nodes' hosts) meet chain `external` first, which
//! DNATs them straight to this node's endpoints (`numgen random` over them), without the
//! mark: the pod sees the client's address. The endpoints come from the EndpointSlices
//! (their `nodeName`), chosen like the load balancers' ([`api::services::select`]); none
//! here but some elsewhere → `drop`, as kube-proxy does; none anywhere → no such rule, the
//! cluster rule applies and OVN refuses. The pod's reply reaches the node again through
//! the cluster router's `local`-mode reroute of the pod's traffic to its own node's
//! management port, where conntrack undoes the DNAT. The host's own traffic (`output`)
//! keeps the cluster rules: every endpoint answers (like kube-proxy's handling of
//! host-originated traffic).
//!
//! Forwarding (`net.ipv4.ip_forward`, `net.ipv6.conf.all.forwarding`) is enabled when
//! rules exist, as external clients' packets are forwarded into the management port.
//!
//! Pods' egress (`local` gateway mode): the cluster router sends a pod's traffic to
//! addresses outside the cluster to its node's management port; the kernel forwards it to
//! the uplink, and `postrouting` masquerades what comes from a Subnet with `natOutgoing`
//! ([`api::subnet::SubnetSpec::masquerades_egress`]) and leaves through any interface but
//! the management port, so the outside sees the node's address. Replies are un-NATed by
//! conntrack and routed back into the management port.
//!
//! Level-triggered: the whole table is rebuilt from the Services (and endpoints) in one
//! `nft -f` transaction (`add table` + `delete table` + the table), only when the wanted
//! ruleset differs from the last one applied (and always on the first pass after a
//! start); with no rule wanted the table is deleted. No other table is read or written.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};

use api::services::select::backends;
use api::services::{EndpointSliceInfo, Proto, ServiceInfo};

/// The table's family and name.
pub const TABLE: &str = "inet zstack-ovn";

/// The packet mark bit of connections DNATed here (masqueraded on the way out).
pub const MASQ_MARK: u32 = 0x0400_0000;

/// Errors of the host NAT.
#[derive(Debug, thiserror::Error)]
pub enum HostNatError {
    #[error("run nft: {0} (is the nftables package installed?)")]
    Spawn(std::io::Error),
    #[error("nft -f refused the ruleset: {0}")]
    Nft(String),
    #[error("sysctl {path}: {source}")]
    Sysctl {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// One DNAT rule: frontend → cluster IP.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dnat {
    /// `None`: any local address (a nodePort); else that address.
    pub daddr: Option<IpAddr>,
    pub proto: Proto,
    pub dport: u16,
    pub to: IpAddr,
    pub to_port: u16,
}

/// One `externalTrafficPolicy: Local` frontend as reached from outside the node
/// (`prerouting`): DNATed straight to this node's endpoints, without the masquerade mark;
/// with no endpoint here (but some elsewhere) the packet is dropped, as kube-proxy does.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LocalDnat {
    /// `None`: any local address (a nodePort); else that address.
    pub daddr: Option<IpAddr>,
    /// The family (of the cluster IP the frontend stands for).
    pub v4: bool,
    pub proto: Proto,
    pub dport: u16,
    /// This node's endpoints (address and target port) of the family; empty: drop.
    pub to: Vec<SocketAddr>,
}

/// What the table holds for the Services.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// Every frontend → its cluster IP, masqueraded (`output` always; `prerouting` when
    /// no [`Self::local`] rule takes the packet first).
    pub cluster: BTreeSet<Dnat>,
    /// `externalTrafficPolicy: Local` frontends from outside (`prerouting`, first).
    pub local: BTreeSet<LocalDnat>,
}

impl Rules {
    /// No Service needs a rule.
    pub fn is_empty(&self) -> bool {
        self.cluster.is_empty() && self.local.is_empty()
    }
}

/// The DNAT rules the Services need on `node`, given their endpoints (`slices`, of every
/// Service; only `externalTrafficPolicy: Local` Services look at them).
pub fn rules(services: &[ServiceInfo], slices: &[EndpointSliceInfo], node: &str) -> Rules {
    let mut out = Rules::default();
    let mut by_service: BTreeMap<String, Vec<&EndpointSliceInfo>> = BTreeMap::new();
    for s in slices {
        by_service.entry(s.service_key()).or_default().push(s);
    }
    for svc in services.iter().filter(|s| s.balanced()) {
        let slices = by_service
            .get(&svc.key())
            .map(Vec::as_slice)
            .unwrap_or_default();
        for port in &svc.ports {
            for c in &svc.cluster_ips {
                let v4 = c.is_ipv4();
                let mut frontends = Vec::new();
                if svc.node_ports
                    && let Some(np) = port.node_port
                {
                    frontends.push((None, np));
                }
                for e in svc
                    .external_ips
                    .iter()
                    .chain(&svc.ingress_ips)
                    .filter(|e| e.is_ipv4() == v4)
                {
                    frontends.push((Some(*e), port.port));
                }
                // Local: this node's endpoints; a Service without any endpoint keeps the
                // cluster rule (OVN's load balancer refuses the connection)
                let local = (svc.external_local && !backends(port, slices, v4, None).is_empty())
                    .then(|| backends(port, slices, v4, Some(node)));
                for (daddr, dport) in frontends {
                    out.cluster.insert(Dnat {
                        daddr,
                        proto: port.protocol,
                        dport,
                        to: *c,
                        to_port: port.port,
                    });
                    if let Some(to) = &local {
                        out.local.insert(LocalDnat {
                            daddr,
                            v4,
                            proto: port.protocol,
                            dport,
                            to: to.clone(),
                        });
                    }
                }
            }
        }
    }
    out
}

/// Every `externalIPs` and `status.loadBalancer` ingress IP as a host prefix, sorted:
/// the agent routes them through the management port (the host has no other route to
/// them; the join switch balances them like the Subnet switches do).
pub fn external_prefixes(services: &[ServiceInfo]) -> Vec<ipnet::IpNet> {
    let set: BTreeSet<ipnet::IpNet> = services
        .iter()
        .filter(|s| s.balanced() && !s.cluster_ips.is_empty())
        .flat_map(|s| s.external_ips.iter().chain(&s.ingress_ips))
        .map(|ip| ipnet::IpNet::from(*ip))
        .collect();
    set.into_iter().collect()
}

/// `ip` or `ip6`.
fn ip_word(v4: bool) -> &'static str {
    if v4 { "ip" } else { "ip6" }
}

/// The match of a frontend: family, destination (any local address but loopback, or
/// `daddr`), protocol and port.
fn frontend(v4: bool, daddr: Option<IpAddr>, proto: Proto, dport: u16) -> String {
    let (nfproto, lo) = if v4 {
        ("ipv4", "127.0.0.0/8")
    } else {
        ("ipv6", "::1")
    };
    let ip = ip_word(v4);
    let dst = match daddr {
        None => format!("fib daddr type local {ip} daddr != {lo}"),
        Some(a) => format!("{ip} daddr {a}"),
    };
    format!(
        "meta nfproto {nfproto} {dst} meta l4proto {} th dport {dport}",
        proto.ovn()
    )
}

fn rule_text(d: &Dnat) -> String {
    let v4 = d.to.is_ipv4();
    format!(
        "{} meta mark set meta mark | {MASQ_MARK:#x} dnat {} to {}",
        frontend(v4, d.daddr, d.proto, d.dport),
        ip_word(v4),
        SocketAddr::new(d.to, d.to_port)
    )
}

/// No mark (no masquerade): the endpoint sees the client's address.
fn local_rule_text(d: &LocalDnat) -> String {
    let m = frontend(d.v4, d.daddr, d.proto, d.dport);
    let ip = ip_word(d.v4);
    match d.to.as_slice() {
        [] => format!("{m} drop"),
        [one] => format!("{m} dnat {ip} to {one}"),
        many => {
            let map: Vec<String> = many
                .iter()
                .enumerate()
                .map(|(i, a)| format!("{i} : {} . {}", a.ip(), a.port()))
                .collect();
            format!(
                "{m} dnat {ip} to numgen random mod {} map {{ {} }}",
                many.len(),
                map.join(", ")
            )
        }
    }
}

/// The egress masquerade of `sources` (the `natOutgoing` Subnets' CIDRs), one rule per
/// family present.
fn egress_rules(sources: &[ipnet::IpNet]) -> Vec<String> {
    let mut out = Vec::new();
    for (ip, v4) in [("ip", true), ("ip6", false)] {
        let set: BTreeSet<String> = sources
            .iter()
            .filter(|c| c.addr().is_ipv4() == v4)
            .map(|c| c.trunc().to_string())
            .collect();
        if !set.is_empty() {
            let set: Vec<String> = set.into_iter().collect();
            out.push(format!(
                "{ip} saddr {{ {} }} oifname != \"{}\" masquerade",
                set.join(", "),
                crate::host::mgmt::MGMT_PORT
            ));
        }
    }
    out
}

/// The `nft -f` script that makes our table hold exactly `rules` and the egress
/// masquerade of `egress` (deletes the table when both are empty).
pub fn script(rules: &Rules, egress: &[ipnet::IpNet]) -> String {
    let mut s = format!("add table {TABLE}\ndelete table {TABLE}\n");
    let egress = egress_rules(egress);
    if rules.is_empty() && egress.is_empty() {
        return s;
    }
    s.push_str(&format!("table {TABLE} {{\n"));
    let chain = |s: &mut String, name: &str, lines: Vec<String>| {
        s.push_str(&format!("  chain {name} {{\n"));
        for l in lines {
            s.push_str(&format!("    {l}\n"));
        }
        s.push_str("  }\n");
    };
    if !rules.local.is_empty() {
        chain(
            &mut s,
            "external",
            rules.local.iter().map(local_rule_text).collect(),
        );
    }
    if !rules.cluster.is_empty() {
        chain(
            &mut s,
            "services",
            rules.cluster.iter().map(rule_text).collect(),
        );
    }
    if !rules.is_empty() {
        // dstnat is -100; nft 1.0 accepts the name only in prerouting. Packets from
        // outside meet the externalTrafficPolicy: Local rules first; the host's own
        // (output) reach every endpoint, like kube-proxy's.
        for (hook, from_outside) in [("prerouting", true), ("output", false)] {
            let mut lines = vec![format!(
                "type nat hook {hook} priority -100; policy accept;"
            )];
            if from_outside && !rules.local.is_empty() {
                lines.push("jump external".into());
            }
            if !rules.cluster.is_empty() {
                lines.push("jump services".into());
            }
            chain(&mut s, hook, lines);
        }
    }
    s.push_str(&format!(
        "  chain postrouting {{\n    type nat hook postrouting priority srcnat; policy accept;\n    meta mark & {MASQ_MARK:#x} == {MASQ_MARK:#x} masquerade\n"
    ));
    for e in &egress {
        s.push_str(&format!("    {e}\n"));
    }
    s.push_str("  }\n}\n");
    s
}

/// Runs `nft -f -` with `script` (one atomic transaction).
pub fn apply(script: &str) -> Result<(), HostNatError> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(HostNatError::Spawn)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(HostNatError::Spawn)?;
    }
    let out = child.wait_with_output().map_err(HostNatError::Spawn)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(HostNatError::Nft(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

/// Deletes our table if it exists (uninstall); `Ok(true)` if there was one.
pub fn delete_table() -> Result<bool, HostNatError> {
    let listed = Command::new("nft")
        .args(["list", "table"])
        .args(TABLE.split_whitespace())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(HostNatError::Spawn)?;
    if !listed.success() {
        return Ok(false);
    }
    apply(&script(&Rules::default(), &[]))?;
    Ok(true)
}

/// The sysctls that turn forwarding on.
const FORWARDING: [&str; 2] = [
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/net/ipv6/conf/all/forwarding",
];

/// Turns forwarding on (external clients' packets are forwarded to the management port,
/// pods' egress from it); returns the sysctls it could not turn on. A container whose
/// `/proc/sys` is read-only (the chart's agent outside privileged pools) cannot: the
/// rules must still apply, the host's own traffic to Services needs no forwarding.
fn enable_forwarding(paths: &[&str]) -> Vec<HostNatError> {
    let mut failed = Vec::new();
    for &path in paths {
        let sysctl = |source| HostNatError::Sysctl {
            path: path.to_string(),
            source,
        };
        let r = std::fs::read_to_string(path)
            .map_err(sysctl)
            .and_then(|now| {
                if now.trim() == "1" {
                    return Ok(());
                }
                std::fs::write(path, "1").map_err(sysctl)?;
                tracing::info!(%path, "forwarding enabled for Services reached through this node");
                Ok(())
            });
        if let Err(e) = r {
            failed.push(e);
        }
    }
    failed
}

/// The last ruleset applied (so an unchanged pass runs nothing).
#[derive(Debug, Default, Clone)]
pub struct HostNat {
    last: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl HostNat {
    /// Makes our table hold `rules` (see [`rules`]) and the egress of `egress` (the
    /// `natOutgoing` Subnets' CIDRs); returns whether it was (re)written.
    pub fn sync(&self, rules: &Rules, egress: &[ipnet::IpNet]) -> Result<bool, HostNatError> {
        let text = script(rules, egress);
        let wanted = !rules.is_empty() || !egress.is_empty();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() == Some(text.as_str()) {
            return Ok(false);
        }
        if wanted {
            for e in enable_forwarding(&FORWARDING) {
                tracing::warn!(
                    error = %e,
                    "forwarding is off and cannot be turned on from here: external clients of \
                     Services and pods' egress through this node's kernel are not forwarded \
                     (set net.ipv4.ip_forward=1 and net.ipv6.conf.all.forwarding=1 on the node, \
                     as kubeadm requires); the NAT rules apply"
                );
            }
        }
        match apply(&text) {
            // no nft and nothing wanted: there is no table of ours to delete either
            Err(HostNatError::Spawn(e)) if !wanted && e.kind() == std::io::ErrorKind::NotFound => {}
            r => r?,
        }
        tracing::info!(
            rules = rules.cluster.len(),
            local_rules = rules.local.len(),
            egress_masquerade = ?egress_rules(egress),
            table = TABLE,
            "host NAT rules applied (Services, pods' egress)"
        );
        *last = Some(text);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::services::{EndpointInfo, EndpointPort, ServicePort, TargetPort};

    #[test]
    fn forwarding_that_cannot_be_turned_on_is_reported_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let off = dir.path().join("ip_forward");
        std::fs::write(&off, "0\n").unwrap();
        // a directory: writing it fails even for root, as a read-only /proc/sys does
        let stuck = dir.path().join("forwarding");
        std::fs::create_dir(&stuck).unwrap();
        let (off_s, stuck_s) = (off.to_string_lossy(), stuck.to_string_lossy());
        let failed = enable_forwarding(&[&off_s, &stuck_s]);
        assert_eq!(std::fs::read_to_string(&off).unwrap(), "1");
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(
            failed[0].to_string().contains(stuck_s.as_ref()),
            "{}",
            failed[0]
        );
        assert!(enable_forwarding(&[&off_s]).is_empty());
    }

    fn svc(node_port: Option<u16>) -> ServiceInfo {
        ServiceInfo {
            namespace: "d".into(),
            name: "web".into(),
            cluster_ips: vec!["10.96.0.10".parse().unwrap(), "fd00::10".parse().unwrap()],
            node_ports: node_port.is_some(),
            ports: vec![ServicePort {
                name: String::new(),
                protocol: Proto::Tcp,
                port: 80,
                target_port: TargetPort::Number(8080),
                node_port,
            }],
            external_ips: vec!["192.0.2.10".parse().unwrap()],
            ..Default::default()
        }
    }

    #[test]
    fn rules_and_script() {
        let r = rules(&[svc(Some(30080))], &[], "n1");
        // nodePort per family + the v4 externalIP
        assert_eq!(r.cluster.len(), 3, "{r:?}");
        assert!(r.local.is_empty(), "{r:?}");
        let s = script(&r, &[]);
        assert!(s.starts_with("add table inet zstack-ovn\ndelete table inet zstack-ovn\n"));
        assert!(s.contains(
            "meta nfproto ipv4 fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto tcp th dport 30080 meta mark set meta mark | 0x4000000 dnat ip to 10.96.0.10:80"
        ), "{s}");
        assert!(s.contains("dnat ip6 to [fd00::10]:80"), "{s}");
        assert!(
            s.contains("ip daddr 192.0.2.10 meta l4proto tcp th dport 80"),
            "{s}"
        );
        assert!(s.contains("masquerade"), "{s}");
        assert_eq!(
            external_prefixes(&[svc(None)]),
            vec!["192.0.2.10/32".parse::<ipnet::IpNet>().unwrap()]
        );
        assert!(s.contains("type nat hook output priority -100;"), "{s}");
        // a ClusterIP Service without external IPs needs nothing; headless nothing
        let mut plain = svc(None);
        plain.external_ips.clear();
        assert!(rules(&[plain.clone()], &[], "n1").is_empty());
        let mut headless = svc(Some(30080));
        headless.headless = true;
        assert!(rules(&[headless], &[], "n1").is_empty());
        assert!(!s.contains("chain external"), "{s}");
        assert_eq!(
            script(&Rules::default(), &[]),
            "add table inet zstack-ovn\ndelete table inet zstack-ovn\n",
            "no rule: the table goes"
        );
    }

    fn endpoint(ip: &str, node: &str, ready: bool) -> EndpointInfo {
        EndpointInfo {
            addresses: vec![ip.parse().unwrap()],
            ready,
            serving: ready,
            terminating: false,
            node: Some(node.into()),
        }
    }

    fn slice(endpoints: Vec<EndpointInfo>) -> EndpointSliceInfo {
        EndpointSliceInfo {
            namespace: "d".into(),
            name: "web-1".into(),
            service: "web".into(),
            endpoints,
            ports: vec![EndpointPort {
                name: String::new(),
                port: 8080,
                protocol: Proto::Tcp,
            }],
        }
    }

    fn local_svc() -> ServiceInfo {
        ServiceInfo {
            external_local: true,
            ..svc(Some(30080))
        }
    }

    #[test]
    fn external_traffic_policy_local_dnats_to_this_nodes_endpoints_without_the_mark() {
        let slices = [slice(vec![
            endpoint("10.16.0.5", "n1", true),
            endpoint("10.16.0.6", "n1", true),
            endpoint("10.16.0.7", "n1", false),
            endpoint("10.16.1.5", "n2", true),
            endpoint("fd00:10:16::5", "n1", true),
        ])];
        let r = rules(&[local_svc()], &slices, "n1");
        // the host's own traffic (output) still reaches every endpoint through the
        // cluster IP: the cluster rules stay
        assert_eq!(r.cluster.len(), 3, "{r:?}");
        // nodePort per family + the v4 externalIP
        assert_eq!(r.local.len(), 3, "{r:?}");
        let s = script(&r, &[]);
        assert!(
            s.contains(
                "meta nfproto ipv4 fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto tcp th dport 30080 dnat ip to numgen random mod 2 map { 0 : 10.16.0.5 . 8080, 1 : 10.16.0.6 . 8080 }\n"
            ),
            "{s}"
        );
        assert!(
            s.contains(
                "meta nfproto ipv6 fib daddr type local ip6 daddr != ::1 meta l4proto tcp th dport 30080 dnat ip6 to [fd00:10:16::5]:8080\n"
            ),
            "{s}"
        );
        assert!(
            s.contains("ip daddr 192.0.2.10 meta l4proto tcp th dport 80 dnat ip to numgen"),
            "{s}"
        );
        // no masquerade mark on a local rule; prerouting tries them first, output never
        let external = s
            .split("chain external {")
            .nth(1)
            .and_then(|c| c.split('}').next())
            .unwrap_or_default()
            .to_string();
        assert!(!external.contains("mark"), "{external}");
        assert!(
            s.contains(
                "chain prerouting {\n    type nat hook prerouting priority -100; policy accept;\n    jump external\n    jump services\n  }"
            ),
            "{s}"
        );
        assert!(
            s.contains(
                "chain output {\n    type nat hook output priority -100; policy accept;\n    jump services\n  }"
            ),
            "{s}"
        );

        // n2 has one IPv4 endpoint and no IPv6 one: v6 traffic from outside is dropped
        let s2 = script(&rules(&[local_svc()], &slices, "n2"), &[]);
        assert!(
            s2.contains("th dport 30080 dnat ip to 10.16.1.5:8080\n"),
            "{s2}"
        );
        assert!(
            s2.contains("ip6 daddr != ::1 meta l4proto tcp th dport 30080 drop\n"),
            "{s2}"
        );
        // a node with no endpoint drops what comes from outside
        let r3 = rules(&[local_svc()], &slices, "n3");
        assert!(r3.local.iter().all(|l| l.to.is_empty()), "{r3:?}");
        assert_eq!(r3.local.len(), 3, "{r3:?}");
        // not ready anywhere on n1: its serving+terminating endpoints serve (kube-proxy)
        let mut term = endpoint("10.16.0.8", "n1", false);
        term.serving = true;
        term.terminating = true;
        let r4 = rules(
            &[local_svc()],
            &[slice(vec![term, endpoint("10.16.1.5", "n2", true)])],
            "n1",
        );
        assert!(
            r4.local
                .iter()
                .any(|l| l.v4 && l.to == vec!["10.16.0.8:8080".parse().unwrap()]),
            "{r4:?}"
        );
        // no endpoint at all: no local rule, the cluster rule lets OVN refuse
        let r5 = rules(&[local_svc()], &[], "n1");
        assert!(r5.local.is_empty(), "{r5:?}");
        assert_eq!(r5.cluster.len(), 3, "{r5:?}");
        // externalTrafficPolicy: Cluster ignores the endpoints
        assert_eq!(
            rules(&[svc(Some(30080))], &slices, "n1"),
            rules(&[svc(Some(30080))], &[], "n1")
        );
    }

    #[test]
    fn egress_masquerade_per_family_outside_the_management_port() {
        let cidrs: Vec<ipnet::IpNet> = ["10.16.0.0/16", "fd00:10:16::/64", "10.17.0.0/16"]
            .iter()
            .map(|c| c.parse().unwrap())
            .collect();
        let s = script(&Rules::default(), &cidrs);
        assert!(
            s.contains(
                r#"ip saddr { 10.16.0.0/16, 10.17.0.0/16 } oifname != "ovn-k8s-mp0" masquerade"#
            ),
            "{s}"
        );
        assert!(
            s.contains(r#"ip6 saddr { fd00:10:16::/64 } oifname != "ovn-k8s-mp0" masquerade"#),
            "{s}"
        );
        // no Service rule: no dnat chains, but the table and its postrouting chain exist
        assert!(!s.contains("chain services"), "{s}");
        assert!(s.contains("type nat hook postrouting"), "{s}");
    }
}
