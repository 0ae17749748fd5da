//! What the tests on a real kube-apiserver share: creating objects from JSON, waiting for
//! a condition, installing the Subnet CRD, and a child process killed when the test ends.

use std::process::Child;
use std::time::{Duration, Instant};

use control::crd::Subnet;
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
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Subnet::crd())
        .await
        .expect("create Subnet CRD");
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(
            crds,
            "subnets.network.zstack.io",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("CRD established in time")
    .expect("watch CRD");
}
