//! Per-chassis OVN certificates on the real kube-apiserver: the controller's signer
//! (`control::chassis_signer`) grants a node agent (`dataplane::agent::chassis_cert`) the
//! certificate of its own chassis, and refuses every other requester, each with a Denied
//! condition that names the reason.
//!
//! Requesters act with tokens the API server issues (TokenRequest), as in a cluster: the
//! agent's pod-bound token (the request then records the pod's name and UID), the same
//! account's token bound to nothing, and a tenant's service account allowed to create
//! requests. Agent pods are Pod objects with `spec.nodeName` set (no kubelet runs here:
//! the signer reads the pod from the API, which is what it trusts).

use std::time::Duration;

use api::chassis_cert::SIGNER_NAME;
use control::agent_identity::AgentAccount;
use control::chassis_signer::{ChassisCa, SignerConfig};
use dataplane::agent::chassis_cert::{self, CertError, CertOptions, CertState};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;
use tests::kube_objects::{create, service_account_token as token};

const NS: &str = "kube-system";
const AGENT_SA: &str = "zstack-ovn-node";

fn opts(dir: &std::path::Path, chassis: &str) -> CertOptions {
    CertOptions {
        dir: dir.to_path_buf(),
        chassis: chassis.to_string(),
        wait: Duration::from_secs(30),
        issuer: None,
    }
}

fn denied(r: Result<CertState, CertError>, what: &str) -> String {
    match r {
        Err(CertError::Denied { reason, .. }) => reason,
        other => panic!("{what}: expected a denial, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_agent_pod_on_a_node_gets_that_chassis_certificate() {
    let test = "chassis_certs::only_the_agent_pod_on_a_node_gets_that_chassis_certificate";
    if !tests::require_real(test, &["etcd"]) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("chassis-certs");
    let api = tests::kube::KubeApi::start(&s.dir.path().join("kube"))
        .await
        .expect("etcd + kube-apiserver");
    let admin = api.client().await.expect("admin client");

    // the chart's objects: the agent's service account and what it may do with requests
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    create(&sas, json!({"metadata": {"name": AGENT_SA}})).await;
    for ns in ["tenant-a"] {
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
        create(&nss, json!({"metadata": {"name": ns}})).await;
    }
    let tenant_sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "tenant-a");
    create(&tenant_sas, json!({"metadata": {"name": AGENT_SA}})).await;
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(admin.clone());
    create(
        &roles,
        json!({"metadata": {"name": "chassis-requester"}, "rules": [
        {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
         "verbs": ["create", "get", "delete"]}]}),
    )
    .await;
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(admin.clone());
    create(&bindings, json!({"metadata": {"name": "chassis-requester"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "chassis-requester"},
        "subjects": [
            {"kind": "ServiceAccount", "namespace": NS, "name": AGENT_SA},
            // a tenant given the same right: its account is not the agent's
            {"kind": "ServiceAccount", "namespace": "tenant-a", "name": AGENT_SA}]}))
    .await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let agent_pod = |name: &str, node: &str| {
        json!({"metadata": {"name": name}, "spec": {"nodeName": node,
            "serviceAccountName": AGENT_SA, "automountServiceAccountToken": false,
            "containers": [{"name": "agent", "image": "zstack-ovn"}]}})
    };
    let pod1 = create(&pods, agent_pod("zs-node-aaaaa", "node1")).await;
    let pod2 = create(&pods, agent_pod("zs-node-bbbbb", "node2")).await;

    // the controller's signer
    let (ca_cert, ca_key) =
        control::chassis_signer::issue::new_ca("zstack-ovn chassis CA").expect("CA");
    let signer = SignerConfig {
        ca: std::sync::Arc::new(ChassisCa::from_pem(&ca_cert, &ca_key).expect("CA")),
        agent: AgentAccount {
            namespace: NS.into(),
            name: AGENT_SA.into(),
        },
        validity: Duration::from_secs(30 * 86_400),
    };
    let signer_task = tokio::spawn(control::chassis_signer::run(admin.clone(), signer));

    // node1's agent, with its pod-bound token: node1's certificate, signed by the CA
    let node1 = api
        .client_with_token(&token(&admin, NS, AGENT_SA, Some(&pod1)).await)
        .await
        .expect("agent client");
    let dir1 = s.dir.path().join("node1");
    let got = chassis_cert::ensure(&node1, &opts(&dir1, "node1"))
        .await
        .expect("node1's certificate");
    let CertState::Issued { request, .. } = &got else {
        panic!("expected a new certificate, got {got:?}");
    };
    let pem = std::fs::read_to_string(dir1.join(chassis_cert::CERT_FILE)).expect("cert file");
    let (cn, _, _) = chassis_cert::read_cert(&pem).expect("a certificate");
    assert_eq!(cn, "node1");
    let (_, issued) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("pem");
    let (_, ca) = x509_parser::pem::parse_x509_pem(ca_cert.as_bytes()).expect("pem");
    issued
        .parse_x509()
        .expect("x509")
        .verify_signature(Some(ca.parse_x509().expect("x509").public_key()))
        .expect("signed by the chassis CA");
    let csrs: Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest> =
        Api::all(admin.clone());
    let csr = csrs.get(request).await.expect("the request");
    assert_eq!(csr.spec.signer_name, SIGNER_NAME);
    let approved = csr.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        approved
            .iter()
            .any(|c| c.type_ == "Approved"
                && c.message.as_deref().unwrap_or_default().contains("node1")),
        "{approved:?}"
    );
    // asked again: the certificate on disk is current, nothing is requested
    let ca_file = s.dir.path().join("chassis-ca.crt");
    std::fs::write(&ca_file, &ca_cert).expect("CA file");
    let with_issuer = CertOptions {
        issuer: Some(ca_file.clone()),
        ..opts(&dir1, "node1")
    };
    assert!(matches!(
        chassis_cert::ensure(&node1, &with_issuer).await,
        Ok(CertState::Current { .. })
    ));
    // the chassis CA made again (a reinstall, a rotation): the old certificate is not
    // current any more, the same key asks anew and gets one from the new CA
    let (other_ca, _) = control::chassis_signer::issue::new_ca("another chassis CA").expect("CA");
    std::fs::write(&ca_file, &other_ca).expect("CA file");
    match chassis_cert::ensure(&node1, &with_issuer).await {
        Ok(CertState::Issued { .. }) => {}
        other => panic!("a certificate of another CA was kept: {other:?}"),
    }
    std::fs::write(&ca_file, &ca_cert).expect("CA file");

    // node1's agent asking for node2's chassis
    let r = chassis_cert::ensure(&node1, &opts(&s.dir.path().join("steal"), "node2")).await;
    let why = denied(r, "node1's agent asking for node2");
    assert!(
        why.contains("\"node2\"") && why.contains("\"node1\""),
        "{why}"
    );

    // the agent's account with a token bound to no pod (as a copied secret token would be)
    let unbound = api
        .client_with_token(&token(&admin, NS, AGENT_SA, None).await)
        .await
        .expect("client");
    let why = denied(
        chassis_cert::ensure(&unbound, &opts(&s.dir.path().join("unbound"), "node2")).await,
        "an unbound token",
    );
    assert!(why.contains("not bound to a pod"), "{why}");

    // a tenant's account of the same name, allowed to create requests
    let tenant = api
        .client_with_token(&token(&admin, "tenant-a", AGENT_SA, None).await)
        .await
        .expect("client");
    let why = denied(
        chassis_cert::ensure(&tenant, &opts(&s.dir.path().join("tenant"), "node2")).await,
        "a tenant's service account",
    );
    assert!(why.contains("system:serviceaccount:tenant-a:"), "{why}");

    // node2's agent token, its pod deleted before it asks (a stolen token of a gone pod:
    // the API server refuses the token itself, or the signer finds no such pod)
    let t2 = token(&admin, NS, AGENT_SA, Some(&pod2)).await;
    pods.delete("zs-node-bbbbb", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    let gone = api.client_with_token(&t2).await.expect("client");
    match chassis_cert::ensure(&gone, &opts(&s.dir.path().join("gone"), "node2")).await {
        Err(CertError::Denied { reason, .. }) => {
            assert!(reason.contains("no longer exists"), "{reason}")
        }
        Err(CertError::Kube {
            source: kube::Error::Api(e),
            ..
        }) => assert_eq!(e.code, 401, "{e:?}"),
        other => panic!("a deleted pod's token got {other:?}"),
    }
    assert!(
        !s.dir
            .path()
            .join("gone")
            .join(chassis_cert::CERT_FILE)
            .exists()
    );
    assert!(
        !s.dir
            .path()
            .join("steal")
            .join(chassis_cert::CERT_FILE)
            .exists()
    );
    signer_task.abort();
}
