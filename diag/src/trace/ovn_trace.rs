//! Running `ovn-trace --detailed` and reading its output: the logical stages a packet
//! went through (datapath, pipeline, table, stage, match, priority, actions) and where it
//! ended (output to a port, or dropped).

use serde::Serialize;

use super::TraceError;
use super::backend::Backend;

/// One logical flow the packet hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stage {
    /// The logical datapath (`subnet-svc`, `ovn_cluster_router`, ...).
    pub datapath: String,
    /// `ingress` or `egress`.
    pub pipeline: String,
    /// The logical output port of an egress pipeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outport: Option<String>,
    pub table: u32,
    /// `ls_in_acl`, `lr_in_ip_routing`, ...
    pub name: String,
    #[serde(rename = "match")]
    pub match_: String,
    pub priority: u32,
    /// The first hex digits of the Southbound `Logical_Flow` row.
    pub uuid: String,
    pub actions: Vec<String>,
}

/// Where the trace ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum End {
    /// Sent out of a logical port that is not a patch between datapaths.
    Output { port: String, port_type: String },
    /// Dropped (`drop;`, or no stage sent it on) after the last stage.
    Dropped,
}

/// A parsed trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogicalTrace {
    pub stages: Vec<Stage>,
    pub end: End,
    /// Every `output to` on the way (patch ports between datapaths included).
    pub outputs: Vec<(String, String)>,
}

/// Runs `ovn-trace --detailed` through the backend (its Southbound database) for `flow`
/// entering `datapath`. `lb_dst`: the backend a load balancer picks (`--lb-dst`).
pub fn run(
    b: &mut dyn Backend,
    datapath: &str,
    flow: &str,
    lb_dst: Option<&str>,
) -> Result<String, TraceError> {
    let mut args = vec!["--detailed".to_string()];
    // a fresh connection: every conntrack lookup on the way sees a new one
    for _ in 0..6 {
        args.push("--ct=new".into());
    }
    if let Some(l) = lb_dst {
        args.push(format!("--lb-dst={l}"));
    }
    args.push(datapath.into());
    args.push(flow.into());
    b.ovn_trace(&args)
}

fn header(line: &str) -> Option<(String, String, Option<String>)> {
    let t = line.trim();
    let pipeline = ["ingress", "egress"]
        .into_iter()
        .find(|p| t.starts_with(&format!("{p}(dp=\"")))?;
    let rest = &t[pipeline.len() + 5..];
    let dp = rest.split('"').next()?;
    let outport = rest
        .split_once("outport=\"")
        .and_then(|(_, r)| r.split('"').next())
        .map(str::to_string);
    Some((pipeline.to_string(), dp.to_string(), outport))
}

/// ` 8. ls_in_acl (northd.c:6809): MATCH, priority 1, uuid 6d334190`.
fn stage_line(line: &str) -> Option<(u32, String, String, u32, String)> {
    let t = line.trim_start();
    let (num, rest) = t.split_once(". ")?;
    let table: u32 = num.parse().ok()?;
    let (name, rest) = rest.split_once(' ')?;
    let rest = rest.strip_prefix('(')?;
    let (_, rest) = rest.split_once("): ")?;
    let (rest, uuid) = rest.rsplit_once(", uuid ")?;
    let (m, prio) = rest.rsplit_once(", priority ")?;
    Some((
        table,
        name.to_string(),
        m.to_string(),
        prio.parse().ok()?,
        uuid.trim().to_string(),
    ))
}

/// `/* output to "default_b", type "" */`: (port, type).
fn output_line(line: &str) -> Option<(String, String)> {
    let t = line.trim().trim_end_matches(';');
    let rest = t.strip_prefix("/* output to \"")?;
    let (port, rest) = rest.split_once('"')?;
    let ty = rest
        .split_once("type \"")
        .and_then(|(_, r)| r.split('"').next())
        .unwrap_or("");
    Some((port.to_string(), ty.to_string()))
}

/// Reads `ovn-trace --detailed` output.
pub fn parse(text: &str) -> LogicalTrace {
    let (mut pipeline, mut datapath, mut outport) = (String::new(), String::new(), None);
    let mut stages: Vec<Stage> = Vec::new();
    let mut outputs = Vec::new();
    let mut last_drop = false;
    for line in text.lines() {
        if let Some((p, d, o)) = header(line) {
            (pipeline, datapath, outport) = (p, d, o);
            continue;
        }
        if let Some((table, name, m, priority, uuid)) = stage_line(line) {
            stages.push(Stage {
                datapath: datapath.clone(),
                pipeline: pipeline.clone(),
                outport: outport.clone(),
                table,
                name,
                match_: m,
                priority,
                uuid,
                actions: Vec::new(),
            });
            last_drop = false;
            continue;
        }
        if let Some(o) = output_line(line) {
            outputs.push(o);
            last_drop = false;
            continue;
        }
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.chars().all(|c| c == '-') {
            continue;
        }
        if let Some(s) = stages.last_mut()
            && line.starts_with("    ")
        {
            s.actions.push(t.to_string());
            if t == "drop;" {
                last_drop = true;
            }
        }
    }
    let end = match outputs.iter().rev().find(|(_, ty)| ty != "patch") {
        Some((port, ty)) if !last_drop && !ends_in_patch(&outputs) => End::Output {
            port: port.clone(),
            port_type: ty.clone(),
        },
        _ => End::Dropped,
    };
    LogicalTrace {
        stages,
        end,
        outputs,
    }
}

/// The trace's last output is a patch to another datapath (the packet went on there).
fn ends_in_patch(outputs: &[(String, String)]) -> bool {
    outputs.last().is_some_and(|(_, t)| t == "patch")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALLOWED: &str = r#"# tcp,reg14=0x3,vlan_tci=0x0000,dl_src=0a:58:0a:f4:00:02
ingress(dp="subnet-cluster-default", inport="default_a")
--------------------------------------------------------
 0. ls_in_check_port_sec (northd.c:8432): 1, priority 50, uuid e9d5d699
    reg0[15] = check_in_port_sec();
    next;
 8. ls_in_acl (northd.c:6809): ip && !ct.est, priority 1, uuid 494991f0
    reg0[1] = 1;
    next;
25. ls_in_l2_lkup (northd.c:9122): eth.dst == 0a:58:0a:f4:00:03, priority 50, uuid 4e0a0e88
    outport = "default_b";
    output;

egress(dp="subnet-cluster-default", inport="default_a", outport="default_b")
----------------------------------------------------------------------------
 9. ls_out_apply_port_sec (northd.c:5777): 1, priority 0, uuid f1fe7348
    output;
    /* output to "default_b", type "" */
"#;

    const DROPPED: &str = r#"ingress(dp="subnet-cluster-default", inport="default_a")
 8. ls_in_acl (northd.c:6809): ip && !ct.est, priority 1, uuid 494991f0
    next;
egress(dp="subnet-cluster-default", inport="default_a", outport="default_b")
 4. ls_out_acl (northd.c:6571): reg0[10] == 1 && (outport == @np_a1 && ip), priority 1900, uuid e9d1d174
    ct_commit { ct_mark.blocked = 1; };
 4. ls_out_acl (northd.c:6560): reg0[9] == 1 && (outport == @np_a1 && ip), priority 1900, uuid 4a63ba4a
    drop;
"#;

    #[test]
    fn an_output_to_a_pod_port_ends_the_trace() {
        let t = parse(ALLOWED);
        assert_eq!(t.stages.len(), 4);
        assert_eq!(t.stages[1].name, "ls_in_acl");
        assert_eq!(t.stages[1].match_, "ip && !ct.est");
        assert_eq!(t.stages[1].priority, 1);
        assert_eq!(t.stages[3].pipeline, "egress");
        assert_eq!(t.stages[3].outport.as_deref(), Some("default_b"));
        assert_eq!(t.stages[3].datapath, "subnet-cluster-default");
        assert_eq!(
            t.end,
            End::Output {
                port: "default_b".into(),
                port_type: String::new()
            }
        );
    }

    #[test]
    fn a_drop_action_ends_the_trace_as_dropped() {
        let t = parse(DROPPED);
        assert_eq!(t.end, End::Dropped);
        let last = t.stages.last().expect("stages");
        assert_eq!(last.name, "ls_out_acl");
        assert_eq!(last.priority, 1900);
        assert_eq!(last.actions, ["drop;"]);
        assert_eq!(last.match_, "reg0[9] == 1 && (outport == @np_a1 && ip)");
    }

    #[test]
    fn a_trace_that_stops_on_a_patch_port_is_dropped() {
        let t = parse(
            "ingress(dp=\"s\", inport=\"p\")\n 9. ls_out_apply_port_sec (x): 1, priority 0, uuid 1\n    output;\n    /* output to \"s-r\", type \"patch\" */\n",
        );
        assert_eq!(t.end, End::Dropped);
    }
}
