//! The controller's admission webhook (`control::admission`) on the real kube-apiserver,
//! attacked as a compromised node agent and as a tenant would: the API server calls the
//! webhook (registered by a ValidatingWebhookConfiguration, as the chart does) and every
//! attack is refused with a message naming the rule, the target object left as it was.
//!
//! - Node agents act with tokens the API server issues (TokenRequest): node1's agent's
//!   pod-bound token, and the same account's token bound to nothing. Agent pods are Pod
//!   objects with `spec.nodeName` set (no kubelet: the webhook reads the pod from the API).
//! - The tenant is a service account with the `edit`-like verbs on pods of its namespace.
//!
//! Cases: node1's agent writes node1's reports (admitted) and tries node2's annotations,
//! its own labels, taints and `datapath-config`, and an unbound token (5 refused); the
//! tenant creates a pod carrying the controller's `k8s.ovn.org/pod-networks`, rewrites its
//! pod's `network.zstack.io/subnet`, and copies a VM's launcher pod with
//! `kubevirt.io/domain` (3 refused); the controller's account and an administrator write
//! what is theirs (admitted).

use std::time::Duration;

use api::keys::{DATAPATH_CONFIG, KUBEVIRT_DOMAIN, NODE_GATEWAY, POD_NETWORKS, POD_SUBNET};
use control::admission::{AdmissionConfig, PodPolicy};
use control::agent_identity::AgentAccount;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tests::kube_objects::{create, eventually, service_account_token as token};

const NS: &str = "kube-system";
const AGENT_SA: &str = "zstack-ovn-node";
const CONTROLLER_SA: &str = "zstack-ovn-controller";
const TENANT: &str = "tenant-a";

/// A serving certificate for 127.0.0.1 and its CA (PEM).
fn serving_cert(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "webhook test CA");
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
    let cert = params.signed_by(&key, &issuer).expect("cert");
    let (c, k) = (dir.join("webhook.crt"), dir.join("webhook.key"));
    std::fs::write(&c, cert.pem()).expect("write cert");
    std::fs::write(&k, key.serialize_pem()).expect("write key");
    (c, k, ca_cert.pem())
}

/// The chart's webhook rules, pointed at `url`.
fn webhook_configuration(url: &str, ca: &str) -> Value {
    // ByteString serializes as base64, as caBundle wants
    let ca = serde_json::to_value(k8s_openapi::ByteString(ca.as_bytes().to_vec())).expect("ca");
    let hook = |name: &str, resource: &str, ops: Value, policy: &str| {
        json!({"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "timeoutSeconds": 5, "failurePolicy": policy,
            "clientConfig": {"url": url, "caBundle": ca},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ops,
                "resources": [resource], "scope": "*"}]})
    };
    json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "zstack-ovn"},
        "webhooks": [
            hook("nodes.network.zstack.io", "nodes", json!(["UPDATE"]), "Fail"),
            hook("pods.network.zstack.io", "pods", json!(["CREATE", "UPDATE"]), "Ignore")]})
}

async fn patch<K>(api: &Api<K>, name: &str, p: Value) -> Result<K, String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .map_err(|e| e.to_string())
}

/// Asserts a refusal came from the webhook and says `wants` (each).
fn refused<T: std::fmt::Debug>(r: Result<T, String>, what: &str, wants: &[&str]) {
    let e = match r {
        Ok(v) => panic!("{what}: admitted ({v:?})"),
        Err(e) => e,
    };
    assert!(
        e.contains("denied the request"),
        "{what}: not the webhook's refusal: {e}"
    );
    for w in wants {
        assert!(e.contains(w), "{what}: the refusal does not say {w:?}: {e}");
    }
}

fn annotations(n: &Node) -> std::collections::BTreeMap<String, String> {
    n.metadata.annotations.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_write_only_their_node_and_tenants_no_allocation_state() {
    let test = "admission_webhook::agents_write_only_their_node_and_tenants_no_allocation_state";
    if !tests::require_real(test, &["etcd"]) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("admission");
    let api = tests::kube::KubeApi::start(&s.dir.path().join("kube"))
        .await
        .expect("etcd + kube-apiserver");
    let admin = api.client().await.expect("admin client");

    // the chart's accounts and rights
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    create(&sas, json!({"metadata": {"name": AGENT_SA}})).await;
    create(&sas, json!({"metadata": {"name": CONTROLLER_SA}})).await;
    let nss: Api<Namespace> = Api::all(admin.clone());
    create(&nss, json!({"metadata": {"name": TENANT}})).await;
    let tenant_sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), TENANT);
    create(&tenant_sas, json!({"metadata": {"name": "dev"}})).await;
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let grant = |name: &str, rules: Value, ns: &str, sa: &str| {
        let (roles, bindings) = (roles.clone(), bindings.clone());
        let (name, ns, sa) = (name.to_string(), ns.to_string(), sa.to_string());
        async move {
            create(&roles, json!({"metadata": {"name": name}, "rules": rules})).await;
            create(&bindings, json!({"metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "namespace": ns, "name": sa}]}))
            .await;
        }
    };
    let pods_rw = json!([{"apiGroups": [""], "resources": ["pods"],
        "verbs": ["get", "list", "create", "update", "patch"]}]);
    grant(
        "agent",
        json!([{"apiGroups": [""], "resources": ["nodes"],
        "verbs": ["get", "list", "watch", "patch"]}]),
        NS,
        AGENT_SA,
    )
    .await;
    grant("controller", pods_rw.clone(), NS, CONTROLLER_SA).await;
    // a ClusterRole, so the tenant's account may do the same in any namespace it is
    // granted: here it is bound cluster-wide, which is more than a tenant gets
    grant("tenant", pods_rw, TENANT, "dev").await;

    let nodes: Api<Node> = Api::all(admin.clone());
    for n in ["node1", "node2"] {
        create(
            &nodes,
            json!({"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}}}),
        )
        .await;
    }
    let kube_pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let agent_pod = create(
        &kube_pods,
        json!({"metadata": {"name": "zs-node-aaaaa"},
        "spec": {"nodeName": "node1", "serviceAccountName": AGENT_SA,
            "automountServiceAccountToken": false,
            "containers": [{"name": "agent", "image": "zstack-ovn"}]}}),
    )
    .await;

    // the controller's webhook, registered as the chart registers it
    let (cert, key, ca) = serving_cert(s.dir.path());
    let webhook = control::admission::bind(AdmissionConfig {
        addr: "127.0.0.1:0".parse().expect("addr"),
        cert,
        key,
        agent: AgentAccount {
            namespace: NS.into(),
            name: AGENT_SA.into(),
        },
        pods: PodPolicy {
            controller: format!("system:serviceaccount:{NS}:{CONTROLLER_SA}"),
            vm_pod_creators: vec!["system:serviceaccount:kubevirt:kubevirt-controller".into()],
        },
    })
    .await
    .expect("webhook");
    let url = format!(
        "https://{}{}",
        webhook.local_addr().expect("addr"),
        control::admission::PATH
    );
    let serving = tokio::spawn(webhook.run(admin.clone()));
    let hooks: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(admin.clone());
    create(&hooks, webhook_configuration(&url, &ca)).await;

    let agent = api
        .client_with_token(&token(&admin, NS, AGENT_SA, Some(&agent_pod)).await)
        .await
        .expect("agent client");
    let agent_nodes: Api<Node> = Api::all(agent.clone());
    // the API server loads webhook configurations in the background: wait for the rule
    eventually(
        "the webhook to be in force",
        Duration::from_secs(30),
        || {
            let n = agent_nodes.clone();
            async move {
                patch(
                    &n,
                    "node2",
                    json!({"metadata": {"annotations": {NODE_GATEWAY: "{}"}}}),
                )
                .await
                .err()
                .filter(|e| e.contains("denied the request"))
            }
        },
    )
    .await;

    // node1's agent reports on node1: admitted
    let report = json!({"metadata": {"annotations": {NODE_GATEWAY: "{\"interface\":\"eth1\"}"}}});
    let n1 = patch(&agent_nodes, "node1", report)
        .await
        .expect("the agent's own report");
    assert_eq!(
        annotations(&n1).get(NODE_GATEWAY).map(String::as_str),
        Some("{\"interface\":\"eth1\"}")
    );

    // attacks as node1's agent
    let before2 = nodes.get("node2").await.expect("node2");
    refused(
        patch(
            &agent_nodes,
            "node2",
            json!({"metadata": {"annotations": {NODE_GATEWAY: "{\"interface\":\"evil\"}"}}}),
        )
        .await,
        "node1's agent writes node2's gateway report",
        &["\"node2\"", "\"node1\""],
    );
    refused(
        patch(
            &agent_nodes,
            "node2",
            json!({"spec": {"unschedulable": true}}),
        )
        .await,
        "node1's agent cordons node2",
        &["\"node2\""],
    );
    refused(
        patch(
            &agent_nodes,
            "node1",
            json!({"metadata": {"labels": {"node-role.kubernetes.io/master": ""}}}),
        )
        .await,
        "node1's agent labels its own Node",
        &["metadata.labels"],
    );
    refused(
        patch(&agent_nodes, "node1", json!({"metadata": {"annotations": {DATAPATH_CONFIG: "{\"extraEalArgs\":\"-d /tmp/evil.so\"}"}}})).await,
        "node1's agent sets its own EAL arguments",
        &[DATAPATH_CONFIG],
    );
    refused(
        patch(
            &agent_nodes,
            "node1",
            json!({"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}),
        )
        .await,
        "node1's agent taints its own Node",
        &["spec.taints"],
    );
    let unbound = api
        .client_with_token(&token(&admin, NS, AGENT_SA, None).await)
        .await
        .expect("client");
    refused(
        patch(
            &Api::<Node>::all(unbound),
            "node1",
            json!({"metadata": {"annotations": {NODE_GATEWAY: "{}"}}}),
        )
        .await,
        "the agent's account with a token bound to no pod",
        &["pod-bound"],
    );
    let after2 = nodes.get("node2").await.expect("node2");
    assert_eq!(after2.metadata.labels, before2.metadata.labels);
    assert_eq!(annotations(&after2), annotations(&before2));
    assert_eq!(after2.spec, before2.spec);
    let n1 = nodes.get("node1").await.expect("node1");
    assert!(!annotations(&n1).contains_key(DATAPATH_CONFIG));
    let taints = n1.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(taints.iter().all(|t| t.key != "x"), "{taints:?}");
    // an administrator labels node2: not the webhook's business
    patch(
        &nodes,
        "node2",
        json!({"metadata": {"labels": {"pool": "dpdk"}}}),
    )
    .await
    .expect("an administrator's label");

    // attacks as the tenant
    let dev = api
        .client_with_token(&token(&admin, TENANT, "dev", None).await)
        .await
        .expect("tenant client");
    let tenant_pods: Api<Pod> = Api::namespaced(dev, TENANT);
    let plain = |name: &str, ann: Value, owners: Value| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "annotations": ann,
            "ownerReferences": owners},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
        .expect("pod")
    };
    let forged = plain(
        "forged",
        json!({POD_NETWORKS: "{\"default\":{\"ip_addresses\":[\"10.2.0.5/24\"]}}"}),
        json!([]),
    );
    refused(
        tenant_pods
            .create(&PostParams::default(), &forged)
            .await
            .map_err(|e| e.to_string()),
        "the tenant creates a pod with the controller's address record",
        &[POD_NETWORKS, CONTROLLER_SA],
    );
    tenant_pods
        .create(&PostParams::default(), &plain("mine", json!({}), json!([])))
        .await
        .expect("a plain pod");
    refused(
        patch(
            &tenant_pods,
            "mine",
            json!({"metadata": {"annotations": {POD_SUBNET: "team-b"}}}),
        )
        .await,
        "the tenant points its pod at another team's Subnet",
        &[POD_SUBNET],
    );
    let launcher = plain(
        "virt-launcher-vm1-x",
        json!({KUBEVIRT_DOMAIN: "vm1"}),
        json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "name": "vm1", "uid": "3c3c3c3c-0000-0000-0000-000000000001", "controller": true}]),
    );
    refused(
        tenant_pods
            .create(&PostParams::default(), &launcher)
            .await
            .map_err(|e| e.to_string()),
        "the tenant copies VM vm1's launcher pod",
        &[KUBEVIRT_DOMAIN, "vm1", "kubevirt-controller"],
    );
    let admin_pods: Api<Pod> = Api::namespaced(admin.clone(), TENANT);
    let mine = admin_pods.get("mine").await.expect("mine");
    assert!(
        !mine
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(POD_SUBNET)
    );
    for gone in ["forged", "virt-launcher-vm1-x"] {
        assert!(
            admin_pods.get_opt(gone).await.expect("get").is_none(),
            "{gone} was created"
        );
    }

    // the controller writes its record; the tenant may still relabel its pod
    let controller = api
        .client_with_token(&token(&admin, NS, CONTROLLER_SA, None).await)
        .await
        .expect("controller client");
    let record = json!({"metadata": {"annotations": {POD_SUBNET: "team-a"}}});
    patch(&Api::<Pod>::namespaced(controller, TENANT), "mine", record)
        .await
        .expect("the controller's own record");
    patch(
        &tenant_pods,
        "mine",
        json!({"metadata": {"labels": {"app": "web"}}}),
    )
    .await
    .expect("the tenant's own label");

    serving.abort();
}
