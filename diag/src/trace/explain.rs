//! A logical trace in Kubernetes terms: which NetworkPolicy (and rule) behind the ACL that
//! decided, which Service and backend the load balancer chose, which route and router
//! policy carried the packet, and where it ended (a pod, a node, the outside).

use serde::Serialize;

use super::nb_view::NbView;
use super::ovn_trace::{End, LogicalTrace, Stage};

use api::external_ids::nb::{ACL as RULE, KIND, OBJECT, PLATFORM_ACL, PLATFORM_GROUP};

/// What decided, step by step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Finding {
    /// An ACL of a NetworkPolicy rule admitted the packet.
    PolicyAllowed {
        policy: String,
        rule: String,
        direction: String,
    },
    /// Dropped by the default deny of isolated pods: `pod` is selected by `isolated_by`
    /// for `direction` and no rule of those admits the packet.
    PolicyDenied {
        pod: String,
        direction: String,
        isolated_by: Vec<String>,
    },
    /// Dropped by an ACL that is not a NetworkPolicy's default deny.
    AclDropped { acl: String, object: String },
    /// An ACL of a platform's security group (external mode: a Port_Group not ours, the
    /// pod joined through its Subnet's `securityGroups`) decided.
    SecurityGroup {
        group: String,
        /// The ACL's name, else its match.
        acl: String,
        priority: i64,
        allowed: bool,
        direction: String,
        /// The NetworkPolicy rule (`ns/name` rule) that agreed, when a NetworkPolicy also
        /// governs the pod (the controller's mirror of the platform's rule decided).
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<String>,
    },
    /// A Service's load balancer picked a backend.
    LoadBalanced {
        service: String,
        vip: String,
        backend: String,
        backends: Vec<String>,
    },
    /// A router policy rerouted the packet (egress through a node).
    Rerouted {
        router: String,
        nexthop: String,
        object: String,
        why: String,
    },
    /// A router's route carried the packet.
    Routed { router: String, route: String },
    /// The packet left through `port`, which is `what`.
    Delivered { port: String, what: String },
    /// Dropped at a stage this module has no better words for.
    DroppedAt {
        datapath: String,
        stage: String,
        why: String,
    },
}

impl Finding {
    /// One line for the verdict.
    pub fn sentence(&self) -> String {
        match self {
            Finding::PolicyAllowed {
                policy,
                rule,
                direction,
            } => format!("{direction} allowed by NetworkPolicy {policy} (rule {rule})"),
            Finding::PolicyDenied {
                pod,
                direction,
                isolated_by,
            } => format!(
                "pod {pod} is isolated for {direction} by NetworkPolicy {} and no rule admits this packet",
                isolated_by.join(", ")
            ),
            Finding::AclDropped { acl, object } => format!("dropped by ACL {acl} ({object})"),
            Finding::SecurityGroup {
                group,
                acl,
                priority,
                allowed,
                direction,
                policy,
            } => format!(
                "{direction} {} by the platform's security group {group}: ACL {acl} (priority {priority}){}",
                if *allowed { "allowed" } else { "dropped" },
                policy
                    .as_ref()
                    .map(|p| format!(", and by NetworkPolicy {p}"))
                    .unwrap_or_default()
            ),
            Finding::LoadBalanced {
                service,
                vip,
                backend,
                ..
            } => format!("Service {service} ({vip}) chose backend {backend}"),
            Finding::Rerouted {
                router,
                nexthop,
                object,
                why,
            } if why.starts_with("egress-node ") => {
                format!("{router} sent it out through node {object} ({nexthop}, {why})")
            }
            Finding::Rerouted {
                router,
                nexthop,
                why,
                ..
            } => format!("{router} rerouted it to {nexthop} ({why})"),
            Finding::Routed { router, route } => format!("{router} routed it ({route})"),
            Finding::Delivered { what, .. } => format!("delivered to {what}"),
            Finding::DroppedAt {
                datapath,
                stage,
                why,
            } => format!("dropped in {datapath} at {stage}: {why}"),
        }
    }
}

/// The ACL match inside an ACL stage's logical flow match (`reg0[9] == 1 && (M)` → `M`).
fn acl_match(flow_match: &str) -> &str {
    match flow_match.split_once(" && (") {
        Some((pre, rest)) if pre.starts_with("reg0[") => rest.strip_suffix(')').unwrap_or(rest),
        _ => flow_match,
    }
}

/// The VIP (`ip:port`, `[ip6]:port`) a load-balancing stage works on: its actions load
/// the VIP into `reg1`/`xxreg1` and the port into `reg2[0..15]` before `ct_lb_mark`, or
/// name the backends directly (`ct_lb_mark(backends=...)`, the VIP then in the match).
fn lb_vip(s: &Stage) -> Option<String> {
    if !s.actions.iter().any(|a| a.starts_with("ct_lb")) {
        return None;
    }
    let val = |prefix: &str| {
        s.actions.iter().find_map(|a| {
            a.strip_prefix(prefix)
                .map(|v| v.trim_end_matches(';').trim().to_string())
        })
    };
    let from_match = |field: &str| {
        s.match_
            .split(" && ")
            .find_map(|c| c.trim().strip_prefix(field).map(|v| v.trim().to_string()))
    };
    let ip = val("reg1 = ")
        .or_else(|| val("xxreg1 = "))
        .or_else(|| from_match("ip4.dst == "))
        .or_else(|| from_match("ip6.dst == "))?;
    let port = val("reg2[0..15] = ").or_else(|| {
        ["tcp.dst == ", "udp.dst == ", "sctp.dst == "]
            .into_iter()
            .find_map(from_match)
    })?;
    Some(if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    })
}

fn is_acl_stage(s: &Stage) -> bool {
    matches!(
        s.name.as_str(),
        "ls_in_acl" | "ls_out_acl" | "ls_in_acl_after_lb"
    )
}

/// The NB ACL behind an ACL stage (northd puts ACL priority P at flow priority P + 1000).
fn acl_of<'a>(nb: &'a NbView, s: &Stage) -> Option<&'a ovsdb::nb::Acl> {
    let m = acl_match(&s.match_);
    nb.acls
        .iter()
        .find(|a| a.match_ == m && i64::from(s.priority) == a.priority + 1000)
}

/// The platform's security group holding `acl`: a Port_Group without our marks (ours all
/// carry `zstack.io/kind`).
fn platform_group_of<'a>(nb: &'a NbView, acl: &ovsdb::nb::Acl) -> Option<&'a ovsdb::nb::PortGroup> {
    nb.port_groups
        .iter()
        .find(|g| g.acls.contains(&acl.uuid) && !g.external_ids.contains_key(KIND))
}

/// `<ns>/<name>/<rule>` → (`ns/name`, `rule`).
fn policy_rule(s: &str) -> Option<(String, String)> {
    let mut it = s.splitn(3, '/');
    let (ns, name, rule) = (it.next()?, it.next()?, it.next()?);
    Some((format!("{ns}/{name}"), rule.to_string()))
}

/// Our mirror of a platform security group's rule (a pod both in the group and isolated
/// by a NetworkPolicy): named as the platform's rule, with the policy rule that agreed.
fn platform_mirror(
    nb: &NbView,
    acl: &ovsdb::nb::Acl,
    rule: &str,
    allowed: bool,
    direction: &str,
) -> Option<Finding> {
    let group = acl.external_ids.get(PLATFORM_GROUP)?;
    let theirs = acl
        .external_ids
        .get(PLATFORM_ACL)
        .and_then(|u| nb.acls.iter().find(|a| a.uuid.to_string() == *u));
    // `sg/<uuid>/<ns>/<name>/<rule>` for an allow, `sg/<uuid>` for a drop
    let policy = rule
        .strip_prefix("sg/")
        .and_then(|r| r.split_once('/'))
        .and_then(|(_, p)| policy_rule(p))
        .map(|(p, r)| format!("{p} (rule {r})"));
    Some(Finding::SecurityGroup {
        group: group.clone(),
        acl: theirs
            .map(|a| a.name.clone().unwrap_or_else(|| a.match_.clone()))
            .unwrap_or_else(|| format!("{} (gone from the platform)", acl.match_)),
        priority: theirs.map_or(acl.priority, |a| a.priority),
        allowed,
        direction: direction.into(),
        policy,
    })
}

/// `ingress` for the egress pipeline's (to-lport) ACLs, `egress` for the ingress one's.
fn direction(s: &Stage) -> &'static str {
    if s.pipeline == "egress" {
        "ingress"
    } else {
        "egress"
    }
}

/// The NetworkPolicies selecting `lsp` with ACLs of `dir` (`to-lport` for ingress).
fn isolating(nb: &NbView, lsp: &str, dir: &str) -> Vec<String> {
    let Some(port) = nb.switch_port(lsp) else {
        return Vec::new();
    };
    let want = if dir == "ingress" {
        "to-lport"
    } else {
        "from-lport"
    };
    let mut out: Vec<String> = nb
        .port_groups
        .iter()
        .filter(|g| g.ports.contains(&port.uuid))
        .filter(|g| {
            g.external_ids.get(KIND).map(String::as_str) == Some(api::external_ids::kind::NETPOL)
        })
        .filter(|g| {
            nb.acls
                .iter()
                .any(|a| g.acls.contains(&a.uuid) && a.direction == want)
        })
        .filter_map(|g| g.external_ids.get(OBJECT).cloned())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `namespace/name` of the pod behind logical switch port `lsp`, or what else it is.
pub fn port_owner(nb: &NbView, lsp: &str) -> String {
    let Some(p) = nb.switch_port(lsp) else {
        return format!("port {lsp}");
    };
    if p.type_ == "localnet" {
        return format!(
            "the underlay (localnet {lsp}, network {})",
            p.options.get("network_name").map_or("?", String::as_str)
        );
    }
    if let Some(node) = lsp.strip_prefix("node-") {
        return format!("node {node}'s management port");
    }
    match p.external_ids.get(OBJECT) {
        Some(o)
            if p.external_ids.get(KIND).map(String::as_str)
                == Some(api::external_ids::kind::POD) =>
        {
            format!("pod {o}")
        }
        Some(o) => format!("{o} ({lsp})"),
        None => format!("port {lsp}"),
    }
}

/// The findings of `trace`, in path order. `lb_backend`: the backend the trace let the
/// load balancer pick.
pub fn explain(nb: &NbView, trace: &LogicalTrace, lb_backend: Option<&str>) -> Vec<Finding> {
    let mut out = Vec::new();
    for s in &trace.stages {
        if is_acl_stage(s) {
            let Some(acl) = acl_of(nb, s) else { continue };
            let object = acl.external_ids.get(OBJECT).cloned().unwrap_or_default();
            let kind = acl.external_ids.get(KIND).map(String::as_str);
            let rule = acl.external_ids.get(RULE).cloned().unwrap_or_default();
            let dropped = s.actions.iter().any(|a| a == "drop;");
            if let Some(group) = platform_group_of(nb, acl) {
                out.push(Finding::SecurityGroup {
                    group: group.name.clone(),
                    acl: acl.name.clone().unwrap_or_else(|| acl.match_.clone()),
                    priority: acl.priority,
                    allowed: !dropped,
                    direction: direction(s).into(),
                    policy: None,
                });
                continue;
            }
            if let Some(f) = platform_mirror(nb, acl, &rule, !dropped, direction(s)) {
                out.push(f);
                continue;
            }
            // a policy rule under the platform's groups: `rule/<ns>/<name>/<rule>`
            let (object, rule) = match rule.strip_prefix("rule/").and_then(policy_rule) {
                Some((p, r)) => (p, r),
                None => (object, rule),
            };
            match (kind, dropped) {
                (Some("netpol-acl"), true) if rule == "deny" => {
                    let lsp = s.outport.clone().unwrap_or_default();
                    let dir = direction(s);
                    out.push(Finding::PolicyDenied {
                        pod: port_owner(nb, &lsp).trim_start_matches("pod ").to_string(),
                        direction: dir.into(),
                        isolated_by: isolating(nb, &lsp, dir),
                    });
                }
                (Some("netpol-acl"), false) => out.push(Finding::PolicyAllowed {
                    policy: object,
                    rule,
                    direction: direction(s).into(),
                }),
                (_, true) => out.push(Finding::AclDropped {
                    acl: acl.name.clone().unwrap_or_else(|| acl.match_.clone()),
                    object,
                }),
                _ => {}
            }
            continue;
        }
        if let Some(vip) = lb_vip(s)
            && !out
                .iter()
                .any(|f| matches!(f, Finding::LoadBalanced { vip: v, .. } if *v == vip))
        {
            let lb = nb
                .load_balancers
                .iter()
                .find(|lb| lb.vips.contains_key(&vip));
            let backends: Vec<String> = lb
                .and_then(|lb| lb.vips.get(&vip))
                .map(|b| b.split(',').map(str::to_string).collect())
                .unwrap_or_default();
            out.push(Finding::LoadBalanced {
                service: lb
                    .and_then(|l| l.external_ids.get(OBJECT).cloned())
                    .unwrap_or_else(|| "?".into()),
                backend: lb_backend
                    .map(str::to_string)
                    .or_else(|| backends.first().cloned())
                    .unwrap_or_else(|| "none (no ready endpoint)".into()),
                vip,
                backends,
            });
            continue;
        }
        if s.name == "lr_in_policy"
            && s.actions
                .iter()
                .any(|a| a.starts_with("reg0 = ") || a.contains("reroute"))
        {
            if let Some(p) = nb.policies.iter().find(|p| {
                p.match_ == s.match_ && i64::from(s.priority) == p.priority && p.action == "reroute"
            }) {
                out.push(Finding::Rerouted {
                    router: s.datapath.clone(),
                    nexthop: p.nexthops.iter().cloned().collect::<Vec<_>>().join(","),
                    object: p.external_ids.get(OBJECT).cloned().unwrap_or_default(),
                    why: p
                        .external_ids
                        .get(KIND)
                        .map(|k| format!("{k} policy, priority {}", p.priority))
                        .unwrap_or_else(|| format!("policy {}", p.match_)),
                });
            }
            continue;
        }
        if s.name == "lr_in_ip_routing" {
            out.push(Finding::Routed {
                router: s.datapath.clone(),
                route: s.match_.clone(),
            });
        }
    }
    match &trace.end {
        End::Output { port, .. } => out.push(Finding::Delivered {
            port: port.clone(),
            what: port_owner(nb, port),
        }),
        End::Dropped => {
            let explained = out
                .iter()
                .any(|f| matches!(f, Finding::PolicyDenied { .. } | Finding::AclDropped { .. }));
            if !explained && let Some(last) = trace.stages.last() {
                let why =
                    if last.name.starts_with("lr_in_ip_routing") || last.name == "lr_in_policy" {
                        "no route to the destination".to_string()
                    } else if last.name == "ls_in_l2_unknown" || last.name == "ls_in_l2_lkup" {
                        "no port of the switch has the destination MAC".to_string()
                    } else {
                        format!("{} (priority {})", last.match_, last.priority)
                    };
                out.push(Finding::DroppedAt {
                    datapath: last.datapath.clone(),
                    stage: last.name.clone(),
                    why,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vip_of_a_load_balancing_stage() {
        let st = |m: &str, actions: &[&str]| Stage {
            datapath: "s".into(),
            pipeline: "ingress".into(),
            outport: None,
            table: 6,
            name: "ls_in_pre_stateful".into(),
            match_: m.into(),
            priority: 120,
            uuid: "1".into(),
            actions: actions.iter().map(|a| a.to_string()).collect(),
        };
        assert_eq!(
            lb_vip(&st(
                "reg0[2] == 1 && ip4.dst == 10.96.0.10 && tcp.dst == 80",
                &["reg1 = 10.96.0.10;", "reg2[0..15] = 80;", "ct_lb_mark;"]
            ))
            .as_deref(),
            Some("10.96.0.10:80")
        );
        assert_eq!(
            lb_vip(&st(
                "ct.new && ip6.dst == fd00:10:96::a && udp.dst == 53",
                &["ct_lb_mark(backends=[fd00::4]:53);"]
            ))
            .as_deref(),
            Some("[fd00:10:96::a]:53")
        );
        assert_eq!(lb_vip(&st("ip", &["next;"])), None);
    }

    #[test]
    fn a_platform_security_group_is_named_with_its_rule() {
        use std::collections::{BTreeMap, BTreeSet};
        let acl = |prio: i64, m: &str, action: &str| ovsdb::nb::Acl {
            uuid: ovsdb::Uuid::new_v4(),
            priority: prio,
            match_: m.into(),
            action: action.into(),
            direction: "to-lport".into(),
            ..Default::default()
        };
        let deny = acl(1000, "outport == @sg_web && ip4", "drop");
        let allow22 = acl(1001, "outport == @sg_web && tcp.dst == 22", "allow-related");
        let ours = acl(900, "outport == @np_deny && ip", "drop");
        let group =
            |name: &str, acls: &[&ovsdb::nb::Acl], kind: Option<&str>| ovsdb::nb::PortGroup {
                uuid: ovsdb::Uuid::new_v4(),
                name: name.into(),
                acls: acls.iter().map(|a| a.uuid).collect::<BTreeSet<_>>(),
                external_ids: kind
                    .map(|k| BTreeMap::from([(KIND.to_string(), k.to_string())]))
                    .unwrap_or_default(),
                ..Default::default()
            };
        let nb = NbView {
            acls: vec![deny.clone(), allow22.clone(), ours.clone()],
            port_groups: vec![
                group("sg_web", &[&deny, &allow22], None),
                group("np_deny", &[&ours], Some("netpol")),
            ],
            ..Default::default()
        };
        let stage = |a: &ovsdb::nb::Acl, actions: &[&str]| Stage {
            datapath: "platform-ls".into(),
            pipeline: "egress".into(),
            outport: Some("default_p1".into()),
            table: 4,
            name: "ls_out_acl".into(),
            match_: format!("reg0[7] == 1 && ({})", a.match_),
            priority: u32::try_from(a.priority + 1000).unwrap(),
            uuid: "1".into(),
            actions: actions.iter().map(|x| x.to_string()).collect(),
        };
        let trace = |st: Stage| LogicalTrace {
            stages: vec![st],
            end: End::Dropped,
            outputs: Vec::new(),
        };
        let f = explain(&nb, &trace(stage(&deny, &["drop;"])), None);
        assert_eq!(
            f[0].sentence(),
            "ingress dropped by the platform's security group sg_web: ACL outport == @sg_web && ip4 (priority 1000)"
        );
        let f = explain(&nb, &trace(stage(&allow22, &["next;"])), None);
        assert_eq!(
            f[0].sentence(),
            "ingress allowed by the platform's security group sg_web: ACL outport == @sg_web && tcp.dst == 22 (priority 1001)"
        );
        // our own groups are not the platform's
        let f = explain(&nb, &trace(stage(&ours, &["drop;"])), None);
        assert!(
            !matches!(f.first(), Some(Finding::SecurityGroup { .. })),
            "{f:?}"
        );
        // our mirror of the platform's rule under a NetworkPolicy: named as theirs
        let mut mirror = acl(
            30003,
            "(outport == @sg_web && tcp.dst == 22) && (outport == @np_web && ip)",
            "allow-related",
        );
        mirror.external_ids = BTreeMap::from([
            (KIND.to_string(), "netpol-acl".to_string()),
            (
                RULE.to_string(),
                format!("sg/{}/default/web/ingress[0]", allow22.uuid),
            ),
            (PLATFORM_GROUP.to_string(), "sg_web".to_string()),
            (PLATFORM_ACL.to_string(), allow22.uuid.to_string()),
        ]);
        let mut nb = nb;
        nb.acls.push(mirror.clone());
        let f = explain(&nb, &trace(stage(&mirror, &["next;"])), None);
        assert_eq!(
            f[0].sentence(),
            "ingress allowed by the platform's security group sg_web: ACL outport == @sg_web && \
             tcp.dst == 22 (priority 1001), and by NetworkPolicy default/web (rule ingress[0])"
        );
        // a policy rule alone under the groups names its policy
        let mut alone = acl(30001, "outport == @np_web && ip", "allow-related");
        alone.external_ids = BTreeMap::from([
            (KIND.to_string(), "netpol-acl".to_string()),
            (RULE.to_string(), "rule/default/web/ingress[0]".to_string()),
        ]);
        nb.acls.push(alone.clone());
        let f = explain(&nb, &trace(stage(&alone, &["next;"])), None);
        assert_eq!(
            f[0].sentence(),
            "ingress allowed by NetworkPolicy default/web (rule ingress[0])"
        );
    }

    #[test]
    fn the_acl_match_is_read_out_of_the_flow_match() {
        assert_eq!(
            acl_match("reg0[9] == 1 && (outport == @np_a1 && ip)"),
            "outport == @np_a1 && ip"
        );
        assert_eq!(acl_match("ip && !ct.est"), "ip && !ct.est");
    }
}
