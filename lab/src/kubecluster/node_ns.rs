//! A node's namespaces: its network namespace wired to the host's management and data
//! bridges, its persistent mount namespace ([`node-mounts.sh`](./node-mounts.sh)), its
//! cgroup root, and the sweep that stops everything running inside them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tracing::{info, warn};

use crate::error::{LabError, Result};
use crate::netns;
use crate::process::{run, run_args};
use crate::wait::wait_for;

use super::config::{
    DATA_IFACE, MGMT_IFACE, SERVICE_CIDR, SINGLE_NIC_GW4, SINGLE_NIC_GW6, node_data_ip,
    node_mgmt_ip, node_mgmt_ip6,
};

const NODE_MOUNTS: &str = include_str!("node-mounts.sh");
/// The cgroup v1 hierarchies' mount root.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Host-side names of node `i` of a cluster with `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeNames {
    pub index: usize,
    /// The node's network namespace (`/run/netns/<netns>`).
    pub netns: String,
    /// Host ends of the node's eth0 / eth1.
    pub mgmt_peer: String,
    pub data_peer: String,
    /// The cgroup (every v1 hierarchy) kubelet gets as `--cgroup-root`.
    pub cgroup: String,
    /// The file the node's mount namespace is bound to.
    pub mount_ns: PathBuf,
    /// What the node sees at /var/lib/kubelet, /etc/cni/net.d…: `<root>/var/lib/kubelet`…
    pub root: PathBuf,
}

impl NodeNames {
    pub fn new(prefix: &str, dir: &Path, i: usize) -> NodeNames {
        NodeNames {
            index: i,
            netns: format!("{prefix}n{i}"),
            mgmt_peer: format!("{prefix}n{i}m"),
            data_peer: format!("{prefix}n{i}d"),
            cgroup: format!("/{prefix}-node{i}"),
            mount_ns: dir.join("ns").join(format!("node{i}.mnt")),
            root: dir.join("nodes").join(format!("node{i}")).join("root"),
        }
    }
}

/// Host bridges of the management and data networks.
pub fn bridge_names(prefix: &str) -> (String, String) {
    (format!("{prefix}mgmt"), format!("{prefix}data"))
}

/// Creates the two bridges; the management one carries `host_cidr`.
pub fn add_bridges(prefix: &str, host_cidr: &str) -> Result<()> {
    let (mgmt, data) = bridge_names(prefix);
    for br in [&mgmt, &data] {
        run_args("ip", ["link", "add", br, "type", "bridge"])?;
        run_args("ip", ["link", "set", br, "up"])?;
    }
    run_args("ip", ["addr", "add", host_cidr, "dev", &mgmt])?;
    // What the host sends into a bridge (the API server's replies to kubelet) reaches a
    // node's veth with its TCP/UDP checksum left to offload (CHECKSUM_PARTIAL). A real NIC
    // receives complete checksums from the wire; a node whose NIC the chart puts on its
    // userspace br-phy (AF_XDP or AF_PACKET port) hands such a packet to its kernel as it
    // is, and the kernel drops it as corrupt. So the host completes its checksums itself.
    for br in [&mgmt, &data] {
        run_args("ethtool", ["-K", br, "tx", "off"])?;
    }
    Ok(())
}

/// Deletes host link `name` if it exists. A veth whose other end's netns is being
/// destroyed may vanish between the look and the delete: gone is what was asked.
fn delete_link(name: &str) -> Result<()> {
    let exists = || Path::new("/sys/class/net").join(name).exists();
    if !exists() {
        return Ok(());
    }
    match run_args("ip", ["link", "del", name]) {
        Err(_) if !exists() => Ok(()),
        r => r.map(|_| ()),
    }
}

/// Deletes the bridges if they exist.
pub fn delete_bridges(prefix: &str) -> Result<()> {
    let (mgmt, data) = bridge_names(prefix);
    for br in [mgmt, data] {
        delete_link(&br)?;
    }
    Ok(())
}

/// Deletes the host ends of the node's veths that still exist.
fn delete_host_peers(n: &NodeNames) -> Result<()> {
    for peer in [&n.mgmt_peer, &n.data_peer] {
        delete_link(peer)?;
    }
    Ok(())
}

/// The node's netns with eth0 (management) and eth1 (data) on the host bridges.
pub fn add_netns(prefix: &str, n: &NodeNames) -> Result<()> {
    let (mgmt, data) = bridge_names(prefix);
    // host ends named for this cluster's prefix left by an earlier cluster whose netns the
    // kernel had not freed yet (see `delete`)
    if [&n.mgmt_peer, &n.data_peer]
        .iter()
        .any(|p| Path::new("/sys/class/net").join(p).exists())
    {
        warn!(
            node = n.index,
            "host ends of an earlier cluster's veths left: deleted"
        );
        delete_host_peers(n)?;
    }
    netns::add(&n.netns)?;
    for (peer, iface, br, ip) in [
        (&n.mgmt_peer, MGMT_IFACE, &mgmt, node_mgmt_ip(n.index)),
        (&n.data_peer, DATA_IFACE, &data, node_data_ip(n.index)),
    ] {
        run_args(
            "ip",
            [
                "link", "add", peer, "type", "veth", "peer", "name", iface, "netns", &n.netns,
            ],
        )?;
        run_args("ip", ["link", "set", peer, "master", br, "up"])?;
        netns::addr_add(&n.netns, iface, &format!("{ip}/24"))?;
        netns::link_up(&n.netns, iface)?;
    }
    // Forwarding on, as kubeadm's preflight requires of a node (kube-proxy, a CNI plugin's
    // NodePorts and egress depend on it); a new netns starts with it off.
    for key in ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"] {
        run_args("ip", ["netns", "exec", &n.netns, "sysctl", "-qw", key])?;
    }
    // No default route (nothing of the lab may reach other addresses), but the Service CIDR
    // needs one: a host process's connect() to a ClusterIP is routed before kube-proxy's
    // DNAT in OUTPUT rewrites it (then re-routed to the endpoint). On-link on eth0 with a
    // high metric: an address kube-proxy does not translate dies unanswered on the bridge,
    // and the agent's own Service route (via its management port) takes precedence.
    run_args(
        "ip",
        [
            "-n",
            &n.netns,
            "route",
            "add",
            SERVICE_CIDR,
            "dev",
            MGMT_IFACE,
            "metric",
            "1000",
        ],
    )?;
    Ok(())
}

/// Makes the node single-NIC: its data NIC (eth1) deleted, and eth0 given what a real
/// node's only NIC holds besides its IPv4 address: a global IPv6 address and the default
/// routes, IPv4 and IPv6, through gateways nobody holds ([`SINGLE_NIC_GW4`]). Idempotent;
/// used at `cluster up --single-nic` and on a running node (the chart uninstalled).
pub fn make_single_nic(n: &NodeNames) -> Result<()> {
    let ns = n.netns.as_str();
    if run_args("ip", ["-n", ns, "link", "show", DATA_IFACE]).is_ok() {
        run_args("ip", ["-n", ns, "link", "del", DATA_IFACE])?;
    }
    let ip6 = format!("{}/64", node_mgmt_ip6(n.index));
    run_args(
        "ip",
        [
            "-n", ns, "-6", "addr", "replace", &ip6, "dev", MGMT_IFACE, "nodad",
        ],
    )?;
    for (family, gw) in [("-4", SINGLE_NIC_GW4), ("-6", SINGLE_NIC_GW6)] {
        run_args(
            "ip",
            [
                "-n", ns, family, "route", "replace", "default", "via", gw, "dev", MGMT_IFACE,
            ],
        )?;
    }
    info!(
        node = n.index,
        "single NIC: eth0 only, default routes through it"
    );
    Ok(())
}

/// Creates the node's persistent mount namespace and runs node-mounts.sh in it.
pub fn add_mount_ns(n: &NodeNames) -> Result<()> {
    let ns_dir = n
        .mount_ns
        .parent()
        .ok_or_else(|| LabError::Invalid(format!("{}: no parent", n.mount_ns.display())))?;
    std::fs::create_dir_all(ns_dir).map_err(|e| LabError::io("create dir", ns_dir, e))?;
    std::fs::create_dir_all(&n.root).map_err(|e| LabError::io("create dir", &n.root, e))?;
    std::fs::write(&n.mount_ns, b"").map_err(|e| LabError::io("create", &n.mount_ns, e))?;
    run_args(
        "unshare",
        [
            &format!("--mount={}", n.mount_ns.display()),
            "--propagation",
            "private",
            "true",
        ],
    )?;
    let root = n.root.to_string_lossy().into_owned();
    run(&mut nsenter(
        n,
        &["sh", "-c", NODE_MOUNTS, "node-mounts.sh", &root],
    ))?;
    Ok(())
}

/// A command run inside the node's netns and mount namespace.
pub fn nsenter(n: &NodeNames, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new("nsenter");
    c.arg(format!("--net=/run/netns/{}", n.netns))
        .arg(format!("--mount={}", n.mount_ns.display()))
        .arg("--")
        .args(args);
    c
}

/// Mounted cgroup v1 hierarchies (`/sys/fs/cgroup/<name>`).
fn hierarchies() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[2] == "cgroup" && f[1].starts_with(CGROUP_ROOT))
                .then(|| PathBuf::from(f[1]))
        })
        .collect()
}

/// Creates the node's cgroup in every hierarchy (kubelet refuses a `--cgroup-root` that does
/// not exist); a cpuset cgroup gets its parent's CPUs and memory nodes.
pub fn add_cgroup(n: &NodeNames) -> Result<()> {
    let rel = n.cgroup.trim_start_matches('/');
    for h in hierarchies() {
        let d = h.join(rel);
        std::fs::create_dir_all(&d).map_err(|e| LabError::io("create cgroup", &d, e))?;
        for f in ["cpuset.cpus", "cpuset.mems"] {
            let src = h.join(f);
            if src.exists() {
                let v = std::fs::read_to_string(&src).map_err(|e| LabError::io("read", &src, e))?;
                let dst = d.join(f);
                std::fs::write(&dst, v.trim()).map_err(|e| LabError::io("write", &dst, e))?;
            }
        }
    }
    Ok(())
}

/// Removes the node's cgroup tree, deepest first, in every hierarchy.
pub fn delete_cgroup(n: &NodeNames) -> Result<()> {
    let rel = n.cgroup.trim_start_matches('/');
    for h in hierarchies() {
        let top = h.join(rel);
        if top.is_dir() {
            rmdir_tree(&top)?;
        }
    }
    Ok(())
}

fn rmdir_tree(d: &Path) -> Result<()> {
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                rmdir_tree(&e.path())?;
            }
        }
    }
    std::fs::remove_dir(d).map_err(|e| LabError::io("remove cgroup", d, e))
}

/// The inode of a namespace file (`/run/netns/x`, a bound mount-ns file, `/proc/P/ns/net`).
fn ns_inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// Pids of every process inside the node: in its netns or mount namespace (kubelet,
/// containerd, shims, host-network containers), or in its cgroup tree (every container).
pub fn node_pids(n: &NodeNames) -> Vec<i32> {
    let net = ns_inode(&Path::new("/run/netns").join(&n.netns));
    let mnt = ns_inode(&n.mount_ns).filter(|_| is_bound(&n.mount_ns));
    let me = std::process::id() as i32;
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let p = PathBuf::from(format!("/proc/{pid}"));
            let in_ns = |kind: &str, want: Option<u64>| {
                want.is_some() && ns_inode(&p.join("ns").join(kind)) == want
            };
            let in_cgroup = std::fs::read_to_string(p.join("cgroup"))
                .map(|s| s.lines().any(|l| in_tree(l, &n.cgroup)))
                .unwrap_or(false);
            in_ns("net", net) || in_ns("mnt", mnt) || in_cgroup
        })
        .collect()
}

/// True if a `/proc/PID/cgroup` line (`ID:CONTROLLERS:PATH`) places the process in `root`
/// or below it.
fn in_tree(line: &str, root: &str) -> bool {
    line.splitn(3, ':').nth(2).is_some_and(|path| {
        path == root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
    })
}

/// True if `path` is a mount point (the bound mount-ns file).
fn is_bound(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let p = path.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(4) == Some(p.as_ref()))
}

/// SIGKILLs every process inside the node until none is left (containers, shims, kubelet,
/// containerd: all of them were started for this node).
pub fn kill_all(n: &NodeNames) -> Result<()> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    wait_for(
        &format!("every process of node{} to exit", n.index),
        Duration::from_secs(30),
        Duration::from_millis(100),
        |last| {
            let pids = node_pids(n);
            if pids.is_empty() {
                return Ok(Some(()));
            }
            for &pid in &pids {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            *last = Some(format!("{} left: {pids:?}", pids.len()));
            Ok(None)
        },
    )
}

/// Tears the node's namespaces down (after [`kill_all`]): unbinds the mount namespace (its
/// mounts go with it), deletes the netns (its veths go with it) and the cgroup tree.
pub fn delete(n: &NodeNames) -> Result<()> {
    if is_bound(&n.mount_ns) {
        nix::mount::umount2(&n.mount_ns, nix::mount::MntFlags::MNT_DETACH)
            .map_err(|e| LabError::io("unmount", &n.mount_ns, e.into()))?;
    }
    let _ = std::fs::remove_file(&n.mount_ns);
    netns::delete(&n.netns)?;
    // the kernel frees a deleted netns (and the veths' node ends) in the background, up to
    // a minute later; the host ends went with them only then, and a `cluster up` right
    // after failed on "File exists". Deleting a host end removes its pair at once.
    delete_host_peers(n)?;
    if let Err(e) = delete_cgroup(n) {
        warn!(error = %e, "cgroup of node{} not removed", n.index);
    }
    info!(node = n.index, "node namespaces deleted");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_lines_of_the_node_tree() {
        assert!(in_tree("4:memory:/zc-node1", "/zc-node1"));
        assert!(in_tree("4:memory:/zc-node1/kubepods/pod1", "/zc-node1"));
        assert!(!in_tree("4:memory:/zc-node10", "/zc-node1"));
        assert!(!in_tree("4:memory:/", "/zc-node1"));
    }

    #[test]
    fn names_fit_interface_limits() {
        let n = NodeNames::new("abcdef", Path::new("/tmp/c"), 9);
        assert!(n.mgmt_peer.len() <= 15 && n.data_peer.len() <= 15 && n.netns.len() <= 15);
        assert_eq!(n.cgroup, "/abcdef-node9");
        assert_eq!(n.root, Path::new("/tmp/c/nodes/node9/root"));
    }
}
