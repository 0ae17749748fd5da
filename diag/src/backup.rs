//! `zovn backup` / `zovn restore` (issue 29): a consistent snapshot of OVN central's NB and
//! SB databases of an installed release, and putting one back into a fresh central.
//!
//! Only through the API server, like the diagnostics: `kubectl exec` into a Ready OVN
//! central container (`nbdb` / `sbdb` of the `central` pod, or of a Raft member) runs
//! `ovsdb-client backup` on the server's own unix socket — one transaction, so the
//! snapshot is consistent, in the standalone file format `ovsdb-tool` reads — and the
//! bytes come back on kubectl's stdout. `restore` streams a snapshot into a file in the
//! container (`kubectl exec -i`; `ovsdb-client restore` seeks in its input) and runs
//! `ovsdb-client restore` on the same socket: the server replaces the database's
//! contents in one transaction (through the Raft leader in `ha`), and every client
//! (northd, the controller, ovn-controllers) follows as with any change. `ovsdb-client
//! restore` gives every restored row a new UUID, so SB's datapath bindings would name NB
//! rows that no longer exist and northd would replace them with new tunnel keys (seen in
//! `cluster_e2e`): every ovn-northd of the release is paused (`ovn-appctl pause`) while NB
//! and SB are replaced and each binding is pointed at the restored NB row of its name
//! (`relink_datapaths`), and resumed afterwards whatever happened.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::kubectl::{Kubectl, KubectlError};
use crate::release::{Release, ReleaseError, ReleasePod};

/// One of OVN central's databases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Nb,
    Sb,
}

impl Db {
    pub const ALL: [Db; 2] = [Db::Nb, Db::Sb];

    /// The schema's database name.
    pub fn name(self) -> &'static str {
        match self {
            Db::Nb => "OVN_Northbound",
            Db::Sb => "OVN_Southbound",
        }
    }

    /// The chart's container of this database (in `central`, `nbdb-N`, `sbdb-N`).
    pub fn container(self) -> &'static str {
        match self {
            Db::Nb => "nbdb",
            Db::Sb => "sbdb",
        }
    }

    /// The server's unix socket in that container.
    pub fn socket(self) -> &'static str {
        match self {
            Db::Nb => "unix:/var/run/ovn/ovnnb_db.sock",
            Db::Sb => "unix:/var/run/ovn/ovnsb_db.sock",
        }
    }

    /// The snapshot's file name in a backup directory.
    pub fn file(self) -> &'static str {
        match self {
            Db::Nb => "ovnnb_db.db",
            Db::Sb => "ovnsb_db.db",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(transparent)]
    Release(#[from] ReleaseError),
    #[error(transparent)]
    Kubectl(#[from] KubectlError),
    #[error(
        "no Ready OVN central container `{0}` in the release (external mode has no central: back up the platform's OVN instead)"
    )]
    NoCentral(&'static str),
    #[error("{db}: what ovsdb-client returned is not a database snapshot: {head:?}")]
    NotASnapshot { db: &'static str, head: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{db}: ovsdb-client restore in {pod}: {stderr}")]
    Restore {
        db: &'static str,
        pod: String,
        stderr: String,
    },
    #[error("relinking SB's datapaths to the restored NB: {0}")]
    Relink(String),
    #[error("ovn-northd in {pod}: {action} failed: {source}")]
    Northd {
        pod: String,
        action: &'static str,
        source: KubectlError,
    },
}

/// The chart's ovn-northd container (in `central`, or beside each NB Raft member).
const NORTHD: &str = "northd";
const NORTHD_CTL: &str = "/var/run/ovn/ovn-northd.ctl";

/// The release's running ovn-northd instances.
fn northds(release: &Release) -> Vec<&ReleasePod> {
    release
        .central()
        .filter(|p| p.container_is_ready(NORTHD))
        .collect()
}

fn northd_ctl(k: &Kubectl, pod: &ReleasePod, action: &'static str) -> Result<(), BackupError> {
    let cmd = ["ovn-appctl", "-t", NORTHD_CTL, action].map(String::from);
    k.exec(&pod.namespace, &pod.name, NORTHD, &cmd)
        .map(|_| ())
        .map_err(|source| BackupError::Northd {
            pod: pod.name.clone(),
            action,
            source,
        })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The Ready central pod that serves `db` (the single `central` pod, or a Raft member of
/// that database; the first Ready one by name: every member holds the committed data).
pub fn server_of(release: &Release, db: Db) -> Result<&ReleasePod, BackupError> {
    let mut pods: Vec<&ReleasePod> = release
        .central()
        .filter(|p| p.component == "central" || p.component == db.container())
        .filter(|p| p.container_is_ready(db.container()))
        .collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    pods.first()
        .copied()
        .ok_or(BackupError::NoCentral(db.container()))
}

/// A snapshot starts with the standalone format's magic line.
pub fn is_snapshot(bytes: &[u8]) -> bool {
    bytes.starts_with(b"OVSDB JSON ")
}

/// What `backup` wrote for one database.
#[derive(Debug, Clone)]
pub struct Saved {
    pub db: Db,
    pub pod: String,
    pub path: PathBuf,
    pub bytes: usize,
}

/// Writes a snapshot of NB and SB into `dir` (created; files replaced atomically).
pub fn backup(k: &Kubectl, dir: &Path) -> Result<Vec<Saved>, BackupError> {
    let release = Release::discover(k)?;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut saved = Vec::new();
    for db in Db::ALL {
        let pod = server_of(&release, db)?;
        let args = Kubectl::exec_args(
            &pod.namespace,
            &pod.name,
            db.container(),
            &[
                "ovsdb-client".into(),
                "backup".into(),
                db.socket().into(),
                db.name().into(),
            ],
        );
        let out = k
            .command()
            .args(&args)
            .output()
            .map_err(KubectlError::Spawn)?;
        if !out.status.success() {
            return Err(KubectlError::Failed {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            }
            .into());
        }
        if !is_snapshot(&out.stdout) {
            return Err(BackupError::NotASnapshot {
                db: db.name(),
                head: String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(80)]).into(),
            });
        }
        let path = dir.join(db.file());
        // a backup is what a restore after a disaster reads: durable once written
        hostio::write_atomic(&path, &out.stdout, 0o600, hostio::Durability::FileAndDir)
            .map_err(io(&path))?;
        saved.push(Saved {
            db,
            pod: pod.name.clone(),
            path,
            bytes: out.stdout.len(),
        });
    }
    Ok(saved)
}

/// What `restore` did: each database replaced, and how many SB datapath bindings were
/// pointed at the restored NB rows (their tunnel keys kept).
#[derive(Debug)]
pub struct Restored {
    pub saved: Vec<Saved>,
    pub relinked: usize,
}

/// Replaces NB and SB with the snapshots in `dir` (as `backup` wrote them).
pub fn restore(k: &Kubectl, dir: &Path) -> Result<Restored, BackupError> {
    // every file is checked before anything is replaced
    let mut snaps = Vec::new();
    for db in Db::ALL {
        let path = dir.join(db.file());
        let bytes = std::fs::read(&path).map_err(io(&path))?;
        if !is_snapshot(&bytes) {
            return Err(BackupError::NotASnapshot {
                db: db.name(),
                head: String::from_utf8_lossy(&bytes[..bytes.len().min(80)]).into(),
            });
        }
        snaps.push((db, path, bytes));
    }
    let release = Release::discover(k)?;
    let mut paused = Vec::new();
    let mut replaced = Ok(Restored {
        saved: Vec::new(),
        relinked: 0,
    });
    for pod in northds(&release) {
        if let Err(e) = northd_ctl(k, pod, "pause") {
            replaced = Err(e);
            break;
        }
        paused.push(pod);
    }
    if replaced.is_ok() {
        replaced = replace(k, &release, snaps).and_then(|saved| {
            let relinked = relink_datapaths(k, &release)?;
            Ok(Restored { saved, relinked })
        });
    }
    // resumed whatever happened; the first error is the one reported
    for pod in paused {
        let resumed = northd_ctl(k, pod, "resume");
        if let (Ok(_), Err(e)) = (&replaced, resumed) {
            replaced = Err(e);
        }
    }
    replaced
}

/// `(uuid, cells...)` rows of `ovn-{nb,sb}ctl --format=json list TABLE` run in `pod`.
fn list_json(
    k: &Kubectl,
    pod: &ReleasePod,
    db: Db,
    table: &str,
    columns: &str,
) -> Result<Vec<(String, Vec<serde_json::Value>)>, BackupError> {
    let ctl = match db {
        Db::Nb => "ovn-nbctl",
        Db::Sb => "ovn-sbctl",
    };
    let cmd = [
        ctl,
        &format!("--db={}", db.socket()),
        "--no-leader-only",
        "--format=json",
        &format!("--columns=_uuid,{columns}"),
        "list",
        table,
    ]
    .map(String::from);
    let out = k.exec(&pod.namespace, &pod.name, db.container(), &cmd)?;
    let v: serde_json::Value = serde_json::from_str(&out)
        .map_err(|e| BackupError::Relink(format!("{ctl} list {table}: {e}")))?;
    Ok(v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|row| {
            let cells = row.as_array()?;
            let uuid = cells.first()?.get(1)?.as_str()?.to_string();
            Some((uuid, cells[1..].to_vec()))
        })
        .collect())
}

/// SB's logical datapaths name their NB row by UUID (`external_ids:logical-switch` /
/// `logical-router`), and `ovsdb-client restore` gives every restored row a new UUID
/// (ovsdb-client(1)). With northd paused, each binding is pointed at the NB row of its
/// `external_ids:name`: the resumed northd then keeps every datapath and its tunnel key
/// instead of replacing them with new ones. Returns how many bindings were relinked.
fn relink_datapaths(k: &Kubectl, release: &Release) -> Result<usize, BackupError> {
    let nb = server_of(release, Db::Nb)?;
    let sb = server_of(release, Db::Sb)?;
    let mut by_name = std::collections::BTreeMap::new();
    for (table, key) in [
        ("Logical_Switch", "logical-switch"),
        ("Logical_Router", "logical-router"),
    ] {
        for (uuid, cells) in list_json(k, nb, Db::Nb, table, "name")? {
            if let Some(name) = cells.first().and_then(|c| c.as_str()) {
                by_name.insert((key, name.to_string()), uuid);
            }
        }
    }
    let mut cmd: Vec<String> = [
        "ovn-sbctl",
        &format!("--db={}", Db::Sb.socket()),
        "--no-leader-only",
    ]
    .map(String::from)
    .to_vec();
    let mut n = 0;
    for (uuid, cells) in list_json(k, sb, Db::Sb, "Datapath_Binding", "external_ids")? {
        let ids: std::collections::BTreeMap<String, String> = cells
            .first()
            .and_then(|m| m.get(1))
            .and_then(|pairs| pairs.as_array())
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p.get(0)?.as_str()?.to_string(),
                    p.get(1)?.as_str()?.to_string(),
                ))
            })
            .collect();
        let Some(name) = ids.get("name") else {
            continue;
        };
        for key in ["logical-switch", "logical-router"] {
            let (Some(old), Some(new)) = (ids.get(key), by_name.get(&(key, name.clone()))) else {
                continue;
            };
            if old != new {
                cmd.extend(
                    [
                        "--",
                        "set",
                        "Datapath_Binding",
                        &uuid,
                        &format!("external_ids:{key}={new}"),
                    ]
                    .map(String::from),
                );
                n += 1;
            }
        }
    }
    if n > 0 {
        k.exec(&sb.namespace, &sb.name, Db::Sb.container(), &cmd)?;
    }
    Ok(n)
}

/// Each database replaced by its snapshot, NB first.
fn replace(
    k: &Kubectl,
    release: &Release,
    snaps: Vec<(Db, PathBuf, Vec<u8>)>,
) -> Result<Vec<Saved>, BackupError> {
    let mut done = Vec::new();
    for (db, path, bytes) in snaps {
        let pod = server_of(release, db)?;
        // ovsdb-client restore seeks in its input: the snapshot goes to a file in the
        // container first (its run directory, an emptyDir), removed afterwards
        let script = format!(
            "f=/var/run/ovn/zovn-restore-$$.db; cat > \"$f\" && ovsdb-client restore {} < \"$f\"; \
             rc=$?; rm -f \"$f\"; exit $rc",
            db.socket()
        );
        let mut args = vec!["exec".to_string(), "-i".into()];
        args.extend(
            Kubectl::exec_args(
                &pod.namespace,
                &pod.name,
                db.container(),
                &["sh".into(), "-c".into(), script],
            )
            .into_iter()
            .skip(1),
        );
        let mut child = k
            .command()
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(KubectlError::Spawn)?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(&bytes).map_err(io(&path))?;
        }
        let out = child.wait_with_output().map_err(io(&path))?;
        if !out.status.success() {
            return Err(BackupError::Restore {
                db: db.name(),
                pod: pod.name.clone(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        done.push(Saved {
            db,
            pod: pod.name.clone(),
            path,
            bytes: bytes.len(),
        });
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_recognised_by_its_magic_line() {
        assert!(is_snapshot(b"OVSDB JSON 123 abc\n{}"));
        assert!(!is_snapshot(b"ovsdb-client: unix:/x: connection failed"));
        assert!(!is_snapshot(b""));
    }

    #[test]
    fn each_database_has_its_container_socket_and_file() {
        assert_eq!(Db::Nb.container(), "nbdb");
        assert_eq!(Db::Sb.socket(), "unix:/var/run/ovn/ovnsb_db.sock");
        assert_ne!(Db::Nb.file(), Db::Sb.file());
    }
}
