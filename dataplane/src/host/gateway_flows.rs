//! The gateway bridge's OpenFlow rules in `shared` gateway mode: the host and the node's
//! gateway router (`GR_<node>`, reached through ovn-controller's patch port) share one
//! address and MAC on the bridge, so the bridge must tell their traffic apart, as
//! ovn-kubernetes' shared gateway does:
//!
//! - from the router (the patch port, the shared MAC): IPv4 is committed to conntrack
//!   (zone [`CT_ZONE`], mark 1) and sent to the uplink; anything else (ARP) to the uplink;
//! - from the uplink to the shared address: Geneve/VXLAN to the host (the tunnels end
//!   there), the rest through conntrack: replies of the router's connections (mark 1) to
//!   the router, everything else to the host;
//! - from the uplink to a pod Subnet (an underlay routing pod addresses to this node,
//!   `natOutgoing: false`): to the router, which routes them in;
//! - ARP replies to the shared MAC: to both.
//!
//! IPv6, when the node shares an IPv6 address with the router too: the same split through
//! the same zone, and neighbour discovery (solicitations for the shared address,
//! advertisements to the shared MAC) to both sides, never through conntrack.
//!
//! Everything else keeps the bridge's `NORMAL` flow (VLAN Subnets' localnet traffic, the
//! host's own traffic). Our rules carry [`COOKIE`]; they are replaced as a whole in one
//! `ovs-ofctl --bundle` transaction when they differ from the wanted set, and nothing
//! else on the bridge is touched.

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use ipnet::IpNet;

/// The cookie of our rules on the gateway bridge ("zovngw").
pub const COOKIE: u64 = 0x7a6f_766e_6777;
/// The conntrack zone telling the router's connections from the host's.
pub const CT_ZONE: u16 = 64_000;

/// Errors applying the rules.
#[derive(Debug, thiserror::Error)]
pub enum GatewayFlowsError {
    #[error("run ovs-ofctl: {0}")]
    Spawn(std::io::Error),
    #[error("ovs-ofctl {what} on {target}: {stderr}")]
    Ofctl {
        what: &'static str,
        target: String,
        stderr: String,
    },
}

/// What the rules are built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayPorts {
    pub uplink: i64,
    pub patch: i64,
    pub mac: String,
    pub address: Ipv4Addr,
    /// The shared IPv6 address, when the node has one for the router.
    pub address6: Option<Ipv6Addr>,
    /// Pod Subnets the underlay may route to this node.
    pub pod_cidrs: Vec<IpNet>,
}

/// The rules, one `ovs-ofctl add-flow` spec each (cookie included).
pub fn flows(p: &GatewayPorts) -> Vec<String> {
    let (u, r, mac, a, z) = (p.uplink, p.patch, &p.mac, p.address, CT_ZONE);
    let c = format!("cookie={COOKIE:#x},table=0");
    let mut f = vec![
        format!("{c},priority=300,in_port={u},udp,nw_dst={a},tp_dst=6081,actions=LOCAL"),
        format!("{c},priority=300,in_port={u},udp,nw_dst={a},tp_dst=4789,actions=LOCAL"),
        format!("{c},priority=200,in_port={u},ip,nw_dst={a},actions=ct(zone={z},table=1)"),
        format!("{c},priority=200,in_port={u},arp,arp_op=2,dl_dst={mac},actions=LOCAL,output:{r}"),
        format!(
            "{c},priority=200,in_port={r},ip,dl_src={mac},\
             actions=ct(commit,zone={z},exec(set_field:1->ct_mark)),output:{u}"
        ),
        format!("{c},priority=190,in_port={r},dl_src={mac},actions=output:{u}"),
        format!(
            "cookie={COOKIE:#x},table=1,priority=100,ct_state=+trk+est,ct_mark=1,actions=output:{r}"
        ),
        format!(
            "cookie={COOKIE:#x},table=1,priority=100,ct_state=+trk+rel,ct_mark=1,actions=output:{r}"
        ),
        format!("cookie={COOKIE:#x},table=1,priority=0,actions=LOCAL"),
    ];
    if let Some(a6) = p.address6 {
        f.extend([
            format!("{c},priority=300,in_port={u},udp6,ipv6_dst={a6},tp_dst=6081,actions=LOCAL"),
            format!("{c},priority=300,in_port={u},udp6,ipv6_dst={a6},tp_dst=4789,actions=LOCAL"),
            // neighbour discovery for the shared address: both answer, both learn
            format!(
                "{c},priority=210,in_port={u},icmp6,icmp_type=136,dl_dst={mac},actions=LOCAL,output:{r}"
            ),
            format!(
                "{c},priority=210,in_port={u},icmp6,icmp_type=135,ipv6_dst={a6},actions=LOCAL,output:{r}"
            ),
            format!("{c},priority=200,in_port={u},ipv6,ipv6_dst={a6},actions=ct(zone={z},table=1)"),
            format!("{c},priority=205,in_port={r},icmp6,icmp_type=135,actions=output:{u}"),
            format!("{c},priority=205,in_port={r},icmp6,icmp_type=136,actions=output:{u}"),
            format!(
                "{c},priority=200,in_port={r},ipv6,dl_src={mac},\
                 actions=ct(commit,zone={z},exec(set_field:1->ct_mark)),output:{u}"
            ),
        ]);
    }
    for cidr in &p.pod_cidrs {
        let (proto, field) = match cidr {
            IpNet::V4(_) => ("ip", "nw_dst"),
            IpNet::V6(_) if p.address6.is_some() => ("ipv6", "ipv6_dst"),
            IpNet::V6(_) => continue,
        };
        f.push(format!(
            "{c},priority=150,in_port={u},vlan_tci=0x0000/0x1fff,{proto},{field}={},actions=output:{r}",
            cidr.trunc()
        ));
    }
    f
}

/// The bridge's OpenFlow connection: its management socket in ovs-vswitchd's run directory.
pub fn target(rundir: &std::path::Path, bridge: &str) -> String {
    format!("unix:{}", rundir.join(format!("{bridge}.mgmt")).display())
}

/// The number of our rules the bridge holds now.
pub fn installed(target: &str) -> Result<usize, GatewayFlowsError> {
    let out = Command::new("ovs-ofctl")
        .args([
            "dump-flows",
            "--no-stats",
            target,
            &format!("cookie={COOKIE:#x}/-1"),
        ])
        .output()
        .map_err(GatewayFlowsError::Spawn)?;
    if !out.status.success() {
        return Err(GatewayFlowsError::Ofctl {
            what: "dump-flows",
            target: target.into(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().into(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("cookie="))
        .count())
}

/// Replaces our rules by `flows` in one bundle (an empty list removes them).
pub fn replace(target: &str, flows: &[String]) -> Result<(), GatewayFlowsError> {
    let mut script = format!("delete cookie={COOKIE:#x}/-1\n");
    for f in flows {
        script.push_str("add ");
        script.push_str(f);
        script.push('\n');
    }
    let mut child = Command::new("ovs-ofctl")
        .args(["--bundle", "add-flows", target, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(GatewayFlowsError::Spawn)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(GatewayFlowsError::Spawn)?;
    }
    let out = child.wait_with_output().map_err(GatewayFlowsError::Spawn)?;
    if !out.status.success() {
        return Err(GatewayFlowsError::Ofctl {
            what: "add-flows",
            target: target.into(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().into(),
        });
    }
    Ok(())
}

/// ovs-vswitchd's run directory: that of its unixctl socket, else the default.
pub fn rundir(vswitchd_ctl: Option<&std::path::Path>) -> PathBuf {
    vswitchd_ctl
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/run/openvswitch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_split_the_shared_address() {
        let f = flows(&GatewayPorts {
            uplink: 1,
            patch: 7,
            mac: "0a:58:ac:10:00:01".into(),
            address: Ipv4Addr::new(172, 16, 0, 1),
            address6: Some("fd00:172:16::1".parse().unwrap()),
            pod_cidrs: vec![
                "10.16.0.0/16".parse().unwrap(),
                "fd00:16::/64".parse().unwrap(),
            ],
        });
        let all = f.join("\n");
        assert!(
            f.iter().all(|l| l.starts_with("cookie=0x7a6f766e6777,")),
            "{all}"
        );
        assert!(all.contains("in_port=1,udp,nw_dst=172.16.0.1,tp_dst=6081,actions=LOCAL"));
        assert!(all.contains("in_port=1,ip,nw_dst=172.16.0.1,actions=ct(zone=64000,table=1)"));
        assert!(all.contains(
            "in_port=7,ip,dl_src=0a:58:ac:10:00:01,actions=ct(commit,zone=64000,exec(set_field:1->ct_mark)),output:1"
        ));
        assert!(all.contains("table=1,priority=100,ct_state=+trk+est,ct_mark=1,actions=output:7"));
        assert!(all.contains("table=1,priority=0,actions=LOCAL"));
        assert!(all.contains("ip,nw_dst=10.16.0.0/16,actions=output:7"));
        // IPv6: the same split, neighbour discovery to both sides, never through conntrack
        assert!(
            all.contains("in_port=1,ipv6,ipv6_dst=fd00:172:16::1,actions=ct(zone=64000,table=1)")
        );
        assert!(all.contains(
            "in_port=7,ipv6,dl_src=0a:58:ac:10:00:01,actions=ct(commit,zone=64000,exec(set_field:1->ct_mark)),output:1"
        ));
        assert!(all.contains(
            "priority=210,in_port=1,icmp6,icmp_type=136,dl_dst=0a:58:ac:10:00:01,actions=LOCAL,output:7"
        ));
        assert!(all.contains("priority=205,in_port=7,icmp6,icmp_type=135,actions=output:1"));
        assert!(all.contains("ipv6,ipv6_dst=fd00:16::/64,actions=output:7"));
    }

    #[test]
    fn without_an_ipv6_address_there_are_no_ipv6_rules() {
        let f = flows(&GatewayPorts {
            uplink: 1,
            patch: 7,
            mac: "0a:58:ac:10:00:01".into(),
            address: Ipv4Addr::new(172, 16, 0, 1),
            address6: None,
            pod_cidrs: vec!["fd00:16::/64".parse().unwrap()],
        });
        assert!(
            f.iter()
                .all(|l| !l.contains("ipv6") && !l.contains("icmp6")),
            "{f:?}"
        );
    }

    #[test]
    fn rundir_follows_the_unixctl_socket() {
        assert_eq!(
            rundir(Some(std::path::Path::new("/x/run/ovs-vswitchd.ctl"))),
            PathBuf::from("/x/run")
        );
        assert_eq!(
            target(std::path::Path::new("/x/run"), "br-phy"),
            "unix:/x/run/br-phy.mgmt"
        );
    }
}
