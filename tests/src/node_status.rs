//! The node agent's datapath report as tests read it: the Node annotation
//! `network.zstack.io/datapath-status` (waited for until a condition holds), the
//! operator's override `network.zstack.io/datapath-config`, and the agents' events.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::zovn::Zovn;

/// The agent's report on its Node.
pub const STATUS: &str = "network.zstack.io/datapath-status";
/// The operator's per-node override of the datapath config.
pub const CONFIG: &str = "network.zstack.io/datapath-config";

/// Node `node`'s report, once `f` holds for it (90 s at most; the panic shows the last).
pub fn wait_status(z: &Zovn, node: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(90) {
        if let Some(s) = z.node_annotation_json(node, STATUS) {
            if f(&s) {
                return s;
            }
            last = s;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("node {node}: {what} not reached; last status: {last:#}");
}

/// Sets node `node`'s datapath config override (JSON; `{}` clears every key).
pub fn set_config(z: &Zovn, node: &str, cfg: &Value) {
    z.annotate_node(
        node,
        BTreeMap::from([(CONFIG.to_string(), cfg.to_string())]),
    );
}

/// The events the lab's object store holds.
pub fn events(z: &Zovn) -> Vec<Value> {
    z.items("events")
}

/// Whether `evs` has an event on `object` with `reason` whose message contains `text`.
pub fn has_event(evs: &[Value], object: &str, reason: &str, text: &str) -> bool {
    evs.iter().any(|e| {
        e["involvedObject"]["name"] == object
            && e["reason"] == reason
            && e["message"].as_str().is_some_and(|m| m.contains(text))
    })
}

/// Node `from`'s pinger row for peer `to` in `zovn status -o json` (`Null`: none yet).
pub fn pinger_probe(status: &Value, from: &str, to: &str) -> Value {
    status["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|r| r["node"] == from))
        .and_then(|r| r["pinger"].as_array())
        .and_then(|p| p.iter().find(|x| x["peer"] == to))
        .cloned()
        .unwrap_or(Value::Null)
}
