//! A lab for vhost-user tests: OVS-DPDK on node 1 (initialised by its agent), the object
//! store, the real agents and shim ([`DpdkLab::up`]), and the probes those tests use.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lab::Lab;

use crate::zovn::{DownOnDrop, Zovn, wait_until};

/// The DPDK build of ovs-vswitchd the lab runs on a `dpdk` node.
pub const VSWITCHD_DPDK: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";

/// The real-component gate of a vhost-user lab test (lab binaries, `dpdk-testpmd`,
/// [`VSWITCHD_DPDK`]); see [`crate::require_real`].
pub fn available(test: &str) -> bool {
    let mut bins = crate::LAB_BINS.to_vec();
    bins.push("dpdk-testpmd");
    if !crate::require_real(test, &bins) {
        return false;
    }
    if !Path::new(VSWITCHD_DPDK).exists() {
        assert!(
            std::env::var("ZOVN_REQUIRE_REAL").as_deref() != Ok("1"),
            "{VSWITCHD_DPDK} missing"
        );
        eprintln!("skipped: {VSWITCHD_DPDK} missing");
        return false;
    }
    true
}

/// A running lab (taken down when dropped).
pub struct DpdkLab {
    pub lab: Lab,
    pub dir: PathBuf,
    pub z: Zovn,
    pub agent: PathBuf,
    pub shim: PathBuf,
    /// Node 1's Open_vSwitch database.
    pub db1: String,
    /// Takes the lab down when dropped (keep it bound when destructuring).
    pub down: DownOnDrop,
}

impl DpdkLab {
    /// Brings up a lab in `s` with one node per `datapath` entry (the first must be
    /// `dpdk`), the object store and the agents; returns once node 1's agent has
    /// initialised OVS-DPDK. Records the real run of `test`.
    pub fn up(s: &crate::Scratch, datapath: &[&str], test: &str) -> DpdkLab {
        let (mut lab, z, down) = crate::zovn::start_lab(s, datapath.len(), datapath);
        let dir = z.dir.clone();
        let agent = crate::workspace_bin("zstack-ovnkube-node");
        let shim = crate::workspace_bin("zstack-ovn-cni");
        lab.start_agents(&agent, Some(&shim)).expect("agents");
        crate::record_real_run(test);
        // the agent, not the lab, initialises DPDK on node1 (vswitchd restarted by it)
        let db1 = lab.node(1).expect("node1").db_remote.clone();
        wait_until(
            "node1's agent initialised OVS-DPDK",
            Duration::from_secs(90),
            || vsctl(&db1, &["get", "Open_vSwitch", ".", "dpdk_initialized"]) == "true",
        );
        DpdkLab {
            lab,
            dir,
            z,
            agent,
            shim,
            db1,
            down,
        }
    }
}

impl DpdkLab {
    /// SIGKILLs node `index`'s agent, waits until it is gone and starts the agents again.
    pub fn restart_agent(&mut self, index: usize) {
        let agent = self
            .lab
            .agents()
            .iter()
            .find(|a| a.name.starts_with(&format!("node{index}/")))
            .cloned()
            .unwrap_or_else(|| panic!("node{index}'s agent"));
        lab::process::kill9(&agent).expect("kill agent");
        wait_until("agent gone", Duration::from_secs(5), || {
            !crate::zovn::alive(i64::from(agent.pid))
        });
        self.lab
            .start_agents(&self.agent, Some(&self.shim))
            .expect("agents again");
    }
}

/// `ovs-vsctl` on `db`, trimmed and unquoted ("" on error).
pub fn vsctl(db: &str, args: &[&str]) -> String {
    lab::ctl::vsctl(db, args)
        .unwrap_or_default()
        .trim()
        .trim_matches('"')
        .to_string()
}

/// Probes `target` (ip:port) from pod `from` until it answers with the pod name `to`.
pub fn probe_until(z: &Zovn, from: &str, target: &str, to: &str, bound: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let (code, out, _) = z.run(&["probe", from, target, "--timeout", "1s"]);
        if code == 0 && out.trim() == to {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < bound,
            "{from} → {target} still unreachable after {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Three pings from pod `from` to `ip`, none lost.
pub fn ping(z: &Zovn, from: &str, ip: &str) {
    let out = z.ok(&[
        "exec", from, "--", "ping", "-c", "3", "-i", "0.2", "-W", "2", ip,
    ]);
    assert!(out.contains(" 0% packet loss"), "{from} → {ip}: {out}");
}

/// The real-component gate of a QEMU guest test: QEMU >= 10 (Debian 12's 7.2 segfaults with
/// TCG + vhost-user + MSI-X) and qboot (`scripts/install-deps.sh` installs both), and the
/// guest image (`scripts/vm-guest-image.sh`, run through the lab); see
/// [`crate::require_real`].
pub fn qemu_available(test: &str) -> bool {
    let version = std::process::Command::new(lab::pods::vm_pod::QEMU)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    let major = version
        .split("version ")
        .nth(1)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    let missing = match major {
        None => Some(format!("{} not found", lab::pods::vm_pod::QEMU)),
        Some(m) if m < 10 => Some(format!("QEMU {m} is older than 10")),
        Some(_) if !Path::new("/usr/share/qemu/qboot.rom").exists() => {
            Some("/usr/share/qemu/qboot.rom missing".into())
        }
        Some(_) => lab::pods::vm_pod::guest_image()
            .err()
            .map(|e| format!("no guest image: {e}")),
    };
    let Some(reason) = missing else {
        return true;
    };
    assert!(
        std::env::var("ZOVN_REQUIRE_REAL").as_deref() != Ok("1"),
        "{test}: real components required (ZOVN_REQUIRE_REAL=1) but {reason} \
         (scripts/install-deps.sh)"
    );
    eprintln!("SKIP {test}: {reason} (scripts/install-deps.sh)");
    false
}

/// The names of the `dpdkvhostuserclient` Interfaces in the OVS database `db` (space
/// separated, as `--bare` prints them; empty when none).
pub fn vhost_port_names(db: &str) -> String {
    vsctl(
        db,
        &[
            "--bare",
            "--columns=name",
            "find",
            "Interface",
            "type=dpdkvhostuserclient",
        ],
    )
}
