//! Reading a Pod from its Kubernetes JSON (`kubectl get pods -o json`, the lab store's
//! `get`) where no typed client is at hand: the operator's CLI, the lab, tests and the
//! perf harness read the same fields the same way.
//!
//! ```
//! use api::pod_json;
//! let pod = serde_json::json!({
//!     "metadata": {"namespace": "demo", "name": "web",
//!                  "annotations": {"lab.zstack.io/netns": "zovn-pod-web"}},
//!     "status": {"podIP": "10.16.0.5",
//!                "conditions": [{"type": "Ready", "status": "True"}]},
//! });
//! assert_eq!(pod_json::key(&pod), "demo/web");
//! assert!(pod_json::is_ready(&pod));
//! assert_eq!(pod_json::pod_ip(&pod), Some("10.16.0.5"));
//! assert_eq!(pod_json::lab_netns(&pod), Some("zovn-pod-web"));
//! ```

use serde_json::Value;

/// Annotation the lab's store adds to a Pod in `get` output only: the pod's netns.
pub const LAB_NETNS_ANNOTATION: &str = "lab.zstack.io/netns";
/// Annotation the lab's store adds to a Pod in `get` output only: its datapath, with `→`
/// while a fast-started pod is being switched to its final port.
pub const LAB_DATAPATH_ANNOTATION: &str = "lab.zstack.io/datapath";

/// `namespace/name` (empty parts when missing).
pub fn key(pod: &Value) -> String {
    let meta = &pod["metadata"];
    format!(
        "{}/{}",
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or("")
    )
}

/// Whether the Pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// `status.podIP`.
pub fn pod_ip(pod: &Value) -> Option<&str> {
    pod["status"]["podIP"].as_str()
}

/// The value of annotation `name`.
pub fn annotation<'a>(pod: &'a Value, name: &str) -> Option<&'a str> {
    pod["metadata"]["annotations"][name].as_str()
}

/// The lab pod's network namespace ([`LAB_NETNS_ANNOTATION`]).
pub fn lab_netns(pod: &Value) -> Option<&str> {
    annotation(pod, LAB_NETNS_ANNOTATION)
}

/// The lab pod's datapath ([`LAB_DATAPATH_ANNOTATION`]), `""` when not reported.
pub fn lab_datapath(pod: &Value) -> &str {
    annotation(pod, LAB_DATAPATH_ANNOTATION).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ready_needs_the_ready_condition_true() {
        let with = |c: Value| json!({"status": {"conditions": c}});
        assert!(!is_ready(&json!({})));
        assert!(!is_ready(&with(
            json!([{"type": "Ready", "status": "False"}])
        )));
        assert!(!is_ready(&with(
            json!([{"type": "ContainersReady", "status": "True"}])
        )));
        assert!(is_ready(&with(json!([
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True"}
        ]))));
    }

    #[test]
    fn missing_fields_read_as_empty() {
        let pod = json!({"metadata": {"name": "web"}});
        assert_eq!(key(&pod), "/web");
        assert_eq!(pod_ip(&pod), None);
        assert_eq!(lab_netns(&pod), None);
        assert_eq!(lab_datapath(&pod), "");
    }
}
