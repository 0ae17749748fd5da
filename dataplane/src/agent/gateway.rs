//! The agent's `shared` gateway pass ([`Agent::gateway_pass`]): the Node's gateway
//! report ([`crate::host::gateway`]), its events, and the gateway bridge's rules
//! ([`crate::host::gateway_flows`]) once ovn-controller plugged the router's patch port in.

use std::collections::BTreeMap;

use super::Agent;

/// What the gateway pass remembers: the last error reported, and the bridge rules last
/// applied.
#[derive(Default)]
pub(super) struct GatewayState {
    pub(super) error: Option<Option<String>>,
    pub(super) applied: Vec<String>,
}

impl Agent {
    /// `shared` gateway mode: reports the gateway bridge on the Node (and a changed error
    /// as an event), and once ovn-controller plugged the gateway router's patch port into
    /// the bridge, keeps the bridge's rules ([`crate::host::gateway_flows`]).
    pub async fn gateway_pass(&self) {
        use crate::agent::report::EventType;
        use crate::host::gateway_flows as gf;
        let Some(cfg) = &self.cfg.gateway else {
            // once: rules a `shared` agent left on a bridge before this one started
            let first = {
                let mut st = self.gateway_state.lock().unwrap_or_else(|e| e.into_inner());
                st.error.replace(None).is_none()
            };
            if first {
                self.gateway_rules_off_except(None).await;
            }
            return;
        };
        let node = self.cfg.node_name.as_str();
        let report = crate::host::gateway::discover(cfg);
        let json = serde_json::to_string(&report).unwrap_or_default();
        match self.ctx.pods().node_annotations(node).await {
            Ok(Some(ann)) if ann.get(api::keys::NODE_GATEWAY) == Some(&json) => {}
            Ok(Some(_)) => {
                let a = BTreeMap::from([(api::keys::NODE_GATEWAY.to_string(), json)]);
                if let Err(e) = self.ctx.pods().annotate_node(node, &a).await {
                    tracing::warn!(error = %e, "could not write the gateway annotation");
                }
            }
            Ok(None) => return,
            Err(e) => tracing::warn!(error = %e, "Node not read: gateway annotation unchanged"),
        }
        let changed = {
            let mut st = self.gateway_state.lock().unwrap_or_else(|e| e.into_inner());
            let changed = st.error.as_ref() != Some(&report.error);
            st.error = Some(report.error.clone());
            changed
        };
        if changed {
            // rules of ours on any other bridge are from an earlier configuration
            self.gateway_rules_off_except(report.error.is_none().then_some(cfg.interface.as_str()))
                .await;
            match &report.error {
                Some(e) => {
                    tracing::warn!(error = %e, "no gateway router for this node: its pods leave through the management port");
                    self.ctx
                        .node_event(
                            EventType::Warning,
                            "GatewayConfigError",
                            format!("{e}: this node's pods leave through its management port"),
                        )
                        .await;
                }
                None => {
                    tracing::info!(interface = %cfg.interface, address = ?report.ipv4, next_hop = ?report.next_hop_v4, "gateway bridge reported (shared gateway mode)");
                    self.ctx
                        .node_event(
                            EventType::Normal,
                            "GatewaySelected",
                            format!(
                                "shared gateway on {} ({}), next hop {}; {}",
                                cfg.interface,
                                report.ipv4.map(|n| n.to_string()).unwrap_or_default(),
                                report
                                    .next_hop_v4
                                    .map(|n| n.to_string())
                                    .unwrap_or_default(),
                                match report.usable_v6() {
                                    Some((a, hop)) => format!("IPv6 {a}, next hop {hop}"),
                                    None => "no IPv6 address or next hop: the pods' IPv6 leaves through the management port".into(),
                                }
                            ),
                        )
                        .await;
                }
            }
        }
        let Ok((address, mac, _)) = report.usable_v4() else {
            return;
        };
        let ifaces = self.ovs.bridge_interfaces(&cfg.interface);
        let patch_name = api::gateway::gateway_patch_port(node);
        let Some(patch) = ifaces
            .iter()
            .find(|(n, _, _)| *n == patch_name)
            .and_then(|(_, _, o)| *o)
        else {
            // no gateway router (yet, or any more: the node's router was removed)
            let had = !std::mem::take(
                &mut self
                    .gateway_state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .applied,
            )
            .is_empty();
            if had {
                self.gateway_rules_off_except(None).await;
            }
            tracing::debug!(port = %patch_name, "gateway: waiting for ovn-controller's patch port");
            return;
        };
        let uplinks: Vec<&(String, String, Option<i64>)> = ifaces
            .iter()
            .filter(|(n, t, _)| *n != cfg.interface && t != "patch" && t != "internal")
            .collect();
        let [(uplink_name, _, Some(uplink))] = uplinks.as_slice() else {
            tracing::warn!(bridge = %cfg.interface, uplinks = ?uplinks, "gateway: the bridge must hold exactly one uplink port");
            return;
        };
        crate::host::gateway::keep_kernel_off_uplink(uplink_name);
        let pod_cidrs = match self.ctx.pods().subnet_cidrs().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "Subnets not read: gateway bridge rules unchanged");
                return;
            }
        };
        let want = gf::flows(&gf::GatewayPorts {
            uplink: *uplink,
            patch,
            mac: mac.to_string(),
            address: address.addr(),
            address6: report.usable_v6().map(|(a, _)| a.addr()),
            pod_cidrs,
        });
        let target = gf::target(
            &gf::rundir(self.cfg.vswitchd_ctl.as_deref()),
            &cfg.interface,
        );
        let applied = self
            .gateway_state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .applied
            .clone();
        let (w, t) = (want.clone(), target.clone());
        let r = tokio::task::spawn_blocking(move || {
            // a restarted ovs-vswitchd or a foreign del-flows leaves fewer rules
            if applied == w && gf::installed(&t)? == w.len() {
                return Ok(false);
            }
            gf::replace(&t, &w).map(|()| true)
        })
        .await;
        match r {
            Ok(Ok(true)) => {
                tracing::info!(bridge = %cfg.interface, uplink = %uplink_name, patch = %patch_name, rules = want.len(), "gateway bridge rules applied");
                self.gateway_state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .applied = want;
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "gateway bridge rules not applied"),
            Err(e) => tracing::warn!(error = %e, "gateway bridge rules task failed"),
        }
    }

    /// Removes our gateway rules from every bridge but `keep` (and br-int, which never has
    /// them).
    async fn gateway_rules_off_except(&self, keep: Option<&str>) {
        use crate::host::gateway_flows as gf;
        let rundir = gf::rundir(self.cfg.vswitchd_ctl.as_deref());
        let bridges: Vec<String> = self
            .ovs
            .bridge_names()
            .into_iter()
            .filter(|b| Some(b.as_str()) != keep && b != "br-int")
            .collect();
        let r = tokio::task::spawn_blocking(move || {
            for b in bridges {
                let t = gf::target(&rundir, &b);
                if gf::installed(&t).unwrap_or(0) > 0 {
                    match gf::replace(&t, &[]) {
                        Ok(()) => tracing::info!(bridge = %b, "gateway: our rules removed (not the gateway bridge now)"),
                        Err(e) => tracing::warn!(bridge = %b, error = %e, "gateway: stale rules not removed"),
                    }
                }
            }
        })
        .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, "gateway rules clean-up task failed");
        }
    }

    /// `shared` mode whose bridge rules are not applied yet.
    pub(super) fn gateway_pending(&self) -> bool {
        self.cfg.gateway.is_some()
            && self
                .gateway_state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .applied
                .is_empty()
    }
}
