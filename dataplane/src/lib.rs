//! # dataplane — the node agent
//!
//! Chooses and tunes the node's datapath (OVS-DPDK → AF_XDP → kernel veth), manages OVS
//! bridges and ports through the [`ovsdb`] client on the local `Open_vSwitch` database,
//! plumbs pod interfaces with rtnetlink, and serves the CNI socket. Ships the
//! `zstack-ovnkube-node` binary.
//!
//! Datapath today: kernel veth ports on a `netdev` br-int (AF_PACKET); DPDK/AF_XDP
//! selection comes later.
//!
//! ## Modules
//!
//! | module | what |
//! |---|---|
//! | [`pod_iface`] | pod veth plumbing for CNI ADD/DEL/CHECK: [`pod_iface::setup`], [`pod_iface::teardown`], [`pod_iface::check`] (rtnetlink + ethtool ioctl, idempotent) |
//! | [`pod_iface::netns`] | run a closure on a dedicated thread inside a netns, with an rtnetlink handle opened there |
//! | [`ovs`] | the local Open_vSwitch db through the `ovsdb` client: br-int, owned ports, `ovn-installed` waits |
//! | [`host_nat`] | Services reached from the host: NodePort, externalIPs and LoadBalancer IPs DNATed to the cluster IP in our nf_tables table `inet zstack-ovn` |
//! | [`mgmt`] | the management port `ovn-k8s-mp0` (OVS internal port + host address and Subnet routes) |
//! | [`pods`] | pod/node/Subnet sources: the lab object store (`lab:SOCKET`) or Kubernetes (`kube`) |
//! | [`agent`] | CNI ADD/DEL/CHECK/GC/STATUS, restart restore, OVS watch |
//! | [`server`] | the CNI unix socket |
//! | [`state`] | per-sandbox state in `--state-dir` |
//! | [`metrics`] | Prometheus metrics and `/metrics` |
//! | [`secondary`] | Multus secondary networks (`net1`, …): vhost-user bound to the pod's LSP on that network |
//! | [`vhost_port`] | vhost-user interfaces (KubeVirt VMs, DPDK pods): `dpdkvhostuserclient` ports, socket dirs, device-info |
//! | [`unixctl`] | async client of the OVS unixctl socket (what `ovs-appctl` speaks) |
//! | [`pmd_stats`] | parsers of `dpif-netdev/pmd-stats-show` and `pmd-rxq-show` |
//! | [`datapath_metrics`] | PMD and per-port OVS counters collected on each scrape |
//! | [`megaflow`] | datapath flow dumps parsed, and the overlap test of two megaflows |
//! | [`megaflow_guard`] | purges the datapath flows when overlapping megaflows disagree (OVS 3.1 userspace revalidator fault) |

pub mod agent;
pub mod datapath;
pub mod datapath_metrics;
pub mod host_nat;
pub mod megaflow;
pub mod megaflow_guard;
pub mod metrics;
pub mod mgmt;
pub mod mtu;
pub mod node_datapath;
pub mod ovs;
pub mod pmd_stats;
pub mod pod_iface;
pub mod pods;
pub mod report;
pub mod secondary;
pub mod server;
pub mod source_error;
pub mod state;
pub mod unixctl;
pub mod vhost_port;
