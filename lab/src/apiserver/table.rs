//! The tables `zovn lab get` prints (columns mirror the Subnet CRD's printer columns).

use control::annotation::{POD_NETWORKS, POD_SUBNET, decode_pod_networks};
use control::controller::IPAM_ERROR;
use control::crd::Subnet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::protocol::ResourceKind;
use crate::pods::runtime::DATAPATH_ANNOTATION;

/// The header and rows for `items` of `kind`.
pub fn rows(kind: ResourceKind, items: &[Value]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    match kind {
        ResourceKind::Pod => (
            vec![
                "NAMESPACE/NAME",
                "NODE",
                "IP",
                "MAC",
                "SUBNET",
                "DATAPATH",
                "READY",
                "STATUS",
            ],
            typed::<Pod>(items).iter().map(pod_row).collect(),
        ),
        ResourceKind::Subnet => (
            vec![
                "NAME",
                "CIDR",
                "PROTOCOL",
                "GATEWAY",
                "PHASE",
                "AVAILABLE",
                "USED",
                "LOGICALSWITCH",
                "REASON",
            ],
            typed::<Subnet>(items).iter().map(subnet_row).collect(),
        ),
        ResourceKind::Namespace => (
            vec!["NAME", "STATUS"],
            typed::<Namespace>(items)
                .iter()
                .map(|n| {
                    vec![
                        n.metadata.name.clone().unwrap_or_default(),
                        n.status
                            .as_ref()
                            .and_then(|s| s.phase.clone())
                            .unwrap_or_default(),
                    ]
                })
                .collect(),
        ),
        ResourceKind::Service | ResourceKind::EndpointSlice => super::services::table(kind, items),
        ResourceKind::NetworkPolicy => super::netpol::table(items),
        ResourceKind::NetworkAttachmentDefinition => crate::multus::table(items),
        ResourceKind::Node => (
            vec![
                "NAME",
                "INTERNAL-IP",
                "DATAPATH",
                "DPDK",
                "PMD-CPUS",
                "HUGEPAGES",
                "UPLINK",
                "REASON",
            ],
            typed::<Node>(items)
                .iter()
                .map(|n| {
                    let ips: Vec<String> = n
                        .status
                        .iter()
                        .flat_map(|s| s.addresses.iter().flatten())
                        .map(|a| a.address.clone())
                        .collect();
                    let mut row = vec![n.metadata.name.clone().unwrap_or_default(), ips.join(",")];
                    row.extend(datapath_columns(
                        n.metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(DATAPATH_STATUS)),
                    ));
                    row
                })
                .collect(),
        ),
    }
}

/// The node agent's datapath report on a Node (JSON; see the dataplane crate).
pub use api::keys::DATAPATH_STATUS;

/// DATAPATH, DPDK, PMD-CPUS, HUGEPAGES, UPLINK (`port/type`), REASON from the agent's
/// report (`-` without one).
fn datapath_columns(status: Option<&String>) -> Vec<String> {
    let Some(v) = status.and_then(|s| serde_json::from_str::<Value>(s).ok()) else {
        return vec!["-".into(); 6];
    };
    let text = |k: &str| v[k].as_str().map(dash).unwrap_or_else(|| "-".into());
    let mut reason = text("reason");
    let errors = v["errors"].as_array().map_or(0, Vec::len);
    if errors > 0 {
        reason = format!(
            "{reason} ({errors} config error{})",
            if errors == 1 { "" } else { "s" }
        );
    }
    let hp = &v["hugepages"];
    vec![
        text("datapath"),
        match v["dpdkInitialized"].as_bool() {
            Some(true) => "initialized".into(),
            Some(false) => "no".into(),
            None => "-".into(),
        },
        text("pmdCpus"),
        format!(
            "{}/{} free ({})",
            hp["free"].as_u64().unwrap_or(0),
            hp["total"].as_u64().unwrap_or(0),
            hp["size"].as_str().unwrap_or("?")
        ),
        match (v["uplink"]["port"].as_str(), v["uplink"]["type"].as_str()) {
            (Some(p), Some(t)) if !p.is_empty() => format!("{p}/{}", dash(t)),
            _ => "-".into(),
        },
        reason,
    ]
}

fn typed<T: DeserializeOwned>(items: &[Value]) -> Vec<T> {
    items
        .iter()
        .filter_map(|v| serde_json::from_value(v.clone()).ok())
        .collect()
}

fn dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.into() }
}

/// One pod: addresses from `k8s.ovn.org/pod-networks`; DATAPATH and READY from the pod
/// runtime (READY: CNI ADD succeeded and the responder runs; `-` when the runtime does not
/// run the pod, e.g. hostNetwork); STATUS is the controller's: `Ready` when annotated, the
/// IPAM error when there is one, `HostNetwork`, or `Pending`.
pub fn pod_row(p: &Pod) -> Vec<String> {
    let empty = Default::default();
    let ann = p.metadata.annotations.as_ref().unwrap_or(&empty);
    let spec = p.spec.as_ref();
    let host = spec.and_then(|s| s.host_network).unwrap_or(false);
    let net = ann
        .get(POD_NETWORKS)
        .and_then(|v| decode_pod_networks(v).ok());
    let error = ann.get(IPAM_ERROR).filter(|e| !e.is_empty());
    let (ips, mac) = match &net {
        Some(n) if !host => (
            n.ip_addresses
                .iter()
                .map(|a| a.split('/').next().unwrap_or(a))
                .collect::<Vec<_>>()
                .join(","),
            n.mac_address.clone(),
        ),
        // the pod runtime's view (a CNI result without a controller annotation)
        _ if !host => (
            p.status
                .as_ref()
                .and_then(|s| s.pod_ips.as_ref())
                .map(|ips| {
                    ips.iter()
                        .map(|i| i.ip.clone())
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default(),
            String::new(),
        ),
        _ => (String::new(), String::new()),
    };
    let status = if host {
        "HostNetwork".to_string()
    } else if let Some(e) = error {
        e.clone()
    } else if net.is_some() {
        "Ready".to_string()
    } else {
        "Pending".to_string()
    };
    let ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| if c.status == "True" { "true" } else { "false" });
    vec![
        format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or("default"),
            p.metadata.name.as_deref().unwrap_or("")
        ),
        dash(spec.and_then(|s| s.node_name.as_deref()).unwrap_or("")),
        dash(&ips),
        dash(&mac),
        dash(if host || error.is_some() {
            ""
        } else {
            ann.get(POD_SUBNET).map(String::as_str).unwrap_or("")
        }),
        dash(
            ann.get(DATAPATH_ANNOTATION)
                .map(String::as_str)
                .unwrap_or(""),
        ),
        match ready {
            Some(r) => r.to_string(),
            None if host => "-".to_string(),
            None => "false".to_string(),
        },
        status,
    ]
}

/// One Subnet, as its CRD printer columns show it.
pub fn subnet_row(s: &Subnet) -> Vec<String> {
    let st = s.status.as_ref();
    let num = |v: Option<f64>| v.map(number).unwrap_or_else(|| "-".into());
    vec![
        s.metadata.name.clone().unwrap_or_default(),
        s.spec.cidr.clone(),
        dash(st.and_then(|s| s.protocol.as_deref()).unwrap_or("")),
        dash(st.and_then(|s| s.gateway.as_deref()).unwrap_or("")),
        st.map(|s| s.phase.to_string())
            .unwrap_or_else(|| "Pending".into()),
        num(st.and_then(|s| s.available_ips)),
        num(st.and_then(|s| s.used_ips)),
        dash(st.and_then(|s| s.logical_switch.as_deref()).unwrap_or("")),
        dash(st.map(|s| s.reason.as_str()).unwrap_or("")),
    ]
}

/// `253`, not `253.0`; huge values as f64 prints them.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 9.007_199_254_740_992e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Aligned columns (the last one unpadded), or a note when there are no rows.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        return "No resources found.\n".into();
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let n = cells.len();
        for (i, (c, w)) in cells.into_iter().zip(&widths).enumerate() {
            out.push_str(c);
            if i + 1 < n {
                out.push_str(&" ".repeat(w - c.chars().count() + 3));
            }
        }
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_rows_show_addresses_errors_and_pending() {
        let nets = r#"{"default":{"ip_addresses":["10.16.0.5/16"],"mac_address":"0a:58:0a:10:00:05","routes":[]}}"#;
        let items = vec![
            json!({"metadata": {"name": "a", "namespace": "demo",
                "annotations": {POD_NETWORKS: nets, POD_SUBNET: "demo", IPAM_ERROR: "",
                    DATAPATH_ANNOTATION: "kernel/veth"}},
                "spec": {"nodeName": "n1", "containers": []},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"metadata": {"name": "b", "namespace": "demo",
                "annotations": {IPAM_ERROR: "no Subnet serves namespace demo"}},
                "spec": {"nodeName": "n2", "containers": []}}),
            json!({"metadata": {"name": "c", "namespace": "demo"}, "spec": {"containers": []}}),
        ];
        let (h, rows) = rows(ResourceKind::Pod, &items);
        assert_eq!(h.len(), 8);
        assert_eq!(
            rows[0],
            [
                "demo/a",
                "n1",
                "10.16.0.5",
                "0a:58:0a:10:00:05",
                "demo",
                "kernel/veth",
                "true",
                "Ready"
            ]
        );
        assert_eq!(rows[1][7], "no Subnet serves namespace demo");
        assert_eq!(rows[2][1..], ["-", "-", "-", "-", "-", "false", "Pending"]);
        let text = render(&h, &rows);
        assert!(text.starts_with("NAMESPACE/NAME   NODE   IP"), "{text}");
    }

    #[test]
    fn subnet_rows_mirror_printer_columns() {
        let items = vec![
            json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
            "metadata": {"name": "blue"}, "spec": {"cidr": "10.17.0.0/24"},
            "status": {"phase": "Active", "protocol": "IPv4", "gateway": "10.17.0.1",
                "availableIPs": 243.0, "usedIPs": 2.0, "logicalSwitch": "subnet-blue"}}),
        ];
        let (_, rows) = rows(ResourceKind::Subnet, &items);
        assert_eq!(
            rows[0],
            [
                "blue",
                "10.17.0.0/24",
                "IPv4",
                "10.17.0.1",
                "Active",
                "243",
                "2",
                "subnet-blue",
                "-"
            ]
        );
        assert_eq!(number(1.8446744073709552e19), "18446744073709552000");
        assert_eq!(render(&["A"], &[]), "No resources found.\n");
    }
}
