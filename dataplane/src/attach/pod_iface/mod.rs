//! Pod interface plumbing: the veth pair between a pod netns and the node ("host") netns.
//!
//! The node agent's CNI ADD/DEL/CHECK call [`setup`], [`teardown`] and [`check`]. All
//! kernel work goes through rtnetlink (and one ethtool ioctl); nothing shells out.
//!
//! * [`setup`] creates the veth pair in the host netns with its peer created directly in
//!   the pod netns under its final name (`ip link add H type veth peer name eth0 netns P`
//!   in one request: no temporary name that could clash), then reconciles MAC, MTU (both
//!   ends), addresses, up state (both ends and the pod's `lo`), default routes via the
//!   gateways plus extra routes, and — when asked — turns tx checksum offload off on the
//!   pod end. It is idempotent: an existing, matching pair (peer in the pod netns, peer
//!   named `ifname`, right MAC) is reconfigured where it differs; an existing but wrong
//!   veth of that name is deleted and recreated; a non-veth of that name is a conflict.
//! * [`teardown`] deletes the host end (the kernel deletes the peer); a missing one is Ok.
//! * [`check`] verifies every piece and names the first mismatch.
//!
//! Every function blocks (each netns visit is a short-lived thread, see [`netns`]); from
//! async code call them through `tokio::task::spawn_blocking`.

mod ethtool;
pub mod netns;
mod nl;
mod pair;
pub mod rps;

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use netlink_packet_route::address::{AddressAttribute, AddressFlags};
use netlink_packet_route::link::{InfoData, InfoVeth};
use netlink_packet_route::route::{RouteProtocol, RouteScope};
use rtnetlink::{Handle, LinkUnspec, LinkVeth, RouteMessageBuilder};

pub use ethtool::{set_tx_checksum, tx_checksum_enabled};

/// Boxed source error of a failed step.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Linux `IFNAMSIZ - 1`.
pub const MAX_IFNAME_LEN: usize = api::ifname::MAX_LEN;

/// What the pod's interface should look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInterfaceSpec {
    /// The pod's netns: `/var/run/netns/X` or `/proc/PID/ns/net`.
    pub netns_path: PathBuf,
    /// Where the host end lives; `None` = the calling thread's netns.
    pub host_netns_path: Option<PathBuf>,
    /// Interface name inside the pod (`eth0`).
    pub ifname: String,
    /// Host end name, ≤ 15 chars; see [`host_ifname_for`].
    pub host_ifname: String,
    /// MAC of the pod end.
    pub mac: [u8; 6],
    /// Addresses (with prefix) of the pod end.
    pub addresses: Vec<IpNet>,
    /// One default route per gateway (`0.0.0.0/0` or `::/0` by family).
    pub gateways: Vec<IpAddr>,
    /// Extra routes: destination, optional next hop (`None`: on-link).
    pub routes: Vec<(IpNet, Option<IpAddr>)>,
    /// MTU of both ends.
    pub mtu: u32,
    /// Turn tx checksum offload off on the pod end (needed behind the OVS userspace
    /// datapath). `false` leaves the kernel default alone (and [`check`] ignores it).
    pub tx_checksum_offload_off: bool,
    /// Rx/tx queues of the veth (an AF_XDP port polls one per queue). 1 = default.
    pub queues: u32,
    /// RPS CPU mask (sysfs bitmap, e.g. `00000001`) for every rx queue of the pod end:
    /// where the pod's receive processing runs (see [`rps`]). `None` leaves it alone.
    pub rps_cpus: Option<String>,
}

/// The result of [`setup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInterface {
    pub host_ifname: String,
    pub host_ifindex: u32,
    pub pod_ifname: String,
    /// ifindex inside the pod netns.
    pub pod_ifindex: u32,
    pub mac: [u8; 6],
    /// `true` if the pair was (re)created by this call, `false` if an existing one was
    /// reconciled.
    pub created: bool,
}

/// Errors of [`setup`]/[`teardown`]; each names the step and the interface.
#[derive(Debug, thiserror::Error)]
pub enum PlumbError {
    #[error("{step}: {source}")]
    Step {
        step: String,
        #[source]
        source: BoxError,
    },
    #[error("invalid pod interface spec: {0}")]
    InvalidSpec(String),
    #[error("interface {ifname}: {detail}")]
    Conflict { ifname: String, detail: String },
    #[error("worker thread in {netns} panicked")]
    ThreadPanicked { netns: String },
}

/// Attach a step name to an error.
pub(crate) trait StepExt<T> {
    fn step(self, step: impl FnOnce() -> String) -> Result<T, PlumbError>;
}

impl<T, E: Into<BoxError>> StepExt<T> for Result<T, E> {
    fn step(self, step: impl FnOnce() -> String) -> Result<T, PlumbError> {
        self.map_err(|e| PlumbError::Step {
            step: step(),
            source: e.into(),
        })
    }
}

/// The first difference [`check`] found (or why it could not look).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("interface {iface} not found in {netns}")]
    Missing { iface: String, netns: String },
    #[error("interface {iface}: {what}: expected {expected}, found {found}")]
    Mismatch {
        iface: String,
        what: &'static str,
        expected: String,
        found: String,
    },
    #[error(transparent)]
    Query(#[from] PlumbError),
}

/// Host-side interface name for a container: the first 11 hex chars of the container id
/// plus `_h` (13 chars). An id that does not start with 11 hex digits is hashed
/// (FNV-1a 64) instead, so the result is always deterministic, ≤ 15 chars and valid.
pub fn host_ifname_for(container_id: &str) -> String {
    let id = container_id.trim().to_ascii_lowercase();
    let prefix: String = id.chars().take(11).collect();
    let stem = if prefix.len() == 11 && prefix.chars().all(|c| c.is_ascii_hexdigit()) {
        prefix
    } else {
        api::hash::hex(container_id.as_bytes())[..11].to_string()
    };
    format!("{stem}_h")
}

use api::mac::format_bytes as fmt_mac;

fn valid_ifname(n: &str) -> bool {
    api::ifname::is_valid(n)
}

fn default_net(gw: &IpAddr) -> IpNet {
    match gw {
        IpAddr::V4(_) => IpNet::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        IpAddr::V6(_) => IpNet::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    }
    .unwrap_or_default()
}

fn fmt_route(dest: &IpNet, via: Option<IpAddr>, dev: &str) -> String {
    let d = if dest.prefix_len() == 0 {
        "default".to_string()
    } else {
        dest.to_string()
    };
    match via {
        Some(v) => format!("{d} via {v} dev {dev}"),
        None => format!("{d} dev {dev}"),
    }
}

impl PodInterfaceSpec {
    /// Rejects specs the kernel would reject half-way through.
    pub fn validate(&self) -> Result<(), PlumbError> {
        let bad = |m: String| Err(PlumbError::InvalidSpec(m));
        if !valid_ifname(&self.ifname) {
            return bad(format!("pod ifname {:?}", self.ifname));
        }
        if !valid_ifname(&self.host_ifname) {
            return bad(format!(
                "host ifname {:?} (1..=15 chars, no '/', ':' or spaces)",
                self.host_ifname
            ));
        }
        if self.mac[0] & 1 != 0 || self.mac == [0; 6] {
            return bad(format!(
                "MAC {} is not a unicast address",
                fmt_mac(&self.mac)
            ));
        }
        if !(68..=65535).contains(&self.mtu) {
            return bad(format!("MTU {} out of range 68..=65535", self.mtu));
        }
        for gw in &self.gateways {
            if !self
                .addresses
                .iter()
                .any(|a| a.addr().is_ipv4() == gw.is_ipv4())
            {
                return bad(format!("gateway {gw} has no address of its family"));
            }
        }
        for (dest, via) in &self.routes {
            if let Some(v) = via
                && v.is_ipv4() != dest.addr().is_ipv4()
            {
                return bad(format!("route {dest} via {v}: mixed address families"));
            }
        }
        Ok(())
    }

    /// Routes the pod should have: a default route per gateway, then the extra routes.
    pub fn desired_routes(&self) -> Vec<(IpNet, Option<IpAddr>)> {
        let mut out: Vec<(IpNet, Option<IpAddr>)> = self
            .gateways
            .iter()
            .map(|g| (default_net(g), Some(*g)))
            .collect();
        for (d, v) in &self.routes {
            let r = (d.trunc(), *v);
            if !out.contains(&r) {
                out.push(r);
            }
        }
        out
    }

    fn pod_netns(&self) -> String {
        format!("pod netns {}", self.netns_path.display())
    }

    fn host_netns(&self) -> String {
        self.host_netns_path.as_ref().map_or_else(
            || "host netns".to_string(),
            |p| format!("host netns {}", p.display()),
        )
    }
}

fn open_netns(p: &Path) -> Result<OwnedFd, PlumbError> {
    File::open(p)
        .map(OwnedFd::from)
        .step(|| format!("open netns {}", p.display()))
}

/// Creates (or reconciles) the pod interface described by `spec`. See the module doc.
pub fn setup(spec: &PodInterfaceSpec) -> Result<PodInterface, PlumbError> {
    spec.validate()?;
    let host_ns = spec.host_netns_path.as_deref();
    let pod_fd = open_netns(&spec.netns_path)?;
    let pod_fd2 = pod_fd.try_clone().step(|| "dup pod netns fd".to_string())?;
    let host_ifname = spec.host_ifname.clone();
    tracing::debug!(host = %spec.host_ifname, pod = %spec.ifname, netns = %spec.netns_path.display(), "pod interface setup");

    // 1. what is there now
    let (existing, pod_nsid) = {
        let host_ifname = host_ifname.clone();
        netns::run_in_netns(host_ns, move |h| async move {
            let l = nl::link_by_name(&h, &host_ifname)
                .await
                .step(|| format!("look up {host_ifname}"))?;
            let nsid = nl::nsid_of_fd(&h, pod_fd2.as_raw_fd())
                .await
                .step(|| "get nsid of the pod netns".to_string())?;
            Ok((l, nsid))
        })?
    };

    // 2. reuse, or delete the stale pair
    let mut create = true;
    if let Some(l) = &existing {
        if !l.is_veth() {
            return Err(PlumbError::Conflict {
                ifname: host_ifname,
                detail: format!(
                    "exists in the {} and is not a veth ({:?})",
                    spec.host_netns(),
                    l.kind
                ),
            });
        }
        match pair::matches(spec, l, pod_nsid)? {
            Ok(()) => {
                tracing::info!(host = %host_ifname, "veth pair exists and matches: reconciling");
                create = false;
            }
            Err(reason) => {
                tracing::warn!(host = %host_ifname, %reason, "stale veth pair: recreating");
                let idx = l.index;
                let name = host_ifname.clone();
                netns::run_in_netns(host_ns, move |h| async move {
                    match h.link().del(idx).execute().await {
                        Err(e) if nl::errno(&e) != Some(nix::libc::ENODEV) => {
                            Err(e).step(|| format!("delete stale veth {name}"))
                        }
                        _ => Ok(()),
                    }
                })?;
            }
        }
    }

    // 3. create and reconcile the host end
    let (host_ifindex, pod_ifindex) =
        {
            let host_ifname = host_ifname.clone();
            let ifname = spec.ifname.clone();
            let (mtu, mac, queues) = (spec.mtu, spec.mac, spec.queues);
            let where_ = spec.pod_netns();
            netns::run_in_netns(host_ns, move |h| async move {
                if create {
                    let mut peer = LinkUnspec::new_with_name(&ifname)
                        .setns_by_fd(pod_fd.as_raw_fd())
                        .mtu(mtu)
                        .address(mac.to_vec())
                        .build();
                    nl::set_queues(&mut peer, queues);
                    let mut msg = LinkVeth::new(&host_ifname, &ifname)
                        .mtu(mtu)
                        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
                        .build();
                    nl::set_queues(&mut msg, queues);
                    h.link().add(msg).execute().await.step(|| {
                        format!("create veth pair {host_ifname} / {ifname} (in {where_})")
                    })?;
                    tracing::info!(host = %host_ifname, pod = %ifname, "veth pair created");
                }
                let l = nl::link_by_name(&h, &host_ifname)
                    .await
                    .step(|| format!("look up {host_ifname}"))?
                    .ok_or_else(|| PlumbError::Conflict {
                        ifname: host_ifname.clone(),
                        detail: "vanished right after creation".into(),
                    })?;
                let peer = l.peer_index.ok_or_else(|| PlumbError::Conflict {
                    ifname: host_ifname.clone(),
                    detail: "veth without a peer ifindex".into(),
                })?;
                if l.mtu != mtu {
                    h.link()
                        .set(LinkUnspec::new_with_index(l.index).mtu(mtu).build())
                        .execute()
                        .await
                        .step(|| format!("set MTU {mtu} on {host_ifname}"))?;
                }
                if !l.up {
                    h.link()
                        .set(LinkUnspec::new_with_index(l.index).up().build())
                        .execute()
                        .await
                        .step(|| format!("bring {host_ifname} up"))?;
                }
                Ok((l.index, peer))
            })?
        };

    // 4. reconcile the pod end
    let s = spec.clone();
    netns::run_in_netns(Some(&spec.netns_path), move |h| async move {
        reconcile_pod(&h, &s, host_ifindex, pod_ifindex).await
    })?;
    if let Some(mask) = &spec.rps_cpus {
        // a tuning: the pod works without it, so a failure is logged, not returned
        match rps::set_rps(&spec.netns_path, &spec.ifname, mask) {
            Ok(n) => {
                tracing::debug!(pod = %spec.ifname, %mask, queues_changed = n, "receive steering set")
            }
            Err(e) => {
                tracing::warn!(pod = %spec.ifname, %mask, error = %e, "receive steering (RPS) not set")
            }
        }
    }
    tracing::info!(host = %host_ifname, host_ifindex, pod = %spec.ifname, pod_ifindex, created = create, "pod interface ready");
    Ok(PodInterface {
        host_ifname,
        host_ifindex,
        pod_ifname: spec.ifname.clone(),
        pod_ifindex,
        mac: spec.mac,
        created: create,
    })
}

async fn set_link(
    h: &Handle,
    msg: netlink_packet_route::link::LinkMessage,
    step: impl FnOnce() -> String,
) -> Result<(), PlumbError> {
    h.link().set(msg).execute().await.step(step)
}

async fn reconcile_pod(
    h: &Handle,
    spec: &PodInterfaceSpec,
    host_ifindex: u32,
    pod_ifindex: u32,
) -> Result<(), PlumbError> {
    let ifname = &spec.ifname;
    let l = nl::link_by_name(h, ifname)
        .await
        .step(|| format!("look up {ifname} in pod netns"))?
        .ok_or_else(|| PlumbError::Conflict {
            ifname: ifname.clone(),
            detail: format!("missing in the {}", spec.pod_netns()),
        })?;
    if l.index != pod_ifindex || l.peer_index != Some(host_ifindex) {
        return Err(PlumbError::Conflict {
            ifname: ifname.clone(),
            detail: format!(
                "ifindex {} in the pod is not the peer of {} (expected ifindex {pod_ifindex})",
                l.index, spec.host_ifname
            ),
        });
    }
    let idx = l.index;
    if l.mac != spec.mac {
        let mac = fmt_mac(&spec.mac);
        set_link(
            h,
            LinkUnspec::new_with_index(idx)
                .address(spec.mac.to_vec())
                .build(),
            || format!("set MAC {mac} on {ifname}"),
        )
        .await?;
    }
    if l.mtu != spec.mtu {
        set_link(
            h,
            LinkUnspec::new_with_index(idx).mtu(spec.mtu).build(),
            || format!("set MTU {} on {ifname}", spec.mtu),
        )
        .await?;
    }

    // addresses: add missing, drop stale static ones (never link-local or dynamic)
    let current = nl::addresses(h, idx)
        .await
        .step(|| format!("list addresses of {ifname}"))?;
    for a in &spec.addresses {
        if current.iter().any(|c| c.net == *a) {
            continue;
        }
        let mut req = h.address().add(idx, a.addr(), a.prefix_len());
        if a.addr().is_ipv6() {
            // no DAD: the address is usable (and routes via a v6 gateway addable) at once
            req.message_mut()
                .attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
        }
        req.execute()
            .await
            .step(|| format!("add address {a} to {ifname}"))?;
    }
    for c in current {
        let link_local = matches!(c.net, IpNet::V6(n) if n.addr().is_unicast_link_local());
        if c.permanent && !link_local && !spec.addresses.contains(&c.net) {
            let net = c.net;
            h.address()
                .del(c.msg)
                .execute()
                .await
                .step(|| format!("remove stale address {net} from {ifname}"))?;
        }
    }

    if !l.up {
        set_link(h, LinkUnspec::new_with_index(idx).up().build(), || {
            format!("bring {ifname} up")
        })
        .await?;
    }
    match nl::link_by_name(h, "lo")
        .await
        .step(|| "look up lo in pod netns".to_string())?
    {
        Some(lo) if !lo.up => {
            set_link(h, LinkUnspec::new_with_index(lo.index).up().build(), || {
                "bring lo up".to_string()
            })
            .await?;
        }
        _ => {}
    }

    // routes
    let desired = spec.desired_routes();
    for v6 in [false, true] {
        let wanted: Vec<_> = desired
            .iter()
            .filter(|(d, _)| d.addr().is_ipv6() == v6)
            .collect();
        let present = nl::main_routes(h, v6)
            .await
            .step(|| format!("list IPv{} routes", if v6 { 6 } else { 4 }))?;
        for (dest, via) in &wanted {
            if present
                .iter()
                .any(|r| r.dest == *dest && r.gateway == *via && r.oif == Some(idx))
            {
                continue;
            }
            let route = fmt_route(dest, *via, ifname);
            let mut b = RouteMessageBuilder::<IpAddr>::new()
                .destination_prefix(dest.addr(), dest.prefix_len())
                .step(|| format!("build route {route}"))?
                .output_interface(idx);
            b = match via {
                Some(gw) => b.gateway(*gw).step(|| format!("build route {route}"))?,
                None => b.scope(RouteScope::Link),
            };
            h.route()
                .add(b.build())
                .replace()
                .execute()
                .await
                .step(|| format!("add route {route}"))?;
        }
        for r in present {
            let ours = matches!(r.protocol, RouteProtocol::Static | RouteProtocol::Boot);
            if ours
                && r.oif == Some(idx)
                && !wanted.iter().any(|(d, v)| *d == r.dest && *v == r.gateway)
            {
                let route = fmt_route(&r.dest, r.gateway, ifname);
                h.route()
                    .del(r.msg)
                    .execute()
                    .await
                    .step(|| format!("remove stale route {route}"))?;
            }
        }
    }

    if spec.tx_checksum_offload_off
        && ethtool::tx_checksum_enabled(ifname)
            .step(|| format!("read tx checksumming of {ifname}"))?
    {
        ethtool::set_tx_checksum(ifname, false)
            .step(|| format!("turn tx checksum offload off on {ifname}"))?;
        tracing::debug!(%ifname, "tx checksum offload off");
    }
    Ok(())
}

/// Deletes the host end `host_ifname` (in `host_netns`, `None` = current); the kernel
/// removes the peer with it. Returns whether something was deleted; a missing interface is
/// Ok. Refuses to delete an interface that is not a veth.
pub fn teardown(host_netns: Option<&Path>, host_ifname: &str) -> Result<bool, PlumbError> {
    let name = host_ifname.to_string();
    let deleted = netns::run_in_netns(host_netns, move |h| async move {
        let Some(l) = nl::link_by_name(&h, &name)
            .await
            .step(|| format!("look up {name}"))?
        else {
            return Ok(false);
        };
        if !l.is_veth() {
            return Err(PlumbError::Conflict {
                ifname: name,
                detail: format!("is not a veth ({:?}): not deleting it", l.kind),
            });
        }
        match h.link().del(l.index).execute().await {
            Ok(()) => Ok(true),
            Err(e) if nl::errno(&e) == Some(nix::libc::ENODEV) => Ok(false),
            Err(e) => Err(e).step(|| format!("delete veth {name}")),
        }
    })?;
    tracing::info!(host = %host_ifname, deleted, "pod interface teardown");
    Ok(deleted)
}

fn mismatch(
    iface: &str,
    what: &'static str,
    expected: impl ToString,
    found: impl ToString,
) -> CheckError {
    CheckError::Mismatch {
        iface: iface.to_string(),
        what,
        expected: expected.to_string(),
        found: found.to_string(),
    }
}

/// Verifies the pod interface against `spec`: host end (exists, veth, peer in the pod
/// netns, MTU, up), pod end (exists, is the peer, MAC, MTU, up, `lo` up, addresses — none
/// missing, no stale static one — routes, tx checksum offload). Returns the first mismatch.
pub fn check(spec: &PodInterfaceSpec) -> Result<(), CheckError> {
    spec.validate()?;
    let pod_fd = open_netns(&spec.netns_path)?;
    let host_ns = spec.host_netns_path.as_deref();
    let (name, mtu, where_) = (spec.host_ifname.clone(), spec.mtu, spec.host_netns());
    let (host_ifindex, peer) = netns::run_in_netns(host_ns, move |h| async move {
        let r: Result<(u32, u32), CheckError> = async {
            let Some(l) = nl::link_by_name(&h, &name)
                .await
                .step(|| format!("look up {name}"))?
            else {
                return Err(CheckError::Missing {
                    iface: name.clone(),
                    netns: where_,
                });
            };
            if !l.is_veth() {
                return Err(mismatch(&name, "kind", "veth", format!("{:?}", l.kind)));
            }
            let nsid = nl::nsid_of_fd(&h, pod_fd.as_raw_fd())
                .await
                .step(|| "get nsid of the pod netns".to_string())?;
            let peer = match (l.peer_index, l.link_netnsid) {
                (Some(p), Some(id)) if Some(id) == nsid => p,
                (_, id) => {
                    return Err(mismatch(
                        &name,
                        "peer netns id",
                        format!("{nsid:?} (the pod netns)"),
                        format!("{id:?}"),
                    ));
                }
            };
            if l.mtu != mtu {
                return Err(mismatch(&name, "MTU", mtu, l.mtu));
            }
            if !l.up {
                return Err(mismatch(&name, "admin state", "up", "down"));
            }
            Ok((l.index, peer))
        }
        .await;
        Ok(r)
    })??;
    let s = spec.clone();
    netns::run_in_netns(Some(&spec.netns_path), move |h| async move {
        Ok(check_pod(&h, &s, host_ifindex, peer).await)
    })?
}

async fn check_pod(
    h: &Handle,
    spec: &PodInterfaceSpec,
    host_ifindex: u32,
    peer: u32,
) -> Result<(), CheckError> {
    let ifname = spec.ifname.as_str();
    let Some(l) = nl::link_by_name(h, ifname)
        .await
        .step(|| format!("look up {ifname}"))?
    else {
        return Err(CheckError::Missing {
            iface: ifname.to_string(),
            netns: spec.pod_netns(),
        });
    };
    if l.index != peer || l.peer_index != Some(host_ifindex) {
        return Err(mismatch(
            ifname,
            "veth peer",
            format!("ifindex {peer}, peer of {}", spec.host_ifname),
            format!("ifindex {} peer {:?}", l.index, l.peer_index),
        ));
    }
    if l.mac != spec.mac {
        return Err(mismatch(ifname, "MAC", fmt_mac(&spec.mac), fmt_mac(&l.mac)));
    }
    if l.mtu != spec.mtu {
        return Err(mismatch(ifname, "MTU", spec.mtu, l.mtu));
    }
    if !l.up {
        return Err(mismatch(ifname, "admin state", "up", "down"));
    }
    match nl::link_by_name(h, "lo")
        .await
        .step(|| "look up lo".to_string())?
    {
        Some(lo) if lo.up => {}
        _ => return Err(mismatch("lo", "admin state", "up", "down or missing")),
    }
    let addrs = nl::addresses(h, l.index)
        .await
        .step(|| format!("list addresses of {ifname}"))?;
    let found = || {
        let v: Vec<String> = addrs.iter().map(|a| a.net.to_string()).collect();
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    for a in &spec.addresses {
        if !addrs.iter().any(|c| c.net == *a) {
            return Err(mismatch(ifname, "address", a, found()));
        }
    }
    for c in &addrs {
        let link_local = matches!(c.net, IpNet::V6(n) if n.addr().is_unicast_link_local());
        if c.permanent && !link_local && !spec.addresses.contains(&c.net) {
            return Err(mismatch(ifname, "unexpected address", "none", c.net));
        }
    }
    let desired = spec.desired_routes();
    for v6 in [false, true] {
        let present = nl::main_routes(h, v6)
            .await
            .step(|| format!("list IPv{} routes", if v6 { 6 } else { 4 }))?;
        for (dest, via) in desired.iter().filter(|(d, _)| d.addr().is_ipv6() == v6) {
            if !present
                .iter()
                .any(|r| r.dest == *dest && r.gateway == *via && r.oif == Some(l.index))
            {
                return Err(mismatch(
                    ifname,
                    "route",
                    fmt_route(dest, *via, ifname),
                    "absent",
                ));
            }
        }
    }
    if spec.tx_checksum_offload_off
        && ethtool::tx_checksum_enabled(ifname)
            .step(|| format!("read tx checksumming of {ifname}"))?
    {
        return Err(mismatch(ifname, "tx checksum offload", "off", "on"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ifname_is_deterministic_and_short() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(host_ifname_for(id), "0123456789a_h");
        assert_eq!(host_ifname_for(&id.to_uppercase()), "0123456789a_h");
        let odd = host_ifname_for("my-container/with weird chars");
        assert_eq!(odd, host_ifname_for("my-container/with weird chars"));
        assert_ne!(odd, host_ifname_for("my-container/with weird chars2"));
        for n in [host_ifname_for(id), odd, host_ifname_for("")] {
            assert!(valid_ifname(&n), "{n}");
            assert_eq!(n.len(), 13);
        }
    }

    fn spec() -> PodInterfaceSpec {
        PodInterfaceSpec {
            netns_path: "/var/run/netns/x".into(),
            host_netns_path: None,
            ifname: "eth0".into(),
            host_ifname: "0123456789a_h".into(),
            mac: [0x0a, 0x58, 10, 0, 0, 2],
            addresses: vec!["10.0.0.2/24".parse().unwrap()],
            gateways: vec!["10.0.0.1".parse().unwrap()],
            routes: vec![("10.96.0.0/12".parse().unwrap(), None)],
            mtu: 1400,
            tx_checksum_offload_off: true,
            queues: 1,
            rps_cpus: None,
        }
    }

    #[test]
    fn validate_rejects_bad_specs() {
        assert!(spec().validate().is_ok());
        let mut s = spec();
        s.host_ifname = "0123456789abcdef".into();
        assert!(s.validate().is_err());
        let mut s = spec();
        s.mac[0] = 1;
        assert!(s.validate().is_err());
        let mut s = spec();
        s.gateways = vec!["fd00::1".parse().unwrap()];
        assert!(s.validate().is_err());
        let mut s = spec();
        s.routes = vec![(
            "10.1.0.0/16".parse().unwrap(),
            Some("fd00::1".parse().unwrap()),
        )];
        assert!(s.validate().is_err());
        let mut s = spec();
        s.mtu = 10;
        assert!(s.validate().is_err());
    }

    #[test]
    fn desired_routes_default_first_and_truncated() {
        let mut s = spec();
        s.routes.push((
            "10.97.1.5/16".parse().unwrap(),
            Some("10.0.0.1".parse().unwrap()),
        ));
        let r = s.desired_routes();
        assert_eq!(
            r[0],
            (
                "0.0.0.0/0".parse().unwrap(),
                Some("10.0.0.1".parse().unwrap())
            )
        );
        assert_eq!(r[2].0, "10.97.0.0/16".parse::<IpNet>().unwrap());
        assert_eq!(r.len(), 3);
    }
}
