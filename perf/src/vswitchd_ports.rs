//! Which ports ovs-vswitchd has really opened as AF_XDP, from `ovs-appctl dpctl/show`
//! (`port 5: name (afxdp: n_rxq=1, ..., xdp-mode-in-use=native)`).
//!
//! The agent's `pod port moved to AF_XDP` line is written once the type switch is in the
//! OVS database and the port keeps its ofport, which can be before ovs-vswitchd has
//! reopened the port (XDP program, umem, PMD reconfiguration); the datapath's own port
//! list says when that is done.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The names of the ports `dpctl/show` lists as open AF_XDP ports.
pub fn parse_afxdp_ports(dpctl_show: &str) -> Vec<String> {
    dpctl_show
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("port ")?;
            let (_, rest) = rest.split_once(": ")?;
            let (name, kind) = rest.split_once(" (")?;
            (kind.starts_with("afxdp:") && kind.contains("xdp-mode-in-use="))
                .then(|| name.trim().to_string())
        })
        .collect()
}

/// The open AF_XDP ports of the ovs-vswitchd behind control socket `ctl` in netns `netns`.
pub fn afxdp_ports(netns: &str, ctl: &Path) -> Result<Vec<String>> {
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "ovs-appctl", "-t"])
        .arg(ctl)
        .arg("dpctl/show")
        .stdin(Stdio::null())
        .output()
        .context("ovs-appctl dpctl/show")?;
    if !out.status.success() {
        bail!(
            "ovs-appctl dpctl/show: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(parse_afxdp_ports(&String::from_utf8_lossy(&out.stdout)))
}

/// Polls `nodes` ((netns, ctl) each) every 100 ms until every port of `ports` is an open
/// AF_XDP port on one of them; returns when (wall clock, seconds since the epoch).
pub fn wait_open(
    nodes: &[(String, std::path::PathBuf)],
    ports: &[String],
    timeout: Duration,
) -> Result<f64> {
    let t0 = Instant::now();
    loop {
        let mut open = Vec::new();
        for (ns, ctl) in nodes {
            open.extend(afxdp_ports(ns, ctl)?);
        }
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let missing = ports.iter().filter(|p| !open.contains(p)).count();
        if missing == 0 {
            return Ok(at);
        }
        if t0.elapsed() > timeout {
            bail!(
                "{missing} of {} ports not open as AF_XDP in ovs-vswitchd after {timeout:?}",
                ports.len()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_open_afxdp_ports_count() {
        let show = "netdev@ovs-netdev:
  lookups: hit:15 missed:14 lost:0
  port 0: ovs-netdev (tap)
  port 2: wpxu1
  port 4: ovn-k8s-mp0 (tap)
  port 5: 3f4277e253b_h (afxdp: n_rxq=1, use-need-wakeup=true, xdp-mode=native, xdp-mode-in-use=native)
  port 6: 0123456789a_h (afxdp: n_rxq=1, xdp-mode=native)
";
        assert_eq!(parse_afxdp_ports(show), ["3f4277e253b_h"]);
        assert!(parse_afxdp_ports("").is_empty());
    }
}
