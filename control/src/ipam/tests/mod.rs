//! Unit tests of [`Ipam`](super::Ipam) and [`SubnetPool`](super::SubnetPool): one test
//! per rule of the module docs, grouped by topic.

mod allocator;
mod lifecycle;
mod pods;
mod restore;

use std::net::IpAddr;

use crate::model::{IpRange, PodIpRequest, Protocol, ValidSubnet};

use super::*;

pub(crate) fn subnet(
    name: &str,
    cidrs: &[&str],
    gateways: &[&str],
    excludes: &[(&str, &str)],
) -> ValidSubnet {
    let cidrs: Vec<IpNet> = cidrs.iter().map(|c| c.parse().unwrap()).collect();
    let protocol = match cidrs.as_slice() {
        [IpNet::V4(_)] => Protocol::IPv4,
        [IpNet::V6(_)] => Protocol::IPv6,
        _ => Protocol::Dual,
    };
    ValidSubnet {
        name: name.into(),
        protocol,
        cidrs,
        gateways: gateways.iter().map(|g| ip(g)).collect(),
        excludes: excludes
            .iter()
            .map(|(s, e)| IpRange {
                start: ip(s),
                end: ip(e),
            })
            .collect(),
        vlan_id: None,
        provider: None,
        external_logical_switch: None,
        security_groups: vec![],
        namespaces: vec![],
        default: false,
        nat_outgoing: true,
    }
}

pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub(super) fn ipam_with(subnets: &[ValidSubnet]) -> Ipam {
    let mut ipam = Ipam::new();
    for s in subnets {
        ipam.add_subnet(s).unwrap();
    }
    ipam
}

pub(super) fn blue() -> ValidSubnet {
    subnet("blue", &["10.0.0.0/24"], &["10.0.0.1"], &[])
}

pub(super) fn dual() -> ValidSubnet {
    subnet(
        "dual",
        &["10.1.0.0/24", "fd00:1::/64"],
        &["10.1.0.1", "fd00:1::1"],
        &[],
    )
}

pub(super) fn any() -> PodIpRequest {
    PodIpRequest::default()
}

pub(super) fn statics(ips: &[&str]) -> PodIpRequest {
    PodIpRequest {
        static_ips: ips.iter().map(|s| ip(s)).collect(),
        ..any()
    }
}

pub(super) fn pool(ips: &[&str]) -> PodIpRequest {
    PodIpRequest {
        ip_pool: ips.iter().map(|s| ip(s)).collect(),
        ..any()
    }
}

pub(super) fn vm(name: &str) -> PodIpRequest {
    PodIpRequest {
        vm: Some(name.into()),
        ..any()
    }
}

pub(super) fn addrs(a: &PodAddresses) -> Vec<IpAddr> {
    a.ips.iter().map(|n| n.addr()).collect()
}

pub(super) fn owner(s: &str) -> Owner {
    s.into()
}
