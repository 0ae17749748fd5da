//! # dataplane — the node agent
//!
//! Chooses and tunes the node's datapath (OVS-DPDK → AF_XDP → kernel veth), manages OVS
//! bridges and ports through the [`ovsdb`] client on the local `Open_vSwitch` database,
//! plumbs pod interfaces with rtnetlink, and serves the CNI socket. Ships the
//! `zstack-ovnkube-node` binary. What it shares with the controller (annotation keys and
//! codecs, the Subnet and Service types, persistent names) comes from the contract crate
//! [`api`]; it does not link the controller.
//!
//! Datapaths: the node decides at start-up and re-checks on every refresh ([`datapath`]:
//! config → probe → decide → apply → status) between OVS-DPDK, AF_XDP and the kernel
//! fallback, all on a `netdev` br-int; veth pods get an `afxdp` port or a plain one
//! (AF_PACKET), with a per-port fallback to the kernel path; vhost-user pods and
//! secondary networks get `dpdkvhostuserclient` ports.
//!
//! The agent is made of parts: [`agent::Agent`] does the node-level work (br-int and
//! ovn-controller settings, the management port, the host's Service NAT, the datapath
//! pass) and hands every CNI request to [`attach`], whose functions take a
//! [`node::NodeCtx`] (OVS through the [`ovs::NodeOvs`] trait, host plumbing through
//! [`plumbing::Plumbing`], the pod source, records, metrics, sandbox locks). No module
//! imports a module that imports it (parent `mod.rs` → child excepted), and the
//! attachment logic has unit tests on an in-memory OVS and a plumbing fake.
//!
//! ## Modules
//!
//! | module | what |
//! |---|---|
//! | [`agent`] | the agent: node setup, management port, host Service NAT, datapath pass, OVS watch, CNI dispatch |
//! | [`attach`] | pod attachments (veth on a kernel or AF_XDP port, vhost-user, secondary network): ADD/DEL/CHECK/GC/restore/reconcile and the rules they share |
//! | [`node`] | [`node::NodeCtx`]: what the attachments work with; sandbox locks; waiting for the controller's annotation |
//! | [`attach::promote`], [`promote_queue`] | fast start: AF_XDP pods start on a kernel port, switched to AF_XDP in the background once a burst of ADDs is over |
//! | [`attach::phases`] | where each ADD's time went (`CNI ADD phases` log line, histogram) |
//! | [`plumbing`] | the host side of an attachment (veth plumbing, netns, hugepages) behind a trait |
//! | [`pod_iface`] | pod veth plumbing for CNI ADD/DEL/CHECK: [`pod_iface::setup`], [`pod_iface::teardown`], [`pod_iface::check`] (rtnetlink + ethtool ioctl, idempotent) |
//! | [`pod_iface::netns`] | run a closure on a dedicated thread inside a netns, with an rtnetlink handle opened there |
//! | [`ovs`] | the local Open_vSwitch db: the [`ovs::NodeOvs`] trait, [`ovs::Ovs`] on the typed `ovsdb::vswitch` rows (br-int, owned ports, `ovn-installed` waits, `Open_vSwitch` maps), an in-memory implementation for unit tests |
//! | [`datapath`] | datapath selection and tuning: config, probe, decide, apply, status, PM QoS |
//! | [`node_datapath`] | a datapath pass reported: Node annotation, events, metrics |
//! | [`gateway`] | `shared` gateway mode: the gateway bridge's address, MAC and next hop, reported on the Node |
//! | [`gateway_flows`] | `shared` gateway mode: the gateway bridge's rules splitting the shared address between the host and the gateway router |
//! | [`uplink`] | the node's uplink port (br-phy's NIC): AF_XDP on the userspace datapaths, with a kernel-port fallback |
//! | [`host_nat`] | Services reached through the host: NodePort, externalIPs and LoadBalancer IPs DNATed to the cluster IP (or, for `externalTrafficPolicy: Local` from outside, to this node's endpoints) in our nf_tables table `inet zstack-ovn`; pods' egress masquerade |
//! | [`service_address_guard`] | what a Service may not take from the host (its addresses, next hops, attached networks): such externalIPs/ingress IPs get no host route and no NAT rule |
//! | [`chassis_cert`] | the node's own OVN client certificate (CN = its chassis): key made here, certificate through a CertificateSigningRequest, renewed |
//! | [`mgmt`] | the management port `ovn-k8s-mp0` (OVS internal port + host address and Subnet routes) |
//! | [`mtu`] | the pod MTU from the underlay and the encapsulation |
//! | [`source`] | pod/node/Subnet/Service sources: the lab object store (`lab:SOCKET`) or Kubernetes (`kube`, reflector stores), and their error |
//! | [`report`] | events on Nodes and Pods (kube-runtime's `Recorder` with `--pods kube`) |
//! | [`server`] | the CNI unix socket |
//! | [`state`] | per-sandbox (veth) records in `--state-dir` |
//! | [`vhost_state`] | vhost-user records under the socket root |
//! | [`metrics`] | Prometheus metrics and `/metrics` |
//! | [`uninstall`] | uninstall only when asked: the pre-delete hook's marker, the agent's watch and acknowledgement, the SIGTERM decision, the node cleanup |
//! | [`unixctl`] | async client of the OVS unixctl socket (what `ovs-appctl` speaks) |
//! | [`datapath_metrics`] | PMD and per-port OVS counters collected on each scrape |
//! | [`capture`] | `zstack-ovnkube-node debug capture`: a pod port mirrored onto a tap, read with AF_PACKET, written as pcap (the node side of `zovn capture`) |
//! | [`megaflow`] | datapath flow dumps parsed, and the overlap test of two megaflows |
//! | [`megaflow_guard`] | purges the datapath flows when overlapping megaflows disagree (OVS 3.1 userspace revalidator fault) |

pub mod agent;
pub mod attach;
pub mod capture;
pub mod chassis_cert;
pub mod datapath;
pub mod datapath_metrics;
pub mod gateway;
pub mod gateway_flows;
pub mod host_nat;
pub mod megaflow;
pub mod megaflow_guard;
pub mod metrics;
pub mod mgmt;
pub mod mtu;
pub mod node;
pub mod node_datapath;
pub mod ovs;
pub mod plumbing;
pub mod pod_iface;
pub mod promote_queue;
pub mod report;
pub mod server;
pub mod service_address_guard;
pub mod source;
pub mod state;
pub mod uninstall;
pub mod unixctl;
pub mod uplink;
pub mod vhost_state;
