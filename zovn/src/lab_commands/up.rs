//! `zovn lab up`: the lab, then its object store, the node agents and the external
//! host's server. On a lab that is already running but whose object store, agents or
//! external server died, only those are started again (the store reloads its objects).

use std::path::{Path, PathBuf};

use anyhow::Context;
use lab::{ControllerMode, Dpdk, Encap, Lab, LabConfig};

use super::args::{EncapArg, ModeArg, UpArgs};

pub fn run(a: UpArgs) -> anyhow::Result<()> {
    let dir = absolute(a.dir.dir)?;
    let exe = std::env::current_exe().context("the zovn binary")?;
    if restart_apiserver(&dir, &exe)? {
        return Ok(());
    }
    let cfg = LabConfig {
        dir: dir.clone(),
        prefix: a.prefix,
        nodes: a.nodes,
        raft: a.raft,
        dpdk: Dpdk::from(a.dpdk),
        datapath: a.datapath.clone(),
        cluster_cidr: lab::parse_cluster_cidr(&a.cluster_cidr)?,
        encap: match a.encap {
            EncapArg::Geneve => Encap::Geneve,
            EncapArg::Vxlan => Encap::Vxlan,
        },
        gateway: a.gateway_mode.into(),
        mode: match a.mode {
            ModeArg::Standalone => ControllerMode::Standalone,
            ModeArg::External => ControllerMode::External,
        },
        external_ip_cidrs: api::services::ExternalIpPolicy::parse(&a.external_ip_cidrs)
            .context("--external-ip-cidrs")?
            .allowed()
            .to_vec(),
        platform_security_groups: a.platform_security_groups,
        pinger_interval_ms: a.pinger_interval_ms,
    };
    println!("lab up in {}", dir.display());
    let mut lab = Lab::up_with_progress(cfg, |s| {
        println!(
            "[{:6.2}s] {} ({} ms)",
            s.since_start.as_secs_f64(),
            s.what,
            s.took.as_millis()
        );
    })
    .with_context(|| format!("bringing the lab up in {}", dir.display()))?;
    // on failure `lab` is dropped without keep_running: everything is torn down
    let api = lab
        .start_apiserver(&exe)
        .with_context(|| format!("starting the object store of the lab in {}", dir.display()))?;
    start_agents(&mut lab)
        .with_context(|| format!("starting the node agents of the lab in {}", dir.display()))?;
    lab.start_external_server(&exe).with_context(|| {
        format!(
            "starting the external host's server of the lab in {}",
            dir.display()
        )
    })?;
    lab.keep_running();
    if lab.config().mode == ControllerMode::External {
        println!(
            "controller: external mode (no cluster router, join switch or egress rows; \
             Subnets use the platform's switches through externalLogicalSwitch)"
        );
    }
    println!("NB: {}", lab.nb_remote());
    println!("SB: {}", lab.sb_remote());
    for n in lab.nodes() {
        println!(
            "node{}: netns {} chassis {} encap-ip {} db {}",
            n.index, n.netns, n.system_id, n.encap_ip, n.db_remote
        );
    }
    print_apiserver(&dir, api.pid);
    if let Some(ext) = lab.external() {
        println!(
            "external: {} — `zovn lab exec --external -- CMD`",
            lab::external::describe(ext)
        );
    }
    println!(
        "total {:.2}s — `zovn lab down --dir {}` to remove",
        lab.timings().total.as_secs_f64(),
        dir.display()
    );
    Ok(())
}

/// Starts the node agents if the binary is built; otherwise says that pods will stay
/// without network.
fn start_agents(lab: &mut Lab) -> anyhow::Result<()> {
    let agent = match lab::agent::agent_exe() {
        Ok(a) => a,
        Err(e) => {
            println!(
                "node agent not built ({e:#}): pods will stay without network                  (`cargo build -p dataplane --bin {}`)",
                lab::agent::AGENT_BIN
            );
            return Ok(());
        }
    };
    let shim = match lab::agent::shim_exe() {
        Ok(s) => Some(s),
        Err(e) => {
            println!("warning: {e:#}: the agent gets no --cni-shim");
            None
        }
    };
    for a in lab.start_agents(&agent, shim.as_deref())? {
        println!(
            "{}: pid {} in netns {}, log {}",
            a.name,
            a.pid,
            a.netns.as_deref().unwrap_or("-"),
            a.log_file.display()
        );
    }
    Ok(())
}

/// If a lab is running in `dir` but its object store, a recorded node agent or the
/// external server died, starts them again and returns true.
fn restart_apiserver(dir: &Path, exe: &Path) -> anyhow::Result<bool> {
    if !dir.join("lab.json").exists() {
        return Ok(false);
    }
    let mut lab =
        Lab::open(dir).with_context(|| format!("reading the lab at {}", dir.display()))?;
    if !lab.manifest().is_running() {
        // stale state: cleaned by `up`
        return Ok(false);
    }
    // only agents that were started and died are started again (a lab brought up
    // without agents stays without them)
    let agents_dead = lab.agents().iter().any(|a| !a.is_alive());
    let external_dead = lab
        .manifest()
        .external_server()
        .is_some_and(|s| !s.is_alive());
    if lab.manifest().apiserver_alive() && !agents_dead && !external_dead {
        // a complete running lab: refused by `up`
        return Ok(false);
    }
    if !lab.manifest().apiserver_alive() {
        let api = lab.start_apiserver(exe).with_context(|| {
            format!(
                "restarting the object store of the lab in {}",
                dir.display()
            )
        })?;
        println!(
            "the lab in {} is already running; its object store was not: started it again",
            dir.display()
        );
        print_apiserver(dir, api.pid);
    }
    if agents_dead {
        start_agents(&mut lab).with_context(|| {
            format!("restarting the node agents of the lab in {}", dir.display())
        })?;
    }
    if external_dead {
        let rec = lab.start_external_server(exe).with_context(|| {
            format!(
                "restarting the external host's server of the lab in {}",
                dir.display()
            )
        })?;
        println!("external server started again: pid {}", rec.pid);
    }
    Ok(true)
}

fn print_apiserver(dir: &Path, pid: i32) {
    let layout = lab::state::Layout::new(dir);
    println!(
        "object store: pid {pid}, socket {}, log {} — `zovn lab apply -f examples/lab/`",
        layout.api_socket().display(),
        layout.api_log().display()
    );
}

pub fn absolute(p: PathBuf) -> anyhow::Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p);
    }
    Ok(std::env::current_dir()
        .context("current directory")?
        .join(p))
}

/// `zovn lab restart-vswitchd --node N`: the node agent's restart command in the lab.
pub fn restart_vswitchd(a: super::args::RestartVswitchdArgs) -> anyhow::Result<()> {
    let dir = absolute(a.dir.dir)?;
    let mut lab = Lab::open(&dir).with_context(|| format!("open the lab in {}", dir.display()))?;
    let rec = lab
        .restart_vswitchd_clean(a.node)
        .with_context(|| format!("restart ovs-vswitchd of node {}", a.node))?;
    println!("node{}: ovs-vswitchd restarted, pid {}", a.node, rec.pid);
    Ok(())
}
