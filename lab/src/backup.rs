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
//! (northd, the controller, ovn-controllers) follows as with any change.

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
        let tmp = dir.join(format!(".{}.tmp", db.file()));
        std::fs::write(&tmp, &out.stdout).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        saved.push(Saved {
            db,
            pod: pod.name.clone(),
            path,
            bytes: out.stdout.len(),
        });
    }
    Ok(saved)
}

/// Replaces NB and SB with the snapshots in `dir` (as `backup` wrote them).
pub fn restore(k: &Kubectl, dir: &Path) -> Result<Vec<Saved>, BackupError> {
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
    let mut done = Vec::new();
    for (db, path, bytes) in snaps {
        let pod = server_of(&release, db)?;
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
