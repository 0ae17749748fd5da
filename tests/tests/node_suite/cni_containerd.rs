//! A real container runtime on the network plugin: Debian's containerd 1.6 + runc run a
//! busybox container with `ctr run --cni`, which calls `zstack-ovn-cni` from a conflist;
//! the node agent plumbs the container's netns into br-int of a lab node. The container
//! gets the address the controller annotated, reaches a pod on the other node over
//! Geneve, and when it exits `ctr` calls CNI DEL: the OVS port and the veth are gone.
//!
//! Arrangement (nothing on the host changes):
//! - a private containerd (config, root, state, gRPC/ttrpc sockets under the scratch
//!   dir, CRI plugin disabled) inside `unshare -m -n`: its mounts and network stay
//!   private; runc gives the container a fresh netns of its own either way;
//! - the container is a `--rootfs` directory holding `busybox` (no image, no snapshotter,
//!   no registry);
//! - `ctr run --cni` runs CNI in the `ctr` process itself with the fixed defaults
//!   `/etc/cni/net.d` and `/opt/cni/bin` (no flag or env overrides them in 1.6), so `ctr`
//!   runs in `unshare -m` with an overlay on `/etc` and a tmpfs on `/opt` (those dirs may
//!   not exist on the host) and our conf/bin dirs bind-mounted there;
//! - the CNI netns is `/proc/<pid>/ns/net` of the container: the agent, inside the node
//!   netns, opens it by path, creates the veth in the node netns and moves the peer in;
//! - `ctr` 1.6 passes no `CNI_ARGS` at all (no `K8S_POD_*`, no flag to add any), but the
//!   agent finds the pod by `K8S_POD_NAMESPACE`/`K8S_POD_NAME`. The plugin in the bin dir
//!   is therefore a two-line wrapper that names the pod after the container (ctr's
//!   `CNI_CONTAINERID` is `<ctr namespace>-<container id>`) and execs the real shim —
//!   the job kubelet's CRI does in a cluster;
//! - `ctr run -d` never calls CNI DEL (`ctr task rm` does not either), so the container
//!   runs in the foreground with `--rm`: when its command returns, `ctr` calls DEL (with
//!   an empty `CNI_NETNS`) and removes the container.
//!
//! Needs the `zovn`, `zstack-ovn-cni` and `zstack-ovnkube-node` binaries.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tests::agent::{self, AgentLab, links, ovs_ifaces, ovs_ports, ping, result_ip, shim};
use tests::containerd;

const CTR_BINS: &[&str] = &[
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "runc",
    "busybox",
    "unshare",
    "mount",
];

/// The private containerd (the rootfs and CNI dirs under its scratch dir) and what it ran,
/// undone on drop.
struct Containerd {
    daemon: containerd::Containerd,
    runs: Vec<Child>,
}

impl std::ops::Deref for Containerd {
    type Target = containerd::Containerd;
    fn deref(&self) -> &containerd::Containerd {
        &self.daemon
    }
}

impl Containerd {
    fn start(dir: &Path, ns: &str) -> Containerd {
        for d in ["rootfs/bin", "up/etc", "wk/etc", "ctl"] {
            std::fs::create_dir_all(dir.join(d)).expect("mkdir");
        }
        for d in ["proc", "sys", "dev", "etc", "tmp"] {
            std::fs::create_dir_all(dir.join("rootfs").join(d)).expect("mkdir rootfs");
        }
        let busybox = tests::find_in_path("busybox").expect("busybox");
        std::fs::copy(&busybox, dir.join("rootfs/bin/busybox")).expect("copy busybox");
        for a in ["sh", "ip", "ping", "sleep", "cat", "ls"] {
            std::os::unix::fs::symlink("busybox", dir.join("rootfs/bin").join(a)).expect("symlink");
        }
        Containerd {
            daemon: containerd::Containerd::start(dir, ns),
            runs: Vec::new(),
        }
    }

    /// `ctr task exec` in container `id`.
    fn exec(&self, id: &str, n: &mut u32, args: &[&str]) -> Output {
        *n += 1;
        let exec_id = format!("x{n}");
        let mut a = vec!["task", "exec", "--exec-id", &exec_id, id];
        a.extend_from_slice(args);
        self.ctr(&a)
    }

    /// PIDs of the shims this containerd started (`-address <our socket>`).
    fn shim_pids(&self) -> Vec<i32> {
        let sock = self.sock.display().to_string();
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
                    args.first()
                        .is_some_and(|a| a.ends_with(b"containerd-shim-runc-v2"))
                        && args.contains(&sock.as_bytes())
                })
            })
            .collect()
    }

    /// cgroup v1/v2 directories runc created for our ctr namespace.
    fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![(PathBuf::from("/sys/fs/cgroup"), 0)];
        while let Some((d, depth)) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if e.file_name().to_str() == Some(self.ns.as_str()) {
                    out.push(p);
                } else if depth < 3 {
                    stack.push((p, depth + 1));
                }
            }
        }
        out
    }

    fn stop(&mut self) {
        for id in self.ctr_list(&["task", "ls", "-q"]) {
            let _ = self.ctr(&["task", "kill", "-s", "KILL", &id]);
            let _ = self.ctr(&["task", "rm", "-f", &id]);
        }
        for id in self.ctr_list(&["container", "ls", "-q"]) {
            let _ = self.ctr(&["container", "rm", &id]);
        }
        for mut r in self.runs.drain(..) {
            let _ = r.kill();
            let _ = r.wait();
        }
        let shims = self.shim_pids();
        self.daemon.kill_daemon();
        for pid in shims {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // empty per-namespace cgroups (children first)
        let mut dirs = self.cgroup_dirs();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in dirs {
            let _ = std::fs::remove_dir(&d);
        }
    }

    fn ctr_list(&self, args: &[&str]) -> Vec<String> {
        String::from_utf8_lossy(&self.ctr(args).stdout)
            .lines()
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn cni_containerd_ctr_run() {
    let mut bins = tests::LAB_BINS.to_vec();
    bins.extend(tests::OVSDB_BINS);
    bins.extend(CTR_BINS);
    if !tests::require_real("cni_containerd_ctr_run", &bins) {
        return;
    }
    let _heavy = tests::heavy_lock();
    let s = tests::scratch("ctd");
    let mut lab = AgentLab::up(&s, "10.35.0.0/16", "10.35.0.1");

    // a pod on node2, plumbed by the shim
    lab.apply_pod("peer", 1);
    let ns_peer = lab.add_netns("pe");
    let cid_peer = format!("{:0<64}", "pe");
    let (ok, rp) = shim("ADD", &lab.nodes[1], &cid_peer, &ns_peer, "peer", 30.0);
    assert!(ok, "ADD peer: {rp}\n{}", lab.logs());
    let ip_peer = result_ip(&rp);

    // the container's pod on node1: the pod name is the container id
    let id = "cpod";
    lab.apply_pod(id, 0);
    let want = lab.pod_ip(id);

    let cdir = s.dir.path().join("ctr");
    std::fs::create_dir_all(cdir.join("cni/net.d")).expect("mkdir");
    std::fs::create_dir_all(cdir.join("cni/bin")).expect("mkdir");
    let mut ctd = Containerd::start(&cdir, &s.prefix);

    // CNI: conflist + the wrapper naming the pod (ctr passes no CNI_ARGS)
    let calls = cdir.join("cni-calls.log");
    let conflist = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "zstack-ovn",
        "plugins": [{
            "type": "zstack-ovn-cni",
            "serverSocket": lab.nodes[0].socket,
            "timeoutSeconds": 30,
        }],
    });
    std::fs::write(
        cdir.join("cni/net.d/10-zstack-ovn.conflist"),
        conflist.to_string(),
    )
    .expect("write conflist");
    let wrapper = cdir.join("cni/bin/zstack-ovn-cni");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n\
             # ctr run --cni sets no CNI_ARGS: name the pod after the container\n\
             CNI_ARGS=\"K8S_POD_NAMESPACE=default;K8S_POD_NAME=${{CNI_CONTAINERID#{ns}-}}\"\n\
             export CNI_ARGS\n\
             echo \"$CNI_COMMAND $CNI_CONTAINERID $CNI_NETNS $CNI_ARGS\" >> {calls}\n\
             exec {shim}\n",
            ns = s.prefix,
            calls = calls.display(),
            shim = tests::workspace_bin("zstack-ovn-cni").display(),
        ),
    )
    .expect("write wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // ctr's private view: /etc/cni/net.d and /opt/cni/bin are ours
    let mounts = format!(
        "set -e\n\
         mount -t overlay overlay -o lowerdir=/etc,upperdir={d}/up/etc,workdir={d}/wk/etc /etc\n\
         mount -t tmpfs tmpfs /opt\n\
         mkdir -p /etc/cni/net.d /opt/cni/bin\n\
         mount --bind {d}/cni/net.d /etc/cni/net.d\n\
         mount --bind {d}/cni/bin /opt/cni/bin\n\
         exec \"$@\"\n",
        d = cdir.display()
    );
    std::fs::write(cdir.join("cni-mounts.sh"), mounts).expect("write mounts script");

    let run_log = cdir.join("ctr-run.log");
    let log = std::fs::File::create(&run_log).expect("run log");
    let mut run = Command::new("unshare");
    run.args(["-m", "--propagation", "private", "sh"])
        .arg(cdir.join("cni-mounts.sh"))
        .arg("ctr")
        .arg("--address")
        .arg(&ctd.sock)
        .args(["--namespace", &s.prefix, "run", "--rm", "--cni"])
        // no image config: no PATH either
        .args(["--env", "PATH=/bin", "--mount"])
        .arg(format!(
            "type=bind,src={},dst=/ctl,options=rbind:rw",
            cdir.join("ctl").display()
        ))
        // --rootfs is a switch: the first argument is then the rootfs directory
        .arg("--rootfs")
        .arg(cdir.join("rootfs"))
        .args([
            id,
            "/bin/sh",
            "-c",
            "while [ ! -e /ctl/stop ]; do sleep 0.2; done; echo bye",
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    ctd.runs.push(run.spawn().expect("ctr run"));
    let diag = |ctd: &Containerd, lab: &AgentLab| {
        format!(
            "ctr run: {}\nCNI calls: {}\ncontainerd: {}\nagents: {}",
            std::fs::read_to_string(&run_log).unwrap_or_default(),
            std::fs::read_to_string(&calls).unwrap_or_default(),
            ctd.log(),
            lab.logs()
        )
    };

    // the container runs with the annotated address on eth0
    let mut n = 0;
    let t = Instant::now();
    let addr = loop {
        let out = ctd.exec(
            id,
            &mut n,
            &["/bin/ip", "-o", "-4", "addr", "show", "dev", "eth0"],
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && text.contains("inet ") {
            break text;
        }
        if let Some(st) = ctd.runs[0].try_wait().expect("try_wait") {
            panic!("ctr run exited ({st}) early\n{}", diag(&ctd, &lab));
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "container has no address on eth0: {text:?} {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            diag(&ctd, &lab)
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(
        addr.contains(&format!("inet {want} ")),
        "container eth0: {addr}, annotation {want}"
    );
    let calls_text = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(
        calls_text.contains(&format!("ADD {}-{id} /proc/", s.prefix)),
        "{calls_text}"
    );
    let ip_ctr = want.split('/').next().expect("ip").to_string();

    // plumbed once: one OVS interface, its veth in the node netns
    let node = &lab.nodes[0];
    let ifaces = ovs_ifaces(&node.db, &format!("default_{id}"));
    assert_eq!(ifaces.len(), 1, "OVS interfaces of {id}: {ifaces:?}");
    let host = ifaces[0].clone();
    assert!(
        links(&node.netns).contains(&host),
        "veth {host} not in {}",
        node.netns
    );

    // the container reaches the pod on node2 over Geneve, and the other way round
    let t = Instant::now();
    loop {
        let out = ctd.exec(id, &mut n, &["/bin/ping", "-c", "1", "-W", "1", &ip_peer]);
        if out.status.success() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "container -> peer {ip_peer}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            diag(&ctd, &lab)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        ping(&ns_peer, &ip_ctr, Duration::from_secs(10)),
        "peer -> container {ip_ctr}"
    );

    // the container exits: ctr calls DEL and removes it; port and veth are gone
    std::fs::write(cdir.join("ctl/stop"), "").expect("stop file");
    let t = Instant::now();
    let st = loop {
        if let Some(st) = ctd.runs[0].try_wait().expect("try_wait") {
            break st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "ctr run did not return\n{}",
            diag(&ctd, &lab)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    ctd.runs.clear();
    assert!(st.success(), "ctr run: {st}\n{}", diag(&ctd, &lab));
    let calls_text = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(
        calls_text.contains(&format!("DEL {}-{id}", s.prefix)),
        "no CNI DEL: {calls_text}"
    );
    let node = &lab.nodes[0];
    assert!(
        ovs_ifaces(&node.db, &format!("default_{id}")).is_empty(),
        "OVS interface of {id} left\n{}",
        diag(&ctd, &lab)
    );
    assert!(!ovs_ports(&node.db).contains(&host), "OVS port {host} left");
    assert!(!links(&node.netns).contains(&host), "veth {host} left");
    assert!(
        ctd.ctr_list(&["container", "ls", "-q"]).is_empty(),
        "containers left"
    );

    // the peer, then everything else; nothing of containerd survives
    let (ok, r) = shim("DEL", &lab.nodes[1], &cid_peer, &ns_peer, "peer", 10.0);
    assert!(ok, "DEL peer: {r}");
    let shims = ctd.shim_pids();
    let daemon = ctd.daemon_pid();
    ctd.stop();
    for pid in shims.iter().map(|p| *p as u32).chain(daemon) {
        let t = Instant::now();
        while !agent::pid_gone(pid) {
            assert!(t.elapsed() < Duration::from_secs(5), "pid {pid} alive");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert!(ctd.shim_pids().is_empty(), "containerd shims left");
    assert_eq!(ctd.cgroup_dirs(), Vec::<PathBuf>::new(), "cgroups left");
    drop(ctd);
    lab.finish();
}
