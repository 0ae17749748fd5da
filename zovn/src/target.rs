//! What `zovn trace`, `zovn status` and `zovn capture` diagnose: a lab, or a real cluster
//! through kubectl (`diag::kubectl`). The choice, in order:
//!
//! 1. `--kubeconfig` or `--context` given: that cluster;
//! 2. `--dir` given (or `$ZOVN_LAB_DIR`): the lab there;
//! 3. run as `kubectl-zovn` (`kubectl zovn ...`): kubectl's cluster;
//! 4. a lab in the default dir (`/tmp/zovn-lab`): that lab;
//! 5. a kubeconfig (`$KUBECONFIG` or `~/.kube/config`): that cluster;
//! 6. else an error saying how to get either.
//!
//! Built without the `lab` feature (the operator's `kubectl-zovn`), only the cluster
//! rules (1, 3, 5, 6) exist and there is no `--dir`.

use std::path::{Path, PathBuf};

use clap::Args;
use diag::kubectl::Kubectl;

/// The lab's default state directory (as `zovn lab up`'s).
#[cfg(feature = "lab")]
const DEFAULT_LAB: &str = "/tmp/zovn-lab";

#[derive(Debug, Args)]
pub struct TargetArgs {
    /// Diagnose the lab in this state directory [default: /tmp/zovn-lab when it holds a
    /// lab].
    #[cfg(feature = "lab")]
    #[arg(long, env = "ZOVN_LAB_DIR")]
    pub dir: Option<PathBuf>,
    /// Diagnose the cluster of this kubeconfig (as kubectl's flag).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (as kubectl's flag).
    #[arg(long)]
    pub context: Option<String>,
    /// The namespace the zstack-ovn release is installed in: its pods and DaemonSets are
    /// looked for there only [default: kube-system].
    #[arg(long, env = "ZOVN_RELEASE_NAMESPACE")]
    pub release_namespace: Option<String>,
}

/// What to diagnose.
pub enum Target {
    #[cfg(feature = "lab")]
    Lab(PathBuf),
    Cluster(Kubectl),
}

/// Whether this process was started as the kubectl plugin.
fn as_kubectl_plugin() -> bool {
    std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .is_some_and(|n| n == "kubectl-zovn")
}

fn kubeconfig_exists() -> bool {
    std::env::var_os("KUBECONFIG").is_some_and(|k| !k.is_empty())
        || std::env::var_os("HOME").is_some_and(|h| Path::new(&h).join(".kube/config").exists())
}

impl TargetArgs {
    /// The target, by the rules of this module.
    pub fn choose(&self) -> anyhow::Result<Target> {
        let cluster = || {
            Target::Cluster(Kubectl {
                kubeconfig: self.kubeconfig.clone(),
                context: self.context.clone(),
                release_namespace: self.release_namespace.clone(),
            })
        };
        if self.kubeconfig.is_some() || self.context.is_some() {
            return Ok(cluster());
        }
        #[cfg(feature = "lab")]
        if let Some(d) = &self.dir {
            if !d.join("lab.json").exists() {
                anyhow::bail!(
                    "no lab at {} (start one with `zovn lab up --dir {}`)",
                    d.display(),
                    d.display()
                );
            }
            return Ok(Target::Lab(d.clone()));
        }
        if as_kubectl_plugin() {
            return Ok(cluster());
        }
        #[cfg(feature = "lab")]
        if Path::new(DEFAULT_LAB).join("lab.json").exists() {
            return Ok(Target::Lab(DEFAULT_LAB.into()));
        }
        if kubeconfig_exists() {
            return Ok(cluster());
        }
        #[cfg(not(feature = "lab"))]
        anyhow::bail!(
            "nothing to diagnose: no kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config)"
        );
        #[cfg(feature = "lab")]
        anyhow::bail!(
            "nothing to diagnose: no lab at {DEFAULT_LAB} (start one with `zovn lab up`) and \
             no kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config)"
        )
    }

    /// The namespace of pods named without one: `given` (`-n`), else `default` on a
    /// lab and the context's namespace on a cluster.
    pub fn default_namespace(given: Option<&str>, target: &Target) -> String {
        if let Some(n) = given {
            return n.to_string();
        }
        match target {
            #[cfg(feature = "lab")]
            Target::Lab(_) => "default".into(),
            Target::Cluster(k) => {
                let ns = k
                    .run(&[
                        "config".into(),
                        "view".into(),
                        "--minify".into(),
                        "-o".into(),
                        "jsonpath={..namespace}".into(),
                    ])
                    .unwrap_or_default();
                let ns = ns.trim();
                if ns.is_empty() {
                    "default".into()
                } else {
                    ns.to_string()
                }
            }
        }
    }
}

/// The cluster of a command that works only on a cluster; exit 2 (bad input) with the
/// reason on a lab or an unusable target.
pub fn cluster_only(t: &TargetArgs, what: &str) -> Kubectl {
    match t.choose() {
        Ok(Target::Cluster(k)) => k,
        #[cfg(feature = "lab")]
        Ok(Target::Lab(dir)) => {
            eprintln!(
                "zovn {what}: {} is a lab; {what} works on a cluster (--kubeconfig, or as kubectl zovn {what})",
                dir.display()
            );
            std::process::exit(2)
        }
        Err(e) => {
            eprintln!("zovn {what}: {e}");
            std::process::exit(2)
        }
    }
}
