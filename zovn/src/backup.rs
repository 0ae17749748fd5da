//! `zovn backup DIR` and `zovn restore DIR` on a cluster (`diag::backup`).

use crate::args::BackupArgs;
use crate::target::cluster_only;

pub fn backup(a: BackupArgs) -> anyhow::Result<()> {
    let k = cluster_only(&a.target, "backup");
    let saved = diag::backup::backup(&k, &a.backup_dir)
        .map_err(|e| anyhow::anyhow!("backup failed: {e}"))?;
    for s in saved {
        println!(
            "{}: {} bytes from {} -> {}",
            s.db.name(),
            s.bytes,
            s.pod,
            s.path.display()
        );
    }
    Ok(())
}

pub fn restore(a: BackupArgs) -> anyhow::Result<()> {
    let k = cluster_only(&a.target, "restore");
    let done = diag::backup::restore(&k, &a.backup_dir)
        .map_err(|e| anyhow::anyhow!("restore failed: {e}"))?;
    for s in done.saved {
        println!(
            "{}: {} restored into {} ({} bytes)",
            s.db.name(),
            s.path.display(),
            s.pod,
            s.bytes
        );
    }
    println!(
        "SB: {} datapath binding(s) pointed at the restored NB rows of their names (tunnel keys kept; ovn-northd was paused meanwhile)",
        done.relinked
    );
    Ok(())
}
