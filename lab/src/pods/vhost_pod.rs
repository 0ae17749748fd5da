//! The lab's "vhost-user pod": what runs behind a pod whose CNI result carries a
//! `socketPath` (the agent gave it a vhost-user interface instead of a veth).
//!
//! QEMU guests do not run on these machines, so `dpdk-testpmd` is the VM: a
//! `net_virtio_user` port in server mode creates the socket the agent's OVS
//! `dpdkvhostuserclient` port connects to, and testpmd io-forwards between that virtio ring
//! and a `net_tap` port whose kernel side is the interface (`eth0`, or `net1`, … for a
//! Multus secondary network) in the pod's netns. The runtime then
//! configures it from the CNI result (MAC, addresses, routes, MTU) as a guest would, so
//! the pod has a normal kernel IP stack (and the usual responder) behind a real
//! vhost-user ring.
//!
//! testpmd forwards on lcore 0 (`-l 0,1 --main-lcore 1`, OVS PMDs are on core 1 in the lab)
//! and every thread is reniced to 19: its busy poll takes idle cycles only. It opens the
//! queue pairs the request asks for (`queues=N` on virtio-user, `--rxq/--txq N`), so OVS
//! negotiates that many. The record (`pods/run/<netns>.vhost.json` for `eth0`,
//! `<netns>.<ifname>.vhost.json` for another interface) lets a restarted runtime adopt it
//! and `lab down` stop it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tracing::info;

use crate::error::{LabError, Result};
use crate::netns;
use crate::process::{DaemonRecord, DetachedSpec, log_tail, spawn_detached, stop_daemon};
use crate::state::Layout;

/// The program standing in for the VM.
pub const TESTPMD: &str = "dpdk-testpmd";
/// How long testpmd gets to bring its tap up.
const TAP_TIMEOUT: Duration = Duration::from_secs(20);

/// What the CNI result says about a vhost-user interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VhostAttachment {
    pub ifname: String,
    /// The socket (the pod's view; in the lab the same as the host's).
    pub socket: PathBuf,
    pub mac: String,
    pub mtu: Option<u32>,
    /// `addr/prefix`.
    pub addresses: Vec<String>,
    /// Destination and gateway.
    pub routes: Vec<(String, Option<String>)>,
    /// Queue pairs the "VM" opens (1 unless the runtime knows the request).
    pub queues: u16,
}

/// The vhost-user interface of a CNI result (`None`: a veth pod).
pub fn attachment(result: &Value) -> Option<VhostAttachment> {
    let r = cni::CniResult::from_value(result.clone()).ok()?;
    let pod_if = r
        .interfaces
        .iter()
        .find(|i| i.sandbox.is_some() && i.socket_path.is_some())?;
    Some(VhostAttachment {
        ifname: pod_if.name.clone(),
        socket: PathBuf::from(pod_if.socket_path.clone()?),
        mac: pod_if.mac.clone()?,
        mtu: pod_if.mtu,
        addresses: r.ips.iter().map(|i| i.address.to_string()).collect(),
        routes: r
            .routes
            .iter()
            .map(|rt| (rt.dst.to_string(), rt.gw.map(|g| g.to_string())))
            .collect(),
        queues: 1,
    })
}

/// Lab-only network config key: the queue pairs the "VM" opens instead of the request (a
/// guest without multiqueue: what CNI CHECK must catch). The agent ignores it.
pub const GUEST_QUEUES_KEY: &str = "labGuestQueues";

fn positive(v: Option<&Value>) -> Option<u16> {
    v.and_then(Value::as_u64)
        .and_then(|q| u16::try_from(q).ok())
        .filter(|q| *q > 0)
}

/// The queue pairs the lab's "VM" opens for a network config: [`GUEST_QUEUES_KEY`] when
/// set, else what `vhostUser.queues` asks for (1 when it says nothing).
pub fn queues_of(config: &serde_json::Map<String, Value>) -> u16 {
    positive(config.get(GUEST_QUEUES_KEY))
        .or_else(|| positive(config.get("vhostUser").and_then(|v| v.get("queues"))))
        .unwrap_or(1)
}

/// The queue pairs the "VM" of an ADD `result` opens: [`GUEST_QUEUES_KEY`] of the network
/// `config` when set; else what the agent recorded on the OVS port
/// (`external_ids:zstack.io/vhost-queues`: the request, from the NAD or the pod
/// annotation); else the config's request; else 1.
pub fn vm_queues(config: Option<&str>, ovs_db: &str, result: &Value) -> u16 {
    let config: serde_json::Map<String, Value> = config
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default();
    let recorded = || {
        let port = super::cni_exec::host_ifname(result).or_else(|| {
            // a vhost-user result names the OVS port as its host interface
            let r = cni::CniResult::from_value(result.clone()).ok()?;
            r.interfaces
                .iter()
                .find(|i| i.sandbox.is_none())
                .map(|i| i.name.clone())
        })?;
        let key = format!("external_ids:\"{}\"", api::external_ids::ovs::VHOST_QUEUES);
        let v = crate::ctl::vsctl(ovs_db, &["get", "Interface", &port, &key]).ok()?;
        v.trim()
            .trim_matches('"')
            .parse::<u16>()
            .ok()
            .filter(|q| *q > 0)
    };
    positive(config.get(GUEST_QUEUES_KEY))
        .or_else(recorded)
        .unwrap_or_else(|| queues_of(&config))
}

/// One Multus-style `k8s.v1.cni.cncf.io/network-status` entry for the pod interface of a
/// CNI result (`default`: the pod's default network), with the device-info of a
/// vhost-user interface.
pub fn status_entry(result: &Value, network: &str, default: bool) -> Option<Value> {
    let r = cni::CniResult::from_value(result.clone()).ok()?;
    let pod_if = r.interfaces.iter().find(|i| i.sandbox.is_some())?;
    let ips: Vec<String> = r.ips.iter().map(|i| i.address.addr().to_string()).collect();
    let mut entry = json!({
        "name": network, "interface": pod_if.name, "ips": ips,
        "mac": pod_if.mac.clone().unwrap_or_default(), "default": default,
    });
    if let Some(path) = &pod_if.socket_path {
        entry["device-info"] = json!({"type": "vhost-user", "version": "1.1.0",
            "vhost-user": {"mode": "server", "path": path}});
    }
    Some(entry)
}

/// The Multus-style `k8s.v1.cni.cncf.io/network-status` value for a vhost-user result.
pub fn network_status(result: &Value, network: &str) -> Option<Value> {
    attachment(result)?;
    Some(json!([status_entry(result, network, true)?]))
}

/// Record (pidfile) of the testpmd behind interface `ifname` of the pod in `netns`.
fn record_path(layout: &Layout, netns: &str, ifname: &str) -> PathBuf {
    if ifname == super::cni_exec::IFNAME {
        layout.pods_run().join(format!("{netns}.vhost.json"))
    } else {
        layout
            .pods_run()
            .join(format!("{netns}.{ifname}.vhost.json"))
    }
}

/// The recorded testpmd behind interface `ifname` of the pod in `netns`, if any.
pub fn recorded(layout: &Layout, netns: &str, ifname: &str) -> Option<DaemonRecord> {
    let body = std::fs::read(record_path(layout, netns, ifname)).ok()?;
    serde_json::from_slice(&body).ok()
}

/// The testpmd arguments for `a` in `netns`.
pub fn testpmd_args(netns: &str, a: &VhostAttachment) -> Vec<String> {
    let q = a.queues.max(1);
    let prefix = if a.ifname == super::cni_exec::IFNAME {
        netns.to_string()
    } else {
        format!("{netns}-{}", a.ifname)
    };
    vec![
        "-l".into(),
        "0,1".into(),
        "--main-lcore".into(),
        "1".into(),
        "--no-pci".into(),
        "--in-memory".into(),
        "--single-file-segments".into(),
        "--socket-mem".into(),
        (64 + 32 * (u32::from(q) - 1)).to_string(),
        format!("--file-prefix={prefix}"),
        format!(
            "--vdev=net_virtio_user0,path={},server=1,queues={q}",
            a.socket.display()
        ),
        format!("--vdev=net_tap0,iface={},mac={}", a.ifname, a.mac),
        "--".into(),
        "--forward-mode=io".into(),
        "--auto-start".into(),
        "--nb-cores=1".into(),
        format!("--rxq={q}"),
        format!("--txq={q}"),
        format!("--total-num-mbufs={}", 4096 * u32::from(q)),
        "--stats-period".into(),
        "3600".into(),
    ]
}

/// Starts the pod's testpmd unless the recorded one runs, then (re)configures the pod's
/// interface from the CNI result. Idempotent.
pub fn ensure(layout: &Layout, key: &str, netns: &str, a: &VhostAttachment) -> Result<()> {
    if let Some(rec) = recorded(layout, netns, &a.ifname)
        && rec.is_alive()
    {
        return Ok(());
    }
    std::fs::create_dir_all(layout.pods_run())
        .map_err(|e| LabError::io("create dir", layout.pods_run(), e))?;
    let log = match a.ifname.as_str() {
        super::cni_exec::IFNAME => format!("{netns}.testpmd.log"),
        other => format!("{netns}.{other}.testpmd.log"),
    };
    let spec = DetachedSpec {
        name: format!("pod {key} vhost-user testpmd ({})", a.ifname),
        program: PathBuf::from(TESTPMD),
        args: testpmd_args(netns, a),
        netns: Some(netns.to_string()),
        log_file: layout.pods_log().join(log),
        mount_ns: None,
        pidfile: record_path(layout, netns, &a.ifname),
        // the socket path is in its arguments and names this very instance
        ident: Some(a.socket.display().to_string()),
        env: Vec::new(),
    };
    let rec = spawn_detached(&spec)?;
    let body = serde_json::to_vec_pretty(&rec).map_err(|e| LabError::Invalid(e.to_string()))?;
    std::fs::write(&spec.pidfile, body).map_err(|e| LabError::io("write", &spec.pidfile, e))?;
    if let Err(e) = wait_tap(netns, a, &rec, &spec.log_file) {
        let _ = stop_one(layout, netns, &a.ifname);
        return Err(e);
    }
    renice(rec.pid);
    configure(netns, a)?;
    info!(pod = key, pid = rec.pid, ifname = %a.ifname, queues = a.queues, socket = %a.socket.display(), "vhost-user pod up (testpmd virtio-user ⇄ tap)");
    Ok(())
}

/// Waits until testpmd has created the tap with the pod's MAC (it resets the kernel MAC
/// and link while starting).
fn wait_tap(netns: &str, a: &VhostAttachment, rec: &DaemonRecord, log: &Path) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if netns::link_mac(netns, &a.ifname).is_ok_and(|m| m.eq_ignore_ascii_case(&a.mac)) {
            // testpmd sets the tap up/down once more right after creating it
            std::thread::sleep(Duration::from_millis(300));
            return Ok(());
        }
        if !rec.is_alive() || t0.elapsed() > TAP_TIMEOUT {
            return Err(LabError::Daemon {
                name: rec.name.clone(),
                program: TESTPMD.into(),
                detail: format!(
                    "no {} with MAC {} in netns {netns} after {:?}{}",
                    a.ifname,
                    a.mac,
                    t0.elapsed(),
                    log_tail(log)
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Lowest priority for every thread of `pid` (nice is per thread on Linux).
fn renice(pid: i32) {
    let tids: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    let mut args = vec!["-n".to_string(), "19".into(), "-p".into()];
    args.extend(tids);
    if let Err(e) = crate::process::run_args("renice", &args) {
        tracing::warn!(pid, error = %e, "renice of testpmd failed");
    }
}

/// Configures the pod's interface as the guest would: MTU, up, addresses, routes, and
/// tx checksum offload off (LAB.md: partial checksums break TCP through OVS userspace).
pub fn configure(netns: &str, a: &VhostAttachment) -> Result<()> {
    let dev = a.ifname.as_str();
    if let Some(mtu) = a.mtu {
        netns::exec(netns, &["ip", "link", "set", dev, "mtu", &mtu.to_string()])?;
    }
    netns::exec(netns, &["ip", "link", "set", dev, "up"])?;
    for addr in &a.addresses {
        netns::exec(netns, &["ip", "addr", "replace", addr, "dev", dev])?;
    }
    for (dst, gw) in &a.routes {
        let mut args = vec![
            "ip".to_string(),
            "route".into(),
            "replace".into(),
            dst.to_string(),
        ];
        if let Some(gw) = gw {
            args.extend(["via".into(), gw.clone()]);
        }
        args.extend(["dev".into(), dev.to_string()]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        netns::exec(netns, &refs)?;
    }
    let _ = netns::exec(netns, &["ethtool", "-K", dev, "tx", "off"]);
    Ok(())
}

/// Stops the testpmd behind `ifname` (if recorded) and forgets it.
pub fn stop_one(layout: &Layout, netns: &str, ifname: &str) -> Result<()> {
    let path = record_path(layout, netns, ifname);
    if let Some(rec) = recorded(layout, netns, ifname) {
        stop_daemon(&rec)?;
    }
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(LabError::io("remove", &path, e)),
        _ => Ok(()),
    }
}

/// Stops every testpmd of the pod in `netns` (every interface) and forgets them.
pub fn stop(layout: &Layout, netns: &str) -> Result<()> {
    let mut ifnames = vec![super::cni_exec::IFNAME.to_string()];
    let others = std::fs::read_dir(layout.pods_run())
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(&format!("{netns}."))?;
            Some(rest.strip_suffix(".vhost.json")?.to_string())
        })
        .filter(|i| !i.is_empty() && !i.contains('.'));
    ifnames.extend(others);
    let mut first = None;
    for i in ifnames {
        if let Err(e) = stop_one(layout, netns, &i) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result() -> Value {
        json!({"cniVersion": "1.1.0",
            "interfaces": [{"name": "vhu0123456789ab"},
                {"name": "eth0", "mac": "0a:58:0a:10:00:05", "mtu": 1400, "sandbox": "/run/netns/p",
                 "socketPath": "/run/v/0123456789abcdef/eth0.sock"}],
            "ips": [{"address": "10.16.0.5/16", "gateway": "10.16.0.1", "interface": 1}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.16.0.1"}]})
    }

    #[test]
    fn attachment_from_result() {
        let a = attachment(&result()).expect("vhost");
        assert_eq!(a.socket, Path::new("/run/v/0123456789abcdef/eth0.sock"));
        assert_eq!(a.mac, "0a:58:0a:10:00:05");
        assert_eq!(a.mtu, Some(1400));
        assert_eq!(a.routes.len(), 1);
        let args = testpmd_args("p1", &a).join(" ");
        assert!(
            args.contains("path=/run/v/0123456789abcdef/eth0.sock,server=1"),
            "{args}"
        );
        assert!(
            args.contains("--vdev=net_tap0,iface=eth0,mac=0a:58:0a:10:00:05"),
            "{args}"
        );
        assert!(
            args.contains("--in-memory --single-file-segments"),
            "{args}"
        );
        assert!(args.contains("queues=1") && args.contains("--rxq=1 --txq=1"));
        let net1 = VhostAttachment {
            ifname: "net1".into(),
            queues: 2,
            ..a.clone()
        };
        let args = testpmd_args("p1", &net1).join(" ");
        assert!(args.contains("server=1,queues=2"), "{args}");
        assert!(args.contains("--rxq=2 --txq=2"), "{args}");
        assert!(args.contains("--file-prefix=p1-net1"), "{args}");
        assert!(args.contains("--vdev=net_tap0,iface=net1,"), "{args}");
        let q = serde_json::from_value(json!({"vhostUser": {"queues": 2}})).expect("map");
        assert_eq!(queues_of(&q), 2);
        let q = serde_json::from_value(json!({"vhostUser": {"queues": 2}, "labGuestQueues": 1}))
            .expect("map");
        assert_eq!(queues_of(&q), 1, "the lab's guest may open fewer");
        assert_eq!(queues_of(&serde_json::Map::new()), 1);
        let mut veth = result();
        veth["interfaces"][1]
            .as_object_mut()
            .expect("obj")
            .remove("socketPath");
        assert_eq!(attachment(&veth), None);
    }

    #[test]
    fn network_status_carries_device_info() {
        let s = network_status(&result(), "zstack-ovn").expect("status");
        assert_eq!(s[0]["device-info"]["type"], "vhost-user");
        assert_eq!(s[0]["device-info"]["vhost-user"]["mode"], "server");
        assert_eq!(s[0]["ips"][0], "10.16.0.5");
        let e = status_entry(&result(), "vms/vhost-net", false).expect("entry");
        assert_eq!(e["default"], false);
        assert_eq!(e["name"], "vms/vhost-net");
        assert_eq!(e["interface"], "eth0");
    }

    #[test]
    fn testpmds_of_a_netns_are_all_stopped() {
        let d = tempfile::tempdir().expect("dir");
        let layout = Layout::new(d.path());
        std::fs::create_dir_all(layout.pods_run()).expect("run");
        for f in ["p1.vhost.json", "p1.net1.vhost.json", "p11.vhost.json"] {
            std::fs::write(layout.pods_run().join(f), b"{").expect("write");
        }
        stop(&layout, "p1").expect("stop");
        let left: Vec<String> = std::fs::read_dir(layout.pods_run())
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["p11.vhost.json"]);
    }
}
