//! A pod and its addresses → its Logical_Switch_Port `<namespace>_<pod>`.

use ovsdb::nb::LogicalSwitchPort;

use super::ClusterConfig;
use crate::model::{PodAddresses, PodInfo};
use crate::names;

/// `external_ids` key with the pod's UID (tells a re-created pod of the same name apart).
pub use api::external_ids::nb::POD_UID;
/// `external_ids` key with the Subnet the addresses came from (used to rebuild IPAM).
pub use api::external_ids::nb::SUBNET;

/// The `addresses` / `port_security` entry: `"MAC IP [IP]"`.
pub fn address_entry(addrs: &PodAddresses) -> String {
    let mut s = addrs.mac.to_string();
    for ip in &addrs.ips {
        s.push(' ');
        s.push_str(&ip.addr().to_string());
    }
    s
}

/// The pod's switch port. `requested-chassis` pins the binding to the pod's node.
pub fn port(cfg: &ClusterConfig, pod: &PodInfo, addrs: &PodAddresses) -> LogicalSwitchPort {
    let entry = address_entry(addrs);
    let mut lsp = LogicalSwitchPort {
        name: pod.lsp_name(),
        external_ids: names::owned(&cfg.cluster_id, api::external_ids::kind::POD, &pod.key()),
        ..Default::default()
    };
    lsp.addresses.insert(entry.clone());
    lsp.port_security.insert(entry);
    lsp.external_ids.insert(POD_UID.into(), pod.uid.clone());
    lsp.external_ids.insert(SUBNET.into(), addrs.subnet.clone());
    if let Some(node) = &pod.node {
        lsp.options.insert("requested-chassis".into(), node.clone());
    }
    lsp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Mac;
    use std::collections::BTreeMap;

    #[test]
    fn pod_port_has_addresses_security_owner_and_chassis() {
        let pod = PodInfo {
            namespace: "ns1".into(),
            name: "web".into(),
            uid: "u1".into(),
            node: Some("node1".into()),
            host_network: false,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            completed: false,
            ports: Vec::new(),
        };
        let addrs = PodAddresses {
            subnet: "blue".into(),
            ips: vec![
                "10.0.0.5/24".parse().unwrap(),
                "fd00::5/64".parse().unwrap(),
            ],
            mac: "0a:58:0a:00:00:05".parse::<Mac>().unwrap(),
            gateways: vec![],
        };
        let lsp = port(&ClusterConfig::default(), &pod, &addrs);
        assert_eq!(lsp.name, "ns1_web");
        let entry = "0a:58:0a:00:00:05 10.0.0.5 fd00::5".to_string();
        assert!(lsp.addresses.contains(&entry));
        assert!(lsp.port_security.contains(&entry));
        assert_eq!(lsp.external_ids[names::OWNER], "zstack-ovn");
        assert_eq!(lsp.external_ids[names::OBJECT], "ns1/web");
        assert_eq!(lsp.external_ids[SUBNET], "blue");
        assert_eq!(lsp.options["requested-chassis"], "node1");
    }
}
