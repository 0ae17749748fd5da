//! Step `admission` of `cluster_e2e` (issue 30): the chart's admission webhook on the real
//! cluster, the API server reaching it through its Service as it would any webhook.
//!
//! - **A compromised node**: node1's agent's own credential (the pod-bound token its
//!   container holds, read out of it as root on node1 could) may write node1's reports,
//!   but neither node2's annotations nor node1's labels or `datapath-config`.
//! - **A tenant** (a service account with the built-in `edit` role in its namespace only)
//!   may not create a pod carrying the controller's address record or a VM's domain
//!   (the webhook), nor have its Service's `externalIPs` take node2's tunnel address or
//!   the API server's (the controller's `ServiceProblem`; node1's routes to both
//!   unchanged).
//!
//! Each refusal must name the rule; node2 is unchanged after.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use api::keys::{CHASSIS_ID, DATAPATH_CONFIG, KUBEVIRT_DOMAIN, NODE_GATEWAY, POD_NETWORKS};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tests::e2e::exec;

use super::uninstall_safety::agent_pod;
use super::{E2e, SYS};

const TENANT: &str = "zovn-e2e-tenant";
const TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// A client acting with `token` against the cluster's API server.
async fn client_with_token(e: &E2e, who: &str, token: &str) -> Result<kube::Client> {
    let c = e.cluster();
    let ca = c.dir().join("pki").join("ca.crt");
    let path = c.dir().join(format!("{who}.kubeconfig"));
    std::fs::write(
        &path,
        lab::kubecluster::pki::kubeconfig_yaml(&c.api_server(), &ca, who, token.trim()),
    )?;
    tests::e2e::objects::client(&path).await
}

/// The webhook's refusal of `r`, checked to name each of `wants`.
fn refused<T>(r: kube::Result<T>, what: &str, wants: &[&str]) -> Result<String> {
    let e = match r {
        Ok(_) => bail!("{what}: admitted"),
        Err(e) => e.to_string(),
    };
    if !e.contains("denied the request") {
        bail!("{what}: refused, but not by the webhook: {e}");
    }
    if let Some(w) = wants.iter().find(|w| !e.contains(**w)) {
        bail!("{what}: the refusal does not say {w:?}: {e}");
    }
    Ok(e)
}

fn merge(v: Value) -> Patch<Value> {
    Patch::Merge(v)
}

pub async fn admission(e: &E2e) -> Result<()> {
    let pp = PatchParams::default();
    // node1's agent's credential, as root on node1 would read it
    let pod = agent_pod(e, 1).await?;
    let token = exec(&e.kc, SYS, &pod, &["cat", TOKEN]).context("read the agent's token")?;
    let agent = client_with_token(e, "stolen-agent", &token).await?;
    let agent_nodes: Api<Node> = Api::all(agent);
    let nodes: Api<Node> = Api::all(e.client.clone());

    // its own report, rewritten as it is: admitted
    let n1 = nodes.get("node1").await?;
    let chassis = n1
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CHASSIS_ID))
        .cloned()
        .context("node1 has no chassis-id report")?;
    agent_nodes
        .patch(
            "node1",
            &pp,
            &merge(json!({"metadata": {"annotations": {CHASSIS_ID: chassis}}})),
        )
        .await
        .context("node1's agent rewriting its own chassis-id report")?;

    let before = nodes.get("node2").await?;
    let mut said = Vec::new();
    said.push(refused(
        agent_nodes
            .patch("node2", &pp, &merge(json!({"metadata": {"annotations": {NODE_GATEWAY: "{\"interface\":\"evil\"}"}}})))
            .await,
        "node1's agent writes node2's gateway report",
        &["\"node2\"", "\"node1\""],
    )?);
    said.push(refused(
        agent_nodes
            .patch(
                "node2",
                &pp,
                &merge(json!({"metadata": {"labels": {"zovn.e2e/evil": "x"}}})),
            )
            .await,
        "node1's agent labels node2",
        &["\"node2\""],
    )?);
    said.push(refused(
        agent_nodes
            .patch("node1", &pp, &merge(json!({"metadata": {"annotations": {DATAPATH_CONFIG: "{\"extraEalArgs\":\"-d /tmp/x.so\"}"}}})))
            .await,
        "node1's agent sets its own EAL arguments",
        &[DATAPATH_CONFIG],
    )?);
    said.push(refused(
        agent_nodes
            .patch(
                "node1",
                &pp,
                &merge(json!({"spec": {"unschedulable": true}})),
            )
            .await,
        "node1's agent cordons its own node",
        &["spec.unschedulable"],
    )?);
    let after = nodes.get("node2").await?;
    if after.metadata.labels != before.metadata.labels
        || after
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NODE_GATEWAY))
            != before
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(NODE_GATEWAY))
    {
        bail!("node2 changed under the refused writes");
    }
    if nodes.get("node1").await?.spec.and_then(|s| s.unschedulable) == Some(true) {
        bail!("node1 was cordoned by its agent");
    }
    println!(
        "  node1's agent token: its own report admitted; node2's annotations and labels, its own EAL arguments and cordon refused"
    );

    // a tenant with `edit` in its namespace only
    tests::e2e::objects::create_namespace(&e.client, TENANT).await?;
    let sas: Api<ServiceAccount> = Api::namespaced(e.client.clone(), TENANT);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "dev"}}))?,
    )
    .await?;
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(e.client.clone(), TENANT);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "dev-edit"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"kind": "ServiceAccount", "namespace": TENANT, "name": "dev"}]}))?,
        )
        .await?;
    let token = tests::kube_objects::service_account_token(&e.client, TENANT, "dev", None).await;
    let tenant = client_with_token(e, "tenant-dev", &token).await?;
    let tenant_pods: Api<Pod> = Api::namespaced(tenant.clone(), TENANT);
    let pod = |name: &str, ann: BTreeMap<&str, &str>, owners: Value| -> Result<Pod> {
        Ok(serde_json::from_value(
            json!({"metadata": {"name": name, "annotations": ann,
            "ownerReferences": owners},
            "spec": {"containers": [{"name": "c", "image": tests::e2e::objects::BUSYBOX}]}}),
        )?)
    };
    said.push(refused(
        tenant_pods
            .create(
                &PostParams::default(),
                &pod("forged", BTreeMap::from([(POD_NETWORKS, "{}")]), json!([]))?,
            )
            .await,
        "the tenant creates a pod with the controller's address record",
        &[POD_NETWORKS],
    )?);
    said.push(refused(
        tenant_pods
            .create(
                &PostParams::default(),
                &pod(
                    "virt-launcher-vm1-x",
                    BTreeMap::from([(KUBEVIRT_DOMAIN, "vm1")]),
                    json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                        "name": "vm1", "uid": "3c3c3c3c-0000-0000-0000-000000000001", "controller": true}]),
                )?,
            )
            .await,
        "the tenant copies a VM's launcher pod",
        &[KUBEVIRT_DOMAIN],
    )?);
    let admin_pods: Api<Pod> = Api::namespaced(e.client.clone(), TENANT);
    for gone in ["forged", "virt-launcher-vm1-x"] {
        if admin_pods.get_opt(gone).await?.is_some() {
            bail!("the tenant's pod {gone} was created");
        }
    }
    println!(
        "  tenant (edit in {TENANT}): pods with the controller's address record or a VM's domain refused"
    );
    // the tenant's Service claims node2's tunnel address and the API server's address
    let claimed = [
        lab::kubecluster::config::node_data_ip(2),
        lab::kubecluster::config::host_mgmt_ip(),
    ];
    let routes = |e: &E2e| -> Result<Vec<String>> {
        claimed
            .iter()
            .map(|ip| Ok(e.cluster().node_exec(1, &["ip", "route", "get", ip])?))
            .collect()
    };
    let before = routes(e)?;
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(tenant, TENANT);
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "grab"},
                "spec": {"externalIPs": claimed, "selector": {"app": "none"},
                    "ports": [{"name": "geneve", "port": 6081, "protocol": "UDP"},
                        {"name": "api", "port": 6443}]}}))?,
        )
        .await
        .context("the tenant's Service (edit may create one)")?;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(e.client.clone(), TENANT);
    for ip in &claimed {
        let want = format!("externalIP {ip} refused");
        let msg = tests::e2e::wait_until(
            &format!("the controller's ServiceProblem event for {ip}"),
            std::time::Duration::from_secs(60),
            || async {
                let list = events.list(&Default::default()).await?;
                Ok(list
                    .items
                    .into_iter()
                    .filter(|ev| ev.reason.as_deref() == Some(api::keys::REASON_SERVICE_PROBLEM))
                    .filter_map(|ev| ev.message)
                    .find(|m| m.contains(&want)))
            },
        )
        .await?;
        said.push(msg);
    }
    let after = routes(e)?;
    if after != before {
        bail!(
            "node1's routes to {claimed:?} changed under the tenant's Service: {before:?} → {after:?}"
        );
    }
    println!(
        "  tenant's Service claiming {claimed:?}: refused (ServiceProblem), node1's routes unchanged"
    );
    println!("  {} attacks refused, e.g.: {}", said.len(), said[0]);
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(e.client.clone());
    nss.delete(TENANT, &Default::default()).await?;
    Ok(())
}
