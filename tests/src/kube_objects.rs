//! What the tests on a real kube-apiserver share: creating objects from JSON, service
//! account tokens, waiting for a condition, installing the Subnet CRD, and a child process
//! killed when the test ends.

use std::process::Child;
use std::time::{Duration, Instant};

use api::subnet::Subnet;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, CustomResourceExt};
use serde_json::Value;

/// Kills the process when the test ends, however it ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Creates `v` (panics with the server's answer when it is refused).
pub async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v).expect("object json");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create")
}

/// A token of service account `sa` in `ns` (TokenRequest), bound to `pod` when given:
/// the API server then records the pod's name and UID in every request made with it, as
/// it does for a pod's projected token.
pub async fn service_account_token(
    kube: &kube::Client,
    ns: &str,
    sa: &str,
    pod: Option<&k8s_openapi::api::core::v1::Pod>,
) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let sas: Api<ServiceAccount> = Api::namespaced(kube.clone(), ns);
    let mut spec = serde_json::json!({"audiences": [], "expirationSeconds": 3600});
    if let Some(p) = pod {
        spec["boundObjectRef"] = serde_json::json!({"kind": "Pod", "apiVersion": "v1",
            "name": p.metadata.name, "uid": p.metadata.uid});
    }
    let req: TokenRequest =
        serde_json::from_value(serde_json::json!({"spec": spec})).expect("request");
    let tr = sas
        .create_token_request(sa, &PostParams::default(), &req)
        .await
        .expect("TokenRequest");
    tr.status.expect("status").token
}

/// Polls `f` every 100 ms until it returns Some, at most `bound`.
pub async fn eventually<T, F, Fut>(what: &str, bound: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let t = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            t.elapsed() < bound,
            "timed out after {bound:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates the Subnet CRD (from the Rust types) and waits until it is established.
pub async fn install_subnet_crd(client: &kube::Client) {
    install_crd(client, Subnet::crd()).await;
}

/// Creates `crd` and waits (bounded) until the server has established it.
pub async fn install_crd(client: &kube::Client, crd: CustomResourceDefinition) {
    let name = crd.metadata.name.clone().expect("a CRD has a name");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .unwrap_or_else(|e| panic!("create CRD {name}: {e}"));
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(crds, &name, conditions::is_crd_established()),
    )
    .await
    .unwrap_or_else(|_| panic!("CRD {name} established in time"))
    .expect("watch CRD");
}

/// A real kube-apiserver (+ etcd) with the Subnet CRD, and a real OVN NB/SB (+ northd
/// when asked), under one scratch dir: what the controller-on-kube tests stand on.
pub struct KubeAndOvn {
    pub kube_api: crate::kube::KubeApi,
    pub client: kube::Client,
    pub central: lab::central::Central,
    /// The NB remote (`unix:...`).
    pub nb: String,
}

impl KubeAndOvn {
    pub async fn start(dir: &std::path::Path, northd: bool) -> KubeAndOvn {
        let kube_api = crate::kube::KubeApi::start(&dir.join("kube"))
            .await
            .expect("etcd + kube-apiserver");
        let client = kube_api.client().await.expect("kube client");
        let central = lab::central::Central::start(lab::central::CentralConfig {
            dir: dir.join("central"),
            raft: false,
            northd,
            tcp: false,
        })
        .expect("OVN central");
        let nb = central.nb_remote();
        install_subnet_crd(&client).await;
        KubeAndOvn {
            kube_api,
            client,
            central,
            nb,
        }
    }

    /// Starts `zstack-ovnkube-controller --nb <nb> --kubeconfig ...` (stdout and stderr
    /// to `log`).
    pub fn controller(
        kube_api: &crate::kube::KubeApi,
        nb: &str,
        log: &std::path::Path,
    ) -> KillOnDrop {
        Self::controller_with_args(kube_api, nb, log, &[])
    }

    /// [`KubeAndOvn::controller`] with more flags (e.g. `--cluster-cidr`).
    pub fn controller_with_args(
        kube_api: &crate::kube::KubeApi,
        nb: &str,
        log: &std::path::Path,
        extra: &[&str],
    ) -> KillOnDrop {
        let out = std::fs::File::create(log).expect("controller log");
        let err = out.try_clone().expect("controller log");
        KillOnDrop(
            std::process::Command::new(crate::workspace_bin("zstack-ovnkube-controller"))
                .args(["--nb", nb, "--kubeconfig"])
                .arg(kube_api.kubeconfig_path())
                .args(extra)
                .env("RUST_LOG", "info")
                .env("NO_COLOR", "1")
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("start zstack-ovnkube-controller"),
        )
    }
}
