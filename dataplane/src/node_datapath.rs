//! The agent's side of the datapath: running a [`crate::datapath`] pass and reporting it
//! (Node annotation, events, metrics), choosing each veth pod's port type, and the
//! per-port AF_XDP → kernel fallback at attach.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::agent::{Agent, pod_port_spec};
use crate::datapath::manager::PassOutcome;
use crate::datapath::{Datapath, STATUS_ANNOTATION};
use crate::report::{AgentEvent, EventType, Subject};
use crate::state::SandboxRecord;

/// How long an AF_XDP port may take to open (ofport assigned, or an error) before the
/// agent gives up on it and uses the kernel path.
pub const AFXDP_OPEN_WAIT: Duration = Duration::from_secs(5);

/// `external_ids` key on a pod's OVS Interface: the datapath its port runs.
pub const PORT_DATAPATH_KEY: &str = "zstack.io/datapath";
/// `external_ids` key: why (the pod's request, the node's default, or a fallback).
pub const PORT_REASON_KEY: &str = "zstack.io/datapath-reason";

impl Agent {
    /// One datapath pass (see [`crate::datapath::manager`]) and its report. Returns the
    /// outcome (`None` when the pass could not read the Node).
    pub async fn datapath_pass(&self) -> PassOutcome {
        let ann = match self.pods.node_annotations(&self.cfg.node_name).await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "datapath: node annotations unavailable; using the agent's config only");
                None
            }
        };
        let mut out = self.datapath.pass(&self.ovs, ann.as_ref()).await;
        self.add_vswitchd_facts(&mut out.status).await;
        self.report_datapath(&out, ann.as_ref()).await;
        out
    }

    /// What only ovs-vswitchd itself can say (over its unixctl socket): its version when
    /// the database does not carry it, and the PMD threads it runs.
    async fn add_vswitchd_facts(&self, s: &mut crate::datapath::DatapathStatus) {
        let Some(ctl) = &self.cfg.vswitchd_ctl else {
            return;
        };
        let c = crate::unixctl::Unixctl::new(ctl).with_timeout(Duration::from_secs(2));
        if s.ovs_version.is_none()
            && let Ok(v) = c.call("version", &[]).await
        {
            s.ovs_version = v.lines().next().map(|l| l.trim().to_string());
        }
        match c.call("dpif-netdev/pmd-rxq-show", &[]).await {
            Ok(text) => match crate::pmd_stats::parse_pmd_rxq(&text) {
                Ok(show) => {
                    s.pmd_threads = show
                        .pmds
                        .iter()
                        .map(|p| crate::datapath::status::PmdCpu {
                            cpu: p.core,
                            numa: p.numa,
                        })
                        .collect();
                }
                Err(e) => tracing::debug!(error = %e, "pmd-rxq-show unreadable"),
            },
            Err(e) => tracing::debug!(error = %e, "ovs-vswitchd unixctl unavailable"),
        }
    }

    async fn report_datapath(&self, out: &PassOutcome, ann: Option<&BTreeMap<String, String>>) {
        let s = &out.status;
        self.metrics.set_datapath(s.datapath.as_str());
        for f in &out.new_fallbacks {
            self.metrics.datapath_fallback(&f.reason);
            tracing::warn!(from = %f.from, to = %f.to, reason = %f.reason, detail = %f.detail, "datapath fallback");
            self.node_event(
                EventType::Warning,
                "DatapathFallback",
                format!("{} → {}: {}", f.from, f.to, f.detail),
            )
            .await;
        }
        for e in &out.new_errors {
            tracing::warn!(error = %e, "datapath configuration error");
            self.node_event(EventType::Warning, "DatapathConfigError", e.clone())
                .await;
        }
        if out.changed {
            tracing::info!(datapath = %s.datapath, reason = %s.reason, pmd_cpus = %s.pmd_cpus,
                dpdk_initialized = s.dpdk_initialized, tso = s.userspace_tso, "datapath decided");
            self.node_event(
                EventType::Normal,
                "DatapathSelected",
                format!("{}: {}", s.datapath, s.reason),
            )
            .await;
        }
        if !s.restart_required.is_empty() && out.changed {
            self.node_event(
                EventType::Warning,
                "VswitchdRestartRequired",
                format!(
                    "ovs-vswitchd must be restarted to apply {}",
                    s.restart_required.join(", ")
                ),
            )
            .await;
        }
        let json = s.to_json();
        let current = ann.and_then(|a| a.get(STATUS_ANNOTATION));
        let same = current
            .and_then(|c| serde_json::from_str::<crate::datapath::DatapathStatus>(c).ok())
            .is_some_and(|c| c.same_decision(s));
        if !same || out.changed {
            let a = BTreeMap::from([(STATUS_ANNOTATION.to_string(), json)]);
            if let Err(e) = self.pods.annotate_node(&self.cfg.node_name, &a).await {
                tracing::warn!(error = %e, "could not write the datapath status annotation");
            }
        }
    }

    async fn node_event(&self, t: EventType, reason: &str, message: String) {
        self.event(
            Subject::Node(self.cfg.node_name.clone()),
            t,
            reason,
            message,
        )
        .await;
    }

    /// An event on a pod.
    pub async fn pod_event(
        &self,
        ns: &str,
        name: &str,
        t: EventType,
        reason: &str,
        message: String,
    ) {
        let subject = Subject::Pod {
            namespace: ns.into(),
            name: name.into(),
        };
        self.event(subject, t, reason, message).await;
    }

    /// Records an event (best effort: a failure is logged at debug level).
    pub async fn event(&self, subject: Subject, t: EventType, reason: &str, message: String) {
        let ev = AgentEvent {
            subject,
            event_type: t,
            reason: reason.into(),
            message,
            node: self.cfg.node_name.clone(),
        };
        if let Err(e) = self.pods.event(&ev).await {
            tracing::debug!(error = %e, reason, "event not recorded");
        }
    }

    /// Sets the record's datapath for a new veth port (node default or the pod's
    /// request); a request the node cannot honour is reported on the pod.
    pub async fn choose_port(
        &self,
        rec: &mut SandboxRecord,
        pod_annotations: &BTreeMap<String, String>,
    ) {
        let c = self.datapath.port_choice(pod_annotations);
        if let Some(w) = &c.warning {
            tracing::warn!(pod = %format!("{}/{}", rec.pod_namespace, rec.pod_name), warning = %w, "datapath request not honoured");
            self.pod_event(
                &rec.pod_namespace,
                &rec.pod_name,
                EventType::Warning,
                "DatapathRequestIgnored",
                w.clone(),
            )
            .await;
        }
        rec.datapath = Some(c.datapath);
        rec.datapath_reason = Some(c.reason);
        rec.afxdp = match c.datapath {
            Datapath::Afxdp => self.datapath.decision().map(|d| d.afxdp),
            _ => None,
        };
    }

    /// After the OVS port of `rec` was added: an AF_XDP port must open (ofport assigned)
    /// within [`AFXDP_OPEN_WAIT`]; if ovs-vswitchd reports an error instead, the port is
    /// switched to the kernel path in place, and that is reported (pod event, metric,
    /// the port's `external_ids`). Returns whether the record changed.
    pub async fn confirm_port(&self, rec: &mut SandboxRecord) -> bool {
        if rec.datapath != Some(Datapath::Afxdp) {
            return false;
        }
        let name = rec.host_ifname.clone();
        let opened = self.ovs.wait_settled(&name, AFXDP_OPEN_WAIT).await;
        let iface = self.ovs.interface(&rec.host_ifname);
        let error = match (&iface, opened) {
            (Some(i), true) if i.error.is_none() => return false,
            (Some(i), _) => i
                .error
                .clone()
                .unwrap_or_else(|| format!("no ofport after {} s", AFXDP_OPEN_WAIT.as_secs())),
            (None, _) => "the interface vanished".into(),
        };
        let detail = format!(
            "AF_XDP port {} could not be opened ({error}): using the kernel path",
            rec.host_ifname
        );
        tracing::warn!(pod = %format!("{}/{}", rec.pod_namespace, rec.pod_name), %detail, "per-port datapath fallback");
        self.metrics.datapath_fallback("afxdp_port");
        rec.datapath = Some(Datapath::Kernel);
        rec.datapath_reason = Some(format!("fallback: {error}"));
        rec.afxdp = None;
        if let Err(e) = self.ovs.ensure_port(&pod_port_spec(rec)).await {
            tracing::warn!(error = %e, "switching the port to the kernel path failed");
        }
        self.pod_event(
            &rec.pod_namespace,
            &rec.pod_name,
            EventType::Warning,
            "DatapathFallback",
            detail,
        )
        .await;
        true
    }
}
