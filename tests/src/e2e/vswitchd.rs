//! ovs-vswitchd on a `zovn cluster` node restarted the two ways a node meets (issue 29),
//! for the suites that measure pod traffic around them (`cluster_e2e`'s `restart-ovs`,
//! `cluster_ha`'s `restart-ovs-kernel`):
//!
//! - [`restart_in_place`]: the agent's restart command (`vswitchd-restart.sh`: the tables
//!   saved, ovs-vswitchd exits and its container's script starts it again), the container
//!   kept;
//! - [`restart_container`]: the ovs-vswitchd container's process sent SIGTERM (as the
//!   runtime stops it), kubelet starting the container again in the same pod.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lab::kubecluster::KubeCluster;

use super::{kubectl, wait_until};

fn is_vswitchd_script(pid: i32) -> bool {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmd).contains("node-vswitchd.sh")
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // after the command name (in parentheses): state, then the parent's pid
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The host pid of node `i`'s `node-vswitchd.sh` (the ovs-vswitchd container's process).
pub fn script_pid(c: &KubeCluster, i: usize) -> Result<i32> {
    let netns = c.node_exec(i, &["readlink", "/proc/self/ns/net"])?;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let net = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
        // the script itself, not one of its subshells (`$(...)`, `&`: the same command
        // line, a node-vswitchd.sh parent)
        if is_vswitchd_script(pid)
            && net.is_some_and(|n| n.to_string_lossy() == netns.trim())
            && !parent_of(pid).is_some_and(is_vswitchd_script)
        {
            return Ok(pid);
        }
    }
    bail!("no node-vswitchd.sh process in node{i}'s network namespace")
}

/// Seconds since boot (`/proc/uptime`, the clock of a process's start time).
fn uptime_secs() -> Result<f64> {
    let s = std::fs::read_to_string("/proc/uptime")?;
    s.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .context("/proc/uptime")
}

/// When process `pid` started, in seconds since boot (`/proc/<pid>/stat` field 22).
fn started_at_secs(pid: i32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // the fields after the command name (in parentheses, may hold spaces)
    let rest = stat.rsplit_once(')').context("stat")?.1;
    let ticks: f64 = rest
        .split_whitespace()
        .nth(19)
        .and_then(|v| v.parse().ok())
        .context("stat starttime")?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)?.unwrap_or(100) as f64;
    Ok(ticks / hz)
}

/// ovs-vswitchd's pid on node `i` (its pid file in the host's /var/run/openvswitch).
pub fn pid(c: &KubeCluster, i: usize) -> Result<String> {
    Ok(
        c.node_exec(i, &["cat", "/var/run/openvswitch/ovs-vswitchd.pid"])?
            .trim()
            .to_string(),
    )
}

/// Restarts node `i`'s ovs-vswitchd in place through `ovs_pod`'s (in namespace `ns`)
/// `vswitchd-restart.sh`; the seconds until the new process exists. Fails when the
/// container restarted instead.
pub async fn restart_in_place(
    c: &KubeCluster,
    kc: &Path,
    ns: &str,
    ovs_pod: &str,
    i: usize,
) -> Result<f64> {
    let old_vs = pid(c, i)?;
    let script = script_pid(c, i)?;
    let t = Instant::now();
    kubectl(
        kc,
        &[
            "exec",
            "-n",
            ns,
            ovs_pod,
            "-c",
            "ovs-vswitchd",
            "--",
            "/bin/bash",
            "/zovn/scripts/vswitchd-restart.sh",
        ],
    )?;
    wait_until(
        &format!("ovs-vswitchd on node{i} started again in place"),
        Duration::from_secs(60),
        || async { Ok(pid(c, i).ok().filter(|p| *p != old_vs).map(|_| ())) },
    )
    .await?;
    let back_secs = t.elapsed().as_secs_f64();
    if script_pid(c, i)? != script {
        bail!("node{i}: the ovs-vswitchd container restarted instead of its process");
    }
    Ok(back_secs)
}

/// What [`restart_container`] measured.
pub struct ContainerRestart {
    /// From the SIGTERM to the new container's first process: kubelet's share.
    pub kubelet_secs: f64,
    /// From the SIGTERM until the new ovs-vswitchd answers.
    pub back_secs: f64,
}

/// Sends SIGTERM to node `i`'s ovs-vswitchd container process and waits until kubelet has
/// started the container again and ovs-vswitchd answers.
pub async fn restart_container(c: &KubeCluster, i: usize) -> Result<ContainerRestart> {
    let old = script_pid(c, i)?;
    let t = Instant::now();
    let killed_at = uptime_secs()?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    wait_until(
        &format!("ovs-vswitchd on node{i} restarted by kubelet"),
        Duration::from_secs(60),
        || async {
            let new = script_pid(c, i).ok().filter(|p| *p != old);
            let up = c
                .node_exec(
                    i,
                    &[
                        "ovs-appctl",
                        "-t",
                        "/var/run/openvswitch/ovs-vswitchd.ctl",
                        "version",
                    ],
                )
                .is_ok();
            Ok((new.is_some() && up).then_some(()))
        },
    )
    .await?;
    let back_secs = t.elapsed().as_secs_f64();
    let kubelet_secs = started_at_secs(script_pid(c, i)?)? - killed_at;
    Ok(ContainerRestart {
        kubelet_secs,
        back_secs,
    })
}
