//! Step `ovn-tls` of `cluster_e2e` (issue 30): the chart's PKI on the real cluster, tried
//! from node1's agent container (root on a node, its files, the image's OVS tools) as a
//! compromised node would:
//!
//! - each node's agent got its chassis certificate through a CertificateSigningRequest
//!   the controller approved for that node's agent pod, and pointed its ovn-controller at
//!   it (the OVS `SSL` row); both chassis are in SB, registered over TLS;
//! - plain TCP to central's NB and SB ports gets no answer;
//! - node1's certificate is refused by NB at the connection, and by SB's RBAC when it
//!   registers another chassis or moves node2's tunnel endpoint.

use anyhow::{Context, Result, bail};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use kube::api::ListParams;
use tests::e2e::exec;

use super::uninstall_safety::agent_pod;
use super::{E2e, INSTANCE, SYS};

const DIR: &str = "/var/run/ovn/zovn-chassis";

/// `sh -c CMD` in node1's agent container: its output and exit status, failing only when
/// kubectl itself cannot run it.
fn sh(e: &E2e, pod: &str, cmd: &str) -> Result<(i32, String)> {
    let out = exec(
        &e.kc,
        SYS,
        pod,
        &["sh", "-c", &format!("{cmd} 2>&1; echo \"rc=$?\"")],
    )?;
    let (text, rc) = out.trim_end().rsplit_once("rc=").context("no rc")?;
    Ok((rc.trim().parse().unwrap_or(-1), text.to_string()))
}

pub async fn ovn_tls(e: &E2e) -> Result<()> {
    // the requests, approved by the controller's signer for each node's agent
    let csrs: Api<CertificateSigningRequest> = Api::all(e.client.clone());
    for node in ["node1", "node2"] {
        let list = csrs
            .list(&ListParams::default().labels(&format!("network.zstack.io/chassis={node}")))
            .await?;
        let granted = list.items.iter().any(|c| {
            let st = c.status.as_ref();
            st.and_then(|s| s.certificate.as_ref()).is_some()
                && st.and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
                    cs.iter().any(|x| {
                        x.type_ == "Approved"
                            && x.reason.as_deref() == Some("ZovnChassisIdentityVerified")
                    })
                })
        });
        if !granted {
            bail!("no approved and issued chassis certificate request for {node}: {list:?}");
        }
    }
    println!("  chassis certificates: node1 and node2 each approved by the signer and issued");

    let pod = agent_pod(e, 1).await?;
    let central = e
        .pods(SYS)
        .list(
            &ListParams::default()
                .labels(&format!("{INSTANCE},app.kubernetes.io/component=central")),
        )
        .await?
        .items
        .into_iter()
        .find_map(|p| p.status.and_then(|s| s.host_ip))
        .context("central's address")?;
    let (_, ssl) = sh(e, &pod, "ovs-vsctl get-ssl")?;
    for f in ["chassis.key", "chassis.crt", "ovn-ca.crt"] {
        if !ssl.contains(&format!("{DIR}/{f}")) {
            bail!("the OVS SSL row does not name {DIR}/{f}: {ssl}");
        }
    }
    let me = format!("-p {DIR}/chassis.key -c {DIR}/chassis.crt -C {DIR}/ovn-ca.crt");
    // ovn-controllers registered over TLS (reads are not restricted)
    let (rc, names) = sh(
        e,
        &pod,
        &format!(
            "ovsdb-client --timeout=10 {me} dump ssl:{central}:6642 OVN_Southbound Chassis name"
        ),
    )?;
    if rc != 0 || !names.contains("node1") || !names.contains("node2") {
        bail!("SB over TLS does not list both chassis (rc {rc}): {names}");
    }
    // plain TCP
    for port in [6641, 6642] {
        let (rc, out) = sh(
            e,
            &pod,
            &format!("ovsdb-client --timeout=5 list-dbs tcp:{central}:{port}"),
        )?;
        if rc == 0 {
            bail!("plain TCP to {central}:{port} answered: {out}");
        }
    }
    // NB with a node's certificate
    let (rc, out) = sh(
        e,
        &pod,
        &format!("ovsdb-client --timeout=5 {me} list-dbs ssl:{central}:6641"),
    )?;
    if rc == 0 {
        bail!("NB served node1's chassis certificate: {out}");
    }
    // SB's RBAC: another chassis, node2's tunnel endpoint
    let attacks = [
        (
            "registering a chassis named node3",
            r#"[\"OVN_Southbound\",{\"op\":\"insert\",\"table\":\"Encap\",\"uuid-name\":\"e\",\"row\":{\"type\":\"geneve\",\"ip\":\"192.0.2.3\",\"chassis_name\":\"node3\"}},{\"op\":\"insert\",\"table\":\"Chassis\",\"row\":{\"name\":\"node3\",\"hostname\":\"node3\",\"encaps\":[\"named-uuid\",\"e\"]}}]"#,
        ),
        (
            "moving node2's tunnel endpoint",
            r#"[\"OVN_Southbound\",{\"op\":\"update\",\"table\":\"Encap\",\"where\":[[\"chassis_name\",\"==\",\"node2\"]],\"row\":{\"ip\":\"192.0.2.66\"}}]"#,
        ),
    ];
    for (what, txn) in attacks {
        let (_, out) = sh(
            e,
            &pod,
            &format!("ovsdb-client --timeout=5 {me} transact ssl:{central}:6642 \"{txn}\""),
        )?;
        if !out.contains("permission error") {
            bail!("node1's certificate {what}: expected a permission error, got {out}");
        }
    }
    println!(
        "  plain TCP to NB/SB: no answer; node1's certificate: refused by NB, and by SB's RBAC for another chassis and node2's tunnel"
    );
    Ok(())
}
