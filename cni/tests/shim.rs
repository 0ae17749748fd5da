//! Runs the built `zstack-ovn-cni` binary as a container runtime would: `CNI_*`
//! environment, config on stdin, JSON on stdout, exit status.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cni::result::sample_result;
use cni::{CniError, CniVersion, Request, Response, protocol};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;
use tokio::sync::mpsc;

const SHIM: &str = env!("CARGO_BIN_EXE_zstack-ovn-cni");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }

    /// Asserts a CNI error with `code` and returns its JSON.
    fn error(&self, code: u64) -> Value {
        assert_eq!(self.code, 1, "exit status; stdout {:?}", self.stdout);
        let v = self.json();
        assert_eq!(v["code"], code, "{v}");
        assert!(v["msg"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        assert!(v["cniVersion"].is_string(), "{v}");
        v
    }
}

/// Runs the shim with only `env` set (plus nothing inherited) and `stdin`.
fn shim(env: &[(&str, &str)], stdin: &[u8]) -> Run {
    let mut child = Command::new(SHIM)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the shim");
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    // The shim may exit before reading everything (huge stdin): ignore EPIPE.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().expect("wait for the shim");
    let _ = writer.join();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn shim_async(env: Vec<(String, String)>, stdin: Vec<u8>) -> Run {
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        shim(&env, &stdin)
    })
    .await
    .expect("shim task")
}

fn config(version: &str) -> Vec<u8> {
    json!({"cniVersion": version, "name": "zstack-ovn", "type": "zstack-ovn-cni"})
        .to_string()
        .into_bytes()
}

fn add_env(socket: &str) -> Vec<(&str, &str)> {
    vec![
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "3f6940ab5ab4"),
        ("CNI_NETNS", "/var/run/netns/cni-1"),
        ("CNI_IFNAME", "eth0"),
        (
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;\
             K8S_POD_INFRA_CONTAINER_ID=3f6940ab5ab4;K8S_POD_UID=5c0e2d6e",
        ),
        ("CNI_PATH", "/opt/cni/bin"),
        ("ZSTACK_OVN_CNI_SOCKET", socket),
    ]
}

fn owned(env: &[(&str, &str)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

// ---- no agent needed ----

#[test]
fn garbage_stdin_is_a_decode_failure() {
    let r = shim(&add_env("/nonexistent/agent.sock"), b"this is not json");
    let v = r.error(6);
    assert!(
        v["details"].as_str().is_some_and(|d| d.contains("line 1")),
        "{v}"
    );
}

#[test]
fn wrong_shape_is_an_invalid_config() {
    let r = shim(
        &add_env("/nonexistent/agent.sock"),
        br#"{"cniVersion":"1.0.0","type":"x"}"#,
    );
    let v = r.error(7);
    assert!(
        v["msg"].as_str().is_some_and(|m| m.contains("\"name\"")),
        "{v}"
    );
    let r = shim(&add_env("/nonexistent/agent.sock"), &config("0.2.0"));
    r.error(1);
}

#[test]
fn missing_command() {
    let r = shim(&[], b"");
    let v = r.error(4);
    assert_eq!(v["msg"], "CNI_COMMAND is not set");
}

#[test]
fn unknown_command() {
    let r = shim(&[("CNI_COMMAND", "ATTACH")], &config("1.1.0"));
    let v = r.error(4);
    assert!(
        v["msg"].as_str().is_some_and(|m| m.contains("ATTACH")),
        "{v}"
    );
}

#[test]
fn add_without_netns_names_the_variable() {
    let env: Vec<_> = add_env("/nonexistent/agent.sock")
        .into_iter()
        .filter(|(k, _)| *k != "CNI_NETNS")
        .collect();
    let r = shim(&env, &config("0.4.0"));
    let v = r.error(4);
    assert!(
        v["msg"].as_str().is_some_and(|m| m.contains("CNI_NETNS")),
        "{v}"
    );
    // Errors are reported in the version the runtime asked for.
    assert_eq!(v["cniVersion"], "0.4.0");
}

#[test]
fn bad_cni_args() {
    let mut env = add_env("/nonexistent/agent.sock");
    env.retain(|(k, _)| *k != "CNI_ARGS");
    env.push(("CNI_ARGS", "K8S_POD_NAME"));
    let v = shim(&env, &config("1.1.0")).error(4);
    assert!(
        v["msg"].as_str().is_some_and(|m| m.contains("CNI_ARGS")),
        "{v}"
    );
}

#[test]
fn huge_stdin_is_refused() {
    let mut big = b"{\"cniVersion\":\"1.1.0\",\"name\":\"n\",\"type\":\"t\",\"pad\":\"".to_vec();
    big.resize(2 << 20, b'x');
    big.extend_from_slice(b"\"}");
    let v = shim(&add_env("/nonexistent/agent.sock"), &big).error(7);
    assert!(
        v["msg"].as_str().is_some_and(|m| m.contains("1048576")),
        "{v}"
    );
}

#[test]
fn version_is_answered_locally() {
    // No socket variable: VERSION must not try to reach the agent.
    let r = shim(&[("CNI_COMMAND", "VERSION")], br#"{"cniVersion":"0.4.0"}"#);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(
        r.json(),
        json!({"cniVersion": "0.4.0",
               "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
    );
    let r = shim(&[("CNI_COMMAND", "VERSION")], b"");
    assert_eq!(r.code, 0);
    assert_eq!(r.json()["cniVersion"], "1.1.0");
    shim(&[("CNI_COMMAND", "VERSION")], b"{oops").error(6);
}

#[test]
fn agent_not_running_is_try_again_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    // ENOENT: no socket file.
    let missing = dir.path().join("missing.sock");
    let missing = missing.to_str().expect("utf-8 path");
    let v = shim(&add_env(missing), &config("1.1.0")).error(11);
    let msg = v["msg"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("try again later: the zstack-ovn node agent is not running"),
        "{v}"
    );
    assert!(msg.contains(missing), "{v}");

    // ECONNREFUSED: a socket file nobody listens on.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind"));
    let stale = stale.to_str().expect("utf-8 path");
    shim(&add_env(stale), &config("1.1.0")).error(11);

    // The socket can also come from the config's serverSocket.
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "zstack-ovn-cni",
                      "serverSocket": missing});
    let mut env = add_env("");
    env.retain(|(k, _)| *k != "ZSTACK_OVN_CNI_SOCKET");
    let v = shim(&env, conf.to_string().as_bytes()).error(11);
    assert!(
        v["msg"].as_str().is_some_and(|m| m.contains(missing)),
        "{v}"
    );

    // STATUS reports "plugin not available" (spec 1.1).
    let v = shim(
        &[
            ("CNI_COMMAND", "STATUS"),
            ("ZSTACK_OVN_CNI_SOCKET", missing),
        ],
        &config("1.1.0"),
    )
    .error(50);
    assert!(
        v["msg"].as_str().is_some_and(|m| m.contains("not running")),
        "{v}"
    );
}

// ---- against a test server ----
//
// The real agent arrives in the dataplane crate. This server only checks the shim's
// side of the protocol: it decodes the request with `protocol::read_request` and answers
// with `protocol::write_response` (or misbehaves on purpose).

enum Behaviour {
    Answer(Response),
    /// Reads the request, then never answers (holds the connection open).
    Silent,
    /// Reads the request, then sends part of a frame and closes.
    CloseMidReply,
}

struct TestServer {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    requests: mpsc::UnboundedReceiver<Request>,
}

fn start(behaviour: Behaviour) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("agent.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let (tx, requests) = mpsc::unbounded_channel();
    let behaviour = std::sync::Arc::new(behaviour);
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            let behaviour = behaviour.clone();
            tokio::spawn(async move {
                let req = protocol::read_request(&mut conn)
                    .await
                    .expect("read request");
                let _ = tx.send(req);
                match &*behaviour {
                    Behaviour::Answer(resp) => {
                        protocol::write_response(&mut conn, resp)
                            .await
                            .expect("write response");
                    }
                    Behaviour::Silent => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    Behaviour::CloseMidReply => {
                        let frame = protocol::encode_frame(&Response::Result(sample_result()))
                            .expect("encode");
                        let _ = conn.write_all(&frame[..frame.len() / 2]).await;
                        // dropping `conn` closes the connection
                    }
                }
            });
        }
    });
    TestServer {
        _dir: dir,
        socket,
        requests,
    }
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_round_trip_in_every_version() {
    let mut server = start(Behaviour::Answer(Response::Result(sample_result())));
    let socket = path_str(&server.socket);
    for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let stdin = config(version);
        let r = shim_async(owned(&add_env(&socket)), stdin.clone()).await;
        assert_eq!(r.code, 0, "{version}: {} {}", r.stdout, r.stderr);
        let out = r.json();
        assert_eq!(out["cniVersion"], version);
        let v = version.parse::<CniVersion>().expect("version");
        assert_eq!(out, sample_result().to_value(v));
        // Spot checks of the version differences, independent of to_value.
        let ip0 = &out["ips"][0];
        assert_eq!(ip0["address"], "10.1.0.5/24");
        assert_eq!(ip0["interface"], 1);
        if version.starts_with("0.") {
            assert_eq!(ip0["version"], "4");
            assert_eq!(out["ips"][1]["version"], "6");
        } else {
            assert!(ip0.get("version").is_none(), "{out}");
        }
        let eth0 = &out["interfaces"][1];
        let route0 = &out["routes"][0];
        if version == "1.1.0" {
            assert_eq!(eth0["mtu"], 1400);
            assert_eq!(eth0["socketPath"], "/var/run/zstack-ovn/vhost/pod.sock");
            assert_eq!(eth0["pciID"], "0000:3b:00.2");
            assert_eq!(route0["table"], 254);
        } else {
            assert!(
                eth0.get("mtu").is_none() && eth0.get("pciID").is_none(),
                "{out}"
            );
            assert_eq!(route0, &json!({"dst": "0.0.0.0/0", "gw": "10.1.0.1"}));
        }

        // What the agent received.
        let req = server.requests.recv().await.expect("request");
        assert_eq!(req.command, cni::Command::Add);
        assert_eq!(req.container_id, "3f6940ab5ab4");
        assert_eq!(req.netns, "/var/run/netns/cni-1");
        assert_eq!(req.ifname, "eth0");
        assert_eq!(req.args.pod_namespace.as_deref(), Some("default"));
        assert_eq!(req.args.pod_name.as_deref(), Some("web-0"));
        assert_eq!(req.args.pod_uid.as_deref(), Some("5c0e2d6e"));
        assert_eq!(req.args.infra_container_id.as_deref(), Some("3f6940ab5ab4"));
        assert_eq!(req.path, ["/opt/cni/bin"]);
        assert_eq!(req.config.as_bytes(), &stdin[..]);
        assert_eq!(req.timeout_ms, 60_000);
        assert_eq!(req.net_conf().expect("config").version(), v);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn del_success_prints_nothing() {
    let mut server = start(Behaviour::Answer(Response::Ok));
    let socket = path_str(&server.socket);
    let env = [
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "3f6940ab5ab4"),
        ("CNI_IFNAME", "eth0"),
        ("ZSTACK_OVN_CNI_SOCKET", socket.as_str()),
    ];
    // No CNI_NETNS: allowed for DEL.
    let r = shim_async(owned(&env), config("1.0.0")).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.stderr);
    let req = server.requests.recv().await.expect("request");
    assert_eq!(req.command, cni::Command::Del);
    assert_eq!(req.netns, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_errors_are_relayed_in_the_requested_version() {
    let err = CniError::new(
        cni::error::code::ANNOTATION_TIMEOUT,
        "timed out waiting for the pod annotation",
    )
    .with_details("pod default/web-0");
    let server = start(Behaviour::Answer(Response::Error(err)));
    let socket = path_str(&server.socket);
    let r = shim_async(owned(&add_env(&socket)), config("0.3.1")).await;
    let v = r.error(100);
    assert_eq!(
        v,
        json!({"cniVersion": "0.3.1", "code": 100,
               "msg": "timed out waiting for the pod annotation",
               "details": "pod default/web-0"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_agent_times_out() {
    let server = start(Behaviour::Silent);
    let socket = path_str(&server.socket);
    let mut env = owned(&add_env(&socket));
    env.push(("ZSTACK_OVN_CNI_TIMEOUT".into(), "0.3".into()));
    let started = Instant::now();
    let r = shim_async(env, config("1.1.0")).await;
    let v = r.error(102);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(
        v["msg"]
            .as_str()
            .is_some_and(|m| m.contains("timed out after 300ms")),
        "{v}"
    );

    // Same through the config's timeoutSeconds.
    let conf = json!({"cniVersion": "1.1.0", "name": "n", "type": "zstack-ovn-cni",
                      "timeoutSeconds": 0.2});
    let r = shim_async(owned(&add_env(&socket)), conf.to_string().into_bytes()).await;
    r.error(102);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_closing_mid_reply_is_a_clear_error() {
    let server = start(Behaviour::CloseMidReply);
    let socket = path_str(&server.socket);
    let r = shim_async(owned(&add_env(&socket)), config("1.1.0")).await;
    let v = r.error(103);
    let msg = v["msg"].as_str().unwrap_or_default();
    assert!(msg.contains("closed the connection mid-reply"), "{v}");
    assert!(
        v["details"].as_str().is_some_and(|d| d.contains(&socket)),
        "{v}"
    );
}
