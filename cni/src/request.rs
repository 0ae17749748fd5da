//! What the shim sends to the agent ([`Request`]) and what it gets back ([`Response`]).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{CniError, code};
use crate::result::CniResult;
use crate::types::NetConf;

/// `CNI_COMMAND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
}

impl Command {
    pub const ALL: [Command; 6] = [
        Command::Add,
        Command::Del,
        Command::Check,
        Command::Gc,
        Command::Status,
        Command::Version,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }

    /// How long the shim waits for the agent unless configured otherwise.
    /// ADD waits for the controller's annotation and for ovn-controller, hence the most.
    pub fn default_timeout(self) -> Duration {
        match self {
            Command::Add => Duration::from_secs(60),
            Command::Del | Command::Check | Command::Gc => Duration::from_secs(30),
            Command::Status | Command::Version => Duration::from_secs(5),
        }
    }

    /// Environment variables the command requires (spec 1.1, "Parameters").
    /// `CNI_PATH` is not required: this plugin delegates to no other plugin.
    pub fn required_env(self) -> &'static [&'static str] {
        match self {
            Command::Add | Command::Check => &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"],
            Command::Del => &["CNI_CONTAINERID", "CNI_IFNAME"],
            Command::Gc | Command::Status | Command::Version => &[],
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Command {
    type Err = CniError;

    /// An unknown command is error 4 (invalid environment variables).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Command::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                CniError::new(code::INVALID_ENV, format!("unknown CNI_COMMAND {s:?}")).with_details(
                    format!(
                        "expected one of {}",
                        Command::ALL.map(Command::as_str).join(", ")
                    ),
                )
            })
    }
}

/// `CNI_ARGS` parsed: `K=V` pairs separated by `;`. The Kubernetes keys get fields,
/// everything else lands in `other`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infra_container_id: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub other: BTreeMap<String, String>,
}

impl CniArgs {
    /// Parses `K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;...`. Empty input and empty segments
    /// (`a=1;;b=2`, a trailing `;`) are accepted; a pair without `=`, an empty key or a
    /// repeated key is error 4 naming `CNI_ARGS`. Values may be empty and may contain `=`.
    pub fn parse(s: &str) -> Result<CniArgs, CniError> {
        let bad =
            |why: String| CniError::new(code::INVALID_ENV, format!("invalid CNI_ARGS: {why}"));
        let mut args = CniArgs::default();
        let mut seen = std::collections::BTreeSet::new();
        for pair in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(bad(format!("{pair:?} is not a KEY=VALUE pair")));
            };
            let k = k.trim();
            if k.is_empty() {
                return Err(bad(format!("{pair:?} has an empty key")));
            }
            if !seen.insert(k.to_owned()) {
                return Err(bad(format!("key {k:?} is given twice")));
            }
            let v = v.to_owned();
            match k {
                "K8S_POD_NAMESPACE" => args.pod_namespace = Some(v),
                "K8S_POD_NAME" => args.pod_name = Some(v),
                "K8S_POD_UID" => args.pod_uid = Some(v),
                "K8S_POD_INFRA_CONTAINER_ID" => args.infra_container_id = Some(v),
                _ => {
                    args.other.insert(k.to_owned(), v);
                }
            }
        }
        Ok(args)
    }
}

/// One CNI invocation, as the shim forwards it to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub command: Command,
    /// `CNI_CONTAINERID` (empty for GC/STATUS).
    #[serde(default)]
    pub container_id: String,
    /// `CNI_NETNS` (may be empty for DEL).
    #[serde(default)]
    pub netns: String,
    /// `CNI_IFNAME`.
    #[serde(default)]
    pub ifname: String,
    pub args: CniArgs,
    /// `CNI_PATH`, split on `:`.
    #[serde(default)]
    pub path: Vec<String>,
    /// The network configuration exactly as read from stdin; parse with
    /// [`Request::net_conf`].
    pub config: String,
    /// How long the shim waits for the answer, in milliseconds. The agent should answer
    /// (e.g. with [`code::ANNOTATION_TIMEOUT`]) before this runs out.
    pub timeout_ms: u64,
}

impl Request {
    /// Builds and validates a request from the `CNI_*` variables (`env` looks one up)
    /// and the stdin bytes. Errors are code 4 naming the variable, or the codes of
    /// [`NetConf::parse`] for stdin.
    pub fn from_env(
        command: Command,
        env: impl Fn(&str) -> Option<String>,
        stdin: &[u8],
        timeout: Duration,
    ) -> Result<Request, CniError> {
        let var = |name: &str| env(name).unwrap_or_default();
        for name in command.required_env() {
            if var(name).is_empty() {
                return Err(CniError::new(
                    code::INVALID_ENV,
                    format!("{name} is not set (required for {command})"),
                ));
            }
        }
        let container_id = var("CNI_CONTAINERID");
        if !container_id.is_empty() {
            validate_container_id(&container_id)?;
        }
        let ifname = var("CNI_IFNAME");
        if !ifname.is_empty() {
            validate_ifname(&ifname)?;
        }
        let config = std::str::from_utf8(stdin)
            .map_err(|e| {
                CniError::new(code::DECODE_FAILURE, "stdin is not UTF-8")
                    .with_details(e.to_string())
            })?
            .to_owned();
        Ok(Request {
            command,
            container_id,
            netns: var("CNI_NETNS"),
            ifname,
            args: CniArgs::parse(&var("CNI_ARGS"))?,
            path: var("CNI_PATH")
                .split(':')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
            config,
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// The network configuration, parsed and validated.
    pub fn net_conf(&self) -> Result<NetConf, CniError> {
        NetConf::parse(self.config.as_bytes())
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

/// Spec: alphanumeric first, then alphanumerics, `_`, `.`, `-`.
fn validate_container_id(id: &str) -> Result<(), CniError> {
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
        Ok(())
    } else {
        Err(CniError::new(
            code::INVALID_ENV,
            format!("CNI_CONTAINERID {id:?} is invalid"),
        )
        .with_details("it must start with an alphanumeric character, followed by alphanumerics, '_', '.' or '-'"))
    }
}

/// Spec: not empty, not `.`/`..`, shorter than 16 bytes, no `/`, `:` or whitespace
/// ([`api::ifname`]).
fn validate_ifname(name: &str) -> Result<(), CniError> {
    if api::ifname::is_valid(name) {
        Ok(())
    } else {
        Err(CniError::new(code::INVALID_ENV, format!("CNI_IFNAME {name:?} is invalid"))
            .with_details("an interface name is shorter than 16 bytes, is not '.' or '..', and has no '/', ':' or whitespace"))
    }
}

/// The agent's answer.
///
/// Wire form: `{"result": {...}}` (ADD; the result in the 1.1.0 shape without
/// `cniVersion`), `"ok"` (DEL, CHECK, GC, STATUS succeeded), `{"error": {...}}`
/// (a [`CniError`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    Result(CniResult),
    Ok,
    Error(CniError),
}

impl From<CniError> for Response {
    fn from(e: CniError) -> Response {
        Response::Error(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn cni_args_kubernetes_keys() {
        let a = CniArgs::parse(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;\
             K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=9f1c-77;X=a=b;",
        )
        .unwrap();
        assert_eq!(a.pod_namespace.as_deref(), Some("default"));
        assert_eq!(a.pod_name.as_deref(), Some("web-0"));
        assert_eq!(a.pod_uid.as_deref(), Some("9f1c-77"));
        assert_eq!(a.infra_container_id.as_deref(), Some("abc123"));
        assert_eq!(a.other.get("IgnoreUnknown").map(String::as_str), Some("1"));
        assert_eq!(a.other.get("X").map(String::as_str), Some("a=b"));
        assert_eq!(CniArgs::parse("").unwrap(), CniArgs::default());
        assert_eq!(CniArgs::parse(";;").unwrap(), CniArgs::default());
        assert_eq!(CniArgs::parse("A=").unwrap().other["A"], "");
    }

    #[test]
    fn cni_args_bad_pairs() {
        for bad in ["K8S_POD_NAME", "A=1;B", "=v", "A=1;A=2"] {
            let e = CniArgs::parse(bad).unwrap_err();
            assert_eq!(e.code, code::INVALID_ENV, "{bad}");
            assert!(e.msg.contains("CNI_ARGS"), "{bad}: {e}");
        }
    }

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn from_env_requires_variables_per_command() {
        let t = Duration::from_secs(1);
        let e = Request::from_env(
            Command::Add,
            env(&[("CNI_CONTAINERID", "c1"), ("CNI_IFNAME", "eth0")]),
            b"{}",
            t,
        )
        .unwrap_err();
        assert_eq!(e.code, code::INVALID_ENV);
        assert!(e.msg.contains("CNI_NETNS"), "{e}");
        // DEL does not need a netns.
        let r = Request::from_env(
            Command::Del,
            env(&[
                ("CNI_CONTAINERID", "c1"),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", "/opt/cni/bin::/usr/lib/cni"),
            ]),
            b"{}",
            t,
        )
        .unwrap();
        assert_eq!(r.path, ["/opt/cni/bin", "/usr/lib/cni"]);
        assert_eq!(r.timeout_ms, 1000);
        assert!(Request::from_env(Command::Status, env(&[]), b"{}", t).is_ok());
    }

    #[test]
    fn from_env_validates_ids() {
        let t = Duration::from_secs(1);
        for (id, ifname, bad) in [
            ("-abc", "eth0", "CNI_CONTAINERID"),
            ("a b", "eth0", "CNI_CONTAINERID"),
            ("abc", "eth0:1", "CNI_IFNAME"),
            ("abc", "averyveryverylongname", "CNI_IFNAME"),
            ("abc", "..", "CNI_IFNAME"),
        ] {
            let e = Request::from_env(
                Command::Del,
                env(&[("CNI_CONTAINERID", id), ("CNI_IFNAME", ifname)]),
                b"{}",
                t,
            )
            .unwrap_err();
            assert_eq!(e.code, code::INVALID_ENV);
            assert!(e.msg.contains(bad), "{e}");
        }
    }

    #[test]
    fn unknown_command() {
        let e = "ATTACH".parse::<Command>().unwrap_err();
        assert_eq!(e.code, code::INVALID_ENV);
        assert_eq!("GC".parse::<Command>().ok(), Some(Command::Gc));
    }

    #[test]
    fn response_wire_form() {
        assert_eq!(serde_json::to_string(&Response::Ok).unwrap(), r#""ok""#);
        let e = Response::Error(CniError::new(101, "refused"));
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["error"]["code"], 101);
        let back: Response = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }
}
