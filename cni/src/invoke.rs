//! Running a CNI plugin as a runtime does (the spec's "Execution protocol"): the `CNI_*`
//! variables, the network configuration on stdin, the result or error on stdout. The lab's
//! pod runtime, the tests and the benchmarks all run the shim this way, so the variables
//! are set in one place.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// One plugin call: what a runtime puts in the environment.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// `ADD`, `DEL`, `CHECK`, `GC`, `STATUS`, `VERSION`.
    pub command: String,
    pub container_id: String,
    /// The network namespace's path (`/var/run/netns/<name>`).
    pub netns: PathBuf,
    pub ifname: String,
    /// `CNI_ARGS`: `K=V;K=V`.
    pub args: String,
    /// `CNI_PATH`.
    pub path: PathBuf,
    /// More variables (e.g. the shim's socket or timeout overrides).
    pub env: Vec<(OsString, OsString)>,
}

impl Invocation {
    /// A call for pod `namespace/name` on `ifname` in netns `/var/run/netns/<netns>`, with
    /// `CNI_PATH=/opt/cni/bin`.
    pub fn pod(
        command: &str,
        container_id: &str,
        netns: &str,
        ifname: &str,
        namespace: &str,
        name: &str,
    ) -> Self {
        Invocation {
            command: command.to_string(),
            container_id: container_id.to_string(),
            netns: Path::new("/var/run/netns").join(netns),
            ifname: ifname.to_string(),
            args: format!("K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}"),
            path: PathBuf::from("/opt/cni/bin"),
            env: Vec::new(),
        }
    }

    /// Adds a variable.
    pub fn with_env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// `program` (the plugin, or a wrapper such as `ip netns exec <ns> <plugin>`) with the
    /// variables set and stdin, stdout and stderr piped: spawn it, write the configuration.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("CNI_COMMAND", &self.command)
            .env("CNI_CONTAINERID", &self.container_id)
            .env("CNI_NETNS", &self.netns)
            .env("CNI_IFNAME", &self.ifname)
            .env("CNI_ARGS", &self.args)
            .env("CNI_PATH", &self.path)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Runs `plugin` to the end with `config` on stdin.
    pub fn run(&self, plugin: &Path, config: &Value) -> std::io::Result<Outcome> {
        let mut child = self.command(plugin).spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            match stdin.write_all(config.to_string().as_bytes()) {
                // a plugin may exit without reading its configuration: its answer counts
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                r => r?,
            }
        }
        Ok(Outcome::from_output(child.wait_with_output()?))
    }
}

/// What a plugin call printed.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Exit status 0.
    pub success: bool,
    /// stdout as JSON; `Null` when it printed nothing; `Err` with the text when it is not
    /// JSON.
    pub stdout: Result<Value, NotJson>,
    pub stderr: String,
}

/// A plugin's stdout that is not JSON: the parser's complaint and the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {text}")]
pub struct NotJson {
    /// serde_json's message (with line and column).
    pub reason: String,
    pub text: String,
}

impl Outcome {
    /// From a finished process.
    pub fn from_output(out: std::process::Output) -> Outcome {
        let text = String::from_utf8_lossy(&out.stdout);
        let stdout = if text.trim().is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_str(&text).map_err(|e| NotJson {
                reason: e.to_string(),
                text: text.to_string(),
            })
        };
        Outcome {
            success: out.status.success(),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_s_variables_and_the_config_on_stdin() {
        let d = tempfile::tempdir().expect("tempdir");
        let plugin = d.path().join("echo-plugin");
        std::fs::write(
            &plugin,
            "#!/bin/sh\nstdin=$(cat)\nprintf '{\"env\":\"%s|%s|%s|%s|%s|%s|%s\",\"stdin\":%s}' \"$CNI_COMMAND\" \"$CNI_CONTAINERID\" \"$CNI_NETNS\" \"$CNI_IFNAME\" \"$CNI_ARGS\" \"$CNI_PATH\" \"$EXTRA\" \"$stdin\"\n",
        )
        .expect("write");
        std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let inv =
            Invocation::pod("ADD", "c1", "ns1", "eth0", "default", "web").with_env("EXTRA", "x");
        let out = inv
            .run(&plugin, &serde_json::json!({"cniVersion": "1.1.0"}))
            .expect("run");
        assert!(out.success, "{out:?}");
        let v = out.stdout.expect("json");
        assert_eq!(
            v["env"],
            "ADD|c1|/var/run/netns/ns1|eth0|K8S_POD_NAMESPACE=default;K8S_POD_NAME=web|/opt/cni/bin|x"
        );
        assert_eq!(v["stdin"]["cniVersion"], "1.1.0");
        // a failure printing text that is not JSON; nothing printed (each its own file: a
        // file being written cannot be executed)
        let script = |name: &str, body: &str| {
            let p = d.path().join(name);
            std::fs::write(&p, body).expect("write");
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("chmod");
            p
        };
        let failing = script("failing", "#!/bin/sh\necho 'not json'; exit 1\n");
        let out = inv.run(&failing, &Value::Null).expect("run");
        assert!(!out.success);
        let e = out.stdout.expect_err("text");
        assert_eq!(e.text, "not json\n");
        assert_eq!(e.to_string(), format!("{}: not json\n", e.reason));
        let silent = script("silent", "#!/bin/sh\nexit 0\n");
        assert_eq!(
            inv.run(&silent, &Value::Null).expect("run").stdout,
            Ok(Value::Null)
        );
    }
}
