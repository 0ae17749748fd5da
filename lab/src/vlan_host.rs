//! A host on a VLAN of the lab's underlay, outside every node: what a VLAN (underlay)
//! Subnet's pods meet on the physical network.
//!
//! This kernel has no 802.1Q module, so the host tags in userspace, as the nodes do: in
//! netns `<prefix>w` ([`Names::vlan_host_netns`]) a bare ovs-vswitchd ([`OvsDaemons`], no
//! OVN) runs a netdev bridge `<prefix>wb` with
//! - a trunk port: the veth `<prefix>wt`, whose peer `<prefix>wu` sits on the underlay's
//!   Linux bridge beside the nodes' uplinks (that bridge does no VLAN filtering: tagged
//!   frames pass as they are);
//! - an access port `tag=<vlan>`: the internal port `<prefix>wh` (a tap device in the same
//!   netns) holding the host's address.
//!
//! The bridge does `NORMAL` switching: what the host sends leaves the trunk tagged, tagged
//! frames of the VLAN arriving on the trunk reach the host untagged. A server
//! ([`VlanHost::start_server`], the lab responder with `--echo-source`) answers with the
//! source address it saw.
//!
//! Not part of `zovn lab up`: tests (and benchmarks) start one on a lab that is up, with an
//! address of the VLAN Subnet's CIDR that its IPAM does not hand out (`excludeIPs`).
//! Dropping it stops the server and the daemons by pid and deletes the netns (and with it
//! both ends of the veth).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::error::{LabError, Result};
use crate::names::Names;
use crate::netns;
use crate::ovs_daemons::OvsDaemons;
use crate::pods::record::PortSpec;
use crate::pods::responder::{ResponderDaemon, spawn_daemon};
use crate::process::DaemonRecord;

/// What the host's server answers with (first word).
pub const SERVER_NAME: &str = "vlanhost";

/// Where and what the host is.
#[derive(Debug, Clone)]
pub struct VlanHostConfig<'a> {
    /// The lab's names (the host's netns and interfaces take its prefix).
    pub names: &'a Names,
    /// Its daemons' files (database, sockets, pidfiles, logs); created if missing.
    pub dir: &'a Path,
    /// The VLAN of its access port (1-4094).
    pub vlan: u16,
    /// Its address with prefix length, e.g. `10.88.0.250/24`.
    pub address: &'a str,
}

impl VlanHostConfig<'_> {
    /// The VLAN and the address, checked: (address, prefix length).
    fn check(&self) -> Result<(IpAddr, u8)> {
        if !(1..=4094).contains(&self.vlan) {
            return Err(LabError::Invalid(format!(
                "vlan {} is outside 1-4094",
                self.vlan
            )));
        }
        let net: ipnet::IpNet = self.address.parse().map_err(|_| {
            LabError::Invalid(format!(
                "address {:?} must be an address with a prefix length, e.g. 10.88.0.250/24",
                self.address
            ))
        })?;
        Ok((net.addr(), net.prefix_len()))
    }
}

/// The running host; torn down on drop.
#[derive(Debug)]
pub struct VlanHost {
    netns: String,
    address: IpAddr,
    vlan: u16,
    dir: PathBuf,
    /// None before the netns exists (a failed start) and after [`VlanHost::stop`].
    daemons: Option<OvsDaemons>,
    server: Option<DaemonRecord>,
}

impl VlanHost {
    /// Builds the host on the lab's underlay (`names`' underlay netns and bridge must
    /// exist: a lab that is up). A failure undoes what was built.
    pub fn start(cfg: &VlanHostConfig) -> Result<VlanHost> {
        let (address, prefix_len) = cfg.check()?;
        let n = cfg.names;
        let ns = n.vlan_host_netns();
        netns::add(&ns)?;
        // from here on, dropping `host` removes what exists
        let mut host = VlanHost {
            netns: ns.clone(),
            address,
            vlan: cfg.vlan,
            dir: cfg.dir.to_path_buf(),
            daemons: None,
            server: None,
        };
        let daemons = host.daemons.insert(OvsDaemons::start(cfg.dir, &ns)?);

        let (trunk, ul_port) = (n.vlan_host_trunk(), n.vlan_host_underlay_port());
        netns::add_veth(&trunk, &ns, &ul_port, &n.underlay_netns())?;
        netns::set_master_up(&n.underlay_netns(), &ul_port, &n.underlay_bridge())?;
        netns::link_up(&ns, &trunk)?;

        let (br, me) = (n.vlan_host_bridge(), n.vlan_host_if());
        let tag = format!("tag={}", cfg.vlan);
        // waits for ovs-vswitchd to apply it: the internal port exists afterwards
        daemons.vsctl(&[
            "add-br",
            &br,
            "--",
            "set",
            "bridge",
            &br,
            "datapath_type=netdev",
            "external_ids:zstack.io/owner=zstack-ovn-lab",
            "--",
            "add-port",
            &br,
            &trunk,
            "--",
            "add-port",
            &br,
            &me,
            &tag,
            "--",
            "set",
            "interface",
            &me,
            "type=internal",
        ])?;
        let cidr = format!("{address}/{prefix_len}");
        if address.is_ipv6() {
            netns::addr_add_nodad(&ns, &me, &cidr)?;
        } else {
            netns::addr_add(&ns, &me, &cidr)?;
        }
        netns::link_up(&ns, &me)?;
        netns::link_up(&ns, &br)?;
        Ok(host)
    }

    /// Its network namespace.
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// Its address on the VLAN.
    pub fn address(&self) -> IpAddr {
        self.address
    }

    /// The VLAN it is on.
    pub fn vlan(&self) -> u16 {
        self.vlan
    }

    /// ovs-vswitchd's unixctl socket (for `ovs-appctl`), while running.
    pub fn ctl(&self) -> Option<PathBuf> {
        self.daemons.as_ref().map(OvsDaemons::ctl)
    }

    /// Starts the server (`<zovn> lab responder --echo-source`, answering
    /// `vlanhost <source>:<port>`) on `ports` in the host's netns and waits until it has
    /// bound them. A server already running is stopped first.
    pub fn start_server(&mut self, zovn: &Path, ports: &[PortSpec]) -> Result<&DaemonRecord> {
        self.stop_server();
        let rec = spawn_daemon(
            zovn,
            &ResponderDaemon {
                daemon_name: "vlan host server".into(),
                reply_name: SERVER_NAME,
                echo_source: true,
                netns: &self.netns,
                ports,
                pidfile: self.dir.join("server.pid"),
                log_file: self.dir.join("server.log"),
            },
        )?;
        Ok(self.server.insert(rec))
    }

    fn stop_server(&mut self) {
        if let Some(rec) = self.server.take() {
            let _ = crate::process::stop_daemon(&rec);
        }
    }

    /// The pids of its processes running now (server, ovs-vswitchd, ovsdb-server).
    pub fn pids(&self) -> Vec<i32> {
        let server = self.server.iter().filter(|s| s.is_alive()).map(|s| s.pid);
        server
            .chain(self.daemons.iter().flat_map(OvsDaemons::pids))
            .collect()
    }

    /// Stops the server and the daemons (by pid) and deletes the netns. Safe to call twice.
    pub fn stop(&mut self) {
        self.stop_server();
        drop(self.daemons.take());
        let _ = netns::delete(&self.netns);
    }
}

impl Drop for VlanHost {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg<'a>(names: &'a Names, vlan: u16, address: &'a str) -> VlanHostConfig<'a> {
        VlanHostConfig {
            names,
            dir: Path::new("/nonexistent"),
            vlan,
            address,
        }
    }

    #[test]
    fn vlan_and_address_are_checked_before_anything_is_built() {
        let n = Names::new("lab").expect("prefix");
        for (vlan, addr, want) in [
            (0, "10.88.0.250/24", "vlan 0 is outside 1-4094"),
            (4095, "10.88.0.250/24", "vlan 4095 is outside 1-4094"),
            (
                100,
                "10.88.0.250",
                "must be an address with a prefix length",
            ),
            (
                100,
                "10.88.0.0.1/24",
                "must be an address with a prefix length",
            ),
        ] {
            let err = VlanHost::start(&cfg(&n, vlan, addr)).expect_err(addr);
            assert!(err.to_string().contains(want), "{vlan} {addr}: {err}");
        }
        let (a, len) = cfg(&n, 100, "10.88.0.250/24").check().expect("valid");
        assert_eq!((a.to_string(), len), ("10.88.0.250".to_string(), 24));
        let (a, len) = cfg(&n, 4094, "fd00:88::fa/64").check().expect("valid");
        assert_eq!((a.to_string(), len), ("fd00:88::fa".to_string(), 64));
    }
}
