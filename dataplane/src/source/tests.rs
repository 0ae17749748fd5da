use ipnet::IpNet;

use super::lab::{parse_cidrs, pod_from_json};

#[test]
fn cidrs_and_pods_from_json() {
    assert_eq!(
        parse_cidrs("10.16.0.5/16, fd00:10:16::/64,bad"),
        vec![
            "10.16.0.0/16".parse::<IpNet>().unwrap(),
            "fd00:10:16::/64".parse::<IpNet>().unwrap()
        ]
    );
    let p = pod_from_json(&serde_json::json!({
        "metadata": {"namespace": "demo", "name": "web",
                     "annotations": {"a": "1", "b": 2}},
        "spec": {"nodeName": "n1"}
    }));
    assert_eq!(p.key(), "demo/web");
    assert_eq!(p.node_name.as_deref(), Some("n1"));
    assert_eq!(p.annotations.len(), 1);
    assert_eq!(p.annotation("a"), Some("1"));
}
