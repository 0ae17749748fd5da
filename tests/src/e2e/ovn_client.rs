//! How the tests reach OVN central from a node's namespace: over TLS with the
//! controller's certificate when the release has the chart's PKI (the default), else over
//! plain TCP.

use std::path::Path;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

/// The controller's TLS Secret of release `release` (`<release>-zstack-ovn-ovn-controller-tls`).
fn secret_name(release: &str) -> String {
    format!("{release}-zstack-ovn-ovn-controller-tls")
}

/// An OVN client's options: the protocol (`ssl` or `tcp`) and, for `ssl`, the
/// `--private-key/--certificate/--ca-cert` options (files written under `dir`, which the
/// nodes' mount namespaces see).
#[derive(Debug, Clone)]
pub struct OvnClient {
    pub proto: &'static str,
    pub tls: Vec<String>,
}

impl OvnClient {
    /// Reads the release's controller TLS Secret in `ns` (none: plain TCP).
    pub async fn of_release(
        client: &kube::Client,
        ns: &str,
        release: &str,
        dir: &Path,
    ) -> Result<OvnClient> {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let Some(s) = secrets.get_opt(&secret_name(release)).await? else {
            return Ok(OvnClient {
                proto: "tcp",
                tls: Vec::new(),
            });
        };
        let out = dir.join("e2e-ovn-client");
        std::fs::create_dir_all(&out).with_context(|| format!("mkdir {}", out.display()))?;
        let data = s.data.unwrap_or_default();
        let mut tls = Vec::new();
        for (key, opt) in [
            ("tls.key", "--private-key"),
            ("tls.crt", "--certificate"),
            ("ca.crt", "--ca-cert"),
        ] {
            let v = data
                .get(key)
                .with_context(|| format!("{} has no {key}", secret_name(release)))?;
            let f = out.join(key);
            std::fs::write(&f, &v.0).with_context(|| format!("write {}", f.display()))?;
            tls.push(format!("{opt}={}", f.display()));
        }
        Ok(OvnClient { proto: "ssl", tls })
    }

    /// `--db=<proto>:<host>:<port>` and the TLS options, for ovn-nbctl/ovn-sbctl.
    pub fn db_args(&self, host: &str, port: u16) -> Vec<String> {
        let mut a = vec![format!("--db={}:{host}:{port}", self.proto)];
        a.extend(self.tls.iter().cloned());
        a
    }
}
