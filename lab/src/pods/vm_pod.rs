//! The lab's virt-launcher: a VMI with a boot source (KubeVirt's
//! `spec.domain.firmware.kernelBoot`) runs as a real QEMU guest behind the vhost-user `eth0`
//! the agent hands its launcher pod, as KubeVirt's vhost-user binding plugin runs it.
//!
//! - The socket: the CNI result's `socketPath` (the device-info path of the pod's
//!   `network-status`); QEMU is the vhost-user server (`-chardev socket,server=on`), OVS's
//!   `dpdkvhostuserclient` port the client. Nothing in the product knows QEMU from testpmd.
//! - The guest: Debian's kernel and a busybox initramfs built by
//!   `scripts/vm-guest-image.sh` (docs/vm-guest.md), the only image the lab boots
//!   ([`GUEST_IMAGE`]); `$ZOVN_VM_IMAGE` names its directory, else the script runs (cached
//!   under `/var/cache/zovn/vm/<key>`). TCG, `cpu.cores` vCPUs, `memory.guest` of
//!   `memory-backend-memfd,share=on` RAM (the backend maps it without hugepages).
//! - Its address: static, from the CNI result, on the kernel command line
//!   (`zovn.ip=/zovn.gw=/zovn.mtu=`), as KubeVirt's cloud-init network data would give it.
//!   OVN's native DHCP would need `DHCP_Options` rows the product does not write; the
//!   lease the guest must keep across a migration is IPAM's either way.
//! - Its QEMU runs in the pod's netns (the compute container's), renders the console to
//!   `pods/log/<netns>.console.log`, takes typed commands on `pods/run/<netns>.con.sock`
//!   ([`Console`]) and QMP on `pods/run/<netns>.qmp.sock`; the record
//!   `pods/run/<netns>.vm.json` lets a restarted runtime adopt it and `lab down` stop it;
//!   `pods/run/<netns>.vm-boot.json` holds the boot timeline ([`BootTimeline`]).
//! - The pod is ready when the guest prints `ZOVN-GUEST: ready` (its network configured,
//!   its `zovn.run` command started).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tracing::info;

use super::vhost_pod::VhostAttachment;
use crate::error::{LabError, Result};
use crate::process::{DaemonRecord, DetachedSpec, log_tail, spawn_detached, stop_daemon};
use crate::state::Layout;

/// Lab-only annotation on a launcher pod: the VMI's [`VmBoot`] (JSON), written by the
/// lab's KubeVirt, read by this runtime. The agent never reads it.
pub const VM_BOOT_ANNOTATION: &str = "lab.zstack.io/vm-boot";
/// The emulator.
pub const QEMU: &str = "qemu-system-x86_64";
/// The one image the lab boots (`kernelBoot.container.image`).
pub const GUEST_IMAGE: &str = "zovn/vm-guest";
/// The guest image directory (`vmlinux`, `initramfs.cpio.gz`), overriding the script.
pub const IMAGE_ENV: &str = "ZOVN_VM_IMAGE";
/// qboot enters the ELF kernel through PVH (package qemu-system-data).
const QBOOT: &str = "/usr/share/qemu/qboot.rom";
/// From QEMU's start to `ZOVN-GUEST: ready` (TCG on a loaded 2-core machine; QEMU also
/// waits for OVS to connect to its socket before the guest runs).
const BOOT_TIMEOUT: Duration = Duration::from_secs(180);
/// The console marker prefix.
const MARKER: &str = "ZOVN-GUEST: ";

/// What a VMI asks of its QEMU (see `kubevirt::vm_boot`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmBoot {
    /// `kernelBoot.container.image`.
    pub image: String,
    /// `kernelBoot.kernelArgs` (after the lab's own).
    #[serde(default)]
    pub kernel_args: String,
    pub cpus: u16,
    pub memory_mib: u32,
}

impl VmBoot {
    /// The boot request a launcher pod carries ([`VM_BOOT_ANNOTATION`]).
    pub fn of_annotations(annotations: &BTreeMap<String, String>) -> Option<VmBoot> {
        serde_json::from_str(annotations.get(VM_BOOT_ANNOTATION)?).ok()
    }
}

/// The files of the VM of the pod in `netns`.
#[derive(Debug, Clone)]
pub struct VmFiles {
    pub record: PathBuf,
    pub console_log: PathBuf,
    pub console_sock: PathBuf,
    pub qmp_sock: PathBuf,
    pub qemu_log: PathBuf,
    pub boot: PathBuf,
}

impl VmFiles {
    pub fn of(layout: &Layout, netns: &str) -> VmFiles {
        let run = layout.pods_run();
        let log = layout.pods_log();
        VmFiles {
            record: run.join(format!("{netns}.vm.json")),
            console_log: log.join(format!("{netns}.console.log")),
            console_sock: run.join(format!("{netns}.con.sock")),
            qmp_sock: run.join(format!("{netns}.qmp.sock")),
            qemu_log: log.join(format!("{netns}.qemu.log")),
            boot: run.join(format!("{netns}.vm-boot.json")),
        }
    }
}

/// When the guest reached each step, in ms after QEMU was started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootTimeline {
    /// QEMU's start, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// The kernel ran `/init` (QEMU waited for the vhost-user peer before that).
    pub booted_ms: Option<u64>,
    /// The virtio-net driver bound `eth0`.
    pub eth0_ms: Option<u64>,
    /// `eth0` carries its address.
    pub addr_ms: Option<u64>,
    /// The console shell runs.
    pub ready_ms: Option<u64>,
}

/// The recorded QEMU of the pod in `netns`, if any.
pub fn recorded(layout: &Layout, netns: &str) -> Option<DaemonRecord> {
    let body = std::fs::read(VmFiles::of(layout, netns).record).ok()?;
    serde_json::from_slice(&body).ok()
}

/// The boot timeline of the pod in `netns`, once its VM booted.
pub fn timeline(layout: &Layout, netns: &str) -> Option<BootTimeline> {
    let body = std::fs::read(VmFiles::of(layout, netns).boot).ok()?;
    serde_json::from_slice(&body).ok()
}

/// The guest image directory: `$ZOVN_VM_IMAGE`, else what `scripts/vm-guest-image.sh` of
/// this source tree prints (built once, then cached by the script; remembered here).
pub fn guest_image() -> Result<PathBuf> {
    static IMAGE: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    if let Some(dir) = std::env::var_os(IMAGE_ENV) {
        return checked_image(PathBuf::from(dir));
    }
    let found = IMAGE.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/vm-guest-image.sh");
        if !script.exists() {
            return Err(format!(
                "no guest image: set {IMAGE_ENV} to the directory scripts/vm-guest-image.sh prints"
            ));
        }
        let out = std::process::Command::new("bash")
            .arg(&script)
            .output()
            .map_err(|e| format!("run {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} failed: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(PathBuf::from(dir))
    });
    match found {
        Ok(dir) => checked_image(dir.clone()),
        Err(e) => Err(LabError::Invalid(e.clone())),
    }
}

fn checked_image(dir: PathBuf) -> Result<PathBuf> {
    for f in ["vmlinux", "initramfs.cpio.gz"] {
        if !dir.join(f).is_file() {
            return Err(LabError::Invalid(format!(
                "guest image {}: no {f} (scripts/vm-guest-image.sh writes it)",
                dir.display()
            )));
        }
    }
    Ok(dir)
}

/// The guest's kernel command line: console, the address from the CNI result (first
/// IPv4, its default gateway, MTU), then the VMI's `kernelArgs`.
pub fn guest_cmdline(a: &VhostAttachment, boot: &VmBoot) -> String {
    let mut line = String::from("console=ttyS0 quiet panic=-1 cryptomgr.notests");
    if let Some(ip) = a.addresses.iter().find(|ip| !ip.contains(':')) {
        line.push_str(&format!(" zovn.ip={ip}"));
    }
    let gw = a
        .routes
        .iter()
        .find(|(dst, _)| dst == "0.0.0.0/0")
        .and_then(|(_, gw)| gw.clone());
    if let Some(gw) = gw {
        line.push_str(&format!(" zovn.gw={gw}"));
    }
    if let Some(mtu) = a.mtu {
        line.push_str(&format!(" zovn.mtu={mtu}"));
    }
    if !boot.kernel_args.trim().is_empty() {
        line.push(' ');
        line.push_str(boot.kernel_args.trim());
    }
    line
}

/// QEMU's arguments for the VM behind `a` (`image`: the guest image directory).
pub fn qemu_args(
    name: &str,
    files: &VmFiles,
    image: &Path,
    a: &VhostAttachment,
    boot: &VmBoot,
) -> Vec<String> {
    let q = a.queues.max(1);
    let mem = boot.memory_mib;
    let mut device = format!("virtio-net-pci,netdev=net0,mac={}", a.mac);
    if q > 1 {
        // one vector per rx and tx queue, one for config, one for the control queue
        device.push_str(&format!(",mq=on,vectors={}", 2 * u32::from(q) + 2));
    }
    let mut netdev = String::from("vhost-user,id=net0,chardev=vhu");
    if q > 1 {
        netdev.push_str(&format!(",queues={q}"));
    }
    [
        "-name",
        &format!("zovn-{name}"),
        "-accel",
        "tcg",
        "-M",
        "pc",
        "-smp",
        &boot.cpus.max(1).to_string(),
        "-m",
        &format!("{mem}M"),
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-object",
        &format!("memory-backend-memfd,id=mem,size={mem}M,share=on"),
        "-numa",
        "node,memdev=mem",
        "-bios",
        QBOOT,
        "-kernel",
        &image.join("vmlinux").display().to_string(),
        "-initrd",
        &image.join("initramfs.cpio.gz").display().to_string(),
        "-append",
        &guest_cmdline(a, boot),
        "-chardev",
        &format!(
            "socket,id=con,path={},server=on,wait=off,logfile={}",
            files.console_sock.display(),
            files.console_log.display()
        ),
        "-serial",
        "chardev:con",
        "-qmp",
        &format!("unix:{},server=on,wait=off", files.qmp_sock.display()),
        "-chardev",
        &format!(
            "socket,id=vhu,path={},server=on,wait=off",
            a.socket.display()
        ),
        "-netdev",
        &netdev,
        "-device",
        &device,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Why the lab cannot boot a VM at all (before anything is started).
fn preflight(boot: &VmBoot, files: &VmFiles) -> Result<PathBuf> {
    if boot.image != GUEST_IMAGE {
        return Err(LabError::Invalid(format!(
            "kernelBoot image {:?}: the lab boots only {GUEST_IMAGE} (scripts/vm-guest-image.sh)",
            boot.image
        )));
    }
    for sock in [&files.console_sock, &files.qmp_sock] {
        if sock.as_os_str().len() > 107 {
            return Err(LabError::Invalid(format!(
                "socket path {} is longer than 107 bytes: use a shorter lab directory",
                sock.display()
            )));
        }
    }
    if !Path::new(QBOOT).exists() {
        return Err(LabError::Invalid(format!(
            "{QBOOT} not found: scripts/install-deps.sh installs QEMU >= 10 and qemu-system-data"
        )));
    }
    guest_image()
}

/// Starts the VM of the pod in `netns` unless its recorded QEMU runs, and waits until the
/// guest is ready. Idempotent; a failed start leaves nothing running.
pub fn ensure(
    layout: &Layout,
    key: &str,
    netns: &str,
    a: &VhostAttachment,
    boot: &VmBoot,
) -> Result<()> {
    if recorded(layout, netns).is_some_and(|r| r.is_alive()) {
        return Ok(());
    }
    let files = VmFiles::of(layout, netns);
    let image = preflight(boot, &files)?;
    for dir in [layout.pods_run(), layout.pods_log()] {
        std::fs::create_dir_all(&dir).map_err(|e| LabError::io("create dir", &dir, e))?;
    }
    for stale in [&files.console_sock, &files.qmp_sock, &files.boot] {
        let _ = std::fs::remove_file(stale);
    }
    let spec = DetachedSpec {
        name: format!("pod {key} QEMU guest"),
        program: PathBuf::from(QEMU),
        args: qemu_args(netns, &files, &image, a, boot),
        netns: Some(netns.to_string()),
        log_file: files.qemu_log.clone(),
        mount_ns: None,
        pidfile: files.record.clone(),
        // the vhost-user socket is in its arguments and names this very VM
        ident: Some(a.socket.display().to_string()),
        env: Vec::new(),
    };
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default();
    let t0 = Instant::now();
    let rec = spawn_detached(&spec)?;
    let body = serde_json::to_vec_pretty(&rec).map_err(|e| LabError::Invalid(e.to_string()))?;
    std::fs::write(&files.record, body).map_err(|e| LabError::io("write", &files.record, e))?;
    let mut tl = BootTimeline {
        started_unix_ms: started,
        ..BootTimeline::default()
    };
    if let Err(e) = wait_ready(&files, &rec, t0, &mut tl) {
        let _ = stop(layout, netns);
        return Err(e);
    }
    let body = serde_json::to_vec_pretty(&tl).map_err(|e| LabError::Invalid(e.to_string()))?;
    std::fs::write(&files.boot, body).map_err(|e| LabError::io("write", &files.boot, e))?;
    info!(pod = key, pid = rec.pid, socket = %a.socket.display(), queues = a.queues,
        booted_ms = tl.booted_ms, ready_ms = tl.ready_ms, "VM up (QEMU on vhost-user)");
    Ok(())
}

/// Reads the console until `ZOVN-GUEST: ready`, noting when each marker came.
fn wait_ready(
    files: &VmFiles,
    rec: &DaemonRecord,
    t0: Instant,
    tl: &mut BootTimeline,
) -> Result<()> {
    let fail = |detail: String| LabError::Daemon {
        name: rec.name.clone(),
        program: QEMU.into(),
        detail,
    };
    loop {
        let console = std::fs::read(&files.console_log).unwrap_or_default();
        let console = String::from_utf8_lossy(&console);
        let ms = || u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        for (word, slot) in [
            ("booted", &mut tl.booted_ms),
            ("eth0 ", &mut tl.eth0_ms),
            ("addr ", &mut tl.addr_ms),
            ("ready", &mut tl.ready_ms),
        ] {
            if slot.is_none() && console.contains(&format!("{MARKER}{word}")) {
                *slot = Some(ms());
            }
        }
        if let Some(line) = console
            .lines()
            .find(|l| l.contains(&format!("{MARKER}error")))
        {
            return Err(fail(format!("the guest reported: {}", line.trim())));
        }
        if tl.ready_ms.is_some() {
            return Ok(());
        }
        if !rec.is_alive() {
            return Err(fail(format!(
                "QEMU exited before the guest was ready{}",
                log_tail(&files.qemu_log)
            )));
        }
        if t0.elapsed() > BOOT_TIMEOUT {
            let last: Vec<&str> = console.lines().rev().take(5).collect();
            return Err(fail(format!(
                "guest not ready after {:?} (booted: {}; console ends {:?}){}",
                t0.elapsed(),
                tl.booted_ms.is_some(),
                last,
                log_tail(&files.qemu_log)
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops the pod's QEMU (if recorded) and removes its record, sockets and timeline (the
/// logs stay with the other pod logs).
pub fn stop(layout: &Layout, netns: &str) -> Result<()> {
    let files = VmFiles::of(layout, netns);
    if let Some(rec) = recorded(layout, netns) {
        stop_daemon(&rec)?;
    }
    for f in [
        &files.record,
        &files.console_sock,
        &files.qmp_sock,
        &files.boot,
    ] {
        match std::fs::remove_file(f) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(LabError::io("remove", f, e));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The guest's serial console: type a command line, read what it printed.
#[derive(Debug, Clone)]
pub struct Console {
    files: VmFiles,
}

impl Console {
    /// The console of the VM of the pod in `netns` (of the lab in `layout`).
    pub fn of(layout: &Layout, netns: &str) -> Console {
        Console {
            files: VmFiles::of(layout, netns),
        }
    }

    /// Runs `cmd` in the guest's shell; its exit code and everything the console printed
    /// meanwhile, once the guest echoes `ZOVN-GUEST: done <code>` (within `timeout`). The
    /// output is read from the console socket, which must be drained while connected: the
    /// serial port writes a byte at a time, and a unix socket's send buffer fills after a
    /// few hundred such writes (the guest's output then stalls).
    pub fn run(&self, cmd: &str, timeout: Duration) -> Result<(i32, String)> {
        let sock = &self.files.console_sock;
        let mut s = std::os::unix::net::UnixStream::connect(sock)
            .map_err(|e| LabError::io("connect", sock, e))?;
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(|e| LabError::io("set timeout", sock, e))?;
        writeln!(s, "{cmd}; echo {MARKER}done $?").map_err(|e| LabError::io("write", sock, e))?;
        let t0 = Instant::now();
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => {
                    return Err(LabError::Invalid(format!(
                        "guest console {} closed while running {cmd:?}",
                        sock.display()
                    )));
                }
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(LabError::io("read", sock, e)),
            }
            let out = String::from_utf8_lossy(&raw).replace('\r', "");
            if let Some(code) = done_code(&out) {
                return Ok((code, out));
            }
            if t0.elapsed() > timeout {
                return Err(LabError::Invalid(format!(
                    "guest console {}: no result of {cmd:?} after {timeout:?}: {}",
                    sock.display(),
                    out.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
                )));
            }
        }
    }
}

/// The exit code of a `ZOVN-GUEST: done <code>` line (not the echoed `done $?`).
fn done_code(out: &str) -> Option<i32> {
    out.lines().find_map(|l| {
        let rest = l.split(&format!("{MARKER}done ")).nth(1)?;
        rest.trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachment() -> VhostAttachment {
        VhostAttachment {
            ifname: "eth0".into(),
            socket: "/run/v/abc/eth0.sock".into(),
            mac: "0a:58:0a:10:00:05".into(),
            mtu: Some(1400),
            addresses: vec!["fd00::5/64".into(), "10.16.0.5/16".into()],
            routes: vec![
                ("10.96.0.0/12".into(), None),
                ("0.0.0.0/0".into(), Some("10.16.0.1".into())),
            ],
            queues: 1,
        }
    }

    fn boot() -> VmBoot {
        VmBoot {
            image: GUEST_IMAGE.into(),
            kernel_args: " zovn.run=\"iperf3 -s -D\" ".into(),
            cpus: 1,
            memory_mib: 256,
        }
    }

    #[test]
    fn the_guest_gets_the_cni_result_on_its_command_line() {
        assert_eq!(
            guest_cmdline(&attachment(), &boot()),
            "console=ttyS0 quiet panic=-1 cryptomgr.notests zovn.ip=10.16.0.5/16 \
             zovn.gw=10.16.0.1 zovn.mtu=1400 zovn.run=\"iperf3 -s -D\""
        );
    }

    #[test]
    fn qemu_serves_the_socket_with_the_queues_asked() {
        let layout = Layout::new(Path::new("/lab"));
        let files = VmFiles::of(&layout, "zp-1");
        let args = qemu_args("zp-1", &files, Path::new("/img"), &attachment(), &boot());
        let line = args.join(" ");
        assert!(
            line.contains("-chardev socket,id=vhu,path=/run/v/abc/eth0.sock,server=on,wait=off"),
            "{line}"
        );
        assert!(
            line.ends_with("-device virtio-net-pci,netdev=net0,mac=0a:58:0a:10:00:05"),
            "{line}"
        );
        assert!(line.contains("memory-backend-memfd,id=mem,size=256M,share=on"));
        assert!(line.contains("-kernel /img/vmlinux -initrd /img/initramfs.cpio.gz"));
        assert!(
            line.contains("logfile=/lab/pods/log/zp-1.console.log"),
            "{line}"
        );
        let two = VhostAttachment {
            queues: 2,
            ..attachment()
        };
        let line = qemu_args("zp-1", &files, Path::new("/img"), &two, &boot()).join(" ");
        assert!(line.contains("chardev=vhu,queues=2"), "{line}");
        assert!(line.contains(",mq=on,vectors=6"), "{line}");
    }

    #[test]
    fn only_the_labs_image_boots() {
        let layout = Layout::new(Path::new("/lab"));
        let wrong = VmBoot {
            image: "quay.io/containerdisks/fedora".into(),
            ..boot()
        };
        let e = preflight(&wrong, &VmFiles::of(&layout, "n")).unwrap_err();
        assert!(e.to_string().contains("boots only zovn/vm-guest"), "{e}");
        let long = Layout::new(Path::new("/").join("d".repeat(100)));
        let e = preflight(&boot(), &VmFiles::of(&long, "n")).unwrap_err();
        assert!(e.to_string().contains("longer than 107 bytes"), "{e}");
    }

    #[test]
    fn the_done_marker_is_the_printed_one() {
        let echoed = "zovn# ping -c 1 x; echo ZOVN-GUEST: done $?\n";
        assert_eq!(done_code(echoed), None);
        assert_eq!(
            done_code(&format!("{echoed}1 packets\nZOVN-GUEST: done 0\n")),
            Some(0)
        );
        assert_eq!(done_code("ZOVN-GUEST: done 127\n"), Some(127));
    }

    #[test]
    fn the_boot_request_round_trips_through_the_annotation() {
        let ann = BTreeMap::from([(
            VM_BOOT_ANNOTATION.to_string(),
            serde_json::to_string(&boot()).expect("json"),
        )]);
        assert_eq!(VmBoot::of_annotations(&ann), Some(boot()));
        assert_eq!(VmBoot::of_annotations(&BTreeMap::new()), None);
    }
}
