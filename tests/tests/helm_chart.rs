//! The Helm chart `deploy/helm/zstack-ovn` through the real Helm engine (helm 3.17.2):
//! lint and render of the four profiles with assertions on the objects, the schema's
//! refusals with their messages, every rendered object accepted by the real
//! kube-apiserver 1.20.2 (server-side dry run, then create), and the chart's start scripts
//! run for real (OVN central single and 3-member Raft, the node's OVS and ovn-controller).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Value, json};
use tests::helm::{self, PROFILES, args, containers, named, of_kind};

const IMAGE: &str = "zstack-ovn/zstack-ovn:0.1.0";
const NS: &str = "kube-system";

fn render(helm: &Path, profile: &str) -> Vec<Value> {
    helm::render(helm, profile, "zs", NS).unwrap_or_else(|e| panic!("{e:#}"))
}

fn container<'a>(w: &'a Value, name: &str) -> &'a Value {
    containers(w)
        .into_iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name} in {}", w["metadata"]["name"]))
}

fn names(objs: &[&Value]) -> BTreeSet<String> {
    objs.iter()
        .map(|o| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn every_profile_lints_strict() {
    let Some(helm) = helm::require_helm("helm_chart::every_profile_lints_strict") else {
        return;
    };
    for p in PROFILES {
        let r = helm::lint(&helm, p).expect("helm lint");
        assert!(r.ok, "helm lint --strict {p}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("0 chart(s) failed"), "{p}: {}", r.stdout);
    }
}

#[test]
fn every_image_is_the_one_make_images_builds() {
    let Some(helm) = helm::require_helm("helm_chart::every_image_is_the_one_make_images_builds")
    else {
        return;
    };
    for p in PROFILES {
        let objs = render(&helm, p);
        let mut n = 0;
        for o in &objs {
            for c in containers(o) {
                assert_eq!(
                    c["image"], IMAGE,
                    "{p}: {} {}",
                    o["metadata"]["name"], c["name"]
                );
                n += 1;
            }
        }
        assert!(n >= 5, "{p}: only {n} containers");
    }
}

#[test]
fn standalone_single_runs_nb_sb_and_northd_in_one_pod() {
    let Some(helm) = helm::require_helm("helm_chart::standalone_single") else {
        return;
    };
    let objs = render(&helm, "single");
    let central = named(&objs, "Deployment", "zs-zstack-ovn-central").expect("central Deployment");
    assert_eq!(central["spec"]["replicas"], 1);
    assert_eq!(central["spec"]["strategy"]["type"], "Recreate");
    let cs: Vec<_> = containers(central)
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(cs, vec![json!("nbdb"), json!("sbdb"), json!("northd")]);
    assert!(of_kind(&objs, "StatefulSet").is_empty());
    assert!(named(&objs, "Service", "zs-zstack-ovn-nbdb").is_some());
    assert!(named(&objs, "Service", "zs-zstack-ovn-sbdb").is_some());
    let ctl = named(&objs, "Deployment", "zs-zstack-ovn-controller").expect("controller");
    assert_eq!(ctl["spec"]["replicas"], 2);
    let a = args(container(ctl, "controller"));
    for want in [
        "--mode=standalone",
        "--nb=tcp:$(ZS_ZSTACK_OVN_NBDB_SERVICE_HOST):6641",
        "--sb=tcp:$(ZS_ZSTACK_OVN_SBDB_SERVICE_HOST):6642",
        "--cluster-cidr=10.244.0.0/16",
        "--leader-elect",
        "--leader-elect-lease-name=zs-zstack-ovn-controller",
        "--metrics-addr=0.0.0.0:10660",
    ] {
        assert!(
            a.iter().any(|x| x == want),
            "controller args lack {want}: {a:?}"
        );
    }
    let c = container(ctl, "controller");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    let env: BTreeMap<_, _> = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| (e["name"].as_str().unwrap_or_default(), e.clone()))
        .collect();
    assert_eq!(
        env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(
        env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    // the default node DaemonSet, full OVS, no pool: no affinity at all
    let ds = of_kind(&objs, "DaemonSet");
    assert_eq!(
        names(&ds),
        BTreeSet::from(["zs-zstack-ovn-node".to_string()])
    );
    let node = ds[0];
    assert!(node["spec"]["template"]["spec"]["affinity"].is_null());
    let cs: Vec<_> = containers(node).iter().map(|c| c["name"].clone()).collect();
    assert_eq!(
        cs,
        vec![
            json!("install-cni"),
            json!("ovsdb-server"),
            json!("ovs-vswitchd"),
            json!("ovn-controller"),
            json!("agent")
        ]
    );
    let vs = container(node, "ovs-vswitchd");
    let vswitchd = vs["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "VSWITCHD")
        .expect("VSWITCHD");
    assert_eq!(
        vswitchd["value"],
        "/usr/lib/openvswitch-switch/ovs-vswitchd"
    );
}

#[test]
fn host_managed_ovs_leaves_only_the_agent() {
    let Some(helm) = helm::require_helm("helm_chart::host_managed_ovs") else {
        return;
    };
    let objs = helm::render_with(
        &helm,
        "single",
        "zs",
        NS,
        &["--set", "ovs.hostManaged=true"],
    )
    .expect("render");
    let node = named(&objs, "DaemonSet", "zs-zstack-ovn-node").expect("node");
    let cs: Vec<_> = containers(node).iter().map(|c| c["name"].clone()).collect();
    assert_eq!(cs, vec![json!("install-cni"), json!("agent")]);
    assert!(
        !args(container(node, "agent"))
            .iter()
            .any(|a| a.starts_with("--vswitchd-restart-cmd"))
    );
}

#[test]
fn standalone_ha_is_a_parallel_raft_statefulset_with_a_pdb() {
    let Some(helm) = helm::require_helm("helm_chart::standalone_ha") else {
        return;
    };
    let objs = render(&helm, "ha");
    let sts = of_kind(&objs, "StatefulSet");
    assert_eq!(
        names(&sts),
        BTreeSet::from([
            "zs-zstack-ovn-nbdb".to_string(),
            "zs-zstack-ovn-sbdb".to_string()
        ])
    );
    for (s, port, raft) in [(sts[0], 6641, 6643), (sts[1], 6642, 6644)] {
        let name = s["metadata"]["name"].as_str().expect("name");
        assert_eq!(s["spec"]["replicas"], 3, "{name}");
        assert_eq!(s["spec"]["podManagementPolicy"], "Parallel", "{name}");
        let anti = &s["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(anti[0]["topologyKey"], "kubernetes.io/hostname", "{name}");
        assert_eq!(
            s["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
            "2Gi"
        );
        let db = &containers(s)[0];
        let ports: Vec<_> = db["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .map(|p| p["containerPort"].clone())
            .collect();
        assert_eq!(ports, vec![json!(port), json!(raft)], "{name}");
        let headless = named(&objs, "Service", &format!("{name}-raft")).expect("headless Service");
        assert_eq!(headless["spec"]["clusterIP"], "None");
        assert_eq!(s["spec"]["serviceName"], format!("{name}-raft"));
        for i in 0..3 {
            assert!(
                named(&objs, "Service", &format!("{name}-{i}")).is_some(),
                "{name}-{i}"
            );
        }
        let pdb = named(&objs, "PodDisruptionBudget", name).expect("PDB");
        // the test apiserver is 1.20.2: policy/v1 came in 1.21
        assert_eq!(pdb["apiVersion"], "policy/v1beta1");
        assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    }
    assert_eq!(
        named(&objs, "StatefulSet", "zs-zstack-ovn-sbdb").expect("sbdb")["spec"]["volumeClaimTemplates"]
            [0]["spec"]["storageClassName"],
        Value::Null
    );
    assert!(named(&objs, "Deployment", "zs-zstack-ovn-central").is_none());
    let ctl = named(&objs, "Deployment", "zs-zstack-ovn-controller").expect("controller");
    assert_eq!(ctl["spec"]["replicas"], 3);
    let a = args(container(ctl, "controller"));
    let nb = a.iter().find(|x| x.starts_with("--nb=")).expect("--nb");
    assert_eq!(nb.matches("tcp:$(ZS_ZSTACK_OVN_NBDB_").count(), 3, "{nb}");
    let newer = helm::render_with(&helm, "ha", "zs", NS, &["--kube-version", "1.25.0"])
        .expect("render 1.25");
    assert!(
        of_kind(&newer, "PodDisruptionBudget")
            .iter()
            .all(|p| p["apiVersion"] == "policy/v1")
    );
}

#[test]
fn external_tls_has_no_central_and_passes_the_tls_files() {
    let Some(helm) = helm::require_helm("helm_chart::external_tls") else {
        return;
    };
    let objs = render(&helm, "external-tls");
    assert!(of_kind(&objs, "StatefulSet").is_empty());
    assert!(of_kind(&objs, "PodDisruptionBudget").is_empty());
    assert!(named(&objs, "Deployment", "zs-zstack-ovn-central").is_none());
    assert!(named(&objs, "ServiceAccount", "zs-zstack-ovn-central").is_none());
    assert!(of_kind(&objs, "Service").is_empty(), "no central Services");
    let secret = named(&objs, "Secret", "zs-zstack-ovn-ovn-tls").expect("TLS Secret");
    for k in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(
            secret["stringData"][k]
                .as_str()
                .is_some_and(|s| s.starts_with("-----BEGIN")),
            "{k}"
        );
    }
    let ctl = named(&objs, "Deployment", "zs-zstack-ovn-controller").expect("controller");
    let a = args(container(ctl, "controller"));
    for want in [
        "--mode=external",
        "--nb=ssl:192.0.2.10:6641,ssl:192.0.2.11:6641,ssl:192.0.2.12:6641",
        "--sb=ssl:192.0.2.10:6642,ssl:192.0.2.11:6642,ssl:192.0.2.12:6642",
        "--nb-ca=/etc/zstack-ovn/tls/ca.crt",
        "--nb-cert=/etc/zstack-ovn/tls/tls.crt",
        "--nb-key=/etc/zstack-ovn/tls/tls.key",
        "--log-json",
    ] {
        assert!(
            a.iter().any(|x| x == want),
            "controller args lack {want}: {a:?}"
        );
    }
    let node = named(&objs, "DaemonSet", "zs-zstack-ovn-node").expect("node");
    assert!(
        args(container(node, "agent"))
            .iter()
            .any(|x| x == "--sb=ssl:192.0.2.10:6642,ssl:192.0.2.11:6642,ssl:192.0.2.12:6642")
    );
    for c in ["ovn-controller", "agent"] {
        let mounts = container(node, c)["volumeMounts"]
            .as_array()
            .expect("mounts")
            .clone();
        assert!(
            mounts
                .iter()
                .any(|m| m["mountPath"] == "/etc/zstack-ovn/tls"),
            "{c}"
        );
    }
    let rust_log = container(ctl, "controller")["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "RUST_LOG")
        .expect("RUST_LOG")
        .clone();
    assert_eq!(rust_log["value"], "debug");
}

/// Node labels → does this nodeAffinity (required terms) admit the node?
fn admits(affinity: &Value, labels: &BTreeMap<&str, &str>) -> bool {
    let terms = &affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    let Some(terms) = terms.as_array() else {
        return true;
    };
    terms.iter().any(|t| {
        t["matchExpressions"]
            .as_array()
            .expect("expressions")
            .iter()
            .all(|e| {
                let key = e["key"].as_str().expect("key");
                let vals: Vec<&str> = e["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str())
                    .collect();
                let have = labels.get(key);
                match e["operator"].as_str().expect("operator") {
                    "In" => have.is_some_and(|h| vals.contains(h)),
                    "NotIn" => have.is_none_or(|h| !vals.contains(h)),
                    "Exists" => have.is_some(),
                    "DoesNotExist" => have.is_none(),
                    op => panic!("operator {op}"),
                }
            })
    })
}

fn selects(node_selector: &Value, labels: &BTreeMap<&str, &str>) -> bool {
    node_selector.as_object().is_none_or(|m| {
        m.iter()
            .all(|(k, v)| labels.get(k.as_str()).copied() == v.as_str())
    })
}

#[test]
fn two_dpdk_pools_get_their_daemonsets_and_the_default_one_skips_their_nodes() {
    let Some(helm) = helm::require_helm("helm_chart::dpdk_pools") else {
        return;
    };
    let objs = render(&helm, "dpdk-pools");
    let ds = of_kind(&objs, "DaemonSet");
    assert_eq!(
        names(&ds),
        BTreeSet::from([
            "zs-zstack-ovn-node".to_string(),
            "zs-zstack-ovn-node-dpdk-1g".to_string(),
            "zs-zstack-ovn-node-dpdk-2m".to_string(),
        ])
    );
    // every node runs exactly one node DaemonSet
    let nodes: Vec<BTreeMap<&str, &str>> = vec![
        BTreeMap::new(),
        BTreeMap::from([("network.zstack.io/datapath", "dpdk"), ("hugepages", "1g")]),
        BTreeMap::from([("network.zstack.io/datapath", "dpdk")]),
        BTreeMap::from([("hugepages", "1g")]),
        BTreeMap::from([
            ("network.zstack.io/datapath", "dpdk-small"),
            ("hugepages", "1g"),
        ]),
        BTreeMap::from([("network.zstack.io/datapath", "dpdk-small")]),
        BTreeMap::from([("network.zstack.io/datapath", "kernel"), ("zone", "a")]),
    ];
    for labels in &nodes {
        let running: Vec<_> = ds
            .iter()
            .filter(|d| {
                let spec = &d["spec"]["template"]["spec"];
                selects(&spec["nodeSelector"], labels) && admits(&spec["affinity"], labels)
            })
            .map(|d| d["metadata"]["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(running.len(), 1, "node {labels:?} runs {running:?}");
    }
    for (pool, size, amount) in [("dpdk-1g", "1Gi", "4Gi"), ("dpdk-2m", "2Mi", "2Gi")] {
        let d = named(&objs, "DaemonSet", &format!("zs-zstack-ovn-node-{pool}")).expect("pool");
        let vs = container(d, "ovs-vswitchd");
        let bin = vs["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == "VSWITCHD")
            .expect("VSWITCHD");
        assert_eq!(
            bin["value"], "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk",
            "{pool}"
        );
        let key = format!("hugepages-{size}");
        assert_eq!(vs["resources"]["requests"][&key], amount, "{pool}");
        assert_eq!(vs["resources"]["limits"][&key], amount, "{pool}");
        assert!(vs["resources"]["requests"]["memory"].is_string(), "{pool}");
        let vols = d["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .expect("volumes");
        let hp = vols
            .iter()
            .find(|v| v["name"] == "hugepages")
            .expect("hugepages volume");
        assert_eq!(
            hp["emptyDir"]["medium"],
            format!("HugePages-{size}"),
            "{pool}"
        );
        let cm = named(
            &objs,
            "ConfigMap",
            &format!("zs-zstack-ovn-node-{pool}-datapath"),
        )
        .expect("datapath ConfigMap");
        let cfg: Value =
            serde_norway::from_str(cm["data"]["datapath.yaml"].as_str().expect("yaml"))
                .expect("datapath yaml");
        assert_eq!(cfg["hugepages"]["size"], size, "{pool}");
    }
    let one_g = named(&objs, "DaemonSet", "zs-zstack-ovn-node-dpdk-1g").expect("pool");
    assert_eq!(
        container(one_g, "agent")["securityContext"]["privileged"],
        true,
        "vhost pool"
    );
    let two_m = named(&objs, "DaemonSet", "zs-zstack-ovn-node-dpdk-2m").expect("pool");
    let vols = two_m["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    assert!(
        vols.iter()
            .any(|v| v["hostPath"]["path"] == "/run/zstack-ovn/vhost")
    );
    let default = named(&objs, "DaemonSet", "zs-zstack-ovn-node").expect("default");
    assert_eq!(
        container(default, "ovs-vswitchd")["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == "VSWITCHD")
            .expect("VSWITCHD")["value"],
        "/usr/lib/openvswitch-switch/ovs-vswitchd"
    );
}

/// ClusterRole name → resource → verbs, as designed (docs/install.md, templates/rbac.yaml).
fn designed_rbac() -> BTreeMap<&'static str, BTreeMap<String, Vec<&'static str>>> {
    let r = |rules: &[(&str, &str, &[&'static str])]| {
        rules
            .iter()
            .map(|(g, res, verbs)| (format!("{g}/{res}"), verbs.to_vec()))
            .collect::<BTreeMap<_, _>>()
    };
    BTreeMap::from([
        (
            "zs-zstack-ovn-controller",
            r(&[
                ("", "pods", &["list", "watch", "patch"]),
                ("", "nodes", &["list", "watch", "patch"]),
                ("", "namespaces", &["list", "watch"]),
                ("", "services", &["list", "watch"]),
                ("", "endpoints", &["list", "watch"]),
                ("discovery.k8s.io", "endpointslices", &["list", "watch"]),
                ("networking.k8s.io", "networkpolicies", &["list", "watch"]),
                ("network.zstack.io", "subnets", &["list", "watch", "create"]),
                ("network.zstack.io", "subnets/status", &["patch"]),
                (
                    "k8s.cni.cncf.io",
                    "network-attachment-definitions",
                    &["list", "watch"],
                ),
                ("kubevirt.io", "virtualmachines", &["list", "watch"]),
                ("events.k8s.io", "events", &["create", "patch"]),
            ]),
        ),
        (
            "zs-zstack-ovn-node",
            r(&[
                ("", "pods", &["get", "list", "watch"]),
                ("", "nodes", &["get", "list", "watch", "patch"]),
                ("", "services", &["list", "watch"]),
                ("network.zstack.io", "subnets", &["list", "watch"]),
                ("", "events", &["create"]),
                ("events.k8s.io", "events", &["create", "patch"]),
            ]),
        ),
        (
            "zs-zstack-ovn-controller-leader",
            r(&[(
                "coordination.k8s.io",
                "leases",
                &["get", "create", "update"],
            )]),
        ),
    ])
}

#[test]
fn every_role_grants_exactly_the_designed_verbs() {
    let Some(helm) = helm::require_helm("helm_chart::rbac") else {
        return;
    };
    let objs = render(&helm, "single");
    let mut got = BTreeMap::new();
    for role in of_kind(&objs, "ClusterRole")
        .into_iter()
        .chain(of_kind(&objs, "Role"))
    {
        let mut m: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
        for rule in role["rules"].as_array().expect("rules") {
            for g in rule["apiGroups"].as_array().expect("groups") {
                for res in rule["resources"].as_array().expect("resources") {
                    let verbs = rule["verbs"]
                        .as_array()
                        .expect("verbs")
                        .iter()
                        .map(|v| &*v.as_str().expect("verb").to_string().leak())
                        .collect();
                    let k = format!(
                        "{}/{}",
                        g.as_str().expect("group"),
                        res.as_str().expect("resource")
                    );
                    assert!(m.insert(k.clone(), verbs).is_none(), "{k} twice");
                }
            }
        }
        got.insert(
            role["metadata"]["name"]
                .as_str()
                .expect("name")
                .to_string()
                .leak() as &str,
            m,
        );
    }
    assert_eq!(got, designed_rbac());
    // no wildcard anywhere; OVN central has an account without token and no role
    let central = named(&objs, "ServiceAccount", "zs-zstack-ovn-central").expect("central SA");
    assert_eq!(central["automountServiceAccountToken"], false);
    assert_eq!(of_kind(&objs, "ServiceAccount").len(), 3);
}

#[test]
fn schema_refuses_bad_values_naming_the_key() {
    let Some(helm) = helm::require_helm("helm_chart::schema_refusals") else {
        return;
    };
    let cases: &[(&[&str], &[&str])] = &[
        (
            &[
                "--set",
                "nodePools[0].name=p",
                "--set",
                "nodePools[0].nodeSelector.a=b",
                "--set",
                "nodePools[0].datapathConfig.datapath=vpp",
            ],
            &[
                "nodePools.0.datapathConfig.datapath",
                "must be one of the following",
            ],
        ),
        (
            &["--set", "ovn.standalone.haMode=HA"],
            &["ovn.standalone.haMode", "\"single\", \"ha\""],
        ),
        (
            &["--set", "ovn.mode=external"],
            &["ovn.nbdbAddress", "ovn.sbdbAddress"],
        ),
        (
            &["--set", "nodePools[0].name=p"],
            &["nodePools.0", "nodeSelector is required"],
        ),
        (
            &[
                "--set",
                "nodePools[0].name=p",
                "--set-json",
                "nodePools[0].nodeSelector={}",
            ],
            &["nodePools.0.nodeSelector"],
        ),
        (
            &["--set", "ovn.ssl.enabled=true"],
            &["ovn.ssl.caCert", "ovn.ssl.clientCert", "ovn.ssl.clientKey"],
        ),
        (
            &["--set", "network.clusterCIDR=10.244.0.0"],
            &["network.clusterCIDR"],
        ),
        (
            &["--set", "network.joinCIDR=100.64/16"],
            &["network.joinCIDR"],
        ),
        (
            &["--set", "controller.replicas=0"],
            &["controller.replicas", "greater than or equal to 1"],
        ),
        (
            &["--set", "ovn.standalone.nbdb.replicas=0"],
            &["ovn.standalone.nbdb.replicas"],
        ),
        (&["--set", "tunnel.type=gre"], &["tunnel.type"]),
        (&["--set", "logging.format=xml"], &["logging.format"]),
        (
            &["--set", "controller.replica=2"],
            &["controller", "replica"],
        ),
    ];
    for (set, want) in cases {
        let r = helm::template(&helm, "zs", NS, set).expect("helm");
        assert!(!r.ok, "{set:?} was accepted");
        for w in *want {
            assert!(
                r.stderr.contains(w),
                "{set:?}: stderr lacks {w:?}:\n{}",
                r.stderr
            );
        }
    }
    // the good twins pass
    for set in [
        &[
            "--set",
            "ovn.mode=external",
            "--set",
            "ovn.nbdbAddress=tcp:10.0.0.1:6641",
            "--set",
            "ovn.sbdbAddress=tcp:10.0.0.1:6642",
        ][..],
        &[
            "--set",
            "ovn.ssl.enabled=true",
            "--set",
            "ovn.ssl.secretName=mine",
        ][..],
        &[
            "--set-json",
            r#"network.clusterCIDR="10.244.0.0/16,fd00:10:244::/56""#,
        ][..],
        &["--set", "network.clusterCIDR="][..],
    ] {
        let r = helm::template(&helm, "zs", NS, set).expect("helm");
        assert!(r.ok, "{set:?}: {}", r.stderr);
    }
}

/// Creates `obj` (server-side dry run when `dry_run`) through discovery of its kind.
async fn create_dynamic(
    client: &kube::Client,
    namespace: &str,
    obj: &Value,
    dry_run: bool,
) -> anyhow::Result<()> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
    use kube::discovery::Scope;
    let (group, version) = match obj["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .split_once('/')
    {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            obj["apiVersion"].as_str().unwrap_or_default().to_string(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, obj["kind"].as_str().unwrap_or_default());
    let (ar, caps): (ApiResource, _) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: kube::Api<DynamicObject> = if caps.scope == Scope::Namespaced {
        kube::Api::namespaced_with(client.clone(), namespace, &ar)
    } else {
        kube::Api::all_with(client.clone(), &ar)
    };
    let o: DynamicObject = serde_json::from_value(obj.clone())?;
    let pp = PostParams {
        dry_run,
        ..Default::default()
    };
    api.create(&pp, &o).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rendered_profile_is_accepted_by_the_real_apiserver() {
    let test = "helm_chart::every_rendered_profile_is_accepted_by_the_real_apiserver";
    let Some(helm) = helm::require_helm(test) else {
        return;
    };
    if !tests::require_real(test, &["etcd"]) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let scratch = tests::scratch("helmapply");
    let api = tests::kube::KubeApi::start(scratch.dir.path())
        .await
        .expect("kube-apiserver");
    let client = api.client().await.expect("client");

    // the chart's CRDs first (helm installs crds/ before templates), then wait until served
    let crd_text =
        std::fs::read_to_string(helm::chart_dir().join("crds/subnet.yaml")).expect("crd");
    for crd in helm::parse_documents(&crd_text).expect("crd yaml") {
        let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_json::from_value(crd).expect("CRD");
        tests::kube_objects::install_crd(&client, crd).await;
    }

    let mut counts = BTreeMap::new();
    for p in PROFILES {
        // one namespace and release per profile: cluster-scoped names do not collide
        let ns = format!("zovn-{p}");
        let release = format!("r-{p}");
        let objs = helm::render(&helm, p, &release, &ns).unwrap_or_else(|e| panic!("{e:#}"));
        create_dynamic(
            &client,
            "",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            false,
        )
        .await
        .expect("namespace");
        for o in &objs {
            create_dynamic(&client, &ns, o, true)
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "{p}: dry run of {} {} refused: {e:#}",
                        o["kind"], o["metadata"]["name"]
                    )
                });
        }
        for o in &objs {
            create_dynamic(&client, &ns, o, false)
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "{p}: create of {} {} refused: {e:#}",
                        o["kind"], o["metadata"]["name"]
                    )
                });
        }
        // what was created is there: the workloads, read back
        let apps: kube::Api<k8s_openapi::api::apps::v1::DaemonSet> =
            kube::Api::namespaced(client.clone(), &ns);
        let ds = apps
            .list(&Default::default())
            .await
            .expect("list DaemonSets");
        assert_eq!(ds.items.len(), of_kind(&objs, "DaemonSet").len(), "{p}");
        counts.insert(*p, objs.len());
    }
    eprintln!("objects accepted (dry run, then create) per profile: {counts:?}");
    assert_eq!(counts.len(), PROFILES.len());
}

#[test]
fn every_start_script_is_valid_bash() {
    let Some(helm) = helm::require_helm("helm_chart::start_scripts_parse") else {
        return;
    };
    let objs = render(&helm, "ha");
    let cm = named(&objs, "ConfigMap", "zs-zstack-ovn-scripts").expect("scripts ConfigMap");
    let scripts = cm["data"].as_object().expect("data");
    assert!(scripts.len() >= 6, "{:?}", scripts.keys());
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, body) in scripts {
        let p = dir.path().join(name);
        std::fs::write(&p, body.as_str().expect("script")).expect("write");
        let out = std::process::Command::new("bash")
            .arg("-n")
            .arg(&p)
            .output()
            .expect("bash -n");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // every script a container runs is in the ConfigMap
    for o in &objs {
        for c in containers(o) {
            for a in c["command"].as_array().into_iter().flatten() {
                if let Some(s) = a.as_str().and_then(|a| a.strip_prefix("/zovn/scripts/")) {
                    assert!(scripts.contains_key(s), "{} runs missing {s}", c["name"]);
                }
            }
        }
    }
}

/// The chart's Raft start script, for real: three NB members started by
/// `ovsdb-central.sh` exactly as the ha StatefulSet runs it (member 0 creates the cluster,
/// 1 and 2 join through member 0's address), each in its own mount namespace (its own
/// `/var/lib/ovn` and `/run`) inside one private network namespace, on 127.0.0.1-3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ha_start_script_forms_a_three_member_raft_cluster() {
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let test = "helm_chart::the_ha_start_script_forms_a_three_member_raft_cluster";
    let Some(helm) = helm::require_helm(test) else {
        return;
    };
    if !tests::require_real(
        test,
        &["ovsdb-server", "ovsdb-tool", "ovn-nbctl", "ip", "unshare"],
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let scratch = tests::scratch("helmraft");
    let objs = render(&helm, "ha");
    let cm = named(&objs, "ConfigMap", "zs-zstack-ovn-scripts").expect("scripts");
    let scripts = scratch.dir.path().join("scripts");
    std::fs::create_dir_all(&scripts).expect("mkdir");
    for (name, body) in cm["data"].as_object().expect("data") {
        std::fs::write(scripts.join(name), body.as_str().expect("script")).expect("write");
    }
    let ns = format!("{}helm", scratch.prefix);
    tests::sh(&["ip", "netns", "add", &ns]);
    struct DelNs(String);
    impl Drop for DelNs {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let _ns = DelNs(ns.clone());
    tests::sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    let mut members = Vec::new();
    for i in 0..3 {
        let data = scratch.dir.path().join(format!("data-{i}"));
        std::fs::create_dir_all(&data).expect("mkdir");
        let log =
            std::fs::File::create(scratch.dir.path().join(format!("member-{i}.log"))).expect("log");
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, "bash", "-c"])
            .arg(r#"mount -t tmpfs tmpfs /run && mount --bind "$DATA" /var/lib/ovn && exec bash "$SCRIPTS/ovsdb-central.sh""#)
            .env("DATA", &data)
            .env("SCRIPTS", &scripts)
            .env("DB", "nb")
            .env("MODE", "ha")
            .env("POD_NAME", format!("zs-zstack-ovn-nbdb-{i}"))
            .env("POD_IP", format!("127.0.0.{}", i + 1))
            .env("PEER0", "127.0.0.1")
            .env("OVN_SSL", "false")
            .env("TLS_DIR", "/nonexistent")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start member");
        members.push(tests::kube_objects::KillOnDrop(child));
    }
    let all = "tcp:127.0.0.1:6641,tcp:127.0.0.2:6641,tcp:127.0.0.3:6641";
    let nbctl = |db: &str, args: &[&str]| {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "ovn-nbctl",
                "--timeout=5",
                &format!("--db={db}"),
            ])
            .args(args)
            .output()
            .expect("ovn-nbctl");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // a write through the leader (ovn-nbctl finds it among the members)
    tests::kube_objects::eventually(
        "the Raft cluster accepts a write",
        Duration::from_secs(60),
        || async { nbctl(all, &["--may-exist", "ls-add", "chart-raft"]).map(|_| ()) },
    )
    .await;
    // every member holds it: each is a cluster member, not a standalone copy
    for i in 1..=3 {
        let db = format!("tcp:127.0.0.{i}:6641");
        tests::kube_objects::eventually(
            &format!("member {i} has the switch"),
            Duration::from_secs(30),
            || async {
                nbctl(&db, &["--no-leader-only", "ls-list"]).filter(|o| o.contains("chart-raft"))
            },
        )
        .await;
    }
    for i in 0..3 {
        let db = scratch.dir.path().join(format!("data-{i}/ovnnb_db.db"));
        let local = tests::sh(&["ovsdb-tool", "db-local-address", &db.to_string_lossy()]);
        assert_eq!(local.trim(), format!("tcp:127.0.0.{}:6643", i + 1));
        assert_eq!(
            tests::sh(&["ovsdb-tool", "db-is-clustered", &db.to_string_lossy()]).trim(),
            ""
        );
    }
    drop(members);
}

/// The node pod's start scripts, for real: `node-ovsdb.sh`, `node-vswitchd.sh` (kernel
/// build) and `node-ovn-controller.sh` from the rendered ConfigMap, in one private mount
/// namespace (own `/run` and `/etc/openvswitch`) and network namespace, as the node pod's
/// containers share the host paths. The database is created, the chassis id is the node
/// name, and every daemon answers on its control socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_start_scripts_bring_up_ovs_and_ovn_controller() {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let test = "helm_chart::the_node_start_scripts_bring_up_ovs_and_ovn_controller";
    let Some(helm) = helm::require_helm(test) else {
        return;
    };
    if !tests::require_real(
        test,
        &[
            "ovsdb-server",
            "ovs-vswitchd",
            "ovn-controller",
            "nsenter",
            "unshare",
        ],
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let scratch = tests::scratch("helmnode");
    let objs = render(&helm, "single");
    let cm = named(&objs, "ConfigMap", "zs-zstack-ovn-scripts").expect("scripts");
    let scripts = scratch.dir.path().join("scripts");
    std::fs::create_dir_all(&scripts).expect("mkdir");
    for (name, body) in cm["data"].as_object().expect("data") {
        std::fs::write(scripts.join(name), body.as_str().expect("script")).expect("write");
    }
    let log = std::fs::File::create(scratch.dir.path().join("node.log")).expect("log");
    let node = format!("{}node", scratch.prefix);
    let child = Command::new("unshare")
        .args(["-m", "-n", "--propagation", "private", "bash", "-c"])
        .arg(concat!(
            "mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /etc/openvswitch && ip link set lo up && ",
            "(bash \"$SCRIPTS/node-ovsdb.sh\" & bash \"$SCRIPTS/node-vswitchd.sh\" & ",
            "bash \"$SCRIPTS/node-ovn-controller.sh\" & wait)"
        ))
        .env("SCRIPTS", &scripts)
        .env("NODE_NAME", &node)
        .env("VSWITCHD", "/usr/lib/openvswitch-switch/ovs-vswitchd")
        .env("OVN_SSL", "false")
        .env("TLS_DIR", "/nonexistent")
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start the node scripts");
    // the whole process group (bash and the three daemons) goes when the test ends
    struct KillGroup(std::process::Child);
    impl Drop for KillGroup {
        fn drop(&mut self) {
            let pgid = nix::unistd::Pid::from_raw(-(self.0.id() as i32));
            let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = self.0.wait();
        }
    }
    let pid = child.id().to_string();
    let _group = KillGroup(child);
    let inside = |args: &[&str]| {
        let out = Command::new("nsenter")
            .args(["-t", &pid, "-m", "-n", "--"])
            .args(args)
            .output()
            .expect("nsenter");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    // each container's readiness probe, as kubelet runs it
    let node_ds = named(&objs, "DaemonSet", "zs-zstack-ovn-node").expect("node DaemonSet");
    for c in ["ovsdb-server", "ovs-vswitchd", "ovn-controller"] {
        let probe: Vec<String> = container(node_ds, c)["readinessProbe"]["exec"]["command"]
            .as_array()
            .expect("exec probe")
            .iter()
            .map(|a| a.as_str().expect("arg").to_string())
            .collect();
        let probe: Vec<&str> = probe.iter().map(String::as_str).collect();
        tests::kube_objects::eventually(
            &format!("{c}'s readiness probe {probe:?}"),
            Duration::from_secs(60),
            || async { inside(&probe) },
        )
        .await;
    }
    let id = inside(&[
        "ovs-vsctl",
        "--timeout=5",
        "get",
        "Open_vSwitch",
        ".",
        "external_ids:system-id",
    ])
    .expect("system-id");
    assert_eq!(id.trim_matches('"'), node);
    // ovs-vswitchd writes the datapath types it supports into the database
    let types = inside(&[
        "ovs-vsctl",
        "--timeout=5",
        "get",
        "Open_vSwitch",
        ".",
        "datapath_types",
    ]);
    assert!(
        types.as_deref().is_some_and(|t| t.contains("netdev")),
        "datapath_types {types:?}"
    );
}

/// OVN central `single`, for real: the pod's three containers (`ovsdb-central.sh` for NB
/// and SB, `northd.sh` on their unix sockets, as the Deployment sets them) in one private
/// mount and network namespace; a logical switch written to NB reaches SB through northd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_single_central_scripts_run_nb_sb_and_northd() {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let test = "helm_chart::the_single_central_scripts_run_nb_sb_and_northd";
    let Some(helm) = helm::require_helm(test) else {
        return;
    };
    if !tests::require_real(
        test,
        &[
            "ovsdb-server",
            "ovsdb-tool",
            "ovn-northd",
            "ovn-nbctl",
            "ovn-sbctl",
            "nsenter",
            "unshare",
        ],
    ) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let scratch = tests::scratch("helmcentral");
    let objs = render(&helm, "single");
    let cm = named(&objs, "ConfigMap", "zs-zstack-ovn-scripts").expect("scripts");
    let scripts = scratch.dir.path().join("scripts");
    std::fs::create_dir_all(&scripts).expect("mkdir");
    for (name, body) in cm["data"].as_object().expect("data") {
        std::fs::write(scripts.join(name), body.as_str().expect("script")).expect("write");
    }
    // northd's remotes exactly as the Deployment passes them
    let central = named(&objs, "Deployment", "zs-zstack-ovn-central").expect("central");
    let env = |name: &str| {
        container(central, "northd")["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .expect("northd env")
            .to_string()
    };
    let data = scratch.dir.path().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    let log = std::fs::File::create(scratch.dir.path().join("central.log")).expect("log");
    let child = Command::new("unshare")
        .args(["-m", "-n", "--propagation", "private", "bash", "-c"])
        .arg(concat!(
            "mount -t tmpfs tmpfs /run && mount --bind \"$DATA\" /var/lib/ovn && ip link set lo up && ",
            "(DB=nb bash \"$SCRIPTS/ovsdb-central.sh\" & DB=sb bash \"$SCRIPTS/ovsdb-central.sh\" & ",
            "bash \"$SCRIPTS/northd.sh\" & wait)"
        ))
        .env("SCRIPTS", &scripts)
        .env("DATA", &data)
        .env("MODE", "single")
        .env("POD_IP", "127.0.0.1")
        .env("NB_REMOTE", env("NB_REMOTE"))
        .env("SB_REMOTE", env("SB_REMOTE"))
        .env("OVN_SSL", "false")
        .env("TLS_DIR", "/nonexistent")
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start the central scripts");
    struct KillGroup(std::process::Child);
    impl Drop for KillGroup {
        fn drop(&mut self) {
            let pgid = nix::unistd::Pid::from_raw(-(self.0.id() as i32));
            let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = self.0.wait();
        }
    }
    let pid = child.id().to_string();
    let _group = KillGroup(child);
    let inside = |args: &[&str]| {
        let out = Command::new("nsenter")
            .args(["-t", &pid, "-m", "-n", "--"])
            .args(args)
            .output()
            .expect("nsenter");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    // clients reach the servers on the pod address (what the Services target)
    tests::kube_objects::eventually("NB accepts a switch", Duration::from_secs(60), || async {
        inside(&[
            "ovn-nbctl",
            "--timeout=5",
            "--db=tcp:127.0.0.1:6641",
            "--may-exist",
            "ls-add",
            "chart-single",
        ])
    })
    .await;
    tests::kube_objects::eventually(
        "northd puts it into SB",
        Duration::from_secs(60),
        || async {
            inside(&[
                "ovn-sbctl",
                "--timeout=5",
                "--db=tcp:127.0.0.1:6642",
                "--bare",
                "--columns=external_ids",
                "list",
                "Datapath_Binding",
            ])
            .filter(|o| o.contains("chart-single"))
        },
    )
    .await;
    assert!(data.join("ovnnb_db.db").is_file() && data.join("ovnsb_db.db").is_file());
}
