//! [`Central`]: the OVN central daemons — NB and SB ovsdb-servers (standalone, or a
//! 3-member Raft cluster each) and ovn-northd — on unix sockets in a private directory
//! (`<dir>/{run,db,log}`), optionally also listening on TCP 127.0.0.1, and on SSL
//! 127.0.0.1 with [`Central::start_with_ssl`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::ctl;
use crate::error::{LabError, Result};
use crate::process::{DaemonRecord, DaemonSpec, signal_daemon, start_daemon, stop_daemon};
use crate::wait::wait_for;
use diag::raft_status::{ClusterStatus, parse_cluster_status};

/// OVN NB schema shipped by Debian's ovn-common.
pub const NB_SCHEMA: &str = "/usr/share/ovn/ovn-nb.ovsschema";
/// OVN SB schema shipped by Debian's ovn-common.
pub const SB_SCHEMA: &str = "/usr/share/ovn/ovn-sb.ovsschema";
/// Members of a Raft cluster started with `raft: true`.
pub const RAFT_MEMBERS: usize = 3;
/// Longest path a unix socket address may have (sun_path minus NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// How to start [`Central`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CentralConfig {
    /// Private directory; `run/`, `db/` and `log/` are created inside.
    pub dir: PathBuf,
    /// Three-member Raft clusters for NB and SB instead of standalone servers.
    pub raft: bool,
    /// Start ovn-northd.
    pub northd: bool,
    /// Also listen on `ptcp:<random port>:127.0.0.1` (see [`Member::tcp_remote`]).
    pub tcp: bool,
}

/// Key, certificate and CA certificate (PEM files) for `pssl:` listeners, passed to
/// ovsdb-server as `--private-key`, `--certificate` and `--ca-cert`. ovsdb-server requires
/// clients to present a certificate signed by `ca`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SslFiles {
    pub key: PathBuf,
    pub cert: PathBuf,
    pub ca: PathBuf,
}

/// Which OVN database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Db {
    Nb,
    Sb,
}

impl Db {
    /// The schema (database) name.
    pub fn name(self) -> &'static str {
        match self {
            Db::Nb => "OVN_Northbound",
            Db::Sb => "OVN_Southbound",
        }
    }
    fn schema(self) -> &'static str {
        match self {
            Db::Nb => NB_SCHEMA,
            Db::Sb => SB_SCHEMA,
        }
    }
    fn stem(self) -> &'static str {
        match self {
            Db::Nb => "ovnnb_db",
            Db::Sb => "ovnsb_db",
        }
    }
    fn global_table(self) -> &'static str {
        match self {
            Db::Nb => "NB_Global",
            Db::Sb => "SB_Global",
        }
    }
}

/// One ovsdb-server serving NB or SB (a Raft member, or the single standalone server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub db: Db,
    /// 0-based index in [`Central::nb_members`] / [`Central::sb_members`].
    pub index: usize,
    /// Client remote, `unix:<dir>/run/<stem>.sock`.
    pub remote: String,
    /// `tcp:127.0.0.1:<port>` when started with `tcp: true` (same port after a restart).
    pub tcp_remote: Option<String>,
    /// `ssl:127.0.0.1:<port>` when started with [`Central::start_with_ssl`] (same port after
    /// a restart).
    #[serde(default)]
    pub ssl_remote: Option<String>,
    /// Raft address `unix:<dir>/run/<stem>.raft` (Raft only).
    pub raft_remote: Option<String>,
    /// Current pid (last pid after [`Central::kill_member`]).
    pub pid: i32,
    /// `ovs-appctl -t` target.
    pub unixctl: PathBuf,
    pub db_file: PathBuf,
    /// The daemon as recorded for stopping (pidfile, log file, program).
    pub daemon: DaemonRecord,
}

impl Member {
    /// True while this member's ovsdb-server runs.
    pub fn is_alive(&self) -> bool {
        self.daemon.is_alive()
    }

    /// `ovs-appctl cluster/status` of this member (Raft only).
    pub fn cluster_status(&self) -> Result<ClusterStatus> {
        let out = ctl::appctl(&self.unixctl, &["cluster/status", self.db.name()])?;
        Ok(parse_cluster_status(&out))
    }
}

/// Everything needed to re-attach to running central daemons (stored in the lab manifest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CentralState {
    pub config: CentralConfig,
    pub nb: Vec<Member>,
    pub sb: Vec<Member>,
    pub northd: Option<DaemonRecord>,
    /// SSL files when started with [`Central::start_with_ssl`].
    #[serde(default)]
    pub ssl: Option<SslFiles>,
}

/// Running OVN central daemons. Stopped by [`Central::stop`], or best effort on drop unless
/// [`Central::keep_running`] was called (or it was [`Central::attach`]ed).
#[derive(Debug)]
pub struct Central {
    state: CentralState,
    stop_on_drop: bool,
}

/// Paths of one member, derived from the config.
struct MemberPaths {
    db_file: PathBuf,
    sock: PathBuf,
    raft: PathBuf,
    ctl: PathBuf,
    pidfile: PathBuf,
    log: PathBuf,
}

fn member_paths(dir: &Path, db: Db, index: usize, raft: bool) -> MemberPaths {
    let stem = if raft {
        format!("{}{}", db.stem(), index + 1)
    } else {
        db.stem().to_string()
    };
    MemberPaths {
        db_file: dir.join("db").join(format!("{stem}.db")),
        sock: dir.join("run").join(format!("{stem}.sock")),
        raft: dir.join("run").join(format!("{stem}.raft")),
        ctl: dir.join("run").join(format!("{stem}.ctl")),
        pidfile: dir.join("run").join(format!("{stem}.pid")),
        log: dir.join("log").join(format!("ovsdb-server-{stem}.log")),
    }
}

impl Central {
    /// Creates the databases, starts the servers (and northd), and returns once every
    /// member answers (`ovsdb-client wait ... connected`, so Raft members have joined) and
    /// the NB is initialised.
    pub fn start(cfg: CentralConfig) -> Result<Central> {
        Central::launch(cfg, None)
    }

    /// [`Central::start`], and every server also listens on `pssl:<random port>:127.0.0.1`
    /// with these files (see [`Member::ssl_remote`]). The server certificate should be
    /// valid for `127.0.0.1`.
    pub fn start_with_ssl(cfg: CentralConfig, ssl: SslFiles) -> Result<Central> {
        Central::launch(cfg, Some(ssl))
    }

    fn launch(cfg: CentralConfig, ssl: Option<SslFiles>) -> Result<Central> {
        let t = Instant::now();
        for sub in ["run", "db", "log"] {
            let d = cfg.dir.join(sub);
            std::fs::create_dir_all(&d).map_err(|e| LabError::io("create dir", &d, e))?;
        }
        let probe = member_paths(&cfg.dir, Db::Nb, 0, cfg.raft).raft;
        if probe.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(LabError::Invalid(format!(
                "central dir {} is too long for unix socket paths",
                cfg.dir.display()
            )));
        }
        // from here on, Drop cleans up whatever was started if a later step fails
        let mut central = Central {
            state: CentralState {
                config: cfg.clone(),
                nb: Vec::new(),
                sb: Vec::new(),
                northd: None,
                ssl,
            },
            stop_on_drop: true,
        };
        let n = if cfg.raft { RAFT_MEMBERS } else { 1 };
        for db in [Db::Nb, Db::Sb] {
            for i in 0..n {
                create_db(&cfg, db, i)?;
                let m = spawn_member(&central.state, db, i, Ports::default())?;
                central.members_mut(db).push(m);
            }
        }
        for m in central.state.nb.iter().chain(&central.state.sb) {
            ctl::ovsdb_wait_connected(&m.remote, m.db.name(), 30)?;
        }
        ctl::nbctl(&central.nb_remote(), &["--no-wait", "init"])?;
        ctl::sbctl(&central.sb_remote(), &["init"])?;
        if cfg.northd {
            central.state.northd = Some(central.spawn_northd()?);
        }
        info!(dir = %cfg.dir.display(), raft = cfg.raft, elapsed_ms = t.elapsed().as_millis() as u64, "central up");
        Ok(central)
    }

    /// Re-attaches to daemons described by `state` (e.g. from a lab manifest). The result
    /// does not stop them on drop.
    pub fn attach(state: CentralState) -> Central {
        Central {
            state,
            stop_on_drop: false,
        }
    }

    /// The state to record (and later [`Central::attach`] to).
    pub fn state(&self) -> &CentralState {
        &self.state
    }

    /// Leave the daemons running when this value is dropped.
    pub fn keep_running(&mut self) {
        self.stop_on_drop = false;
    }

    /// The configuration it was started with.
    pub fn config(&self) -> &CentralConfig {
        &self.state.config
    }

    /// NB remote for clients: `unix:…/ovnnb_db.sock`, or `unix:a,unix:b,unix:c` for Raft.
    pub fn nb_remote(&self) -> String {
        join_remotes(self.state.nb.iter().map(|m| m.remote.as_str()))
    }

    /// SB remote for clients (see [`Central::nb_remote`]).
    pub fn sb_remote(&self) -> String {
        join_remotes(self.state.sb.iter().map(|m| m.remote.as_str()))
    }

    /// NB remote over TCP (`tcp:127.0.0.1:p[,…]`), if started with `tcp: true`.
    pub fn nb_tcp_remote(&self) -> Option<String> {
        tcp_remotes(&self.state.nb)
    }

    /// SB remote over TCP, if started with `tcp: true`.
    pub fn sb_tcp_remote(&self) -> Option<String> {
        tcp_remotes(&self.state.sb)
    }

    /// Every server also listens on plain TCP at `addr` (an IPv4 address of this host; a
    /// random port each), for clients that cannot reach the host's loopback: the nodes of a
    /// `zovn cluster` reach the host's management address. Returns the NB and SB remotes,
    /// `tcp:<addr>:<port>[,…]`. Added at run time (`ovsdb-server/add-remote`): a member
    /// [`Central::restart_member`] restarts no longer listens there.
    pub fn listen_tcp_on(&self, addr: &str) -> Result<(String, String)> {
        let remotes = |members: &[Member]| -> Result<String> {
            let mut v = Vec::new();
            for m in members {
                let from = log_len(&m.daemon.log_file);
                ctl::appctl(
                    &m.unixctl,
                    &["ovsdb-server/add-remote", &format!("ptcp:0:{addr}")],
                )?;
                let port = listening_port(&m.daemon.log_file, from)?;
                v.push(format!("tcp:{addr}:{port}"));
            }
            Ok(v.join(","))
        };
        Ok((remotes(&self.state.nb)?, remotes(&self.state.sb)?))
    }

    /// NB remote over SSL (`ssl:127.0.0.1:p[,…]`), if started with
    /// [`Central::start_with_ssl`].
    pub fn nb_ssl_remote(&self) -> Option<String> {
        ssl_remotes(&self.state.nb)
    }

    /// SB remote over SSL, if started with [`Central::start_with_ssl`].
    pub fn sb_ssl_remote(&self) -> Option<String> {
        ssl_remotes(&self.state.sb)
    }

    /// NB servers (1, or 3 with Raft).
    pub fn nb_members(&self) -> &[Member] {
        &self.state.nb
    }

    /// SB servers (1, or 3 with Raft).
    pub fn sb_members(&self) -> &[Member] {
        &self.state.sb
    }

    /// Members of `db`.
    pub fn members(&self, db: Db) -> &[Member] {
        match db {
            Db::Nb => &self.state.nb,
            Db::Sb => &self.state.sb,
        }
    }

    fn members_mut(&mut self, db: Db) -> &mut Vec<Member> {
        match db {
            Db::Nb => &mut self.state.nb,
            Db::Sb => &mut self.state.sb,
        }
    }

    /// The ovn-northd daemon, if started.
    pub fn northd(&self) -> Option<&DaemonRecord> {
        self.state.northd.as_ref()
    }

    /// Index of the NB Raft leader, waiting (bounded, 20 s) while an election is going on.
    /// Standalone: always 0.
    pub fn nb_leader(&self) -> Result<usize> {
        self.leader(Db::Nb)
    }

    /// Index of the SB Raft leader (see [`Central::nb_leader`]).
    pub fn sb_leader(&self) -> Result<usize> {
        self.leader(Db::Sb)
    }

    /// Index of the Raft leader of `db`: the alive member whose `cluster/status` says
    /// `Role: leader`.
    pub fn leader(&self, db: Db) -> Result<usize> {
        if !self.state.config.raft {
            return Ok(0);
        }
        wait_for(
            &format!("a {} Raft leader", db.name()),
            Duration::from_secs(20),
            Duration::from_millis(50),
            |last| {
                let mut seen = Vec::new();
                for m in self.members(db).iter().filter(|m| m.is_alive()) {
                    match m.cluster_status() {
                        Ok(st) if st.is_leader() => return Ok(Some(m.index)),
                        Ok(st) => {
                            seen.push(format!("{}: {}", m.index, st.role.unwrap_or_default()))
                        }
                        Err(e) => seen.push(format!("{}: {e}", m.index)),
                    }
                }
                *last = Some(seen.join(", "));
                Ok(None)
            },
        )
    }

    /// Sends `sig` to member `idx` of `db`; for SIGKILL/SIGTERM/SIGINT waits until the
    /// process is gone (or a zombie).
    pub fn kill_member(&mut self, db: Db, idx: usize, sig: Signal) -> Result<()> {
        let m = self.member(db, idx)?;
        warn!(db = db.name(), idx, pid = m.pid, %sig, "killing central member");
        signal_daemon(&m.daemon, sig)
    }

    /// Restarts member `idx` of `db` on the same database file and sockets (and TCP/SSL
    /// ports), and waits until it serves the database again (rejoined, for Raft).
    pub fn restart_member(&mut self, db: Db, idx: usize) -> Result<()> {
        let old = self.member(db, idx)?.clone();
        if old.is_alive() {
            stop_daemon(&old.daemon)?;
        }
        let ports = Ports {
            tcp: remote_port(old.tcp_remote.as_deref()),
            ssl: remote_port(old.ssl_remote.as_deref()),
        };
        let m = spawn_member(&self.state, db, idx, ports)?;
        ctl::ovsdb_wait_connected(&m.remote, db.name(), 30)?;
        self.members_mut(db)[idx] = m;
        Ok(())
    }

    fn member(&self, db: Db, idx: usize) -> Result<&Member> {
        self.members(db).get(idx).ok_or_else(|| {
            LabError::Invalid(format!(
                "{} has no member {idx} ({} members)",
                db.name(),
                self.members(db).len()
            ))
        })
    }

    fn spawn_northd(&self) -> Result<DaemonRecord> {
        let dir = &self.state.config.dir;
        let mut spec = DaemonSpec::new(
            "ovn-northd",
            "ovn-northd",
            dir.join("run/ovn-northd.pid"),
            dir.join("log/ovn-northd.log"),
        );
        spec.unixctl = Some(dir.join("run/ovn-northd.ctl"));
        spec.args = vec![
            format!("--ovnnb-db={}", self.nb_remote()),
            format!("--ovnsb-db={}", self.sb_remote()),
        ];
        spec.env = ovn_env(dir);
        start_daemon(&spec)
    }

    /// Every daemon of this central (northd first, the order they are stopped in).
    pub fn daemons(&self) -> Vec<&DaemonRecord> {
        let mut v: Vec<&DaemonRecord> = self.state.northd.iter().collect();
        v.extend(
            self.state
                .nb
                .iter()
                .chain(&self.state.sb)
                .map(|m| &m.daemon),
        );
        v
    }

    /// Stops northd and every server by pid (each confirmed gone).
    pub fn stop(mut self) -> Result<()> {
        self.stop_on_drop = false;
        self.stop_all()
    }

    fn stop_all(&mut self) -> Result<()> {
        let mut first_err = None;
        for d in self.daemons() {
            if let Err(e) = stop_daemon(d) {
                warn!(name = %d.name, error = %e, "stopping central daemon failed");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Central {
    fn drop(&mut self) {
        if self.stop_on_drop {
            let _ = self.stop_all();
        }
    }
}

fn join_remotes<'a>(it: impl Iterator<Item = &'a str>) -> String {
    it.collect::<Vec<_>>().join(",")
}

fn tcp_remotes(members: &[Member]) -> Option<String> {
    members
        .iter()
        .map(|m| m.tcp_remote.as_deref())
        .collect::<Option<Vec<_>>>()
        .map(|v| v.join(","))
}

fn ssl_remotes(members: &[Member]) -> Option<String> {
    members
        .iter()
        .map(|m| m.ssl_remote.as_deref())
        .collect::<Option<Vec<_>>>()
        .map(|v| v.join(","))
}

/// The port of `tcp:127.0.0.1:<port>` / `ssl:127.0.0.1:<port>`.
fn remote_port(remote: Option<&str>) -> Option<u16> {
    remote
        .and_then(|r| r.rsplit(':').next())
        .and_then(|p| p.parse().ok())
}

/// TCP/SSL ports a member listens on; `None` picks a random one (first start).
#[derive(Debug, Default, Clone, Copy)]
struct Ports {
    tcp: Option<u16>,
    ssl: Option<u16>,
}

/// Environment for OVN daemons/tools so nothing touches the system run dirs.
fn ovn_env(dir: &Path) -> Vec<(String, String)> {
    let run = dir.join("run").to_string_lossy().into_owned();
    let db = dir.join("db").to_string_lossy().into_owned();
    let log = dir.join("log").to_string_lossy().into_owned();
    vec![
        ("OVS_RUNDIR".into(), run.clone()),
        ("OVS_DBDIR".into(), db.clone()),
        ("OVS_LOGDIR".into(), log.clone()),
        ("OVN_RUNDIR".into(), run),
        ("OVN_DBDIR".into(), db),
        ("OVN_LOGDIR".into(), log),
    ]
}

/// Creates the database file of member `i` (standalone, create-cluster, or join-cluster).
fn create_db(cfg: &CentralConfig, db: Db, i: usize) -> Result<()> {
    let p = member_paths(&cfg.dir, db, i, cfg.raft);
    if p.db_file.exists() {
        std::fs::remove_file(&p.db_file)
            .map_err(|e| LabError::io("remove old db", &p.db_file, e))?;
    }
    let raft_addr = |p: &MemberPaths| format!("unix:{}", p.raft.display());
    match (cfg.raft, i) {
        (false, _) => ctl::ovsdb_create(&p.db_file, db.schema()),
        (true, 0) => ctl::ovsdb_create_cluster(&p.db_file, db.schema(), &raft_addr(&p)),
        (true, _) => {
            let first = member_paths(&cfg.dir, db, 0, true);
            ctl::ovsdb_join_cluster(&p.db_file, db.name(), &raft_addr(&p), &raft_addr(&first))
        }
    }
}

/// Starts the ovsdb-server of member `i` on its existing database file.
///
/// A random TCP port is read back from the "listening on port" log line. Both `ptcp:0` and
/// `pssl:0` log the same line, so on a first start with SSL the `pssl:` remote is added
/// only after the TCP port is known (`ovsdb-server/add-remote`); a restart passes both
/// known ports on the command line.
fn spawn_member(state: &CentralState, db: Db, i: usize, ports: Ports) -> Result<Member> {
    let cfg = &state.config;
    let p = member_paths(&cfg.dir, db, i, cfg.raft);
    let name = if cfg.raft {
        format!("{}{}", db.stem(), i + 1)
    } else {
        db.stem().to_string()
    };
    let mut spec = DaemonSpec::new(&name, "ovsdb-server", p.pidfile.clone(), p.log.clone());
    spec.unixctl = Some(p.ctl.clone());
    spec.args = vec![
        p.db_file.to_string_lossy().into_owned(),
        format!("--remote=punix:{}", p.sock.display()),
        format!(
            "--remote=db:{},{},connections",
            db.name(),
            db.global_table()
        ),
    ];
    if cfg.tcp {
        spec.args.push(format!(
            "--remote=ptcp:{}:127.0.0.1",
            ports.tcp.unwrap_or(0)
        ));
    }
    if let Some(ssl) = &state.ssl {
        spec.args.extend([
            format!("--private-key={}", ssl.key.display()),
            format!("--certificate={}", ssl.cert.display()),
            format!("--ca-cert={}", ssl.ca.display()),
        ]);
        if let Some(port) = ports.ssl {
            spec.args.push(format!("--remote=pssl:{port}:127.0.0.1"));
        }
    }
    spec.env = ovn_env(&cfg.dir);
    let tcp_from = log_len(&p.log);
    let daemon = start_daemon(&spec)?;
    // from here on, a failure must not leave the new daemon running
    let ports = (|| -> Result<(Option<u16>, Option<u16>)> {
        let tcp = match (cfg.tcp, ports.tcp) {
            (false, _) => None,
            (true, Some(port)) => Some(port),
            (true, None) => Some(listening_port(&p.log, tcp_from)?),
        };
        let ssl = match (&state.ssl, ports.ssl) {
            (None, _) => None,
            (Some(_), Some(port)) => Some(port),
            (Some(_), None) => {
                let from = log_len(&p.log);
                ctl::appctl(&p.ctl, &["ovsdb-server/add-remote", "pssl:0:127.0.0.1"])?;
                Some(listening_port(&p.log, from)?)
            }
        };
        Ok((tcp, ssl))
    })();
    let (tcp_port, ssl_port) = match ports {
        Ok(v) => v,
        Err(e) => {
            let _ = stop_daemon(&daemon);
            return Err(e);
        }
    };
    Ok(Member {
        db,
        index: i,
        remote: format!("unix:{}", p.sock.display()),
        tcp_remote: tcp_port.map(|port| format!("tcp:127.0.0.1:{port}")),
        ssl_remote: ssl_port.map(|port| format!("ssl:127.0.0.1:{port}")),
        raft_remote: cfg.raft.then(|| format!("unix:{}", p.raft.display())),
        pid: daemon.pid,
        unixctl: p.ctl,
        db_file: p.db_file,
        daemon,
    })
}

fn log_len(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

/// The port from the "listening on port N" line ovsdb-server logs for `ptcp:0:…` (and
/// `pssl:0:…`), looking
/// only at what was appended after byte `from`.
fn listening_port(log: &Path, from: u64) -> Result<u16> {
    wait_for(
        &format!("the listening port in {}", log.display()),
        Duration::from_secs(5),
        Duration::from_millis(20),
        |_| {
            let text =
                std::fs::read_to_string(log).map_err(|e| LabError::io("read log", log, e))?;
            let new = text.get(from as usize..).unwrap_or("");
            Ok(parse_listening_port(new))
        },
    )
}

/// Parses `…|socket_util|INFO|0:127.0.0.1: listening on port 38361`.
pub fn parse_listening_port(log: &str) -> Option<u16> {
    log.lines()
        .filter_map(|l| l.split("listening on port ").nth(1))
        .filter_map(|p| p.trim().parse().ok())
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listening_port() {
        let log = "2026-11-26T01:16:05.872Z|00001|vlog|INFO|opened log file /tmp/nb.log\n\
                   2026-11-26T01:16:05.875Z|00002|socket_util|INFO|0:127.0.0.1: listening on port 38361\n";
        assert_eq!(parse_listening_port(log), Some(38361));
        assert_eq!(parse_listening_port("nothing"), None);
    }

    #[test]
    fn remote_port_of_tcp_and_ssl_remotes() {
        assert_eq!(remote_port(Some("tcp:127.0.0.1:6641")), Some(6641));
        assert_eq!(remote_port(Some("ssl:127.0.0.1:6643")), Some(6643));
        assert_eq!(remote_port(Some("unix:/x/nb.sock")), None);
        assert_eq!(remote_port(None), None);
    }

    #[test]
    fn raft_member_paths_are_distinct() {
        let a = member_paths(Path::new("/x"), Db::Nb, 0, true);
        let b = member_paths(Path::new("/x"), Db::Nb, 1, true);
        let s = member_paths(Path::new("/x"), Db::Sb, 0, false);
        assert_ne!(a.sock, b.sock);
        assert_eq!(a.raft, Path::new("/x/run/ovnnb_db1.raft"));
        assert_eq!(s.sock, Path::new("/x/run/ovnsb_db.sock"));
    }
}
