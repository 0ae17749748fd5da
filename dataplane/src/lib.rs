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
//! [`attach::node::NodeCtx`] (OVS through the [`ovs::NodeOvs`] trait, host plumbing
//! through [`attach::plumbing::Plumbing`], the pod source, records, metrics, sandbox locks). No module
//! imports a module that imports it (parent `mod.rs` → child excepted), and the
//! attachment logic has unit tests on an in-memory OVS and a plumbing fake.
//!
//! ## Modules, by feature
//!
//! | folder | what |
//! |---|---|
//! | [`agent`] | the agent: node setup, datapath pass, OVS watch, CNI dispatch; [`agent::server`] the CNI unix socket, [`agent::report`] events on Nodes and Pods, [`agent::metrics`] Prometheus `/metrics`, [`agent::chassis_cert`] the node's own OVN client certificate (key made here, signed through a CertificateSigningRequest, renewed) |
//! | [`attach`] | pod attachments (veth on a kernel or AF_XDP port, vhost-user, secondary network): ADD/DEL/CHECK/GC/restore/reconcile and the rules they share; [`attach::node`] the [`attach::node::NodeCtx`] they work with (sandbox locks, waiting for the controller's annotation); [`attach::plumbing`] the host side behind a trait; [`attach::pod_iface`] veth plumbing with rtnetlink + ethtool ioctl; [`attach::promote`] and [`attach::promote_queue`] fast start; [`attach::phases`] where each ADD's time went; [`attach::state`] and [`attach::vhost_state`] the per-sandbox records |
//! | [`datapath`] | the datapath: config, probe, decide, apply, status, PM QoS; [`datapath::report`] a pass reported (Node annotation, events, metrics); [`datapath::metrics`] PMD and per-port counters on each scrape; [`datapath::megaflow`] and [`datapath::megaflow_guard`] the megaflow dumps and the guard against the OVS 3.1 revalidator fault |
//! | [`ovs`] | the local Open_vSwitch db: the [`ovs::NodeOvs`] trait, [`ovs::Ovs`] on the typed `ovsdb::vswitch` rows, an in-memory implementation for unit tests; [`ovs::unixctl`] the unixctl client (what `ovs-appctl` speaks); [`ovs::capture_mirror`] capture Mirrors and their GC |
//! | [`host`] | the host side outside OVS: management port, uplink, MTU, `shared` gateway, Service NAT in nf_tables, the Service address guard |
//! | [`source`] | pod/node/Subnet/Service sources: the lab object store (`lab:SOCKET`) or Kubernetes (`kube`, reflector stores), and their error |
//! | [`capture`] | `zstack-ovnkube-node debug capture`: a pod port mirrored onto a tap, read with AF_PACKET, written as pcap (the node side of `zovn capture`) |
//! | [`uninstall`] | uninstall only when asked: the pre-delete hook's marker, the agent's watch and acknowledgement, the SIGTERM decision, the node cleanup |

pub mod agent;
pub mod attach;
pub mod capture;
pub mod datapath;
pub mod host;
pub mod ovs;
pub mod pinger;
pub mod source;
pub mod uninstall;
