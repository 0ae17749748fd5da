//! The Helm chart `deploy/helm/zstack-ovn` through the real Helm engine (helm 3.17.2):
//! lint and render of the four profiles with assertions on the objects, the schema's
//! refusals with their messages, and every rendered object accepted by the real
//! kube-apiserver 1.20.2 (server-side dry run, then create). The start scripts run for
//! real in `helm_scripts.rs`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use tests::helm::{
    self, NAMESPACE as NS, PROFILES, RELEASE, args, container, containers, named, of_kind,
    render_profile as render,
};

/// The chart's default image: `appVersion`, the workspace version `make images` tags.
const IMAGE: &str = concat!("zstack-ovn/zstack-ovn:", env!("CARGO_PKG_VERSION"));

/// Every one of `want` is among the controller's `args`.
fn assert_has_args(args: &[String], want: &[&str]) {
    for w in want {
        assert!(
            args.iter().any(|x| x == w),
            "controller args lack {w}: {args:?}"
        );
    }
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
    assert_eq!(
        cs,
        vec![
            json!("nbdb"),
            json!("sbdb"),
            json!("northd"),
            json!("dbexporter")
        ]
    );
    // the OVN database metrics: the chart's own image, this pod's NB, SB and northd
    let x = container(central, "dbexporter");
    assert_eq!(x["command"], json!(["zstack-ovn-dbexporter"]));
    assert_eq!(x["image"], "zstack-ovn/zstack-ovn:0.2.0");
    assert_has_args(
        &args(x),
        &[
            "--listen=$(HOST_IP):9479",
            "--nb-ctl=/var/run/ovn/ovnnb_db.ctl",
            "--nb-file=/var/lib/ovn/ovnnb_db.db",
            "--sb-ctl=/var/run/ovn/ovnsb_db.ctl",
            "--sb-file=/var/lib/ovn/ovnsb_db.db",
            "--northd-ctl=/var/run/ovn/ovn-northd.ctl",
        ],
    );
    assert_eq!(x["readinessProbe"]["httpGet"]["port"], 9479);
    let off = helm::render_with(
        &helm,
        "single",
        "zs",
        NS,
        &["--set", "ovn.standalone.metricsPort=0"],
    )
    .expect("render");
    let central_off = named(&off, "Deployment", "zs-zstack-ovn-central").expect("central");
    assert_eq!(
        containers(central_off).len(),
        3,
        "metricsPort 0: no dbexporter"
    );
    assert!(of_kind(&objs, "StatefulSet").is_empty());
    assert!(named(&objs, "Service", "zs-zstack-ovn-nbdb").is_some());
    assert!(named(&objs, "Service", "zs-zstack-ovn-sbdb").is_some());
    let ctl = named(&objs, "Deployment", "zs-zstack-ovn-controller").expect("controller");
    assert_eq!(ctl["spec"]["replicas"], 2);
    let a = args(container(ctl, "controller"));
    assert_has_args(
        &a,
        &[
            "--mode=standalone",
            "--nb=ssl:$(ZS_ZSTACK_OVN_NBDB_SERVICE_HOST):6641",
            "--sb=ssl:$(ZS_ZSTACK_OVN_SBDB_SERVICE_HOST):6642",
            // the chart's PKI, on by default
            "--nb-ca=/etc/zstack-ovn/tls/ca.crt",
            "--ovn-server-name=zstack-ovn-central",
            "--chassis-ca-cert=/etc/zstack-ovn/tls/chassis-ca.crt",
            "--agent-account=kube-system/zs-zstack-ovn-node",
            "--controller-account=kube-system/zs-zstack-ovn-controller",
            "--admission-addr=$(HOST_IP):10661",
            "--admission-cert=/etc/zovn/admission/tls.crt",
            "--cluster-cidr=10.244.0.0/16",
            "--leader-elect",
            "--leader-elect-lease-name=zs-zstack-ovn-controller",
            "--metrics-addr=$(HOST_IP):10660",
        ],
    );
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
    // the default node pool, full OVS, no pool: no affinity at all; the agent and the OVS
    // daemons in two DaemonSets, the datapath's never rolled by `helm upgrade`
    let ds = of_kind(&objs, "DaemonSet");
    assert_eq!(
        names(&ds),
        BTreeSet::from([
            "zs-zstack-ovn-node".to_string(),
            "zs-zstack-ovn-ovs".to_string()
        ])
    );
    let node = named(&objs, "DaemonSet", "zs-zstack-ovn-node").expect("agent DaemonSet");
    let ovs = named(&objs, "DaemonSet", "zs-zstack-ovn-ovs").expect("OVS DaemonSet");
    for d in [node, ovs] {
        assert!(d["spec"]["template"]["spec"]["affinity"].is_null());
    }
    let names_of =
        |d: &Value| -> Vec<Value> { containers(d).iter().map(|c| c["name"].clone()).collect() };
    assert_eq!(names_of(node), vec![json!("install-cni"), json!("agent")]);
    assert_eq!(
        names_of(ovs),
        vec![
            json!("ovsdb-server"),
            json!("ovs-vswitchd"),
            json!("ovn-controller"),
            // tunnel.interface=auto: the node's NIC on br-phy
            json!("uplink")
        ]
    );
    assert_eq!(node["spec"]["updateStrategy"]["type"], "RollingUpdate");
    assert_eq!(ovs["spec"]["updateStrategy"]["type"], "OnDelete");
    assert_eq!(
        ovs["spec"]["template"]["spec"]["automountServiceAccountToken"],
        false
    );
    let vs = container(ovs, "ovs-vswitchd");
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
    assert!(named(&objs, "DaemonSet", "zs-zstack-ovn-ovs").is_none());
    assert!(
        !args(container(node, "agent"))
            .iter()
            .any(|a| a.starts_with("--vswitchd-restart-cmd"))
    );
}

#[test]
fn tunnel_interface_adds_the_uplink_keeper_and_the_agent_reads_br_phy() {
    let Some(helm) = helm::require_helm("helm_chart::tunnel_interface") else {
        return;
    };
    let objs = helm::render_with(
        &helm,
        "dpdk-pools",
        "zs",
        NS,
        &["--set", "tunnel.interface=eth1"],
    )
    .expect("render");
    let is_ovs = |d: &Value| {
        d["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("zs-zstack-ovn-ovs"))
    };
    let daemonsets: Vec<&Value> = objs.iter().filter(|o| o["kind"] == "DaemonSet").collect();
    assert_eq!(
        daemonsets.len(),
        6,
        "the default and the pools' DaemonSets, agent and OVS each"
    );
    for ds in daemonsets.iter().filter(|d| is_ovs(d)) {
        let name = &ds["metadata"]["name"];
        let uplink = container(ds, "uplink");
        assert_eq!(
            uplink["env"],
            json!([
                {"name": "TUNNEL_INTERFACE", "value": "eth1"},
                {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                // the network name the controller gives VLAN Subnets' localnet ports
                {"name": "BRIDGE_MAPPINGS", "value": "physnet:br-phy"},
                // the agent's mark of an uninstall (its hostPath, read-only here)
                {"name": "UNINSTALL_FLAG", "value": "/var/lib/zstack-ovn/uninstall-requested"},
                // br-phy's keeper: the newest pod
                {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            ]),
            "{name}"
        );
        assert!(
            uplink["volumeMounts"]
                .as_array()
                .expect("mounts")
                .iter()
                .any(|m| m["mountPath"] == "/var/lib/zstack-ovn" && m["readOnly"] == true),
            "{name}"
        );
        assert_eq!(
            uplink["securityContext"]["capabilities"]["add"],
            json!(["NET_ADMIN"]),
            "{name}"
        );
    }
    for ds in daemonsets.iter().filter(|d| !is_ovs(d)) {
        let name = &ds["metadata"]["name"];
        let a = args(container(ds, "agent"));
        assert!(
            a.contains(&"--encap-ip-interface=br-phy".to_string()),
            "{name}: {a:?}"
        );
        assert!(
            !a.iter().any(|x| x.starts_with("--encap-ip=")),
            "{name}: {a:?}"
        );
    }
    // shared gateway mode: the agents report br-phy, with the next hop given; the
    // controller gets the dual-stack join network in two flags
    let objs = helm::render_with(
        &helm,
        "single",
        "zs",
        NS,
        &[
            "--set",
            "tunnel.interface=eth1,gateway.mode=shared,gateway.nextHop=192.0.2.254",
            "--set",
            "gateway.nextHopV6=2001:db8::fe",
            "--set-json",
            r#"network.joinCIDR="100.64.0.0/16,fd98::/64""#,
        ],
    )
    .expect("render shared");
    for ds in objs
        .iter()
        .filter(|o| o["kind"] == "DaemonSet" && !is_ovs(o))
    {
        let a = args(container(ds, "agent"));
        for want in [
            "--gateway-mode=shared",
            "--gateway-interface=br-phy",
            "--gateway-next-hop=192.0.2.254",
            "--gateway-next-hop-v6=2001:db8::fe",
        ] {
            assert!(a.contains(&want.to_string()), "{a:?}");
        }
    }
    let ctl = objs
        .iter()
        .find(|o| {
            o["kind"] == "Deployment"
                && helm::containers(o)
                    .iter()
                    .any(|c| c["name"] == "controller")
        })
        .expect("controller Deployment");
    let a = args(container(ctl, "controller"));
    // the default allows no externalIP: the flag is there, empty
    assert!(
        a.contains(&"--service-external-ip-cidrs=".to_string()),
        "{a:?}"
    );
    for want in [
        "--gateway-mode=shared",
        "--join-cidr=100.64.0.0/16",
        "--join-cidr-v6=fd98::/64",
    ] {
        assert!(a.contains(&want.to_string()), "{a:?}");
    }
    // the externalIPs allowlist reaches the controller and every agent, the same
    let objs = helm::render_with(
        &helm,
        "single",
        "zs",
        NS,
        &[
            "--set-json",
            r#"services.externalIPs.allowedCIDRs=["192.0.2.0/24","2001:db8:ee::/64"]"#,
        ],
    )
    .expect("render with allowed externalIPs");
    let want = "--service-external-ip-cidrs=192.0.2.0/24,2001:db8:ee::/64".to_string();
    let mut agents = 0;
    for o in &objs {
        let c = helm::containers(o);
        for name in ["agent", "controller"] {
            if let Some(c) = c.iter().find(|c| c["name"] == name) {
                assert!(args(c).contains(&want), "{name}: {:?}", args(c));
                agents += usize::from(name == "agent");
            }
        }
    }
    assert!(agents > 0, "no agent container rendered");
    // the operator's own mappings, or none (the key left alone)
    for (set, want) in [
        (
            r#"tunnel.bridgeMappings="physnet:br-phy,storage:br-st""#,
            "physnet:br-phy,storage:br-st",
        ),
        (r#"tunnel.bridgeMappings="""#, ""),
    ] {
        let objs = helm::render_with(
            &helm,
            "single",
            "zs",
            NS,
            &["--set", "tunnel.interface=eth1", "--set-json", set],
        )
        .expect("render");
        let ovs = named(&objs, "DaemonSet", "zs-zstack-ovn-ovs").expect("OVS");
        assert_eq!(
            container(ovs, "uplink")["env"][2],
            json!({"name": "BRIDGE_MAPPINGS", "value": want}),
            "{set}"
        );
    }
    // the default, auto: the keeper finds the NIC holding the node's address
    let objs = helm::render_with(&helm, "single", "zs", NS, &[]).expect("render");
    let ovs = named(&objs, "DaemonSet", "zs-zstack-ovn-ovs").expect("OVS");
    assert_eq!(container(ovs, "uplink")["env"][0]["value"], "auto");
    let node = named(&objs, "DaemonSet", "zs-zstack-ovn-node").expect("node");
    assert!(args(container(node, "agent")).contains(&"--encap-ip-interface=br-phy".to_string()));
    // set empty: no keeper, the node IP as the endpoint
    let objs = helm::render_with(&helm, "single", "zs", NS, &["--set", "tunnel.interface="])
        .expect("render");
    let node = named(&objs, "DaemonSet", "zs-zstack-ovn-node").expect("node");
    let ovs = named(&objs, "DaemonSet", "zs-zstack-ovn-ovs").expect("OVS");
    assert!(!containers(ovs).iter().any(|c| c["name"] == "uplink"));
    assert!(args(container(node, "agent")).contains(&"--encap-ip=$(HOST_IP)".to_string()));
}

/// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` of a container's env, when set.
fn api_env(c: &Value) -> (Option<String>, Option<String>) {
    let get = |k: &str| {
        c["env"].as_array().and_then(|env| {
            env.iter()
                .find(|e| e["name"] == k)
                .map(|e| e["value"].as_str().unwrap_or_default().to_string())
        })
    };
    (
        get("KUBERNETES_SERVICE_HOST"),
        get("KUBERNETES_SERVICE_PORT"),
    )
}

#[test]
fn api_server_value_points_the_api_clients_at_it() {
    let Some(helm) = helm::require_helm("helm_chart::api_server") else {
        return;
    };
    // the containers whose process talks to the Kubernetes API
    let clients = ["controller", "agent"];
    for (url, host, port) in [
        ("https://172.30.0.1:6443", "172.30.0.1", "6443"),
        ("https://[fd00::1]:443/", "fd00::1", "443"),
        ("https://api.example.com:8443", "api.example.com", "8443"),
    ] {
        let set = format!("kubernetes.apiServer={url}");
        let objs =
            helm::render_with(&helm, "dpdk-pools", "zs", NS, &["--set", &set]).expect("render");
        let mut seen = 0;
        for w in objs.iter().filter(|o| {
            ["Deployment", "DaemonSet", "StatefulSet"]
                .contains(&o["kind"].as_str().unwrap_or_default())
        }) {
            for c in containers(w) {
                let name = c["name"].as_str().unwrap_or_default();
                let wn = &w["metadata"]["name"];
                if clients.contains(&name) {
                    seen += 1;
                    assert_eq!(
                        api_env(c),
                        (Some(host.to_string()), Some(port.to_string())),
                        "{url}: {wn}/{name}"
                    );
                } else {
                    assert_eq!(api_env(c), (None, None), "{url}: {wn}/{name}");
                }
            }
        }
        // the controller and the agents of the default and the two pools' DaemonSets
        assert_eq!(seen, 4, "{url}: API clients rendered");
    }
    // empty (the default): kubelet's values stay
    for profile in PROFILES {
        for o in render(&helm, profile) {
            for c in containers(&o) {
                assert_eq!(api_env(c), (None, None), "{profile}: {}", c["name"]);
            }
        }
    }
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
        // each member's metrics: its own database, NB on 9479 and SB on 9480 (an NB and an
        // SB member may share a node); the northd beside SB's members (the chart's PKI)
        let x = container(s, "dbexporter");
        let (db, metrics, northd) = if port == 6641 {
            ("nb", 9479, false)
        } else {
            ("sb", 9480, true)
        };
        let xa = args(x);
        assert_has_args(
            &xa,
            &[
                &format!("--listen=$(HOST_IP):{metrics}"),
                &format!("--{db}-ctl=/var/run/ovn/ovn{db}_db.ctl"),
            ],
        );
        assert_eq!(
            xa.iter().any(|a| a.starts_with("--northd-ctl=")),
            northd,
            "{name}: {xa:?}"
        );
        assert_eq!(xa.len(), if northd { 4 } else { 3 }, "{name}: {xa:?}");
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
    assert_eq!(nb.matches("ssl:$(ZS_ZSTACK_OVN_NBDB_").count(), 3, "{nb}");
    // SB applies OVN's RBAC to every network client: northd writes beside each SB member,
    // through its unix socket
    let sb = named(&objs, "StatefulSet", "zs-zstack-ovn-sbdb").expect("sbdb");
    let northd = container(sb, "northd");
    let env = northd["env"].as_array().expect("env");
    assert!(
        env.iter()
            .any(|e| e["name"] == "SB_REMOTE" && e["value"] == "unix:/var/run/ovn/ovnsb_db.sock"),
        "{env:?}"
    );
    let nbdb = named(&objs, "StatefulSet", "zs-zstack-ovn-nbdb").expect("nbdb");
    assert!(containers(nbdb).iter().all(|c| c["name"] != "northd"));
    let sbdb_env = container(sb, "sbdb")["env"]
        .as_array()
        .expect("env")
        .clone();
    assert!(
        sbdb_env
            .iter()
            .any(|e| e["name"] == "SB_RBAC" && e["value"] == "true")
    );
    let newer = helm::render_with(&helm, "ha", RELEASE, NS, &["--kube-version", "1.25.0"])
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
    // no central Services: the admission webhook's is the only one
    assert_eq!(
        names(&of_kind(&objs, "Service")),
        BTreeSet::from(["zs-zstack-ovn-controller-admission".to_string()]),
        "no central Services"
    );
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
    assert_has_args(
        &a,
        &[
            "--mode=external",
            "--platform-security-groups",
            "--nb=ssl:192.0.2.10:6641,ssl:192.0.2.11:6641,ssl:192.0.2.12:6641",
            "--sb=ssl:192.0.2.10:6642,ssl:192.0.2.11:6642,ssl:192.0.2.12:6642",
            "--nb-ca=/etc/zstack-ovn/tls/ca.crt",
            "--nb-cert=/etc/zstack-ovn/tls/tls.crt",
            "--nb-key=/etc/zstack-ovn/tls/tls.key",
            "--log-json",
        ],
    );
    let node = named(&objs, "DaemonSet", "zs-zstack-ovn-node").expect("node");
    assert_has_args(
        &args(container(node, "agent")),
        &[
            "--sb=ssl:192.0.2.10:6642,ssl:192.0.2.11:6642,ssl:192.0.2.12:6642",
            "--log-json",
        ],
    );
    let ovs = named(&objs, "DaemonSet", "zs-zstack-ovn-ovs").expect("OVS");
    for (d, c) in [(ovs, "ovn-controller"), (node, "agent")] {
        let mounts = container(d, c)["volumeMounts"]
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
fn every_node_side_container_asks_the_scheduler_for_cpu_and_memory() {
    let Some(helm) = helm::require_helm("helm_chart::node_requests") else {
        return;
    };
    let objs = render(&helm, "dpdk-pools");
    let ds = of_kind(&objs, "DaemonSet");
    assert_eq!(ds.len(), 6);
    for d in ds {
        let spec = &d["spec"]["template"]["spec"];
        for c in spec["containers"].as_array().expect("containers") {
            let what = format!("{} / {}", d["metadata"]["name"], c["name"]);
            let req = &c["resources"]["requests"];
            assert!(!req["cpu"].is_null(), "{what}: no CPU request");
            assert!(req["memory"].is_string(), "{what}: no memory request");
            // a throttled or OOM-killed datapath cuts every pod of its node
            for k in ["cpu", "memory"] {
                assert!(
                    c["resources"]["limits"].get(k).is_none(),
                    "{what}: {k} limit"
                );
            }
        }
    }
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
            "zs-zstack-ovn-ovs".to_string(),
            "zs-zstack-ovn-ovs-dpdk-1g".to_string(),
            "zs-zstack-ovn-ovs-dpdk-2m".to_string(),
        ])
    );
    // every node runs exactly one agent DaemonSet and one OVS DaemonSet, of the same pool
    let (agents, ovs): (Vec<&Value>, Vec<&Value>) = ds.iter().partition(|d| {
        d["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("zs-zstack-ovn-node"))
    });
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
        let running = |sets: &[&Value]| -> Vec<String> {
            sets.iter()
                .filter(|d| {
                    let spec = &d["spec"]["template"]["spec"];
                    selects(&spec["nodeSelector"], labels) && admits(&spec["affinity"], labels)
                })
                .map(|d| {
                    d["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        };
        let (a, o) = (running(&agents), running(&ovs));
        assert_eq!(a.len(), 1, "node {labels:?} runs agents {a:?}");
        assert_eq!(o.len(), 1, "node {labels:?} runs OVS {o:?}");
        assert_eq!(a[0].replace("-node", "-ovs"), o[0], "node {labels:?}");
    }
    // dpdk-1g: adaptive sleep (the chart's ovs-vswitchd figure); dpdk-2m: pmdCpus "2-3"
    for (pool, size, amount, cpu) in [
        ("dpdk-1g", "1Gi", "4Gi", json!("100m")),
        ("dpdk-2m", "2Mi", "2Gi", json!(2)),
    ] {
        let d = named(&objs, "DaemonSet", &format!("zs-zstack-ovn-ovs-{pool}")).expect("pool");
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
        assert_eq!(vs["resources"]["requests"]["cpu"], cpu, "{pool}: PMD cores");
        // no memory limit: ovs-vswitchd grows with its AF_XDP pod ports, an OOM kill cuts the node
        assert!(vs["resources"]["limits"].get("memory").is_none(), "{pool}");
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
    // the pool's vhost-user socket root: ovs-vswitchd-dpdk connects to the sockets there
    let two_m = named(&objs, "DaemonSet", "zs-zstack-ovn-ovs-dpdk-2m").expect("pool");
    let vols = two_m["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    assert!(
        vols.iter()
            .any(|v| v["hostPath"]["path"] == "/run/zstack-ovn/vhost")
    );
    let default = named(&objs, "DaemonSet", "zs-zstack-ovn-ovs").expect("default");
    let env = |d: &Value, name: &str| {
        container(d, "ovs-vswitchd")["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{name}"))["value"]
            .clone()
    };
    assert_eq!(
        env(default, "VSWITCHD"),
        "/usr/lib/openvswitch-switch/ovs-vswitchd"
    );
    // AF_XDP umem on transparent huge pages, on every OVS DaemonSet (both builds)
    for d in [default, two_m] {
        assert_eq!(env(d, "GLIBC_TUNABLES"), "glibc.malloc.hugetlb=1");
    }
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
                ("", "pods", &["get", "list", "watch", "patch"]),
                ("", "nodes", &["get", "list", "watch", "patch"]),
                ("", "namespaces", &["list", "watch"]),
                ("", "services", &["list", "watch"]),
                ("", "endpoints", &["list", "watch"]),
                ("discovery.k8s.io", "endpointslices", &["list", "watch"]),
                ("networking.k8s.io", "networkpolicies", &["list", "watch"]),
                ("network.zstack.io", "subnets", &["list", "watch", "create"]),
                ("network.zstack.io", "subnets/status", &["patch"]),
                (
                    "apiextensions.k8s.io",
                    "customresourcedefinitions[subnets.network.zstack.io]",
                    &["get", "patch"],
                ),
                (
                    "k8s.cni.cncf.io",
                    "network-attachment-definitions",
                    &["list", "watch"],
                ),
                ("kubevirt.io", "virtualmachines", &["list", "watch"]),
                ("events.k8s.io", "events", &["create", "patch"]),
                // the chassis certificate signer (the chart's PKI)
                (
                    "certificates.k8s.io",
                    "certificatesigningrequests",
                    &["get", "list", "watch"],
                ),
                (
                    "certificates.k8s.io",
                    "certificatesigningrequests/approval",
                    &["patch", "update"],
                ),
                (
                    "certificates.k8s.io",
                    "certificatesigningrequests/status",
                    &["patch", "update"],
                ),
                (
                    "certificates.k8s.io",
                    "signers[network.zstack.io/ovn-chassis]",
                    &["approve", "sign"],
                ),
            ]),
        ),
        (
            "zs-zstack-ovn-node",
            r(&[
                ("", "pods", &["get", "list", "watch"]),
                ("", "nodes", &["get", "list", "watch", "patch"]),
                ("", "services", &["list", "watch"]),
                ("", "endpoints", &["list", "watch"]),
                ("discovery.k8s.io", "endpointslices", &["list", "watch"]),
                ("network.zstack.io", "subnets", &["list", "watch"]),
                ("", "events", &["create"]),
                ("events.k8s.io", "events", &["create", "patch"]),
                ("apps", "daemonsets", &["get"]),
                // its own chassis certificate request
                (
                    "certificates.k8s.io",
                    "certificatesigningrequests",
                    &["create", "get", "delete"],
                ),
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
        // templates/uninstall-hook.yaml: the agents watch and acknowledge the marker only
        (
            "zs-zstack-ovn-node-uninstall",
            r(&[(
                "",
                "configmaps[zs-zstack-ovn-uninstalling]",
                &["list", "watch", "patch"],
            )]),
        ),
        // the pre-delete hook: creates, reads and deletes the marker, lists the agent pods
        (
            "zs-zstack-ovn-uninstall-hook",
            r(&[
                ("", "configmaps", &["create"]),
                (
                    "",
                    "configmaps[zs-zstack-ovn-uninstalling]",
                    &["get", "delete"],
                ),
                ("", "pods", &["list"]),
            ]),
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
                    let mut k = format!(
                        "{}/{}",
                        g.as_str().expect("group"),
                        res.as_str().expect("resource")
                    );
                    // a rule limited to named objects: resource[name,name]
                    if let Some(names) = rule["resourceNames"].as_array() {
                        let names: Vec<&str> =
                            names.iter().map(|n| n.as_str().expect("name")).collect();
                        k.push_str(&format!("[{}]", names.join(",")));
                    }
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
    // controller, node, central, and the uninstall hook's (only while the hook runs)
    assert_eq!(of_kind(&objs, "ServiceAccount").len(), 4);
}

#[test]
fn schema_refuses_bad_values_naming_the_key() {
    let Some(helm) = helm::require_helm("helm_chart::schema_refusals") else {
        return;
    };
    let cases: &[(&[&str], &[&str])] = &[
        // an HA SB member's exporter listens on metricsPort + 1
        (
            &["--set", "ovn.standalone.metricsPort=65535"],
            &["ovn.standalone.metricsPort", "65534"],
        ),
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
            &[
                "--set",
                "nodePools[0].name=p",
                "--set",
                "nodePools[0].nodeSelector.a=b",
                "--set",
                "nodePools[0].datapathConfig.uplink=fast",
            ],
            &[
                "nodePools.0.datapathConfig.uplink",
                "must be one of the following",
            ],
        ),
        (
            &["--set", "gateway.mode=gw"],
            &["gateway.mode", "must be one of the following"],
        ),
        // the DPDK pool's CPU request counts pmdCpus: a malformed or reversed list is refused
        (
            &[
                "--set",
                "nodePools[0].name=p",
                "--set",
                "nodePools[0].nodeSelector.a=b",
                "--set-string",
                "nodePools[0].datapathConfig.pmdCpus=2-3;x",
            ],
            &[
                "nodePools.0.datapathConfig.pmdCpus",
                "Does not match pattern",
            ],
        ),
        (
            &[
                "--set",
                "nodePools[0].name=p",
                "--set",
                "nodePools[0].nodeSelector.a=b",
                "--set",
                "nodePools[0].datapathConfig.datapath=dpdk",
                "--set-string",
                "nodePools[0].datapathConfig.pmdCpus=3-1",
            ],
            &["datapathConfig.pmdCpus \"3-1\": range 3-1 is reversed"],
        ),
        // shared needs br-phy, which only tunnel.interface builds (auto by default)
        (
            &["--set", "gateway.mode=shared,tunnel.interface="],
            &["gateway.mode=shared needs tunnel.interface"],
        ),
        (
            &["--set", "gateway.mode=shared,gateway.nextHop=gw1"],
            &["gateway.nextHop"],
        ),
        (
            &["--set", "gateway.nextHopV6=192.0.2.1"],
            &["gateway.nextHopV6"],
        ),
        (
            &["--set-json", r#"services.externalIPs.allowedCIDRs=["all"]"#],
            &["services.externalIPs.allowedCIDRs"],
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
        // one certificate for every node, where the chart makes one per chassis
        (
            &[
                "--set",
                "ovn.ssl.enabled=true",
                "--set",
                "ovn.ssl.secretName=mine",
            ],
            &[
                "standalone mode makes its own PKI",
                "ovn.standalone.tls.enabled=false",
            ],
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
        // OVN 23.03 always uses the encapsulation's IANA port
        (&["--set", "tunnel.port=7000"], &["tunnel.port", "6081"]),
        (
            &["--set", "tunnel.type=vxlan,tunnel.port=6081"],
            &["tunnel.port", "4789"],
        ),
        (&["--set", "logging.format=xml"], &["logging.format"]),
        // network:bridge pairs, comma-separated
        (
            &["--set", "tunnel.bridgeMappings=physnet"],
            &["tunnel.bridgeMappings", "Does not match pattern"],
        ),
        (
            &["--set", "tunnel.bridgeMappings=physnet:br-phy; rm -rf /"],
            &["tunnel.bridgeMappings", "Does not match pattern"],
        ),
        (
            &["--set", "tunnel.interface=eth1; rm -rf /"],
            &["tunnel.interface", "Does not match pattern"],
        ),
        (
            &["--set", "controller.replica=2"],
            &["controller", "replica"],
        ),
        // an https URL with host and port: the chart splits it into the two env vars
        (
            &["--set", "kubernetes.apiServer=172.30.0.1:6443"],
            &["kubernetes.apiServer", "Does not match pattern"],
        ),
        (
            &["--set", "kubernetes.apiServer=http://172.30.0.1:6443"],
            &["kubernetes.apiServer", "Does not match pattern"],
        ),
        (
            &["--set", "kubernetes.apiServer=https://172.30.0.1"],
            &["kubernetes.apiServer", "Does not match pattern"],
        ),
        // the admission webhook's values
        (
            &["--set", "controller.admission.nodeFailurePolicy=Sometimes"],
            &[
                "controller.admission.nodeFailurePolicy",
                "must be one of the following",
            ],
        ),
        (
            &["--set", "controller.admission.timeoutSeconds=60"],
            &["controller.admission.timeoutSeconds"],
        ),
        (
            &["--set", "controller.admission.port=0"],
            &["controller.admission.port"],
        ),
        (
            &["--set", "controller.admission.vmPodCreators[0]="],
            &["controller.admission.vmPodCreators.0"],
        ),
        (
            &["--set", "controller.admission.enable=false"],
            &["controller.admission", "enable"],
        ),
    ];
    for (set, want) in cases {
        let r = helm::template(&helm, RELEASE, NS, set).expect("helm");
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
            "--set",
            "ovn.standalone.tls.enabled=false",
        ][..],
        &[
            "--set-json",
            r#"network.clusterCIDR="10.244.0.0/16,fd00:10:244::/56""#,
        ][..],
        &["--set", "network.clusterCIDR="][..],
        &["--set", "kubernetes.apiServer=https://172.30.0.1:6443"][..],
    ] {
        let r = helm::template(&helm, RELEASE, NS, set).expect("helm");
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

/// The controller is hostNetwork with a fixed metrics port: an upgrade must stop an old
/// replica before it starts a new one, or with no more nodes than replicas the new pod
/// stays Pending ("didn't have free ports") and the rollout never completes (issue 29).
#[test]
fn the_controller_rolls_without_a_surge() {
    let Some(helm) = helm::require_helm("helm_chart::the_controller_rolls_without_a_surge") else {
        return;
    };
    for p in PROFILES {
        let objs = render(&helm, p);
        let ctl = named(&objs, "Deployment", "zs-zstack-ovn-controller").expect("controller");
        assert_eq!(
            ctl["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
            "{p}"
        );
    }
}

/// The PKI the chart renders is one the product can use: the controller's signer loads
/// the chassis CA (its key must be PKCS#8) and the certificates it mints verify with
/// OpenSSL (what ovsdb-server uses) against that CA; central's and the controller's
/// certificates verify against the OVN CA, and central's names the service the clients
/// check.
#[test]
fn the_rendered_pki_signs_and_verifies() {
    let Some(helm) = helm::require_helm("helm_chart::the_rendered_pki_signs_and_verifies") else {
        return;
    };
    let objs = render(&helm, "single");
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctl, central) = (dir.path().join("ctl"), dir.path().join("central"));
    helm::write_secret(&objs, "zs-zstack-ovn-ovn-controller-tls", &ctl);
    helm::write_secret(&objs, "zs-zstack-ovn-ovn-central-tls", &central);
    let ca = control::chassis_signer::ChassisCa::from_files(
        &ctl.join("chassis-ca.crt"),
        &ctl.join("chassis-ca.key"),
    )
    .expect("the controller loads the rendered chassis CA");
    let (leaf, _) = ca
        .mint("node1", std::time::Duration::from_secs(600))
        .expect("mint");
    std::fs::write(dir.path().join("node1.crt"), leaf).expect("write");
    let verify = |ca: &std::path::Path, cert: &std::path::Path| {
        let out = std::process::Command::new("openssl")
            .arg("verify")
            .arg("-CAfile")
            .arg(ca)
            .arg(cert)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl verify {}: {}{}",
            cert.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    verify(&ctl.join("chassis-ca.crt"), &dir.path().join("node1.crt"));
    // SB trusts the bundle: a chassis certificate verifies against it too
    verify(&central.join("sb-ca.crt"), &dir.path().join("node1.crt"));
    verify(&central.join("ca.crt"), &central.join("tls.crt"));
    verify(&ctl.join("ca.crt"), &ctl.join("tls.crt"));
    // NB's CA alone does not accept a chassis certificate
    let out = std::process::Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(central.join("ca.crt"))
        .arg(dir.path().join("node1.crt"))
        .output()
        .expect("openssl");
    assert!(
        !out.status.success(),
        "NB's CA accepted a chassis certificate"
    );
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
        .arg(central.join("tls.crt"))
        .output()
        .expect("openssl");
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("DNS:zstack-ovn-central"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    // and the Rust client takes the OVN CA with the controller's certificate
    ovsdb::TlsConfig::from_files(
        &ctl.join("ca.crt"),
        Some((&ctl.join("tls.crt"), &ctl.join("tls.key"))),
    )
    .expect("TLS config")
    .with_server_name("zstack-ovn-central")
    .expect("server name");
}

/// The rendered webhook certificate serves the controller's webhook: the API server's
/// check (the caBundle, the Service's DNS name) passes, and an AdmissionReview is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_admission_certificate_serves_the_webhook() {
    let Some(helm) =
        helm::require_helm("helm_chart::the_rendered_admission_certificate_serves_the_webhook")
    else {
        return;
    };
    let objs = render(&helm, "single");
    let dir = tempfile::tempdir().expect("tempdir");
    helm::write_secret(&objs, "zs-zstack-ovn-admission-tls", dir.path());
    let hooks = of_kind(&objs, "ValidatingWebhookConfiguration");
    assert_eq!(hooks.len(), 1);
    let webhooks = hooks[0]["webhooks"].as_array().expect("webhooks");
    let policies: BTreeMap<&str, &str> = webhooks
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap_or_default(),
                w["failurePolicy"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        policies,
        BTreeMap::from([
            ("nodes.network.zstack.io", "Fail"),
            ("pods.network.zstack.io", "Ignore")
        ])
    );
    let svc = &webhooks[0]["clientConfig"]["service"];
    assert_eq!(svc["name"], "zs-zstack-ovn-controller-admission");
    assert_eq!(svc["path"], control::admission::PATH);
    let bundle = webhooks[0]["clientConfig"]["caBundle"]
        .as_str()
        .expect("caBundle");
    let ca: k8s_openapi::ByteString =
        serde_json::from_value(json!(bundle)).expect("caBundle is base64");
    std::fs::write(dir.path().join("bundle.crt"), &ca.0).expect("write");
    // the rule on nodes leaves kubelets' status heartbeats alone
    assert_eq!(webhooks[0]["rules"][0]["resources"], json!(["nodes"]));

    let webhook = control::admission::bind(control::admission::AdmissionConfig {
        addr: "127.0.0.1:0".parse().expect("addr"),
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
        agent: control::agent_identity::AgentAccount {
            namespace: NS.into(),
            name: "zs-zstack-ovn-node".into(),
        },
        pods: control::admission::PodPolicy {
            controller: "system:serviceaccount:kube-system:zs-zstack-ovn-controller".into(),
            vm_pod_creators: vec![],
        },
    })
    .await
    .expect("the controller loads the rendered certificate and key");
    let port = webhook.local_addr().expect("addr").port();
    // a client that reaches no API server: a tenant's pod write needs none
    let nowhere = kube::Client::try_from(kube::Config::new(
        "http://127.0.0.1:9".parse().expect("uri"),
    ))
    .expect("client");
    let serving = tokio::spawn(webhook.run(nowhere));
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "p", "namespace": "t", "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "t",
                    "annotations": {api::keys::POD_NETWORKS: "{}"}}}}});
    let dns = format!("zs-zstack-ovn-controller-admission.{NS}.svc");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(dir.path().join("bundle.crt"))
            .arg("--resolve")
            .arg(format!("{dns}:{port}:127.0.0.1"))
            .args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(review.to_string())
            .arg(format!("https://{dns}:{port}/validate"))
            .output()
            .expect("curl")
    })
    .await
    .expect("curl task");
    serving.abort();
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("an AdmissionReview");
    assert_eq!(answer["response"]["uid"], "u1");
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let msg = answer["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(msg.contains(api::keys::POD_NETWORKS), "{msg}");
}
