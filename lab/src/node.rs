//! A simulated node: a network namespace with its own ovsdb-server (Open_vSwitch),
//! ovs-vswitchd (userspace `netdev` datapath, or the DPDK build) and ovn-controller.
//!
//! Underlay: the node's veth `<prefix>u<i>` is a port of `br-phy` (netdev, hwaddr = the
//! veth MAC), which carries the tunnel endpoint IP `172.16.0.<i>/24` (and the IPv6 underlay
//! address `fd00:172:16::<i>/64`); the peer sits on the lab's underlay Linux bridge.
//! `br-int` is netdev with `fail_mode=secure`. `ovn-bridge-mappings=physnet:br-phy`: VLAN
//! Subnets reach the underlay through br-phy, tagged by OVS in userspace (the kernel has no
//! 802.1Q module).

use std::path::Path;
use std::time::Duration;

use tracing::info;

use crate::config::Encap;
use crate::ctl;
use crate::error::{LabError, Result};
use crate::names::Names;
use crate::netns;
use crate::process::{DaemonSpec, start_daemon};
use crate::state::{Layout, NodeState};
use crate::wait::wait_for;

/// Open_vSwitch schema.
pub const VSWITCH_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";
/// The plain (non-DPDK) ovs-vswitchd.
pub const VSWITCHD: &str = "/usr/lib/openvswitch-switch/ovs-vswitchd";
/// The DPDK build of ovs-vswitchd.
pub const VSWITCHD_DPDK: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";
/// The physical network name VLAN Subnets' localnet ports use (their `provider`'s default),
/// mapped to `br-phy` on every node (`ovn-bridge-mappings`).
pub const PHYSNET: &str = "physnet";
/// First three octets of the underlay /24 (lives only inside the lab's namespaces).
pub const UNDERLAY_NET: &str = "172.16.0";

/// The underlay's IPv6 /64 (prefix of [`underlay_v6`]).
pub const UNDERLAY_NET6: &str = "fd00:172:16::";

/// Node `i`'s IPv6 underlay address on br-phy: `fd00:172:16::<i>`.
pub fn underlay_v6(i: usize) -> String {
    format!("{UNDERLAY_NET6}{i}")
}

/// `other_config` for an OVS-DPDK node on this 2-core machine.
pub const DPDK_OTHER_CONFIG: &[&str] = &[
    "other_config:dpdk-init=true",
    "other_config:dpdk-extra=--no-pci",
    "other_config:dpdk-socket-mem=256",
    "other_config:dpdk-socket-limit=512",
    "other_config:dpdk-lcore-mask=0x1",
    "other_config:pmd-cpu-mask=0x2",
    "other_config:pmd-maxsleep=50",
];

/// Inputs for starting node `index`.
pub struct NodeSpec<'a> {
    pub index: usize,
    pub names: &'a Names,
    pub layout: &'a Layout,
    pub sb_remote: &'a str,
    pub encap: Encap,
    /// Run the DPDK build of ovs-vswitchd.
    pub dpdk: bool,
    /// The datapath the node agent manages (`None`: the lab sets DPDK up by hand when
    /// `dpdk`, the agent gets no datapath config).
    pub datapath: Option<String>,
}

/// The datapath config the lab gives a node agent (2-core machines: one PMD on CPU 1,
/// 256 MiB of DPDK memory; the PMD sleeps when idle by the agent's default, `pmdMaxSleep:
/// auto`).
pub fn datapath_config(datapath: &str) -> String {
    format!(
        "# written by the lab for this node's agent\ndatapath: {datapath}\nsocketMem: [256]\nsocketLimit: [512]\n"
    )
}

/// The record of node `spec.index` before anything is started.
pub fn initial_state(spec: &NodeSpec) -> NodeState {
    let dir = spec.layout.node(spec.index);
    NodeState {
        index: spec.index,
        system_id: spec.names.system_id(spec.index),
        netns: spec.names.node_netns(spec.index),
        db_remote: format!("unix:{}", dir.join("run/db.sock").display()),
        dir,
        encap_ip: format!("{UNDERLAY_NET}.{}", spec.index),
        dpdk: spec.dpdk,
        datapath: spec.datapath.clone(),
        daemons: Vec::new(),
    }
}

/// Environment for a node's daemons and tools: everything under the node dir.
pub fn node_env(dir: &Path) -> Vec<(String, String)> {
    let p = |s: &str| dir.join(s).to_string_lossy().into_owned();
    vec![
        ("OVS_RUNDIR".into(), p("run")),
        ("OVS_DBDIR".into(), p("db")),
        ("OVS_LOGDIR".into(), p("log")),
        ("OVS_SYSCONFDIR".into(), p("etc")),
        ("OVN_RUNDIR".into(), p("run")),
        ("OVN_DBDIR".into(), p("db")),
        ("OVN_LOGDIR".into(), p("log")),
        ("OVN_SYSCONFDIR".into(), p("etc")),
    ]
}

/// The ovs-vswitchd of node `i`: always the same run dir, pidfile and control socket, so a
/// restarted one is found by ovn-controller again (LAB.md: br-int.mgmt must not move).
pub fn vswitchd_spec(i: usize, dir: &Path, netns: &str, db: &str, dpdk: bool) -> DaemonSpec {
    let program = if dpdk { VSWITCHD_DPDK } else { VSWITCHD };
    let mut spec = DaemonSpec::new(
        &format!("node{i}/ovs-vswitchd"),
        program,
        dir.join("run/ovs-vswitchd.pid"),
        dir.join("log/ovs-vswitchd.log"),
    );
    spec.unixctl = Some(dir.join("run/ovs-vswitchd.ctl"));
    spec.args = vec![db.to_string()];
    spec.netns = Some(netns.to_string());
    spec.env = node_env(dir);
    spec
}

/// Starts node `spec.index` inside its (already created) netns, attaching it to the
/// underlay bridge. Started daemons are pushed to `state.daemons` as they start, so a
/// failure half-way leaves an accurate record for cleanup.
pub fn start(
    spec: &NodeSpec,
    underlay_netns: &str,
    underlay_bridge: &str,
    state: &mut NodeState,
) -> Result<()> {
    let i = spec.index;
    let ns = state.netns.clone();
    let dir = spec.layout.create_node_dirs(i)?;
    let env = node_env(&dir);
    let db = state.db_remote.clone();

    // underlay veth
    let uplink = spec.names.node_uplink(i);
    let ul_port = spec.names.underlay_port(i);
    netns::add_veth(&uplink, &ns, &ul_port, underlay_netns)?;
    netns::set_master_up(underlay_netns, &ul_port, underlay_bridge)?;
    netns::link_up(&ns, &uplink)?;
    // the other machines' work off the nodes' PMD cores (crate::wire_cpus)
    if let Some(mask) = crate::wire_cpus::far_side_mask_here() {
        netns::steer_rx(underlay_netns, &ul_port, &mask)?;
    }

    // local Open_vSwitch database
    let conf_db = dir.join("db/conf.db");
    if conf_db.exists() {
        std::fs::remove_file(&conf_db).map_err(|e| LabError::io("remove old db", &conf_db, e))?;
    }
    ctl::ovsdb_create(&conf_db, VSWITCH_SCHEMA)?;
    let mut spec_db = DaemonSpec::new(
        &format!("node{i}/ovsdb-server"),
        "ovsdb-server",
        dir.join("run/ovsdb-server.pid"),
        dir.join("log/ovsdb-server.log"),
    );
    spec_db.unixctl = Some(dir.join("run/ovsdb-server.ctl"));
    spec_db.args = vec![
        conf_db.to_string_lossy().into_owned(),
        format!("--remote=punix:{}", dir.join("run/db.sock").display()),
        "--remote=db:Open_vSwitch,Open_vSwitch,manager_options".into(),
    ];
    spec_db.netns = Some(ns.clone());
    spec_db.env = env.clone();
    state.daemons.push(start_daemon(&spec_db)?);

    let hostname = format!("external_ids:hostname={}", state.system_id);
    let system_id = format!("external_ids:system-id={}", state.system_id);
    ctl::vsctl(&db, &["--no-wait", "init"])?;
    let mut set = vec![
        "--no-wait",
        "set",
        "Open_vSwitch",
        ".",
        &system_id,
        &hostname,
    ];
    // with a datapath config the agent sets DPDK up; without, the lab does it by hand
    let preconfigured = spec.dpdk && spec.datapath.is_none();
    if preconfigured {
        set.extend_from_slice(DPDK_OTHER_CONFIG);
    }
    ctl::vsctl(&db, &set)?;
    if let Some(dp) = &spec.datapath {
        let f = dir.join("datapath.yaml");
        std::fs::write(&f, datapath_config(dp)).map_err(|e| LabError::io("write", &f, e))?;
    }

    // ovs-vswitchd
    state
        .daemons
        .push(start_daemon(&vswitchd_spec(i, &dir, &ns, &db, spec.dpdk))?);
    if preconfigured {
        wait_dpdk_initialized(&db)?;
    }

    // br-phy with the tunnel endpoint, br-int
    let mac = netns::link_mac(&ns, &uplink)?;
    let hwaddr = format!("other_config:hwaddr={mac}");
    ctl::vsctl(
        &db,
        &[
            "add-br",
            "br-phy",
            "--",
            "set",
            "bridge",
            "br-phy",
            "datapath_type=netdev",
            &hwaddr,
            "--",
            "add-port",
            "br-phy",
            &uplink,
            // marked as the chart's uplink container marks it: the agent may make it an
            // AF_XDP port (dataplane::host::uplink)
            "--",
            "set",
            "port",
            &uplink,
            "external_ids:zstack.io/owner=zstack-ovn-node",
        ],
    )?;
    netns::addr_add(&ns, "br-phy", &format!("{}/24", state.encap_ip))?;
    netns::addr_add_nodad(&ns, "br-phy", &format!("{}/64", underlay_v6(i)))?;
    netns::link_up(&ns, "br-phy")?;
    ctl::vsctl(
        &db,
        &[
            "add-br",
            "br-int",
            "--",
            "set",
            "bridge",
            "br-int",
            "datapath_type=netdev",
            "fail_mode=secure",
            "other_config:disable-in-band=true",
        ],
    )?;
    let ovn_remote = format!("external_ids:ovn-remote={}", spec.sb_remote);
    let encap_type = format!("external_ids:ovn-encap-type={}", spec.encap.as_str());
    let encap_ip = format!("external_ids:ovn-encap-ip={}", state.encap_ip);
    ctl::vsctl(
        &db,
        &[
            "set",
            "Open_vSwitch",
            ".",
            &ovn_remote,
            &encap_type,
            &encap_ip,
            "external_ids:ovn-bridge-datapath-type=netdev",
            // a VLAN Subnet's localnet port (network_name `physnet`) leaves through br-phy
            &format!("external_ids:ovn-bridge-mappings={PHYSNET}:br-phy"),
        ],
    )?;

    // ovn-controller (23.03 rejects --unixctl: its control socket lands in OVN_RUNDIR)
    let mut spec_oc = DaemonSpec::new(
        &format!("node{i}/ovn-controller"),
        "ovn-controller",
        dir.join("run/ovn-controller.pid"),
        dir.join("log/ovn-controller.log"),
    );
    spec_oc.args = vec![db.clone()];
    spec_oc.netns = Some(ns.clone());
    spec_oc.env = env;
    state.daemons.push(start_daemon(&spec_oc)?);
    info!(node = i, netns = %ns, dpdk = spec.dpdk, "node up");
    Ok(())
}

/// Waits until `Open_vSwitch . dpdk_initialized` is true.
pub fn wait_dpdk_initialized(db: &str) -> Result<()> {
    wait_for(
        "dpdk_initialized=true",
        Duration::from_secs(30),
        Duration::from_millis(20),
        |last| {
            let v = ctl::vsctl(db, &["get", "Open_vSwitch", ".", "dpdk_initialized"])?;
            *last = Some(v.trim().to_string());
            Ok((v.trim() == "true").then_some(()))
        },
    )
}

/// Names of the tunnel interfaces (`type=geneve|vxlan`) on a node.
pub fn tunnel_ports(db: &str, encap: Encap) -> Result<Vec<String>> {
    let ty = format!("type={}", encap.as_str());
    let out = ctl::vsctl(db, &["--bare", "--columns=name", "find", "Interface", &ty])?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}
