use kube::{CustomResourceExt, Resource};
use serde_json::{Value, json};

use super::*;

const CHECKED_IN: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/helm/zstack-ovn/crds/subnet.yaml"
));

#[test]
fn checked_in_yaml_matches_the_rust_types() {
    let now = crd_yaml().expect("CRD serialises");
    assert!(
        now == CHECKED_IN,
        "deploy/helm/zstack-ovn/crds/subnet.yaml is stale: run `cargo run -p control --bin crdgen -- deploy/helm/zstack-ovn/crds/subnet.yaml`"
    );
}

#[test]
fn checked_in_yaml_parses_back_to_the_crd() {
    let parsed: Value = serde_norway::from_str(CHECKED_IN).expect("YAML parses");
    assert_eq!(parsed, serde_json::to_value(Subnet::crd()).unwrap());
}

fn crd_json() -> Value {
    serde_json::to_value(Subnet::crd()).unwrap()
}

#[test]
fn crd_identity_scope_names() {
    let crd = crd_json();
    assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(crd["metadata"]["name"], "subnets.network.zstack.io");
    assert_eq!(crd["spec"]["group"], "network.zstack.io");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    let names = &crd["spec"]["names"];
    assert_eq!(names["kind"], "Subnet");
    assert_eq!(names["plural"], "subnets");
    assert_eq!(names["singular"], "subnet");
    assert_eq!(names["shortNames"], json!(["sn"]));
    let versions = crd["spec"]["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    let v1 = &versions[0];
    assert_eq!(v1["name"], "v1");
    assert_eq!(v1["served"], true);
    assert_eq!(v1["storage"], true);
    assert_eq!(v1["subresources"], json!({"status": {}}));
    assert_eq!(Subnet::api_version(&()), "network.zstack.io/v1");
}

#[test]
fn crd_printer_columns() {
    let crd = crd_json();
    let cols = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap();
    let got: Vec<(&str, &str, &str)> = cols
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["type"].as_str().unwrap(),
                c["jsonPath"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("CIDR", "string", ".spec.cidr"),
            ("Protocol", "string", ".status.protocol"),
            ("Gateway", "string", ".status.gateway"),
            ("Phase", "string", ".status.phase"),
            ("Reason", "string", ".status.reason"),
            ("Available", "number", ".status.availableIPs"),
            ("Used", "number", ".status.usedIPs"),
            ("LogicalSwitch", "string", ".status.logicalSwitch"),
            ("Age", "date", ".metadata.creationTimestamp"),
        ]
    );
    // every column points at a field the schema declares
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    for (_, _, path) in got.iter().filter(|c| !c.2.starts_with(".metadata")) {
        let mut node = schema;
        for part in path.trim_start_matches('.').split('.') {
            node = &node["properties"][part];
        }
        assert!(node.get("type").is_some(), "{path} not in the schema");
    }
}

#[test]
fn crd_spec_field_names() {
    let crd = crd_json();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let mut props: Vec<&str> = spec["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    props.sort_unstable();
    assert_eq!(
        props,
        [
            "cidr",
            "default",
            "excludeIPs",
            "externalLogicalSwitch",
            "gateway",
            "namespaces",
            "natOutgoing",
            "protocol",
            "provider",
            "securityGroups",
            "vlanID"
        ]
    );
    assert_eq!(spec["required"], json!(["cidr"]));
    assert_eq!(spec["properties"]["natOutgoing"]["type"], json!("boolean"));
    assert_eq!(spec["properties"]["vlanID"]["minimum"], json!(1.0));
    assert_eq!(spec["properties"]["vlanID"]["maximum"], json!(4094.0));
    assert_eq!(
        spec["properties"]["protocol"]["enum"],
        json!(["IPv4", "IPv6", "Dual"])
    );
    let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
    let conditions = &status["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
    assert_eq!(
        status["properties"]["phase"]["enum"],
        json!(["Pending", "Active", "Failed"])
    );
}

/// Checks the rules a Kubernetes 1.20 apiserver applies to an apiextensions.k8s.io/v1 schema:
/// structural (every node typed, no `$ref`/`definitions`, logic keywords only without types),
/// and no keyword newer than 1.20 (`x-kubernetes-validations` is CEL, 1.25+).
fn check_structural(path: &str, node: &Value, problems: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        problems.push(format!("{path}: not an object"));
        return;
    };
    const ALLOWED: &[&str] = &[
        "type",
        "description",
        "title",
        "format",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "enum",
        "default",
        "nullable",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "pattern",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-embedded-resource",
    ];
    for key in obj.keys() {
        if !ALLOWED.contains(&key.as_str()) {
            problems.push(format!("{path}: keyword {key:?} not allowed"));
        }
    }
    let ty = obj.get("type").and_then(Value::as_str);
    if ty.is_none() && !obj.contains_key("x-kubernetes-int-or-string") {
        problems.push(format!("{path}: no type"));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        if ty != Some("object") {
            problems.push(format!("{path}: properties on a non-object"));
        }
        for (k, v) in props {
            check_structural(&format!("{path}.{k}"), v, problems);
        }
    }
    if let Some(items) = obj.get("items") {
        if ty != Some("array") {
            problems.push(format!("{path}: items on a non-array"));
        }
        check_structural(&format!("{path}[]"), items, problems);
    } else if ty == Some("array") {
        problems.push(format!("{path}: array without items"));
    }
    if let Some(required) = obj.get("required").and_then(Value::as_array) {
        for r in required {
            let r = r.as_str().unwrap_or_default();
            if obj.get("properties").and_then(|p| p.get(r)).is_none() {
                problems.push(format!("{path}: required {r:?} is not a property"));
            }
        }
    }
    if let Some(keys) = obj
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
    {
        let item_required = obj["items"]["required"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for k in keys {
            if !item_required.contains(k) {
                problems.push(format!("{path}: list-map key {k} is not required"));
            }
        }
    }
}

#[test]
fn crd_schema_is_structural_and_1_20_compatible() {
    let crd = crd_json();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut problems = Vec::new();
    check_structural("openAPIV3Schema", schema, &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
    let text = serde_json::to_string(&crd).unwrap();
    for newer in [
        "x-kubernetes-validations",
        "selectableFields",
        "$ref",
        "anyOf",
        "oneOf",
        "allOf",
    ] {
        assert!(!text.contains(newer), "CRD uses {newer}");
    }
}

#[test]
fn subnet_object_round_trips_kube_ovn_style_yaml() {
    let yaml = r#"
apiVersion: network.zstack.io/v1
kind: Subnet
metadata:
  name: blue
spec:
  cidr: 10.16.0.0/16,fd00:10:16::/64
  gateway: 10.16.0.1,fd00:10:16::1
  excludeIPs:
  - 10.16.0.2
  - 10.16.0.10..10.16.0.20
  - 10.16.1.1-10.16.1.9
  protocol: Dual
  vlanID: 100
  natOutgoing: false
  provider: ovn
  externalLogicalSwitch: ls-zstack-1
  namespaces: [team-blue]
  default: true
status:
  phase: Active
  availableIPs: 253
  usedIPs: 2
  logicalSwitch: blue
  conditions:
  - type: Ready
    status: "True"
    reason: Active
    message: ok
    lastTransitionTime: "2024-01-02T03:04:05Z"
    observedGeneration: 3
"#;
    let sn: Subnet = serde_norway::from_str(yaml).unwrap();
    assert_eq!(sn.metadata.name.as_deref(), Some("blue"));
    assert_eq!(
        sn.spec,
        SubnetSpec {
            cidr: "10.16.0.0/16,fd00:10:16::/64".into(),
            gateway: Some("10.16.0.1,fd00:10:16::1".into()),
            exclude_ips: vec![
                "10.16.0.2".into(),
                "10.16.0.10..10.16.0.20".into(),
                "10.16.1.1-10.16.1.9".into()
            ],
            protocol: Some("Dual".into()),
            vlan_id: Some(100),
            provider: Some("ovn".into()),
            external_logical_switch: Some("ls-zstack-1".into()),
            security_groups: vec![],
            namespaces: vec!["team-blue".into()],
            default: true,
            nat_outgoing: Some(false),
        }
    );
    let status = sn.status.clone().unwrap();
    assert_eq!(status.phase, SubnetPhase::Active);
    assert_eq!(status.available_ips, Some(253.0));
    assert_eq!(
        status
            .condition(CONDITION_READY)
            .unwrap()
            .observed_generation,
        Some(3)
    );
    let back: Subnet = serde_json::from_value(serde_json::to_value(&sn).unwrap()).unwrap();
    assert_eq!(back, sn);
}

#[test]
fn minimal_subnet_and_bad_values_still_decode() {
    // Values the validator must explain (not the decoder) still decode.
    let sn: Subnet = serde_json::from_value(json!({
        "apiVersion": "network.zstack.io/v1",
        "kind": "Subnet",
        "metadata": {"name": "x"},
        "spec": {"cidr": "banana", "vlanID": 70000, "protocol": "IPv5", "gateway": ""},
    }))
    .unwrap();
    assert_eq!(sn.spec.vlan_id, Some(70000));
    assert_eq!(sn.spec.protocol.as_deref(), Some("IPv5"));
    assert!(sn.status.is_none());
    let minimal =
        serde_json::to_value(Subnet::new("y", SubnetSpec::with_cidr("10.0.0.0/24"))).unwrap();
    assert_eq!(
        minimal["spec"],
        json!({"cidr": "10.0.0.0/24", "default": false})
    );
}
