//! The OVS/OVN command-line tools the lab drives (`ovsdb-tool`, `ovsdb-client`,
//! `ovs-appctl`, `ovs-vsctl`, `ovn-nbctl`, `ovn-sbctl`). Kept in one module so these calls
//! can be replaced by the project's own OVSDB client later.

use std::path::Path;

use crate::error::Result;
use crate::process::run_args;

/// `ovsdb-tool create DB SCHEMA`.
pub fn ovsdb_create(db: &Path, schema: &str) -> Result<()> {
    run_args("ovsdb-tool", ["create", &os(db), schema]).map(drop)
}

/// `ovsdb-tool create-cluster DB SCHEMA LOCAL` (first Raft member).
pub fn ovsdb_create_cluster(db: &Path, schema: &str, local: &str) -> Result<()> {
    run_args("ovsdb-tool", ["create-cluster", &os(db), schema, local]).map(drop)
}

/// `ovsdb-tool join-cluster DB NAME LOCAL REMOTE` (further Raft members).
pub fn ovsdb_join_cluster(db: &Path, name: &str, local: &str, remote: &str) -> Result<()> {
    run_args("ovsdb-tool", ["join-cluster", &os(db), name, local, remote]).map(drop)
}

/// `ovsdb-client --timeout=T wait SERVER DB connected`: the database is served (for a
/// Raft member: joined and connected to the cluster).
pub fn ovsdb_wait_connected(server: &str, db: &str, timeout_s: u32) -> Result<()> {
    run_args(
        "ovsdb-client",
        [
            &format!("--timeout={timeout_s}"),
            "wait",
            server,
            db,
            "connected",
        ],
    )
    .map(drop)
}

/// `ovs-appctl -t CTL ARGS...`.
pub fn appctl(ctl: &Path, args: &[&str]) -> Result<String> {
    let mut a = vec!["--timeout=5".to_string(), "-t".into(), os(ctl)];
    a.extend(args.iter().map(|s| s.to_string()));
    run_args("ovs-appctl", a)
}

/// `ovs-vsctl --db=DB ARGS...` (`--timeout` bounded).
pub fn vsctl(db: &str, args: &[&str]) -> Result<String> {
    let mut a = vec![format!("--db={db}"), "--timeout=20".into()];
    a.extend(args.iter().map(|s| s.to_string()));
    run_args("ovs-vsctl", a)
}

/// `ovn-nbctl --db=DB ARGS...` (`--timeout` bounded).
pub fn nbctl(db: &str, args: &[&str]) -> Result<String> {
    let mut a = vec![format!("--db={db}"), "--timeout=30".into()];
    a.extend(args.iter().map(|s| s.to_string()));
    run_args("ovn-nbctl", a)
}

/// `ovn-sbctl --db=DB ARGS...` (`--timeout` bounded).
pub fn sbctl(db: &str, args: &[&str]) -> Result<String> {
    let mut a = vec![format!("--db={db}"), "--timeout=30".into()];
    a.extend(args.iter().map(|s| s.to_string()));
    run_args("ovn-sbctl", a)
}

/// Chassis names registered in the SB that have at least one Encap.
pub fn sb_chassis_with_encap(sb: &str) -> Result<Vec<String>> {
    let out = sbctl(
        sb,
        &[
            "--format=csv",
            "--no-headings",
            "--data=bare",
            "--columns=name,encaps",
            "list",
            "Chassis",
        ],
    )?;
    Ok(parse_chassis_encaps(&out))
}

/// Parses `--format=csv --no-headings --data=bare --columns=name,encaps` output (one
/// `name,encap-uuids` line per chassis); keeps names whose encaps are non-empty.
pub fn parse_chassis_encaps(out: &str) -> Vec<String> {
    let mut names: Vec<String> = out
        .lines()
        .filter_map(|l| l.split_once(','))
        .map(|(n, e)| (n.trim().trim_matches('"'), e.trim().trim_matches('"')))
        .filter(|(n, e)| !n.is_empty() && !e.is_empty())
        .map(|(n, _)| n.to_string())
        .collect();
    names.sort();
    names
}

fn os(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chassis_with_encaps_only() {
        let out = "lab-node3,\"a b\"\nlab-node2,\nlab-node1,6f1c7e1a-0000-4000-8000-000000000001\n";
        assert_eq!(parse_chassis_encaps(out), vec!["lab-node1", "lab-node3"]);
        assert!(parse_chassis_encaps("").is_empty());
    }
}
