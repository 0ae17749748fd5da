//! The objects and probes of the cluster suites (`cluster_e2e`, `cluster_ha`): a kube
//! client from a kubeconfig, `create` from JSON, a namespace ready for pods, pod accessors
//! and [`pods_ready`], the test workloads (busybox httpd Deployment, sleeping pod, the DPDK
//! pod's testpmd script) and the OVS ports of ours on a node.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::Api;
use kube::api::{ListParams, PostParams};
use lab::kubecluster::KubeCluster;
use serde_json::{Value, json};

use super::ovs_vsctl;

/// The test workload image (`make test-images`: Debian busybox-static).
pub const BUSYBOX: &str = "localhost/zovn/busybox:1";

/// A kube-rs client from a kubeconfig.
pub async fn client(kubeconfig: &Path) -> Result<kube::Client> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

pub async fn create<K>(api: &Api<K>, v: Value) -> Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v).context("object json")?;
    api.create(&PostParams::default(), &obj)
        .await
        .context("create")
}

/// Creates namespace `ns` and waits (60 s) until its default ServiceAccount has a token:
/// until then kube-apiserver 1.20 refuses the namespace's pods.
pub async fn create_namespace(client: &kube::Client, ns: &str) -> Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    create(
        &nss,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    super::wait_until(
        &format!("the default ServiceAccount's token in {ns}"),
        std::time::Duration::from_secs(60),
        || async {
            let sa = sas.get_opt("default").await?;
            Ok(sa
                .filter(|sa| sa.secrets.as_ref().is_some_and(|s| !s.is_empty()))
                .map(|_| ()))
        },
    )
    .await
}

pub fn is_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A Node whose `Ready` condition is `True`.
pub fn node_is_ready(n: &k8s_openapi::api::core::v1::Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

pub fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

pub fn ip_of(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default()
}

pub fn label(p: &Pod, key: &str) -> String {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key).cloned())
        .unwrap_or_default()
}

/// A Deployment of busybox httpd pods (port 8080, the page is the pod's name) spread over
/// both nodes.
pub fn web_deployment(ns: &str, name: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "topologySpreadConstraints": [{
                        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": name}}
                    }],
                    "containers": [{
                        "name": "web", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c",
                            "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]
                    }]
                }
            }
        }
    })
}

/// A busybox pod (sleeps) on `node` (any node when None).
pub fn sleeper(ns: &str, name: &str, node: Option<&str>, labels: Value) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "sleep", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
            "command": ["sleep", "100000"]
        }]
    });
    if let Some(n) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": n});
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": spec
    })
}

/// The DPDK pod's container: dpdk-testpmd between virtio-user (server, the socket the
/// agent's `dpdkvhostuserclient` port connects to) and a tap `eth0` with the pod's MAC,
/// which the script addresses from `k8s.ovn.org/pod-networks` (what the lab's runtime does
/// from the CNI result), read from the downward-API file `$PODNET_FILE` (kubelet refreshes
/// it; an env var can be resolved before the controller's annotation reaches kubelet).
pub const TESTPMD_SCRIPT: &str = r#"set -u
for i in $(seq 300); do grep -q mac_address "$PODNET_FILE" 2>/dev/null && break; sleep 0.2; done
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" "$PODNET_FILE"; }
mac=$(field mac_address); ip=$(field ip_address); gw=$(field gateway_ip)
echo "socket $SOCK mac $mac ip $ip gw $gw"
nice -n 19 dpdk-testpmd -l 0,1 --main-lcore 1 --no-pci --in-memory --single-file-segments \
  --socket-mem 64 --file-prefix=e2e \
  "--vdev=net_virtio_user0,path=$SOCK,server=1,queues=1" "--vdev=net_tap0,iface=eth0,mac=$mac" \
  -- --forward-mode=io --auto-start --nb-cores=1 --rxq=1 --txq=1 --total-num-mbufs=4096 \
  --stats-period 3600 &
pmd=$!
for i in $(seq 300); do
  [ "$(cat /sys/class/net/eth0/address 2>/dev/null)" = "$mac" ] && break
  sleep 0.1
done
sleep 1
ip link set eth0 mtu 1400 && ip addr add "$ip" dev eth0 && ip link set eth0 up \
  && ip route add default via "$gw" && touch /tmp/ready
ip addr show eth0
wait $pmd
"#;

/// Our OVS ports on node `i`: Interface name → `external_ids:iface-id`.
pub fn ovs_pod_ports(c: &KubeCluster, i: usize) -> Result<BTreeMap<String, String>> {
    let out = ovs_vsctl(
        c,
        i,
        &[
            "--format=json",
            "--columns=name,external_ids",
            "list",
            "Interface",
        ],
    )?;
    let v: Value = serde_json::from_str(&out).context("ovs-vsctl json")?;
    let mut ports = BTreeMap::new();
    for row in v["data"].as_array().into_iter().flatten() {
        let name = row[0].as_str().unwrap_or_default().to_string();
        for kv in row[1][1].as_array().into_iter().flatten() {
            if kv[0] == "iface-id" && row[1][1].to_string().contains("zstack.io/pod") {
                ports.insert(name.clone(), kv[1].as_str().unwrap_or_default().to_string());
            }
        }
    }
    Ok(ports)
}

/// Waits until exactly `n` live pods match `selector` in `ns` and all are Ready; on
/// timeout the error carries `kubectl describe` of up to 3 pods that are not.
pub async fn pods_ready(
    client: &kube::Client,
    kc: &Path,
    ns: &str,
    selector: &str,
    n: usize,
    bound: std::time::Duration,
) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(selector);
    let what = format!("{n} pods {selector} in {ns} Running and Ready");
    let r = super::wait_until(&what, bound, || {
        let api = api.clone();
        let lp = lp.clone();
        async move {
            let live: Vec<Pod> = api
                .list(&lp)
                .await?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            Ok((live.len() == n && live.iter().all(is_ready)).then_some(live))
        }
    })
    .await;
    match r {
        Ok(v) => Ok(v),
        Err(err) => {
            let mut why = format!("{err:#}");
            if let Ok(list) = api.list(&lp).await {
                why.push_str(&format!(" ({} live)", list.items.len()));
                for p in list.items.iter().filter(|p| !is_ready(p)).take(3) {
                    why.push_str(&format!(
                        "\n=== pod {} on {}\n{}",
                        name(p),
                        node_of(p),
                        super::describe(kc, ns, &format!("pod/{}", name(p)))
                    ));
                }
            }
            bail!("{why}")
        }
    }
}
