//! Thin rtnetlink helpers: decoded views of links, addresses and routes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::RawFd;

use futures::TryStreamExt;
use futures::stream::StreamExt;
use ipnet::IpNet;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressHeaderFlags};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::nsid::{NsidAttribute, NsidMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol,
};
use rtnetlink::packet_core::{NLM_F_REQUEST, NetlinkMessage, NetlinkPayload};
use rtnetlink::{Handle, RouteMessageBuilder};

/// Errno carried by a netlink error reply, if any (positive, e.g. `libc::ENODEV`).
pub(crate) fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.code.map(|c| -c.get()),
        _ => None,
    }
}

/// The parts of a link this module cares about.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub index: u32,
    pub name: String,
    pub mac: Vec<u8>,
    pub mtu: u32,
    pub up: bool,
    pub kind: Option<InfoKind>,
    /// `IFLA_LINK`: for a veth, the peer's ifindex (in the peer's netns).
    pub peer_index: Option<u32>,
    /// `IFLA_LINK_NETNSID`: the nsid (as seen from this netns) of the peer's netns.
    pub link_netnsid: Option<i32>,
}

impl Link {
    fn from_msg(m: LinkMessage) -> Self {
        let mut l = Link {
            index: m.header.index,
            name: String::new(),
            mac: Vec::new(),
            mtu: 0,
            up: m.header.flags.contains(LinkFlags::Up),
            kind: None,
            peer_index: None,
            link_netnsid: None,
        };
        for a in m.attributes {
            match a {
                LinkAttribute::IfName(n) => l.name = n,
                LinkAttribute::Address(a) => l.mac = a,
                LinkAttribute::Mtu(v) => l.mtu = v,
                LinkAttribute::Link(i) => l.peer_index = Some(i),
                LinkAttribute::LinkNetNsId(i) => l.link_netnsid = Some(i),
                LinkAttribute::LinkInfo(infos) => {
                    for i in infos {
                        if let LinkInfo::Kind(k) = i {
                            l.kind = Some(k);
                        }
                    }
                }
                _ => {}
            }
        }
        l
    }

    pub fn is_veth(&self) -> bool {
        self.kind == Some(InfoKind::Veth)
    }
}

async fn first_link(req: rtnetlink::LinkGetRequest) -> Result<Option<Link>, rtnetlink::Error> {
    let mut s = req.execute();
    match s.try_next().await {
        Ok(Some(m)) => Ok(Some(Link::from_msg(m))),
        Ok(None) => Ok(None),
        Err(e) if errno(&e) == Some(nix::libc::ENODEV) => Ok(None),
        Err(e) => Err(e),
    }
}

pub(crate) async fn link_by_name(h: &Handle, name: &str) -> Result<Option<Link>, rtnetlink::Error> {
    first_link(h.link().get().match_name(name.to_string())).await
}

pub(crate) async fn link_by_index(
    h: &Handle,
    index: u32,
) -> Result<Option<Link>, rtnetlink::Error> {
    first_link(h.link().get().match_index(index)).await
}

/// The nsid that the netns behind `fd` has as seen from the handle's netns
/// (`RTM_GETNSID` with `NETNSA_FD`); `None` if none is assigned.
pub(crate) async fn nsid_of_fd(h: &Handle, fd: RawFd) -> Result<Option<i32>, rtnetlink::Error> {
    let mut msg = NsidMessage::default();
    msg.attributes = vec![NsidAttribute::Fd(fd as u32)];
    let mut req = NetlinkMessage::from(RouteNetlinkMessage::GetNsId(msg));
    req.header.flags = NLM_F_REQUEST;
    let mut h = h.clone();
    let mut resp = h.request(req)?;
    while let Some(m) = resp.next().await {
        match m.payload {
            NetlinkPayload::Error(e) if e.code.is_some() => {
                return Err(rtnetlink::Error::NetlinkError(e));
            }
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNsId(m)) => {
                for a in m.attributes {
                    if let NsidAttribute::Id(id) = a {
                        return Ok((id >= 0).then_some(id));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(None)
}

/// An address on a link.
#[derive(Debug, Clone)]
pub(crate) struct Addr {
    pub net: IpNet,
    /// Configured statically (not SLAAC/temporary/DHCP-with-lifetime).
    pub permanent: bool,
    pub msg: netlink_packet_route::address::AddressMessage,
}

pub(crate) async fn addresses(h: &Handle, index: u32) -> Result<Vec<Addr>, rtnetlink::Error> {
    let mut out = Vec::new();
    let mut s = h.address().get().set_link_index_filter(index).execute();
    while let Some(m) = s.try_next().await? {
        if m.header.index != index {
            continue;
        }
        let mut addr = None;
        let mut local = None;
        let mut permanent = m.header.flags.contains(AddressHeaderFlags::Permanent);
        for a in &m.attributes {
            match a {
                AddressAttribute::Address(ip) => addr = Some(*ip),
                AddressAttribute::Local(ip) => local = Some(*ip),
                AddressAttribute::Flags(f) => permanent = f.contains(AddressFlags::Permanent),
                _ => {}
            }
        }
        // IPv4: IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer on p2p)
        if let Some(ip) = local.or(addr)
            && let Ok(net) = IpNet::new(ip, m.header.prefix_len)
        {
            out.push(Addr {
                net,
                permanent,
                msg: m,
            });
        }
    }
    Ok(out)
}

/// A route of the main table.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub dest: IpNet,
    pub gateway: Option<IpAddr>,
    pub oif: Option<u32>,
    pub protocol: RouteProtocol,
    pub msg: RouteMessage,
}

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

/// Routes of the main table for one address family (`v6` selects IPv6).
pub(crate) async fn main_routes(h: &Handle, v6: bool) -> Result<Vec<Route>, rtnetlink::Error> {
    let query = if v6 {
        RouteMessageBuilder::<Ipv6Addr>::new().build()
    } else {
        RouteMessageBuilder::<Ipv4Addr>::new().build()
    };
    let unspecified = if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    let mut out = Vec::new();
    let mut s = h.route().get(query).execute();
    while let Some(m) = s.try_next().await? {
        let mut table = u32::from(m.header.table);
        let mut dest = None;
        let mut gateway = None;
        let mut oif = None;
        for a in &m.attributes {
            match a {
                RouteAttribute::Table(t) => table = *t,
                RouteAttribute::Destination(d) => dest = route_ip(d),
                RouteAttribute::Gateway(g) => gateway = route_ip(g),
                RouteAttribute::Oif(i) => oif = Some(*i),
                _ => {}
            }
        }
        if table != u32::from(RouteHeader::RT_TABLE_MAIN) {
            continue;
        }
        let Ok(dest) = IpNet::new(
            dest.unwrap_or(unspecified),
            m.header.destination_prefix_length,
        ) else {
            continue;
        };
        out.push(Route {
            dest,
            gateway,
            oif,
            protocol: m.header.protocol,
            msg: m,
        });
    }
    Ok(out)
}

/// Asks for `queues` rx and tx queues on a link being created (nothing for 1, the
/// default).
pub fn set_queues(msg: &mut LinkMessage, queues: u32) {
    if queues > 1 {
        msg.attributes.push(LinkAttribute::NumRxQueues(queues));
        msg.attributes.push(LinkAttribute::NumTxQueues(queues));
    }
}
