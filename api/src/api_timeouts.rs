//! How long the product's Kubernetes clients (controller, node agent) trust a connection to
//! the API server.
//!
//! A connection can die without either end closing it: on a node whose only NIC the chart
//! puts on br-phy, moving the node's address off the NIC flushes the conntrack entries
//! kube-proxy masqueraded through it (a hostNetwork client reaching the API server through
//! the `kubernetes` Service's ClusterIP), and every such connection then drops what arrives
//! for it, silently. kube's defaults wait for nothing on a request (no read timeout) and 290 s
//! on an idle watch: the controller stood still for minutes (`cluster_e2e` step
//! `single-nic`). With these bounds a request on a dead connection fails and is retried on a
//! new one, and an idle watch ends and is re-made within half a minute.

use std::time::Duration;

/// A response (or the next bytes of one) must arrive within this, counted from the request.
pub const API_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The server ends each watch after this many seconds (the client's idle timeout follows
/// it): below [`API_READ_TIMEOUT`], so a live idle watch is never cut as dead.
pub const WATCH_TIMEOUT_SECS: u32 = 25;
