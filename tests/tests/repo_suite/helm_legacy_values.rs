//! Values files of zstack-ovn-kubernetes, the predecessor, through this chart and the real
//! Helm engine (docs/install.md, "Coming from zstack-ovn-kubernetes";
//! `templates/_legacy_values.tpl`). Its three files (`tests/fixtures/zstack-ovn-kubernetes/`)
//! are refused for `network.nodeSubnetSize`, naming it; with the refused keys deleted, as
//! the messages say, each renders with its keys mapped: the central image and resources,
//! northd's replicas, the OVSDB client knobs at their defaults. A file turning DPDK on gets
//! a DPDK node pool and its gateway interface becomes the tunnel NIC. A legacy key and the
//! key it maps to fail when they disagree, naming both; typos are still refused. The
//! profiles shipped beside `values.yaml` lint and render.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tests::helm::{self, NAMESPACE as NS, RELEASE, args, container, named, of_kind};

/// The chart's default image: `appVersion`, the workspace version `make images` tags.
const IMAGE: &str = concat!("zstack-ovn/zstack-ovn:", env!("CARGO_PKG_VERSION"));

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/zstack-ovn-kubernetes")
        .join(name)
}

/// `file` with the dotted `keys` deleted (as an operator follows a refusal), written into `dir`.
fn without(file: &Path, keys: &[&str], dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(file).expect("read fixture");
    let mut v: Value = serde_norway::from_str(&text).expect("parse fixture");
    for key in keys {
        let (parent, last) = key.rsplit_once('.').unwrap_or(("", key));
        let mut m = &mut v;
        for part in parent.split('.').filter(|p| !p.is_empty()) {
            m = &mut m[part];
        }
        let removed = m.as_object_mut().and_then(|o| o.remove(last));
        assert!(removed.is_some(), "{} has no {key}", file.display());
    }
    let out = dir.join(file.file_name().expect("file name"));
    std::fs::write(&out, serde_norway::to_string(&v).expect("yaml")).expect("write");
    out
}

/// Renders `files` with `extra` and returns helm's error; panics if it renders.
fn refusal(helm: &Path, files: &[PathBuf], extra: &[&str]) -> String {
    let err = helm::render_files(helm, files, RELEASE, NS, extra)
        .map(|_| ())
        .expect_err("rendered, want a refusal");
    format!("{err:#}")
}

fn render(helm: &Path, files: &[PathBuf], extra: &[&str]) -> Vec<Value> {
    helm::render_files(helm, files, RELEASE, NS, extra).unwrap_or_else(|e| panic!("{e:#}"))
}

fn assert_names(msg: &str, want: &[&str]) {
    for w in want {
        assert!(msg.contains(w), "refusal lacks {w:?}: {msg}");
    }
}

/// The env value `name` of a container.
fn env<'a>(c: &'a Value, name: &str) -> Option<&'a str> {
    c["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?
        .get("value")?
        .as_str()
}

#[test]
fn predecessor_files_are_refused_for_node_subnet_size_naming_it() {
    let Some(helm) = helm::require_helm("helm_legacy_values::node_subnet_size") else {
        return;
    };
    for f in [
        "values-standalone.yaml",
        "values-standalone-ha.yaml",
        "values-external.yaml",
    ] {
        let msg = refusal(&helm, &[fixture(f)], &[]);
        assert_names(
            &msg,
            &[
                "network.nodeSubnetSize",
                "zstack-ovn-kubernetes",
                "/24 per node",
                "network.clusterCIDR",
                "Delete network.nodeSubnetSize",
            ],
        );
    }
}

#[test]
fn predecessor_standalone_renders_with_its_keys_mapped() {
    let Some(helm) = helm::require_helm("helm_legacy_values::standalone") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // its controller, node and CNI images are the predecessor's programs: refused, named
    let f = without(
        &fixture("values-standalone.yaml"),
        &["network.nodeSubnetSize"],
        dir.path(),
    );
    let msg = refusal(&helm, &[f], &[]);
    assert_names(
        &msg,
        &[
            "controller.image.repository",
            "zstack-ovnkube-controller",
            "Delete controller.image",
        ],
    );
    let f = without(
        &fixture("values-standalone.yaml"),
        &[
            "network.nodeSubnetSize",
            "controller.image",
            "node.image",
            "cni.image",
        ],
        dir.path(),
    );
    let objs = render(&helm, &[f], &[]);
    // ovn.standalone.image: OVN central's image; the per-database resources: central's
    let central = named(&objs, "Deployment", "zs-zstack-ovn-central").expect("central");
    for name in ["nbdb", "sbdb", "northd"] {
        let c = container(central, name);
        assert_eq!(
            c["image"],
            "docker.gh-proxy.com/ghcr.io/ovn-org/ovn-kubernetes/ovn-kube-ubuntu:master"
        );
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    }
    for name in ["nbdb", "sbdb"] {
        let r = &container(central, name)["resources"];
        assert_eq!(r["limits"]["cpu"], "500m", "{name}: {r}");
        assert_eq!(r["requests"]["memory"], "256Mi", "{name}: {r}");
    }
    // the rest is this chart's image; controller.replicas, logging, tunnel carried over
    let ctrl = named(&objs, "Deployment", "zs-zstack-ovn-controller").expect("controller");
    assert_eq!(ctrl["spec"]["replicas"], 1);
    let c = container(ctrl, "controller");
    assert_eq!(c["image"], IMAGE);
    assert!(args(c).iter().any(|a| a == "--log-json"), "{:?}", args(c));
    assert_eq!(c["resources"]["limits"]["cpu"], "500m");
    let agent = named(&objs, "DaemonSet", "zs-zstack-ovn-node").expect("node DaemonSet");
    let a = args(container(agent, "agent"));
    assert!(a.iter().any(|x| x == "--encap-type=vxlan"), "{a:?}");
    assert_eq!(container(agent, "agent")["image"], IMAGE);
}

#[test]
fn predecessor_ha_maps_northd_replicas_and_resources() {
    let Some(helm) = helm::require_helm("helm_legacy_values::ha") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let f = without(
        &fixture("values-standalone-ha.yaml"),
        &["network.nodeSubnetSize"],
        dir.path(),
    );
    let objs = render(&helm, std::slice::from_ref(&f), &[]);
    let mut northd = 0;
    for db in ["nb", "sb"] {
        let name = format!("zs-zstack-ovn-{db}db");
        let sts = named(&objs, "StatefulSet", &name).expect("StatefulSet");
        assert_eq!(sts["spec"]["replicas"], 3, "{name}");
        assert!(
            sts["spec"]["volumeClaimTemplates"].is_array(),
            "{name}: storage.enabled"
        );
        let c = container(sts, &format!("{db}db"));
        assert_eq!(
            c["image"],
            "ghcr.io/ovn-org/ovn-kubernetes/ovn-kube-ubuntu:master"
        );
        assert_eq!(c["resources"]["limits"]["cpu"], "1000m");
        assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
        northd += helm::containers(sts)
            .iter()
            .filter(|c| c["name"] == "northd")
            .count();
    }
    // northd.replicas 2 (active-standby): an ovn-northd beside each of a database's 3 members
    assert_eq!(northd, 1, "northd beside one database's members");
    // the same replicas in single mode: refused, naming the key and the mode
    let msg = refusal(&helm, &[f], &["--set", "ovn.standalone.haMode=single"]);
    assert_names(
        &msg,
        &[
            "ovn.standalone.northd.replicas 2",
            "ovn.standalone.haMode=ha",
        ],
    );
}

#[test]
fn predecessor_external_renders_and_refuses_what_it_cannot_honour() {
    let Some(helm) = helm::require_helm("helm_legacy_values::external") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let f = without(
        &fixture("values-external.yaml"),
        &["network.nodeSubnetSize"],
        dir.path(),
    );
    let objs = render(&helm, std::slice::from_ref(&f), &[]);
    assert!(named(&objs, "Deployment", "zs-zstack-ovn-central").is_none());
    assert!(of_kind(&objs, "StatefulSet").is_empty());
    let ctrl = named(&objs, "Deployment", "zs-zstack-ovn-controller").expect("controller");
    let a = args(container(ctrl, "controller"));
    for want in ["--mode=external", "--nb=tcp:192.168.1.100:6641"] {
        assert!(a.iter().any(|x| x == want), "{want}: {a:?}");
    }
    // the client knobs: their defaults ignored, another value refused
    let msg = refusal(
        &helm,
        std::slice::from_ref(&f),
        &["--set", "ovn.connectTimeout=45s"],
    );
    assert_names(
        &msg,
        &["ovn.connectTimeout 45s", "Delete ovn.connectTimeout"],
    );
    // its ssl keys are file paths: with TLS on, refused, saying how to pass the PEM
    let msg = refusal(&helm, &[f], &["--set", "ovn.ssl.enabled=true"]);
    assert_names(
        &msg,
        &[
            "ovn.ssl.caCert \"/etc/ovn/ca.crt\" is not PEM text",
            "--set-file ovn.ssl.caCert=/etc/ovn/ca.crt",
            "ovn.ssl.secretName",
        ],
    );
}

#[test]
fn dpdk_and_gateway_interface_become_a_dpdk_pool_and_the_tunnel_nic() {
    let Some(helm) = helm::require_helm("helm_legacy_values::dpdk") else {
        return;
    };
    let objs = render(&helm, &[fixture("values-dpdk.yaml")], &[]);
    let ds = of_kind(&objs, "DaemonSet");
    for name in ["zs-zstack-ovn-node-dpdk", "zs-zstack-ovn-ovs-dpdk"] {
        let d = ds
            .iter()
            .find(|d| d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no DaemonSet {name}"));
        let spec = &d["spec"]["template"]["spec"];
        assert_eq!(
            spec["nodeSelector"]["network.zstack.io/datapath"], "dpdk",
            "{name}"
        );
        let vhost = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "vhost-root")
            .unwrap_or_else(|| panic!("{name}: no vhost-root volume"));
        assert_eq!(vhost["hostPath"]["path"], "/var/run/zstack-ovn/vhost-dpdk");
    }
    let ovs = named(&objs, "DaemonSet", "zs-zstack-ovn-ovs-dpdk").expect("ovs-dpdk");
    assert_eq!(
        env(container(ovs, "ovs-vswitchd"), "VSWITCHD"),
        Some("/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk")
    );
    let cm = named(&objs, "ConfigMap", "zs-zstack-ovn-node-dpdk-datapath").expect("datapath");
    let dp: Value =
        serde_norway::from_str(cm["data"]["datapath.yaml"].as_str().expect("datapath.yaml"))
            .expect("parse");
    assert_eq!(dp["datapath"], "dpdk");
    // gateway.interface: the tunnel NIC of every OVS DaemonSet, the default one included
    for name in ["zs-zstack-ovn-ovs", "zs-zstack-ovn-ovs-dpdk"] {
        let d = named(&objs, "DaemonSet", name).expect("ovs");
        assert_eq!(
            env(container(d, "uplink"), "TUNNEL_INTERFACE"),
            Some("ens2f0")
        );
    }
}

#[test]
fn a_legacy_key_and_its_new_key_that_disagree_fail_naming_both() {
    let Some(helm) = helm::require_helm("helm_legacy_values::conflicts") else {
        return;
    };
    let dpdk = fixture("values-dpdk.yaml");
    let d = std::slice::from_ref(&dpdk);
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--set", "tunnel.interface=eth9"],
            &["gateway.interface \"ens2f0\"", "tunnel.interface \"eth9\""],
        ),
        (
            &["--set", "vhost.socketRoot=/run/v"],
            &["dpdk.socketDir", "vhost.socketRoot \"/run/v\""],
        ),
        (
            &["--set", "node.datapathConfig.datapath=kernel"],
            &["dpdk.enabled", "node.datapathConfig.datapath \"kernel\""],
        ),
        (
            &[
                "--set",
                "nodePools[0].name=k",
                "--set",
                "nodePools[0].nodeSelector.a=b",
                "--set",
                "nodePools[0].datapathConfig.datapath=kernel",
            ],
            &["dpdk.enabled", "nodePools"],
        ),
        (
            &[
                "--set",
                "ovn.standalone.resources.limits.cpu=2",
                "--set",
                "ovn.standalone.nbdb.resources.limits.cpu=1",
            ],
            &["ovn.standalone.nbdb.resources", "ovn.standalone.resources"],
        ),
    ];
    for (set, want) in cases {
        let msg = refusal(&helm, d, set);
        assert_names(&msg, want);
    }
    // the same value under both keys is accepted
    let objs = render(&helm, d, &["--set", "tunnel.interface=ens2f0"]);
    let ovs = named(&objs, "DaemonSet", "zs-zstack-ovn-ovs").expect("ovs");
    assert_eq!(
        env(container(ovs, "uplink"), "TUNNEL_INTERFACE"),
        Some("ens2f0")
    );
    // dpdk.enabled beside a DPDK pool: the pool wins, no second one
    let objs = render(
        &helm,
        &[helm::profile_files("dpdk-pools").remove(0)],
        &["--set", "dpdk.enabled=true"],
    );
    assert!(named(&objs, "DaemonSet", "zs-zstack-ovn-node-dpdk").is_none());
    assert!(named(&objs, "DaemonSet", "zs-zstack-ovn-node-dpdk-1g").is_some());
}

#[test]
fn the_schema_still_refuses_typos_beside_the_legacy_keys() {
    let Some(helm) = helm::require_helm("helm_legacy_values::typos") else {
        return;
    };
    for (set, key) in [
        ("dpdk.enable=true", "dpdk"),
        ("gateway.interfaces=eth1", "gateway"),
        ("ovn.standalone.northd.replica=2", "ovn.standalone.northd"),
        ("network.nodeSubnetSize=big", "network.nodeSubnetSize"),
    ] {
        let msg = refusal(&helm, &[], &["--set", set]);
        assert_names(&msg, &["values don't meet the specifications", key]);
    }
}

#[test]
fn the_shipped_profiles_lint_and_render() {
    let Some(helm) = helm::require_helm("helm_legacy_values::shipped_profiles") else {
        return;
    };
    for p in helm::SHIPPED_PROFILES {
        let file = helm::chart_dir().join(p);
        let files = std::slice::from_ref(&file);
        let r = helm::lint_files(&helm, files).expect("helm lint");
        assert!(r.ok, "helm lint --strict {p}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("0 chart(s) failed"), "{p}: {}", r.stdout);
        let objs = render(&helm, files, &[]);
        let central = named(&objs, "Deployment", "zs-zstack-ovn-central").is_some();
        let raft = of_kind(&objs, "StatefulSet").len();
        match *p {
            "values-standalone.yaml" => assert!(central && raft == 0, "{p}"),
            "values-standalone-ha.yaml" => assert!(!central && raft == 2, "{p}"),
            _ => assert!(!central && raft == 0, "{p}"),
        }
        assert!(
            named(&objs, "DaemonSet", "zs-zstack-ovn-node").is_some(),
            "{p}"
        );
    }
}
