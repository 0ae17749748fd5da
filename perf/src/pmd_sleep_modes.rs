//! `zovn-perf datapath --pmd-sleep-modes 0,50,auto`: the AF_XDP pods measured under each
//! `pmdMaxSleep` in the same run, with what an idle node costs under each.
//!
//! For each mode, every round: the node's override annotation
//! (`network.zstack.io/datapath-config: {"pmdMaxSleep": …}`) is set, the agent's pass
//! must have written `pmd-maxsleep` (absent for 0), the pods stay quiet for
//! [`SETTLE`] (the adaptive tuner's quiet period, so it is back to sleeping), then the
//! CPU time of ovs-vswitchd and of the node agent is read from `/proc/<pid>/stat` over
//! the idle window, and the AF_XDP pair runs iperf3 and qperf as the other paths do.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use lab::apiserver::ApiClient;
use lab::apiserver::protocol::{Request, Response};
use serde_json::json;

/// Quiet time before the idle window (the tuner's `QUIET_FOR` is 3 s).
pub const SETTLE: Duration = Duration::from_secs(5);

/// What an idle node cost under one mode.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdleCost {
    /// % of one core used by ovs-vswitchd (all its threads, the PMD among them).
    pub vswitchd_pct: f64,
    /// % of one core used by the node agent (the tuner's reads among it).
    pub agent_pct: f64,
}

/// `utime + stime` of `pid` in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    // fields after the command (which may hold spaces) start after the last ')'
    let rest = s
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("/proc/{pid}/stat: no command field"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state): utime is field 14, stime 15
    let num = |i: usize| -> Result<u64> {
        f.get(i - 3)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("/proc/{pid}/stat: field {i} missing"))
    };
    Ok(num(14)? + num(15)?)
}

/// The pid in a pidfile.
pub fn pid_of(pidfile: &Path) -> Result<u32> {
    std::fs::read_to_string(pidfile)
        .with_context(|| format!("read {}", pidfile.display()))?
        .trim()
        .parse()
        .with_context(|| format!("{}: not a pid", pidfile.display()))
}

/// CPU use of `vswitchd` and `agent` over `window`, as % of one core.
pub fn idle_cost(vswitchd: u32, agent: u32, window: Duration) -> Result<IdleCost> {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let (v0, a0, t0) = (cpu_ticks(vswitchd)?, cpu_ticks(agent)?, Instant::now());
    std::thread::sleep(window);
    let (v1, a1) = (cpu_ticks(vswitchd)?, cpu_ticks(agent)?);
    let secs = t0.elapsed().as_secs_f64();
    let pct = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / hz / secs * 100.0;
    Ok(IdleCost {
        vswitchd_pct: pct(v0, v1),
        agent_pct: pct(a0, a1),
    })
}

/// The `pmd-maxsleep` a mode starts with (`None`: absent).
pub fn expected_value(mode: &str) -> Result<Option<String>> {
    Ok(match mode {
        "0" => None,
        "auto" => Some(dataplane::datapath::pmd_sleep::IDLE_SLEEP_US.to_string()),
        n => Some(
            n.parse::<u32>()
                .map_err(|_| anyhow!("pmd sleep mode {n:?} is neither a number nor auto"))?
                .to_string(),
        ),
    })
}

/// Sets the node's `pmdMaxSleep` override to `mode` and waits until `pmd-maxsleep` in
/// the node's Open_vSwitch row is what the mode starts with (for `auto`: back to idle).
pub fn set_mode(lab_dir: &Path, node: &str, db: &str, mode: &str) -> Result<()> {
    let value = match mode {
        "auto" => json!("auto"),
        n => json!(
            n.parse::<u32>()
                .map_err(|_| anyhow!("pmd sleep mode {n:?} is neither a number nor auto"))?
        ),
    };
    let cfg = json!({ "pmdMaxSleep": value });
    override_and_wait(lab_dir, node, db, &cfg, expected_value(mode)?)
}

/// Writes the node's datapath override `cfg` and waits until `pmd-maxsleep` is `want`.
pub fn override_and_wait(
    lab_dir: &Path,
    node: &str,
    db: &str,
    cfg: &serde_json::Value,
    want: Option<String>,
) -> Result<()> {
    let r = ApiClient::connect(lab_dir)?.request(
        &Request::AnnotateNode {
            name: node.to_string(),
            annotations: BTreeMap::from([(
                api::keys::DATAPATH_CONFIG.to_string(),
                cfg.to_string(),
            )]),
        },
        Duration::from_secs(10),
    )?;
    if !matches!(r, Response::Applied { .. }) {
        bail!("annotate node {node}: {r:?}");
    }
    let t0 = Instant::now();
    loop {
        let have = crate::host::other_config(db)?.get("pmd-maxsleep").cloned();
        if have == want {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("override {cfg}: pmd-maxsleep is {have:?} after 60 s, want {want:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_their_starting_values() {
        assert_eq!(expected_value("0").unwrap(), None);
        assert_eq!(expected_value("50").unwrap().as_deref(), Some("50"));
        assert_eq!(
            expected_value("auto").unwrap(),
            Some(dataplane::datapath::pmd_sleep::IDLE_SLEEP_US.to_string())
        );
        assert!(expected_value("fast").is_err());
    }

    #[test]
    fn own_cpu_ticks_are_read() {
        let pid = std::process::id();
        let a = cpu_ticks(pid).unwrap();
        // burn a little CPU: the counter must not go back
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(cpu_ticks(pid).unwrap() >= a);
    }
}
