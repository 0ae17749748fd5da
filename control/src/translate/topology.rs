//! The cluster router and the join switch (node management ports attach there).

use ovsdb::nb::{LogicalRouter, LogicalRouterPort, LogicalSwitch};

use super::{ClusterConfig, Mode};
use crate::desired::{DesiredNb, Parent};
use crate::names::{self, CLUSTER_ROUTER, JOIN_SWITCH};
use crate::translate::subnet::router_link;

/// Adds the cluster router and the join switch linked to it. In external mode the
/// platform owns routing: neither is created.
pub fn add(cfg: &ClusterConfig, nb: &mut DesiredNb) {
    if cfg.mode == Mode::External {
        return;
    }
    let router = LogicalRouter {
        name: CLUSTER_ROUTER.into(),
        external_ids: names::owned(
            &cfg.cluster_id,
            api::external_ids::kind::CLUSTER_ROUTER,
            CLUSTER_ROUTER,
        ),
        ..Default::default()
    };
    nb.routers.insert(
        CLUSTER_ROUTER.into(),
        Parent::<_, LogicalRouterPort>::owned(router),
    );
    let mut join = LogicalSwitch {
        name: JOIN_SWITCH.into(),
        external_ids: names::owned(
            &cfg.cluster_id,
            api::external_ids::kind::JOIN_SWITCH,
            JOIN_SWITCH,
        ),
        ..Default::default()
    };
    let cidrs: Vec<String> = std::iter::once(cfg.join_cidr)
        .chain(cfg.join_v6.map(|v| v.cidr))
        .map(|c| c.to_string())
        .collect();
    join.external_ids
        .insert(api::external_ids::nb::CIDR.into(), cidrs.join(","));
    nb.switches.insert(JOIN_SWITCH.into(), Parent::owned(join));
    let mut networks = vec![format!(
        "{}/{}",
        cfg.join_gateway,
        cfg.join_cidr.prefix_len()
    )];
    if let Some(v6) = &cfg.join_v6 {
        networks.push(format!("{}/{}", v6.gateway, v6.cidr.prefix_len()));
    }
    router_link(cfg, nb, JOIN_SWITCH, &networks, "join");
}
