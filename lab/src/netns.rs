//! Network namespaces, veths, bridges and addresses, via `ip` (fine in the lab).

use std::path::Path;

use crate::error::{LabError, Result};
use crate::names::check_ifname;
use crate::process::{cmd, run, run_args};

/// True if `/run/netns/<name>` exists.
pub fn exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// All named network namespaces.
pub fn list() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `ip netns add NAME` and bring `lo` up.
pub fn add(name: &str) -> Result<()> {
    check_ifname(name)?;
    run_args("ip", ["netns", "add", name])?;
    link_up(name, "lo")
}

/// `ip netns del NAME` if it exists.
pub fn delete(name: &str) -> Result<()> {
    if exists(name) {
        run_args("ip", ["netns", "del", name])?;
    }
    Ok(())
}

/// A veth pair `a` (in netns `a_ns`) ⇄ `b` (in netns `b_ns`), created directly inside the
/// namespaces so the names never appear in the root namespace.
pub fn add_veth(a: &str, a_ns: &str, b: &str, b_ns: &str) -> Result<()> {
    check_ifname(a)?;
    check_ifname(b)?;
    run_args(
        "ip",
        [
            "link", "add", a, "netns", a_ns, "type", "veth", "peer", "name", b, "netns", b_ns,
        ],
    )
    .map(drop)
}

/// A Linux bridge in `ns`, brought up.
pub fn add_bridge(ns: &str, name: &str) -> Result<()> {
    check_ifname(name)?;
    ip_n(ns, &["link", "add", name, "type", "bridge"])?;
    link_up(ns, name)
}

/// Enslaves `dev` to bridge `master` and brings it up.
pub fn set_master_up(ns: &str, dev: &str, master: &str) -> Result<()> {
    ip_n(ns, &["link", "set", dev, "master", master, "up"]).map(drop)
}

/// Receive steering (RPS) of every receive queue of `dev` in `ns` to the CPUs of `mask`
/// (hex), through the namespace's own sysfs.
pub fn steer_rx(ns: &str, dev: &str, mask: &str) -> Result<()> {
    check_ifname(dev)?;
    if mask.is_empty() || !mask.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(LabError::Invalid(format!("RPS mask {mask:?} is not hex")));
    }
    // the names are the script's arguments, never part of its text
    let script = r#"for q in /sys/class/net/"$1"/queues/rx-*/rps_cpus; do echo "$2" > "$q"; done"#;
    exec(ns, &["sh", "-c", script, "sh", dev, mask]).map(drop)
}

/// `ip -n NS link set DEV up`.
pub fn link_up(ns: &str, dev: &str) -> Result<()> {
    ip_n(ns, &["link", "set", dev, "up"]).map(drop)
}

/// Sets MAC address and MTU of `dev`, and brings it up.
pub fn set_mac_mtu_up(ns: &str, dev: &str, mac: &str, mtu: u32) -> Result<()> {
    ip_n(
        ns,
        &[
            "link",
            "set",
            dev,
            "address",
            mac,
            "mtu",
            &mtu.to_string(),
            "up",
        ],
    )
    .map(drop)
}

/// `ip -n NS addr add CIDR dev DEV`.
pub fn addr_add(ns: &str, dev: &str, cidr: &str) -> Result<()> {
    ip_n(ns, &["addr", "add", cidr, "dev", dev]).map(drop)
}

/// `ip -n NS addr add CIDR dev DEV nodad` (IPv6: usable at once, no duplicate detection).
pub fn addr_add_nodad(ns: &str, dev: &str, cidr: &str) -> Result<()> {
    ip_n(ns, &["addr", "add", cidr, "dev", dev, "nodad"]).map(drop)
}

/// `ip -n NS route add DEST via GW` (`DEST` may be `default`; `-6` when `GW` is IPv6).
pub fn route_add(ns: &str, dest: &str, gw: &str) -> Result<()> {
    let family = if gw.contains(':') { "-6" } else { "-4" };
    ip_n(ns, &[family, "route", "add", dest, "via", gw]).map(drop)
}

/// The MAC address of `dev` in `ns`.
pub fn link_mac(ns: &str, dev: &str) -> Result<String> {
    let out = ip_n(ns, &["-br", "link", "show", "dev", dev])?;
    Ok(parse_brief_mac(&out).unwrap_or_default())
}

/// Parses `ip -br link show` output: `NAME STATE MAC <FLAGS>`.
pub fn parse_brief_mac(out: &str) -> Option<String> {
    out.split_whitespace()
        .nth(2)
        .filter(|m| m.len() == 17 && m.matches(':').count() == 5)
        .map(str::to_string)
}

/// Runs `args` inside `ns` (`ip netns exec`), returning stdout.
pub fn exec(ns: &str, args: &[&str]) -> Result<String> {
    let mut c = cmd("ip", ["netns", "exec", ns]);
    c.args(args);
    run(&mut c)
}

/// Runs `f` on a thread of its own inside `ns` (the caller's threads stay where they
/// are): sockets it opens belong to `ns`.
pub fn run_in<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T> {
    use std::os::fd::AsFd;
    let path = Path::new("/run/netns").join(ns);
    let file = std::fs::File::open(&path).map_err(|e| LabError::io("open", &path, e))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
                LabError::io("setns", &path, std::io::Error::from_raw_os_error(e as i32))
            })?;
            Ok(f())
        })
        .join()
        .map_err(|_| LabError::Invalid(format!("a thread in netns {ns} panicked")))?
    })
}

fn ip_n(ns: &str, args: &[&str]) -> Result<String> {
    let mut c = cmd("ip", ["-n", ns]);
    c.args(args);
    run(&mut c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mac_from_brief_output() {
        let out =
            "labu1@if2        UP             4a:5b:6c:7d:8e:9f <BROADCAST,MULTICAST,UP,LOWER_UP>\n";
        assert_eq!(parse_brief_mac(out).as_deref(), Some("4a:5b:6c:7d:8e:9f"));
        assert_eq!(parse_brief_mac("lo UNKNOWN"), None);
    }
}
