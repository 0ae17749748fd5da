//! A bare ovsdb-server + ovs-vswitchd (no OVN: nothing else changes its flows) in a
//! network namespace, with a `fail_mode=secure` netdev bridge joining two host
//! namespaces: for the tests and benchmarks that drive OpenFlow rules and datapath flows
//! themselves (the megaflow guard's). The daemons are [`OvsDaemons`]; everything started
//! is stopped by pidfile and the namespaces deleted on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{LabError, Result};
use crate::ovs_daemons::OvsDaemons;
use crate::process::{cmd, run, run_args};

/// The bare OVS and its two hosts: `<prefix>a` (10.97.0.1/24, OpenFlow port 1) and
/// `<prefix>b` (10.97.0.2/24, OpenFlow port 2) on bridge `<prefix>br`; `a` has a static
/// neighbour entry for `b`.
#[derive(Debug)]
pub struct BareOvs {
    /// The daemons' files (database, sockets, pidfiles, logs).
    pub dir: PathBuf,
    /// Host a's namespace.
    pub na: String,
    /// Host b's namespace.
    pub nb: String,
    /// b's port in datapath port numbers (what a datapath flow's output names).
    pub b_dp_port: String,
    /// The bridge's OpenFlow management socket (`unix:<dir>/<bridge>.mgmt`).
    pub of: String,
    /// None only while starting (before the namespace exists).
    daemons: Option<OvsDaemons>,
    netns: Vec<String>,
}

/// Host b's address.
pub const HOST_B: &str = "10.97.0.2";

impl BareOvs {
    /// Starts the daemons in namespace `<prefix>sw` with their files under `dir`, and the
    /// bridge with its two hosts.
    pub fn start(dir: &Path, prefix: &str) -> Result<BareOvs> {
        std::fs::create_dir_all(dir).map_err(|e| LabError::io("create", dir, e))?;
        let sw = format!("{prefix}sw");
        run_args("ip", ["netns", "add", &sw])?;
        let mut ovs = BareOvs {
            dir: dir.to_path_buf(),
            na: format!("{prefix}a"),
            nb: format!("{prefix}b"),
            b_dp_port: String::new(),
            of: String::new(),
            daemons: None,
            netns: vec![sw.clone()],
        };
        ovs.daemons = Some(OvsDaemons::start(dir, &sw)?);
        for (ns, host, ip) in [
            (ovs.na.clone(), format!("{prefix}ha"), "10.97.0.1/24"),
            (ovs.nb.clone(), format!("{prefix}hb"), "10.97.0.2/24"),
        ] {
            run_args("ip", ["netns", "add", &ns])?;
            ovs.netns.push(ns.clone());
            run_args(
                "ip",
                [
                    "-n", &sw, "link", "add", &host, "type", "veth", "peer", "name", "eth0",
                    "netns", &ns,
                ],
            )?;
            run_args("ip", ["-n", &ns, "addr", "add", ip, "dev", "eth0"])?;
            run_args("ip", ["-n", &ns, "link", "set", "eth0", "up"])?;
            run_args("ip", ["-n", &sw, "link", "set", &host, "up"])?;
            // the AF_PACKET port hands packets on as they are: no partial checksums
            run_args(
                "ip",
                ["netns", "exec", &ns, "ethtool", "-K", "eth0", "tx", "off"],
            )?;
        }
        let link = run_args("ip", ["-n", &ovs.nb, "-br", "link", "show", "eth0"])?;
        let mac_b = link
            .split_whitespace()
            .nth(2)
            .ok_or_else(|| LabError::Invalid(format!("no MAC in `{link}`")))?
            .to_string();
        run_args(
            "ip",
            [
                "-n", &ovs.na, "neigh", "add", HOST_B, "lladdr", &mac_b, "dev", "eth0",
            ],
        )?;
        let br = format!("{prefix}br");
        let (ha, hb) = (format!("{prefix}ha"), format!("{prefix}hb"));
        run_args(
            "ovs-vsctl",
            [
                &ovs.db(),
                "add-br",
                &br,
                "--",
                "set",
                "bridge",
                &br,
                "datapath_type=netdev",
                "fail_mode=secure",
                "external_ids:zstack.io/owner=zstack-ovn-test",
                "--",
                "add-port",
                &br,
                &ha,
                "--",
                "set",
                "interface",
                &ha,
                "ofport_request=1",
                "--",
                "add-port",
                &br,
                &hb,
                "--",
                "set",
                "interface",
                &hb,
                "ofport_request=2",
            ],
        )?;
        // b's port in datapath numbers (`port 3: <name>` in `dpctl/show`)
        let show = ovs.appctl(&["dpctl/show"])?;
        ovs.b_dp_port = show
            .lines()
            .find_map(|l| {
                let (n, name) = l.trim().strip_prefix("port ")?.split_once(": ")?;
                (name.split_whitespace().next()? == hb).then(|| n.to_string())
            })
            .ok_or_else(|| LabError::Invalid(format!("{hb} not in dpctl/show: {show}")))?;
        ovs.of = format!("unix:{}", dir.join(format!("{br}.mgmt")).display());
        Ok(ovs)
    }

    /// `--db=unix:<dir>/db.sock`, for `ovs-vsctl`.
    pub fn db(&self) -> String {
        format!("--db=unix:{}", self.dir.join("db.sock").display())
    }

    /// ovs-vswitchd's unixctl socket.
    pub fn ctl(&self) -> PathBuf {
        self.dir.join("ovs-vswitchd.ctl")
    }

    /// `ovs-appctl -t <ctl> <args>`: its stdout.
    pub fn appctl(&self, args: &[&str]) -> Result<String> {
        let ctl = self.ctl();
        run(cmd("ovs-appctl", ["-t".as_ref(), ctl.as_os_str()]).args(args))
    }

    /// Replaces the bridge's OpenFlow rules with `rules` (one per line, `ovs-ofctl
    /// add-flow` syntax), written to `<dir>/<name>`.
    pub fn rules(&self, name: &str, rules: &str) -> Result<()> {
        let f = self.dir.join(name);
        std::fs::write(&f, rules).map_err(|e| LabError::io("write", &f, e))?;
        run(cmd("ovs-ofctl", ["-O", "OpenFlow13", "replace-flows", &self.of]).arg(&f))?;
        Ok(())
    }
}

impl Drop for BareOvs {
    fn drop(&mut self) {
        // the daemons first, then the namespaces they ran in
        drop(self.daemons.take());
        for n in &self.netns {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Sends `n` one-byte UDP datagrams from namespace `from_ns` to host b ([`HOST_B`]) at each
/// of `ports`, `gap` apart.
pub fn send_udp(
    from_ns: &str,
    ports: impl IntoIterator<Item = u16> + Send,
    n: usize,
    gap: std::time::Duration,
) -> Result<()> {
    crate::netns::run_in(from_ns, || -> std::io::Result<()> {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        for port in ports {
            for _ in 0..n {
                s.send_to(b"x", (HOST_B, port))?;
                if !gap.is_zero() {
                    std::thread::sleep(gap);
                }
            }
        }
        Ok(())
    })?
    .map_err(|e| LabError::io("send udp from", from_ns, e))
}
