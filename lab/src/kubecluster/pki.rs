//! The cluster's credentials: a private CA, the API server's serving certificate, the
//! service-account signing key, one static bearer token per client (admin, the
//! controller-manager, the scheduler, each kubelet) and a kubeconfig for each.
//!
//! Static tokens keep the lab free of a CSR/bootstrap flow; each client still has its own
//! Kubernetes identity, so the Node authorizer and the built-in RBAC roles apply as in a
//! kubeadm cluster (`system:node:<name>` in `system:nodes`, `system:kube-controller-manager`,
//! `system:kube-scheduler`).
//!
//! The tests' own API server (`tests::kube::KubeApi`) takes its credentials from here too.

use std::io::Read;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::error::{LabError, Result};

/// A client of the API server with its own token and kubeconfig.
#[derive(Debug, Clone)]
pub struct Identity {
    /// File-name stem of its kubeconfig (`admin`, `kubelet-node1`…).
    pub file: String,
    pub user: String,
    pub groups: Vec<String>,
}

impl Identity {
    pub fn new(file: &str, user: &str, groups: &[&str]) -> Identity {
        Identity {
            file: file.into(),
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }
}

/// Where [`write`] put everything (under `<dir>/pki`).
#[derive(Debug, Clone)]
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    pub fn serving_cert(&self) -> PathBuf {
        self.dir.join("apiserver.crt")
    }
    pub fn serving_key(&self) -> PathBuf {
        self.dir.join("apiserver.key")
    }
    pub fn sa_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }
    pub fn sa_pub(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }
    pub fn token_file(&self) -> PathBuf {
        self.dir.join("tokens.csv")
    }
    /// The bearer token of `user`, from the token file.
    pub fn token(&self, user: &str) -> Result<String> {
        let path = self.token_file();
        let text = std::fs::read_to_string(&path).map_err(|e| LabError::io("read", &path, e))?;
        text.lines()
            .find_map(|l| {
                let mut f = l.split(',');
                let token = f.next()?;
                (f.next()? == user).then(|| token.to_string())
            })
            .ok_or_else(|| LabError::Invalid(format!("no token for {user} in {}", path.display())))
    }
    /// The kubeconfig of an identity (`admin` → `<dir>/pki/admin.kubeconfig`).
    pub fn kubeconfig(&self, file: &str) -> PathBuf {
        self.dir.join(format!("{file}.kubeconfig"))
    }
}

/// The identities of a cluster with `nodes` kubelets.
pub fn identities(nodes: usize) -> Vec<Identity> {
    let mut v = vec![
        Identity::new("admin", "admin", &["system:masters"]),
        Identity::new("controller-manager", "system:kube-controller-manager", &[]),
        Identity::new("scheduler", "system:kube-scheduler", &[]),
        // bound to the ClusterRole system:node-proxier by the API server's bootstrap policy
        Identity::new("kube-proxy", "system:kube-proxy", &[]),
    ];
    for i in 1..=nodes {
        let name = super::config::node_name(i);
        v.push(Identity::new(
            &format!("kubelet-{name}"),
            &format!("system:node:{name}"),
            &["system:nodes"],
        ));
    }
    v
}

/// Writes the CA, the serving certificate (valid for `sans`), the service-account key
/// pair, the token file and one kubeconfig per identity pointing at `server`.
pub fn write(dir: &Path, server: &str, sans: &[String], ids: &[Identity]) -> Result<Pki> {
    let pki = Pki {
        dir: dir.join("pki"),
    };
    std::fs::create_dir_all(&pki.dir).map_err(|e| LabError::io("create dir", &pki.dir, e))?;
    let bad = |what: &str, e: rcgen::Error| LabError::Invalid(format!("{what}: {e}"));

    let mut ca_params = CertificateParams::default();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "zovn-cluster-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().map_err(|e| bad("generate CA key", e))?;
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(|e| bad("self-sign CA", e))?;

    let mut params =
        CertificateParams::new(sans.to_vec()).map_err(|e| bad("serving certificate", e))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(|e| bad("generate serving key", e))?;
    let cert = params
        .signed_by(&key, &ca)
        .map_err(|e| bad("sign serving certificate", e))?;
    let sa = KeyPair::generate().map_err(|e| bad("generate service-account key", e))?;

    let mut tokens = String::new();
    let mut kubeconfigs = Vec::new();
    for id in ids {
        let token = random_hex(16)?;
        // token,user,uid,"group1,group2"
        tokens.push_str(&format!(
            "{token},{user},{user},\"{groups}\"\n",
            user = id.user,
            groups = id.groups.join(",")
        ));
        kubeconfigs.push((
            pki.kubeconfig(&id.file),
            kubeconfig_yaml(server, &pki.ca_cert(), &id.user, &token),
        ));
    }
    let files = [
        (pki.ca_cert(), ca.pem()),
        (pki.serving_cert(), cert.pem()),
        (pki.serving_key(), key.serialize_pem()),
        (pki.sa_key(), sa.serialize_pem()),
        (pki.sa_pub(), sa.public_key_pem()),
        (pki.token_file(), tokens),
    ];
    for (path, text) in files.into_iter().chain(kubeconfigs) {
        write_private(&path, &text)?;
    }
    Ok(pki)
}

/// A kubeconfig (context `zovn`) for `user` with a bearer token.
pub fn kubeconfig_yaml(server: &str, ca: &Path, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: zovn\n  cluster:\n    server: {server}\n    \
         certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\n\
         contexts:\n- name: zovn\n  context:\n    cluster: zovn\n    user: {user}\n\
         current-context: zovn\n",
        ca = ca.display(),
    )
}

fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| LabError::io("create", path, e))?;
    std::io::Write::write_all(&mut f, text.as_bytes()).map_err(|e| LabError::io("write", path, e))
}

/// `n` random bytes from the kernel, hex-encoded.
fn random_hex(n: usize) -> Result<String> {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| LabError::io("read", "/dev/urandom", e))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kubelet_is_a_node_identity() {
        let ids = identities(2);
        let users: Vec<&str> = ids.iter().map(|i| i.user.as_str()).collect();
        assert_eq!(
            users,
            [
                "admin",
                "system:kube-controller-manager",
                "system:kube-scheduler",
                "system:kube-proxy",
                "system:node:node1",
                "system:node:node2"
            ]
        );
        assert_eq!(ids[4].groups, ["system:nodes"]);
    }

    #[test]
    fn writes_tokens_and_kubeconfigs() {
        let dir = tempfile::tempdir().unwrap();
        let ids = identities(1);
        let pki = write(
            dir.path(),
            "https://172.30.0.1:6443",
            &["172.30.0.1".into(), "10.96.0.1".into()],
            &ids,
        )
        .unwrap();
        let tokens = std::fs::read_to_string(pki.token_file()).unwrap();
        assert_eq!(tokens.lines().count(), 5);
        assert!(tokens.contains(",system:node:node1,system:node:node1,\"system:nodes\""));
        let kc = std::fs::read_to_string(pki.kubeconfig("kubelet-node1")).unwrap();
        assert!(kc.contains("server: https://172.30.0.1:6443"));
        let token = kc
            .lines()
            .find_map(|l| l.trim().strip_prefix("token: "))
            .unwrap();
        assert!(
            tokens.contains(token),
            "the kubeconfig's token is in the token file"
        );
    }
}
