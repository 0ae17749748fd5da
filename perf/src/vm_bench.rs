//! A real QEMU guest on vhost-user against dpdk-testpmd playing the VM, on the same kind of
//! port in the same run: TCP from a pod on the other node (iperf3, both directions) and
//! the guest's boot split.
//!
//! A 2-node lab (node1 OVS-DPDK, node2 kernel, Geneve between them), its object store,
//! controller and node agents with the real shim. On node1: VMI `guest` (KubeVirt
//! `firmware.kernelBoot`: the lab's QEMU, TCG, 1 vCPU, 256 MiB, `iperf3 -s` in the guest;
//! see `lab::pods::vm_pod`) and pod `tvm` asking for vhost-user by annotation (the lab's
//! testpmd: virtio-user server ⇄ tap `eth0`, `iperf3 -s` on the tap). On node2: pod `client`.
//! Both VMs sit behind the same kind of `dpdkvhostuserclient` port on the same PMD, so the
//! ratio compares what is behind the port: the TCG guest's virtio-net driver against
//! testpmd and a kernel tap. The guest is emulated (no usable KVM here): the figure is the
//! emulation's, not the datapath's.
//!
//! Rounds alternate (who goes first alternates); medians are reported with the guest ÷
//! testpmd ratios. The boot split is from the guest's console markers
//! (`pods/run/<netns>.vm-boot.json`) and the first ping from `client` answered.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use lab::apiserver::ApiClient;
use lab::{Lab, LabConfig};
use serde_json::{Value, json};

use crate::datapath_bench::{iperf_gbps, median, wait_listening};
use crate::host::{LabGuard, heavy_lock, run_ok, which};

/// How long the three pods get to be ready (the guest boots under TCG).
const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct Config {
    pub dir: PathBuf,
    /// iperf3 seconds per sample.
    pub seconds: u32,
    pub rounds: usize,
}

/// The guest's boot, ms after QEMU's start.
#[derive(Debug, Clone, Default)]
pub struct BootSplit {
    pub booted_ms: u64,
    pub addr_ms: u64,
    pub ready_ms: u64,
    pub first_ping_ms: u64,
}

/// Measured samples (Gbit/s).
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub seconds: u32,
    pub rounds: usize,
    pub boot: BootSplit,
    /// client → guest, client → testpmd, guest → client, testpmd → client.
    pub to_guest: Vec<f64>,
    pub to_testpmd: Vec<f64>,
    pub from_guest: Vec<f64>,
    pub from_testpmd: Vec<f64>,
}

impl Report {
    /// (client → VM, VM → client) guest ÷ testpmd, medians.
    pub fn ratios(&self) -> (f64, f64) {
        (
            median(self.to_guest.clone()) / median(self.to_testpmd.clone()),
            median(self.from_guest.clone()) / median(self.from_testpmd.clone()),
        )
    }

    pub fn table(&self) -> String {
        let (to, from) = self.ratios();
        let mbit = |v: &[f64]| median(v.to_vec()) * 1000.0;
        let b = &self.boot;
        format!(
            "QEMU guest (TCG) vs testpmd as the VM, one vhost-user port each on node1's PMD,\n\
             iperf3 {} s x {} rounds from/to a pod on node2 (Geneve), median Mbit/s:\n\
             {:<22}{:>10}{:>10}{:>8}\n\
             {:<22}{:>10.0}{:>10.0}{:>7.2}x\n\
             {:<22}{:>10.0}{:>10.0}{:>7.2}x\n\
             guest boot (ms after QEMU's start): /init {} (QEMU waits for OVS first), \
             address {}, console shell {}, first ping from node2 answered {}\n",
            self.seconds,
            self.rounds,
            "direction",
            "guest",
            "testpmd",
            "ratio",
            "pod -> VM",
            mbit(&self.to_guest),
            mbit(&self.to_testpmd),
            to,
            "VM -> pod",
            mbit(&self.from_guest),
            mbit(&self.from_testpmd),
            from,
            b.booted_ms,
            b.addr_ms,
            b.ready_ms,
            b.first_ping_ms,
        )
    }

    pub fn to_json(&self) -> Value {
        let (to, from) = self.ratios();
        json!({
            "seconds": self.seconds, "rounds": self.rounds,
            "to_guest_gbps": self.to_guest, "to_testpmd_gbps": self.to_testpmd,
            "from_guest_gbps": self.from_guest, "from_testpmd_gbps": self.from_testpmd,
            "to_ratio": to, "from_ratio": from,
            "boot_ms": {"booted": self.boot.booted_ms, "addr": self.boot.addr_ms,
                "ready": self.boot.ready_ms, "first_ping": self.boot.first_ping_ms},
        })
    }
}

fn objects(node1: &str, node2: &str) -> Vec<Value> {
    vec![
        json!({"apiVersion": "network.zstack.io/v1", "kind": "Subnet",
            "metadata": {"name": "vm-bench"},
            "spec": {"cidr": "10.78.0.0/16", "default": true}}),
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "client", "namespace": "default"},
            "spec": {"nodeName": node2, "containers": [{"name": "c"}]}}),
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "tvm", "namespace": "default",
                "annotations": {api::keys::VHOST_USER: "{}"}},
            "spec": {"nodeName": node1, "containers": [{"name": "c"}]}}),
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "guest", "namespace": "default"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node1},
                "domain": {"cpu": {"cores": 1}, "memory": {"guest": "256Mi"},
                    "firmware": {"kernelBoot": {"kernelArgs": "zovn.run=\"iperf3 -s -D\"",
                        "container": {"image": lab::pods::vm_pod::GUEST_IMAGE}}},
                    "devices": {"interfaces": [{"name": "default", "binding": {"name": "vhostuser"}}]}},
                "networks": [{"name": "default", "pod": {}}]}}),
    ]
}

/// (netns, IPv4) of each pod once all are ready.
fn wait_pods(lab_dir: &std::path::Path, keys: &[&str]) -> Result<Vec<(String, String)>> {
    let layout = lab::state::Layout::new(lab_dir);
    let t = Instant::now();
    loop {
        let file = lab::pods::record::PodsFile::load(&layout.pods_file())?;
        let found: Vec<(String, String)> = keys
            .iter()
            .filter_map(|k| {
                let r = file.pod(k).filter(|r| r.ready)?;
                let ip = r.ips.iter().find(|a| !a.contains(':'))?.split('/').next()?;
                Some((r.netns.clone(), ip.to_string()))
            })
            .collect();
        if found.len() == keys.len() {
            return Ok(found);
        }
        if t.elapsed() > READY_TIMEOUT {
            let msgs: Vec<String> = keys
                .iter()
                .filter_map(|k| Some(format!("{k}: {}", file.pod(k)?.message.clone()?)))
                .collect();
            bail!("pods not ready after {READY_TIMEOUT:?}: {msgs:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

/// iperf3 Gbit/s from netns `from` to `to` (`reverse`: `to` sends).
fn iperf(from: &str, to: &str, seconds: u32, reverse: bool) -> Result<f64> {
    let secs = seconds.to_string();
    let mut args = vec!["netns", "exec", from, "iperf3", "-J", "-c", to, "-t", &secs];
    if reverse {
        args.push("-R");
    }
    // iperf3's server reopens its listening socket after each test, which the TCG guest
    // takes a moment to do: a refused connection is retried for 15 s
    let t = Instant::now();
    loop {
        let o = Command::new("ip")
            .args(&args)
            .output()
            .with_context(|| format!("run iperf3 in {from}"))?;
        let parsed = iperf_gbps(&String::from_utf8_lossy(&o.stdout));
        match parsed {
            Ok((gbps, _)) => return Ok(gbps),
            Err(e)
                if e.to_string().contains("unable to connect")
                    && t.elapsed() < Duration::from_secs(15) =>
            {
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => {
                return Err(e.context(format!("iperf3 {from} → {to} (reverse {reverse})")));
            }
        }
    }
}

pub fn run(cfg: Config) -> Result<Report> {
    ensure!(cfg.rounds > 0, "--rounds must be at least 1");
    ensure!(which("iperf3").is_some(), "`iperf3` is not installed");
    ensure!(
        which(lab::pods::vm_pod::QEMU).is_some(),
        "{} is not installed (scripts/install-deps.sh installs QEMU >= 10)",
        lab::pods::vm_pod::QEMU
    );
    lab::pods::vm_pod::guest_image().context("the guest image")?;
    let _lock = heavy_lock("vm")?;
    let zovn = lab::apiserver::zovn_exe()?;
    let agent = lab::agent::agent_exe()?;
    let shim = lab::agent::shim_exe()?;
    let lab_dir = cfg.dir.join("lab-vm");
    let mut g = LabGuard::new(&lab_dir);
    let mut lc = LabConfig::new(&lab_dir, "zvm");
    lc.nodes = 2;
    lc.datapath = vec!["dpdk".into(), "kernel".into()];
    let mut lab = Lab::up(lc).context("lab up")?;
    lab.keep_running();
    lab.start_apiserver(&zovn).context("object store")?;
    lab.start_agents(&agent, Some(&shim))
        .context("node agents")?;
    wait_dpdk(&lab)?;
    let (node1, node2) = (
        lab.node(1)?.system_id.clone(),
        lab.node(2)?.system_id.clone(),
    );
    ApiClient::connect(&lab_dir)?
        .apply(objects(&node1, &node2))
        .context("apply the Subnet, the pods and the VMI")?;
    let launcher = format!(
        "default/{}",
        lab::kubevirt::launcher_name("default", "guest")
    );
    let at = wait_pods(&lab_dir, &["default/client", "default/tvm", &launcher])?;
    let [(client, _), (tvm_ns, tvm_ip), (guest_ns, guest_ip)] =
        [at[0].clone(), at[1].clone(), at[2].clone()];
    let layout = lab::state::Layout::new(&lab_dir);
    let tl =
        lab::pods::vm_pod::timeline(&layout, &guest_ns).context("the guest's boot timeline")?;
    let t = Instant::now();
    loop {
        let ok = Command::new("ip")
            .args([
                "netns", "exec", &client, "ping", "-c", "1", "-W", "1", &guest_ip,
            ])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            break;
        }
        ensure!(
            t.elapsed() < Duration::from_secs(60),
            "the guest {guest_ip} never answered a ping from node2"
        );
    }
    let boot = BootSplit {
        booted_ms: tl.booted_ms.unwrap_or_default(),
        addr_ms: tl.addr_ms.unwrap_or_default(),
        ready_ms: tl.ready_ms.unwrap_or_default(),
        first_ping_ms: now_ms().saturating_sub(tl.started_unix_ms),
    };
    g.server(&tvm_ns, &["iperf3", "-s", "-p", "5201"])?;
    wait_listening(&tvm_ns, 5201)?;
    let mut report = Report {
        seconds: cfg.seconds,
        rounds: cfg.rounds,
        boot,
        ..Report::default()
    };
    for round in 1..=cfg.rounds {
        let order: [(&str, bool); 2] = if round % 2 == 1 {
            [(&guest_ip, true), (&tvm_ip, false)]
        } else {
            [(&tvm_ip, false), (&guest_ip, true)]
        };
        for (ip, is_guest) in order {
            eprintln!(
                "vm: round {round}/{}, {}",
                cfg.rounds,
                if is_guest { "guest" } else { "testpmd" }
            );
            let to = iperf(&client, ip, cfg.seconds, false)?;
            let from = iperf(&client, ip, cfg.seconds, true)?;
            if is_guest {
                report.to_guest.push(to);
                report.from_guest.push(from);
            } else {
                report.to_testpmd.push(to);
                report.from_testpmd.push(from);
            }
        }
    }
    drop(g);
    Ok(report)
}

/// Until node1's agent has initialised OVS-DPDK.
fn wait_dpdk(lab: &Lab) -> Result<()> {
    let db = lab.node(1)?.db_remote.clone();
    let t = Instant::now();
    loop {
        let o = run_ok(Command::new("ovs-vsctl").args([
            "--db",
            &db,
            "get",
            "Open_vSwitch",
            ".",
            "dpdk_initialized",
        ]))?;
        if String::from_utf8_lossy(&o.stdout).trim() == "true" {
            return Ok(());
        }
        ensure!(
            t.elapsed() < Duration::from_secs(90),
            "node1's agent did not initialise OVS-DPDK in 90 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_guest_over_testpmd_medians() {
        let r = Report {
            seconds: 30,
            rounds: 3,
            boot: BootSplit::default(),
            to_guest: vec![0.2, 0.3, 0.25],
            to_testpmd: vec![1.0, 0.5, 0.4],
            from_guest: vec![0.1],
            from_testpmd: vec![0.4],
        };
        let (to, from) = r.ratios();
        assert!((to - 0.5).abs() < 1e-9, "{to}");
        assert!((from - 0.25).abs() < 1e-9, "{from}");
        let t = r.table();
        assert!(t.contains("pod -> VM") && t.contains("0.50x"), "{t}");
        assert_eq!(r.to_json()["to_ratio"], 0.5);
    }
}
