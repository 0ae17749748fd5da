//! Pod annotations and labels → [`PodIpRequest`] (kube-ovn's names; see the table in
//! [`crate::ipam`]).

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::model::{Mac, PodInfo, PodIpRequest};

use super::family::Family;

pub use api::keys::{IP_ADDRESS, IP_POOL, KUBEVIRT_DOMAIN, KUBEVIRT_VM_LABEL, MAC_ADDRESS};

/// A pod annotation or label IPAM cannot use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {key} {value:?}: {reason}")]
pub struct AnnotationError {
    /// The annotation or label.
    pub key: &'static str,
    pub value: String,
    pub reason: AnnotationReason,
}

/// What is wrong with an annotation's or label's value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationReason {
    #[error(transparent)]
    Addresses(#[from] AddressListError),
    #[error(transparent)]
    Mac(#[from] api::mac::BadMac),
    #[error(transparent)]
    MacRefused(#[from] MacRefused),
    #[error("a VMI name cannot contain '/'")]
    VmiName,
}

/// Why a pod may not ask for a MAC ([`static_mac_allowed`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MacRefused {
    #[error("the all-zero MAC is no address")]
    AllZero,
    #[error(
        "0a:xx:xx:xx:xx:xx is the plugin's own range (router ports, addresses' derived MACs): \
         choose another MAC"
    )]
    OwnRange,
}

/// Why an address list ([`parse_ip_address`], [`parse_ip_pool`]) cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressListError {
    #[error("empty address")]
    Empty,
    #[error("{0} is not an IP address")]
    NotAnIp(String),
    #[error("{item}: /{len} is not a prefix length")]
    BadPrefixLen { item: String, len: String },
    #[error("{a} and {b} are both {family}: give one address per family")]
    SameFamily {
        a: IpAddr,
        b: IpAddr,
        family: Family,
    },
    #[error("give one address, or one per family (IPv4,IPv6)")]
    Count,
}

/// Whether a pod may ask for `mac`: not all zeros, and not in `0a:xx:xx:xx:xx:xx`, the
/// plugin's own range (router ports and the gateway routers: `0a` + a hash of the port's
/// name; pods: `0a:58` + their IPv4 address). A pod holding its subnet's router MAC would
/// draw the subnet's traffic to the gateway; one holding a derived MAC would take it from
/// the pod whose address it encodes.
pub fn static_mac_allowed(mac: Mac) -> Result<(), MacRefused> {
    let b = mac.octets();
    if b == [0; 6] {
        return Err(MacRefused::AllZero);
    }
    if b[0] == 0x0a {
        return Err(MacRefused::OwnRange);
    }
    Ok(())
}

/// The request of `pod`.
pub fn pod_request(pod: &PodInfo) -> Result<PodIpRequest, AnnotationError> {
    parse_request(&pod.annotations, &pod.labels)
}

/// Reads a pod's annotations and labels. Absent or empty values ask for nothing.
pub fn parse_request(
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> Result<PodIpRequest, AnnotationError> {
    let get = |map: &BTreeMap<String, String>, key: &str| {
        map.get(key)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let mut req = PodIpRequest::default();
    if let Some(v) = get(annotations, IP_ADDRESS) {
        req.static_ips = parse_ip_address(&v).map_err(|e| err(IP_ADDRESS, &v, e))?;
    }
    if let Some(v) = get(annotations, MAC_ADDRESS) {
        let mac = v.parse::<Mac>().map_err(|e| err(MAC_ADDRESS, &v, e))?;
        static_mac_allowed(mac).map_err(|e| err(MAC_ADDRESS, &v, e))?;
        req.static_mac = Some(mac);
    }
    if let Some(v) = get(annotations, IP_POOL) {
        req.ip_pool = parse_ip_pool(&v).map_err(|e| err(IP_POOL, &v, e))?;
    }
    let vm = match get(annotations, KUBEVIRT_DOMAIN) {
        Some(v) => Some((KUBEVIRT_DOMAIN, v)),
        None => get(labels, KUBEVIRT_VM_LABEL).map(|v| (KUBEVIRT_VM_LABEL, v)),
    };
    if let Some((key, v)) = vm {
        if v.contains('/') {
            return Err(err(key, &v, AnnotationReason::VmiName));
        }
        req.vm = Some(v);
    }
    Ok(req)
}

fn err(key: &'static str, value: &str, reason: impl Into<AnnotationReason>) -> AnnotationError {
    AnnotationError {
        key,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// `ovn.kubernetes.io/ip_address`: one address, or two of different families.
pub fn parse_ip_address(value: &str) -> Result<Vec<IpAddr>, AddressListError> {
    let ips = value
        .split(',')
        .map(parse_ip)
        .collect::<Result<Vec<_>, _>>()?;
    match ips.as_slice() {
        [_] => {}
        [a, b] if Family::of(*a) != Family::of(*b) => {}
        [a, b] => {
            return Err(AddressListError::SameFamily {
                a: *a,
                b: *b,
                family: Family::of(*a),
            });
        }
        _ => return Err(AddressListError::Count),
    }
    Ok(ips)
}

/// `ovn.kubernetes.io/ip_pool`: addresses separated by `,` or `;` (empty entries skipped).
pub fn parse_ip_pool(value: &str) -> Result<Vec<IpAddr>, AddressListError> {
    value
        .split([',', ';'])
        .filter(|s| !s.trim().is_empty())
        .map(parse_ip)
        .collect()
}

/// One address, with an optional `/len` that must be a valid prefix length for its
/// family and is otherwise ignored.
fn parse_ip(item: &str) -> Result<IpAddr, AddressListError> {
    let item = item.trim();
    if item.is_empty() {
        return Err(AddressListError::Empty);
    }
    let (addr, len) = match item.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (item, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| AddressListError::NotAnIp(item.to_string()))?;
    if let Some(len) = len {
        let max = if ip.is_ipv4() { 32 } else { 128 };
        if !len.parse::<u8>().is_ok_and(|l| l <= max) {
            return Err(AddressListError::BadPrefixLen {
                item: item.to_string(),
                len: len.to_string(),
            });
        }
    }
    Ok(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn nothing_asked() {
        let req = parse_request(&map(&[(IP_ADDRESS, " ")]), &map(&[])).unwrap();
        assert_eq!(req, PodIpRequest::default());
    }

    #[test]
    fn static_ips_one_or_one_per_family_with_ignored_len() {
        let req = parse_request(&map(&[(IP_ADDRESS, "10.0.0.5/24")]), &map(&[])).unwrap();
        assert_eq!(req.static_ips, vec![ip("10.0.0.5")]);
        let req = parse_request(&map(&[(IP_ADDRESS, "10.0.0.5, fd00::5/64")]), &map(&[])).unwrap();
        assert_eq!(req.static_ips, vec![ip("10.0.0.5"), ip("fd00::5")]);
    }

    #[test]
    fn bad_static_ips_name_annotation_and_value() {
        let e = parse_request(&map(&[(IP_ADDRESS, "10.0.0.300")]), &map(&[])).unwrap_err();
        assert_eq!(e.key, IP_ADDRESS);
        assert_eq!(
            e.to_string(),
            "invalid ovn.kubernetes.io/ip_address \"10.0.0.300\": 10.0.0.300 is not an IP address"
        );
        for bad in [
            "10.0.0.5,10.0.0.6",
            "10.0.0.5,",
            "10.0.0.5/33",
            "10.0.0.5/x",
            "1.1.1.1,::1,::2",
        ] {
            let e = parse_request(&map(&[(IP_ADDRESS, bad)]), &map(&[])).unwrap_err();
            assert_eq!(e.key, IP_ADDRESS, "{bad}");
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn mac() {
        let req = parse_request(&map(&[(MAC_ADDRESS, "00:00:00:53:6B:B6")]), &map(&[])).unwrap();
        assert_eq!(req.static_mac, Some(Mac([0, 0, 0, 0x53, 0x6b, 0xb6])));
        let e = parse_request(&map(&[(MAC_ADDRESS, "01:00:00:00:00:01")]), &map(&[])).unwrap_err();
        assert_eq!(e.key, MAC_ADDRESS);
        assert!(e.to_string().contains("01:00:00:00:00:01"), "{e}");
        // a subnet's router port MAC, a pod's derived MAC, the zero MAC: refused by name
        let router = api::names::router_mac("ovn_cluster_router-subnet-blue").to_string();
        for (bad, why) in [
            (router.as_str(), "the plugin's own range"),
            ("0a:58:0a:10:00:05", "the plugin's own range"),
            ("00:00:00:00:00:00", "all-zero"),
        ] {
            let e = parse_request(&map(&[(MAC_ADDRESS, bad)]), &map(&[])).unwrap_err();
            assert_eq!(e.key, MAC_ADDRESS, "{bad}");
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn pool_comma_or_semicolon() {
        let req = parse_request(
            &map(&[(IP_POOL, "10.0.0.5,10.0.0.6;fd00::5; ;")]),
            &map(&[]),
        )
        .unwrap();
        assert_eq!(
            req.ip_pool,
            vec![ip("10.0.0.5"), ip("10.0.0.6"), ip("fd00::5")]
        );
        let e = parse_request(&map(&[(IP_POOL, "10.0.0.5;pool-a")]), &map(&[])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid ovn.kubernetes.io/ip_pool \"10.0.0.5;pool-a\": pool-a is not an IP address"
        );
    }

    #[test]
    fn kubevirt_domain_annotation_then_vm_label() {
        let req = parse_request(
            &map(&[(KUBEVIRT_DOMAIN, "vmi-a")]),
            &map(&[(KUBEVIRT_VM_LABEL, "other")]),
        )
        .unwrap();
        assert_eq!(req.vm.as_deref(), Some("vmi-a"));
        let req = parse_request(&map(&[]), &map(&[(KUBEVIRT_VM_LABEL, "vmi-b")])).unwrap();
        assert_eq!(req.vm.as_deref(), Some("vmi-b"));
        // labels do not count as annotations and vice versa
        let req = parse_request(
            &map(&[(KUBEVIRT_VM_LABEL, "x")]),
            &map(&[(IP_ADDRESS, "1.1.1.1")]),
        )
        .unwrap();
        assert_eq!(req, PodIpRequest::default());
        let e = parse_request(&map(&[(KUBEVIRT_DOMAIN, "a/b")]), &map(&[])).unwrap_err();
        assert_eq!(e.key, KUBEVIRT_DOMAIN);
    }

    #[test]
    fn pod_info() {
        let pod = PodInfo {
            namespace: "ns".into(),
            name: "virt-launcher-a-x".into(),
            uid: "u".into(),
            node: None,
            host_network: false,
            labels: map(&[("kubevirt.io", "virt-launcher")]),
            annotations: map(&[(KUBEVIRT_DOMAIN, "a"), (IP_ADDRESS, "10.0.0.9")]),
            completed: false,
            ports: Vec::new(),
        };
        let req = pod_request(&pod).unwrap();
        assert_eq!(req.vm.as_deref(), Some("a"));
        assert_eq!(req.static_ips, vec![ip("10.0.0.9")]);
    }
}
