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

/// One AF_XDP port open in ovs-vswitchd's log (wall-clock seconds since the epoch).
#[derive(Debug, Clone, PartialEq)]
pub struct PortOpen {
    pub port: String,
    /// `bridge br-int: deleted interface X` before it (a type switch), if any.
    pub deleted: Option<f64>,
    /// `X: Setting XDP mode to ...`.
    pub xdp: f64,
    /// `... assigned port 'X' rx queue ...` (the AF_XDP socket, umem and XDP program are
    /// set up between the two).
    pub rxq: Option<f64>,
    /// `bridge br-int: added interface X on port N` (after the PMD reload).
    pub added: Option<f64>,
}

impl PortOpen {
    /// XDP mode set → rx queue assigned (umem + socket + XDP program), ms.
    pub fn open_ms(&self) -> Option<f64> {
        self.rxq.map(|r| (r - self.xdp) * 1e3)
    }
    /// rx queue assigned → interface added (PMD reload), ms.
    pub fn reload_ms(&self) -> Option<f64> {
        Some((self.added? - self.rxq?) * 1e3)
    }
    /// The whole switch (deleted → added) or open (XDP mode set → added), ms.
    pub fn total_ms(&self) -> Option<f64> {
        Some((self.added? - self.deleted.unwrap_or(self.xdp)) * 1e3)
    }
}

/// The AF_XDP opens of `ports` in an ovs-vswitchd log (default file format:
/// `<RFC3339 ms>|<seq>|<module>|<level>|<message>`), in log order.
pub fn parse_opens(log: &str, ports: &[String]) -> Vec<PortOpen> {
    let mut out: Vec<PortOpen> = Vec::new();
    let mut deleted: std::collections::HashMap<&str, f64> = Default::default();
    for line in log.lines() {
        let mut f = line.splitn(5, '|');
        let (Some(ts), Some(_), Some(_), Some(_), Some(msg)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some(t) = crate::phase_log::parse_rfc3339(ts) else {
            continue;
        };
        let find = |prefix: &str, suffix: &str| -> Option<&String> {
            let rest = msg.strip_prefix(prefix)?;
            ports.iter().find(|p| {
                rest.strip_prefix(p.as_str())
                    .is_some_and(|r| r.starts_with(suffix))
            })
        };
        if let Some(p) = find("bridge br-int: deleted interface ", "") {
            deleted.insert(p.as_str(), t);
        } else if let Some(p) = ports
            .iter()
            .find(|p| msg.starts_with(&format!("{p}: Setting XDP mode to ")))
        {
            out.push(PortOpen {
                port: p.clone(),
                deleted: deleted.remove(p.as_str()),
                xdp: t,
                rxq: None,
                added: None,
            });
        } else if let Some(p) = msg
            .split_once("assigned port '")
            .and_then(|(_, r)| r.split_once('\''))
            .map(|(name, _)| name)
        {
            if let Some(o) = out.iter_mut().rev().find(|o| o.port == p) {
                o.rxq.get_or_insert(t);
            }
        } else if let Some(p) = find("bridge br-int: added interface ", " on port")
            && let Some(o) = out.iter_mut().rev().find(|o| &o.port == p)
        {
            o.added.get_or_insert(t);
        }
    }
    out
}

/// p50/max of the opens' phases, one line: `n opens; open (XDP mode -> rxq) p50/max ms;
/// PMD reload (rxq -> added) ...; switch or open in all ...; first XDP -> last added s`.
pub fn opens_line(opens: &[PortOpen]) -> String {
    use crate::phase_log::percentile;
    let pm = |v: Vec<f64>| {
        if v.is_empty() {
            "-".to_string()
        } else {
            format!("{:.0}/{:.0}", percentile(&v, 0.5), percentile(&v, 1.0))
        }
    };
    let span = match (
        opens
            .iter()
            .map(|o| o.deleted.unwrap_or(o.xdp))
            .reduce(f64::min),
        opens.iter().filter_map(|o| o.added).reduce(f64::max),
    ) {
        (Some(a), Some(b)) => format!("{:.2} s", b - a),
        _ => "-".into(),
    };
    format!(
        "{} AF_XDP opens in ovs-vswitchd's log, p50/max ms: open (XDP mode set -> rxq assigned) \
         {}, PMD reload (rxq -> interface added) {}, whole switch/open {}; first to last {span}",
        opens.len(),
        pm(opens.iter().filter_map(PortOpen::open_ms).collect()),
        pm(opens.iter().filter_map(PortOpen::reload_ms).collect()),
        pm(opens.iter().filter_map(PortOpen::total_ms).collect()),
    )
}

#[cfg(test)]
mod log_tests {
    use super::*;

    const LOG: &str = "2026-11-27T05:00:00.000Z|00040|bridge|INFO|bridge br-int: added interface aa_h on port 7
2026-11-27T05:00:01.000Z|00041|bridge|INFO|bridge br-int: deleted interface aa_h on port 7
2026-11-27T05:00:01.010Z|00042|netdev_afxdp|INFO|aa_h: Setting XDP mode to native.
2026-11-27T05:00:01.150Z|00043|dpif_netdev|INFO|Core 1 on numa node 0 assigned port 'aa_h' rx queue 0 (measured processing cycles 0).
2026-11-27T05:00:01.200Z|00044|bridge|INFO|bridge br-int: added interface aa_h on port 7
2026-11-27T05:00:01.300Z|00045|netdev_afxdp|INFO|bb_h: Setting XDP mode to native.
2026-11-27T05:00:01.300Z|00046|netdev_afxdp|INFO|other_h: Setting XDP mode to native.
";

    #[test]
    fn splits_a_switch_into_open_and_reload() {
        let o = parse_opens(LOG, &["aa_h".into(), "bb_h".into()]);
        assert_eq!(o.len(), 2, "{o:?}");
        let a = &o[0];
        assert!((a.open_ms().expect("rxq") - 140.0).abs() < 1e-3);
        assert!((a.reload_ms().expect("added") - 50.0).abs() < 1e-3);
        assert!((a.total_ms().expect("whole") - 200.0).abs() < 1e-3);
        assert_eq!((o[1].rxq, o[1].added), (None, None), "bb_h unfinished");
        let line = opens_line(&o);
        assert!(line.starts_with("2 AF_XDP opens"), "{line}");
        assert!(
            line.contains("open (XDP mode set -> rxq assigned) 140/140"),
            "{line}"
        );
    }
}
