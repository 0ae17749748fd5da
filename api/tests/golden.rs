//! Golden values of every persistent name: each literal was computed by the code that
//! named live objects before the contract crate existed (vhost/src/layout.rs,
//! control/src/netpol/mod.rs, control/src/translate/service/local.rs, control/src/names.rs,
//! lab/src/pods/naming.rs, lab/src/apiserver/nad.rs, dataplane/src/attach/pod_iface/mod.rs).
//! A failure here means live objects would be renamed on upgrade: do not update the
//! literal, fix the code (or write a migration).

use api::hash::{fnv1a64, fnv1a64_parts, hex, hex_parts};
use api::names;
use api::services::Proto;

#[test]
fn the_hash() {
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(hex(b"zstack-ovn"), "678f740eabd16953");
    assert_eq!(fnv1a64_parts(&["ab", "c"]), fnv1a64(b"ab\0c"));
    assert_ne!(fnv1a64_parts(&["ab", "c"]), fnv1a64_parts(&["a", "bc"]));
    // lab: container ids and netns names hash these inputs
    let mut uid = b"0b6c5a4e-1111-2222-3333-444455556666".to_vec();
    uid.push(0);
    assert_eq!(hex(&uid), "6c3f6e215b3cb9d7");
    assert_eq!(&hex(b"demo/web")[..8], "d314c8cc");
    // dataplane: host veth name of a container id that is not hex
    assert_eq!(&hex(b"not-a-hex-container-id")[..11], "0440f2033fa");
    // lab: virt-launcher pod names hash `<ns>/<vmi>`
    assert_eq!(hex(b"vms/vm1"), format!("{:016x}", fnv1a64(b"vms/vm1")));
}

#[test]
fn vhost_user_socket_ids_and_port_names() {
    let id = names::vhost_socket_id("vms", "vm1", "eth0");
    assert_eq!(id, "6450589695b2d2da");
    assert_eq!(names::vhost_port_name(&id), "vhu6450589695b2");
    let id = names::vhost_socket_id("default", "dpdk-app", "net1");
    assert_eq!(id, "3b50d1843a3c1951");
    assert_eq!(names::vhost_port_name(&id), "vhu3b50d1843a3c");
    assert_eq!(hex_parts(&["vms", "vm1", "eth0"]), "6450589695b2d2da");
}

#[test]
fn logical_switch_ports() {
    assert_eq!(names::pod_port("demo", "web"), "demo_web");
    assert_eq!(
        names::network_port("vms_virt-launcher-vm1-abcde", "vms/vhost-net"),
        "vms_virt-launcher-vm1-abcde_vms.vhost-net"
    );
    assert_eq!(names::node_port("node1"), "node-node1");
}

#[test]
fn network_policy_rows() {
    assert_eq!(
        names::policy_port_group("zstack-ovn", "default/allow-web"),
        "np_7a313ccd7df5ed7f"
    );
    assert_eq!(
        names::policy_port_group("zstack-ovn", "deny/ingress"),
        "np_a1bb79d352431f13"
    );
    assert_eq!(
        names::policy_address_set("zstack-ovn", "default/allow-web", true),
        "np_f4348a335c4f6611_v4"
    );
    assert_eq!(
        names::policy_address_set("zstack-ovn", "default/allow-web", false),
        "np_f4348a335c4f6611_v6"
    );
}

#[test]
fn service_template_variables() {
    assert_eq!(
        names::service_ip_var("default/web", true),
        "zsvc_9d2ba50824d634bb_ip4"
    );
    assert_eq!(
        names::service_ip_var("default/web", false),
        "zsvc_9d2ba50824d634bb_ip6"
    );
    assert_eq!(
        names::service_backends_var("default/web", Proto::Tcp, 80, true),
        "zsvc_9d2ba50824d634bb_tcp80_4"
    );
}

#[test]
fn router_macs() {
    assert_eq!(
        names::router_mac("ovn_cluster_router-subnet-blue").to_string(),
        "0a:fc:7d:75:8e:6c"
    );
}

#[test]
fn gateway_rows_and_patch_port() {
    use api::gateway::*;
    assert_eq!(gateway_router("n1"), "GR_n1");
    assert_eq!(external_switch("n1"), "ext_n1");
    assert_eq!(external_localnet_port("n1"), "lnet_n1");
    // ovn-controller's own naming of the gateway bridge's patch port
    assert_eq!(gateway_patch_port("n1"), "patch-lnet_n1-to-br-int");
}

#[test]
fn annotation_keys() {
    use api::keys::*;
    for (key, want) in [
        (POD_NETWORKS, "k8s.ovn.org/pod-networks"),
        (POD_SUBNET, "network.zstack.io/subnet"),
        (IPAM_ERROR, "network.zstack.io/ipam-error"),
        (NETWORK_SUBNETS, "network.zstack.io/network-subnets"),
        (NETWORK_ERRORS, "network.zstack.io/network-errors"),
        (NODE_MGMT_PORT, "network.zstack.io/mgmt-port"),
        (CHASSIS_ID, "network.zstack.io/chassis-id"),
        (NODE_GATEWAY, "network.zstack.io/gateway"),
        (DATAPATH_STATUS, "network.zstack.io/datapath-status"),
        (DATAPATH_CONFIG, "network.zstack.io/datapath-config"),
        (POD_DATAPATH, "network.zstack.io/datapath"),
        (VHOST_USER, "network.zstack.io/vhost-user"),
        (VHOST_OWNER, "network.zstack.io/vhost-owner"),
        (NETWORKS_ANNOTATION, "k8s.v1.cni.cncf.io/networks"),
        (NETWORK_STATUS, "k8s.v1.cni.cncf.io/network-status"),
        (MULTUS_DEFAULT_NETWORK, "v1.multus-cni.io/default-network"),
        (KUBEVIRT_DOMAIN, "kubevirt.io/domain"),
        (KUBEVIRT_VM_LABEL, "kubevirt.io/vm"),
    ] {
        assert_eq!(key, want);
    }
}

#[test]
fn uninstall_ack_keys() {
    use api::keys::{UNINSTALL_ACK_PREFIX, uninstall_ack_key};
    // the agent of one release version writes it, the hook of another may read it
    assert_eq!(UNINSTALL_ACK_PREFIX, "network.zstack.io/ack.");
    assert_eq!(uninstall_ack_key("node1"), "network.zstack.io/ack.node1");
    let long = "gke-production-cluster-01-default-pool-1a2b3c4d-abcd.europe-west1";
    let key = uninstall_ack_key(long);
    assert_eq!(
        key.strip_prefix(UNINSTALL_ACK_PREFIX),
        Some("gke-production-cluster-01-default-pool-1a2-3e0d2544ce227509")
    );
    let name = key.split_once('/').map(|(_, n)| n).unwrap_or_default();
    assert_eq!(name.len(), 63, "{name}");
    // the longest name that still fits is kept whole
    let fits = "n".repeat(59);
    assert_eq!(
        uninstall_ack_key(&fits),
        format!("{UNINSTALL_ACK_PREFIX}{fits}")
    );
    assert_ne!(
        uninstall_ack_key(&"n".repeat(60)),
        uninstall_ack_key(&"n".repeat(61))
    );
}

/// Every `external_ids` key and owner value: rows in running clusters carry these exact strings.
#[test]
fn keys_and_owners_are_what_deployed_rows_carry() {
    let golden = "owner kind object network pod-uid subnet cidr acl unused-since row \
        platform-group platform-acl pod sandbox ifname datapath datapath-reason datapath-pending vhost-socket \
        vhost-queues datapath-keys vswitchd-restart-pending capture-pid capture-start \
        capture-iface-id";
    let names: Vec<&str> = api::external_ids::ALL_KEYS
        .iter()
        .map(|k| &k[api::external_ids::PREFIX.len()..])
        .collect();
    assert_eq!(names.join(" "), golden);
    assert_eq!(
        [
            api::external_ids::CLUSTER_ID,
            api::external_ids::AGENT_OWNER,
            api::external_ids::CAPTURE_OWNER,
        ],
        ["zstack-ovn", "zstack-ovn-node", "zovn-capture"]
    );
    assert_eq!(
        api::external_ids::kind::ALL.join(" "),
        "cluster-router join-switch node pod pod-network subnet subnet-localnet router-port \
         service service-template-vars gateway egress egress-node egress-nodes \
         egress-service-return netpol netpol-deny netpol-peer netpol-acl platform-mgmt"
    );
}
